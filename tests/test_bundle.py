"""`sglforge bundle`: a fixture stack (tiny sglforge-built wheels + a third-party "runtime"
wheel in a wheelhouse) bundled, unpacked, and installed with its install.sh into a fresh venv
with no index (PIP_NO_INDEX=1), then checked with importlib.metadata there."""

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

from tests.smoke.conftest import build_wheelset, make_wheel

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "lockfiles").mkdir(parents=True)
    (root / "lockfiles" / "upstreams.toml").write_text("")
    # the Python the bundle is for: this one, so that a venv of it installs the bundle
    (root / "lockfiles" / "toolchain.toml").write_text(f'cuda = "13.0"\npython = "{PYTHON}"\n')
    (root / "patches" / "sglang").mkdir(parents=True)
    (root / "patches" / "sglang" / "series").write_text("0001-x.patch\n")
    (root / "patches" / "sglang" / "0001-x.patch").write_text("--- a\n+++ b\n")
    build_wheelset(root)  # wheels/ (sglang needs tinydep==1.0), wheelhouse/tinydep, wheels.lock
    return root


def _bundle(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), "bundle", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _archive(root: Path) -> Path:
    (archive,) = (root / "dist").glob("*.tar.gz")
    return archive


def test_bundle_installs_offline_into_a_fresh_venv(tmp_path: Path) -> None:
    root = _project(tmp_path)
    result = _bundle(root, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr
    archive = _archive(root)
    assert archive.name.startswith("sglforge-stack-0.5.99+sm120.cu130.abcd1234-")
    assert sorted(p.name for p in (root / "dist").iterdir()) == [
        archive.name,
        archive.name + ".anchor.json",
    ]  # no temp left
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        top = names[0]
        assert names == sorted(names)
        assert {n[len(top) + 1 :] for n in names if tar.getmember(n).isfile()} == {
            "SHA256SUMS",
            "install.sh",
            "requirements.lock",
            "sbom.cdx.json",
            "sglforge-stack.json",
            "wheels/sglang-0.5.99+sm120.cu130.abcd1234-py3-none-any.whl",
            "wheels/sglang_kernel-0.4.7+sm120.cu130.abcd1234-py3-none-any.whl",
            "wheels/tinydep-1.0-py3-none-any.whl",
        }
        assert tar.getmember(f"{top}/install.sh").mode == 0o755
        tar.extractall(tmp_path / "host", filter="data")
    bundle = tmp_path / "host" / top
    stack = json.loads((bundle / "sglforge-stack.json").read_text())
    assert [w["name"] for w in stack["wheels"]] == ["sglang", "sglang-kernel"]
    assert stack["runtime"][0]["name"] == "tinydep"
    stack_sbom = json.loads((bundle / "sbom.cdx.json").read_text())
    tinydep = bundle / "wheels" / "tinydep-1.0-py3-none-any.whl"
    [runtime] = [c for c in stack_sbom["components"] if c["bom-ref"] == "runtime:tinydep"]
    assert runtime["version"] == "1.0" and runtime["hashes"] == [
        {"alg": "SHA-256", "content": hashlib.sha256(tinydep.read_bytes()).hexdigest()}
    ]
    assert stack["patches"]["sglang"][0]["file"] == "sglang/0001-x.patch"
    lock = (bundle / "requirements.lock").read_text()
    assert "tinydep==1.0 --hash=sha256:" in lock and "sglang==0.5.99" in lock

    venv = tmp_path / "clean-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "SGLFORGE_USE_UV": "0",
        "PIP_FIND_LINKS": str(tmp_path / "decoy-links"),
        "PYTHONNOUSERSITE": "1",
    }
    run = subprocess.run(
        ["sh", str(bundle / "install.sh"), str(python)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SHA256SUMS OK (7 files)" in run.stdout
    assert "decoy-links" not in run.stdout + run.stderr  # only the bundle's wheels/
    code = (
        "import importlib.metadata as m; "
        "print(*(m.version(n) for n in ('sglang', 'sglang-kernel', 'tinydep')))"
    )
    versions = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert versions == ["0.5.99+sm120.cu130.abcd1234", "0.4.7+sm120.cu130.abcd1234", "1.0"]


def test_tampered_bundle_fails_the_sha256sums_check_before_installing(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    with tarfile.open(_archive(root)) as tar:
        top = tar.getnames()[0]
        tar.extractall(tmp_path / "host", filter="data")
    bundle = tmp_path / "host" / top
    wheel = bundle / "wheels" / "tinydep-1.0-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes() + b"x")
    marker = tmp_path / "pip-ran"
    fake = tmp_path / "fakepython"  # a python that records whether pip was reached
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then touch {marker}; fi\nexec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    run = subprocess.run(
        ["sh", str(bundle / "install.sh"), str(fake)],
        capture_output=True,
        text=True,
        env={**os.environ, "SGLFORGE_USE_UV": "0"},
        check=False,
    )
    assert run.returncode != 0
    assert "SHA256SUMS check failed" in run.stderr
    assert "wheels/tinydep-1.0-py3-none-any.whl: sha256" in run.stderr
    assert not marker.exists()


def test_bundle_is_deterministic(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    first = _archive(root).read_bytes()
    os.utime(root / "wheels" / "manifest.json", (1, 1))
    for path in (root / "wheels").glob("*.whl"):
        os.utime(path, (12345, 12345))
    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    assert (
        hashlib.sha256(_archive(root).read_bytes()).hexdigest() == hashlib.sha256(first).hexdigest()
    )
    with tarfile.open(_archive(root)) as tar:
        assert {m.mtime for m in tar.getmembers()} == {315532800}
        assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}


def test_missing_runtime_wheel_is_an_error_naming_the_requirement(tmp_path: Path) -> None:
    root = _project(tmp_path)
    empty = tmp_path / "empty-house"
    empty.mkdir()
    result = _bundle(root, "--wheelhouse", str(empty))
    assert result.returncode == 2
    assert "tinydep==1.0" in result.stderr and "no wheel for it" in result.stderr
    assert not (root / "dist").exists() or not list((root / "dist").iterdir())


def test_runtime_wheel_with_another_hash_is_refused(tmp_path: Path) -> None:
    root = _project(tmp_path)
    other = tmp_path / "other-house"
    make_wheel(other, "tinydep", "1.0", None, requires=["something-else"])  # same name, new bytes
    result = _bundle(root, "--wheelhouse", str(other))
    assert result.returncode == 2
    assert "tinydep==1.0" in result.stderr
    assert "none with a sha256 the lock allows" in result.stderr


def test_stack_version_and_name_options(tmp_path: Path) -> None:
    root = _project(tmp_path)
    result = _bundle(
        root,
        "--wheelhouse",
        str(root / "wheelhouse"),
        "--name",
        "h200",
        "--stack-version",
        "2026.11",
        "--out",
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "h200-2026.11.tar.gz").is_file()
    bad = _bundle(root, "--wheelhouse", str(root / "wheelhouse"), "--stack-version", "../x")
    assert bad.returncode == 2 and "cannot be part of a file name" in bad.stderr


# ---------------------------------------------------------------------------------------------
# install.sh refuses partial, unlisted and malformed SHA256SUMS (issue 21 item 8, 7)


@pytest.fixture(scope="module")
def unpacked_bundle(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("bundle")
    root = _project(tmp)
    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    with tarfile.open(_archive(root)) as tar:
        top = tar.getnames()[0]
        tar.extractall(tmp / "host", filter="data")
    return tmp / "host" / top


def _run_install(bundle: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, bool]:
    """Run the bundle's real install.sh with a python that records whether pip was reached."""
    marker = tmp_path / "pip-ran"
    fake = tmp_path / "fakepython"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then touch {marker}; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    run = subprocess.run(
        ["sh", str(bundle / "install.sh"), str(fake)],
        capture_output=True,
        text=True,
        env={**os.environ, "SGLFORGE_USE_UV": "0"},
        check=False,
    )
    return run, marker.exists()


def _edit_sums(bundle: Path, edit) -> None:
    sums = bundle / "SHA256SUMS"
    edited = edit(sums.read_text().splitlines(keepends=True))
    sums.write_text(edited if isinstance(edited, str) else "".join(edited))


def LOCK_LINE(lines: list[str]) -> str:
    return "".join(line for line in lines if not line.endswith("  requirements.lock\n"))


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "one line kept",
        "lock line removed and lock changed",
        "unlisted wheel",
        "malformed line",
        "duplicate line",
        "dotdot name",
        "not utf-8",
        "listed file missing",
    ],
)
def test_install_sh_refuses_partial_unlisted_or_malformed_sums(unpacked_bundle, tmp_path, case):
    bundle = tmp_path / "b"
    shutil.copytree(unpacked_bundle, bundle, symlinks=True)
    wheel = "wheels/tinydep-1.0-py3-none-any.whl"
    expect = {
        "empty": "requirements.lock: not listed in SHA256SUMS",
        "one line kept": "requirements.lock: not listed in SHA256SUMS",
        "lock line removed and lock changed": "requirements.lock: not listed in SHA256SUMS",
        "unlisted wheel": "wheels/evil-6.6.6-py3-none-any.whl: not listed in SHA256SUMS",
        "malformed line": "SHA256SUMS line 2: not '<64 hex digits>  <file>'",
        "duplicate line": f"{wheel} is listed twice",
        "dotdot name": "refusing the file name '../outside'",
        "not utf-8": "SHA256SUMS: cannot read it",
        "listed file missing": f"{wheel}: listed in SHA256SUMS but missing",
    }[case]
    if case == "empty":
        _edit_sums(bundle, lambda lines: "")
    elif case == "one line kept":
        _edit_sums(bundle, lambda lines: lines[0])
    elif case == "lock line removed and lock changed":
        _edit_sums(bundle, LOCK_LINE)
        with open(bundle / "requirements.lock", "a") as lock:
            lock.write("evil==6.6.6 --hash=sha256:" + "0" * 64 + "\n")
    elif case == "unlisted wheel":
        shutil.copy(bundle / wheel, bundle / "wheels/evil-6.6.6-py3-none-any.whl")
    elif case == "malformed line":
        _edit_sums(bundle, lambda lines: lines[:1] + ["deadbeef requirements.lock\n"] + lines[1:])
    elif case == "duplicate line":
        _edit_sums(bundle, lambda lines: lines + [line for line in lines if wheel in line])
    elif case == "dotdot name":
        _edit_sums(bundle, lambda lines: lines + ["0" * 64 + "  ../outside\n"])
    elif case == "not utf-8":
        (bundle / "SHA256SUMS").write_bytes((bundle / "SHA256SUMS").read_bytes() + b"\xff\n")
    elif case == "listed file missing":
        (bundle / wheel).unlink()
    run, pip_ran = _run_install(bundle, tmp_path)
    assert run.returncode != 0, run.stdout
    assert "SHA256SUMS check failed; nothing installed" in run.stderr
    assert expect in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert not pip_ran


def test_install_sh_accepts_the_bundle_as_written(unpacked_bundle, tmp_path):
    run, pip_ran = _run_install(unpacked_bundle, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "SHA256SUMS OK (7 files): every file of the bundle listed" in run.stdout
    assert pip_ran


# ---------------------------------------------------------------------------------------------
# --name stays inside --out; a SIGKILLed run's temporary is removed by the next (issue 21, low)


def killed_writer_temp(target: Path, size: int = 1 << 20) -> Path:
    """What a SIGKILL in the middle of writing `target` leaves: run base.fs.atomic_output in a
    child that kills itself mid-write; returns the temporary it left."""
    code = (
        "import os, signal, sys; from pathlib import Path; "
        "from sglforge.base.fs import atomic_output\n"
        "with atomic_output(Path(sys.argv[1])) as out:\n"
        f"    out.write(b'x' * {size}); out.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.run([sys.executable, "-c", code, str(target)], env=env, check=False)
    assert proc.returncode == -9
    (left,) = [p for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.")]
    assert left.stat().st_size == size
    return left


def test_bundle_name_cannot_leave_out_dir(tmp_path: Path) -> None:
    root = _project(tmp_path)
    out = tmp_path / "deep" / "out"
    for name in ("../../x", "../escape", "a/b", ".hidden", "x\ny"):
        result = _bundle(
            root, "--wheelhouse", str(root / "wheelhouse"), f"--name={name}", "--out", str(out)
        )
        assert result.returncode == 2, (name, result.stdout)
        assert f"--name {name!r} cannot be part of a file name" in result.stderr
    assert not list(tmp_path.rglob("*.tar.gz"))


def test_rebundling_removes_the_temporary_a_killed_bundle_left(tmp_path: Path) -> None:
    root = _project(tmp_path)
    dist = root / "dist"
    dist.mkdir()
    left = killed_writer_temp(dist / "sglforge-stack-1.0.tar.gz")
    mine = dist / ".notes.tmp"  # not sglforge's pattern: never touched
    mine.write_text("keep me\n")
    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    assert not left.exists()
    archive = _archive(root).name
    assert sorted(p.name for p in dist.iterdir()) == [
        ".notes.tmp",
        archive,
        archive + ".anchor.json",
    ]
