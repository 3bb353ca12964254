"""Issue 11 item 4: `nox -s build` / `verify` fail fast, loudly (non-zero), in the right order:
toolchain Python, then sources, then (only then) installing anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.project import make_project

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import nox"], capture_output=True, check=False
    ).returncode
    != 0,
    reason="needs nox (pip install nox)",
)


def nox_project(tmp_path: Path, python: str) -> Path:
    """The fixture project with this checkout's noxfile and src/, toolchain python = `python`."""
    project = make_project(tmp_path).root
    shutil.copy(ROOT / "noxfile.py", project / "noxfile.py")
    (project / "src").symlink_to(ROOT / "src")
    shutil.copy(ROOT / "lockfiles" / "toolchain.lock", project / "lockfiles" / "toolchain.lock")
    toml = project / "lockfiles" / "toolchain.toml"
    lines = [
        f'python = "{python}"' if line.startswith("python =") else line
        for line in toml.read_text().splitlines()
    ]
    toml.write_text("\n".join(lines) + "\n")
    return project


def run_nox(project: Path, session: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SGLFORGE_TOOLCHAIN_PYTHON", "SGLFORGE_CONFIG", "SGLFORGE_PROJECT")
    }
    base.update(env)
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "-s", session],
        cwd=project,
        capture_output=True,
        text=True,
        env=base,
        check=False,
        timeout=300,
    )


def test_missing_toolchain_python_is_an_error_that_says_how_to_get_it(tmp_path):
    project = nox_project(tmp_path, "3.99")
    result = run_nox(project, "build", PATH="/usr/bin:/bin")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "Python 3.99" in out and "uv python install 3.99" in out
    assert "apt install python3.99" in out
    assert not (project / ".nox" / "build-toolchain").exists()


def test_sources_are_fetched_and_checked_before_anything_is_installed(tmp_path):
    project = nox_project(tmp_path, f"{sys.version_info.major}.{sys.version_info.minor}")
    # the fixture pins live at https://example.invalid/ (no mirror given): fetch must fail
    result = run_nox(project, "build", SGLFORGE_TOOLCHAIN_PYTHON=sys.executable)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "fetching and checking sources first" in out
    assert "purepy: cannot fetch https://example.invalid/org/purepy" in out  # the fetch ran
    assert "Traceback" not in out
    assert "installing" not in out
    assert not (project / ".nox" / "build-toolchain").exists()


def test_verify_without_a_manifest_installs_nothing(tmp_path):
    project = nox_project(tmp_path, f"{sys.version_info.major}.{sys.version_info.minor}")
    result = run_nox(project, "verify", SGLFORGE_TOOLCHAIN_PYTHON=sys.executable)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "manifest.json does not exist" in out and "nothing was installed" in out
    assert not (project / ".nox" / "verify-toolchain").exists()
