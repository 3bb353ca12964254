"""`sglforge <verb>`: argument parsing and printing; the work happens in the verb modules.

Each verb module exposes `register(subparsers)` which adds its parser and sets
`func(args, ctx) -> int`. Errors the user can fix are `SglforgeError`s: printed without a
traceback, exit status 2. Ctrl-C / SIGTERM / SIGHUP: one line, exit status 128 + signal.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.procgroup import Terminated, interrupt_exit, signals_as_exceptions
from sglforge.cli import build, bundle, check, config, patches, smoke, sources  # verbs
from sglforge.inputs.project import Project, find_project
from sglforge.inputs.settings import Settings, load_settings

# Modules that contribute verbs, in help order.
VERB_MODULES = (sources, patches, build, check, smoke, bundle, config)



@dataclass
class Context:
    args: argparse.Namespace

    @property
    def project(self) -> Project:
        return find_project(self.args.project)

    @property
    def settings(self) -> Settings:
        return load_settings(
            self.args.config,
            cache_dir=self.args.cache_dir,
            build_root=self.args.build_root,
            extra_mirrors=self.args.mirror,
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglforge", description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=None,
                        help="project root (default: nearest dir with lockfiles/upstreams.toml)")
    parser.add_argument("--config", type=Path, default=None,
                        help="user config file (default: $SGLFORGE_CONFIG or "
                             "~/.config/sglforge/config.toml)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="source cache directory")
    parser.add_argument("--build-root", type=Path, default=None,
                        help="fixed absolute build root (default /tmp/sglforge-build)")
    parser.add_argument("--mirror", action="append", default=[], metavar="UPSTREAM=MIRROR",
                        help="fetch URLs starting with UPSTREAM from MIRROR instead (repeatable)")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in VERB_MODULES:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with signals_as_exceptions():
            return int(args.func(args, Context(args)) or 0)
    except SglforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated) as exc:
        # Everything the verb started has been stopped by now (procgroup.py); one line.
        code, name = interrupt_exit(exc)
        teardown = getattr(exc, "sglforge_teardown", None)
        detail = (f"; stopped its processes ({teardown.how}, {teardown.seconds:.1f}s)"
                  if teardown is not None else "")
        if teardown is not None and teardown.survivors:
            detail += f"; still running: pids {teardown.survivors}"
        print(f"sglforge {args.verb}: interrupted by {name}{detail}", file=sys.stderr)
        return code


if __name__ == "__main__":
    raise SystemExit(main())
