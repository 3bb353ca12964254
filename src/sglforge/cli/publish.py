"""Verb `publish DEST`: add the stack's wheels to a static PEP 503 index for serving hosts
(`sglforge.wheel.index`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "publish",
        help="add wheels/ and the runtime wheels to a static PEP 503 index at DEST "
        "(DEST/simple/, DEST/files/; append-only, atomic)",
    )
    p.add_argument(
        "dest",
        metavar="DEST",
        help="the index directory (created when missing; an existing index is added to)",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="local wheels for the third-party pins of the lock (repeatable); as "
        "for `bundle`, each pin needs a wheel here whose sha256 it allows",
    )
    p.add_argument(
        "--ours-only",
        action="store_true",
        help="publish only our wheels, not the third-party runtime wheels (hosts "
        "then need another index for those pins)",
    )
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="hash-pinned set to publish (default: <project>/lockfiles/wheels.lock)",
    )
    p.add_argument("--wheels-dir", type=Path, default=None, help="default: <project>/wheels")
    p.add_argument(
        "--channel",
        default=None,
        metavar="NAME",
        help="publish into DEST/NAME, an entry channel of channels.toml (e.g. "
        "candidate); promoted channels are filled by `promote` only",
    )
    p.add_argument(
        "--channels",
        type=Path,
        default=None,
        metavar="FILE",
        help="channel definitions (default: <project>/channels.toml)",
    )
    p.set_defaults(func=run_publish)

    p = subparsers.add_parser(
        "promote",
        help="copy exactly the wheels a qualification receipt names from one channel "
        "of DEST into another (same bytes, sha256 checked), if the receipt "
        "passed what that channel requires",
    )
    p.add_argument("dest", metavar="DEST", help="the index root holding the channel indexes")
    p.add_argument(
        "--receipt",
        type=Path,
        required=True,
        metavar="RECEIPT",
        help="the receipt.json of the smoke run that qualified the wheels",
    )
    p.add_argument(
        "--to",
        required=True,
        metavar="CHANNEL",
        help="the channel to promote into (channels.toml), e.g. stable",
    )
    p.add_argument(
        "--channels",
        type=Path,
        default=None,
        metavar="FILE",
        help="channel definitions (default: <project>/channels.toml)",
    )
    p.add_argument(
        "--allowed-signers",
        type=Path,
        default=None,
        metavar="FILE",
        help="verify the receipt's signature against this file instead of the "
        "channel's allowed-signers (a signature is then required, whatever "
        "the channel says)",
    )
    p.set_defaults(func=run_promote)


def run_publish(args: argparse.Namespace, ctx) -> int:
    import contextlib

    from sglforge.wheel import index

    project = ctx.project
    dest = args.dest
    if args.channel is not None:  # issue 24: DEST/<channel>, an entry channel only
        from sglforge.wheel import channels

        path = args.channels or project.root / channels.CHANNELS_FILE
        dest = channels.publish_dest(
            dest, channels.load_channels(path, project.root), args.channel, path
        )
    target = index.open_target(dest)
    files, left_out = index.stack_files(
        args.wheels_dir or project.wheels_dir,
        args.lock or project.wheels_lock,
        tuple(args.wheelhouse),
        runtime=not args.ours_only,
    )
    guard = target.locked() if isinstance(target, index.LocalTarget) else contextlib.nullcontext()
    with guard:  # two publishers into one directory would race on the pages
        done = index.write_index(target, files)
    print(
        f"publish: {target}/simple: {done.projects} projects; {len(done.added)} files added, "
        f"{done.present} already there, {len(done.pages)} pages written"
    )
    if left_out:
        print(f"publish: --ours-only: the lock's {left_out} third-party pins are not in this index")
    return 0


def run_promote(args: argparse.Namespace, ctx) -> int:
    from sglforge.base.errors import SglforgeError
    from sglforge.wheel import channels

    project = ctx.project
    if "://" in args.dest:
        raise SglforgeError(f"{args.dest}: promote works on a local index directory")
    path = args.channels or project.root / channels.CHANNELS_FILE
    done = channels.promote(
        Path(args.dest),
        args.receipt,
        args.to,
        channels.load_channels(path, project.root),
        path,
        allowed_signers=args.allowed_signers,
    )
    for warning in done.warnings:  # e.g. an unsigned receipt where none is required
        print(f"promote: WARNING: {warning}", file=sys.stderr, flush=True)
    signed = (
        f"; signature by {done.signed_by!r} verified"
        if done.signed_by
        else "; receipt UNSIGNED"
        if not done.signed
        else "; signature NOT verified"
    )
    print(
        f"promote: {args.receipt} -> {args.dest}/{done.channel}: "
        f"{len(done.published.added)} files added, {done.published.present} already there"
        f"{signed}; receipt kept as {done.receipt_copy}"
    )
    return 0
