"""Verbs `fetch` and `plan`."""

from __future__ import annotations

import argparse
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import SglforgeError
from sglforge.builder import plan
from sglforge.cli.names import check_upstreams
from sglforge.inputs.pins import parse_lockfile
from sglforge.sources.bundle import import_bundle, write_bundle
from sglforge.sources.export import export_source
from sglforge.sources.fetch import fetch_sources


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fetch", help="fetch pinned sources into the cache and export them")
    p.add_argument(
        "names", nargs="*", default=[], metavar="UPSTREAM", help="upstreams (default: all)"
    )
    p.add_argument(
        "--offline", action="store_true", help="use only the cache; list what is missing"
    )
    p.add_argument(
        "--bundle",
        type=Path,
        metavar="FILE",
        help="after fetching, write the cache for the pinned set to FILE",
    )
    p.add_argument(
        "--depth",
        type=_depth,
        metavar="N",
        help="with --bundle: shallow git bundles, each pinned commit with N-1 "
        "generations of history (backports keep their parent); for a host "
        "that builds but does not refresh series",
    )
    p.add_argument(
        "--from-bundle",
        type=Path,
        metavar="FILE",
        help="import FILE into the cache first (then fetch offline)",
    )
    p.add_argument(
        "--no-export", action="store_true", help="only fill the cache; do not export work trees"
    )
    p.set_defaults(func=run_fetch)

    p = subparsers.add_parser("plan", help="print pins, patch series and build steps (offline)")
    p.add_argument(
        "--matrix",
        action="store_true",
        help="print the build jobs still missing from the wheel cache as JSON, for "
        "CI (needs the build host's toolchain)",
    )
    p.add_argument(
        "--wave",
        type=_wave,
        metavar="N",
        help='with --matrix: only DAG level N, as GitHub\'s {"include": [...]}',
    )
    p.add_argument(
        "--max-waves",
        type=_wave,
        metavar="N",
        help="with --matrix: an error when the missing recipes need more than N waves",
    )
    p.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="with --matrix: write the JSON to FILE instead of stdout",
    )
    p.add_argument(
        "--no-remote-cache",
        action="store_true",
        help="with --matrix: check the local wheel cache, not the remote one",
    )
    p.add_argument(
        "--target",
        metavar="NAME",
        help="the build for targets/NAME.toml (archs, labels, content keys)",
    )
    from sglforge.cli.jsonout import add_json_option

    add_json_option(p, "plan", "the pins, series and steps")
    p.set_defaults(func=run_plan)


def _depth(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected a whole number from 1 to 1000"
        )
    return int(text)


def _wave(text: str) -> int:
    if not text.isdigit() or int(text) > 1000:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected a whole number from 0 to 1000"
        )
    return int(text)


def run_fetch(args: argparse.Namespace, ctx) -> int:
    from sglforge.patching.series import backport_wants, load_all_series

    project, settings = ctx.project, ctx.settings
    lock = parse_lockfile(project.lockfile)
    check_upstreams(args.names, lock)
    names = args.names or [p.name for p in lock.upstreams()]
    wants = backport_wants(load_all_series(project, lock, names))
    if args.depth is not None and not args.bundle:
        raise SglforgeError("--depth shapes the bundle --bundle FILE writes; give --bundle")
    offline = args.offline
    if args.from_bundle:
        for line in import_bundle(args.from_bundle, settings):
            print(f"imported  {line}")
        offline = True
    for line in unused_mirrors(settings, [p.url for p in lock.pins] + [w.url for w in wants]):
        print(f"warning:  {line}")
    report = fetch_sources(lock, names, settings, offline=offline, extra=wants)
    for line in report.fetched:
        print(f"fetched   {line}")
    for line in report.cached:
        print(f"cached    {line}")
    for line in report.substituted:
        print(f"SUBSTITUTED {line}")
    for line in report.warnings:
        print(f"warning:  {line}")
    if args.bundle:
        for line in write_bundle(lock, names, settings, args.bundle, extra=wants, depth=args.depth):
            print(f"bundled   {line}")
        print(f"wrote bundle {args.bundle}")
    if not args.no_export:
        export_names = [
            p.name for n in names for p in lock.closure(n) if p.parent is None or p.fetchcontent
        ]
        for name in export_names:
            tree = export_source(lock, name, BuildRoot(settings.build_root).src(name), settings)
            extra = f" (+{len(tree.placed)} submodule(s))" if tree.placed else ""
            if tree.substitute is not None:
                extra += " (SUBSTITUTED: the [substitutes] directory, not the pin)"
            if tree.imported is not None:  # an archive upstream, as one commit
                dropped = len(tree.imported.dropped)
                extra += (
                    f" (archive as one commit, tree {tree.imported.tree}"
                    + (f"; dropped {dropped} .git path(s) git cannot track" if dropped else "")
                    + ")"
                )
            print(f"exported  {name} -> {tree.path}{extra}")
    return 0


def unused_mirrors(settings, urls: list[str]) -> list[str]:
    """A warning for each mirror rule that matches none of `urls` (every pin of the lockfile
    and every backport): a prefix like `github.com` (no scheme) is otherwise silently
    ignored, and the fetch goes to the network."""
    urls = [u for u in urls if u]
    prefixes = sorted({"/".join(u.split("/")[:3]) + "/" for u in urls if "://" in u})
    out = []
    for mirror in settings.mirrors:
        if not any(url.startswith(mirror.upstream) for url in urls):
            out.append(
                f"mirror rule {mirror.upstream!r} = {mirror.mirror!r} "
                f"({settings.origin('mirror ' + mirror.upstream)}) matches no pinned URL "
                f"and is ignored; rules are URL prefixes as pins spell them "
                f"({', '.join(prefixes) or 'no pins'})"
            )
    return out


def run_plan(args: argparse.Namespace, ctx) -> int:
    matrix_only = [
        f
        for f, v in (
            ("--wave", args.wave is not None),
            ("--output", args.output),
            ("--max-waves", args.max_waves is not None),
            ("--no-remote-cache", args.no_remote_cache),
        )
        if v
    ]
    if not args.matrix:
        if matrix_only:
            raise SglforgeError(f"plan: {', '.join(matrix_only)} need --matrix")
        if args.json:
            from sglforge.cli.jsonout import emit

            emit("plan", plan.plan_document(ctx.project, ctx.settings, target=args.target))
            return 0
        print(plan.render_plan(ctx.project, ctx.settings, target=args.target))
        return 0
    if args.json:
        raise SglforgeError("plan: --matrix prints JSON already (its own format); drop --json")
    matrix = plan.build_matrix(
        ctx.project, ctx.settings, use_remote=not args.no_remote_cache, target=args.target
    )
    text = plan.render_matrix(matrix, wave=args.wave, max_waves=args.max_waves)
    if args.output:
        from sglforge.base.fs import atomic_write_text

        atomic_write_text(args.output, text + "\n")
    else:
        print(text)
    return 0
