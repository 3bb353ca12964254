"""Issue 37, item 2: the report names the stack libraries each server's processes mapped (from
/proc/PID/maps of every member of its session) and its transfer log lines."""

from __future__ import annotations

import ctypes.util
import shutil
import sys
import time
from pathlib import Path

import pytest

from sglforge.smoke import loaded
from sglforge.smoke.commands import LaunchCommand
from sglforge.smoke.processes import ProcessSet

from .conftest import SmokeProject

CHILD = """
import ctypes, os, sys, time
if os.fork() == 0:             # a child of the launcher, as SGLang's scheduler is
    ctypes.CDLL(sys.argv[1])   # the library lives in the child only
    print("NIXL INFO Backend UCX was instantiated", flush=True)
    time.sleep(60)
time.sleep(60)
"""


def _a_shared_object() -> str:
    name = ctypes.util.find_library("z") or ctypes.util.find_library("m")
    for directory in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"):
        if name and (Path(directory) / name).exists():
            return str(Path(directory) / name)
    pytest.skip("no libz/libm found to stand in for a UCX library")


def test_libraries_of_a_servers_children_and_its_log_lines(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "libucx" / "lib" / "libucp.so.0"
    fake.parent.mkdir(parents=True)
    shutil.copy(_a_shared_object(), fake)
    command = LaunchCommand(
        role="decode",
        argv=(sys.executable, "-c", CHILD, str(fake)),
        env={},
        log=tmp_path / "decode.log",
        url="http://127.0.0.1:1",
        summary="decode",
    )
    jit = tmp_path / "jit"
    (jit / "kernel").mkdir(parents=True)
    (jit / "kernel" / "a.cubin").write_bytes(b"x")
    with ProcessSet(grace=2) as processes:
        process = processes.start(command)
        deadline = time.monotonic() + 10
        record: dict = {}
        while time.monotonic() < deadline:
            record = loaded.evidence(process, {"deep_gemm": jit, "none": tmp_path / "absent"})
            if record["libraries"] and record["log_lines"]:
                break
            time.sleep(0.1)
    assert len(record["pids"]) == 2  # the launcher and its child
    assert record["libraries"] == [str(fake)]
    assert record["log_lines"] == ["NIXL INFO Backend UCX was instantiated"]
    assert record["jit_deep_gemm"] == ["kernel/a.cubin"] and record["jit_none"] is None


def test_the_smoke_report_records_each_server(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    smoke_project.write_profile(checks={"run": ["generate"]})
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    record = smoke_project.report()["loaded"]
    assert set(record) == {"prefill", "decode"}  # servers, not the router
    assert all(r["pids"] and isinstance(r["libraries"], list) for r in record.values())
