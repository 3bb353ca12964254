"""Verb `preflight VERB [ARGS...]`: what `sglforge VERB ARGS` would refuse, refused now.

The nox sessions that install something (`build`, `verify`, `matrix` install the ~5 GB build
toolchain) run this first, with the interpreter nox runs under and sglforge from src/
(standard library only), so a mistyped option, a bad config value, an unknown recipe, a CUDA
toolkit that is not the pinned release or a compiler cache that is not installed costs seconds,
not an install. It parses ARGS with VERB's own parser (same messages, exit status 2), loads the
settings VERB would use (config file, environment, the global options in ARGS), checks the
inputs and host facts VERB needs, and for `build`/`verify` fetches and checks the sources of the
selected recipes with those same settings (`--mirror`, `--config`, `--cache-dir`,
`--build-root`, `--project` apply to the fetch too).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from sglforge.base.errors import SglforgeError
from sglforge.cli.context import Context
from sglforge.cli.names import Selection, select_recipes


def _check_host(project, selection: Selection, libraries: bool = True) -> None:
    """The CUDA toolkit is the pinned release; the system libraries recipes name are there."""
    from sglforge.builder import hostdeps
    from sglforge.inputs.toolchain import find_cuda, load_toolchain

    cuda = find_cuda(load_toolchain(project.toolchain), required=selection.device_code)
    if selection.device_code:
        from sglforge.wheel.audit import find_cuobjdump

        # the arch audit runs after the first CUDA wheel compiled (hours in): say it now.
        # Looked up like the audit does, from this interpreter (under nox: nox's, not the
        # toolchain venv's; the toolchain lock carries no cuobjdump, so `nox -s build`
        # hands the one found here to the build as $SGLFORGE_CUOBJDUMP: audit_tools_env).
        if find_cuobjdump(cuda.home if cuda else None) is None:
            raise SglforgeError(
                "the arch audit needs cuobjdump (CUDA toolkit bin/, PATH), none found: every "
                "recipe with cuda-archs is audited for its SASS after it compiles",
                hint="install the CUDA toolkit's cuobjdump (cuda-cuobjdump-13-0) or put one on "
                "PATH (PyPI: nvidia-cuda-cuobjdump)",
            )
    if libraries:
        hostdeps.check(selection.host_requires)


def _check_build_root(settings) -> None:
    """The build root can be written (a read-only or foreign one fails here, in seconds)."""
    from sglforge.base.fs import check_writable

    origin = settings.origin("build-root")
    check_writable(settings.build_root, f"build root ({origin})")


def _fetch(selection: Selection, ctx) -> None:
    from sglforge.cli.sources import run_fetch

    print(
        f"preflight: fetching and checking sources first: {', '.join(selection.upstreams)}",
        flush=True,
    )
    run_fetch(
        argparse.Namespace(
            names=list(selection.upstreams),
            offline=False,
            bundle=None,
            from_bundle=None,
            no_export=False,
            depth=None,
        ),
        ctx,
    )


def _build(args: argparse.Namespace, ctx, fetch: bool) -> str:
    from sglforge.cli.build import check_compiler_cache

    project = ctx.project
    if args.publish_dev and not args.dev:
        raise SglforgeError("--publish-dev is for dev builds: add --dev RECIPE")
    if args.dev:
        from sglforge.builder.devtree import check_dev_names

        check_dev_names(tuple(args.names))
    selection = select_recipes(project, args.names, args.target)
    check_compiler_cache(ctx.settings)
    _check_build_root(ctx.settings)
    _check_host(project, selection)
    sandbox = _check_sandbox(args)
    if fetch:
        _fetch(selection, ctx)
    skipped = f"; opt-in, not built: {', '.join(selection.skipped)}" if selection.skipped else ""
    return f"recipes {', '.join(selection.recipes)}{skipped}; {sandbox}"


def _check_sandbox(args: argparse.Namespace) -> str:
    """The build sandbox can be made here (builder/sandbox.py), before anything is installed;
    --unsafe-no-sandbox skips the check and says so."""
    from sglforge.builder import sandbox

    if args.unsafe_no_sandbox:
        return f"NO build sandbox ({sandbox.UNSAFE_FLAG})"
    return f"sandbox bubblewrap {sandbox.find().version}"


def _verify(args: argparse.Namespace, ctx, fetch: bool) -> str:
    project = ctx.project
    reference = project.wheels_lock if args.from_lock else project.wheels_dir / "manifest.json"
    if not reference.is_file():
        how = (
            "lockfiles/wheels.lock is written by `nox -s build`"
            if args.from_lock
            else "run `nox -s build` first"
        )
        raise SglforgeError(
            f"{reference} does not exist: nothing to verify ({how}); nothing was installed"
        )
    selection = select_recipes(project, args.names, args.target)
    _check_build_root(ctx.settings)
    _check_host(project, selection)
    sandbox = _check_sandbox(args)
    if fetch:
        _fetch(selection, ctx)
    return f"recipes {', '.join(selection.recipes)}; {sandbox}"


def _plan(args: argparse.Namespace, ctx, fetch: bool) -> str:
    if not args.matrix:
        return "plan"
    selection = select_recipes(ctx.project, [], getattr(args, "target", None))
    ctx.settings  # noqa: B018
    _check_host(ctx.project, selection, libraries=False)  # keys only: nothing is built
    return "plan --matrix"


def _patches(args: argparse.Namespace, ctx, fetch: bool) -> str:
    if args.action != "lint":  # lint reads no settings
        ctx.settings  # noqa: B018  (config file and environment are valid)
    return f"patches {args.action}"


def _canary(args: argparse.Namespace, ctx, fetch: bool) -> str:
    ctx.settings  # noqa: B018  (config file and environment are valid: mirrors, cache)
    return "canary"


def _arguments_only(args: argparse.Namespace, ctx, fetch: bool) -> str:
    return args.verb  # parsed: the verb reads no settings, so a config problem is not its own


# The verbs whose nox session installs something before running them.
CHECKS: dict[str, Callable[[argparse.Namespace, object, bool], str]] = {
    "build": _build,
    "verify": _verify,
    "plan": _plan,
    "patches": _patches,
    "canary": _canary,
    "check": _arguments_only,
    "lock-runtime": _arguments_only,
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "preflight",
        help="check a verb's arguments, config and host before installing anything",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument(
        "--no-fetch",
        action="store_true",
        help="check only; do not fetch the selected recipes' sources",
    )
    p.add_argument(
        "target",
        choices=sorted(CHECKS),
        metavar="VERB",
        help=f"the verb to check: {', '.join(sorted(CHECKS))}",
    )
    p.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="VERB's arguments, exactly as they will be given to it",
    )
    p.set_defaults(func=run_preflight)


def run_preflight(args: argparse.Namespace, ctx) -> int:
    inner = ctx.parse_verb_args([args.target, *args.rest], outer=args)
    what = CHECKS[args.target](
        inner, Context(inner, ctx.secret_env, ctx.parse_verb_args), not args.no_fetch
    )
    print(f"preflight: sglforge {args.target}: arguments, settings and inputs are valid ({what})")
    return 0
