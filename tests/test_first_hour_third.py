"""Issue 33 (the first hour, third round): the real `nox` and `python -m sglforge` on the
fixture project. Nothing here installs the toolchain: pip gets no index (tests/
test_nox_first_hour.py), so reaching an install shows as "installing sglforge into"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_nox_first_hour import _config_with_mirror, _env, _nox, _project

ROOT = Path(__file__).resolve().parents[1]
INSTALLING = "installing sglforge into"
pytestmark = pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import nox"], capture_output=True, check=False
    ).returncode
    != 0,
    reason="needs nox (pip install nox)",
)


# ---------------------------------------------------------------------------------------------
# item 6: a misspelled --target or profile is refused everywhere, with a "did you mean"


@pytest.mark.parametrize("session", ["build", "verify", "matrix"])
def test_a_misspelled_target_is_refused_before_fetching_or_installing(tmp_path, session):
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    (root / "targets").mkdir()
    (root / "targets" / "sm90.toml").write_text('description = "an sm_90a build"\n')
    (root / "wheels").mkdir(exist_ok=True)
    (root / "wheels" / "manifest.json").write_text('{"wheels": []}\n')  # verify's own check
    result = _nox(root, session, "--target", "sm9", env=_env(fixture))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "--target sm9: no " in out and "did you mean 'sm90'?" in out, out
    assert "exported" not in out and INSTALLING not in out and "Traceback" not in out, out


@pytest.mark.parametrize("verb", ["smoke", "doctor"])
def test_a_misspelled_profile_gets_a_did_you_mean(verb):
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", verb, "--"]
        + ["--profile", "h200-pd-2gp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "no smoke profile 'h200-pd-2gp'" in out and "did you mean 'h200-pd-2gpu'" in out, out
    assert "Traceback" not in out, out


# ---------------------------------------------------------------------------------------------
# item 9 (and 14: a broken nvcc): a setting the user gave that cannot be used is an error


def _other_python() -> str | None:
    from sglforge.base.python import candidates, major_minor

    current = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in ("3.12", "3.11", "3.13", "3.10"):
        for found in candidates(version, use_uv=False) if version != current else []:
            if (
                found != os.environ.get("SGLFORGE_TOOLCHAIN_PYTHON")
                and major_minor(found) == version
            ):
                return found
    return None


def _broken_nvcc(tmp_path: Path) -> Path:
    home = tmp_path / "cuda-broken"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc-wrapper: cannot exec real-nvcc' >&2\nexit 127\n")
    nvcc.chmod(0o755)
    return home


@pytest.mark.parametrize("case", ["cuda-home", "python-missing", "python-other", "nvcc-broken"])
def test_an_explicit_setting_that_cannot_be_used_is_an_error(tmp_path, case):
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    if case == "cuda-home":
        extra = {"CUDA_HOME": "/nonexistent"}
        message = "CUDA_HOME=/nonexistent: no /nonexistent/bin/nvcc"
    elif case == "python-missing":
        extra = {"SGLFORGE_TOOLCHAIN_PYTHON": str(tmp_path / "no" / "python3")}
        message = f"SGLFORGE_TOOLCHAIN_PYTHON={tmp_path / 'no' / 'python3'}: not an executable"
    elif case == "python-other":
        other = _other_python()
        if other is None:
            pytest.skip("needs a Python of another version than this one")
        extra = {"SGLFORGE_TOOLCHAIN_PYTHON": other}
        current = f"{sys.version_info.major}.{sys.version_info.minor}"
        message = f"lockfiles/toolchain.toml pins python {current}"
    else:
        home = _broken_nvcc(tmp_path)
        extra = {"CUDA_HOME": str(home)}
        message = f"{home / 'bin' / 'nvcc'} --version does not say its release"
    result = _nox(root, "build", env=_env(fixture, **extra))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert message in out, out
    assert "release unknown" not in out, out
    assert INSTALLING not in out and "Traceback" not in out, out
