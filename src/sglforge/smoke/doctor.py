"""`sglforge doctor`: check the host against a profile and a wheel set before launching.

Probing and judging are separate: `gather_host_facts()` runs the probes (nvidia-smi, numactl,
nvcc, sockets, the venv's metadata) once into a `HostFacts`; `diagnose()` is a pure function
of (profile, wheel set, facts), so tests feed it any host they like. Each `Finding` says what
is wrong and what to do about it. Errors block the smoke; warnings are advice (lint vs hint).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.findings import ERROR, OK, WARNING, Finding
from sglforge.base.requirements import installed_version
from sglforge.smoke.environment import REQUIRED_FOR_GPU, EnvStack
from sglforge.smoke.profile import SmokeProfile
from sglforge.wheel.wheelset import WheelSet

# CUDA 13.x needs an R580+ driver (CUDA 13.0 release notes: >= 580.65.06 on Linux); minor
# version compatibility lets any 13.x runtime run on it.
MIN_DRIVER_FOR_CUDA13 = (580, 65, 6)
# Upstreams that compile kernels at runtime for the live GPU (upstreams.md §10.4): they need
# nvcc/NVRTC and the CUDA headers on the serving host.
JIT_UPSTREAMS = ("deepgemm", "deep-gemm", "tilelang", "flashinfer")
# Distributions that carry device code; in an existing environment their archs are known only
# when sglforge built them (sglforge-build.json).
DEVICE_CODE_PACKAGES = (
    "sglang-kernel",
    "sgl-kernel",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "sgl-deep-gemm",
    "tilelang",
    "nixl-cu13",
    "nixl-cu12",
    "torch",
)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # "12.0"
    numa_node: int | None  # None: unknown


@dataclass(frozen=True)
class HostFacts:
    """Everything doctor looks at, gathered once (or built by a test)."""

    nvidia_smi_error: str | None  # None when nvidia-smi answered
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    numa_nodes: tuple[int, ...] | None = None  # None: unknown (no sysfs)
    numactl: str | None = None
    nvcc: str | None = None
    nvcc_version: str | None = None  # "13.0"
    cuda_include: str | None = None  # a directory holding cuda_runtime.h
    venv_python: str | None = None  # the smoke venv probed for torch; None: not installed
    torch_version: str | None = None
    busy_ports: dict[int, str] = field(default_factory=dict)  # port -> why it is unusable
    model_exists: bool | None = None  # None: not a local path
    env: EnvStack | None = None  # the existing environment the smoke runs (--python)


# ---------------------------------------------------------------------------------------------
# Probes


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return result.returncode, result.stdout + result.stderr


def gather_host_facts(
    profile: SmokeProfile, venv_python: Path | None, env: EnvStack | None = None
) -> HostFacts:
    gpus: tuple[GpuInfo, ...] = ()
    driver = None
    smi_error = None
    if shutil.which("nvidia-smi") is None:
        smi_error = "nvidia-smi not found on PATH"
    else:
        code, out = _run(
            [
                "nvidia-smi",
                ("--query-gpu=index,name,compute_cap,driver_version,pci.bus_id"),
                "--format=csv,noheader",
            ]
        )
        if code != 0:
            smi_error = f"nvidia-smi failed (exit {code}): {out.strip()[:300]}"
        else:
            gpus, driver = _parse_gpu_query(out, _topo_numa())
    nvcc = shutil.which("nvcc") or _cuda_home_file("bin/nvcc")
    nvcc_version = None
    if nvcc:
        _, out = _run([nvcc, "--version"])
        match = re.search(r"release (\d+\.\d+)", out)
        nvcc_version = match.group(1) if match else None
    model = profile.model
    model_exists = Path(model).exists() if model.startswith(("/", ".", "~")) else None
    torch_version = installed_version("torch", venv_python) if venv_python else None
    if env is not None:
        torch = env.get("torch")
        torch_version = torch.version if torch else None
    return HostFacts(
        nvidia_smi_error=smi_error,
        gpus=gpus,
        driver_version=driver,
        numa_nodes=_numa_nodes(),
        numactl=shutil.which("numactl"),
        nvcc=nvcc,
        nvcc_version=nvcc_version,
        cuda_include=_cuda_include(nvcc),
        venv_python=str(venv_python) if venv_python and venv_python.exists() else None,
        torch_version=torch_version,
        busy_ports=busy_ports(profile.ports(), profile.host),
        model_exists=model_exists,
        env=env,
    )


def _parse_gpu_query(
    out: str, topo: dict[int, int | None]
) -> tuple[tuple[GpuInfo, ...], str | None]:
    gpus, driver = [], None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        index = int(parts[0])
        driver = parts[3]
        numa = topo.get(index) if index in topo else _sysfs_numa(parts[4])
        gpus.append(GpuInfo(index=index, name=parts[1], compute_cap=parts[2], numa_node=numa))
    return tuple(gpus), driver


def parse_topo_numa(text: str) -> dict[int, int | None]:
    """GPU index → NUMA node from `nvidia-smi topo -m` (its "NUMA Affinity" column)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if "NUMA Affinity" in line), None)
    if header is None:
        return {}
    columns = [c.strip() for c in header.split("\t")]
    where = columns.index("NUMA Affinity")
    result: dict[int, int | None] = {}
    for line in lines:
        fields = [c.strip() for c in line.split("\t")]
        match = re.fullmatch(r"GPU(\d+)", fields[0]) if fields else None
        if match and len(fields) > where:
            value = fields[where]
            result[int(match.group(1))] = int(value) if value.isdigit() else None
    return result


