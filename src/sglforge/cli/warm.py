"""Verb `warm` (issue 34): start the profile's servers once on a GPU host, let them compile, and
capture every JIT cache they wrote into one content-addressed artifact (smoke/jitcache.py)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from sglforge.cli import smoke

    p = subparsers.add_parser(
        "warm",
        help="GPU host: run the profile's smoke with empty JIT caches and pack what the servers "
        "compiled into build/jitcache/jitcache-<key16>.tar.gz (use: smoke --jit-cache)",
    )
    smoke._common(p)
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run directory (default: <project>/build/warm/<profile>)",
    )
    p.add_argument("--venv", type=Path, default=None, help="use this existing venv (as for smoke)")
    p.add_argument(
        "--artifact-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the artifact is written (default: <project>/build/jitcache)",
    )
    smoke._jit_options(p)
    p.set_defaults(func=run_warm_verb)


def run_warm_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.cli.smoke import _options
    from sglforge.smoke.run import run_smoke

    project_root = ctx.project.root
    if args.out is None:
        args.out = project_root / "build" / "warm" / Path(args.profile).stem
    if args.artifact_dir is None:
        args.artifact_dir = project_root / "build" / "jitcache"
    return run_smoke(_options(args, ctx))
