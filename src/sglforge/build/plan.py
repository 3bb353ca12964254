"""`sglforge plan`: what a build would use and do, in order. Reads only the repository."""

from __future__ import annotations

from sglforge.base.buildroot import BuildRoot
from sglforge.inputs.pins import Lockfile, parse_lockfile
from sglforge.inputs.project import Project
from sglforge.inputs.settings import Settings
from sglforge.patching.series import Backport, load_series


def render_plan(project: Project, settings: Settings) -> str:
    lock = parse_lockfile(project.lockfile)
    out = [f"pins ({project.lockfile.relative_to(project.root)}):"]
    width = max(len(p.name) for p in lock.pins) if lock.pins else 0
    for pin in lock.pins:
        what = pin.commit or f"sha256:{pin.sha256}"
        placement = ""
        if pin.path:
            placement = f"  -> {pin.parent}/{pin.path}"
        elif pin.fetchcontent:
            placement = f"  -> {pin.parent} FetchContent {pin.fetchcontent}"
        ref = f" ({pin.ref})" if pin.ref else ""
        out.append(f"  {pin.name:<{width}}  {what}{ref}{placement}")
    out.append("")
    out.append("patch series:")
    all_series = {}
    for upstream in lock.upstreams():
        series = load_series(project, upstream.name)
        all_series[upstream.name] = series
        if not series.entries:
            out.append(f"  {upstream.name}: no patches")
            continue
        out.append(f"  {upstream.name}: {len(series.entries)} entr"
                   f"{'y' if len(series.entries) == 1 else 'ies'}, patchset {series.patchset8}")
        for entry in series.entries:
            if isinstance(entry, Backport):
                excl = f" exclude={','.join(entry.excludes)}" if entry.excludes else ""
                out.append(f"    {entry.label}  {entry.url}  sha256:{entry.sha256[:12]}{excl}")
            else:
                out.append(f"    {entry.name}  sha256:{entry.digest[:12]}")
    out.append("")
    out.append(f"steps (cache {settings.cache_dir}, build root {settings.build_root}):")
    step = 0
    for upstream in lock.upstreams():
        closure = lock.closure(upstream.name)
        step += 1
        subs = [p for p in closure if p.is_submodule]
        deps = [p for p in closure if p.fetchcontent]
        extra = []
        if subs:
            extra.append(f"{len(subs)} submodule(s)")
        if deps:
            extra.append(f"{len(deps)} FetchContent archive(s)")
        out.append(f"  {step}. fetch {upstream.name} @ {upstream.short}"
                   + (f" with {', '.join(extra)}" if extra else ""))
        step += 1
        out.append(f"  {step}. export to {BuildRoot(settings.build_root).src(upstream.name)}")
        series = all_series[upstream.name]
        if series.entries:
            step += 1
            out.append(f"  {step}. apply {len(series.entries)} patch(es), one commit each")
    for line in _build_steps(project, lock):
        step += 1
        out.append(f"  {step}. {line}")
    return "\n".join(out)


def _build_steps(project: Project, lock: Lockfile) -> list[str]:
    """One line per recipe, in dependency order (nothing when there are no recipes yet)."""
    if not project.recipes_dir.is_dir() or not project.toolchain.exists():
        return []
    from sglforge.build.scheduler import build_order
    from sglforge.inputs.recipes import load_recipes
    from sglforge.inputs.toolchain import load_toolchain

    recipes = load_recipes(project.recipes_dir, lock, load_toolchain(project.toolchain))
    lines = []
    for name in build_order({n: r.depends for n, r in recipes.items()}):
        recipe = recipes[name]
        archs = ", ".join(recipe.cuda_archs) or "no device code"
        after = f", after {', '.join(recipe.depends)}" if recipe.depends else ""
        lines.append(f"build {name} from {recipe.upstream}/{recipe.subdir} ({archs}{after})")
    lines.append("post-process, audit, write wheels/manifest.json and lockfiles/wheels.lock")
    return lines
