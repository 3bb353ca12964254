"""The smoke venv is created with the toolchain's Python (lockfiles/toolchain.toml `python`),
found on the host, not with the interpreter running sglforge; the whole set then installs
with --require-hashes and no index from wheels/ + the wheelhouse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.smoke.install import (
    find_python,
    install,
    installed_version,
    plan_install,
    venv_base_python,
)
from sglforge.smoke.profile import InstallSpec
from sglforge.wheel.wheelset import load_wheelset
from tests.smoke.conftest import build_wheelset

CURRENT = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_running_python_when_it_is_the_toolchain_version() -> None:
    assert find_python(CURRENT) == Path(sys.executable)


def test_pythonX_Y_on_path_is_used_when_it_really_is_that_version(tmp_path: Path) -> None:
    good = _script(tmp_path / "bin" / "python3.77", "echo 3.77")
    assert (
        find_python(
            "3.77",
            search_path=str(tmp_path / "bin"),
            use_uv=False,
            pyenv_root=str(tmp_path / "nopyenv"),
        )
        == good
    )


def test_a_broken_shim_on_path_falls_through_to_pyenv(tmp_path: Path) -> None:
    _script(tmp_path / "bin" / "python3.77", "echo 'pyenv: python3.77: not selected' >&2; exit 127")
    installed = _script(
        tmp_path / "pyenv" / "versions" / "3.77.2" / "bin" / "python3.77", "echo 3.77"
    )
    assert (
        find_python(
            "3.77",
            search_path=str(tmp_path / "bin"),
            use_uv=False,
            pyenv_root=str(tmp_path / "pyenv"),
        )
        == installed
    )


def test_no_toolchain_python_is_an_error_saying_how_to_get_it(tmp_path: Path) -> None:
    _script(tmp_path / "bin" / "python3.77", "echo 3.11")  # lies about its name
    with pytest.raises(SglforgeError) as caught:
        find_python(
            "3.77",
            search_path=str(tmp_path / "bin"),
            use_uv=False,
            pyenv_root=str(tmp_path / "nopyenv"),
        )
    text = str(caught.value)
    assert "no Python 3.77 found" in text and "uv python install 3.77" in text


def test_smoke_refuses_to_start_without_the_toolchain_python(smoke_project) -> None:
    (smoke_project.root / "lockfiles" / "toolchain.toml").write_text(
        'cuda = "13.0"\npython = "3.77"\n'
    )
    result = smoke_project.smoke(
        "--profile",
        "standin",
        "--dry-run",
        env={"PATH": "/usr/bin:/bin", "PYENV_ROOT": "/nonexistent"},
    )
    assert result.returncode == 2, result.stdout
    assert "no Python 3.77 found" in result.stderr


def _other_python() -> tuple[str, Path] | None:
    for version in ("3.12", "3.11", "3.13", "3.10"):
        if version == CURRENT:
            continue
        try:
            return version, find_python(version)
        except SglforgeError:
            continue
    return None


def test_venv_is_made_with_the_toolchain_python_and_installs_offline(tmp_path: Path) -> None:
    other = _other_python()
    if other is None:
        pytest.skip(f"needs a Python other than {CURRENT} on this host (python3.X/uv/pyenv)")
    version, _ = other
    root = tmp_path / "project"
    build_wheelset(root)
    (root / "lockfiles" / "toolchain.toml").write_text(f'cuda = "13.0"\npython = "{version}"\n')
    base = venv_base_python(root)
    assert base != Path(sys.executable)
    plan = plan_install(
        root / "venv",
        root / "lockfiles" / "wheels.lock",
        root / "wheels",
        InstallSpec(wheelhouse=root / "wheelhouse", index_url=None),
        base,
    )
    assert plan.create[0] == str(base) and "--no-index" in plan.pip
    assert "--require-hashes" in plan.pip
    wheelset = load_wheelset(root / "wheels", root / "lockfiles" / "wheels.lock")
    install(plan, wheelset, root / "install.log")
    made = subprocess.run(
        [str(plan.python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert made == version
    assert installed_version("tinydep", plan.python) == "1.0"
    assert installed_version("sglang", plan.python) == "0.5.99+sm120.cu130.abcd1234"
