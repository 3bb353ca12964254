"""`sglforge build`: recipes -> content keys -> (cache hit | hermetic build) -> post-process.

The pipeline, one named step each, with timings printed at the end:
  load      lockfile, toolchain, recipes, patch series; check the build interpreter
  key       content key per wheel (dependencies first)
  per wheel (local cache hit: copy from the wheel cache and stop; else remote cache hit:
             download, verify, fill the local tier and stop)
    fetch     pinned sources into the source cache (mirrors apply)
    prepare   export the upstream at <build-root>/src/<upstream>, apply the series;
              export FetchContent sources at <build-root>/deps/<name>
    compile   the PEP 517 frontend, no network, logged to <build-root>/logs/<wheel>.log
    post      version check, torch pin, provenance, normalized zip
    audit     cuobjdump: required SASS in every device-code ELF
    leak scan no ELF or text member contains the build root or interpreter paths (wheel/leaks.py)
    store     into the wheel cache (<cache>/wheels/<key>/)
    upload    into the remote wheel cache, unless read-only (builder/wheelcache.py)
  --dev RECIPE (builder/devtree.py): that recipe's tree and build directory persist between
            builds; prepare syncs a strict export + series into them (only changed files are
            written); the wheel is labelled `.dev`, never stored in the wheel cache, and goes
            to <build-root>/dev-wheels/ unless --publish-dev
  publish   all wheels -> wheels/, then manifest.json and lockfiles/wheels.lock (atomic);
            nothing is published unless every wheel succeeded

Interrupted (Ctrl-C, SIGTERM, SIGHUP): the running compile's whole session is terminated
(procgroup.py) before the locks are released; nothing reaches wheels/ or the wheel cache.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import BuildFailed, SglforgeError
from sglforge.base.fs import exclusive_lock, remove_tree, sha256_file
from sglforge.base.git import git_out
from sglforge.base.logs import log_tail
from sglforge.base.procgroup import interrupts_deferred, run_in_session
from sglforge.base.steps import Steps
from sglforge.builder import compiler_cache, environment, prefixmap, sandbox
from sglforge.builder.cacheproxy import CacheProxy
from sglforge.builder.devtree import DevWorkspace, check_dev_names, state_config, sync_tree
from sglforge.builder.key import BUILD_FORMAT, BuildKey, compute_key, key_root
from sglforge.builder.mesonwraps import is_meson_project, place_wrap_inputs
from sglforge.builder.scheduler import JobPlan, Machine, build_order, plan_jobs
from sglforge.builder.wheelcache import (
    CacheEntry,
    DownloadLimits,
    ExpectedWheel,
    RemoteRefused,
    RemoteWheelCache,
    WheelCache,
)
from sglforge.inputs.pins import Lockfile, parse_lockfile
from sglforge.inputs.project import Project
from sglforge.inputs.recipes import Recipe, load_recipes, select, skip_lines
from sglforge.inputs.settings import Settings
from sglforge.inputs.targets import Target, load_target
from sglforge.inputs.toolchain import (
    CudaToolkit,
    Toolchain,
    ToolchainFingerprint,
    VersionCache,
    find_cuda,
    fingerprint,
    load_toolchain,
)
from sglforge.patching.apply import apply_series
from sglforge.patching.series import Backport, Entry, PatchSeries, backport_wants, load_series
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import export_source
from sglforge.sources.fetch import fetch_sources
from sglforge.sources.substitute import (
    label_segment,
    provenance_records,
    substitute_trees,
    substitutes_for,
)
from sglforge.sources.trees import (
    SourceTrees,
    TreeRecords,
    input_tree,
    input_trees,
    worktree_tree,
)
from sglforge.wheel import audit, leaks, normalize, outputs
from sglforge.wheel.provenance import FORMAT as PROVENANCE_FORMAT
from sglforge.wheel.provenance import Provenance
from sglforge.wheel.provenance import read as read_provenance

LOG_TAIL_LINES = 40
NETBRIDGE = Path(environment.__file__).with_name("netbridge.py")  # run by path, in the sandbox
StepFunction = Callable[["_Context", "_WheelJob"], None]
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL when a build is interrupted


@dataclass(frozen=True)
class BuildOptions:
    names: tuple[str, ...] = ()
    jobs: int | None = None
    mem_per_job: int | None = None
    compiler_cache: compiler_cache.CompilerCache | None = None  # verify: always None
    use_wheel_cache: bool = True  # False: no wheel cache at all, local or remote
    use_remote_cache: bool = True  # False (--no-remote-cache): the local tier only
    remote_read_only: bool = False  # True (--remote-cache-read-only): never upload
    wheelhouse: Path | None = None  # local wheels for recipes with isolation = true
    out_dir: Path | None = None  # None: publish to the project's wheels/ and lockfile
    progress_interval: float = 30.0
    dev: bool = False  # incremental build of the one named recipe (builder/devtree.py)
    publish_dev: bool = False  # dev wheels into wheels/ and the lock (else <root>/dev-wheels)
    target: str | None = None  # targets/<name>.toml (None: the product); wheels/targets/<name>
    sandbox: bool = True  # False: --unsafe-no-sandbox (printed, in provenance and key)


@dataclass(frozen=True)
class BuiltWheel:
    recipe: str
    path: Path  # the final (normalized, stamped, audited) wheel
    sha256: str
    name: str
    version: str
    provenance: Provenance
    key: str
    cached: bool  # from a wheel cache tier (local or remote), not built in this run
    seconds: float
    cache_stats: compiler_cache.CacheStats | None = None  # ccache, for a wheel built here
    dev: bool = False
    source: str = ""  # "local" / "remote" / "built"; empty: "local" if cached, else "built"
    uploaded: bool = False  # built here and uploaded to the remote wheel cache

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", "local" if self.cached else "built")


@dataclass
class BuildReport:
    wheels: list[BuiltWheel] = field(default_factory=list)
    steps: Steps = field(default_factory=Steps)
    compiler_cache: str | None = None  # CompilerCache.describe() (secrets masked)
    written: list[Path] = field(default_factory=list)  # outputs publishing wrote (or changed)


@dataclass(frozen=True)
class PreparedSource:
    source_dir: Path  # tree + recipe subdir
    fetchcontent: dict[str, Path]  # FetchContent name -> exported directory
    source_date_epoch: int
    trees: SourceTrees | None = None  # tree ids of what is compiled (provenance, verify)


def source_trees(
    lock: Lockfile,
    upstream: str,
    series: PatchSeries,
    settings: Settings,
    tree: Path,
    exported: dict[str, Path],
    substituted: dict[str, str] | None = None,
) -> SourceTrees:
    """The upstream's `git write-tree` after its series, and each input's tree; the first is
    recorded so `plan` can show it. A substituted input's tree must still be the one the
    build key was computed with."""
    cache = SourceCache(settings.cache_dir)
    after = worktree_tree(tree)
    TreeRecords(cache).record_patched(lock.get(upstream), series.digest, after)
    substituted = substituted or {}
    inputs = input_trees(lock, cache, upstream, exported, substituted=substituted)
    for name, expected in substituted.items():
        if inputs.get(name) != expected:
            raise SglforgeError(
                f"{upstream}: substitute for {name} changed during the build "
                f"(tree {expected} in the build key, {inputs.get(name)} "
                "placed)"
            )
    missing = [name for name, value in inputs.items() if value is None]
    if missing:  # the build just fetched and exported all of them
        raise SglforgeError(f"{upstream}: no tree id for {', '.join(missing)}")
    return SourceTrees(upstream, after, {k: v for k, v in inputs.items() if v})


# ---------------------------------------------------------------------------------------------
# prepare: export + patch (the one seam where patch application plugs in)


def commit_time(tree: Path, commit: str | None) -> int:
    """The pin's committer time (SOURCE_DATE_EPOCH). `log --no-walk` reads the one commit:
    `show -s` would also read its parent's tree, which a source cache made by a depth-1 fetch
    (a snapshot gap worked around) does not have."""
    return int(
        git_out(
            "log",
            "-1",
            "--no-walk",
            "--format=%ct",
            "--end-of-options",
            commit or "HEAD",
            "--",
            cwd=tree,
        )
    )


def prepare_source(
    lock: Lockfile,
    recipe: Recipe,
    series: PatchSeries,
    settings: Settings,
    substituted: dict[str, str] | None = None,
) -> PreparedSource:
    """Export the recipe's upstream afresh, apply its series, export its FetchContent sources.

    Every recipe gets a fresh tree, also when two recipes share an upstream (flashinfer-python
    and flashinfer-jit-cache): a build writes into its tree, and the next wheel's output must
    not depend on whether the previous one was built or came from the cache.
    """
    root = BuildRoot(settings.build_root)
    tree = export_source(lock, recipe.upstream, root.src(recipe.upstream), settings)
    epoch = commit_time(tree.path, tree.commit)
    apply_series(tree.path, series, settings)  # strictly, one commit per entry
    fetchcontent, exported = {}, {}
    if is_meson_project(tree.path):
        exported = _place_meson_wraps(lock, recipe, settings, root, tree.path)
    else:
        for pin in lock.fetchcontent(recipe.upstream):
            dep = export_source(lock, pin.name, root.dep(pin.name), settings)
            fetchcontent[pin.fetchcontent] = exported[pin.name] = dep.path
    trees = source_trees(
        lock, recipe.upstream, series, settings, tree.path, exported, substituted or {}
    )
    return _checked(
        PreparedSource(tree.path / recipe.subdir, fetchcontent, epoch, trees), recipe, tree.commit
    )


def _place_meson_wraps(
    lock: Lockfile, recipe: Recipe, settings: Settings, root: BuildRoot, tree: Path
) -> dict[str, Path]:
    """Meson ignores FETCHCONTENT_SOURCE_DIR_*: its pinned wrap inputs go into the tree's
    package cache (builder/mesonwraps.py). Every input is still exported as for CMake, for its
    tree id; returns those directories."""
    exported = {
        pin.name: export_source(lock, pin.name, root.dep(pin.name), settings).path
        for pin in lock.fetchcontent(recipe.upstream)
    }
    placed = place_wrap_inputs(
        lock, recipe.upstream, tree, SourceCache(settings.cache_dir), lambda pin: exported[pin.name]
    )
    for item in placed:
        print(f"    meson wrap {item.wrap}: {item.describe()}", flush=True)
    return exported


def _checked(prepared: PreparedSource, recipe: Recipe, commit: str | None) -> PreparedSource:
    if not prepared.source_dir.is_dir():
        raise SglforgeError(
            f"{recipe.path}: subdir '{recipe.subdir}' does not exist in "
            f"'{recipe.upstream}' at {commit}"
        )
    return prepared


def prepare_dev_source(
    lock: Lockfile, recipe: Recipe, series: PatchSeries, settings: Settings, ws: DevWorkspace
) -> PreparedSource:
    """Like prepare_source, into the scratch of the dev workspace (strictly, as always), then
    synced into its live tree: only files whose bytes differ are written."""
    remove_tree(ws.scratch)
    tree = export_source(lock, recipe.upstream, ws.scratch / "tree", settings)
    epoch = commit_time(tree.path, tree.commit)
    apply_series(tree.path, series, settings)
    after = worktree_tree(tree.path)
    live = ws.slot("tree").live
    stats = sync_tree(tree.path, live, previous=ws.previous("tree"))
    tracked = {"tree": stats.tracked}
    fetchcontent = {}
    cache = SourceCache(settings.cache_dir)
    substituted = substitutes_for(lock, settings, recipe.upstream)
    inputs = input_trees(
        lock,
        cache,
        recipe.upstream,  # archives: from their records
        substituted=substituted,
    )
    for pin in lock.fetchcontent(recipe.upstream):
        dep = export_source(lock, pin.name, ws.scratch / "deps" / pin.name, settings)
        if inputs.get(pin.name) is None:  # a substitute's: never recorded under the pin
            inputs[pin.name] = input_tree(cache, pin, dep.path, substituted=pin.name in substituted)
        slot = ws.slot(f"deps/{pin.name}")
        dep_stats = sync_tree(dep.path, slot.live, previous=ws.previous(slot.key))
        tracked[slot.key] = dep_stats.tracked
        stats.written += [f"deps/{pin.name}/{p}" for p in dep_stats.written]
        stats.removed += [f"deps/{pin.name}/{p}" for p in dep_stats.removed]
        stats.unchanged += dep_stats.unchanged
        fetchcontent[pin.fetchcontent] = slot.live
    ws.mark_synced(tracked)
    remove_tree(ws.scratch)
    changed = [p for p in stats.written if not p.startswith(".git/")]
    state = "new dev tree" if ws.fresh else "dev tree"
    print(
        f"    {state} {live}: {len(changed)} file(s) written"
        + (
            f" ({', '.join(changed[:6])}{', …' if len(changed) > 6 else ''})"
            if changed and not ws.fresh
            else ""
        )
        + f", {len([p for p in stats.removed if not p.startswith('.git/')])} removed, "
        f"{stats.unchanged} unchanged",
        flush=True,
    )
    trees = SourceTrees(recipe.upstream, after, {k: v for k, v in inputs.items() if v})
    return _checked(
        PreparedSource(live / recipe.subdir, fetchcontent, epoch, trees), recipe, tree.commit
    )


# ---------------------------------------------------------------------------------------------
# compile


def _render(template: str, values: dict[str, str]) -> str:
    return template.format(**values)


# `build --dev`: the PEP 517 backend's build_wheel called directly (pyproject_hooks, or pip's
# vendored copy), as pip does, without pip's start-up and its separate metadata pass (~2 s of
# every dev build). Release builds keep the recipe's frontend.
DEV_FRONTEND = r"""
import json, os, sys
try:
    from pyproject_hooks import BuildBackendHookCaller