def _topo_numa() -> dict[int, int | None]:
    code, out = _run(["nvidia-smi", "topo", "-m"])
    return parse_topo_numa(out) if code == 0 else {}


def _sysfs_numa(bus_id: str) -> int | None:
    # nvidia-smi prints an 8-digit PCI domain ("00000000:17:00.0"); sysfs uses 4 digits.
    path = Path("/sys/bus/pci/devices") / bus_id.lower()[-12:] / "numa_node"
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _numa_nodes() -> tuple[int, ...] | None:
    base = Path("/sys/devices/system/node")
    if not base.is_dir():
        return None
    return tuple(sorted(int(p.name[4:]) for p in base.glob("node[0-9]*")))


def _cuda_home_file(relative: str) -> str | None:
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env) and (Path(os.environ[env]) / relative).exists():
            return str(Path(os.environ[env]) / relative)
    return None


def _cuda_include(nvcc: str | None) -> str | None:
    candidates = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]))
    if nvcc:
        candidates.append(Path(os.path.realpath(nvcc)).parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for root in candidates:
        for include in (root / "include", root / "targets" / "x86_64-linux" / "include"):
            if (include / "cuda_runtime.h").exists():
                return str(include)
    return None


def busy_ports(ports: dict[int, str], host: str) -> dict[int, str]:
    """Ports that cannot be bound now (someone listens, or no permission)."""
    busy = {}
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # Like the servers themselves (uvicorn, http.server): connections of a previous
            # run lingering in TIME_WAIT do not block a new listener; a live listener does.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                busy[port] = exc.strerror or str(exc)
    return busy


# ---------------------------------------------------------------------------------------------
# Judgement (pure)


def diagnose(profile: SmokeProfile, wheelset: WheelSet | None, facts: HostFacts) -> list[Finding]:
    findings: list[Finding] = []
    findings += _ports(profile, facts)
    findings += _numa_binding(profile, facts)
    if profile.requires_gpu:
        findings += _gpus(profile, wheelset, facts)
        findings += _driver(facts)
        findings += _jit_toolchain(wheelset, facts)
        findings += _model(profile, facts)
    else:
        findings.append(
            Finding(
                "gpu",
                OK,
                "GPU, driver, arch, CUDA toolkit and GPU-NUMA checks "
                "skipped: profile sets requires-gpu = false",
            )
        )
    findings += _torch(wheelset, facts)
    if facts.env is not None:
        findings += _environment(profile, facts, facts.env)
    return findings


def _ports(profile: SmokeProfile, facts: HostFacts) -> list[Finding]:
    out = []
    for port, what in sorted(profile.ports().items()):
        if port in facts.busy_ports:
            key = _port_key(profile, port)
            out.append(
                Finding(
                    "ports",
                    ERROR,
                    f"port {port} ({what}) on {profile.host} is already in use "
                    f"({facts.busy_ports[port]})",
                    f"stop whatever listens there (`ss -ltnp 'sport = :{port}'`) or change {key} "
                    f"in {profile.path}",
                )
            )
    if not out:
        out.append(
            Finding(
                "ports",
                OK,
                "all ports free: "
                + ", ".join(f"{p} ({w})" for p, w in sorted(profile.ports().items())),
            )
        )
    return out


def _port_key(profile: SmokeProfile, port: int) -> str:
    if port == profile.router.port:
        return "[router] port"
    if port == profile.router.metrics_port:
        return "[router] metrics-port"
    if port == profile.prefill.bootstrap_port:
        return "[prefill] bootstrap-port"
    return "[prefill] port" if port == profile.prefill.port else "[decode] port"


def _numa_binding(profile: SmokeProfile, facts: HostFacts) -> list[Finding]:
    if not profile.numa_binding:
        return [
            Finding(
                "numa",
                WARNING if profile.requires_gpu else OK,
                "NUMA binding disabled by the profile (numa-binding = false)",
                "unbound servers cross sockets (SYS/UPI) for host memory; bind on "
                "multi-socket hosts"
                if profile.requires_gpu
                else "",
            )
        ]
    out = []
    if facts.numactl is None:
        out.append(
            Finding(
                "numa",
                ERROR,
                "numactl not found, but the profile binds each role to a NUMA node",
                f"install numactl (apt install numactl), or set numa-binding = false "
                f"in {profile.path}",
            )
        )
    for role in profile.roles:
        if role.numa_node is None:
            continue
        if facts.numa_nodes is not None and role.numa_node not in facts.numa_nodes:
            out.append(
                Finding(
                    "numa",
                    ERROR,
                    f"[{role.role}] numa-node = {role.numa_node}, but this host has "
                    f"NUMA nodes {list(facts.numa_nodes)}",
                    f"set [{role.role}] numa-node to one of {list(facts.numa_nodes)} "
                    f"(see `numactl --hardware`)",
                )
            )
        if not profile.requires_gpu:
            continue
        for gpu in facts.gpus:
            if gpu.index not in role.gpus:
                continue
            if gpu.numa_node is None:
                out.append(
                    Finding(
                        "numa",
                        WARNING,
                        f"GPU {gpu.index}: NUMA affinity unknown (nvidia-smi topo -m shows N/A)",
                        "check the BIOS NUMA settings; binding may be wrong",
                    )
                )
            elif gpu.numa_node != role.numa_node:
                out.append(
                    Finding(
                        "numa",
                        ERROR,
                        f"GPU {gpu.index} ({role.role}) is attached to NUMA node {gpu.numa_node}, "
                        f"but [{role.role}] binds to numa-node = {role.numa_node}",
                        f"set [{role.role}] numa-node = {gpu.numa_node} or give [{role.role}] GPUs "
                        f"on node {role.numa_node} (`nvidia-smi topo -m`, column NUMA Affinity)",
                    )
                )
    if not out:
        out.append(
            Finding(
                "numa",
                OK,
                ", ".join(
                    f"{r.role}: GPUs {list(r.gpus)} on node {r.numa_node}" for r in profile.roles
                ),
            )
        )
    return out


def arch_runs_on(arch: str, compute_cap: str) -> bool:
    """Does code for `arch` run on a GPU of `compute_cap` ("12.0")?

    sm_XYa: exactly X.Y (arch-specific features). sm_XYf: the family, same major, minor >= Y.
    sm_XY: same major, minor >= Y (SASS compatibility). compute_XY: PTX, JIT on any >= X.Y.
    """
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch)
    cc = re.fullmatch(r"(\d+)\.(\d+)", compute_cap.strip())
    if not match or not cc:
        return False
    kind, major, minor, suffix = (
        match.group(1),
        int(match.group(2)),
        int(match.group(3)),
        match.group(4),
    )
    gpu = (int(cc.group(1)), int(cc.group(2)))
    if kind == "compute" and not suffix:
        return gpu >= (major, minor)
    if suffix == "a":
        return gpu == (major, minor)
    return gpu[0] == major and gpu[1] >= minor


