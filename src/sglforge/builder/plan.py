"""`sglforge plan`: what a build would use and do, in order. Reads the repository and, for
tree ids already computed, the source cache (sources/trees.py); runs nothing."""

from __future__ import annotations

from sglforge.base.buildroot import BuildRoot
from sglforge.inputs.pins import Lockfile, parse_lockfile
from sglforge.inputs.project import Project
from sglforge.inputs.settings import Settings
from sglforge.patching.series import Backport, load_series


def render_plan(project: Project, settings: Settings, target: str | None = None) -> str:
    lock = parse_lockfile(project.lockfile)
    out = [f"pins ({project.lockfile.relative_to(project.root)}):"]
    if target is not None:
        from sglforge.inputs.targets import load_target

        chosen = load_target(project.root, target)
        out.insert(
            0,
            f"target {chosen.name} ({chosen.path.relative_to(project.root)}"
            + (f": {chosen.description}" if chosen.description else "")
            + ")",
        )
    from sglforge.sources.substitute import substitutes_for

    substitutes = substitutes_for(lock, settings)
    width = max(len(p.name) for p in lock.pins) if lock.pins else 0
    for pin in lock.pins:
        what = pin.commit or f"sha256:{pin.sha256}"
        placement = ""
        if pin.path:
            placement = f"  -> {pin.parent}/{pin.path}"
        elif pin.fetchcontent:
            placement = f"  -> {pin.parent} FetchContent {pin.fetchcontent}"
        ref = f" ({pin.ref})" if pin.ref else ""
        if pin.sdist:
            placement += f"  sdist {pin.sdist} from the package index"
        out.append(f"  {pin.name:<{width}}  {what}{ref}{placement}")
        if pin.name in substitutes:  # the user config's, not the project's: say it loudly
            sub = substitutes[pin.name]
            out.append(
                f"  {'':<{width}}    SUBSTITUTED by {sub.path} ({sub.origin}): "
                f"{sub.reason}; wheels built with it are for local use only"
            )
        for embed in pin.embeds:  # claims of the archive, never fetched: say so
            claimed = (
                f"claimed {embed.claimed_commit[:12]}"
                if embed.claimed_commit
                else "no commit claimed"
            )
            pinned = f", tree {embed.tree[:12]} pinned" if embed.tree else ""
            out.append(f"  {'':<{width}}    embeds {embed.path} ({claimed}, unverifiable{pinned})")
    out.append("")
    out.append("patch series:")
    all_series = {}
    for upstream in lock.upstreams():
        series = load_series(project, upstream.name)
        all_series[upstream.name] = series
        if not series.entries:
            out.append(f"  {upstream.name}: no patches")
            continue
        out.append(
            f"  {upstream.name}: {len(series.entries)} entr"
            f"{'y' if len(series.entries) == 1 else 'ies'}, patchset {series.patchset8}"
        )
        for entry in series.entries:
            if isinstance(entry, Backport):
                excl = f" exclude={','.join(entry.excludes)}" if entry.excludes else ""
                out.append(f"    {entry.label}  {entry.url}  sha256:{entry.sha256[:12]}{excl}")
            else:
                out.append(f"    {entry.name}  sha256:{entry.digest[:12]}")
    out.append("")
    out += _tree_lines(lock, all_series, settings, substitutes)
    out.append("")
    out.append(f"steps (cache {settings.cache_dir}, build root {settings.build_root}):")
    steps = _source_steps(lock, settings, all_series) + _build_steps(project, lock, target)
    out += [f"  {number}. {line}" for number, line in enumerate(steps, 1)]
    return "\n".join(out)


def _source_steps(lock: Lockfile, settings: Settings, all_series: dict) -> list[str]:
    """fetch, export and apply, per upstream: the first steps of a build."""
    steps = []
    for upstream in lock.upstreams():
        closure = lock.closure(upstream.name)
        subs = [p for p in closure if p.is_submodule]
        deps = [p for p in closure if p.fetchcontent]
        extra = []
        if subs:
            extra.append(f"{len(subs)} submodule(s)")
        if deps:
            extra.append(f"{len(deps)} FetchContent archive(s)")
        steps.append(
            f"fetch {upstream.name} @ {upstream.short}"
            + (f" with {', '.join(extra)}" if extra else "")
        )
        steps.append(f"export to {BuildRoot(settings.build_root).src(upstream.name)}")
        series = all_series[upstream.name]
        if series.entries:
            steps.append(f"apply {len(series.entries)} patch(es), one commit each")
    return steps


