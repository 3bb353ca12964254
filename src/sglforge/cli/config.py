"""Verb `config`: the effective settings and where each value came from."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sglforge.inputs.settings import default_config_path, describe_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "config",
        help="print the effective settings and their origins",
        description="Print the effective settings (defaults < config file < SGLFORGE_* "
        "environment < CLI options), each with where its value came from; with --env, every "
        "SGLFORGE_* variable sglforge reads, what it does and its value here.",
    )
    p.add_argument(
        "--env",
        action="store_true",
        help="list every SGLFORGE_* environment variable sglforge reads (docs/reference.md)",
    )
    p.set_defaults(func=run)


def _project_line(args: argparse.Namespace) -> str:
    if args.project is not None:
        return f"{Path(args.project).resolve()}   (cli: --project)"
    if os.environ.get("SGLFORGE_PROJECT"):
        return f"{Path(os.environ['SGLFORGE_PROJECT']).resolve()}   (env: SGLFORGE_PROJECT)"
    from sglforge.base.errors import SglforgeError
    from sglforge.inputs.project import find_project

    try:
        return f"{find_project().root}   (found above the working directory)"
    except SglforgeError:
        return "(none found)"


def run(args: argparse.Namespace, ctx) -> int:
    if args.env:
        from sglforge.inputs.envvars import describe_environment

        print(describe_environment({**os.environ, **ctx.secret_env}))
        return 0
    settings = ctx.settings
    print(describe_settings(settings, searched=args.config or default_config_path()))
    print(f"project = {_project_line(args)}")
    return 0