# The shipped profile without GPUs (issue 33 item 14): stand-in servers and router.
LAPTOP = (
    "the demo's `laptop` (demo/project/profiles/laptop.toml): after `nox -s demo`, "
    "`nox -s smoke -- --project build/demo/project --profile laptop`"
)


def _gpus(profile: SmokeProfile, wheelset: WheelSet | None, facts: HostFacts) -> list[Finding]:
    if facts.nvidia_smi_error:
        return [
            Finding(
                "gpu",
                ERROR,
                f"no NVIDIA GPU visible: {facts.nvidia_smi_error}",
                "run the smoke on the GPU host with the NVIDIA driver installed; for a "
                f"plumbing run without GPUs use a profile with requires-gpu = false: {LAPTOP}",
            )
        ]
    out = []
    present = {g.index: g for g in facts.gpus}
    wanted = sorted(g for role in profile.roles for g in role.gpus)
    missing = [g for g in wanted if g not in present]
    if missing:
        out.append(
            Finding(
                "gpu",
                ERROR,
                f"profile uses GPUs {missing}, host has {sorted(present) or 'none'}",
                f"change [prefill]/[decode] gpus in {profile.path}",
            )
        )
    if wheelset is None:
        return out
    for wheel in wheelset.wheels:
        archs = wheel.provenance.cuda_archs
        if not archs:
            continue
        for index in wanted:
            gpu = present.get(index)
            if gpu is None:
                continue
            if not any(arch_runs_on(a, gpu.compute_cap) for a in archs):
                sm = "sm_" + gpu.compute_cap.replace(".", "")
                out.append(
                    Finding(
                        "arch",
                        ERROR,
                        f"{wheel.file.name} has device code for {', '.join(archs)} only; GPU "
                        f"{index} ({gpu.name}) is compute capability {gpu.compute_cap} ({sm}) — "
                        "its kernels would fail with 'no kernel image is available'",
                        f"add {sm}a to cuda-archs in the recipe for {wheel.name} and rebuild "
                        "(`nox -s build`)",
                    )
                )
                break
    if not out:
        ccs = sorted({g.compute_cap for g in facts.gpus if g.index in wanted})
        out.append(
            Finding(
                "gpu",
                OK,
                f"GPUs {wanted} compute capability {', '.join(ccs)}; "
                f"wheel archs {sorted(wheelset.archs()) if wheelset else '?'}",
            )
        )
    return out


