"""A host's GPU ↔ NUMA ↔ NIC topology, parsed from a capture (hostcapture.py).

Pure text → `Topology`: no probes run here, so recorded captures (tests/data/topology/) and a
live host go through the same code. A capture that does not parse is an `SglforgeError`
naming the capture's file and line and saying what was expected there, never a traceback;
names that reach a profile (NIC and device names) are checked against a strict pattern first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglforge.base.errors import SglforgeError
from sglforge.smoke import hostcapture as hc
from sglforge.smoke.hostcapture import HostCapture

# nvidia-smi topo -m's link kinds, nearest first (its legend). NV# (NVLink) is GPU↔GPU only.
LINK_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}  # SOC: old SYS
DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_GPUS = 1024
MAX_NODES = 1024
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "")


@dataclass(frozen=True)
class Gpu:
    index: int
    bus_id: str
    name: str
    compute_cap: str
    memory_mib: int | None
    numa_node: int | None  # None: unknown (topo N/A and no sysfs value)


@dataclass(frozen=True)
class Nic:
    name: str  # mlx5_0 (RDMA) or eno1 (Ethernet)
    rdma: bool
    numa_node: int | None
    ports: tuple[int, ...] = ()  # RDMA: ACTIVE ports (UCX names a device mlx5_0:1)
    link_to_gpu: dict[int, str] = field(default_factory=dict)  # GPU index -> PIX/PXB/…/SYS


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: str  # "0-31" (a cpulist), "" when the node has none
    memory_mb: int | None


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...]
    gpu_links: dict[tuple[int, int], str]  # (i, j) -> "NV18", "PIX", "SYS", …
    nics: tuple[Nic, ...]
    numa_nodes: tuple[NumaNode, ...]
    numactl: bool  # `numactl -H` answered: the smoke can bind with it
    ucx: tuple[tuple[str, str], ...] | None  # (transport, device) from ucx_info -d; None: absent
    busy_ports: dict[int, str]
    probed_ports: tuple[int, ...]  # empty: the capture has no port probe (all assumed free)
    origin: str

    def gpus_by_node(self) -> dict[int | None, list[Gpu]]:
        groups: dict[int | None, list[Gpu]] = {}
        for gpu in sorted(self.gpus, key=lambda g: g.index):
            groups.setdefault(gpu.numa_node, []).append(gpu)
        return groups

    def nvlink(self) -> bool:
        return any(kind.startswith("NV") for kind in self.gpu_links.values())


def _fail(capture: HostCapture, name: str, line: int | None, message: str) -> SglforgeError:
    at = f" line {line}" if line else ""
    return SglforgeError(
        f"{capture.place(name)}{at}: {message}",
        hint="re-record it with `sglforge profile --from-host --save-facts PATH` on the host",
    )


def parse_topology(capture: HostCapture) -> Topology:
    """Every capture → one `Topology` (a missing optional capture is None/empty)."""
    sysfs = _parse_sysfs(capture)
    matrix = _parse_matrix(capture)
    gpus = _parse_gpu_query(capture, matrix, sysfs)
    nodes = _parse_numa(capture, sysfs)
    ports, probed = _parse_ports(capture)
    return Topology(
        gpus=gpus,
        gpu_links=matrix.gpu_links,
        nics=_nics(capture, matrix, sysfs),
        numa_nodes=nodes,
        numactl=capture.get(hc.NUMACTL) is not None,
        ucx=_parse_ucx(capture),
        busy_ports=ports,
        probed_ports=probed,
        origin=(capture.get(hc.ORIGIN) or f"capture {capture.source}").strip(),
    )


# ---------------------------------------------------------------------------------------------
# nvidia-smi topo -m


@dataclass(frozen=True)
class _Matrix:
    gpu_numa: dict[int, int | None]
    gpu_links: dict[tuple[int, int], str]
    nic_links: dict[str, dict[int, str]]  # NIC name (from the legend) -> GPU -> link kind


def _parse_matrix(capture: HostCapture) -> _Matrix:
    text = capture.get(hc.TOPO)
    if text is None:
        return _Matrix({}, {}, {})
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if "GPU0" in line.split("\t")[:2]), None)
    if header_at is None:
        raise _fail(capture, hc.TOPO, 1, "no header row with GPU0 (is this `nvidia-smi topo -m`?)")
    columns = [c.strip() for c in lines[header_at].split("\t")]
    legend = _nic_legend(capture, lines)
    gpu_numa, gpu_links, nic_links = {}, {}, {}
    for number, line in enumerate(lines[header_at + 1 :], header_at + 2):
        cells = [c.strip() for c in line.split("\t")]
        match = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if not match:
            continue
        gpu = int(match.group(1))
        if len(cells) < len(columns) - 1:
            raise _fail(
                capture,
                hc.TOPO,
                number,
                f"row GPU{gpu} has {len(cells)} cells, the header {len(columns)}",
            )
        for column, cell in zip(columns[1:], cells[1:]):
            if column in AFFINITY_COLUMNS:
                continue
            kind = _link_kind(capture, number, column, cell)
            if re.fullmatch(r"GPU\d+", column):
                if kind != "X":
                    gpu_links[(gpu, int(column[3:]))] = kind
            else:  # NIC<n> (named in the legend) or, from older drivers, the device itself
                nic = legend.get(column) or _device_name(capture, hc.TOPO, header_at + 1, column)
                nic_links.setdefault(nic, {})[gpu] = kind
        gpu_numa[gpu] = _numa_cell(capture, number, columns, cells)
    if not gpu_numa:
        raise _fail(capture, hc.TOPO, header_at + 1, "a header but no GPU rows under it")
    return _Matrix(gpu_numa, gpu_links, nic_links)


def _link_kind(capture: HostCapture, line: int, column: str, cell: str) -> str:
    if cell in LINK_RANK or re.fullmatch(r"NV\d+", cell):
        return cell
    raise _fail(
        capture,
        hc.TOPO,
        line,
        f"column {column[:20]}: {cell[:20]!r} is not a link kind ({', '.join(LINK_RANK)}, NV#)",
    )


def _numa_cell(capture: HostCapture, line: int, columns: list[str], cells: list[str]):
    if "NUMA Affinity" not in columns:
        return None
    value = (
        cells[columns.index("NUMA Affinity")] if len(cells) > columns.index("NUMA Affinity") else ""
    )
    if value.isdigit() and int(value) < MAX_NODES:
        return int(value)
    if value in ("N/A", "", "-1") or re.fullmatch(r"\d+(?:[-,]\d+)+", value):
        return None  # unknown, or several nodes (no one node to bind to)
    raise _fail(capture, hc.TOPO, line, f"NUMA Affinity {value[:20]!r} is not a node number")


def _nic_legend(capture: HostCapture, lines: list[str]) -> dict[str, str]:
    legend = {}
    for number, line in enumerate(lines, 1):
        match = re.fullmatch(r"\s*(NIC\d+):\s*(\S+)\s*", line)
        if match:
            legend[match.group(1)] = _device_name(capture, hc.TOPO, number, match.group(2))
    return legend


def _device_name(capture: HostCapture, name: str, line: int, value: str) -> str:
    if not DEVICE_NAME.fullmatch(value):
        raise _fail(capture, name, line, f"{value[:40]!r} is not a device name")
    return value


# ---------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=index,pci.bus_id,name,compute_cap,memory.total --format=csv,noheader


def _parse_gpu_query(capture: HostCapture, matrix: _Matrix, sysfs: dict) -> tuple[Gpu, ...]:
    text = capture.get(hc.GPU_QUERY)
    if text is None:
        return tuple(Gpu(i, "", "", "", None, n) for i, n in sorted(matrix.gpu_numa.items()))
    gpus = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit() or int(parts[0]) >= MAX_GPUS:
            raise _fail(
                capture,
                hc.GPU_QUERY,
                number,
                f"expected '{hc.GPU_FIELDS}' (5 fields, a GPU index first), got {line[:80]!r}",
            )
        index, bus, name, cc, memory = int(parts[0]), parts[1].lower(), parts[2], parts[3], parts[4]
        if not re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bus):
            raise _fail(capture, hc.GPU_QUERY, number, f"{parts[1][:30]!r} is not a PCI bus id")
        if not re.fullmatch(r"\d+\.\d+", cc) or not name.isprintable():
            raise _fail(
                capture, hc.GPU_QUERY, number, f"bad name or compute capability {cc[:20]!r}"
            )
        mem = re.fullmatch(r"(\d+) MiB", memory)
        numa = matrix.gpu_numa.get(index)
        if numa is None:
            numa = sysfs["pci"].get(bus[-12:])
        gpus.append(Gpu(index, bus, name, cc, int(mem.group(1)) if mem else None, numa))
    if len({g.index for g in gpus}) != len(gpus):
        raise _fail(capture, hc.GPU_QUERY, None, "a GPU index appears twice")
    return tuple(gpus)


# ---------------------------------------------------------------------------------------------
# sysfs.txt: `<path> = <value>` lines written by hostcapture._sysfs_lines

_SYSFS = (
    (
        "pci",
        re.compile(r"/sys/bus/pci/devices/([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/numa_node"),
    ),
    ("cpulist", re.compile(r"/sys/devices/system/node/node(\d+)/cpulist")),
    ("net", re.compile(r"/sys/class/net/([^/]+)(?:/device/numa_node)?")),
    ("ib", re.compile(r"/sys/class/infiniband/([^/]+)(?:/device/numa_node)?")),
    ("ibport", re.compile(r"/sys/class/infiniband/([^/]+)/ports/(\d+)/(state|link_layer)")),
)


def _parse_sysfs(capture: HostCapture) -> dict:
    facts: dict = {"pci": {}, "cpulist": {}, "net": {}, "ib": {}, "ibport": {}}
    for number, line in enumerate((capture.get(hc.SYSFS) or "").splitlines(), 1):
        if not line.strip():
            continue
        path, sep, value = line.partition(" = ")
        kind, match = next(
            ((k, m) for k, pattern in _SYSFS if (m := pattern.fullmatch(path.strip()))),
            (None, None),
        )
        if not sep or match is None:
            raise _fail(
                capture, hc.SYSFS, number, f"expected '<sysfs path> = <value>', got {line[:80]!r}"
            )
        value = value.strip()
        if kind == "ibport":
            dev = _device_name(capture, hc.SYSFS, number, match.group(1))
            facts["ibport"].setdefault(dev, {}).setdefault(int(match.group(2)), {})[
                match.group(3)
            ] = value
        elif kind == "cpulist":
            if value and not re.fullmatch(r"[0-9,-]+", value):
                raise _fail(capture, hc.SYSFS, number, f"{value[:40]!r} is not a CPU list")
            facts["cpulist"][int(match.group(1))] = value
        else:
            key = (
                match.group(1)
                if kind == "pci"
                else _device_name(capture, hc.SYSFS, number, match.group(1))
            )
            facts[kind][key] = _node_value(capture, number, value)
    return facts


def _node_value(capture: HostCapture, line: int, value: str):
    """A numa_node file's value: a node, None (-1: unknown), or "virtual" (no PCI device)."""
    if value == "virtual":
        return value
    if re.fullmatch(r"-?\d+", value) and int(value) < MAX_NODES:
        return int(value) if int(value) >= 0 else None
    if value.startswith("unreadable"):
        return None
    raise _fail(capture, hc.SYSFS, line, f"{value[:40]!r} is not a NUMA node number")


