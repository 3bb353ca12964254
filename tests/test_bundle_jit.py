"""Issue 34 item 2: `sglforge bundle --jit-cache` carries a JIT-cache artifact and the bundle's
real install.sh (sh, real tar, real pip into a fresh venv) checks its key against the host and
unpacks it: a matching host gets the cache and an env file; a mismatch (another GPU, via a
stand-in nvidia-smi on PATH) warns and unpacks nothing; a tampered artifact is refused before
anything is installed and nothing is left half-unpacked; the bundle's bytes stay reproducible."""

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

from sglforge.smoke import dgwarmup, jitcache, jithost
from sglforge.smoke.jitcache import JitKey
from tests.smoke.test_jitcache import CUBIN, _retar, _tampered_content, make_caches
from tests.test_bundle import _archive, _bundle, _project

SMI = "0, NVIDIA H200, {cap}, 580.159.04, 00000000:17:00.0\n"


def _fake_bin(where: Path, cap: str = "9.0") -> Path:
    """nvidia-smi and nvcc stand-ins: the host facts install.sh reads."""
    where.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("nvidia-smi", SMI.format(cap=cap)),
        ("nvcc", "Cuda compilation tools, release 13.0, V13.0.88\n"),
    ):
        tool = where / name
        tool.write_text(f"#!/bin/sh\ncat <<'OUT'\n{text}OUT\n")
        tool.chmod(0o755)
    return where


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> dict:
    """A project, and a venv with its stack installed by a plain bundle's install.sh: the
    serving host whose key the artifacts below are made for."""
    tmp = tmp_path_factory.mktemp("jithost")
    root = _project(tmp)
    assert _bundle(root, "--wheelhouse", str(root / "wheelhouse")).returncode == 0
    top = _extract(_archive(root), tmp / "plain")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    run = _install(top, python, tmp / "bin-plain", "--jit-root", str(tmp / "unused"))
    assert run.returncode == 0, run.stderr
    assert "this bundle carries no JIT cache" in run.stderr and not (tmp / "unused").exists()
    shutil.rmtree(root / "dist")
    key = JitKey(
        wheels_lock=jitcache.file_sha256(root / "lockfiles" / "wheels.lock"),
        compute_capability="9.0",
        cuda_major="13",
        driver_major="580",
        server_args=("prefill: --tp 1",),
        model_config="b" * 64,
        stack_path=jitcache.stack_path(python, {}),
    )
    assert f"sglang={venv}/lib/" in key.stack_path  # the venv's stack, found
    return {"root": root, "python": python, "key": key, "tmp": tmp}


def _extract(archive: Path, where: Path) -> Path:
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0]
        tar.extractall(where, filter="data")
    return where / top