def plan_document(project: Project, settings: Settings, target: str | None = None) -> dict:
    """`plan --json`'s body (docs/reference.md, "Machine-readable output"): the pins, each
    upstream's series with digests, and the steps, as `plan` prints them."""
    from sglforge.sources.substitute import substitutes_for

    lock = parse_lockfile(project.lockfile)
    if target is not None:
        from sglforge.inputs.targets import load_target

        load_target(project.root, target)  # an unknown target is the same error as in text
    substitutes = substitutes_for(lock, settings)
    all_series = {u.name: load_series(project, u.name) for u in lock.upstreams()}
    pins = [
        {
            "name": pin.name,
            "url": pin.url,
            "commit": pin.commit,
            "sha256": pin.sha256,
            "ref": pin.ref,
            "parent": pin.parent,
            "path": pin.path,
            "fetchcontent": pin.fetchcontent,
            "sdist": pin.sdist,
            "substituted_by": str(substitutes[pin.name].path) if pin.name in substitutes else None,
        }
        for pin in lock.pins
    ]
    series = {
        name: {
            "patchset8": s.patchset8 if s.entries else None,
            "entries": [
                {
                    "kind": "backport",
                    "name": e.label,
                    "url": e.url,
                    "sha256": e.sha256,
                    "exclude": list(e.excludes),
                }
                if isinstance(e, Backport)
                else {"kind": "patch", "name": e.name, "sha256": e.digest}
                for e in s.entries
            ],
        }
        for name, s in all_series.items()
    }
    steps = _source_steps(lock, settings, all_series) + _build_steps(project, lock, target)
    return {
        "target": target,
        "cache_dir": str(settings.cache_dir),
        "build_root": str(settings.build_root),
        "pins": pins,
        "series": series,
        "steps": steps,
    }


def _tree_lines(
    lock: Lockfile, all_series: dict, settings: Settings, substitutes: dict
) -> list[str]:
    """Tree ids a build would compile, where the source cache already knows them (plan runs
    nothing: an upstream with a series is known once `patches check` or a build recorded it)."""
    from sglforge.sources.cache import SourceCache
    from sglforge.sources.trees import NOT_COMPUTED, input_tree, planned_tree

    cache = SourceCache(settings.cache_dir)
    out = ["source trees (git tree ids: the upstream after its series, and each input):"]
    for upstream in lock.upstreams():
        series = all_series[upstream.name]
        tree = planned_tree(cache, upstream, series.digest, bool(series.entries))
        out.append(
            f"  {upstream.name}: " + (f"tree {tree}" if tree else f"{NOT_COMPUTED} {upstream.name}")
        )
        for pin in lock.closure(upstream.name)[1:]:
            if pin.name in substitutes:
                out.append(f"    {pin.name}: substituted (its tree is computed by the build)")
                continue
            value = input_tree(cache, pin)
            out.append(
                f"    {pin.name}: "
                + (f"tree {value}" if value else f"{NOT_COMPUTED} {upstream.name} (after fetch)")
            )
    return out


def _build_steps(project: Project, lock: Lockfile, target: str | None = None) -> list[str]:
    """One line per recipe, in dependency order (nothing when there are no recipes yet)."""
    if not project.recipes_dir.is_dir() or not project.toolchain.exists():
        return []
    from sglforge.builder.scheduler import build_order
    from sglforge.inputs.recipes import load_recipes
    from sglforge.inputs.targets import load_target
    from sglforge.inputs.toolchain import load_toolchain

    toolchain = load_toolchain(project.toolchain)
    recipes = load_recipes(
        project.recipes_dir, lock, toolchain, load_target(project.root, target) if target else None
    )
    lines = []
    for name in build_order({n: r.depends for n, r in recipes.items()}):
        recipe = recipes[name]
        archs = ", ".join(recipe.cuda_archs) or "no device code"
        after = f", after {', '.join(recipe.depends)}" if recipe.depends else ""
        local = recipe.local_label("<patchset8>", toolchain.cuda_tag, "<key8>")
        label = f", label +{local}" if local else ""
        optional = (
            f" — opt-in ({recipe.opt_in}): only when named, `build -- {name}`"
            if recipe.opt_in
            else ""
        )
        lines.append(
            f"build {name} from {recipe.upstream}/{recipe.subdir} ({archs}{label}{after}){optional}"
        )
    lines.append(
        f"post-process, audit, write wheels/targets/{target}/manifest.json"
        if target
        else "post-process, audit, write wheels/manifest.json and lockfiles/wheels.lock"
    )
    return lines