# ---------------------------------------------------------------------------------------------
# NUMA nodes: numactl -H, else lscpu, else sysfs cpulists


def _parse_numa(capture: HostCapture, sysfs: dict) -> tuple[NumaNode, ...]:
    cpus: dict[int, str] = {}
    memory: dict[int, int] = {}
    text = capture.get(hc.NUMACTL)
    for number, line in enumerate((text or "").splitlines(), 1):
        match = re.fullmatch(r"node (\d+) (cpus|size):\s*(.*?)\s*", line)
        if not match or int(match.group(1)) >= MAX_NODES:
            continue
        node, what, value = int(match.group(1)), match.group(2), match.group(3)
        if what == "cpus":
            if value and not re.fullmatch(r"[\d ]+", value):
                raise _fail(capture, hc.NUMACTL, number, f"node {node} cpus: {value[:40]!r}")
            cpus[node] = _cpulist([int(c) for c in value.split()])
        else:
            size = re.fullmatch(r"(\d+) MB", value)
            if not size:
                raise _fail(
                    capture, hc.NUMACTL, number, f"node {node} size: {value[:40]!r} (want 'N MB')"
                )
            memory[node] = int(size.group(1))
    if text is not None and not cpus:
        raise _fail(capture, hc.NUMACTL, 1, "no 'node N cpus:' lines (is this `numactl -H`?)")
    if not cpus:
        cpus = _lscpu_nodes(capture) or dict(sysfs["cpulist"])
    return tuple(NumaNode(n, cpus[n], memory.get(n)) for n in sorted(cpus))


