"""Profiles are validated like recipes; `--dry-run` prints the exact topology of the shipped
profile and starts nothing."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import ConfigErrors
from sglforge.cli.main import main
from sglforge.smoke.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "profiles" / "dsv4-flash-pd.toml"


def test_shipped_profile_describes_the_target_host() -> None:
    profile = load_profile(SHIPPED, REPO)
    assert profile.backend == "nixl"
    assert (profile.prefill.gpus, profile.prefill.numa_node, profile.prefill.tp) == (
        (0, 1, 2, 3),
        0,
        4,
    )
    assert (profile.decode.gpus, profile.decode.numa_node, profile.decode.tp) == (
        (4, 5, 6, 7),
        1,
        4,
    )
    assert profile.prefill.bootstrap_port == 8998
    assert profile.requires_gpu and profile.numa_binding
    assert profile.checks.needle_lengths == (2048, 4096, 8192, 16384)
    assert profile.server.env["SGLANG_OPT_FLASHMLA_SPARSE_PREFILL"] == "0"


def _profile_text(**replace: str) -> str:
    text = SHIPPED.read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def test_unknown_key_and_bad_values_name_file_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        _profile_text(
            **{
                "numa-node = 1": "numa-node = 1\nnuma_nod = 1",  # typo: unknown key
                "gpus = [4, 5, 6, 7]": "gpus = [3, 4, 5, 6]",  # overlaps prefill
                'backend = "nixl"': 'backend = "rdma"',
                '"needle"]': '"needle", "gsm8k"]',
                '"{run_dir}/cache/tilelang"': '"{rundir}/cache/tilelang"',
            }
        )
    )
    with pytest.raises(ConfigErrors) as info:
        load_profile(path, tmp_path)
    message = str(info.value)
    assert str(path) in message
    line = path.read_text().splitlines().index("numa_nod = 1") + 1
    assert f"[decode], key 'numa_nod' (line {line}): unknown key" in message
    assert "share GPUs [3]" in message
    assert "'rdma' is not one of nixl" in message
    assert "unknown check 'gsm8k'" in message
    assert "unknown placeholder {rundir}" in message


def test_bad_profile_is_a_clean_cli_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "lockfiles").mkdir()
    (tmp_path / "lockfiles" / "upstreams.toml").write_text("")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "x.toml").write_text(_profile_text(**{"port = 30001": "port = 30000"}))
    assert main(["--project", str(tmp_path), "smoke", "--profile", "x", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "[decode] port = 30000 is also [prefill] port" in err
    assert "Traceback" not in err
    assert main(["--project", str(tmp_path), "smoke", "--profile", "nope"]) == 2
    assert "no smoke profile 'nope'" in capsys.readouterr().err


def test_dry_run_of_shipped_profile_matches_topology(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglforge",
            "--project",
            str(REPO),
            "smoke",
            "--dry-run",
            "--model",
            "/models/dsv4",
            "--out",
            str(out_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not out_dir.exists(), "dry-run must not create anything"
    lines = [line for line in result.stdout.splitlines() if line and not line.startswith("#")]
    commands = {}
    for line in lines:
        words = shlex.split(line)
        if "sglang.launch_server" in words:
            commands[words[words.index("--disaggregation-mode") + 1]] = words
        elif "sglang_router.launch_router" in words:
            commands["router"] = words
    prefill, decode, router = commands["prefill"], commands["decode"], commands["router"]

    def after(words: list[str], flag: str) -> str:
        return words[words.index(flag) + 1]

    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in prefill
    assert ["numactl", "--cpunodebind=0", "--membind=0"] == prefill[
        prefill.index("numactl") : prefill.index("numactl") + 3
    ]
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in decode
    assert ["numactl", "--cpunodebind=1", "--membind=1"] == decode[
        decode.index("numactl") : decode.index("numactl") + 3
    ]
    for words, port in ((prefill, "30000"), (decode, "30001")):
        assert after(words, "--tp") == "4"
        assert after(words, "--port") == port
        assert after(words, "--disaggregation-transfer-backend") == "nixl"
        assert after(words, "--model-path") == "/models/dsv4"
        assert words[words.index("numactl") + 3].endswith(f"{out_dir}/venv/bin/python")
        assert "SGLANG_DISAGGREGATION_NIXL_BACKEND=UCX" in words
    assert after(prefill, "--disaggregation-bootstrap-port") == "8998"
    assert "--disaggregation-bootstrap-port" not in decode
    assert router[router.index("--prefill") + 1 : router.index("--prefill") + 3] == [
        "http://127.0.0.1:30000",
        "8998",
    ]
    assert after(router, "--decode") == "http://127.0.0.1:30001"
    assert after(router, "--port") == "8000"
    # the router's second listener, its Prometheus metrics: named, and on the profile's host
    # rather than sglang-router's default of every interface
    assert after(router, "--prometheus-port") == "29000"
    assert after(router, "--prometheus-host") == "127.0.0.1"
    assert "--pd-disaggregation" in router
    pip = next(line for line in lines if "pip install" in line)
    assert "--require-hashes" in pip and "lockfiles/wheels.lock" in pip


def test_router_port_on_the_routers_own_metrics_port_is_refused_on_load(tmp_path: Path) -> None:
    """sglang-router listens for Prometheus on 29000 unless told otherwise, so a router on port
    29000 fails with 'Address already in use' from its own metrics server (seen in CI when a
    free port drawn for the router happened to be 29000). The profile names the clash; moving
    metrics-port (or the router) clears it; the flags cannot be set behind the smoke's back."""
    path = tmp_path / "p.toml"
    path.write_text(_profile_text(**{"port = 8000": "port = 29000"}))
    with pytest.raises(ConfigErrors) as info:
        load_profile(path, tmp_path)
    assert "[router] metrics-port = 29000 is also [router] port" in str(info.value)

    path.write_text(_profile_text(**{"port = 8000": "port = 29000\nmetrics-port = 29001"}))
    profile = load_profile(path, tmp_path)
    assert (profile.router.port, profile.router.metrics_port) == (29000, 29001)
    assert profile.ports()[29001] == "router metrics port"

    path.write_text(_profile_text(**{"port = 8000": 'port = 8000\nargs = ["--prometheus-port=9"]'}))
    with pytest.raises(ConfigErrors, match=r"--prometheus-port is set by the smoke"):
        load_profile(path, tmp_path)


