"""Verb `profile`: propose a PD smoke profile from this host's (or a recorded) topology."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="propose a PD smoke profile from the host's GPU/NUMA/NIC topology",
        description="Read GPU <-> NUMA <-> NIC topology (nvidia-smi topo -m, sysfs, numactl, "
        "ucx_info -d) and write a smoke profile: prefill and decode GPU sets on separate NUMA "
        "nodes, CPU binding, UCX devices and transports, TP per role, free ports. The rules: "
        "docs/smoke.md, 'A profile from the host's topology'.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-host", action="store_true", help="probe this host (nvidia-smi, numactl, sysfs)"
    )
    source.add_argument(
        "--facts",
        type=Path,
        metavar="PATH",
        help="propose from a recorded capture (a --save-facts directory or JSON file)",
    )
    p.add_argument(
        "--save-facts",
        type=Path,
        metavar="PATH",
        help="also save the capture: PATH.json as one file, else a directory of probe outputs",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="write the profile to FILE (default: print it on stdout)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out FILE")
    p.add_argument(
        "--model", default="tiny", help="the profile's model (default: tiny, the generated one)"
    )
    p.set_defaults(func=run_profile_verb)


def run_profile_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.base.errors import SglforgeError
    from sglforge.base.findings import blocking
    from sglforge.smoke import hostcapture, profilewriter
    from sglforge.smoke.doctor import diagnose
    from sglforge.smoke.propose import candidate_ports, propose
    from sglforge.smoke.topology import as_doctor_facts, parse_topology

    if args.out is not None and args.out.exists() and not args.force:
        raise SglforgeError(f"--out {args.out} exists; not overwritten", hint="pass --force")
    if args.from_host:
        capture = hostcapture.capture_host(candidate_ports())
    else:
        capture = hostcapture.load_capture(args.facts)
    if args.save_facts is not None:
        saved = hostcapture.save_capture(capture, args.save_facts)
        print(f"[profile] capture saved: {saved}", file=sys.stderr)
    topo = parse_topology(capture)
    proposal = propose(topo, args.model)
    try:
        root = ctx.project.root
    except SglforgeError:
        root = Path.cwd()  # no project here: the proposal names no project file
    text = profilewriter.render(proposal)
    profile = profilewriter.check_rendered(text, root)
    findings = diagnose(profile, None, as_doctor_facts(topo))
    for line in proposal.reasons:
        print(f"[profile] {line}", file=sys.stderr)
    for finding in findings:
        print(f"[profile] doctor: {finding.render()}", file=sys.stderr)
    if blocking(findings):
        print(
            "[profile] the doctor refuses the proposal on this host; nothing written",
            file=sys.stderr,
        )
        return 1
    if args.out is None:
        sys.stdout.write(text)
        return 0
    profilewriter.write_profile(text, args.out, force=args.force)
    print(f"[profile] wrote {args.out}", file=sys.stderr)
    return 0