def _lscpu_nodes(capture: HostCapture) -> dict[int, str]:
    nodes = {}
    for number, line in enumerate((capture.get(hc.LSCPU) or "").splitlines(), 1):
        match = re.fullmatch(r"\s*NUMA node(\d+) CPU\(s\):\s*(.*?)\s*", line)
        if match:
            if not re.fullmatch(r"[0-9,-]*", match.group(2)):
                raise _fail(capture, hc.LSCPU, number, f"{match.group(2)[:40]!r} is not a CPU list")
            nodes[int(match.group(1))] = match.group(2)
    return nodes


def _cpulist(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the form numactl and sysfs print)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


# ---------------------------------------------------------------------------------------------
# NICs, ucx_info -d, ports


def _nics(capture: HostCapture, matrix: _Matrix, sysfs: dict) -> tuple[Nic, ...]:
    """RDMA devices (the matrix's NIC legend and /sys/class/infiniband), then physical
    network interfaces (a /sys/class/net entry with a PCI device)."""
    nics = []
    rdma = sorted(
        set(matrix.nic_links)
        | set(sysfs["ib"]) - {k for k, v in sysfs["ib"].items() if v == "virtual"}
    )
    for name in rdma:
        ports = sysfs["ibport"].get(name, {})
        active = tuple(p for p, f in sorted(ports.items()) if "ACTIVE" in f.get("state", "ACTIVE"))
        if ports and not active:
            continue  # every port down: UCX could not use it
        numa = sysfs["ib"].get(name)
        nics.append(
            Nic(
                name,
                True,
                numa if isinstance(numa, int) else None,
                active or (1,),
                matrix.nic_links.get(name, {}),
            )
        )
    for name, numa in sorted(sysfs["net"].items()):
        if numa != "virtual":
            nics.append(Nic(name, False, numa))
    return tuple(nics)


