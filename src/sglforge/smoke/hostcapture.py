"""The raw facts behind a proposed profile: what the host's topology probes printed.

`capture_host()` runs the probes once (nvidia-smi's matrix and GPU list, numactl, lscpu,
ucx_info, a few sysfs files, the smoke's candidate ports) and keeps their output as text, so a
capture can be saved, committed as a test fixture and proposed from on another machine
(`sglforge profile --facts`). Parsing that text is topology.py's job; this module only probes,
saves and loads.

A capture is saved either as a directory with one file per probe (the names below: what the
probes printed, byte for byte) or as one JSON file `{"schema": 1, "captures": {name: text}}`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_text, read_capped
from sglforge.smoke.doctor import _run, busy_ports

TOPO = "nvidia-smi-topo-m.txt"
GPU_QUERY = "nvidia-smi-query-gpu.csv"
NUMACTL = "numactl-H.txt"
LSCPU = "lscpu.txt"
UCX_INFO = "ucx_info-d.txt"
SYSFS = "sysfs.txt"  # `<path> = <value>` lines (see _sysfs_lines)
PORTS = "ports.txt"  # `<port> free` / `<port> busy: <why>` for the smoke's candidate ports
ORIGIN = "ORIGIN.txt"  # free text: where and how the capture was made (never parsed)
GPU_FIELDS = "index,pci.bus_id,name,compute_cap,memory.total"
PROBES = {
    TOPO: ["nvidia-smi", "topo", "-m"],
    GPU_QUERY: ["nvidia-smi", f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader"],
    NUMACTL: ["numactl", "-H"],
    LSCPU: ["lscpu"],
    UCX_INFO: ["ucx_info", "-d"],
}
NAMES = (*PROBES, SYSFS, PORTS, ORIGIN)
CAPTURE_CAP = 4 << 20  # bytes per capture: ucx_info -d on a big host is ~100 kB
SCHEMA = 1


@dataclass(frozen=True)
class HostCapture:
    """What the probes printed, by capture name; `source` says where it was read from (a
    directory, a JSON file, or "this host"), for error messages."""

    texts: dict[str, str]
    source: str
    # where each capture's text is, for errors: "<dir>/<name>" or "<file.json> captures[name]"
    where: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        return self.texts.get(name)

    def place(self, name: str) -> str:
        return self.where.get(name, f"{self.source}: {name}")


def capture_host(candidate_ports: tuple[int, ...], host: str = "127.0.0.1") -> HostCapture:
    """Run every probe on this host; a probe that is missing or fails is left out and said
    so in ORIGIN.txt (the proposer then uses its documented default)."""
    texts: dict[str, str] = {}
    notes = []
    for name, argv in PROBES.items():
        if shutil.which(argv[0]) is None:
            notes.append(f"{' '.join(argv)}: {argv[0]} not on PATH")
            continue
        code, out = _run(argv)
        if code != 0:
            notes.append(f"{' '.join(argv)}: exit {code}: {out.strip()[:200]}")
            continue
        texts[name] = out
    texts[SYSFS] = "".join(f"{path} = {value}\n" for path, value in _sysfs_lines(texts))
    busy = busy_ports({p: "" for p in candidate_ports}, host)
    texts[PORTS] = "".join(
        f"{p} busy: {busy[p]}\n" if p in busy else f"{p} free\n" for p in candidate_ports
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    texts[ORIGIN] = (
        f"captured by `sglforge profile --from-host` on {socket.gethostname()} at {stamp}\n"
        f"ports probed on {host}\n" + "".join(f"missing: {n}\n" for n in notes)
    )
    return HostCapture(texts, "this host")


def _sysfs_lines(texts: dict[str, str]) -> list[tuple[str, str]]:
    """The sysfs facts the proposer reads: each GPU's PCI NUMA node, each NUMA node's CPUs,
    each network and RDMA device's NUMA node (`virtual` for one without a PCI device), each
    RDMA port's state and link layer."""
    lines: list[tuple[str, str]] = []
    for line in texts.get(GPU_QUERY, "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) > 1 and ":" in parts[1]:
            bdf = parts[1].lower()[-12:]  # nvidia-smi: 8-digit domain; sysfs: 4
            lines.append(_sysfs_read(f"/sys/bus/pci/devices/{bdf}/numa_node"))
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        lines.append(_sysfs_read(str(node / "cpulist")))
    for kind in ("net", "infiniband"):
        for dev in sorted(Path(f"/sys/class/{kind}").glob("*")):
            if not (dev / "device").exists():
                lines.append((str(dev), "virtual"))
                continue
            lines.append(_sysfs_read(str(dev / "device" / "numa_node")))
            for port in sorted((dev / "ports").glob("*")) if kind == "infiniband" else ():
                lines.append(_sysfs_read(str(port / "state")))
                lines.append(_sysfs_read(str(port / "link_layer")))
    return lines


def _sysfs_read(path: str) -> tuple[str, str]:
    try:
        value = Path(path).read_text(errors="replace").strip()
    except OSError as exc:
        value = f"unreadable ({exc.strerror or exc})"
    return path, " ".join(value.split())[:200]


def load_capture(path: Path) -> HostCapture:
    """A capture saved by `--save-facts`: a directory of probe outputs or one JSON file."""
    if path.is_dir():
        texts, where = {}, {}
        for name in NAMES:
            file = path / name
            if file.is_file():
                texts[name] = _decode(read_capped(file, CAPTURE_CAP, name), str(file))
                where[name] = str(file)
        if not (set(texts) - {ORIGIN}):
            raise SglforgeError(
                f"{path}: no capture files there (expected some of {', '.join(NAMES)})",
                hint="record one with `sglforge profile --from-host --save-facts DIR`",
            )
        return HostCapture(texts, str(path), where)
    if not path.is_file():
        raise SglforgeError(f"--facts {path}: no such file or directory")
    return _load_json(path)


def _load_json(path: Path) -> HostCapture:
    raw = _decode(read_capped(path, CAPTURE_CAP * len(NAMES), "facts file"), str(path))
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SglforgeError(f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SglforgeError(f"{path}: not a facts file (expected an object with schema = {SCHEMA})")
    captures = data.get("captures")
    if not isinstance(captures, dict):
        raise SglforgeError(f"{path}: 'captures' must be an object of name -> text")
    unknown = sorted(str(n)[:60] for n in captures if n not in NAMES)
    if unknown:
        raise SglforgeError(f"{path}: unknown captures {unknown}; known: {', '.join(NAMES)}")
    bad = sorted(n for n, t in captures.items() if not isinstance(t, str))
    if bad:
        raise SglforgeError(f"{path}: captures {bad} must be text (strings)")
    where = {n: f"{path} captures[{n!r}]" for n in captures}
    return HostCapture(dict(captures), str(path), where)


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SglforgeError(f"{where} line {line}: not UTF-8 text") from None


def save_capture(capture: HostCapture, path: Path) -> str:
    """`--save-facts`: PATH.json is one JSON file; any other path a directory of one file per
    probe (created; existing capture files in it are replaced)."""
    if path.suffix == ".json":
        text = json.dumps({"schema": SCHEMA, "captures": capture.texts}, indent=1, sort_keys=True)
        atomic_write_text(path, text + "\n")
        return str(path)
    os.makedirs(path, exist_ok=True)
    for name, text in sorted(capture.texts.items()):
        atomic_write_text(path / name, text)
    return f"{path}/ ({len(capture.texts)} files)"
