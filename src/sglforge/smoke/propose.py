"""Propose a PD smoke profile from a host's topology (pure: `Topology` in, `Proposal` out).

The placement rules (docs/smoke.md, "A profile from the host's topology"):

1. **GPU sets.** With GPUs on two or more NUMA nodes, prefill takes the GPUs of one node and
   decode those of another (the two nodes with the most GPUs; the lower node is prefill's),
   so each role's host memory, CPU threads and PCIe root stay on its own socket. NVLink
   (NV# in the matrix) does not change this: KV moves GPU to GPU either way, but the servers'
   CPU work and pinned host memory are per socket. With all GPUs on one node (or NUMA
   unknown), the GPUs are split in index order, first half prefill. One GPU: both roles
   share GPU 0 (`share-gpus = true`, `--mem-fraction-static 0.45` each, as h200-pd-1gpu).
2. **TP per role** = the GPUs of its set, rounded down to a power of two (TP must divide the
   model's attention heads, which are powers of two); both roles get the same TP, the smaller
   of the two, so each KV rank on one side has exactly one peer on the other.
3. **CPU binding.** `numa-binding = true` (numactl --cpunodebind=N --membind=N per role)
   when the host has two or more NUMA nodes with CPUs, numactl answered, and each role's
   GPUs are on a known node; else off (one node: nothing to bind apart).
4. **UCX devices** (`UCX_NET_DEVICES` per role): RDMA NICs nearest each of the role's GPUs
   in `nvidia-smi topo -m` (PIX, then PXB, PHB, NODE, SYS; ties all kept; a NIC whose ports
   are all down is skipped), as `<device>:<active port>`; without RDMA, a physical Ethernet
   interface that sysfs places on the role's NUMA node; else unset (the pair is on one host:
   UCX moves the KV with cuda_ipc/cuda_copy and shared memory, TCP is only its fallback, and
   a NIC of unknown or another node gains nothing). With `ucx_info -d` in the capture, only
   devices UCX lists are named.
5. **UCX transports** (`UCX_TLS`): with `ucx_info -d`, those it lists that a one-host PD pair
   uses: rc (with an RDMA device chosen), cuda_copy, cuda_ipc, gdr_copy, sm (any of
   posix/sysv/cma/xpmem/knem), tcp (without rc). Without ucx_info: unset, i.e. UCX's own
   default ("all": every transport it finds), since a list written blind can only remove one.
6. **Ports**: 30000 (prefill), 30001 (decode), 8998 (bootstrap), 8000 (router), 29000 (the
   router's metrics port); one the capture found busy is replaced by the next of +100, +200,
   … that is free; every port differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglforge.base.errors import SglforgeError
from sglforge.smoke.profile import DEFAULT_ROUTER_METRICS_PORT, TINY_MODEL
from sglforge.smoke.topology import LINK_RANK, Gpu, Nic, Topology

DEFAULT_PORTS = {
    "prefill": 30000,
    "decode": 30001,
    "bootstrap": 8998,
    "router": 8000,
    "metrics": DEFAULT_ROUTER_METRICS_PORT,
}
PORT_STEP, PORT_TRIES = 100, 5
SHARED_MEM_FRACTION = "0.45"  # two servers on one GPU (h200-pd-1gpu)
SHARED_MEMORY_TLS = ("posix", "sysv", "cma", "xpmem", "knem")
HOST = "127.0.0.1"  # the pair and router on one host (the smoke's shape)


@dataclass(frozen=True)
class RolePlan:
    role: str
    gpus: tuple[int, ...]
    numa_node: int | None  # written only with numa-binding
    cpus: str  # the node's CPU list, for the comment ("" unknown)
    tp: int
    port: int
    bootstrap_port: int | None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Proposal:
    prefill: RolePlan
    decode: RolePlan
    numa_binding: bool
    share_gpus: bool
    router_port: int
    metrics_port: int
    model: str
    reasons: tuple[str, ...]  # why each choice, one line each (the profile's header comments)
    origin: str

    @property
    def roles(self) -> tuple[RolePlan, RolePlan]:
        return (self.prefill, self.decode)

    @property
    def tiny_heads(self) -> int | None:
        return max(2, self.prefill.tp, self.decode.tp) if self.model == TINY_MODEL else None


def candidate_ports() -> tuple[int, ...]:
    """Every port the proposer may choose: what a capture probes."""
    return tuple(p + PORT_STEP * k for p in DEFAULT_PORTS.values() for k in range(PORT_TRIES))


def propose(topo: Topology, model: str = TINY_MODEL) -> Proposal:
    if not topo.gpus:
        raise SglforgeError(
            "the capture lists no GPU (no nvidia-smi --query-gpu or topo -m output)",
            hint="record the capture on the GPU host, where nvidia-smi answers",
        )
    placement = _place(topo)
    ports, port_reason = _ports(topo)
    reasons = [*placement.reasons, port_reason]
    roles = []
    for role, gpus, node in (
        ("prefill", placement.prefill, placement.prefill_node),
        ("decode", placement.decode, placement.decode_node),
    ):
        env, why = _ucx(topo, role, gpus, node)
        reasons += why
        roles.append(
            RolePlan(
                role=role,
                gpus=gpus,
                numa_node=node if placement.numa_binding else None,
                cpus=_cpus(topo, node),
                tp=len(gpus),
                port=ports[role],
                bootstrap_port=ports["bootstrap"] if role == "prefill" else None,
                args=("--mem-fraction-static", SHARED_MEM_FRACTION) if placement.share else (),
                env=env,
            )
        )
    return Proposal(
        prefill=roles[0],
        decode=roles[1],
        numa_binding=placement.numa_binding,
        share_gpus=placement.share,
        router_port=ports["router"],
        metrics_port=ports["metrics"],
        model=model,
        reasons=tuple(reasons),
        origin=topo.origin.splitlines()[0] if topo.origin else "",
    )


@dataclass(frozen=True)
class _Placement:
    prefill: tuple[int, ...]
    decode: tuple[int, ...]
    prefill_node: int | None
    decode_node: int | None
    share: bool
    numa_binding: bool
    reasons: tuple[str, ...]


def _place(topo: Topology) -> _Placement:
    """Rules 1-3: the GPU sets, TP and NUMA binding."""
    groups = topo.gpus_by_node()
    known = {n: g for n, g in groups.items() if n is not None}
    link = " (NVLink between GPUs: NUMA still decides)" if topo.nvlink() else ""
    if len(topo.gpus) == 1:
        gpu = topo.gpus[0]
        sets = ((gpu,), (gpu,))
        nodes = (gpu.numa_node, gpu.numa_node)
        why = f"one GPU: prefill and decode share GPU {gpu.index} (share-gpus, 0.45 of its memory each)"
    elif len(known) >= 2:
        a, b = sorted(sorted(known, key=lambda n: (-len(known[n]), n))[:2])
        tp = min(_pow2(len(known[a])), _pow2(len(known[b])))
        sets = (tuple(known[a][:tp]), tuple(known[b][:tp]))
        nodes = (a, b)
        why = (
            f"GPUs on NUMA nodes {sorted(known)}: prefill on node {a} "
            f"({_names(known[a])}), decode on node {b} ({_names(known[b])}){link}; TP{tp} each"
        )
    else:
        ordered = sorted(topo.gpus, key=lambda g: g.index)
        half = len(ordered) // 2
        tp = _pow2(half)
        sets = (tuple(ordered[:tp]), tuple(ordered[half : half + tp]))
        node = next(iter(known), None)
        nodes = (node, node)
        where = f"on NUMA node {node}" if node is not None else "with unknown NUMA affinity"
        why = f"all {len(ordered)} GPUs {where}: split in index order{link}; TP{tp} each"
    bind, bind_why = _binding(topo, nodes)
    return _Placement(
        prefill=tuple(g.index for g in sets[0]),
        decode=tuple(g.index for g in sets[1]),
        prefill_node=nodes[0],
        decode_node=nodes[1],
        share=len(topo.gpus) == 1,
        numa_binding=bind,
        reasons=(why, bind_why),
    )


def _binding(topo: Topology, nodes: tuple[int | None, int | None]) -> tuple[bool, str]:
    with_cpus = [n.node for n in topo.numa_nodes if n.cpus]
    if len(with_cpus) < 2:
        return False, f"numa-binding = false: {len(with_cpus) or 'no known'} NUMA node(s) with CPUs"
    if None in nodes or any(n not in with_cpus for n in nodes):
        return False, "numa-binding = false: a role's GPUs have no known NUMA node with CPUs"
    if not topo.numactl:
        return False, "numa-binding = false: numactl did not answer on the host (install numactl)"
    return True, f"numa-binding = true: numactl --cpunodebind/--membind {nodes[0]} and {nodes[1]}"


def _ucx(topo: Topology, role: str, gpus: tuple[int, ...], node: int | None):
    """Rules 4-5 for one role: (env, reasons)."""
    listed = {device for _, device in topo.ucx} if topo.ucx is not None else None
    transports = {t for t, _ in topo.ucx} if topo.ucx is not None else set()
    rc = topo.ucx is None or any(t.startswith(("rc_", "dc_")) for t in transports)
    rdma = [n for n in topo.nics if n.rdma] if rc else []
    devices, why = _rdma_devices(rdma, gpus, node) if rdma else _ethernet(topo.nics, node)
    if listed is not None and devices:
        dropped = [d for d in devices if d not in listed]
        devices = [d for d in devices if d in listed]
        why += f"; not in ucx_info -d: {', '.join(dropped)}" if dropped else ""
    env = {"UCX_NET_DEVICES": ",".join(devices)} if devices else {}
    reasons = [f"[{role}] UCX_NET_DEVICES {env.get('UCX_NET_DEVICES', 'unset')}: {why}"]
    if topo.ucx is None:
        reasons.append(
            f"[{role}] UCX_TLS unset: no ucx_info -d in the capture (UCX's default: all)"
        )
        return env, reasons
    tls = [t for t in ("cuda_copy", "cuda_ipc", "gdr_copy") if t in transports]
    tls = (["rc"] if rdma and devices else []) + tls
    tls += ["sm"] if transports & set(SHARED_MEMORY_TLS) else []
    tls += ["tcp"] if "tcp" in transports and not (rdma and devices) else []
    env["UCX_TLS"] = ",".join(tls)
    reasons.append(f"[{role}] UCX_TLS {env['UCX_TLS']}: of {', '.join(sorted(transports))}")
    return env, reasons


def _rdma_devices(nics: list[Nic], gpus: tuple[int, ...], node: int | None):
    chosen: list[Nic] = []
    kinds = set()
    for gpu in gpus:
        ranked = [(LINK_RANK.get(n.link_to_gpu.get(gpu, ""), 9), n) for n in nics]
        best = min(rank for rank, _ in ranked)
        if best == 9:  # the matrix does not relate them: the role's node, else all
            same = [n for n in nics if n.numa_node == node]
            chosen += [n for n in same or nics if n not in chosen]
            kinds.add("by NUMA node")
            continue
        chosen += [n for rank, n in ranked if rank == best and n not in chosen]
        kinds.add(next(k for k, r in LINK_RANK.items() if r == best))
    devices = [f"{n.name}:{n.ports[0]}" for n in chosen]
    return devices, f"RDMA NICs nearest GPUs {list(gpus)} ({'/'.join(sorted(kinds))})"


def _ethernet(nics: tuple[Nic, ...], node: int | None):
    """Without RDMA, TCP is only UCX's fallback (the KV of a one-host pair moves over cuda_ipc
    and shared memory): name an interface only where it is known to sit on the role's node."""
    physical = [n for n in nics if not n.rdma]
    same = [n for n in physical if node is not None and n.numa_node == node]
    if same:
        return [same[0].name], f"no RDMA NIC; {same[0].name} is on NUMA node {node} (TCP)"
    inside = "the KV moves inside the host (cuda_ipc, shared memory); UCX chooses"
    if not physical:
        return [], f"no RDMA or physical NIC: {inside}"
    names = ", ".join(
        f"{n.name} (NUMA {'?' if n.numa_node is None else n.numa_node})" for n in physical
    )
    return [], f"no RDMA NIC, no interface known on NUMA node {node} ({names}): {inside}"