def _parse_ucx(capture: HostCapture) -> tuple[tuple[str, str], ...] | None:
    text = capture.get(hc.UCX_INFO)
    if text is None:
        return None
    found: list[tuple[str, str]] = []
    transport = None
    for number, line in enumerate(text.splitlines(), 1):
        match = re.fullmatch(r"#\s*(Transport|Device):\s*(\S+)\s*", line)
        if not match:
            continue
        value = _device_name(capture, hc.UCX_INFO, number, match.group(2))
        if match.group(1) == "Transport":
            transport = value
        elif transport is not None:
            found.append((transport, value))
    if not found:
        raise _fail(
            capture,
            hc.UCX_INFO,
            1,
            "no '# Transport:' / '# Device:' lines (is this `ucx_info -d`?)",
        )
    return tuple(found)


def _parse_ports(capture: HostCapture) -> tuple[dict[int, str], tuple[int, ...]]:
    busy, probed = {}, []
    for number, line in enumerate((capture.get(hc.PORTS) or "").splitlines(), 1):
        match = re.fullmatch(r"(\d{1,5}) (free|busy: (.*))", line.strip())
        if not line.strip():
            continue
        if not match or not 0 < int(match.group(1)) < 65536:
            raise _fail(
                capture,
                hc.PORTS,
                number,
                f"expected '<port> free' or '<port> busy: <why>', got {line[:80]!r}",
            )
        port = int(match.group(1))
        probed.append(port)
        if match.group(3) is not None:
            busy[port] = match.group(3)[:100]
    return busy, tuple(probed)


def as_doctor_facts(topo: Topology):
    """The doctor's `HostFacts` for this topology, so `doctor.diagnose()` judges a proposed
    profile against the captured host (GPUs, NUMA nodes, numactl, busy ports; no driver,
    toolchain or venv facts: a capture has none)."""
    from sglforge.smoke.doctor import GpuInfo, HostFacts

    return HostFacts(
        nvidia_smi_error=None if topo.gpus else "no GPU in the capture",
        gpus=tuple(GpuInfo(g.index, g.name, g.compute_cap, g.numa_node) for g in topo.gpus),
        numa_nodes=tuple(n.node for n in topo.numa_nodes) or None,
        numactl="numactl" if topo.numactl else None,
        busy_ports=dict(topo.busy_ports),
    )
