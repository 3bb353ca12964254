"""Issue 37, item 5: each server's readiness is measured from its own launch, with the servers
polled at the same time (before: decode "ready at 1.0 s" after prefill's 90 s)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sglforge.smoke.commands import LaunchCommand
from sglforge.smoke.processes import ProcessExited, ProcessSet
from sglforge.smoke.readiness import NotReady, wait_all_ready

from .conftest import STANDIN, SmokeProject, free_ports


def test_report_gives_each_server_its_own_ready_time(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    # prefill needs ~4 s, decode ~1 s: a sequential wait would see decode at ~4 s.
    smoke_project.write_profile(
        prefill_env={"STANDIN_STARTUP_DELAY": "4"},
        decode_env={"STANDIN_STARTUP_DELAY": "1"},
        checks={"run": ["generate"]},
    )
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = smoke_project.report()
    ready = report["readiness"]
    assert set(ready) == {"prefill", "decode", "router"}
    assert 4.0 <= ready["prefill"]["/health"] < 8
    assert 1.0 <= ready["decode"]["/health"] < 3.0, ready
    assert ready["decode"]["/health_generate"] >= ready["decode"]["/health"]
    assert next(iter(ready["router"].values())) > 0  # the profile's ready-path
    health = next(s for s in report["stages"] if s["name"] == "health")
    assert "decode ready" in health["detail"] and "after its launch" in health["detail"]
    summary = (smoke_project.run_dir / "smoke-summary.txt").read_text()
    assert "ready (seconds from each process's own launch):" in summary


def _server(tmp_path: Path, role: str, port: int, env: dict[str, str]) -> LaunchCommand:
    return LaunchCommand(
        role=role,
        argv=(
            sys.executable,
            str(STANDIN),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--disaggregation-mode",
            role,
        ),
        env={"STANDIN_RUN_DIR": str(tmp_path), **env},
        log=tmp_path / f"{role}.log",
        url=f"http://127.0.0.1:{port}",
        summary=role,
    )


def test_a_server_dying_while_the_other_loads_fails_at_once(tmp_path: Path) -> None:
    ports = free_ports(2)
    with ProcessSet(grace=2) as processes:
        slow = processes.start(
            _server(tmp_path, "prefill", ports[0], {"STANDIN_NEVER_HEALTHY": "1"})
        )
        dying = processes.start(
            LaunchCommand(
                role="decode",
                argv=(sys.executable, "-c", "import time; time.sleep(1); exit(7)"),
                env={},
                log=tmp_path / "decode.log",
                url=f"http://127.0.0.1:{ports[1]}",
                summary="decode",
            )
        )
        start = time.monotonic()
        with pytest.raises(ProcessExited, match="decode .* exit status 7"):
            wait_all_ready(processes, [slow, dying], "/health", 30)
        assert time.monotonic() - start < 10


def test_the_deadline_names_the_server_that_missed_it(tmp_path: Path) -> None:
    ports = free_ports(2)
    with ProcessSet(grace=2) as processes:
        targets = [
            processes.start(_server(tmp_path, "prefill", ports[0], {"STANDIN_NEVER_HEALTHY": "1"})),
            processes.start(_server(tmp_path, "decode", ports[1], {})),
        ]
        with pytest.raises(NotReady, match="prefill did not answer 200 on /health within 3 s"):
            wait_all_ready(processes, targets, "/health", 3)
    assert all(p.popen.poll() is not None for p in targets)
