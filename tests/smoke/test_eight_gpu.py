"""The deployment's own layout on eight GPUs (issue 25), as far as a GPU-less machine takes it:
the committed h200-pd-8gpu profile, its dry run, the doctor on an 8-GPU two-socket H200
topology, a tiny model whose heads split four ways, and eight server processes (two TP4
roles: a stand-in server plus three rank processes each) behind the real router, torn down."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.smoke import doctor
from sglforge.smoke.doctor import ERROR, GpuInfo, HostFacts, diagnose
from sglforge.smoke.profile import load_profile

from .conftest import SmokeProject
from .test_smoke_run import _assert_nothing_survives

REPO = Path(__file__).resolve().parents[2]
PROFILE_PATH = REPO / "profiles" / "h200-pd-8gpu.toml"

# `nvidia-smi topo -m` as an 8x H200 HGX host prints it (NVSwitch: NV18 between every pair;
# two sockets, GPUs 0-3 on NUMA node 0, 4-7 on node 1).
TOPO = "\n".join(
    ["\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    + [
        f"GPU{i}\t"
        + "\t".join(" X " if j == i else "NV18" for j in range(8))
        + f"\t{'0-47' if i < 4 else '48-95'}\t{0 if i < 4 else 1}\t\tN/A"
        for i in range(8)
    ]
    + ["", "Legend:", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks"]
)


def _host(numa: dict[int, int | None]) -> HostFacts:
    return HostFacts(
        nvidia_smi_error=None,
        gpus=tuple(GpuInfo(i, "NVIDIA H200", "9.0", numa[i]) for i in range(8)),
        driver_version="580.82.07",
        numa_nodes=(0, 1),
        numactl="/usr/bin/numactl",
        nvcc="/usr/local/cuda/bin/nvcc",
        nvcc_version="13.0",
        cuda_include="/usr/local/cuda/include",
        venv_python="/v/bin/python",
        torch_version="2.11.0+cu130",
        busy_ports={},
        model_exists=None,
    )


def test_committed_profile_is_the_target_layout_on_h200() -> None:
    profile = load_profile(PROFILE_PATH, REPO)
    target = load_profile(REPO / "profiles" / "dsv4-flash-pd.toml", REPO)
    for mine, theirs in zip(profile.roles, target.roles):
        assert (mine.gpus, mine.tp, mine.numa_node, mine.port) == (
            theirs.gpus,
            theirs.tp,
            theirs.numa_node,
            theirs.port,
        )
    assert profile.backend == target.backend == "nixl" and profile.numa_binding
    assert profile.tiny_model and profile.tiny_heads == 4
    assert profile.colocated.gpus == (0, 1, 2, 3) and profile.colocated.tp == 4
    assert profile.colocated.after_pair


def test_dry_run_binds_each_tp4_role_and_sizes_the_tiny_model(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglforge",
            "--project",
            str(REPO),
            "smoke",
            "--profile",
            "h200-pd-8gpu",
            "--dry-run",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    prefill = next(x for x in lines if "--disaggregation-mode prefill" in x)
    decode = next(x for x in lines if "--disaggregation-mode decode" in x)
    assert prefill.startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 ")
    assert "numactl --cpunodebind=0 --membind=0" in prefill and "--tp 4" in prefill
    assert decode.startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 ")
    assert "numactl --cpunodebind=1 --membind=1" in decode and "--tp 4" in decode
    assert "tiny-model" in result.stdout and "--heads 4" in result.stdout


def test_doctor_accepts_the_h200_topology_and_names_a_host_wired_otherwise() -> None:
    profile = load_profile(PROFILE_PATH, REPO)
    numa = doctor.parse_topo_numa(TOPO)
    assert numa == {i: 0 if i < 4 else 1 for i in range(8)}
    assert [f for f in diagnose(profile, None, _host(numa)) if f.level == ERROR] == []
    swapped = {i: 1 - node for i, node in numa.items()}  # sockets cabled the other way round
    errors = [f.message for f in diagnose(profile, None, _host(swapped)) if f.level == ERROR]
    assert (
        "GPU 0 (prefill) is attached to NUMA node 1, but [prefill] binds to numa-node = 0" in errors
    )
    assert (
        "GPU 7 (decode) is attached to NUMA node 0, but [decode] binds to numa-node = 1" in errors
    )


def test_tiny_model_heads_must_split_across_each_tp(smoke_project: SmokeProject) -> None:
    four = {
        "prefill": {
            "gpus": [0, 1, 2, 3],
            "tp": 4,
            "port": smoke_project.ports["prefill"],
            "bootstrap-port": smoke_project.ports["bootstrap"],
        },
        "decode": {"gpus": [4, 5, 6, 7], "tp": 4, "port": smoke_project.ports["decode"]},
    }
    path = smoke_project.write_profile(top_extra={"model": "tiny", **four})
    with pytest.raises(SglforgeError) as info:
        load_profile(path, smoke_project.root)
    assert (
        "[prefill] tp = 4, but the tiny model has 2 attention head(s) and tensor "
        "parallelism splits them 4 ways; set tiny-heads to a multiple of 4"
    ) in str(info.value)
    path = smoke_project.write_profile(top_extra={"model": "tiny", "tiny-heads": 4, **four})
    assert load_profile(path, smoke_project.root).tiny_heads == 4
    path = smoke_project.write_profile(top_extra={"tiny-heads": 4})  # not the generated model
    with pytest.raises(SglforgeError, match='tiny-heads.*only for model = "tiny"'):
        load_profile(path, smoke_project.root)


def test_eight_server_processes_serve_and_are_all_torn_down(smoke_project: SmokeProject) -> None:
    ranks = {"STANDIN_SPAWN_CHILD": "3"}  # the server + 3 more processes: four per TP4 role
    smoke_project.write_profile(
        top_extra={
            "prefill": {
                "gpus": [0, 1, 2, 3],
                "tp": 4,
                "port": smoke_project.ports["prefill"],
                "bootstrap-port": smoke_project.ports["bootstrap"],
                "env": ranks,
            },
            "decode": {
                "gpus": [4, 5, 6, 7],
                "tp": 4,
                "port": smoke_project.ports["decode"],
                "env": ranks,
            },
        }
    )
    result = smoke_project.smoke("--profile", "standin", "--out", str(smoke_project.run_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    report = smoke_project.report()
    assert report["result"] == "pass" and report["teardown"]["survivors"] == {}
    logs = smoke_project.run_dir / "logs"
    prefill, decode = (logs / "prefill.log").read_text(), (logs / "decode.log").read_text()
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in prefill and "tp=4" in prefill
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in decode and "tp=4" in decode
    assert prefill.count("spawned child") == decode.count("spawned child") == 3
    _assert_nothing_survives(smoke_project)  # every group and every spawned process is gone


def test_tiny_model_with_four_heads_has_the_shape_tp4_needs(tmp_path: Path) -> None:
    from sglforge.smoke import tinymodel

    assert tinymodel.shape()["num_attention_heads"] == 2  # the H200 1-/2-GPU runs' shape
    dims = tinymodel.shape(4)
    assert (dims["num_attention_heads"], dims["num_key_value_heads"], dims["head_dim"]) == (
        4,
        2,
        64,
    )
    with pytest.raises(SglforgeError, match="--heads 0"):
        tinymodel.shape(0)
    if tinymodel.missing_requirements():
        pytest.skip("torch/transformers not here: the files are written on the GPU host")
    import json

    tinymodel.write_tiny_model(tmp_path / "m", heads=4)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
