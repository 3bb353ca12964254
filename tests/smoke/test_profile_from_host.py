"""`sglforge profile`: PD profiles proposed from a host's topology (issue 36 item 4).

Recorded captures (tests/smoke/data/topology/, README there says how each was obtained): the
target deployment's 8x RTX PRO 6000 over PCIe on two NUMA nodes (reconstructed from its
description), an 8x H200 NVLink host (reconstructed from the DGX H200 layout), and the real
1-GPU H200 host (captured there by `sglforge profile --from-host --save-facts`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.base.findings import blocking
from sglforge.cli.main import main
from sglforge.smoke import hostcapture as hc
from sglforge.smoke.doctor import diagnose
from sglforge.smoke.hostcapture import load_capture
from sglforge.smoke.profile import load_profile
from sglforge.smoke.profilewriter import check_rendered, render
from sglforge.smoke.propose import candidate_ports, propose
from sglforge.smoke.topology import Gpu, Nic, NumaNode, Topology, as_doctor_facts, parse_topology

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "topology"
RTX = DATA / "rtx-pro-6000-8x-pcie"
NVLINK = DATA / "h200-8x-nvlink"
H200_1X = DATA / "h200-1x.json"


def _proposal(path: Path):
    topo = parse_topology(load_capture(path))
    return topo, propose(topo)


def _loaded(proposal, tmp_path: Path):
    path = tmp_path / "proposed.toml"
    path.write_text(render(proposal))
    return load_profile(path, REPO)


# ---------------------------------------------------------------------------------------------
# the three recorded hosts


def test_target_deployment_gets_the_shipped_layout(tmp_path: Path) -> None:
    topo, proposal = _proposal(RTX)
    assert (proposal.prefill.gpus, proposal.decode.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (proposal.prefill.numa_node, proposal.decode.numa_node) == (0, 1)
    assert (proposal.prefill.tp, proposal.decode.tp) == (4, 4)
    assert proposal.numa_binding and not proposal.share_gpus
    assert proposal.prefill.cpus == "0-31" and proposal.decode.cpus == "32-63"
    # no RDMA: the onboard port on node 0 for prefill; decode's node has none, so UCX chooses
    assert proposal.prefill.env == {"UCX_NET_DEVICES": "eno1"} and proposal.decode.env == {}
    profile = _loaded(proposal, tmp_path)
    shipped = load_profile(REPO / "profiles" / "dsv4-flash-pd.toml", REPO)
    for ours, theirs in zip(profile.roles, shipped.roles):
        assert (ours.gpus, ours.numa_node, ours.tp, ours.port, ours.bootstrap_port) == (
            theirs.gpus,
            theirs.numa_node,
            theirs.tp,
            theirs.port,
            theirs.bootstrap_port,
        )
    assert (profile.router.port, profile.numa_binding) == (shipped.router.port, True)
    assert not blocking(diagnose(profile, None, as_doctor_facts(topo)))


def test_nvlink_host_still_splits_by_numa_and_takes_each_gpus_own_nic(tmp_path: Path) -> None:
    topo, proposal = _proposal(NVLINK)
    assert topo.nvlink() and any("NUMA still decides" in r for r in proposal.reasons)
    assert (proposal.prefill.gpus, proposal.decode.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (proposal.prefill.numa_node, proposal.decode.numa_node) == (0, 1)
    assert proposal.prefill.env == {
        "UCX_NET_DEVICES": "mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1",
        "UCX_TLS": "rc,cuda_copy,cuda_ipc,gdr_copy,sm",
    }
    assert proposal.decode.env["UCX_NET_DEVICES"] == "mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"
    # the capture recorded 30001 busy: decode moves to the next free candidate
    assert proposal.decode.port == 30101 and proposal.prefill.port == 30000
    profile = _loaded(proposal, tmp_path)
    assert profile.decode.env["UCX_TLS"] == "rc,cuda_copy,cuda_ipc,gdr_copy,sm"
    assert profile.tiny_heads == 4  # TP4: the tiny model's heads split four ways
    hand = load_profile(REPO / "profiles" / "h200-pd-8gpu.toml", REPO)
    assert [(r.gpus, r.numa_node, r.tp) for r in profile.roles] == [
        (r.gpus, r.numa_node, r.tp) for r in hand.roles
    ]
    assert not blocking(diagnose(profile, None, as_doctor_facts(topo)))
    # the doctor names the busy port if the hand profile ran on that host
    errors = blocking(diagnose(hand, None, as_doctor_facts(topo)))
    assert [e.check for e in errors] == ["ports"] and "30001" in errors[0].message


def test_real_one_gpu_h200_capture_gives_what_the_smoke_used(tmp_path: Path) -> None:
    topo, proposal = _proposal(H200_1X)
    assert topo.gpus[0].name == "NVIDIA H200" and topo.gpus[0].numa_node == 0
    assert [n.name for n in topo.nics] == ["eth0"]  # a virtio NIC: no NUMA node in sysfs
    assert proposal.share_gpus and not proposal.numa_binding
    assert proposal.prefill.gpus == proposal.decode.gpus == (0,)
    assert proposal.prefill.args == ("--mem-fraction-static", "0.45") == proposal.decode.args
    assert proposal.prefill.env == proposal.decode.env == {}
    profile = _loaded(proposal, tmp_path)
    used = load_profile(REPO / "profiles" / "h200-pd-1gpu.toml", REPO)
    pair = {p: what for p, what in used.ports().items() if not what.startswith("colocated")}
    assert profile.ports() == pair  # [colocated] (equivalence) is added by hand
    assert (profile.share_gpus, profile.numa_binding, profile.backend, profile.host) == (
        used.share_gpus,
        used.numa_binding,
        used.backend,
        used.host,
    )
    for ours, theirs in zip(profile.roles, used.roles):
        assert (ours.gpus, ours.tp, ours.args) == (theirs.gpus, theirs.tp, theirs.args)
    for key in ("SGLANG_HOST_IP", "SGLANG_DISAGGREGATION_NIXL_BACKEND"):
        assert profile.server.env[key] == used.server.env[key]


def test_committed_h200_proposal_is_what_the_capture_proposes() -> None:
    _, proposal = _proposal(H200_1X)
    committed = (REPO / "bench" / "profile-proposal-h200.toml").read_text()
    assert committed == render(proposal), "regenerate: sglforge profile --facts " + str(H200_1X)


@pytest.mark.parametrize("capture", [RTX, NVLINK, H200_1X], ids=lambda p: p.stem)
def test_every_written_profile_loads_and_keeps_its_ports_apart(capture: Path) -> None:
    _, proposal = _proposal(capture)
    profile = check_rendered(render(proposal), REPO)
    ports = profile.ports()
    assert len(ports) == 5 and profile.router.metrics_port == 29000
    assert set(ports) <= set(candidate_ports())


# ---------------------------------------------------------------------------------------------
# the rules, on topologies built here


def _topo(nodes: list[int | None], **kw) -> Topology:
    gpus = tuple(Gpu(i, f"0000:{i:02x}:00.0", "GPU", "12.0", None, n) for i, n in enumerate(nodes))
    known = sorted({n for n in nodes if n is not None} | set(kw.pop("extra_nodes", ())))
    base = Topology(
        gpus=gpus,
        gpu_links={},
        nics=(),
        numa_nodes=tuple(NumaNode(n, f"{8 * n}-{8 * n + 7}", None) for n in known),
        numactl=True,
        ucx=None,
        busy_ports={},
        probed_ports=(),
        origin="built by the test",
    )
    return replace(base, **kw)


def test_unequal_nodes_take_the_smaller_power_of_two() -> None:
    proposal = propose(_topo([0, 0, 0, 0, 1, 1, 1]))
    assert (proposal.prefill.gpus, proposal.decode.gpus) == ((0, 1), (4, 5))


def test_three_nodes_use_the_two_with_most_gpus_prefill_on_the_lower() -> None:
    proposal = propose(_topo([0, 2, 2, 1, 1, 1, 1]))
    assert (proposal.prefill.numa_node, proposal.decode.numa_node) == (1, 2)
    assert (proposal.prefill.gpus, proposal.decode.gpus) == ((3, 4), (1, 2))


def test_one_node_splits_in_index_order_and_binds_only_on_a_multi_node_host() -> None:
    alone = propose(_topo([0, 0, 0, 0, 0, 0]))
    assert (alone.prefill.gpus, alone.decode.gpus, alone.numa_binding) == ((0, 1), (3, 4), False)
    two_sockets = propose(_topo([1, 1], extra_nodes=[0]))
    assert two_sockets.numa_binding and two_sockets.decode.numa_node == 1
    unknown = propose(_topo([None, None]))
    assert (unknown.prefill.gpus, unknown.decode.gpus, unknown.numa_binding) == ((0,), (1,), False)
    assert not propose(_topo([0, 1], numactl=False)).numa_binding


def test_nic_choice_prefers_pix_over_node_and_skips_what_ucx_lacks() -> None:
    nics = (
        Nic("mlx5_0", True, 0, (1,), {0: "NODE", 1: "SYS"}),
        Nic("mlx5_1", True, 0, (2,), {0: "PIX", 1: "SYS"}),
        Nic("mlx5_2", True, 1, (1,), {0: "SYS", 1: "PXB"}),
    )
    proposal = propose(_topo([0, 1], nics=nics))
    assert proposal.prefill.env["UCX_NET_DEVICES"] == "mlx5_1:2"
    assert proposal.decode.env["UCX_NET_DEVICES"] == "mlx5_2:1"
    ucx = (("rc_mlx5", "mlx5_1:2"), ("cuda_ipc", "cuda"), ("tcp", "eno1"), ("posix", "memory"))
    listed = propose(_topo([0, 1], nics=nics, ucx=ucx))
    assert listed.prefill.env == {"UCX_NET_DEVICES": "mlx5_1:2", "UCX_TLS": "rc,cuda_ipc,sm"}
    assert "UCX_NET_DEVICES" not in listed.decode.env  # mlx5_2 is not in ucx_info -d
    no_verbs = (("tcp", "eno1"), ("cuda_copy", "cuda"))
    tcp = propose(_topo([0, 1], nics=(*nics, Nic("eno1", False, 0)), ucx=no_verbs))
    assert tcp.prefill.env == {"UCX_NET_DEVICES": "eno1", "UCX_TLS": "cuda_copy,tcp"}


def test_busy_ports_move_and_all_busy_is_an_error() -> None:
    busy = {30000: "in use", 8000: "in use", 8100: "in use"}
    proposal = propose(_topo([0, 1], busy_ports=busy, probed_ports=candidate_ports()))
    assert (proposal.prefill.port, proposal.router_port) == (30100, 8200)
    every = {p: "in use" for p in candidate_ports() if 29000 <= p < 29500}
    with pytest.raises(SglforgeError, match="no free metrics port"):
        propose(_topo([0, 1], busy_ports=every))
    with pytest.raises(SglforgeError, match="lists no GPU"):
        propose(_topo([]))


# ---------------------------------------------------------------------------------------------
# the verb: save, load, write, refuse


def test_verb_writes_once_refuses_to_overwrite_and_round_trips_a_capture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.toml"
    saved = tmp_path / "capture"
    assert (
        main(["profile", "--facts", str(NVLINK), "--out", str(out), "--save-facts", str(saved)])
        == 0
    )
    first = out.read_text()
    assert main(["profile", "--facts", str(NVLINK), "--out", str(out)]) == 2
    assert "exists; not overwritten" in capsys.readouterr().err
    out.write_text("mine")
    assert main(["profile", "--facts", str(saved), "--out", str(out), "--force"]) == 0
    assert out.read_text() == first  # the saved directory proposes the same profile
    as_json = tmp_path / "facts.json"
    assert main(["profile", "--facts", str(saved), "--save-facts", str(as_json)]) == 0
    printed = capsys.readouterr().out
    assert printed == first and json.loads(as_json.read_text())["schema"] == 1


def _garbled(tmp_path: Path, name: str, text: str | bytes) -> Path:
    copy = tmp_path / "capture"
    shutil.copytree(NVLINK, copy)
    target = copy / name
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return copy


def _edit(name: str, old: str, new: str) -> str:
    return (NVLINK / name).read_text().replace(old, new, 1)


GARBLED = {
    "bad link kind": (hc.TOPO, lambda: _edit(hc.TOPO, "NV18", "NVX"), "line 2"),
    "hostile NIC name": (hc.TOPO, lambda: _edit(hc.TOPO, "NIC0: mlx5_0", 'NIC0: a"b\\'), "line"),
    "short GPU row": (hc.TOPO, lambda: "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n", "line 2"),
    "not topo at all": (hc.TOPO, lambda: "Failed to initialize NVML\n", "line 1"),
    "csv fields": (hc.GPU_QUERY, lambda: "0, NVIDIA H200\n", "line 1"),
    "csv bus id": (hc.GPU_QUERY, lambda: _edit(hc.GPU_QUERY, "00000000:2a:00.0", "zz"), "line 2"),
    "sysfs line": (hc.SYSFS, lambda: _edit(hc.SYSFS, " = 0\n", " : 0\n"), "line 1"),
    "sysfs node": (hc.SYSFS, lambda: _edit(hc.SYSFS, " = 0\n", " = zero\n"), "line 1"),
    "numactl size": (hc.NUMACTL, lambda: _edit(hc.NUMACTL, "1031891 MB", "lots"), "line 3"),
    "ucx without transports": (hc.UCX_INFO, lambda: "# nothing here\n", "line 1"),
    "ports": (hc.PORTS, lambda: "30000 maybe\n", "line 1"),
    "not utf-8": (hc.NUMACTL, lambda: b"available: 2 nodes\n\xff\xfe\n", "line 2"),
}


@pytest.mark.parametrize("case", sorted(GARBLED))
def test_garbled_captures_name_the_file_and_line_without_a_traceback(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, text, where = GARBLED[case]
    capture = _garbled(tmp_path, name, text())
    assert main(["profile", "--facts", str(capture)]) == 2
    err = capsys.readouterr().err
    assert f"{capture / name} {where}" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"schema": 1,\n "captures": [\n', "line 3: not JSON"),
        ('{"schema": 2, "captures": {}}', "not a facts file"),
        ('{"schema": 1, "captures": {"../../etc/passwd": "x"}}', "unknown captures"),
        ('{"schema": 1, "captures": {"numactl-H.txt": 3}}', "must be text"),
    ],
)
def test_bad_facts_json_is_refused_naming_the_file(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "facts.json"
    path.write_text(text)
    assert main(["profile", "--facts", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err


def test_a_garbled_capture_inside_json_names_the_capture_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = json.loads(H200_1X.read_text())
    data["captures"][hc.GPU_QUERY] = "0, 00000000:00:06.0, NVIDIA H200, nine, 143771 MiB\n"
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(data))
    assert main(["profile", "--facts", str(path)]) == 2
    assert f"{path} captures['{hc.GPU_QUERY}'] line 1" in capsys.readouterr().err


def test_a_capture_without_gpus_says_where_to_record_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / hc.LSCPU).write_text("NUMA node0 CPU(s): 0-3\n")
    assert main(["profile", "--facts", str(tmp_path)]) == 2
    assert "lists no GPU" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["profile", "--facts", str(empty)]) == 2
    assert "no capture files there" in capsys.readouterr().err


def test_from_host_runs_the_probes_and_notes_the_ones_that_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live reader, with stand-in nvidia-smi/numactl/ucx_info on PATH (this host has none):
    what they print is kept byte for byte; a failing probe is left out and named."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    topo, query = RTX / hc.TOPO, RTX / hc.GPU_QUERY
    scripts = {
        "nvidia-smi": f'if [ "$1" = topo ]; then cat {topo}; else cat {query}; fi',
        "numactl": f"cat {RTX / hc.NUMACTL}",
        "ucx_info": "echo 'ucx_info: no UCX here' >&2; exit 3",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    saved = tmp_path / "facts.json"
    assert main(["profile", "--from-host", "--save-facts", str(saved)]) == 0
    texts = json.loads(saved.read_text())["captures"]
    assert texts[hc.TOPO] == topo.read_text() and texts[hc.GPU_QUERY] == query.read_text()
    assert hc.UCX_INFO not in texts and "ucx_info -d: exit 3" in texts[hc.ORIGIN]
    assert texts[hc.PORTS].splitlines()[0] in ("30000 free", "30000 busy: Address already in use")
    assert "/sys/bus/pci/devices/0000:16:00.0/numa_node = " in texts[hc.SYSFS]
    assert "gpus = [0, 1, 2, 3]" in capsys.readouterr().out
