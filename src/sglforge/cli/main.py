"""`sglforge <verb>`: argument parsing and printing; the work happens in the verb modules.

Each verb module exposes `register(subparsers)` which adds its parser and sets
`func(args, ctx) -> int`. Errors the user can fix are `SglforgeError`s: printed without a
traceback, exit status 2 (1 for a `BuildFailed`: the build ran and failed). Ctrl-C / SIGTERM / SIGHUP: one line, exit status 128 + signal.

Parsing: the global options (`--project`, `--config`, `--cache-dir`, `--build-root`,
`--mirror`) are accepted before or after the verb (`nox -s fetch -- --mirror …` puts them
after it); a verb's options and positional names mix in any order
(`patches check --offline sglang`); a mistake prints the verb's own usage.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
import traceback
from pathlib import Path

from sglforge import __version__
from sglforge.base.credentials import scrub_environment
from sglforge.base.errors import SglforgeError
from sglforge.base.procgroup import Terminated, interrupt_exit, signals_as_exceptions
from sglforge.cli import (  # verbs
    build,
    bundle,
    canary,  # issue 36 item 3
    check,
    config,
    patches,
    preflight,
    profile,  # issue 36 item 4
    publish,
    receipt,  # verbs `receipt`, `reference` (issue 24)
    smoke,
    sources,
    warm,  # issue 34
)
from sglforge.cli.context import Context

# Modules that contribute verbs, in help order.
VERB_MODULES = (sources, patches, build, check, smoke, bundle, publish, config, receipt, preflight)
VERB_MODULES += (warm,)  # issue 34: `warm`
VERB_MODULES += (profile,)  # issue 36 item 4
VERB_MODULES += (canary,)  # issue 36 item 3: `canary`, listed last

# Global options given after the verb land under these names; _merge_after_verb merges them.
AFTER_VERB = "after_verb_"
DESCRIPTION = (
    "Fetch pinned upstreams, apply their patch series, build reproducible CUDA 13 "
    "wheels, check them as a set and smoke-test them (README.md)."
)
VALUE_OPTIONS = ("--project", "--config", "--cache-dir", "--build-root", "--mirror")


class VerbParser(argparse.ArgumentParser):
    """A verb's parser: options and positionals intermixed; errors show this verb's usage.

    argparse's plain parsing stops filling `nargs="*"` positionals at the first option, so
    `patches check --offline sglang` left `sglang` unrecognized; intermixed parsing (two
    passes: options, then positionals) takes it. Leftover arguments are an error here, with
    the verb's usage, instead of the top-level parser's.
    """

    _nested = False

    def parse_known_args(self, args=None, namespace=None):
        # parse_known_intermixed_args calls back into this method; a verb that takes another
        # verb's arguments verbatim (preflight: nargs=REMAINDER) cannot be intermixed.
        if self._nested or any(a.nargs == argparse.REMAINDER for a in self._actions):
            return super().parse_known_args(args, namespace)
        self._nested = True
        try:
            namespace, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._nested = False
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def _add_global_options(parser: argparse.ArgumentParser, *, after_verb: bool) -> None:
    """The global options; after the verb they default to absent and are merged in main()."""
    if after_verb:
        target = parser.add_argument_group("global options (also accepted before the verb)")
        prefix, default, mirrors = AFTER_VERB, argparse.SUPPRESS, argparse.SUPPRESS
    else:
        target, prefix, default, mirrors = parser, "", None, []
    target.add_argument(
        "--project",
        type=Path,
        default=default,
        dest=prefix + "project",
        metavar="DIR",
        help="project root (default: nearest dir with lockfiles/upstreams.toml)",
    )
    target.add_argument(
        "--config",
        type=Path,
        default=default,
        dest=prefix + "config",
        metavar="FILE",
        help="user config file (default: $SGLFORGE_CONFIG or ~/.config/sglforge/config.toml)",
    )
    target.add_argument(
        "--cache-dir",
        type=Path,
        default=default,
        dest=prefix + "cache_dir",
        metavar="DIR",
        help="source cache directory",
    )
    target.add_argument(
        "--build-root",
        type=Path,
        default=default,
        dest=prefix + "build_root",
        metavar="DIR",
        help="fixed absolute build root (default /tmp/sglforge-build)",
    )
    target.add_argument(
        "--mirror",
        action="append",
        default=mirrors,
        dest=prefix + "mirror",
        metavar="UPSTREAM=MIRROR",
        help="fetch URLs starting with UPSTREAM from MIRROR instead (repeatable)",
    )
    target.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS if after_verb else False,
        dest=prefix + "quiet",
        help="print only warnings and errors (sglforge's progress lines on "
        "stdout are dropped; what the tools it runs print is not)",
    )
    target.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if after_verb else False,
        dest=prefix + "verbose",
        help="on an error, print the traceback too (for a bug report)",
    )


def _merge_after_verb(args: argparse.Namespace) -> argparse.Namespace:
    """Global options given after the verb override those before it; --mirror adds up."""
    for key in [k for k in vars(args) if k.startswith(AFTER_VERB)]:
        value = getattr(args, key)
        delattr(args, key)
        name = key[len(AFTER_VERB) :]
        if name == "mirror":
            args.mirror = [*args.mirror, *value]
        elif name in ("quiet", "verbose"):
            setattr(args, name, getattr(args, name) or value)
        else:
            setattr(args, name, value)
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglforge", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sglforge {__version__}")
    _add_global_options(parser, after_verb=False)
    subparsers = parser.add_subparsers(
        dest="verb", metavar="VERB", required=True, parser_class=VerbParser
    )
    for module in VERB_MODULES:
        module.register(subparsers)
    for verb_parser in subparsers.choices.values():
        _add_global_options(verb_parser, after_verb=True)
    parser.set_defaults(known_verbs=tuple(subparsers.choices))
    return parser


def _check_verb(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A mistyped verb is a usage error with a "did you mean" (argparse only lists them)."""
    verbs = parser.get_default("known_verbs")
    words = iter(argv)
    for word in words:
        if word in VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            if word not in verbs:
                close = difflib.get_close_matches(word, verbs, n=2, cutoff=0.6)
                guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                parser.error(f"unknown verb {word!r}{guess} (verbs: {', '.join(verbs)})")
            return