except ImportError:
    from pip._vendor.pyproject_hooks import BuildBackendHookCaller
try:
    import tomllib
except ImportError:
    from pip._vendor import tomli as tomllib
source, dist, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
system = {}
if os.path.isfile(os.path.join(source, "pyproject.toml")):
    with open(os.path.join(source, "pyproject.toml"), "rb") as handle:
        system = tomllib.load(handle).get("build-system", {})
backend = system.get("build-backend", "setuptools.build_meta:__legacy__")
print(f"sglforge dev frontend: {backend} build_wheel in {source}", flush=True)
hooks = BuildBackendHookCaller(source, backend, backend_path=system.get("backend-path"),
                               python_executable=sys.executable)
print("built", hooks.build_wheel(dist, config_settings=config or None), flush=True)
"""


def frontend_command(
    recipe: Recipe,
    source: Path,
    dist: Path,
    config: dict[str, tuple[str, ...]],
    wheelhouse: Path | None,
    dev: bool = False,
) -> list[str]:
    if dev and not recipe.isolation:
        settings = {k: vs[0] if len(vs) == 1 else list(vs) for k, vs in config.items()}
        return [
            sys.executable,
            "-c",
            DEV_FRONTEND,
            str(source),
            str(dist),
            json.dumps(settings, sort_keys=True),
        ]
    if recipe.frontend == "pip":
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--verbose",
            "--wheel-dir",
            str(dist),
        ]
        if not recipe.isolation:
            cmd.append("--no-build-isolation")
        cmd += ["--no-index"] + (["--find-links", str(wheelhouse)] if wheelhouse else [])
        cmd += [f"--config-settings={k}={v}" for k, vs in config.items() for v in vs]
    else:
        cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist)]
        if not recipe.isolation:
            cmd.append("--no-isolation")
        cmd += [f"--config-setting={k}={v}" for k, vs in config.items() for v in vs]
    return cmd + [str(source)]


def run_logged(
    cmd: list[str], *, env: dict[str, str], cwd: Path, log: Path, label: str, interval: float
) -> int:
    """Run `cmd` with output to `log`; show progress (elapsed time and the last log line).

    The command runs in a session of its own and never outlives this call: on an exception,
    Ctrl-C or SIGTERM its whole tree is terminated (SIGTERM, grace, SIGKILL, /proc check)
    before the exception propagates, i.e. before the build root's lock is released."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tty = sys.stdout.isatty()
    started = time.monotonic()
    last_report = started

    def progress() -> None:
        nonlocal last_report
        now = time.monotonic()
        if tty or now - last_report >= interval:
            last_report = now
            status = f"  [{label}] {_clock(now - started)} {_last_line(log)}"[:110]
            print(
                ("\r" + status.ljust(110)) if tty else status, end="" if tty else "\n", flush=True
            )

    with open(log, "ab") as out:
        out.write(f"$ cd {cwd}\n$ {shlex.join(cmd)}\n".encode())
        out.flush()
        try:
            rc, leftovers = run_in_session(
                cmd,
                grace=KILL_GRACE,
                on_poll=progress,
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            if tty:
                print("\r" + " " * 110 + "\r", end="", flush=True)
    if leftovers.how != "already exited":
        print(
            f"    [{label}] stopped processes left behind by the build ({leftovers.how})",
            flush=True,
        )
    if leftovers.survivors:
        raise SglforgeError(
            f"build of {label}: processes survived SIGKILL: pids {leftovers.survivors}"
        )
    return rc


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60):d}m{int(seconds % 60):02d}s"


