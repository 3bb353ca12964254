"""End-to-end smoke runs: real subprocesses, real HTTP, the real sglang-router 0.3.2 from
PyPI routing between stand-in prefill/decode servers launched by the product's launcher."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from sglforge.smoke.processes import group_members
from tests.helpers import default_signals

from .conftest import SmokeProject


def _pids_and_groups(project: SmokeProject) -> list[dict]:
    path = project.run_dir / "processes.json"
    return json.loads(path.read_text()) if path.exists() else []


def _assert_nothing_survives(project: SmokeProject) -> None:
    entries = _pids_and_groups(project)
    assert entries, "processes.json should list what was started"
    for entry in entries:
        assert group_members(entry["pgid"]) == [], f"{entry['role']} group survived"
    # Children the stand-ins spawned (like SGLang's scheduler processes) are gone as well.
    for log in (project.run_dir / "logs").glob("*.log"):
        for pid in re.findall(r"spawned child (\d+)", log.read_text()):
            assert not _alive(int(pid)), f"grandchild {pid} from {log.name} survived"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_full_smoke_run_passes_and_report_is_complete(smoke_project: SmokeProject) -> None:
    smoke_project.write_profile(prefill_env={"STANDIN_SPAWN_CHILD": "1"})
    result = smoke_project.smoke("--profile", "standin", "--out", str(smoke_project.run_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    report = smoke_project.report()
    assert report["result"] == "pass"
    assert report["failure"] is None
    assert [s["name"] for s in report["stages"]] == [
        "wheels",
        "stack check",
        "doctor",
        "install",
        "launch",
        "health",
        "health_generate",
        "router",
        "checks",
    ]
    assert all(s["ok"] for s in report["stages"])
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == {"generate", "logprobs", "stream", "concurrent", "needle"}
    assert all(c["passed"] for c in checks.values()), checks
    assert checks["generate"]["metrics"]["text"].strip()
    assert (
        checks["logprobs"]["metrics"]["output_token_logprobs"]
        == checks["logprobs"]["metrics"]["completion_tokens"]
        == 8
    )
    assert checks["concurrent"]["metrics"] == {
        **checks["concurrent"]["metrics"],
        "requests": 8,
        "failed": 0,
    }
    summary = report["summary"]
    assert summary["ttft_s"] > 0 and summary["decode_tokens_per_s"] > 0
    assert summary["concurrent_tokens_per_s"] > 0
    assert summary["needle_recalled"] == [256, 1024, 2048, 4096]
    # Versions come from the wheels' own sglforge-build.json.
    assert report["versions"]["sglang-kernel"]["cuda_archs"] == ["sm_120a"]
    assert report["versions"]["sglang"]["version"] == "0.5.99+sm120.cu130.abcd1234"
    assert len(report["versions"]["sglang"]["commit"]) == 40
    # The fresh venv really holds the locked set, third-party dep from the wheelhouse.
    venv_python = smoke_project.run_dir / "venv" / "bin" / "python"
    listed = subprocess.run(
        [str(venv_python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    versions = {p["name"]: p["version"] for p in json.loads(listed)}
    assert versions["tinydep"] == "1.0"
    assert versions["sglang-kernel"] == "0.4.7+sm120.cu130.abcd1234"
    # Each role got its GPUs through CUDA_VISIBLE_DEVICES and the stand-in saw PD mode.
    prefill_log = (smoke_project.run_dir / "logs" / "prefill.log").read_text()
    decode_log = (smoke_project.run_dir / "logs" / "decode.log").read_text()
    assert "mode=prefill" in prefill_log and "CUDA_VISIBLE_DEVICES=0,1" in prefill_log
    assert "mode=decode" in decode_log and "CUDA_VISIBLE_DEVICES=2,3" in decode_log
    # The router really fanned requests out to both sides.
    assert prefill_log.count("POST /generate") >= 10
    assert report["teardown"]["survivors"] == {}
    _assert_nothing_survives(smoke_project)
    text = (smoke_project.run_dir / "smoke-summary.txt").read_text()
    assert text.startswith("sglforge smoke: PASS")
    assert "needle recall" in text and "sglang-kernel" in text


def test_needle_probe_reports_where_the_standin_forgets(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    # The prefill stand-in drops the needle from prompts longer than 1500 tokens, so decode
    # (which only knows what prefill published for the room) cannot recall it.
    smoke_project.write_profile(
        prefill_env={"STANDIN_FORGET_BEYOND": "1500"}, checks={"run": ["needle"]}
    )
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    needle = smoke_project.report()["checks"][0]
    assert needle["metrics"]["recalled"] == [256, 1024]
    assert needle["metrics"]["lost"] == [2048, 4096]
    by_length = {e["target_tokens"]: e for e in needle["metrics"]["lengths"]}
    assert by_length[2048]["prompt_tokens"] > 2048  # the server's own count is reported
    assert "LOST" in (smoke_project.run_dir / "smoke-summary.txt").read_text()

    # The same forgetting at a length the profile requires fails the smoke.
    smoke_project.write_profile(
        prefill_env={"STANDIN_FORGET_BEYOND": "1500"},
        checks={"run": ["needle"], "needle-must-recall": [256, 2048]},
    )
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 1
    assert "needle lost at required length(s) [2048]" in result.stdout
    assert smoke_project.report()["result"] == "fail"
    _assert_nothing_survives(smoke_project)


def test_decode_dying_mid_run_fails_with_its_log_tail(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    smoke_project.write_profile(decode_env={"STANDIN_DIE_AFTER": "2", "STANDIN_SPAWN_CHILD": "1"})
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(
        r"decode \(pid \d+\) ended during check '\w+': exit status 3", result.stderr
    ), result.stderr
    assert "last lines of decode (exit status 3) log" in result.stderr
    assert "simulated crash: /generate number 3" in result.stderr
    report = smoke_project.report()
    assert report["result"] == "fail"
    assert report["failure"]["process"] == "decode"
    assert "simulated crash" in report["failure"]["log_tail"]
    assert report["checks"][0]["passed"]  # generate ran before the crash
    _assert_nothing_survives(smoke_project)


def test_server_that_never_becomes_healthy_hits_the_deadline(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    smoke_project.write_profile(prefill_env={"STANDIN_NEVER_HEALTHY": "1"}, timeouts={"health": 2})
    start = time.monotonic()
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "prefill did not answer 200 on /health within 2 s (last answer: HTTP 503" in result.stderr
    )
    assert elapsed < 30
    report = smoke_project.report()
    assert report["failure"]["process"] == "prefill"
    assert [p["role"] for p in report["processes"]] == ["prefill", "decode"]  # no router
    _assert_nothing_survives(smoke_project)


def test_port_in_use_is_a_clear_error_before_anything_starts(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    port = smoke_project.ports["decode"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = smoke_project.smoke(
            "--profile",
            "standin",
            "--out",
            str(smoke_project.run_dir),
            "--venv",
            str(installed_venv),
        )
    assert result.returncode == 1
    assert f"port {port} (decode HTTP port) on 127.0.0.1 is already in use" in result.stdout
    assert "nothing was started" in result.stderr
    assert "[decode] port" in result.stdout  # the fix names the profile key
    assert not (smoke_project.run_dir / "processes.json").exists()
    assert not (smoke_project.run_dir / "logs").exists()
    assert smoke_project.report()["failure"]["stage"] == "doctor"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_tears_everything_down(
    smoke_project: SmokeProject, installed_venv: Path, sig: signal.Signals
) -> None:
    # Decode never becomes healthy (long deadline) so the smoke is mid-wait when interrupted;
    # prefill ignores SIGTERM, so teardown has to escalate to SIGKILL.
    smoke_project.write_profile(
        prefill_env={"STANDIN_IGNORE_SIGTERM": "1", "STANDIN_SPAWN_CHILD": "1"},
        decode_env={"STANDIN_NEVER_HEALTHY": "1"},
        timeouts={"health": 120, "teardown": 1},
    )
    smoke = subprocess.Popen(
        smoke_project.command(
            "smoke",
            "--profile",
            "standin",
            "--out",
            str(smoke_project.run_dir),
            "--venv",
            str(installed_venv),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=smoke_project.env(),
        # even when the suite runs with SIGINT ignored (nohup &); no threads fork here
        preexec_fn=default_signals,  # noqa: PLW1509
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            entries = _pids_and_groups(smoke_project)
            log = smoke_project.run_dir / "logs" / "prefill.log"
            if len(entries) == 2 and log.exists() and "spawned child" in log.read_text():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("servers never started")
        time.sleep(0.5)
        assert all(group_members(e["pgid"]) for e in entries)
        smoke.send_signal(sig)
        out, err = smoke.communicate(timeout=30)
    finally:
        if smoke.poll() is None:
            smoke.kill()
    assert smoke.returncode == 128 + sig, out + err
    report = smoke_project.report()
    assert report["result"] == "interrupted"
    assert sig.name in report["failure"]["message"]
    assert report["teardown"]["signalled"]["prefill"] == "SIGKILL"
    assert report["teardown"]["survivors"] == {}
    _assert_nothing_survives(smoke_project)
    assert os.path.exists(smoke_project.run_dir / "smoke-summary.txt")


def test_missing_third_party_wheel_fails_install_with_pip_output(
    smoke_project: SmokeProject,
) -> None:
    for wheel in (smoke_project.root / "wheelhouse").iterdir():
        wheel.unlink()
    result = smoke_project.smoke("--profile", "standin", "--out", str(smoke_project.run_dir))
    assert result.returncode == 2
    assert "pip install failed" in result.stderr
    assert "tinydep" in result.stderr  # pip's own words about what it could not find
    assert "hint: third-party pins come from [install] wheelhouse" in result.stderr
    assert not (smoke_project.run_dir / "processes.json").exists()


def test_server_that_cannot_start_fails_cleanly(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    smoke_project.write_profile(server_command=["/nonexistent/launch_server"])
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "cannot start prefill: /nonexistent/launch_server: No such file or directory"
        in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert smoke_project.report()["failure"]["stage"] == "launch"


def test_closed_stdout_does_not_prevent_teardown(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    """`sglforge smoke | head` closes the pipe early; the servers must still be torn down."""
    smoke = subprocess.Popen(
        smoke_project.command(
            "smoke",
            "--profile",
            "standin",
            "--out",
            str(smoke_project.run_dir),
            "--venv",
            str(installed_venv),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=smoke_project.env(),
    )
    smoke.stdout.readline()
    smoke.stdout.close()
    smoke.wait(timeout=60)
    smoke.stderr.close()
    assert smoke_project.report()["result"] == "pass"
    assert smoke_project.report()["teardown"]["survivors"] == {}
    _assert_nothing_survives(smoke_project)


def test_router_missing_from_the_smoke_venv_is_named_before_launch(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    # The shipped profile runs the router from the smoke venv; the test lock lacks it.
    smoke_project.write_profile(router_command=["{python}", "-m", "sglang_router.launch_router"])
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[router] command: module 'sglang_router' is not installed" in result.stderr
    assert "sglang-router==0.3.2" in result.stderr
    assert not (smoke_project.run_dir / "processes.json").exists()


def test_stack_that_does_not_fit_stops_before_install(smoke_project: SmokeProject) -> None:
    """The smoke runs the stack check after the wheels stage: a requirement the lock does not
    satisfy stops it before a venv is made or anything starts."""
    lock = smoke_project.root / "lockfiles" / "wheels.lock"
    lock.write_text(lock.read_text().replace("tinydep==1.0 ", "tinydep==0.9 "))
    result = smoke_project.smoke("--profile", "standin", "--out", str(smoke_project.run_dir))
    assert result.returncode == 1, result.stdout + result.stderr
    report = smoke_project.report()
    assert [s["name"] for s in report["stages"]] == ["wheels", "stack check"]
    assert report["failure"]["stage"] == "stack check"
    assert "requires tinydep==1.0" in report["failure"]["message"]
    assert "check: FAILED" in result.stdout
    assert not (smoke_project.run_dir / "venv").exists()
    assert not (smoke_project.run_dir / "processes.json").exists()
