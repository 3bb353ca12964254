"""Issue 33 item 2: one documented offline route for every session. On a connected host
`nox -s wheelhouse -- DIR` downloads every wheel the sessions install (hash-pinned); on a host
without a network, `SGLFORGE_INDEX=DIR` is the only setting: `nox -s demo` and `nox -s build`
(here), `nox -s smoke` (tests/smoke/test_offline_smoke.py).

The offline half runs in a network namespace of its own (bubblewrap `--unshare-net`: only
loopback), from a copy of this checkout (its own `.nox/toolchain-*`, nothing reused), with
pip's configuration and every PIP_* variable removed."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import upstreams
from tests.helpers import host_view

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.network,  # writing the wheelhouse needs PyPI; using it needs nothing
    pytest.mark.skipif(
        subprocess.run([sys.executable, "-c", "import nox"], check=False).returncode != 0,
        reason="needs nox",
    ),
]


def _offline_prefix() -> list[str]:
    prefix = host_view(offline=True)
    if prefix is None:
        pytest.skip("needs bubblewrap able to make a network namespace here")
    probe = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-c",
            "import socket; socket.create_connection(('pypi.org', 443), 5)",
        ],
        capture_output=True,
        check=False,
    )
    assert probe.returncode != 0, "the network namespace reaches PyPI"
    return prefix


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "SGLFORGE_"))
        and k.lower() not in ("http_proxy", "https_proxy")
    }
    env.update(PIP_CONFIG_FILE=os.devnull, **extra)  # no pip.conf find-links/extra indexes
    return env


def _checkout_copy(dest: Path) -> Path:
    """This checkout's files (tracked and new, not ignored) at `dest`: a fresh .nox."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _wheelhouse(project: Path, dest: Path, *extra: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "-s", "wheelhouse"]
        + ["--", "--project", str(project), str(dest), *extra],
        cwd=project,
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=False,
        timeout=900,
    )
    out = result.stdout + result.stderr
    if result.returncode != 0 and "pip download" in out:
        pytest.skip(f"cannot reach the package index to write the wheelhouse: {out[-800:]}")
    assert result.returncode == 0, out
    assert f"SGLFORGE_INDEX={dest}" in out, out


@pytest.mark.cuda
def test_demo_runs_in_a_network_namespace_from_the_wheelhouse_alone(tmp_path):
    checkout = _checkout_copy(tmp_path / "checkout")
    wheels = tmp_path / "wheelhouse"
    _wheelhouse(checkout, wheels)
    prefix = _offline_prefix()
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "nox", "-f", str(checkout / "noxfile.py")]
        + ["-s", "demo", "--", "--workdir", str(tmp_path / "demo")],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=_clean_env(SGLFORGE_INDEX=str(wheels)),
        check=False,
        timeout=1200,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert f"--no-index --find-links {wheels}" in out, out[-6000:]  # every install from it
    assert "verify: all 2 wheel(s) rebuilt bit-identical" in out, out[-6000:]
    assert "Could not resolve host" not in out and "Retrying" not in out, out[-6000:]


def _fixture_project(tmp_path: Path):
    """The fixture project (purepy) under nox, with a toolchain.lock whose hashes are the
    real wheels of its build tools and their dependencies (downloaded here), and this
    checkout's noxfile and src/."""
    from tests.fixtures.project import BUILD_REQUIRES, make_project

    fixture = make_project(tmp_path)
    root = fixture.root
    shutil.copy(ROOT / "noxfile.py", root / "noxfile.py")
    (root / "src").symlink_to(ROOT / "src")
    got = tmp_path / "downloads"
    pins = [f"{n}=={importlib.metadata.version(n)}" for n in BUILD_REQUIRES]
    download = subprocess.run(  # with their dependencies: the lock pins the whole closure
        [sys.executable, "-m", "pip", "download", "--only-binary", ":all:"]
        + ["-d", str(got), *pins],
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=False,
        timeout=600,
    )
    if download.returncode != 0:
        pytest.skip(f"cannot reach the package index: {download.stderr[-800:]}")
    lines = ["# [build]"]
    for wheel in sorted(got.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    (root / "lockfiles" / "toolchain.lock").write_text("\n".join(lines) + "\n")
    return fixture


def test_build_runs_in_a_network_namespace_from_the_wheelhouse_alone(tmp_path):
    fixture = _fixture_project(tmp_path)
    wheels = tmp_path / "wheelhouse"
    _wheelhouse(fixture.root, wheels)
    prefix = _offline_prefix()
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "nox", "-f", str(fixture.root / "noxfile.py")]
        + [
            "-s",
            "build",
            "--",
            "--no-check",
            "--mirror",
            f"{upstreams.MIRROR_PREFIX}={fixture.mirror}/",
        ]
        + ["--cache-dir", str(fixture.cache), "--build-root", str(fixture.build_root)],
        cwd=fixture.root,
        capture_output=True,
        text=True,
        env=_clean_env(SGLFORGE_INDEX=str(wheels), SGLFORGE_TOOLCHAIN_PYTHON=sys.executable),
        check=False,
        timeout=1200,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert f"--no-index --find-links {wheels}" in out, out[-6000:]
    assert [w.name.split("-")[0] for w in (fixture.root / "wheels").glob("*.whl")] == ["purepy"]
    assert "Could not resolve host" not in out and "Retrying" not in out, out[-6000:]
    # issue 33 item 14: a warm run installs nothing (no 27 "Requirement already satisfied")
    again = subprocess.run(
        result.args,
        cwd=fixture.root,
        capture_output=True,
        text=True,
        env=_clean_env(SGLFORGE_INDEX=str(wheels), SGLFORGE_TOOLCHAIN_PYTHON=sys.executable),
        check=False,
        timeout=600,
    )
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-6000:]
    assert "is up to date (sglforge and the locks): not reinstalled" in out, out[-6000:]
    assert "Requirement already satisfied" not in out and "installing sglforge" not in out, out


def test_patches_and_check_sessions_install_their_wheels_from_the_wheelhouse(tmp_path):
    checkout = _checkout_copy(tmp_path / "checkout")
    wheels = tmp_path / "wheelhouse"
    _wheelhouse(checkout, wheels)
    prefix = _offline_prefix()
    for session, args, module in (("patches", ["lint"], "unidiff"), ("check", [], "packaging")):
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "nox", "-f", str(checkout / "noxfile.py")]
            + ["-s", session, "--", *args],
            cwd=checkout,
            capture_output=True,
            text=True,
            env=_clean_env(SGLFORGE_INDEX=str(wheels)),
            check=False,
            timeout=600,
        )
        out = result.stdout + result.stderr
        assert f"--no-index --find-links {wheels}" in out, out[-4000:]
        assert "Could not resolve host" not in out and "Retrying" not in out, out[-4000:]
        venv_python = checkout / ".nox" / session / "bin" / "python"
        probe = subprocess.run([str(venv_python), "-c", f"import {module}"], check=False)
        assert probe.returncode == 0, out[-4000:]
        if session == "patches":
            assert result.returncode == 0, out[-4000:]
