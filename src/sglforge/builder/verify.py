"""`sglforge verify`: rebuild from scratch and compare sha256 per wheel with wheels/manifest.json.

From scratch means: the build root wiped, sources exported afresh, the wheel cache and any
compiler cache off, outputs written to a separate directory (never into wheels/). The same
build root is used on purpose: nvcc output depends on absolute paths. On a mismatch the
differing members are named and diffoscope runs where installed.

`--from-lock` takes the expected digests from `lockfiles/wheels.lock` instead (wheels/ need
not exist: a fresh checkout on another machine): every wheel the lock pins in its own section
(above the third-party runtime pins) is rebuilt — with no wheel cache, local or remote, and
no compiler cache — and its sha256 compared with the lock's. That is the guard against a
poisoned shared cache: the lock published from cache hits must be reproducible from source
by a host that never saw the cache. Recipes are matched to lock entries through
wheels/manifest.json when present, else by name (recipe name = distribution name).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import remove_tree
from sglforge.base.requirements import canonical_name, parse_pinned
from sglforge.base.tomlfile import read_input_text
from sglforge.builder.pipeline import BuildOptions, run_build, target_wheels_dir
from sglforge.inputs.project import Project
from sglforge.inputs.recipes import recipe_names
from sglforge.inputs.settings import Settings
from sglforge.sources.substitute import substitute_trees
from sglforge.wheel.outputs import MANIFEST, RUNTIME_MARKER, load_manifest
from sglforge.wheel.provenance import dev_build_problem


@dataclass(frozen=True)
class Comparison:
    recipe: str
    file: str
    expected: str
    actual: str
    differing_members: tuple[str, ...] = ()
    diffoscope_report: Path | None = None
    tree_errors: tuple[str, ...] = ()  # source trees changed under an unchanged patchset

    @property
    def ok(self) -> bool:
        return self.expected == self.actual and not self.tree_errors


def recorded_trees(provenance: dict | None) -> dict[str, str]:
    """source name -> tree id a wheel's provenance records (the upstream and its inputs)."""
    if not isinstance(provenance, dict):
        return {}
    trees = {}
    if isinstance(provenance.get("upstream"), str) and isinstance(provenance.get("tree"), str):
        trees[provenance["upstream"]] = provenance["tree"]
    for entry in provenance.get("sources") or []:
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("tree"), str)
        ):
            trees[entry["name"]] = entry["tree"]
    return trees


def tree_errors(recorded: dict | None, rebuilt: dict | None) -> list[str]:
    """A tree that differs while the patchset digest is the same is an error: the same pins
    and series must give the same `git write-tree`. (A changed series changes the tree by
    design; the wheel's digest then differs and says so.)"""
    if not isinstance(recorded, dict) or not isinstance(rebuilt, dict):
        return []
    if recorded.get("series_sha256") != rebuilt.get("series_sha256"):
        return []
    before, after = recorded_trees(recorded), recorded_trees(rebuilt)
    digest = str(recorded.get("series_sha256") or "")[:8] or "(none)"
    substituted = {**_substitute_paths(recorded), **_substitute_paths(rebuilt)}
    errors = []
    for name, tree in sorted(before.items()):
        got = after.get(name) or "none recorded"
        if got == tree:
            continue
        if name in substituted:  # a [substitutes] directory of the builder, not the pin
            errors.append(
                f"substituted input {name}: the wheel was built from a [substitutes] "
                f"directory with tree {tree} ({substituted[name]}); the one here has "
                f"tree {got}: not the same input"
            )
        else:
            errors.append(
                f"source tree of {name} changed under an unchanged patchset "
                f"{digest}: expected tree {tree}, got {got}"
            )
    return errors


def _substitute_paths(provenance: dict) -> dict[str, str]:
    """input name -> where its [substitutes] directory was, as a provenance records it"""
    entries = provenance.get("substitutes")
    return (
        {
            e["name"]: str(e.get("path") or "path not recorded")[:300]
            for e in entries
            if isinstance(e, dict) and isinstance(e.get("name"), str)
        }
        if isinstance(entries, list)
        else {}
    )