# ---------------------------------------------------------------------------------------------
# `plan --matrix`: the build jobs a CI system still has to run

MATRIX_FORMAT = 1


def build_matrix(
    project: Project, settings: Settings, *, use_remote: bool = True, target: str | None = None
) -> dict:
    """The recipes whose wheels are missing from the wheel cache, as CI jobs.

    Content keys are computed exactly as `sglforge build` computes them, so this needs the
    build host's toolchain (the fingerprint: nvcc, compiler, cmake, Python, build requirements,
    torch) and the same build root. "Cached" means: in the remote tier when one is configured
    (what other runners can see; entry.json present — the build verifies it when it downloads
    it), else in this host's local tier. A recipe is missing when its own entry is missing;
    since its key holds its dependencies' keys, a new dependency key makes it missing too.
    `needs` lists the missing recipes among its (transitive) dependencies: its job runs after
    theirs and gets their wheels from the remote cache. `wave` is the DAG level among the
    missing recipes (0: needs nothing), for CI systems without intra-matrix ordering.
    """
    from sglforge.builder.pipeline import BuildOptions, load_inputs, remote_tier
    from sglforge.builder.wheelcache import WheelCache

    inputs = load_inputs(project, settings, target=target)
    keys = inputs.keys(settings.build_root)
    remote = remote_tier(settings, BuildOptions(use_remote_cache=use_remote))
    local = WheelCache(settings.cache_dir)

    def cached(name: str) -> bool:
        if remote is not None:
            return remote.has(keys[name].remote_value)
        return local.lookup(keys[name].cache_value) is not None

    missing = {name for name in inputs.order if not cached(name)}
    closure: dict[str, set[str]] = {}
    for name in inputs.order:  # dependencies first
        deps = set(inputs.recipes[name].depends)
        closure[name] = deps.union(*(closure[d] for d in deps))
    build, waves = [], {}
    for name in inputs.order:
        if name not in missing:
            continue
        recipe = inputs.recipes[name]
        needs = sorted(closure[name] & missing)
        waves[name] = 1 + max((waves[n] for n in needs), default=-1)
        build.append(
            {
                "recipe": name,
                "upstream": recipe.upstream,
                "key": keys[name].value,
                "needs": needs,
                "cuda_archs": list(recipe.cuda_archs),
                "wave": waves[name],
            }
        )
    levels = [
        {"include": [job for job in build if job["wave"] == level]}
        for level in range(1 + max(waves.values(), default=-1))
    ]
    archs = sorted({a for n in inputs.order for a in inputs.recipes[n].cuda_archs})
    return {
        "format": MATRIX_FORMAT,
        "cache": f"remote {remote.store.url}" if remote else f"local {local.root}",
        "build": build,
        "cached": [{"recipe": n, "key": keys[n].value} for n in inputs.order if n not in missing],
        "waves": levels,
        "assemble": {
            "needs": [job["recipe"] for job in build],
            "recipes": inputs.order,
            "run": ["sglforge build", "sglforge check", "publish"],
        },
        "smoke": {"needs": ["assemble"], "cuda_archs": archs},
    }


def render_matrix(matrix: dict, *, wave: int | None = None, max_waves: int | None = None) -> str:
    """One line of JSON (sorted keys): the whole matrix, or wave N in GitHub's
    `strategy.matrix` form (`{"include": [...]}`, empty past the last wave)."""
    import json

    from sglforge.base.errors import SglforgeError

    levels = matrix["waves"]
    if max_waves is not None and len(levels) > max_waves:
        raise SglforgeError(
            f"plan --matrix: the missing recipes need {len(levels)} waves, more "
            f"than --max-waves {max_waves} (add build-wave jobs to the workflow)"
        )
    data = matrix if wave is None else (levels[wave] if wave < len(levels) else {"include": []})
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
