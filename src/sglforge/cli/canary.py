"""Verb `canary`: try each series on its upstream's newest release tag and branch head.

What counts as a release and which targets are tried: sources/upstream_refs.py; what each
entry's status means: patching/canary.py; the JSON schema: docs/reference.md ("sglforge
canary"). Exit status 0: every entry applies everywhere; 1: something needs attention (a
conflict, or an entry already upstream: a candidate to drop); 2: bad input, or an upstream or
target that could not be reached or exported (the report is still written and printed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_text
from sglforge.cli.jsonout import SCHEMA_VERSION, add_json_option, human_output_to_stderr
from sglforge.cli.names import check_upstreams
from sglforge.inputs.pins import parse_lockfile
from sglforge.patching.canary import UpstreamResult, canary_upstream, document, exit_status
from sglforge.sources.upstream_refs import BRANCH


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "canary",
        help="try each patch series on its upstream's newest release tag and branch head",
        description="For each upstream (default: all): find the newest release tag (version "
        "order; pre-releases only when newer than every release) and the default branch head "
        "through the mirror rules, export each into a temporary work tree and try the series "
        "entry by entry: applies, conflicts (files, hunks) or upstream (already in the "
        "target: a candidate to drop). Exit 0 clean, 1 needs attention, 2 bad input or "
        "unreachable.",
    )
    p.add_argument(
        "targets", nargs="*", default=[], metavar="UPSTREAM", help="upstreams (default: all)"
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="use only the source cache: the targets an earlier online run recorded",
    )
    p.add_argument(
        "--branch",
        action="append",
        default=[],
        metavar="UPSTREAM=BRANCH",
        help="try BRANCH's head instead of the repository's HEAD (repeatable)",
    )
    p.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="also write the JSON report to FILE (atomically)",
    )
    add_json_option(p, "canary", "the report")
    p.set_defaults(func=run_canary)


def _branches(values: list[str], lock) -> dict[str, str]:
    branches = {}
    for value in values:
        name, sep, branch = value.partition("=")
        if not sep or not BRANCH.fullmatch(branch) or ".." in branch:
            raise SglforgeError(f"--branch {value!r}: expected UPSTREAM=BRANCH (a branch name)")
        check_upstreams([name], lock)
        branches[name] = branch
    return branches


def run_canary(args: argparse.Namespace, ctx) -> int:
    project, settings = ctx.project, ctx.settings
    lock = parse_lockfile(project.lockfile)
    check_upstreams(args.targets, lock)
    branches = _branches(args.branch, lock)
    names = args.targets or [p.name for p in lock.upstreams()]
    for name in names:
        if lock.get(name).parent is not None:
            raise SglforgeError(f"'{name}' is not an upstream (it has a parent)")
    started = time.monotonic()
    results: list[UpstreamResult] = []
    with human_output_to_stderr(args.json):
        for name in names:
            print(f"canary    {name} ...", flush=True)
            results.append(
                canary_upstream(
                    project,
                    lock,
                    name,
                    settings,
                    offline=args.offline,
                    branch=branches.get(name),
                )
            )
        print(render_table(results), flush=True)
    body = {
        "schema": "sglforge-canary",
        "version": SCHEMA_VERSION,
        **document(results),
        "seconds": round(time.monotonic() - started, 2),
    }
    text = json.dumps(body, indent=2, sort_keys=True) + "\n"
    if args.output is not None:
        atomic_write_text(args.output, text)
        print(f"wrote     {args.output}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        sys.stdout.write(text)
        sys.stdout.flush()
    status = exit_status(results)
    if status == 2:
        failed = [
            r.name
            for r in results
            if r.error or any(t.error or t.count("refused") for t in r.targets)
        ]
        print(
            f"error: {len(failed)} of {len(results)} upstream(s) could not be checked or have a "
            f"refused entry: {', '.join(failed)}",
            file=sys.stderr,
        )
    elif status == 1:
        print("canary: entries need attention (conflicts or already upstream)", file=sys.stderr)
    return status


def render_table(results: list[UpstreamResult]) -> str:
    """One line per upstream and target, then one per entry that needs attention."""
    rows = [("upstream", "target", "commit", "applies", "conflicts", "upstream", "refused")]
    notes: list[str] = []
    for result in results:
        if result.error or not result.targets:
            rows.append((result.name, "-", "-", "", "", "", ""))
            notes.append(f"  {result.name}: {_first_line(result.error or result.note or '')}")
            continue
        if result.note:
            notes.append(f"  {result.name}: {result.note}")
        for target in result.targets:
            label = f"{target.target.kind} {target.target.ref}"
            if target.error or result.note:
                rows.append((result.name, label, target.target.commit[:12], "", "", "", ""))
                if target.error:
                    notes.append(f"  {result.name} {label}: {_first_line(target.error)}")
                continue
            counts = [str(target.count(s)) for s in ("applies", "conflicts", "upstream", "refused")]
            rows.append((result.name, label, target.target.commit[:12], *counts))
            for entry in target.entries if target.same_as is None else ():
                notes += _entry_notes(result.name, label, entry)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines + notes)


def _entry_notes(name: str, label: str, entry) -> list[str]:
    if entry.status == "applies":
        return []
    head = f"  {name} {label}: {entry.status.upper()} {entry.entry}"
    if entry.status == "upstream":
        return [head + " (already in the target: a candidate to drop)"]
    if entry.status == "refused":
        return [head + f": {_first_line(entry.detail)}"]
    files = entry.files
    shown = ", ".join(files[:4]) + (f" (+{len(files) - 4} more)" if len(files) > 4 else "")
    after = f"; after {len(entry.after_skipped)} skipped" if entry.after_skipped else ""
    present = f", {entry.already_applied} already in the target" if entry.already_applied else ""
    counted = f"{entry.failed_hunks} of {entry.total_hunks} hunk(s){present}"
    return [head + f": {counted}, in {len(files)} file(s): {shown}{after}"]


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 200 else line[:197] + "..."