def _driver(facts: HostFacts) -> list[Finding]:
    if facts.nvidia_smi_error or not facts.driver_version:
        return []
    parts = tuple(int(p) for p in re.findall(r"\d+", facts.driver_version)[:3])
    need = ".".join(str(p) for p in MIN_DRIVER_FOR_CUDA13)
    if parts < MIN_DRIVER_FOR_CUDA13:
        return [
            Finding(
                "driver",
                ERROR,
                f"driver {facts.driver_version} is too old for CUDA 13 (needs >= {need})",
                f"install an NVIDIA driver >= {need} (R580 or newer)",
            )
        ]
    return [Finding("driver", OK, f"driver {facts.driver_version} supports CUDA 13")]


def _jit_toolchain(wheelset: WheelSet | None, facts: HostFacts) -> list[Finding]:
    if wheelset is None:
        return []
    jit = sorted(
        w.name
        for w in wheelset.wheels
        if any(u in w.provenance.upstream.lower() for u in JIT_UPSTREAMS)
    )
    if not jit:
        return []
    cuda = next(
        (
            w.provenance.toolchain.get("cuda")
            for w in wheelset.wheels
            if w.provenance.toolchain.get("cuda")
        ),
        None,
    )
    out = []
    fix = "install the CUDA 13 toolkit (nvcc and headers) and put its bin/ on PATH or set CUDA_HOME"
    if facts.nvcc is None:
        out.append(
            Finding(
                "cuda-toolkit",
                ERROR,
                f"nvcc not found; {', '.join(jit)} compile kernels at runtime for the live GPU",
                fix,
            )
        )
    elif cuda and facts.nvcc_version and facts.nvcc_version.split(".")[0] != cuda.split(".")[0]:
        out.append(
            Finding(
                "cuda-toolkit",
                ERROR,
                f"nvcc {facts.nvcc_version} at {facts.nvcc}, "
                f"but the wheels were built with CUDA {cuda}",
                fix,
            )
        )
    if facts.cuda_include is None:
        out.append(
            Finding(
                "cuda-toolkit",
                ERROR,
                "CUDA headers (cuda_runtime.h) not found; "
                f"{', '.join(jit)} need them to JIT-compile",
                fix,
            )
        )
    if not out:
        out.append(
            Finding(
                "cuda-toolkit",
                OK,
                f"nvcc {facts.nvcc_version} and headers in "
                f"{facts.cuda_include} for JIT upstreams ({', '.join(jit)})",
            )
        )
    return out


def _model(profile: SmokeProfile, facts: HostFacts) -> list[Finding]:
    if facts.model_exists is False:
        return [
            Finding(
                "model",
                ERROR,
                f"model path {profile.model} does not exist",
                "pass --model PATH or set model in the profile",
            )
        ]
    return []