def member_digests(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {
            i.filename: hashlib.sha256(archive.read(i)).hexdigest()
            for i in archive.infolist()
            if not i.is_dir()
        }


def differing_members(a: Path, b: Path) -> list[str]:
    left, right = member_digests(a), member_digests(b)
    out = []
    for name in sorted(set(left) | set(right)):
        if name not in left:
            out.append(f"{name} (only in the rebuild)")
        elif name not in right:
            out.append(f"{name} (missing from the rebuild)")
        elif left[name] != right[name]:
            out.append(name)
    if not out:
        out.append("(all members equal: zip metadata differs)")
    return out


def run_diffoscope(a: Path, b: Path, report: Path) -> Path | None:
    binary = shutil.which("diffoscope")
    if binary is None:
        return None
    with open(report, "wb") as handle:
        subprocess.run(
            [binary, "--text", "-", str(a), str(b)],
            stdout=handle,
            check=False,
            stderr=subprocess.STDOUT,
        )
    return report


def expected_from_manifest(project: Project, wheels_dir: Path | None = None) -> dict[str, dict]:
    """recipe -> {"file", "sha256"} from wheels/manifest.json (a target's: its directory)."""
    path = (wheels_dir or project.wheels_dir) / MANIFEST
    expected = {
        e["recipe"]: {"file": e["file"], "sha256": e["sha256"], "provenance": e.get("provenance")}
        for e in load_manifest(path)
        if "recipe" in e
    }
    if not expected:
        raise SglforgeError(f"{path}: no built wheels to verify; run `nox -s build` first")
    return expected


def expected_from_lock(project: Project) -> dict[str, dict]:
    """recipe -> {"file": "name==version", "sha256", "version"} from lockfiles/wheels.lock's
    own section; the manifest (when present) maps names to recipes."""
    path = project.wheels_lock
    if not path.is_file():
        raise SglforgeError(f"{path}: not found; --from-lock needs the lock a build published")
    own = read_input_text(path).split(RUNTIME_MARKER)[0]
    pins, problems = parse_pinned(own)
    if problems:
        raise SglforgeError(f"{path}: {problems[0]}")
    if not pins:
        raise SglforgeError(f"{path}: pins no wheel built by sglforge")
    manifest = {
        canonical_name(e["name"]): e
        for e in load_manifest(project.wheels_dir / MANIFEST)
        if "recipe" in e
    }
    by_name = {name: e["recipe"] for name, e in manifest.items()}
    recipes = {canonical_name(name): name for name in recipe_names(project.recipes_dir)}
    expected = {}
    for pin in pins:
        recipe = by_name.get(pin.name) or recipes.get(pin.name)
        if recipe is None:
            raise SglforgeError(
                f"{path}: line {pin.line}: {pin.name} is built by no recipe in "
                f"{project.recipes_dir}"
            )
        listed = manifest.get(pin.name) or {}
        expected[recipe] = {
            "file": f"{pin.name}=={pin.version}",
            "sha256": pin.hashes[0],
            "version": pin.version,
            "name": pin.name,
            "provenance": listed.get("provenance")
            if listed.get("sha256") == pin.hashes[0]
            else None,
        }
    return expected


def _reference(project: Project, sha256: str) -> Path | None:
    """A wheel in wheels/ with this digest (to name differing members), if there is one."""
    for entry in load_manifest(project.wheels_dir / MANIFEST):
        path = project.wheels_dir / entry["file"]
        if entry["sha256"] == sha256 and path.is_file():
            return path
    return None


def run_verify(
    project: Project,
    settings: Settings,
    options: BuildOptions,
    out_dir: Path,
    *,
    from_lock: bool = False,
) -> list[Comparison]:
    reference_dir = (
        target_wheels_dir(project, options.target) if options.target else project.wheels_dir
    )
    if from_lock and options.target:
        raise SglforgeError(
            "verify --from-lock checks the product's lockfiles/wheels.lock; "
            "a target build has its manifest only (drop --target or "
            "--from-lock)"
        )
    source = project.wheels_lock if from_lock else reference_dir / MANIFEST
    expected = (
        expected_from_lock(project) if from_lock else expected_from_manifest(project, reference_dir)
    )
    names = list(options.names) or sorted(expected)
    missing = [n for n in names if n not in expected]
    if missing:
        raise SglforgeError(f"not in {source}: {', '.join(missing)}")
    for name in names:  # a dev wheel is incremental: there is nothing to reproduce
        problem = dev_build_problem(expected[name].get("provenance"), f"{expected[name]['file']}")
        if problem:
            raise SglforgeError(f"verify: {problem}")
    if out_dir.resolve() == reference_dir.resolve():
        raise SglforgeError("verify writes to a separate directory, not wheels/")
    print(
        f"verify: wiping build root {settings.build_root}; wheel caches (local and remote) "
        f"and compiler cache off; expected digests from {source}"
    )
    remove_tree(settings.build_root)
    remove_tree(out_dir)
    report = run_build(
        project,
        settings,
        replace(
            options,
            names=tuple(names),
            use_wheel_cache=False,
            use_remote_cache=False,
            compiler_cache=None,
            out_dir=out_dir,
        ),
    )
    results = []
    for wheel in report.wheels:
        if wheel.recipe not in expected:
            continue  # a dependency built along the way but not in the manifest
        ref = expected[wheel.recipe]
        actual = wheel.sha256
        if "version" in ref and (canonical_name(wheel.name), wheel.version) != (
            ref["name"],
            ref["version"],
        ):
            actual = f"{wheel.sha256} ({canonical_name(wheel.name)}=={wheel.version})"
        result = Comparison(
            wheel.recipe,
            ref["file"],
            ref["sha256"],
            actual,
            tree_errors=tuple(tree_errors(ref.get("provenance"), wheel.provenance.to_json())),
        )
        if result.expected != result.actual:
            ref_path = (
                reference_dir / ref["file"] if not from_lock else _reference(project, ref["sha256"])
            )
            rebuilt = out_dir / wheel.path.name
            if ref_path is not None and ref_path.is_file():
                members = differing_members(ref_path, rebuilt)
                diff = run_diffoscope(ref_path, rebuilt, out_dir / f"diffoscope-{wheel.recipe}.txt")
            else:
                members = [
                    f"(no wheel with sha256 {ref['sha256'][:16]}… in {reference_dir} to "
                    "compare members with)"
                    if from_lock
                    else f"(reference {ref_path} is gone)"
                ]
                diff = None
            result = replace(result, differing_members=tuple(members), diffoscope_report=diff)
        results.append(result)
    return results


def check_trees(
    project: Project,
    settings: Settings,
    names: tuple[str, ...] = (),
    *,
    from_lock: bool = False,
    offline: bool = False,
    target: str | None = None,
) -> list[Comparison]:
    """`verify --trees`: what a peer checks without compiling. For each wheel, export its
    pin afresh, apply its series, and compare `git write-tree` (and each input's tree) with
    the tree its provenance records; the series must be the one recorded."""
    from sglforge.builder.pipeline import source_trees
    from sglforge.inputs.pins import parse_lockfile
    from sglforge.inputs.recipes import load_recipes
    from sglforge.inputs.toolchain import load_toolchain
    from sglforge.patching.apply import apply_series
    from sglforge.patching.series import backport_wants, load_series
    from sglforge.sources.export import export_source
    from sglforge.sources.fetch import fetch_sources

    expected = (
        expected_from_lock(project)
        if from_lock
        else expected_from_manifest(project, target_wheels_dir(project, target) if target else None)
    )
    chosen = list(names) or sorted(expected)
    missing = [n for n in chosen if n not in expected]
    if missing:
        raise SglforgeError(f"verify --trees: not built: {', '.join(missing)}")
    lock = parse_lockfile(project.lockfile)
    recipes = load_recipes(project.recipes_dir, lock, load_toolchain(project.toolchain))
    results = []
    for name in chosen:
        ref, recipe = expected[name], recipes.get(name)
        recorded = ref.get("provenance")
        if recipe is None or not recorded_trees(recorded):
            raise SglforgeError(
                f"verify --trees: {ref['file']} records no source tree "
                "(built before sglforge recorded trees): rebuild it"
            )
        series = load_series(project, recipe.upstream)
        fetch_sources(
            lock, [recipe.upstream], settings, offline=offline, extra=backport_wants([series])
        )
        with tempfile.TemporaryDirectory(prefix=f"sglforge-trees-{name}-") as tmp:
            work = Path(tmp)
            tree = export_source(lock, recipe.upstream, work / "src", settings)
            apply_series(tree.path, series, settings)
            exported = {
                pin.name: export_source(lock, pin.name, work / "deps" / pin.name, settings).path
                for pin in lock.fetchcontent(recipe.upstream)
            }
            # a substituted input's tree is computed, never recorded under its pin
            trees = source_trees(
                lock,
                recipe.upstream,
                series,
                settings,
                tree.path,
                exported,
                substitute_trees(lock, settings, recipe.upstream),
            )
        now = {
            "upstream": recipe.upstream,
            "tree": trees.tree,
            "series_sha256": series.digest,
            "sources": [{"name": k, "tree": v} for k, v in trees.inputs.items()],
        }
        problems = tree_errors(recorded, now)
        if recorded.get("series_sha256") != series.digest:
            problems.append(
                f"patches/{recipe.upstream}/series is not the one {ref['file']} "
                f"was built with (patchset {str(recorded.get('series_sha256'))[:8]}"
                f", now {series.patchset8}): rebuild it"
            )
        results.append(
            Comparison(name, ref["file"], recorded["tree"], trees.tree, tree_errors=tuple(problems))
        )
    return results


def render_trees(results: list[Comparison]) -> str:
    lines = []
    for r in results:
        state = "tree ok " if r.ok else "TREE DIFFERS"
        lines.append(f"  {state}  {r.file}: tree {r.actual}")
        lines += [f"      {problem}" for problem in r.tree_errors]
    return "\n".join(lines)


def render(results: list[Comparison]) -> str:
    lines = []
    for r in results:
        lines += [f"  TREE       {r.file}: {problem}" for problem in r.tree_errors]
        if r.expected == r.actual and not r.tree_errors:
            lines.append(f"  identical  {r.file}  sha256:{r.expected[:16]}")
            continue
        if r.expected == r.actual:
            continue
        lines.append(
            f"  DIFFERS    {r.file}: expected sha256:{r.expected[:16]}, rebuilt "
            f"sha256:{r.actual[:16]}{r.actual[64:]}"
        )
        lines += [f"      member: {m}" for m in r.differing_members]
        if r.diffoscope_report:
            lines.append(f"      diffoscope report: {r.diffoscope_report}")
    return "\n".join(lines)