def _install(bundle: Path, python: Path, bin_dir: Path, *args: str, cap: str = "9.0"):
    env = {
        **os.environ,
        "PATH": f"{_fake_bin(bin_dir, cap)}{os.pathsep}{os.environ['PATH']}",
        "PIP_NO_INDEX": "1",
        "SGLFORGE_USE_UV": "0",
        "PYTHONNOUSERSITE": "1",
    }
    return subprocess.run(
        ["sh", str(bundle / "install.sh"), *args, str(python)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _artifact(tmp: Path, key: JitKey, name: str = "caches") -> Path:
    """An artifact as warm writes it, with a DeepGEMM warmup marker (which install.sh's shipped
    code must read too)."""
    make_caches(tmp / name)
    marker = dgwarmup.marker(key.digest, [("prefill", {}, "")])
    return jitcache.pack(tmp / name, key, tmp / f"{name}-out", marker).path


def _bundled(host: dict, tmp: Path, *artifacts: Path, out: str = "dist") -> Path:
    root = host["root"]
    args = ["--wheelhouse", str(root / "wheelhouse"), "--out", str(tmp / out)]
    for artifact in artifacts:
        args += ["--jit-cache", str(artifact)]
    result = _bundle(root, *args)
    assert result.returncode == 0, result.stderr
    (archive,) = (tmp / out).glob("*.tar.gz")
    return archive


def _env_exports(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("export ")]
    return dict(line[len("export ") :].split("=", 1) for line in lines)


def test_a_matching_host_gets_the_cache_and_an_env_file(host, tmp_path: Path) -> None:
    key = host["key"]
    archive = _bundled(host, tmp_path, _artifact(tmp_path, key))
    bundle = _extract(archive, tmp_path / "host")
    member = f"jit/cache/jitcache-{key.short}.tar.gz"
    sums = (bundle / "SHA256SUMS").read_text()
    assert f"  {member}\n" in sums and "  jit/sglforge/smoke/jithost.py\n" in sums
    anchor = json.loads(Path(f"{archive}.anchor.json").read_text())  # the anchor covers it
    assert anchor["sha256sums_sha256"] == hashlib.sha256(sums.encode()).hexdigest()
    stack = json.loads((bundle / "sglforge-stack.json").read_text())
    assert stack["jit_caches"]["artifacts"][0]["key_digest"] == key.digest
    root = tmp_path / "jit-root"
    for _attempt in (1, 2):  # a second install replaces the root; no bytecode in the bundle
        run = _install(bundle, host["python"], tmp_path / "bin", "--jit-root", str(root))
        assert run.returncode == 0, run.stdout + run.stderr
        assert "install.sh: JIT cache OK: 1 artifact(s)" in run.stdout
        assert f"JIT cache {key.short} matches this host" in run.stdout, run.stdout
        assert "WARNING: no JIT cache" not in run.stderr
    assert not list(bundle.rglob("__pycache__"))
    assert (root / "triton/ab12/kernel.cubin").read_bytes() == b"\x7fELF cubin"
    assert (root / jitcache.ROOT_MARKER).read_text().strip() == key.digest
    env_file = host["python"].parent.parent / jithost.ENV_FILE  # <venv>/sglforge-jit.env
    exports = _env_exports(env_file)
    assert exports["TRITON_CACHE_DIR"] == str(root / "triton")
    assert exports["FLASHINFER_WORKSPACE_BASE"] == str(root / "flashinfer")
    assert set(exports) == {v for names in jitcache.CACHE_ROOTS.values() for v in names}
    # the env file is for sh: sourcing it gives a server these variables
    shown = subprocess.run(
        ["sh", "-c", f'. "{env_file}" && printf %s "$TVM_FFI_CACHE_DIR"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == str(root / "tvm_ffi")
    assert "server_args: ['prefill: --tp 1']" in env_file.read_text()


def test_a_mismatched_host_is_warned_and_nothing_is_unpacked(host, tmp_path: Path) -> None:
    archive = _bundled(host, tmp_path, _artifact(tmp_path, host["key"]))
    bundle = _extract(archive, tmp_path / "host")
    root, env_file = tmp_path / "jit-root", tmp_path / "jit.env"
    env_file.write_text("export TRITON_CACHE_DIR=/stale\n")  # an earlier install's
    args = ("--jit-root", str(root), "--jit-env", str(env_file))
    run = _install(bundle, host["python"], tmp_path / "bin", *args, cap="12.0")
    assert run.returncode == 0, run.stdout + run.stderr  # the install still succeeds
    assert "WARNING: no JIT cache of this bundle matches this host" in run.stderr
    assert "compute_capability: artifact '9.0', here '12.0'" in run.stderr, run.stderr
    assert "nothing unpacked" in run.stderr and "Traceback" not in run.stderr
    assert not root.exists()
    assert _env_exports(env_file) == {}  # sourcing it points nothing at a cache
    # no GPU facts at all (no nvidia-smi): never a match
    no_smi = tmp_path / "bin-nosmi"
    _fake_bin(no_smi)
    (no_smi / "nvidia-smi").unlink()
    env = {**os.environ, "PATH": f"{no_smi}:/usr/bin:/bin", "SGLFORGE_USE_UV": "0"}
    run = subprocess.run(
        ["sh", str(bundle / "install.sh"), *args, str(host["python"])],
        capture_output=True,
        text=True,
        env={**env, "PIP_NO_INDEX": "1"},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "(nvidia-smi not found on PATH)" in run.stderr and not root.exists()


def test_a_tampered_artifact_is_refused_before_installing(host, tmp_path: Path) -> None:
    archive = _bundled(host, tmp_path, _artifact(tmp_path, host["key"]))
    bundle = _extract(archive, tmp_path / "host")
    member = bundle / f"jit/cache/jitcache-{host['key'].short}.tar.gz"
    _retar(member, member, _tampered_content)  # same sizes, other bytes in one kernel
    marker = tmp_path / "pip-ran"
    fake = tmp_path / "fakepython"  # the venv's python, recording whether pip was reached
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then touch {marker}; exit 0; fi\n'
        f'exec {host["python"]} "$@"\n'
    )
    fake.chmod(0o755)
    root = tmp_path / "roots" / "jit"
    run = _install(bundle, fake, tmp_path / "bin", "--jit-root", str(root))
    assert run.returncode != 0 and not marker.exists()  # SHA256SUMS already says so
    assert f"jit/cache/jitcache-{host['key'].short}.tar.gz: sha256" in run.stderr
    # whoever edits SHA256SUMS too (no anchor given) meets the artifact's own manifest
    sums = bundle / "SHA256SUMS"
    rel = member.relative_to(bundle).as_posix()
    sums.write_text(
        "".join(
            f"{jitcache.file_sha256(member)}  {rel}\n" if line.endswith(f"  {rel}\n") else line
            for line in sums.read_text().splitlines(keepends=True)
        )
    )
    run = _install(bundle, fake, tmp_path / "bin", "--jit-root", str(root))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "install.sh: JIT cache refused; nothing installed:" in run.stderr
    assert f"member '{CUBIN}' has sha256" in run.stderr and "Traceback" not in run.stderr
    assert not marker.exists() and not root.exists() and not root.parent.exists()


def test_unpacking_on_the_host_is_atomic(host, tmp_path: Path, monkeypatch, capsys) -> None:
    """Past install.sh's check (an artifact changed after it): refused, no root, no staging
    directory, no env file."""
    archive = _bundled(host, tmp_path, _artifact(tmp_path, host["key"]))
    bundle = _extract(archive, tmp_path / "host")
    member = bundle / f"jit/cache/jitcache-{host['key'].short}.tar.gz"
    _retar(member, member, _tampered_content)
    monkeypatch.setenv("PATH", f"{_fake_bin(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sys, "executable", str(host["python"]))  # the stack's interpreter
    root, env_file = tmp_path / "roots" / "jit", tmp_path / "jit.env"
    args = ["install", str(bundle), "--root", str(root), "--env-file", str(env_file)]
    assert jithost.main(args) == 1
    err = capsys.readouterr().err
    assert "JIT cache refused; the stack is installed, no JIT cache unpacked" in err, err
    assert f"member '{CUBIN}' has sha256" in err
    assert list(root.parent.iterdir()) == [] and not env_file.exists()


def test_several_matching_caches_need_the_model_to_choose(host, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 7}')
    key = host["key"]
    other = JitKey(**{**key.components(), "server_args": key.server_args})
    ours = JitKey(**{**other.components(), "server_args": key.server_args,
                     "model_config": jitcache.model_config_digest(model)})  # fmt: skip
    archive = _bundled(
        host, tmp_path, _artifact(tmp_path, other, "a"), _artifact(tmp_path, ours, "b")
    )
    bundle = _extract(archive, tmp_path / "host")
    root, env_file = tmp_path / "jit-root", tmp_path / "jit.env"
    base = ("--jit-root", str(root), "--jit-env", str(env_file))
    run = _install(bundle, host["python"], tmp_path / "bin", *base)
    assert run.returncode == 0 and "2 JIT caches match this host" in run.stderr, run.stderr
    assert not root.exists()
    run = _install(bundle, host["python"], tmp_path / "bin", *base, "--jit-model", str(model))
    assert run.returncode == 0, run.stderr
    assert f"JIT cache {ours.short} matches this host" in run.stdout, run.stdout
    assert (root / jitcache.ROOT_MARKER).read_text().strip() == ours.digest
    run = _install(bundle, host["python"], tmp_path / "bin", *base, "--jit-key", "0000")
    assert run.returncode == 1 and "--jit-key 0000: no JIT cache of this bundle" in run.stderr


def test_bundle_bytes_are_reproducible_with_the_artifact(host, tmp_path: Path) -> None:
    artifact = _artifact(tmp_path, host["key"])
    one = _bundled(host, tmp_path, artifact, out="one")
    two = _bundled(host, tmp_path, artifact, out="two")
    assert one.name == two.name and one.read_bytes() == two.read_bytes()
    plain = _bundled(host, tmp_path, out="plain")
    with tarfile.open(plain) as tar:
        assert not [n for n in tar.getnames() if "/jit/" in n]  # nothing without --jit-cache


def test_bundle_refuses_an_artifact_it_cannot_vouch_for(host, tmp_path: Path) -> None:
    root = host["root"]
    key = host["key"]
    base = ["--wheelhouse", str(root / "wheelhouse"), "--out", str(tmp_path / "dist")]
    stranger = _artifact(tmp_path, JitKey(**{**key.components(), "server_args": (),
                                            "wheels_lock": "c" * 64}), "s")  # fmt: skip
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not an archive")
    tampered = _retar(_artifact(tmp_path, key), tmp_path / "tampered.tar.gz", _tampered_content)
    good = _artifact(tmp_path, key, "g")
    for args, expected in (
        ([str(stranger)], "key component wheels_lock is 'cccc"),
        ([str(garbage)], f"JIT cache {garbage}: not a readable tar archive"),
        ([str(tampered)], f"member '{CUBIN}' has sha256"),
        ([str(tmp_path / "absent.tar.gz")], "absent.tar.gz: no such file"),
        ([str(good), str(good)], f"the same key ({key.short})"),
    ):
        result = _bundle(root, *base, *[w for a in args for w in ("--jit-cache", a)])
        assert result.returncode == 2, result.stdout
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_a_root_others_can_change_is_refused(tmp_path: Path) -> None:
    """The servers load kernels from the root: it must be nobody else's to change."""
    from sglforge.base.errors import SglforgeError

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SglforgeError, match="is writable by others \\(mode 777\\)"):
        jithost.check_root(shared / "root")
    shared.chmod(0o1777)  # sticky, as /var/tmp: others cannot rename what is ours
    jithost.check_root(shared / "root")
    (tmp_path / "elsewhere").mkdir()
    (shared / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SglforgeError, match="is a symbolic link"):
        jithost.check_root(shared / "link")
    if os.geteuid() == 0:  # someone else's root, or its directory (as root: chown works)
        theirs = shared / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(SglforgeError, match="belongs to uid 65534, not to this user"):
            jithost.check_root(theirs)
        with pytest.raises(SglforgeError, match="belongs to uid 65534"):
            jithost.check_root(theirs / "root", parent_only=True)