def _torch(wheelset: WheelSet | None, facts: HostFacts) -> list[Finding]:
    if wheelset is None:
        return []
    wanted = wheelset.torch_requirements()
    if not wanted:
        return [Finding("torch", OK, "no wheel is bound to a torch ABI")]
    versions = sorted(set(wanted.values()))
    if len(versions) > 1:
        return [
            Finding(
                "torch",
                ERROR,
                "wheels are bound to different torch versions: "
                + ", ".join(f"{n} needs {v}" for n, v in sorted(wanted.items())),
                "rebuild all torch-bound wheels against the torch in lockfiles/toolchain.toml",
            )
        ]
    need = versions[0]
    names = ", ".join(sorted(wanted))
    if facts.venv_python is None:
        return [
            Finding(
                "torch",
                WARNING,
                f"smoke venv not installed yet; {names} need torch=={need}",
                "the smoke checks this again after installing",
            )
        ]
    if facts.torch_version is None:
        return [
            Finding(
                "torch",
                ERROR,
                f"torch is not installed in the smoke venv "
                f"({facts.venv_python}); {names} need torch=={need}",
                f"pin torch=={need} (cu130 build) in lockfiles/wheels.lock",
            )
        ]
    installed_public = facts.torch_version.split("+")[0]
    if installed_public != need.split("+")[0]:
        return [
            Finding(
                "torch",
                ERROR,
                f"installed torch {facts.torch_version} but {names} "
                f"were built against torch {need}; importing them fails with "
                "'undefined symbol' (libtorch ABI)",
                f"pin torch=={need} in lockfiles/wheels.lock, or rebuild the wheels "
                f"against torch {facts.torch_version}",
            )
        ]
    return [Finding("torch", OK, f"torch {facts.torch_version} matches {names}")]


def _environment(profile: SmokeProfile, facts: HostFacts, env: EnvStack) -> list[Finding]:
    """The existing environment (--python): packages, device code, torch/CUDA, NIXL plugin."""
    out: list[Finding] = []
    where = f"{env.python} (Python {env.python_version})"
    if profile.requires_gpu:
        missing = [n for n in REQUIRED_FOR_GPU if env.get(n) is None]
        if missing:
            out.append(
                Finding(
                    "environment",
                    ERROR,
                    f"{', '.join(missing)} not installed for {where}",
                    "pass the interpreter of the serving stack, or put "
                    "the stack on PYTHONPATH before running the smoke",
                )
            )
    for package in env.packages:
        if package.problem:
            out.append(
                Finding(
                    "environment",
                    WARNING,
                    f"{package.name}: unreadable sglforge provenance: {package.problem}",
                )
            )
    out += _environment_archs(profile, facts, env)
    out += _environment_torch(profile, facts, env)
    out += _environment_nixl(profile, env)
    built = [f"{p.name} {p.version}" for p in env.built_by_sglforge()]
    out.append(
        Finding(
            "environment",
            OK,
            f"{where}: {len(env.packages)} stack package(s); "
            f"built by sglforge: {', '.join(built) or 'none'}",
        )
    )
    return out


def _environment_archs(profile: SmokeProfile, facts: HostFacts, env: EnvStack) -> list[Finding]:
    if not profile.requires_gpu or facts.nvidia_smi_error:
        return []
    present = {g.index: g for g in facts.gpus}
    wanted = sorted({g for role in profile.roles for g in role.gpus})
    out = []
    for package in env.built_by_sglforge():
        archs = package.provenance.cuda_archs if package.provenance else ()
        for index in wanted:
            gpu = present.get(index)
            if not archs or gpu is None or any(arch_runs_on(a, gpu.compute_cap) for a in archs):
                continue
            sm = "sm_" + gpu.compute_cap.replace(".", "")
            out.append(
                Finding(
                    "arch",
                    ERROR,
                    f"{package.name} {package.version} (built by sglforge) has device code for "
                    f"{', '.join(archs)} only; GPU {index} ({gpu.name}) is compute capability "
                    f"{gpu.compute_cap} ({sm}) — its kernels would fail with 'no kernel image is "
                    "available'",
                    f"add {sm}a to cuda-archs in the recipe for {package.name} and rebuild, or use a "
                    "stack built for this GPU",
                )
            )
            break
    unknown = sorted(
        p.name
        for p in env.packages
        if p.provenance is None and p.name.lower().replace("_", "-") in DEVICE_CODE_PACKAGES
    )
    if unknown:
        ccs = sorted({present[i].compute_cap for i in wanted if i in present})
        out.append(
            Finding(
                "arch",
                WARNING,
                f"device code of {', '.join(unknown)} is not recorded (not built by sglforge); "
                f"not checked against compute capability {', '.join(ccs) or '?'}",
                "a missing arch shows at launch as 'no kernel image is available' in the logs",
            )
        )
    if not out:
        out.append(
            Finding("arch", OK, f"device code of sglforge-built packages runs on GPUs {wanted}")
        )
    return out


