"""Verb `patches`: check | apply | refresh | lint | digest."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import SglforgeError
from sglforge.base.git import check_url
from sglforge.cli.names import check_upstreams
from sglforge.inputs.pins import FULL_SHA, parse_lockfile
from sglforge.patching.apply import apply_series
from sglforge.patching.series import backport_wants, load_all_series
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import export_source, snapshot_directory
from sglforge.sources.fetch import GitWant, fetch_commit, fetch_sources


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "patches",
        help="patch series: check | apply | refresh | lint | digest",
        description="check: apply each series to a scratch export of its pin. "
        "apply: apply to <build-root>/src/<upstream>. "
        "refresh UPSTREAM --onto COMMIT: rebase the series onto a new pin. "
        "lint: DEP-3 errors and hints. digest URL COMMIT: a backport's sha256.",
    )
    p.add_argument(
        "action",
        choices=["check", "apply", "refresh", "lint", "digest"],
        help="what to do (see above)",
    )
    p.add_argument(
        "targets",
        nargs="*",
        default=[],
        metavar="UPSTREAM",
        help="upstreams (default: all with a series); for digest: URL COMMIT",
    )
    p.add_argument("--onto", metavar="COMMIT", help="refresh: the new upstream commit")
    p.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="refresh: resume after resolving a conflict in the scratch tree",
    )
    p.add_argument("--abort", action="store_true", help="refresh: drop a stopped refresh")
    p.add_argument("--offline", action="store_true", help="use only the source cache")
    p.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="check: apply to a copy of DIR instead of the pinned commit (e.g. the "
        "python/ tree of a release wheel when the repository is out of reach)",
    )
    p.add_argument(
        "--against-prefix",
        default="",
        metavar="PATH",
        help="with --against: where DIR sits inside the upstream tree (e.g. python)",
    )
    p.set_defaults(func=run_patches)


def _targets(args: argparse.Namespace, lock, project) -> list[str]:
    if args.targets:
        check_upstreams(args.targets, lock)
        for name in args.targets:
            if lock.get(name).parent is not None:
                raise SglforgeError(
                    f"'{name}' is not an upstream (it has a parent); series belong to upstreams"
                )
        return list(args.targets)
    return [p.name for p in lock.upstreams() if project.series_file(p.name).exists()]


def run_patches(args: argparse.Namespace, ctx) -> int:
    project = ctx.project
    if args.action == "lint":
        from sglforge.base.findings import blocking
        from sglforge.patching.lint import lint_project, render_findings

        lock = parse_lockfile(project.lockfile)
        check_upstreams(args.targets, lock)
        findings = lint_project(project, lock, args.targets or None)
        print(render_findings(findings))
        return 1 if blocking(findings) else 0
    settings = ctx.settings
    if args.action == "digest":
        return _digest(args, settings)
    lock = parse_lockfile(project.lockfile)
    names = _targets(args, lock, project)
    if args.action == "refresh":
        from sglforge.patching.refresh import abort_refresh, refresh_series

        if len(args.targets) != 1 or sum(map(bool, (args.onto, args.resume, args.abort))) != 1:
            raise SglforgeError(
                "usage: patches refresh UPSTREAM (--onto COMMIT | --continue | --abort)"
            )
        if args.abort:
            print(abort_refresh(settings, names[0]))
            return 0
        result = refresh_series(
            project, lock, names[0], args.onto, settings, offline=args.offline, resume=args.resume
        )
        print(result.summary())
        return 0
    all_series = load_all_series(project, lock, names)
    if args.against:
        if args.action != "check" or len(names) != 1:
            raise SglforgeError("--against works with `patches check UPSTREAM` (one upstream)")
        return _check_against(args, all_series[0], settings)
    if args.action == "check":
        return _check(args, lock, all_series, settings)
    # Applying for a build needs everything, submodules included.
    fetch_sources(
        lock,
        names,
        settings,
        offline=args.offline,
        extra=backport_wants(all_series),
        with_children=True,
    )
    for series in all_series:
        name = series.upstream
        if args.action == "apply":
            dest = BuildRoot(settings.build_root).src(name)
            tree = export_source(lock, name, dest, settings)
            applied = apply_series(tree.path, series, settings)
            print(
                f"applied   {name}: {len(applied)} entr{'y' if len(applied) == 1 else 'ies'} "
                f"on {lock.get(name).short} -> {dest}"
            )
            for item in applied:
                print(f"          {item.commit[:12]} {item.label}")
    return 0


def _check(args: argparse.Namespace, lock, all_series, settings) -> int:
    """Check every series on its own: one unreachable upstream does not hide the others.

    Each upstream (and its backports) is fetched separately; every result is printed and
    the verb fails at the end (exit 1) when any series could not be fetched or applied.
    """
    failed: list[str] = []
    for series in all_series:
        name = series.upstream
        try:
            # Checking needs only the upstream itself, never its submodules.
            fetch_sources(
                lock,
                [name],
                settings,
                offline=args.offline,
                extra=backport_wants([series]),
                with_children=False,
            )
        except SglforgeError as exc:
            failed.append(f"{name} (fetch)")
            print(f"FAILED    {name}: cannot fetch\n{exc}", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix=f"sglforge-check-{name}-") as tmp:
            try:
                tree = export_source(lock, name, Path(tmp) / name, settings, with_submodules=False)
                applied = apply_series(tree.path, series, settings)
            except SglforgeError as exc:
                failed.append(f"{name} (apply)")
                print(f"FAILED    {name}\n{exc}", flush=True)
                continue
            print(
                f"ok        {name}: {len(applied)} entr{'y' if len(applied) == 1 else 'ies'} "
                f"apply strictly to {lock.get(name).short} (patchset {series.patchset8})",
                flush=True,
            )
            for line in _tree_lines(lock, name, series, settings, tree.path):
                print(f"          {line}", flush=True)
    if failed:
        print(
            f"error: {len(failed)} of {len(all_series)} series failed: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


def _tree_lines(lock, name: str, series, settings, tree: Path) -> list[str]:
    """The tree after the series (recorded for `plan`) and each input's tree where the
    source cache has it (a FetchContent archive is extracted once to compute it)."""
    from sglforge.sources.trees import TreeRecords, input_tree, worktree_tree

    cache = SourceCache(settings.cache_dir)
    after = worktree_tree(tree)
    TreeRecords(cache).record_patched(lock.get(name), series.digest, after)
    lines = [f"tree {after} (git write-tree after the series)"]
    from sglforge.sources.substitute import substitute_tree, substitutes_for

    substitutes = substitutes_for(lock, settings, name)
    for pin in lock.closure(name)[1:]:
        if pin.name in substitutes:  # the user config's directory, not the pin
            lines.append(
                f"input {pin.name} (FetchContent): SUBSTITUTED by "
                f"{substitutes[pin.name].path}, tree "
                f"{substitute_tree(substitutes[pin.name])} (not the pin's)"
            )
            continue
        value = input_tree(cache, pin)
        if value is None and pin.sha256 and cache.tarball(pin.sha256).exists():
            with tempfile.TemporaryDirectory(prefix="sglforge-tree-") as tmp:
                dep = export_source(lock, pin.name, Path(tmp) / "dep", settings)
                value = input_tree(cache, pin, dep.path)
        kind = (
            "submodule" if pin.is_submodule else ("FetchContent" if pin.fetchcontent else "archive")
        )
        lines.append(
            f"input {pin.name} ({kind}): "
            + (
                f"tree {value}"
                if value
                else "tree not computed: not in the source cache (run fetch)"
            )
        )
    return lines


def _check_against(args: argparse.Namespace, series, settings) -> int:
    cache = SourceCache(settings.cache_dir)
    with cache.locked():
        for want in backport_wants([series]):
            if fetch_commit(cache, want, settings, args.offline) == "missing":
                raise SglforgeError(f"offline: {want.label}: commit {want.commit} not cached")
    with tempfile.TemporaryDirectory(prefix=f"sglforge-check-{series.upstream}-") as tmp:
        tree = snapshot_directory(args.against, Path(tmp) / series.upstream, args.against_prefix)
        applied = apply_series(tree, series, settings)
    print(
        f"ok        {series.upstream}: {len(applied)} entr{'y' if len(applied) == 1 else 'ies'}"
        f" apply strictly to {args.against} (as {args.against_prefix or '.'}/; "
        f"patchset {series.patchset8})"
    )
    return 0


def _digest(args: argparse.Namespace, settings) -> int:
    from sglforge.patching.backport import digest_of

    if len(args.targets) != 2:
        raise SglforgeError("usage: patches digest URL COMMIT")
    url, commit = args.targets
    problem = check_url(url)
    if problem is not None:
        raise SglforgeError(f"patches digest URL {url!r}: {problem}")
    if not FULL_SHA.fullmatch(commit):
        raise SglforgeError(f"patches digest COMMIT {commit!r}: give the full 40-hex commit id")
    cache = SourceCache(settings.cache_dir)
    with cache.locked():
        state = fetch_commit(
            cache, GitWant(url, commit, f"backport {commit[:12]}"), settings, offline=args.offline
        )
    if state == "missing":
        raise SglforgeError(f"offline: commit {commit} of {url} is not in the cache")
    digest = digest_of(cache.git_dir(url), commit)
    print(f"backport {url} {commit} sha256={digest}")
    return 0
