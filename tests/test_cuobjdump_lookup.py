"""Where the arch audit finds cuobjdump. `nox -s build` runs its preflight with nox's
interpreter but the build in the toolchain venv, whose lock carries no cuobjdump: the preflight
passed and the real sglang-kernel build then stopped after its compile with "arch audit needs
cuobjdump ..., none found". The nox session now hands the preflight's cuobjdump to the build
as $SGLFORGE_CUOBJDUMP, which the audit's lookup takes first."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.cli import nox_sessions
from sglforge.wheel import audit


def _fake_tool(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "cuobjdump"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return tool


def _no_tool_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(audit.CUOBJDUMP_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "empty-site-packages")])
    monkeypatch.setattr(
        audit.sysconfig,
        "get_paths",
        lambda: {"purelib": str(tmp_path / "p"), "platlib": str(tmp_path / "p")},
    )


def test_the_variable_is_taken_first_and_a_bad_one_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_tool_anywhere(monkeypatch, tmp_path)
    assert audit.find_cuobjdump() is None  # what the toolchain venv's build saw
    chosen = _fake_tool(tmp_path / "chosen")
    toolkit_tool = _fake_tool(tmp_path / "cuda" / "bin")
    monkeypatch.setenv(audit.CUOBJDUMP_VAR, str(chosen))
    assert audit.find_cuobjdump(tmp_path / "cuda") == chosen
    assert toolkit_tool.is_file()
    monkeypatch.setenv(audit.CUOBJDUMP_VAR, str(tmp_path / "missing"))
    with pytest.raises(SglforgeError, match=r"SGLFORGE_CUOBJDUMP=.*missing: not an executable"):
        audit.find_cuobjdump()


def test_nox_hands_the_preflights_cuobjdump_to_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_tool_anywhere(monkeypatch, tmp_path)
    assert nox_sessions.audit_tools_env() == {}
    # nox's interpreter has a nvidia-cuda-cuobjdump wheel (as .[test] installs it)
    site = tmp_path / "nox-venv" / "site-packages"
    tool = _fake_tool(site / "nvidia" / "cu13" / "bin")
    monkeypatch.setattr(sys, "path", [str(site)])
    env = nox_sessions.audit_tools_env()
    assert env == {audit.CUOBJDUMP_VAR: str(tool)}
    # ... and the build process, with none of its own, finds that one through the variable
    _no_tool_anywhere(monkeypatch, tmp_path)
    monkeypatch.setenv(audit.CUOBJDUMP_VAR, env[audit.CUOBJDUMP_VAR])
    assert audit.find_cuobjdump() == tool
    assert os.access(tool, os.X_OK)


def test_a_users_choice_is_left_to_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bad $SGLFORGE_CUOBJDUMP is not a traceback in nox's process: nox passes it on
    unchanged and the build (or the preflight) reports it."""
    _no_tool_anywhere(monkeypatch, tmp_path)
    monkeypatch.setenv(audit.CUOBJDUMP_VAR, str(tmp_path / "missing"))
    assert nox_sessions.audit_tools_env() == {}
