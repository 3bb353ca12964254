"""Verb `publish DEST`: add the stack's wheels to a static PEP 503 index for serving hosts
(`sglforge.wheel.index`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "publish", help="add wheels/ and the runtime wheels to a static PEP 503 index at DEST "
                        "(DEST/simple/, DEST/files/; append-only, atomic)")
    p.add_argument("dest", metavar="DEST",
                   help="the index directory (created when missing; an existing index is "
                        "added to)")
    p.add_argument("--wheelhouse", type=Path, action="append", default=[], metavar="DIR",
                   help="local wheels for the third-party pins of the lock (repeatable); as "
                        "for `bundle`, each pin needs a wheel here whose sha256 it allows")
    p.add_argument("--ours-only", action="store_true",
                   help="publish only our wheels, not the third-party runtime wheels (hosts "
                        "then need another index for those pins)")
    p.add_argument("--lock", type=Path, default=None,
                   help="hash-pinned set to publish (default: <project>/lockfiles/wheels.lock)")
    p.add_argument("--wheels-dir", type=Path, default=None, help="default: <project>/wheels")
    p.set_defaults(func=run_publish)


def run_publish(args: argparse.Namespace, ctx) -> int:
    import contextlib

    from sglforge.wheel import index

    project = ctx.project
    target = index.open_target(args.dest)
    files, left_out = index.stack_files(args.wheels_dir or project.wheels_dir,
                                        args.lock or project.wheels_lock,
                                        tuple(args.wheelhouse), runtime=not args.ours_only)
    guard = (target.locked() if isinstance(target, index.LocalTarget)
             else contextlib.nullcontext())
    with guard:  # two publishers into one directory would race on the pages
        done = index.write_index(target, files)
    print(f"publish: {target}/simple: {done.projects} projects; {len(done.added)} files added, "
          f"{done.present} already there, {len(done.pages)} pages written")
    if left_out:
        print(f"publish: --ours-only: the lock's {left_out} third-party pins are not in this "
              "index")
    return 0