@pytest.mark.parametrize("name", ["A=B", "$(touch pwned)", "1X", "", "a b", "X\n"])
def test_env_names_that_are_not_posix_names_are_refused_on_load(tmp_path: Path, name: str) -> None:
    # Before: "A=B" loaded and the launch died with ValueError (illegal environment variable
    # name); "$(…)" loaded and ran when the --dry-run line was pasted.
    path = tmp_path / "env.toml"
    quoted = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    path.write_text(
        _profile_text(
            **{
                'SGLANG_DSV4_INDEX_TOPK = "1024"': f'SGLANG_DSV4_INDEX_TOPK = "1024"\n"{quoted}" = "x"'
            }
        )
    )
    with pytest.raises(ConfigErrors) as info:
        load_profile(path, tmp_path)
    line = path.read_text().splitlines().index(f'"{quoted}" = "x"') + 1
    assert str(path) in str(info.value)
    assert f"[server] env, key {name!r} (line {line}): not an environment variable name" in str(
        info.value
    )


def test_dry_run_lines_are_safe_to_paste(tmp_path: Path) -> None:
    from sglforge.smoke.commands import LaunchCommand

    pwned = tmp_path / "pwned"
    hostile = f"$(touch {pwned})`touch {pwned}`'\"\n;touch {pwned}"
    command = LaunchCommand(
        "prefill",
        ("printenv", "V"),
        {"V": hostile, f"$(touch {pwned})": "x"},
        tmp_path / "log",
        "http://x",
        "x",
    )
    proc = subprocess.run(
        ["bash", "-c", command.shell()], capture_output=True, text=True, check=False
    )
    assert not pwned.exists(), command.shell()
    assert proc.returncode == 127  # the quoted bad name is a word the shell cannot run
    ok = LaunchCommand("prefill", ("printenv", "V"), {"V": hostile}, tmp_path / "log", "", "")
    proc = subprocess.run(["bash", "-c", ok.shell()], capture_output=True, text=True, check=True)
    assert proc.stdout == hostile + "\n" and not pwned.exists()
