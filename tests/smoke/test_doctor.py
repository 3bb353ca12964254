"""Doctor findings over injected host facts (pure), plus the real probes on this GPU-less
machine."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.smoke import doctor
from sglforge.smoke.doctor import ERROR, GpuInfo, HostFacts, arch_runs_on, diagnose
from sglforge.smoke.profile import load_profile
from sglforge.wheel.provenance import Provenance
from sglforge.wheel.wheelset import Wheel, WheelSet

REPO = Path(__file__).resolve().parents[2]
PROFILE = load_profile(REPO / "profiles" / "dsv4-flash-pd.toml", REPO)


def _wheel(name: str, upstream: str, archs: list[str], torch: str | None) -> Wheel:
    prov = Provenance(
        upstream=upstream,
        commit="a" * 40,
        version="1.0",
        cuda_archs=tuple(archs),
        requires_torch=torch,
        toolchain={"cuda": "13.0"},
    )
    return Wheel(
        file=Path(f"/w/{name}-1.0-py3-none-any.whl"),
        name=name,
        version="1.0",
        sha256="0" * 64,
        provenance=prov,
    )


WHEELS = WheelSet(
    wheels=(
        _wheel("sglang-kernel", "sglang", ["sm_120a"], "2.13.0"),
        _wheel("flashinfer-python", "flashinfer", [], None),
    ),
    lock=(),
    lock_path=Path("/l"),
    wheels_dir=Path("/w"),
)

# The target host as it should be: 8x cc 12.0, GPUs 0-3 on node 0, 4-7 on node 1.
GOOD_HOST = HostFacts(
    nvidia_smi_error=None,
    gpus=tuple(
        GpuInfo(i, "NVIDIA RTX PRO 6000 Blackwell", "12.0", 0 if i < 4 else 1) for i in range(8)
    ),
    driver_version="580.82.07",
    numa_nodes=(0, 1),
    numactl="/usr/bin/numactl",
    nvcc="/usr/local/cuda/bin/nvcc",
    nvcc_version="13.0",
    cuda_include="/usr/local/cuda/include",
    venv_python="/v/bin/python",
    torch_version="2.13.0+cu130",
    busy_ports={},
    model_exists=True,
)


def _errors(findings: list[doctor.Finding]) -> list[doctor.Finding]:
    return [f for f in findings if f.level == ERROR]


def test_good_host_has_no_errors() -> None:
    findings = diagnose(PROFILE, WHEELS, GOOD_HOST)
    assert _errors(findings) == []
    assert {f.check for f in findings} >= {
        "ports",
        "numa",
        "gpu",
        "driver",
        "cuda-toolkit",
        "torch",
    }


def test_mismatched_torch_is_an_error_with_a_fix() -> None:
    facts = dataclasses.replace(GOOD_HOST, torch_version="2.12.1+cu130")
    [finding] = _errors(diagnose(PROFILE, WHEELS, facts))
    assert finding.check == "torch"
    assert (
        "installed torch 2.12.1+cu130 but sglang-kernel were built against torch 2.13.0"
        in finding.message
    )
    assert "torch==2.13.0" in finding.fix
    missing = dataclasses.replace(GOOD_HOST, torch_version=None)
    [finding] = _errors(diagnose(PROFILE, WHEELS, missing))
    assert "torch is not installed" in finding.message


def test_missing_arch_is_an_error_naming_wheel_gpu_and_fix() -> None:
    wheels = dataclasses.replace(
        WHEELS, wheels=(_wheel("sglang-kernel", "sglang", ["sm_90a", "sm_100a"], "2.13.0"),)
    )
    [finding] = _errors(diagnose(PROFILE, wheels, GOOD_HOST))
    assert finding.check == "arch"
    assert "sm_90a, sm_100a only" in finding.message
    assert "compute capability 12.0 (sm_120)" in finding.message
    assert "add sm_120a to cuda-archs" in finding.fix


@pytest.mark.parametrize(
    ("arch", "cc", "runs"),
    [
        ("sm_120a", "12.0", True),
        ("sm_120a", "12.1", False),
        ("sm_100a", "12.0", False),
        ("sm_120f", "12.1", True),
        ("sm_120", "12.0", True),
        ("sm_90", "12.0", False),
        ("compute_90", "12.0", True),
        ("compute_120", "10.0", False),
        ("bogus", "12.0", False),
    ],
)
def test_arch_compatibility_rules(arch: str, cc: str, runs: bool) -> None:
    assert arch_runs_on(arch, cc) is runs


def test_wrong_numa_affinity_and_missing_numactl() -> None:
    gpus = list(GOOD_HOST.gpus)
    gpus[5] = dataclasses.replace(gpus[5], numa_node=0)  # GPU 5 hangs off socket 0
    facts = dataclasses.replace(GOOD_HOST, gpus=tuple(gpus), numactl=None)
    errors = _errors(diagnose(PROFILE, WHEELS, facts))
    messages = [f.message for f in errors]
    assert "numactl not found, but the profile binds each role to a NUMA node" in messages
    numa = next(f for f in errors if "GPU 5" in f.message)
    assert (
        "GPU 5 (decode) is attached to NUMA node 0, but [decode] binds to numa-node = 1"
        == numa.message
    )
    assert "nvidia-smi topo -m" in numa.fix


def test_old_driver_no_gpu_missing_nvcc_busy_port() -> None:
    facts = dataclasses.replace(
        GOOD_HOST,
        driver_version="570.124.06",
        nvcc=None,
        busy_ports={8000: "Address already in use"},
    )
    errors = {f.check: f for f in _errors(diagnose(PROFILE, WHEELS, facts))}
    assert "too old for CUDA 13" in errors["driver"].message
    assert "flashinfer-python compile kernels at runtime" in errors["cuda-toolkit"].message
    assert "port 8000 (router port)" in errors["ports"].message
    assert "[router] port" in errors["ports"].fix
    no_gpu = dataclasses.replace(
        GOOD_HOST, nvidia_smi_error="nvidia-smi not found on PATH", gpus=()
    )
    [finding] = _errors(diagnose(PROFILE, WHEELS, no_gpu))
    assert finding.check == "gpu" and "nvidia-smi not found" in finding.message


def test_parse_nvidia_smi_topo_numa_column() -> None:
    header = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [
        "GPU0\t X \tNODE\tSYS\t0-31\t0\t\tN/A",
        "GPU1\tNODE\t X \tSYS\t0-31\t0\t\tN/A",
        "GPU2\tSYS\tSYS\t X \t32-63\t1\t\tN/A",
        "",
        "Legend:",
        "  X    = Self",
    ]
    assert doctor.parse_topo_numa("\n".join([header, *rows])) == {0: 0, 1: 0, 2: 1}


@pytest.mark.skipif(
    shutil.which("nvidia-smi", path="/usr/bin:/bin") is not None,
    reason="this host has nvidia-smi; the test probes a GPU-less host",
)
def test_doctor_verb_on_this_gpu_less_host(tmp_path: Path) -> None:
    """Real probes: no nvidia-smi here, so doctor reports it and exits 1 without a traceback."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglforge",
            "--project",
            str(REPO),
            "doctor",
            "--wheels-dir",
            str(tmp_path),
            "--lock",
            str(tmp_path / "none.lock"),
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[error  ] gpu: no NVIDIA GPU visible: nvidia-smi not found on PATH" in result.stdout
    assert "fix: run the smoke on the GPU host" in result.stdout
    assert "arch and torch checks skipped" in result.stderr
    assert "Traceback" not in result.stderr