GLOBAL_OPTIONS = ("project", "config", "cache_dir", "build_root", "mirror")


def parse_verb_args(argv: list[str], outer: argparse.Namespace | None = None) -> argparse.Namespace:
    """`argv` (VERB and its arguments) parsed exactly as `sglforge VERB …` parses it (usage
    errors exit 2 with VERB's usage); global options from `outer` fill what argv leaves out
    (--mirror adds up)."""
    args = _merge_after_verb(build_parser().parse_args(argv))
    for name in GLOBAL_OPTIONS if outer is not None else ():
        if name == "mirror":
            args.mirror = [*outer.mirror, *args.mirror]
        elif getattr(args, name) is None:
            setattr(args, name, getattr(outer, name))
    return args


@contextlib.contextmanager
def _quiet(enabled: bool):
    if not enabled:
        yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def _os_error(exc: OSError) -> str:
    """One line for an OSError sglforge did not expect: what, where, and the usual fix."""
    import errno

    where = f"{exc.filename}: " if exc.filename else ""
    text = f"{where}{exc.strerror or exc}"
    if exc.errno == errno.ENOSPC:
        return f"{text}: the disk is full; free space there and run again"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{text}: not writable here; choose another directory or fix its permissions"
    return f"{text} (run with -v for the traceback)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    _check_verb(parser, argv)
    args = _merge_after_verb(parser.parse_args(argv))
    # secrets leave the environment before any child starts (base/credentials.py)
    secret_env = scrub_environment()
    try:
        with signals_as_exceptions(), _quiet(args.quiet):
            code = int(args.func(args, Context(args, secret_env, parse_verb_args)) or 0)
            sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
            return code
    except BrokenPipeError:
        # `sglforge config | head -1`: the reader has all it wanted. No traceback, and none
        # at exit either (stdout now goes nowhere); 141 = 128 + SIGPIPE, like git or cat.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except SglforgeError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status  # 2: bad input; 1: a failed build (BuildFailed)
    except OSError as exc:
        # what sglforge itself could not read or write (a full disk, a read-only directory)
        if args.verbose:
            traceback.print_exc()
        print(f"error: {_os_error(exc)}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated) as exc:
        # Everything the verb started has been stopped by now (procgroup.py); one line.
        code, name = interrupt_exit(exc)
        teardown = getattr(exc, "sglforge_teardown", None)
        detail = (
            f"; stopped its processes ({teardown.how}, {teardown.seconds:.1f}s)"
            if teardown is not None
            else ""
        )
        if teardown is not None and teardown.survivors:
            detail += f"; still running: pids {teardown.survivors}"
        print(f"sglforge {args.verb}: interrupted by {name}{detail}", file=sys.stderr)
        return code


if __name__ == "__main__":
    raise SystemExit(main())
