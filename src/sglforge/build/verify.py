"""`sglforge verify`: rebuild from scratch and compare sha256 per wheel with wheels/manifest.json.

From scratch means: the build root wiped, sources exported afresh, the wheel cache and any
compiler cache off, outputs written to a separate directory (never into wheels/). The same
build root is used on purpose: nvcc output depends on absolute paths. On a mismatch the
differing members are named and diffoscope runs where installed.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import remove_tree
from sglforge.build.pipeline import BuildOptions, run_build
from sglforge.inputs.project import Project
from sglforge.inputs.settings import Settings
from sglforge.wheel.outputs import MANIFEST, load_manifest
from sglforge.wheel.provenance import dev_build_problem


@dataclass(frozen=True)
class Comparison:
    recipe: str
    file: str
    expected: str
    actual: str
    differing_members: tuple[str, ...] = ()
    diffoscope_report: Path | None = None

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def member_digests(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {i.filename: hashlib.sha256(archive.read(i)).hexdigest()
                for i in archive.infolist() if not i.is_dir()}


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
        subprocess.run([binary, "--text", "-", str(a), str(b)], stdout=handle, check=False,
                       stderr=subprocess.STDOUT)
    return report


def run_verify(project: Project, settings: Settings, options: BuildOptions,
               out_dir: Path) -> list[Comparison]:
    reference_dir = project.wheels_dir
    expected = {e["recipe"]: e for e in load_manifest(reference_dir / MANIFEST) if "recipe" in e}
    if not expected:
        raise SglforgeError(f"{reference_dir / MANIFEST}: no built wheels to verify; run "
                            "`nox -s build` first")
    names = list(options.names) or sorted(expected)
    missing = [n for n in names if n not in expected]
    if missing:
        raise SglforgeError(f"not in {reference_dir / MANIFEST}: {', '.join(missing)}")
    for name in names:  # a dev wheel is incremental: there is nothing to reproduce
        problem = dev_build_problem(expected[name].get("provenance"),
                                    f"{reference_dir / expected[name]['file']}")
        if problem:
            raise SglforgeError(f"verify: {problem}")
    if out_dir.resolve() == reference_dir.resolve():
        raise SglforgeError("verify writes to a separate directory, not wheels/")
    print(f"verify: wiping build root {settings.build_root}; wheel and compiler caches off")
    remove_tree(settings.build_root)
    remove_tree(out_dir)
    report = run_build(project, settings, replace(
        options, names=tuple(names), use_wheel_cache=False, compiler_cache=None,
        out_dir=out_dir))
    results = []
    for wheel in report.wheels:
        if wheel.recipe not in expected:
            continue  # a dependency built along the way but not in the manifest
        ref = expected[wheel.recipe]
        result = Comparison(wheel.recipe, ref["file"], ref["sha256"], wheel.sha256)
        if not result.ok:
            ref_path = reference_dir / ref["file"]
            rebuilt = out_dir / wheel.path.name
            members = differing_members(ref_path, rebuilt) if ref_path.is_file() else [
                f"(reference {ref_path} is gone)"]
            diff = run_diffoscope(ref_path, rebuilt, out_dir / f"diffoscope-{wheel.recipe}.txt"
                                  ) if ref_path.is_file() else None
            result = replace(result, differing_members=tuple(members), diffoscope_report=diff)
        results.append(result)
    return results


def render(results: list[Comparison]) -> str:
    lines = []
    for r in results:
        if r.ok:
            lines.append(f"  identical  {r.file}  sha256:{r.expected[:16]}")
            continue
        lines.append(f"  DIFFERS    {r.file}: expected sha256:{r.expected[:16]}, rebuilt "
                     f"sha256:{r.actual[:16]}")
        lines += [f"      member: {m}" for m in r.differing_members]
        if r.diffoscope_report:
            lines.append(f"      diffoscope report: {r.diffoscope_report}")
    return "\n".join(lines)