def _last_line(log: Path) -> str:
    with open(log, "rb") as handle:
        handle.seek(max(0, log.stat().st_size - 4096))
        lines = handle.read().decode(errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _unpack_wheels(wheels: list[Path], site: Path) -> None:
    """Make dependency wheels importable during a build (PYTHONPATH), without installing."""
    from sglforge.sources.archive import extract_zip

    for wheel in wheels:  # checked member by member: a wheel may come from a remote cache
        extract_zip(wheel, site, f"dependency wheel {wheel.name}")


# ---------------------------------------------------------------------------------------------
# the pipeline


@dataclass
class _Context:
    project: Project
    settings: Settings
    root: BuildRoot
    options: BuildOptions
    lock: Lockfile
    toolchain: Toolchain
    cuda: CudaToolkit | None
    tool: ToolchainFingerprint
    machine: Machine
    report: BuildReport
    cuobjdump: Path | None = None
    libraries: audit.LibraryWorld | None = None
    sandbox: sandbox.Bubblewrap | None = None  # None: --unsafe-no-sandbox
    remote: RemoteWheelCache | None = None  # None: no remote tier (or it became unavailable)
    substituted: dict[str, dict[str, str]] = field(default_factory=dict)  # BuildInputs'
    upstreams: tuple[str, ...] = ()  # every upstream this build selects (a fetch error lists)

    def substitute_label(self, recipe: Recipe) -> str | None:
        """`sub<8 hex>` when the recipe's inputs are substituted (sources/substitute.py),
        appended to the wheel's version after post-processing: such a wheel never carries
        the pinned wheel's name."""
        return label_segment(self.substituted.get(recipe.name, {}))

    def remote_upload(self, key: BuildKey, entry: CacheEntry) -> bool:
        """Upload a wheel built in this run; a failure is a warning (the build succeeded)."""
        assert self.remote is not None
        try:
            self.remote.upload(key.remote_value, entry)
        except SglforgeError as exc:
            print(f"    warning: not uploaded to the remote wheel cache: {exc}", flush=True)
            return False
        print(
            f"    uploaded to the remote wheel cache "
            f"{self.remote.store.url_of(self.remote.entry_prefix(key.remote_value))}/",
            flush=True,
        )
        return True


@dataclass
class _WheelJob:
    """One wheel on its way through the steps; each step fills in what later ones read."""

    recipe: Recipe
    series: PatchSeries
    key: BuildKey
    deps: list[BuiltWheel]
    staging: Path
    dev: DevWorkspace | None = None  # `build --dev`: the persistent tree and build directory
    prepared: PreparedSource | None = None
    built: Path | None = None  # as the build backend wrote it
    final: Path | None = None  # normalized, stamped
    info: normalize.WheelInfo | None = None
    cache_stats: compiler_cache.CacheStats | None = None


def _series_entry(entry: Entry, upstream: str) -> dict[str, str]:
    """A series entry as the provenance (and the SBOM made from it) records it: its digest,
    and where it comes from (a backport's repository and commit, a patch's project path)."""
    if isinstance(entry, Backport):
        return {
            "name": entry.name,
            "sha256": entry.digest,
            "kind": "backport",
            "url": entry.url,
            "commit": entry.commit,
        }
    return {
        "name": entry.name,
        "sha256": entry.digest,
        "kind": "patch",
        "path": f"patches/{upstream}/{entry.name}",
    }


def _provenance(
    ctx: _Context,
    recipe: Recipe,
    series: PatchSeries,
    key: BuildKey,
    epoch: int,
    trees: SourceTrees | None = None,
) -> Provenance:
    """What the wheel is built from; post-processing stamps its version in."""
    pin = ctx.lock.get(recipe.upstream)
    with_torch = recipe.requires_torch_abi or "torch" in recipe.build_requires
    inputs = trees.inputs if trees is not None else {}
    return Provenance(
        format=PROVENANCE_FORMAT,
        generated_by="sglforge build",
        wheel=recipe.name,
        upstream=recipe.upstream,
        url=pin.url,
        commit=pin.identity,  # an archive upstream: sha256:<hex>, not a made-up commit
        sha256=pin.sha256,
        sdist=pin.sdist,
        tree=trees.tree if trees is not None else None,
        embeds=tuple(
            {
                "path": e.path,
                "url": e.url,
                "claimed_commit": e.claimed_commit,
                "tree": e.tree,
                "verified": False,
            }
            for e in pin.embeds
        )
        or None,
        version="",
        subdir=recipe.subdir,
        sources=tuple(
            {
                "name": p.name,
                "url": p.url,
                "commit": p.commit,
                "sha256": p.sha256,
                **({"tree": inputs[p.name]} if p.name in inputs else {}),
            }
            for p in ctx.lock.closure(recipe.upstream)[1:]
        ),
        patches=tuple(_series_entry(e, series.upstream) for e in series.entries),
        series_sha256=series.digest,
        recipe_sha256=recipe.sha256,
        toolchain=ctx.tool.summary(with_torch),
        build_requires={
            r: ctx.tool.build_requires.get(r) or ctx.tool.torch
            for r in sorted(recipe.build_requires)
        },
        cuda_archs=tuple(recipe.cuda_archs),
        requires_torch=ctx.toolchain.torch_public if recipe.requires_torch_abi else None,
        source_date_epoch=epoch,
        build_root=str(key_root(ctx.settings.build_root, unsandboxed=ctx.sandbox is None)),
        content_key=key.value,
        target=ctx.options.target,
        substitutes=provenance_records(
            ctx.lock, ctx.settings, ctx.substituted.get(recipe.name, {})
        ),
        unsandboxed=sandbox.UNSAFE_FLAG if ctx.sandbox is None else None,
    )


# ---------------------------------------------------------------------------------------------
# the steps of one wheel


def _fetch(ctx: _Context, job: _WheelJob) -> None:
    wants = backport_wants([job.series])
    try:
        report = fetch_sources(
            ctx.lock, [job.recipe.upstream], ctx.settings, offline=False, extra=wants
        )
    except SglforgeError as exc:
        raise SglforgeError(exc.args[0] + _others_missing(ctx, job), hint=exc.hint) from None
    for warning in report.warnings:
        print(f"    warning: {warning}")


def _others_missing(ctx: _Context, job: _WheelJob) -> str:
    """The build's other upstreams whose sources the cache lacks too (checked offline: no
    network), so a failed fetch of the first shows everything this build still needs."""
    others = [u for u in ctx.upstreams if u != job.recipe.upstream]
    if not others:
        return ""
    try:
        fetch_sources(ctx.lock, others, ctx.settings, offline=True)
    except SglforgeError as exc:
        listed = [line for line in exc.args[0].splitlines() if line.startswith("  - ")]
        if listed:
            return (
                f"\nthis build's other upstreams lack {len(listed)} source(s) in the cache as "
                "well:\n" + "\n".join(listed)
            )
    return ""


def _prepare(ctx: _Context, job: _WheelJob) -> None:
    if job.dev is not None:
        job.prepared = prepare_dev_source(ctx.lock, job.recipe, job.series, ctx.settings, job.dev)
    else:
        job.prepared = prepare_source(
            ctx.lock, job.recipe, job.series, ctx.settings, ctx.substituted.get(job.recipe.name)
        )


@dataclass(frozen=True)
class _Invocation:
    cmd: list[str]  # the frontend command, as the log and an error show it
    wrapped: list[str]  # what runs: the command in its sandbox (builder/sandbox.py)
    env: dict[str, str]
    dist: Path  # where the backend writes the wheel
    log: Path
    stats_log: Path | None = None  # ccache's CCACHE_STATSLOG of this build
    proxy: CacheProxy | None = None  # the remote cache's proxy, started around the compile


@dataclass(frozen=True)
class _WorkDirs:
    """A wheel's work directory (<build-root>/work/<wheel>) and its parts."""

    work: Path
    dist: Path  # where the backend writes the wheel
    build: Path  # {build_dir}: kept between dev builds
    site: Path  # the dependency wheels, unpacked (PYTHONPATH)


def _work_dirs(ctx: _Context, job: _WheelJob) -> _WorkDirs:
    """The work directories, emptied (a dev build keeps its build directory), and the
    sandbox's HOME and TMP."""
    root = ctx.root
    work = root.work(job.recipe.name)
    dirs = _WorkDirs(work, work / "dist", work / "build", work / "site")
    # a dev build keeps its build directory (builder/devtree.py); a release build starts empty
    for path in [dirs.dist, dirs.site] if job.dev is not None else [work]:
        remove_tree(path)
    for path in (dirs.dist, dirs.build, root.home, root.tmp):
        path.mkdir(parents=True, exist_ok=True)
    return dirs


def _job_plan(ctx: _Context, recipe: Recipe) -> JobPlan:
    """How many compile jobs (and nvcc threads) fit the machine; printed."""
    mem_per_job = recipe.mem_per_job if ctx.options.mem_per_job is None else ctx.options.mem_per_job
    plan: JobPlan = plan_jobs(ctx.machine, mem_per_job, recipe.nvcc_threads, ctx.options.jobs)
    print(f"    {plan.describe()}", flush=True)
    return plan


def _placeholder_values(
    ctx: _Context, job: _WheelJob, plan: JobPlan, build_dir: Path
) -> dict[str, str]:
    """The recipe's placeholders ({version}, {jobs}, ...; recipes.PLACEHOLDERS) filled in,
    except {cuda_gap_lib} (`_cuda_gaps`)."""
    recipe, prepared = job.recipe, job.prepared
    assert prepared is not None
    local = recipe.local_label(job.series.patchset8, ctx.toolchain.cuda_tag, job.key.value[:8])
    return {
        "version": recipe.version(local) or "",
        "local": local or "",
        "patchset8": job.series.patchset8,
        "cuda": ctx.toolchain.cuda_tag,
        "jobs": str(plan.jobs),
        "nvcc_threads": str(plan.nvcc_threads),
        "source": str(prepared.source_dir),
        "build_dir": str(build_dir),
        "build_root": str(ctx.root.path),
        # the toolchain venv's site-packages (wheels that are build inputs: libucx-cu13)
        "site_packages": sysconfig.get_paths()["purelib"],
        **recipe.arch_values,  # cuda-archs in each consumer's form (recipes.ARCH_FORMS)
    }


def _cuda_gaps(
    ctx: _Context, recipe: Recipe, site_packages: str
) -> tuple[dict[str, str], dict[str, str]]:
    """With cuda-from-toolchain: (the environment, the {cuda_gap_lib} placeholder) that fill
    the CUDA toolkit's gaps from the toolchain's nvidia-* wheels; printed. Else empty."""
    if not recipe.cuda_from_toolchain:
        return {}, {}
    gap_env, gap_lib, linked = environment.cuda_gap_env(
        ctx.root,
        Path(site_packages),
        ctx.cuda.home if ctx.cuda else None,
        ctx.toolchain.cuda.split(".")[0],
    )
    print(
        f"    cuda-from-toolchain: {len(linked)} gap(s) of the CUDA toolkit filled from "
        "the toolchain's nvidia-* wheels"
        + (f" ({', '.join(x for x in linked if x.startswith('lib/'))})" if linked else ""),
        flush=True,
    )
    return gap_env, {"cuda_gap_lib": str(gap_lib)}


@dataclass(frozen=True)
class _CacheSetup:
    """How one build uses the compiler cache (`--compiler-cache`; all empty without one)."""

    tool_dir: Path  # the cache tool's directory
    env: dict[str, str]
    defines: list[str]  # CMake -D options (the compiler launchers)
    stats_log: Path | None = None  # ccache's CCACHE_STATSLOG of this build
    proxy: CacheProxy | None = None  # the remote cache's proxy (not started yet)
    bridge: tuple[str, ...] = ()  # the netbridge command the build runs under, if any


def _remote_ccache(
    cache: compiler_cache.CompilerCache, plan: JobPlan
) -> tuple[CacheProxy, str, tuple[str, ...]]:
    """(the cache proxy, ccache's remote storage setting, the netbridge command prefix)."""
    # the build's ccache talks to sglforge's proxy, which holds the credentials and
    # enforces read-only (builder/cacheproxy.py); no credential enters `env`
    assert cache.remote is not None
    remote = compiler_cache.plan_remote(cache.remote)
    # a connection per compile job at most, with room for the bridge's own
    proxy = CacheProxy(
        remote.upstream, read_only=cache.read_only, max_clients=max(64, 2 * plan.jobs)
    )
    storage = remote.storage.replace("{socket}", str(proxy.path))
    bridge: tuple[str, ...] = ()
    if remote.bridge_port is not None:
        bridge = (
            sys.executable,
            "-I",
            str(NETBRIDGE),
            str(remote.bridge_port),
            str(proxy.path),
            "--",
        )
    return proxy, storage, bridge


def _cache_setup(ctx: _Context, work: Path, plan: JobPlan) -> _CacheSetup:
    """The compiler cache's directory, config, remote proxy, environment and -D options."""
    root, cache = ctx.root, ctx.options.compiler_cache
    stats_log = work / "ccache-stats.log" if cache and cache.kind == "ccache" else None
    cache_tool_dir = compiler_cache.tool_dir(
        cache, ctx.settings.cache_dir, ctx.settings.compiler_cache.dir
    )
    if cache is not None:
        cache_tool_dir.mkdir(parents=True, exist_ok=True)
    proxy, storage, bridge = None, None, ()
    if cache and cache.kind == "ccache" and cache.remote:
        proxy, storage, bridge = _remote_ccache(cache, plan)
    ns = compiler_cache.namespace(ctx.tool.nvcc, ctx.tool.compiler, ctx.tool.platform)
    cache_config = compiler_cache.write_config(root.tools_dir) if cache else None
    cache_env, cache_defines = compiler_cache.cache_env(
        cache,
        cache_tool_dir,
        ns=ns,
        stats_log=stats_log,
        storage=storage,
        config=cache_config,
        tmp=root.tmp,
    )
    return _CacheSetup(cache_tool_dir, cache_env, cache_defines, stats_log, proxy, bridge)


def _cmake_args(
    ctx: _Context, job: _WheelJob, values: dict[str, str], cache_defines: list[str]
) -> str:
    """CMAKE_ARGS: the recipe's [cmake-defines], the injected FetchContent sources, the CUDA
    toolkit and the compiler cache's launchers."""
    recipe, prepared = job.recipe, job.prepared
    assert prepared is not None
    cmake_args = [f"-D{k}={_render(v, values)}" for k, v in sorted(recipe.cmake_defines.items())]
    for name, path in sorted(prepared.fetchcontent.items()):
        cmake_args.append(f"-DFETCHCONTENT_SOURCE_DIR_{name.upper()}={path}")
    # Disconnected: FetchContent never downloads; CMP0170 NEW makes an un-injected
    # dependency a configure error instead of a warning (CMake >= 3.30).
    cmake_args += ["-DFETCHCONTENT_FULLY_DISCONNECTED=ON", "-DCMAKE_POLICY_DEFAULT_CMP0170=NEW"]
    cuda_home = ctx.cuda.home if ctx.cuda else None
    if cuda_home:
        cmake_args.append(f"-DCUDAToolkit_ROOT={cuda_home}")
    cmake_args += cache_defines
    return " ".join(shlex.quote(a) for a in cmake_args)


def _frontend_command(
    ctx: _Context, job: _WheelJob, values: dict[str, str], dist: Path
) -> list[str]:
    """The PEP 517 frontend's command, with the recipe's [config-settings] filled in."""
    recipe, prepared = job.recipe, job.prepared
    assert prepared is not None
    config = {
        k: tuple(_render(v, values) for v in vs) for k, vs in sorted(recipe.config_settings.items())
    }
    return frontend_command(
        recipe, prepared.source_dir, dist, config, ctx.options.wheelhouse, dev=job.dev is not None
    )


def _sandboxed_build(
    ctx: _Context,
    job: _WheelJob,
    cmd: list[str],
    env: dict[str, str],
    work: Path,
    cache_setup: _CacheSetup,
) -> tuple[list[str], dict[str, str], str]:
    """`_sandboxed` for this build: it writes its tree and work dir, and a compiler cache
    only when writable; it reads the FetchContent exports, the cache proxy and netbridge."""
    recipe, prepared, cache = job.recipe, job.prepared, ctx.options.compiler_cache
    assert prepared is not None
    writable_cache = [cache_setup.tool_dir] if cache and not cache.read_only else []
    inputs = [
        # the cache objects the tree's git borrows, read-only (setuptools-scm's file finder)
        *sandbox.git_alternates(ctx.root.src(recipe.upstream)),
        *prepared.fetchcontent.values(),
        *([cache_setup.proxy.dir] if cache_setup.proxy else []),
        *([NETBRIDGE] if cache_setup.bridge else []),
        *([cache_setup.tool_dir] if cache and cache.read_only else []),
    ]
    return _sandboxed(
        ctx,
        recipe,
        [*cache_setup.bridge, *cmd],
        env,
        prepared.source_dir,
        [ctx.root.src(recipe.upstream), work, *writable_cache],
        inputs,
    )


def _write_log_header(log: Path, job: _WheelJob, described: str, env: dict[str, str]) -> None:
    """The build log starts with the wheel, its key, the sandbox and the environment."""
    with open(log, "wb") as handle:
        handle.write(f"# sglforge build log: {job.recipe.name} (key {job.key.value})\n".encode())
        handle.write(f"# sandbox: {described}\n".encode())
        handle.write(compiler_cache.mask_env_lines(env).encode())  # defence in depth


def _configure(ctx: _Context, job: _WheelJob) -> _Invocation:
    """Work directories, job plan, environment and frontend command; the log's header."""
    recipe, prepared, root = job.recipe, job.prepared, ctx.root
    assert prepared is not None
    dirs = _work_dirs(ctx, job)
    if ctx.cuda:
        environment.write_nvcc_wrapper(root.tools_bin)
    plan = _job_plan(ctx, recipe)
    values = _placeholder_values(ctx, job, plan, dirs.build)
    env = environment.base_env(
        root,
        ctx.cuda.home if ctx.cuda else None,
        ctx.cuda.nvcc if ctx.cuda else None,
        prepared.source_date_epoch,
    )
    gap_env, gap_values = _cuda_gaps(ctx, recipe, values["site_packages"])
    env.update(gap_env)
    values.update(gap_values)
    env.update(plan.env())
    cache_setup = _cache_setup(ctx, dirs.work, plan)
    env.update(cache_setup.env)
    env["CMAKE_ARGS"] = _cmake_args(ctx, job, values, cache_setup.defines)
    for name, value in sorted(recipe.env.items()):
        env[name] = _render(value, values)
    if job.deps:
        _unpack_wheels([d.path for d in job.deps], dirs.site)
        env["PYTHONPATH"] = str(dirs.site)
    cmd = _frontend_command(ctx, job, values, dirs.dist)
    log = root.log(recipe.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    wrapped, env, described = _sandboxed_build(ctx, job, cmd, env, dirs.work, cache_setup)
    _write_log_header(log, job, described, env)
    return _Invocation(cmd, wrapped, env, dirs.dist, log, cache_setup.stats_log, cache_setup.proxy)


def _sandboxed(
    ctx: _Context,
    recipe: Recipe,
    cmd: list[str],
    env: dict[str, str],
    cwd: Path,
    writable: list[Path],
    inputs: list[Path],
) -> tuple[list[str], dict[str, str], str]:
    """`cmd` in the build sandbox (builder/sandbox.py), its environment as the build sees it
    (the build root at sandbox.SANDBOX_PATH) and how the log describes it: writable only
    `writable` and a private HOME/TMP; read-only the system, the interpreter, CUDA, the
    tools dir, a wheelhouse and `inputs`. With --unsafe-no-sandbox: as the caller, at the
    host's paths, in a network namespace where one can be made."""
    root = ctx.root
    if ctx.sandbox is None:
        prefix = environment.network_isolation()
        return (
            [*prefix, *cmd],
            env,
            (
                f"NONE ({sandbox.UNSAFE_FLAG}): the build runs as the caller, "
                f"network isolation: {shlex.join(prefix) or 'proxies only'}"
            ),
        )
    readable = [
        root.tools_dir,
        *inputs,
        *([ctx.options.wheelhouse] if ctx.options.wheelhouse else []),
        *([ctx.cuda.home] if ctx.cuda else []),
    ]
    view = sandbox.PathView(root.path)
    mounts = sandbox.Mounts(
        cwd=cwd,
        writable=tuple(writable),
        readable=tuple(readable),
        private=root.sandbox(recipe.name),
        home=root.home,
        tmp=root.tmp,
        secrets=secret_files(ctx.settings),
        view=view,
    )
    return ctx.sandbox.wrap(mounts, cmd), view.env(env), ctx.sandbox.describe()


def _compile(ctx: _Context, job: _WheelJob) -> None:
    recipe, prepared = job.recipe, job.prepared
    assert prepared is not None
    run = _configure(ctx, job)
    try:
        if run.proxy is not None:
            run.proxy.start()
        rc = run_logged(
            run.wrapped,
            env=run.env,
            cwd=prepared.source_dir,
            log=run.log,
            label=recipe.name,
            interval=ctx.options.progress_interval,
        )
    finally:
        if run.proxy is not None:
            run.proxy.close()
            _log_refusals(run.log, run.proxy.refused, run.proxy.refusals)
    if run.stats_log is not None:
        cache = ctx.options.compiler_cache
        job.cache_stats = compiler_cache.CacheStats.read(
            run.stats_log, remote=bool(cache and cache.remote)
        )
        print(f"    {job.cache_stats.describe()}", flush=True)
    if rc != 0:
        tail = log_tail(run.log, LOG_TAIL_LINES)
        raise SglforgeError(
            f"build of {recipe.name} failed (exit {rc}){_why_failed(ctx, tail)}\n"
            f"command: {shlex.join(run.cmd)}\n  in {prepared.source_dir}\n"
            f"log: {run.log}\n--- last {LOG_TAIL_LINES} lines of the log ---\n{tail}"
        )
    built = sorted(run.dist.glob("*.whl"))
    if len(built) != 1:
        raise SglforgeError(
            f"build of {recipe.name}: expected one wheel in {run.dist}, found "
            f"{[p.name for p in built] or 'none'} (log: {run.log})"
        )
    job.built = built[0]


def _why_failed(ctx: _Context, tail: str) -> str:
    """A cause the log names that the user fixes outside the code (a full disk), for the
    headline: it is easy to miss 40 lines down."""
    if "No space left on device" in tail or "[Errno 28]" in tail:
        import shutil

        free = shutil.disk_usage(ctx.root.path).free
        return (
            f": the disk is full (No space left on device; {free / 2**20:.0f} MiB free under "
            f"the build root {ctx.root.path} now): free space or choose another --build-root"
        )
    return ""


@functools.cache
def _warn_once(message: str) -> None:
    print(f"    warning: {message}", flush=True)


def _log_refusals(log: Path, refused: list[str], total: int) -> None:
    """What the cache proxy refused, at the end of the build's log (its own words only; the
    first 50, and how many there were in all)."""
    if refused:
        with open(log, "ab") as handle:
            handle.write(
                "".join(
                    f"# sglforge cache proxy refused: {line}\n" for line in refused[:50]
                ).encode()
            )
            if total > 50:
                handle.write(f"# sglforge cache proxy refused {total} in all\n".encode())


def _postprocess(ctx: _Context, job: _WheelJob) -> None:
    recipe, prepared = job.recipe, job.prepared
    assert prepared is not None and job.built is not None
    local = recipe.local_label(job.series.patchset8, ctx.toolchain.cuda_tag, job.key.value[:8])
    version = recipe.version(local)
    provenance = _provenance(
        ctx, recipe, job.series, job.key, prepared.source_date_epoch, prepared.trees
    )
    retag = recipe.version_label == "retag"
    job.final, job.info = normalize.postprocess(
        job.built,
        job.staging,
        expected_version=None if retag else version,
        expected_local=local if version is None and not retag else None,
        retag_local=local if retag else None,
        torch_version=ctx.toolchain.torch_public if recipe.requires_torch_abi else None,
        provenance=provenance,
        epoch=prepared.source_date_epoch,
        exclude=recipe.exclude,
        dev=job.dev is not None,
        substituted=ctx.substitute_label(recipe),
    )
    removed = job.info.removed
    if removed:
        print(
            f"    removed {len(removed)} build-litter member(s): "
            + ", ".join(removed[:8])
            + (", …" if len(removed) > 8 else "")
        )


def _elf_audit(ctx: _Context, job: _WheelJob) -> None:
    """Platform tag vs ELF content (always an error), then every DT_NEEDED (recipe: elf-deps)."""
    recipe, wheel = job.recipe, job.final
    assert wheel is not None
    audit.audit_purity(wheel)
    if ctx.libraries is None:
        ctx.libraries = audit.LibraryWorld.detect()
    deps = audit.audit_dependencies(wheel, ctx.libraries)
    if any(d.source is None for d in deps):
        message = audit.render_unresolved(wheel, deps)
        if recipe.elf_deps == "error":
            raise SglforgeError(
                message,
                hint=f"{recipe.path}: link with an $ORIGIN-relative "
                'RPATH, or set elf-deps = "warn" with a reason',
            )
        print("    warning: " + message.replace("\n", "\n    "))
    resolved = sorted({f"{d.library} ({d.source})" for d in deps if d.source is not None})
    if resolved:
        print(f"    DT_NEEDED ok: {', '.join(resolved)}")


def _arch_audit(ctx: _Context, job: _WheelJob) -> None:
    """cuobjdump: the required SASS in every ELF with device code and no kernel compiled to an
    arch-conditional stub for it (audit.stubs); the log line says which GPUs of those archs'
    majors each ELF runs on (audit.runs_on)."""
    assert job.final is not None
    if ctx.cuobjdump is None:
        ctx.cuobjdump = audit.find_cuobjdump(ctx.cuda.home if ctx.cuda else None)
    if ctx.cuobjdump is None:
        raise SglforgeError(
            "arch audit needs cuobjdump (CUDA toolkit or PyPI 'nvidia-cuda-cuobjdump'), none found"
        )
    found = audit.audit_wheel(job.final, job.recipe.cuda_archs, ctx.cuobjdump)
    gaps = audit.load_gaps(found, audit.implied_devices(job.recipe.cuda_archs))
    if gaps:  # the SASS check implies these; a guard, in the runs_on rules' own terms
        raise SglforgeError(f"{job.final.name}: arch audit failed:\n  - " + "\n  - ".join(gaps))
    devices = audit.family_devices(job.recipe.cuda_archs)
    for elf in found:
        print(f"    audit ok: {elf.member}: {elf.describe(devices)}")
        for stub in elf.stubs:  # the fatal ones failed audit_wheel already
            print(
                f"    audit note: {elf.member}: {stub.describe()}: stubs of kernels for other "
                "archs (the host dispatches them on those GPUs only)"
            )


def _leak_scan(ctx: _Context, job: _WheelJob) -> None:
    """No ELF or text member may contain the build root or the interpreter's paths."""
    assert job.final is not None
    leaks.check_wheel(job.final, prefixmap.leak_needles(ctx.root.path))


def _wheel_steps(recipe: Recipe) -> list[tuple[str, StepFunction]]:
    """The named steps of building one wheel, in order (names as the summary prints them)."""
    steps = [
        ("fetch", _fetch),
        ("prepare", _prepare),
        ("compile", _compile),
        ("post-process", _postprocess),
        ("elf audit", _elf_audit),
        ("leak scan", _leak_scan),
    ]
    if recipe.cuda_archs:
        steps.append(("audit", _arch_audit))
    return steps


# Steps after the build started: an error there is a failed build (exit 1), not bad input.
FAILED_BUILD_STEPS = frozenset({"compile", "post-process", "elf audit", "leak scan", "audit"})


def _run_step(name: str, step: StepFunction, ctx: _Context, job: _WheelJob) -> None:
    try:
        step(ctx, job)
    except BuildFailed:
        raise
    except SglforgeError as exc:
        if name not in FAILED_BUILD_STEPS:
            raise
        raise BuildFailed(exc.args[0], hint=exc.hint) from exc


def _dev_workspace(ctx: _Context, recipe: Recipe) -> DevWorkspace:
    config = state_config(recipe.sha256, ctx.tool.digest, ctx.root.path, BUILD_FORMAT)
    deps = [pin.name for pin in ctx.lock.fetchcontent(recipe.upstream)]
    return DevWorkspace(ctx.root, recipe.name, recipe.upstream, deps, config)


def _build_one(
    ctx: _Context,
    recipe: Recipe,
    series: PatchSeries,
    key: BuildKey,
    deps: list[BuiltWheel],
    staging: Path,
    dev: bool = False,
) -> BuiltWheel:
    started = time.monotonic()
    mode = "dev build, incremental" if dev else "building"
    print(f"==> {recipe.name}: {mode} (key {key.short})", flush=True)
    job = _WheelJob(
        recipe, series, key, deps, staging, dev=_dev_workspace(ctx, recipe) if dev else None
    )
    # a dev build's tree is parked again whatever happens (builder/devtree.py)
    with job.dev.live() if job.dev is not None else contextlib.nullcontext():
        ctx.report.steps.execute(
            (f"{recipe.name}: {name}", functools.partial(_run_step, name, step, ctx, job))
            for name, step in _wheel_steps(recipe)
        )
    final, info = job.final, job.info
    assert final is not None and info is not None
    digest = sha256_file(final)
    uploaded = False
    if ctx.options.use_wheel_cache and not dev:  # a dev wheel is never served as a release
        entry = WheelCache(ctx.settings.cache_dir).store(
            key.cache_value, final, digest, info.name, info.version
        )
        if ctx.substituted.get(recipe.name):  # local use only (sources/substitute.py)
            if ctx.remote is not None and not ctx.remote.store.read_only:
                print(
                    "    not uploaded to the remote wheel cache: built with substituted inputs",
                    flush=True,
                )
        elif ctx.remote is not None and not ctx.remote.store.read_only:
            with ctx.report.steps.step(f"{recipe.name}: upload"):
                uploaded = ctx.remote_upload(key, entry)
    return BuiltWheel(
        recipe.name,
        final,
        digest,
        info.name,
        info.version,
        read_provenance(final),
        key.value,
        cached=False,
        seconds=time.monotonic() - started,
        cache_stats=job.cache_stats,
        dev=dev,
        uploaded=uploaded,
    )


def target_wheels_dir(project: Project, target: str) -> Path:
    """Where a target build's wheels and manifest go: wheels/targets/<name>/."""
    return project.wheels_dir / "targets" / target


def remote_tier(settings: Settings, options: BuildOptions) -> RemoteWheelCache | None:
    """The remote wheel cache this run uses (None: not configured or switched off)."""
    from sglforge.base.remotestore import RemoteStore

    url = settings.wheel_cache.remote
    if not url or not options.use_wheel_cache or not options.use_remote_cache:
        return None
    read_only = settings.wheel_cache.read_only or options.remote_read_only
    limits = DownloadLimits(
        max_size=settings.wheel_cache.max_size, deadline=settings.wheel_cache.download_deadline
    )
    return RemoteWheelCache(
        RemoteStore.from_url(url, read_only=read_only),
        limits,
        report=functools.partial(print, flush=True),
    )


def expected_wheel(
    ctx: _Context, recipe: Recipe, series: PatchSeries, key: BuildKey
) -> ExpectedWheel:
    """What `recipe` builds from `series` under `key`, as far as known before building (the
    version rules of `_postprocess`): a remote entry must be that wheel."""
    local = recipe.local_label(series.patchset8, ctx.toolchain.cuda_tag, key.value[:8])
    version = None if recipe.version_label == "retag" else recipe.version(local)
    return ExpectedWheel(recipe.name, version, local if version is None else None)


def _remote_lookup(
    ctx: _Context,
    name: str,
    key: BuildKey,
    cache: WheelCache,
    staging: Path,
    expected: ExpectedWheel,
) -> BuiltWheel | None:
    """A verified remote hit, copied into the local tier; None on a miss or a refusal."""
    assert ctx.remote is not None
    started = time.monotonic()
    try:
        with ctx.report.steps.step(f"{name}: remote cache"):
            entry = ctx.remote.fetch(key.remote_value, key.value, staging / ".remote", expected)
    except RemoteRefused as exc:
        print(f"    warning: remote wheel cache entry refused, rebuilding: {exc}", flush=True)
        return None
    except SglforgeError as exc:
        print(
            f"    warning: remote wheel cache unavailable, continuing without it: {exc}", flush=True
        )
        ctx.remote = None
        return None
    if entry is None:
        return None
    local = cache.store(key.cache_value, entry.wheel, entry.sha256, entry.name, entry.version)
    entry.wheel.unlink()
    return BuiltWheel(
        name,
        local.wheel,
        entry.sha256,
        entry.name,
        entry.version,
        read_provenance(local.wheel),
        key.value,
        cached=True,
        seconds=time.monotonic() - started,
        source="remote",
    )


@dataclass(frozen=True)
class BuildInputs:
    """What the `load` step reads: the selected recipes in build order and their inputs."""

    lock: Lockfile
    toolchain: Toolchain
    recipes: dict[str, Recipe]
    order: list[str]
    series: dict[str, PatchSeries]
    cuda: CudaToolkit | None
    tool: ToolchainFingerprint
    target: Target | None = None
    # recipe -> {pin name -> tree id} of the [substitutes] in its upstream's closure
    substituted: dict[str, dict[str, str]] = field(default_factory=dict)

    def keys(self, build_root: Path, unsandboxed: bool = False) -> dict[str, BuildKey]:
        """The content key of every selected recipe, dependencies first (each key holds its
        dependencies' keys, so all are known before anything is built). `unsandboxed`
        (--unsafe-no-sandbox): every key differs, so such a wheel never answers a sandboxed
        build's cache lookup."""
        keys: dict[str, BuildKey] = {}
        for name in self.order:
            recipe = self.recipes[name]
            keys[name] = compute_key(
                recipe,
                self.lock,
                self.series[name],
                self.tool,
                build_root,
                {d: keys[d].value for d in recipe.depends},
                target=self.target.name if self.target else None,
                substituted=self.substituted.get(name),
                unsandboxed=unsandboxed,
            )
        return keys


def load_inputs(
    project: Project,
    settings: Settings,
    names: tuple[str, ...] | list[str] = (),
    target: str | None = None,
) -> BuildInputs:
    """Lockfile, toolchain, recipes (`names` + dependencies; all when empty), series, CUDA, and
    the build interpreter's fingerprint (checked against the toolchain pins; the tools'
    `--version` outputs come from `<cache-dir>/toolchain-versions.json` while their stat
    stamps hold)."""
    lock = parse_lockfile(project.lockfile)
    toolchain = load_toolchain(project.toolchain)
    chosen = load_target(project.root, target) if target else None
    recipes = load_recipes(project.recipes_dir, lock, toolchain, chosen)
    wanted = select(recipes, list(names))
    order = build_order({n: recipes[n].depends for n in wanted})
    series = {n: load_series(project, recipes[n].upstream) for n in order}
    versions = VersionCache(settings.cache_dir / "toolchain-versions.json")
    cuda = find_cuda(
        toolchain, required=any(recipes[n].cuda_archs for n in order), versions=versions
    )
    tool = fingerprint(
        toolchain,
        cuda,
        sorted({r for n in order for r in recipes[n].build_requires}),
        environment.search_path(cuda.home if cuda else None),
        versions=versions,
    )
    versions.save()
    substituted = {
        n: trees for n in order if (trees := substitute_trees(lock, settings, recipes[n].upstream))
    }
    for name, trees in substituted.items():
        for pin, tree in trees.items():
            print(
                f"warning: {name}: {pin} is SUBSTITUTED by a local directory (tree "
                f"{tree[:12]}; [substitutes] in the user config): the wheel is for local "
                "use only",
                flush=True,
            )
    return BuildInputs(lock, toolchain, recipes, order, series, cuda, tool, chosen, substituted)


def build_sandbox(options: BuildOptions) -> sandbox.Bubblewrap | None:
    """The sandbox builds run in (builder/sandbox.py); None only with --unsafe-no-sandbox,
    which is said here and recorded in each wheel built. No sandbox: SandboxUnavailable."""
    if not options.sandbox:
        print(
            f"WARNING: {sandbox.UNSAFE_FLAG}: upstream build code runs WITHOUT a sandbox, "
            "as you, with your files and your network namespace's neighbours in reach; "
            "each wheel built records this in its provenance and content key",
            flush=True,
        )
        return None
    box = sandbox.find()
    print(f"sandbox: {box.describe()}", flush=True)
    return box


def secret_files(settings: Settings) -> tuple[Path, ...]:
    """Files a build must never see even inside a bound directory: sglforge's config file
    and the netrc/credential files of the caller (builder/sandbox.py masks them)."""
    home = Path.home()
    found = [settings.config_path] if settings.config_path else []
    found += [
        home / ".netrc",
        home / "_netrc",
        home / ".git-credentials",
        home / ".pypirc",
        home / ".docker" / "config.json",
    ]
    if os.environ.get("NETRC"):
        found.append(Path(os.environ["NETRC"]))
    return tuple(found)


def _check_build_options(inputs: BuildInputs, options: BuildOptions) -> None:
    """Options the selected recipes cannot build with: isolation without a wheelhouse, and
    sccache where it cannot work (builder/compiler_cache.py)."""
    recipes, order, cache = inputs.recipes, inputs.order, options.compiler_cache
    for name in order:
        if recipes[name].isolation and options.wheelhouse is None:
            raise SglforgeError(
                f"{recipes[name].path}: isolation = true needs --wheelhouse "
                "DIR with the build requirements (builds have no network)"
            )
    compiler_cache.refuse_sccache(
        options.compiler_cache,
        [n for n in order if recipes[n].cuda_archs],
        isolated=(
            cache is not None
            and cache.kind == "sccache"
            and not options.sandbox
            and bool(environment.network_isolation())
        ),
    )


def _build_context(
    project: Project,
    settings: Settings,
    options: BuildOptions,
    inputs: BuildInputs,
    report: BuildReport,
    box: sandbox.Bubblewrap | None,
) -> _Context:
    """What every step of every wheel reads: the inputs, the machine, the build root, the
    remote wheel cache and the sandbox."""
    machine = Machine.detect(settings.mem_available, settings.origin("mem-available"))
    root = BuildRoot(settings.build_root)
    return _Context(
        project,
        settings,
        root,
        options,
        inputs.lock,
        inputs.toolchain,
        inputs.cuda,
        inputs.tool,
        machine,
        report,
        remote=remote_tier(settings, options),
        substituted=inputs.substituted,
        sandbox=box,
        upstreams=tuple(dict.fromkeys(inputs.recipes[n].upstream for n in inputs.order)),
    )


def _destination(
    project: Project, options: BuildOptions, root: BuildRoot, dev_name: str | None
) -> tuple[bool, Path]:
    """(whether the wheels are published into wheels/ and the lockfile, where they go)."""
    # a target's wheels never replace the product's wheels/ and lockfiles/wheels.lock
    publish = (
        options.out_dir is None
        and (dev_name is None or options.publish_dev)
        and options.target is None
    )
    default_out = (
        target_wheels_dir(project, options.target)
        if options.target
        else (project.wheels_dir if publish else root.dev_wheels)
    )
    return publish, options.out_dir or default_out


def _print_build_plan(ctx: _Context, inputs: BuildInputs, out_dir: Path) -> None:
    """The build root and the wheels in order; what a default build skips; the target, the
    compiler cache and the remote wheel cache."""
    order = inputs.order
    print(f"build root {ctx.root.path}; {len(order)} wheel(s) in order: {', '.join(order)}")
    if not ctx.options.names:  # a default build: say what it leaves out, and why
        for line in skip_lines(inputs.recipes, order):
            print(line)
    if inputs.target is not None:
        print(
            f"target {inputs.target.name} ({inputs.target.path.name}"
            + (f": {inputs.target.description}" if inputs.target.description else "")
            + f"); wheels to {out_dir}"
        )
    if ctx.report.compiler_cache:
        print(f"compiler cache: {ctx.report.compiler_cache}")
    if ctx.remote is not None:
        mode = " (read-only)" if ctx.remote.store.read_only else ""
        print(f"remote wheel cache {ctx.remote.store.url}{mode}")


def _local_hit(
    ctx: _Context, name: str, key: BuildKey, cache: WheelCache, dev_name: str | None
) -> BuiltWheel | None:
    """The wheel from the local wheel cache, read in place (publishing copies it only where
    it changed); None on a miss or without the wheel cache."""
    started = time.monotonic()
    hit = cache.lookup(key.cache_value) if ctx.options.use_wheel_cache else None
    if hit is None:
        return None
    wheel = BuiltWheel(
        name,
        hit.wheel,
        hit.sha256,
        hit.name,
        hit.version,
        read_provenance(hit.wheel),
        key.value,
        cached=True,
        seconds=time.monotonic() - started,
    )
    print(f"==> {name}: cached (key {key.short}) {hit.wheel.name}", flush=True)
    if name == dev_name:
        print(
            "    --dev: a release build of this exact series is in the wheel "
            "cache; using it (no dev build)",
            flush=True,
        )
    return wheel


def _obtain_wheel(
    ctx: _Context,
    inputs: BuildInputs,
    name: str,
    key: BuildKey,
    built: dict[str, BuiltWheel],
    cache: WheelCache,
    staging: Path,
    dev_name: str | None,
) -> BuiltWheel:
    """One wheel: from the local wheel cache, else the remote one, else built (`built`
    holds its dependencies')."""
    recipe, series = inputs.recipes[name], inputs.series[name]
    hit = _local_hit(ctx, name, key, cache, dev_name)
    if hit is not None:
        return hit
    if ctx.remote is not None:
        fetched = _remote_lookup(
            ctx, name, key, cache, staging, expected_wheel(ctx, recipe, series, key)
        )
        if fetched is not None:
            print(
                f"==> {name}: cached, from the remote cache (key {key.short}) {fetched.path.name}",
                flush=True,
            )
            return fetched
    deps = [built[d] for d in recipe.depends]
    wheel = _build_one(ctx, recipe, series, key, deps, staging, dev=name == dev_name)
    print(f"    built {wheel.path.name} in {wheel.seconds:.1f}s", flush=True)
    return wheel


def _obtain_wheels(
    ctx: _Context,
    inputs: BuildInputs,
    keys: dict[str, BuildKey],
    cache: WheelCache,
    staging: Path,
    dev_name: str | None,
) -> list[BuiltWheel]:
    """Every selected wheel, in build order (dependencies first)."""
    built: dict[str, BuiltWheel] = {}
    for name in inputs.order:
        built[name] = _obtain_wheel(ctx, inputs, name, keys[name], built, cache, staging, dev_name)
    return [built[n] for n in inputs.order]


def run_build(project: Project, settings: Settings, options: BuildOptions) -> BuildReport:
    cache = options.compiler_cache
    report = BuildReport(compiler_cache=cache.describe() if cache else None)
    with report.steps.step("load"):
        inputs = load_inputs(project, settings, options.names, options.target)
        _check_build_options(inputs, options)
        dev_name = check_dev_names(options.names) if options.dev else None

        box = build_sandbox(options)

    ctx = _build_context(project, settings, options, inputs, report, box)
    root = ctx.root
    root.path.mkdir(parents=True, exist_ok=True)
    publish, out_dir = _destination(project, options, root, dev_name)
    with (
        exclusive_lock(root.lock, f"build root {root.path}"),
        exclusive_lock(
            out_dir.parent / f".{out_dir.name}.sglforge-lock", f"output directory {out_dir}"
        ),
    ):
        staging = root.staging
        remove_tree(staging)
        staging.mkdir(parents=True)
        keys = inputs.keys(root.path, unsandboxed=not options.sandbox)
        wheel_cache = WheelCache(settings.cache_dir)
        _print_build_plan(ctx, inputs, out_dir)
        report.wheels = _obtain_wheels(ctx, inputs, keys, wheel_cache, staging, dev_name)
        # a signal cannot cut publishing in half
        with report.steps.step("publish"), interrupts_deferred():
            if publish:
                outputs.publish(project, report.wheels, inputs.toolchain, report.written)
            else:
                outputs.write_wheels(out_dir, report.wheels, report.written)
    return report


def summarize(report: BuildReport) -> str:
    lines = ["", "summary:"]
    width = max((len(w.recipe) for w in report.wheels), default=0)
    for wheel in report.wheels:
        if wheel.cached:
            state = f"cached ({wheel.source})"
        else:
            state = f"built {wheel.seconds:6.1f}s" + (", uploaded" if wheel.uploaded else "")
        lines.append(
            f"  {wheel.recipe:<{width}}  {state:<24} {wheel.path.name}  sha256:{wheel.sha256[:16]}"
        )
        if wheel.cache_stats is not None:
            lines.append(f"  {'':<{width}}  {wheel.cache_stats.describe()}")
    counts = {s: sum(w.source == s for w in report.wheels) for s in ("local", "remote", "built")}
    uploaded = sum(w.uploaded for w in report.wheels)
    lines.append(
        f"wheel cache: {counts['local']} from the local cache, {counts['remote']} "
        f"from the remote cache, {counts['built']} built ({uploaded} uploaded)"
    )
    if report.compiler_cache:
        lines.append(f"compiler cache: {report.compiler_cache}")
    lines.append("steps:")
    for name, seconds in report.steps.timings():
        lines.append(f"  {name:<40} {seconds:7.2f}s")
    return "\n".join(lines)


def summary_document(report: BuildReport) -> dict:
    """What `summarize` prints, as `build --json`'s body (docs/reference.md)."""
    return {
        "wheels": [
            {
                "recipe": w.recipe,
                "name": w.name,
                "version": w.version,
                "file": w.path.name,
                "sha256": w.sha256,
                "content_key": w.key,
                "source": w.source,  # local / remote (wheel cache tiers) / built
                "seconds": round(w.seconds, 3),
                "uploaded": w.uploaded,
                "dev": w.dev,
            }
            for w in report.wheels
        ],
        "wheel_cache": {
            **{s: sum(w.source == s for w in report.wheels) for s in ("local", "remote", "built")},
            "uploaded": sum(w.uploaded for w in report.wheels),
        },
        "compiler_cache": report.compiler_cache,
        "steps": [
            {"name": name, "seconds": round(seconds, 3)} for name, seconds in report.steps.timings()
        ],
    }
