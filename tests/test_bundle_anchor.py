"""The bundle's trust anchor (issue 33 item 8).

SHA256SUMS inside a bundle only proves the bundle's files agree with each other: editing a
wheel, requirements.lock and SHA256SUMS together installed with rc 0. `sglforge bundle` now
prints and records (`<archive>.anchor.json`, beside the archive) the archive's sha256 and
SHA256SUMS's, signs the anchor with the configured key (`sign-key`, SGLFORGE_SIGN_KEY,
`--sign-key`), and install.sh checks it when given (`--anchor FILE [--allowed-signers F]`,
`--sha256sums HEX`) and refuses a Python other than the bundle's. Everything runs through the
real `python -m sglforge bundle` and the real install.sh into a fresh venv; the bundle is
treated as hostile input.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.smoke.conftest import make_wheel
from tests.test_bundle import PYTHON, _archive, _bundle, _project

needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _unpack(archive: Path, where: Path) -> Path:
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0]
        tar.extractall(where, filter="data")
    return where / top


def _venv(tmp_path: Path, name: str = "venv", pip: bool = True) -> Path:
    """A fresh venv; one an install must not reach needs no pip (seconds less each)."""
    venv = tmp_path / name
    subprocess.run(
        [sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(venv)], check=True
    )
    return venv / "bin" / "python"


def _install(bundle: Path, python: Path, *options: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_NO_INDEX": "1", "SGLFORGE_USE_UV": "0", "PYTHONNOUSERSITE": "1"}
    return subprocess.run(
        ["sh", str(bundle / "install.sh"), *options, str(python)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _installed(python: Path) -> list[str]:
    code = (
        "import importlib.metadata as m\n"
        "for n in ('sglang', 'tinydep'):\n"
        "    try: print(n, m.version(n))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _keypair(where: Path, name: str = "id") -> tuple[Path, Path]:
    """An ed25519 key and an allowed_signers file that trusts it for bundles."""
    key = where / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
    )
    signers = where / f"{name}.allowed"
    public = (where / f"{name}.pub").read_text().strip()
    signers.write_text(f'sglforge namespaces="sglforge-bundle" {public}\n')
    return key, signers


def _tamper(bundle: Path, tmp_path: Path) -> None:
    """The issue's edit: another tinydep wheel, requirements.lock and SHA256SUMS made to agree
    with it, so that SHA256SUMS alone passes."""
    evil = make_wheel(tmp_path / "evil", "tinydep", "1.0", None, requires_python=">=3")
    old = bundle / "wheels" / "tinydep-1.0-py3-none-any.whl"
    lock = bundle / "requirements.lock"
    lock.write_text(lock.read_text().replace(_sha256(old), _sha256(evil)))
    shutil.copyfile(evil, old)
    sums = "".join(
        f"{_sha256(p)}  {p.relative_to(bundle).as_posix()}\n"
        for p in sorted(bundle.rglob("*"))
        if p.is_file() and p.name != "SHA256SUMS"
    )
    (bundle / "SHA256SUMS").write_text(sums)


def test_bundle_prints_and_records_the_archive_and_sha256sums_digests(tmp_path: Path) -> None:
    root = _project(tmp_path)
    result = _bundle(root, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr
    archive = _archive(root)
    bundle = _unpack(archive, tmp_path / "host")
    sums = _sha256(bundle / "SHA256SUMS")
    assert f"bundle: archive sha256 {_sha256(archive)}  {archive.name}" in result.stdout
    assert f"bundle: SHA256SUMS sha256 {sums}" in result.stdout
    assert "unsigned: no sign-key configured" in result.stdout
    assert result.stdout.splitlines()[-1] == f"bundle: wrote {archive}"
    anchor = json.loads((archive.parent / (archive.name + ".anchor.json")).read_text())
    assert anchor == {
        "kind": "sglforge-bundle-anchor",
        "format": 1,
        "bundle": bundle.name,
        "archive": archive.name,
        "archive_sha256": _sha256(archive),
        "sha256sums_sha256": sums,
        "python": PYTHON,
        "generated_by": "sglforge bundle",
    }
    assert not (archive.parent / (archive.name + ".anchor.json.sig")).exists()


def test_a_coordinated_edit_passes_sha256sums_but_not_the_anchor(tmp_path: Path) -> None:
    root = _project(tmp_path)
    result = _bundle(root, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr
    archive = _archive(root)
    anchor = archive.parent / (archive.name + ".anchor.json")
    printed = result.stdout.split("bundle: SHA256SUMS sha256 ")[1].split()[0]
    bundle = _unpack(archive, tmp_path / "host")
    _tamper(bundle, tmp_path)

    for options in (["--anchor", str(anchor)], ["--sha256sums", printed]):
        python = _venv(tmp_path, f"venv-{options[0].strip('-')}", pip=False)
        run = _install(bundle, python, *options)
        assert run.returncode == 1, run.stdout + run.stderr
        assert "SHA256SUMS OK" in run.stdout  # the files agree with each other ...
        assert "trust anchor refused; nothing installed" in run.stderr  # ... but not the anchor
        assert "this is not the bundle" in run.stderr and "Traceback" not in run.stderr
        assert _installed(python) == []
    # without an anchor the same edit installs, and install.sh says what it could not check
    python = _venv(tmp_path, "venv-none")
    run = _install(bundle, python)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "WARNING: no trust anchor given" in run.stderr

    # the genuine bundle installs with its anchor
    genuine = _unpack(archive, tmp_path / "genuine")
    python = _venv(tmp_path, "venv-genuine")
    run = _install(genuine, python, "--anchor", str(anchor))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trust anchor OK" in run.stdout and "WARNING" not in run.stderr
    assert _installed(python) == ["sglang 0.5.99+sm120.cu130.abcd1234", "tinydep 1.0"]


@needs_keygen
def test_the_configured_key_signs_the_anchor_and_install_sh_verifies_it(tmp_path: Path) -> None:
    root = _project(tmp_path)
    key, signers = _keypair(tmp_path)
    env_key = {"SGLFORGE_SIGN_KEY": str(key)}
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), "bundle"]
        + ["--wheelhouse", str(root / "wheelhouse")],
        capture_output=True,
        text=True,
        env={**os.environ, **env_key},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    archive = _archive(root)
    anchor = archive.parent / (archive.name + ".anchor.json")
    assert "signed: " + anchor.name + ".sig, namespace sglforge-bundle" in result.stdout
    # the signature is ssh-keygen's own, for the bundle namespace only
    verify = ["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "sglforge", "-n"]
    sig = ["-s", str(anchor) + ".sig"]
    ok = subprocess.run(verify + ["sglforge-bundle", *sig], input=anchor.read_bytes(), check=False)
    assert ok.returncode == 0
    bundle = _unpack(archive, tmp_path / "host")
    signed = ["--anchor", str(anchor), "--allowed-signers", str(signers)]

    python = _venv(tmp_path)
    run = _install(bundle, python, *signed)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"signed by 'sglforge', verified with {signers}" in run.stdout

    # an attacker who edits the bundle and rewrites the anchor to match cannot re-sign it
    _tamper(bundle, tmp_path)
    forged = json.loads(anchor.read_text())
    forged["sha256sums_sha256"] = _sha256(bundle / "SHA256SUMS")
    anchor.write_text(json.dumps(forged, indent=2, sort_keys=True) + "\n")
    fresh = _venv(tmp_path, "venv-forged", pip=False)
    run = _install(bundle, fresh, *signed)
    assert run.returncode == 1 and "does not verify for 'sglforge'" in run.stderr, run.stderr
    assert _installed(fresh) == []
    # nor sign it with a key the operator does not trust
    other, _ = _keypair(tmp_path, "other")
    subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(other), "-n", "sglforge-bundle", str(anchor)],
        check=True,
    )
    run = _install(bundle, fresh, *signed)
    assert run.returncode == 1 and "does not verify" in run.stderr, run.stderr
    # and the trusted key's signature for receipts is not one for bundles
    subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", "sglforge-receipt", str(anchor)],
        check=True,
    )
    run = _install(bundle, fresh, *signed)
    assert run.returncode == 1 and "namespace sglforge-bundle" in run.stderr, run.stderr
    assert _installed(fresh) == []


def test_install_sh_refuses_a_python_other_than_the_bundles(tmp_path: Path) -> None:
    root = _project(tmp_path)
    other = "3.12" if PYTHON != "3.12" else "3.11"  # the issue: a 3.12 bundle, a 3.11 venv
    (root / "lockfiles" / "toolchain.toml").write_text(f'cuda = "13.0"\npython = "{other}"\n')
    result = _bundle(root, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr
    assert f"for Python {other})" in result.stdout
    bundle = _unpack(_archive(root), tmp_path / "host")
    python = _venv(tmp_path, pip=False)
    run = _install(bundle, python)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "install.sh: wrong Python; nothing installed" in run.stderr
    assert f"this bundle was built for Python {other}" in run.stderr
    assert f"is Python {PYTHON}" in run.stderr and f"python{other} -m venv" in run.stderr
    assert _installed(python) == []


def test_bad_signing_key_and_bad_anchor_input_are_clear_errors(tmp_path: Path) -> None:
    root = _project(tmp_path)
    missing = tmp_path / "no-such-key"
    config = tmp_path / "config.toml"
    config.write_text(f'sign-key = "{missing}"\n')
    env = {**os.environ, "SGLFORGE_CONFIG": str(config)}
    env.pop("SGLFORGE_SIGN_KEY", None)
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), "bundle"]
        + ["--wheelhouse", str(root / "wheelhouse")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"sign-key (config: {config}): the signing key {missing} is missing" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (root / "dist").exists() or not list((root / "dist").iterdir())  # nothing written

    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    archive = _archive(root)
    bundle = _unpack(archive, tmp_path / "host")
    python = _venv(tmp_path, pip=False)
    junk = tmp_path / "junk.json"
    cases = {
        "not JSON": (["--anchor", str(junk)], "not JSON"),
        "no key": (["--anchor", str(junk)], "key 'sha256sums_sha256' missing or not a string"),
        "missing": (["--anchor", str(tmp_path / "nope.json")], "cannot read it"),
        "sums": (["--sha256sums", "abc"], "--sha256sums 'abc': not 64 hex digits"),
        "signers alone": (["--allowed-signers", str(junk)], "--allowed-signers needs --anchor"),
        "option": (["--anchr", "x"], "unknown option --anchr"),
    }
    for case, (options, message) in cases.items():
        junk.write_text("{" if case == "not JSON" else '{"kind": "sglforge-bundle-anchor"}')
        run = _install(bundle, python, *options)
        assert run.returncode in (1, 2), (case, run.stdout + run.stderr)
        assert message in run.stderr, (case, run.stderr)
        assert "Traceback" not in run.stderr, case
    assert _installed(python) == []