def _environment_torch(profile: SmokeProfile, facts: HostFacts, env: EnvStack) -> list[Finding]:
    torch = env.get("torch")
    bound = {
        p.name: p.provenance.requires_torch
        for p in env.built_by_sglforge()
        if p.provenance and p.provenance.requires_torch
    }
    if torch is None:
        if not bound:
            return []
        return [
            Finding(
                "torch",
                ERROR,
                f"torch is not installed for {env.python}; "
                f"{', '.join(sorted(bound))} need torch "
                f"{', '.join(sorted(set(bound.values())))}",
            )
        ]
    out = []
    public = torch.version.split("+")[0]
    for name, need in sorted(bound.items()):
        if need.split("+")[0] != public:
            out.append(
                Finding(
                    "torch",
                    ERROR,
                    f"installed torch {torch.version} but {name} was "
                    f"built against torch {need}; importing it fails with 'undefined "
                    "symbol' (libtorch ABI)",
                    f"rebuild {name} against torch {public} (toolchain.toml)",
                )
            )
    cuda = env.torch_cuda
    for package in env.built_by_sglforge():
        built_cuda = package.provenance.toolchain.get("cuda") if package.provenance else None
        if (
            cuda
            and built_cuda
            and package.provenance
            and package.provenance.cuda_archs
            and built_cuda.split(".")[0] != cuda.split(".")[0]
        ):
            out.append(
                Finding(
                    "torch",
                    ERROR,
                    f"torch {torch.version} is built for CUDA {cuda}, "
                    f"{package.name} for CUDA {built_cuda}",
                )
            )
    jit = sorted(p.name for p in env.packages if any(u in p.name.lower() for u in JIT_UPSTREAMS))
    if profile.requires_gpu and jit:
        if facts.nvcc is None:
            out.append(
                Finding(
                    "cuda-toolkit",
                    ERROR,
                    f"nvcc not found; {', '.join(jit)} compile kernels at runtime for the live GPU",
                    "put the CUDA toolkit's bin/ on PATH or set CUDA_HOME",
                )
            )
        elif cuda and facts.nvcc_version and facts.nvcc_version.split(".")[0] != cuda.split(".")[0]:
            out.append(
                Finding(
                    "cuda-toolkit",
                    WARNING,
                    f"nvcc {facts.nvcc_version} but torch "
                    f"is built for CUDA {cuda}; JIT kernels ({', '.join(jit)}) may "
                    "not load",
                )
            )
    if not out:
        out.append(
            Finding(
                "torch",
                OK,
                f"torch {torch.version} (CUDA {cuda or '?'})"
                + (f" matches {', '.join(sorted(bound))}" if bound else ""),
            )
        )
    return out


def _environment_nixl(profile: SmokeProfile, env: EnvStack) -> list[Finding]:
    if profile.backend != "nixl" or not profile.requires_gpu:
        return []
    plugin = profile.server.env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX")
    if env.nixl_module is None:
        return [
            Finding(
                "nixl",
                ERROR,
                f'backend = "nixl" but no NIXL package (nixl-cu13) is installed for {env.python}',
                "install nixl-cu13 into the environment (or on PYTHONPATH)",
            )
        ]
    found = [p for p in env.nixl_plugins if os.path.basename(p).startswith(f"libplugin_{plugin}")]
    if not found:
        seen = ", ".join(os.path.basename(p) for p in env.nixl_plugins) or "none"
        return [
            Finding(
                "nixl",
                WARNING,
                f"{env.nixl_module}: no libplugin_{plugin}*.so beside the package (found: {seen})",
                "SGLANG_DISAGGREGATION_NIXL_BACKEND names the plugin NIXL loads; the "
                "decode side fails at the first KV transfer without it",
            )
        ]
    return [Finding("nixl", OK, f"{env.nixl_module} with plugin {found[0]}")]
