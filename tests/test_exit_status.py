"""Issue 33 items 3 and 7: exit statuses agree with the README's contract ("Exit status"):
0 ok, 1 a build/check/smoke that ran and failed, 2 bad input or a refused host; one test per
status, through `python -m sglforge` and the real `nox`, and never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.project import make_project
from tests.helpers import snapshot

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def purepy(tmp_path):
    return make_project(tmp_path)


def test_status_0_a_build_that_succeeds(purepy):
    result = purepy.run("build")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_status_1_a_compile_that_fails(purepy):
    """The build started and its compile exited non-zero: a failed build, not bad input."""
    recipe = purepy.recipe("purepy")
    recipe.write_text(recipe.read_text().replace('"{version}"', '"{version}.not-pep440!"'))
    (purepy.root / "wheels").mkdir(exist_ok=True)
    before = snapshot(purepy.root / "wheels")
    result = purepy.run("build")
    assert result.returncode == 1, result.stderr
    assert "error: build of purepy failed (exit 1)" in result.stderr
    assert "Traceback" not in result.stderr.split("--- last 40 lines")[0]
    assert snapshot(purepy.root / "wheels") == before  # nothing partial reached wheels/


def test_status_2_bad_input_before_anything_is_built(purepy):
    result = purepy.run("build", "purepi")
    assert result.returncode == 2, result.stderr
    assert "did you mean 'purepy'" in result.stderr and "Traceback" not in result.stderr
    assert not (purepy.build_root / "logs").exists()


def _project_without_lock(tmp_path: Path) -> Path:
    """This repository's inputs (profiles, lockfiles) without a lockfiles/wheels.lock."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "profiles", project / "profiles")
    shutil.copytree(ROOT / "lockfiles", project / "lockfiles")
    (project / "lockfiles" / "wheels.lock").unlink(missing_ok=True)
    return project


def _sglforge(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run(
        [sys.executable, "-m", "sglforge", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def test_status_2_smoke_without_a_wheel_lock(tmp_path):
    """Item 3: no lockfiles/wheels.lock is a clear error naming it (exit 2), through nox."""
    if subprocess.run([sys.executable, "-c", "import nox"], check=False).returncode != 0:
        pytest.skip("needs nox")
    project = _project_without_lock(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "smoke", "--"]
        + ["--project", str(project), "--out", str(tmp_path / "run")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert f"error: {project / 'lockfiles' / 'wheels.lock'} does not exist" in out, out
    assert "Traceback" not in out and "FileNotFoundError" not in out, out
    assert not (tmp_path / "run").exists()  # nothing was started, no report half-written


def test_status_2_smoke_with_a_lock_that_is_not_there(tmp_path):
    project = _project_without_lock(tmp_path)
    missing = tmp_path / "nope.lock"
    result = _sglforge("--project", str(project), "smoke", "--lock", str(missing))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: --lock {missing}: no such file"), result.stderr
    assert "Traceback" not in result.stderr
    dry = _sglforge("--project", str(project), "smoke", "--dry-run", "--lock", str(missing))
    assert dry.returncode == 0, dry.stderr  # --dry-run prints the commands, as before
