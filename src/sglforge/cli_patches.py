"""Verb `patches`: check | apply | refresh | lint."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("patches", help="patch series: check | apply | refresh | lint")
    p.add_argument("action", choices=["check", "apply", "refresh", "lint"])
    p.add_argument("upstreams", nargs="*", help="upstreams (default: all with a series)")
    p.add_argument("--onto", metavar="COMMIT", help="refresh: the new upstream commit")
    p.set_defaults(func=run_patches)


def run_patches(args: argparse.Namespace, ctx) -> int:  # noqa: ANN001
    raise NotImplementedError("patches verb is being written")