def _ports(topo: Topology) -> tuple[dict[str, int], str]:
    taken: set[int] = set()
    chosen = {}
    for what, default in DEFAULT_PORTS.items():
        options = [default + PORT_STEP * k for k in range(PORT_TRIES)]
        free = [p for p in options if p not in topo.busy_ports and p not in taken]
        if not free:
            why = "; ".join(f"{p}: {topo.busy_ports.get(p, 'taken')}" for p in options)
            raise SglforgeError(
                f"no free {what} port: {options} are all busy on the host ({why})",
                hint="stop what listens there, or set the port in the written profile by hand",
            )
        chosen[what] = free[0]
        taken.add(free[0])
    moved = {w: p for w, p in chosen.items() if p != DEFAULT_PORTS[w]}
    if not topo.probed_ports:
        why = "ports: the defaults; the capture has no port probe (check with `sglforge doctor`)"
    elif moved:
        why = f"ports: defaults except {', '.join(f'{w} {p}' for w, p in moved.items())} (busy)"
    else:
        why = "ports: the defaults, all free on the host when captured"
    return chosen, why


def _pow2(count: int) -> int:
    power = 1
    while power * 2 <= count:
        power *= 2
    return power


def _names(gpus: list[Gpu]) -> str:
    return "GPUs " + ",".join(str(g.index) for g in gpus)


def _cpus(topo: Topology, node: int | None) -> str:
    return next((n.cpus for n in topo.numa_nodes if n.node == node), "")
