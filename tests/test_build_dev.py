"""`sglforge build --dev`: the incremental patch-iteration loop, with the real nvcc 13.

One test walks the loop a user walks: a first dev build, a changed patch (only its TU is
recompiled; the wheel's content equals a clean release build's apart from the label), a
published dev wheel that verify refuses, and a reverted patch that returns to the cached clean
key without compiling. Marked `cuda` (CI runs it: nvcc exists there).
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest

from tests.fixtures import upstreams
from tests.fixtures.gitrepos import DEP3
from tests.fixtures.project import FixtureProject, make_project

SCALE = upstreams.CUDAEXT["src/scale.cu"]


def write_series(project: FixtureProject, factor: str) -> None:
    """patches/cudaext/series = one mbox changing scale.cu only (a constant in device code)."""
    patches = project.root / "patches" / "cudaext"
    for old in patches.glob("*.patch"):
        old.unlink()
    name = "0001-scale-by-factor.patch"
    edited = SCALE.replace("x[i] *= s;", f"x[i] *= s * {factor}f;")
    assert edited != SCALE
    upstreams.make_patch(
        project.mirror / "org" / "cudaext",
        name,
        {"src/scale.cu": edited},
        f"Scale by {factor}\n\n" + DEP3.format(description="dev loop test"),
        patches,
    )
    (patches / "series").write_text(name + "\n")


def compiled_objects(project: FixtureProject) -> list[str]:
    """The CUDA objects ninja built in the last build (its log is rewritten per build)."""
    log = (project.build_root / "logs" / "cudaext.log").read_text(errors="replace")
    return sorted(set(re.findall(r"Building CUDA object \S+/(\w+\.cu)\.o", log)))


def members(wheel: Path) -> dict[str, str]:
    """Member digests, dist-info left out (its name, version and provenance carry the label)."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            i.filename: hashlib.sha256(archive.read(i)).hexdigest()
            for i in archive.infolist()
            if ".dist-info/" not in i.filename
        }


def only_wheel(directory: Path) -> Path:
    [wheel] = sorted(directory.glob("*.whl"))
    return wheel


@pytest.mark.cuda
def test_dev_loop_rebuilds_one_tu_and_matches_a_clean_build(tmp_path):
    project = make_project(tmp_path, ("cudaext",))
    dev_wheels = project.build_root / "dev-wheels"

    write_series(project, "2.0")
    first = project.run("build", "--dev", "cudaext")
    assert first.returncode == 0, first.stderr
    assert "new dev tree" in first.stdout
    assert compiled_objects(project) == ["reduce.cu", "scale.cu", "vecadd.cu"]
    assert not list((project.root / "wheels").glob("*.whl"))  # never wheels/ without a flag
    assert not (project.cache / "wheels").exists()  # nor the wheel cache
    wheel = only_wheel(dev_wheels)
    assert re.fullmatch(r"cudaext-0\.3\.0\+sm120\.cu130\.[0-9a-f]{8}\.dev-.*\.whl", wheel.name)
    manifest = json.loads((dev_wheels / "manifest.json").read_text())
    assert manifest["wheels"][0]["provenance"]["dev"] is True

    # a changed patch: the tree is synced file by file, so ninja recompiles scale.cu alone
    write_series(project, "3.0")
    second = project.run("build", "--dev", "--publish-dev", "cudaext")
    assert second.returncode == 0, second.stderr
    assert "dev tree" in second.stdout and "1 file(s) written (src/scale.cu)" in second.stdout
    assert compiled_objects(project) == ["scale.cu"]
    published = project.manifest()["wheels"][0]
    assert published["version"].endswith(".dev") and published["provenance"]["dev"] is True
    dev_wheel = project.root / "wheels" / published["file"]
    dev_members = members(dev_wheel)

    # verify (and the smoke's wheel set) refuse a dev wheel, before wiping anything
    refused = project.run("verify")
    assert refused.returncode != 0
    assert "is a dev build" in refused.stderr and "Traceback" not in refused.stderr
    assert (project.build_root / "dev" / "cudaext" / "tree").is_dir()

    # a clean release build of the same series: same content apart from the label
    clean = project.run("build", "cudaext")
    assert clean.returncode == 0, clean.stderr
    entry = project.manifest()["wheels"][0]
    assert not entry["version"].endswith(".dev") and "dev" not in entry["provenance"]
    assert members(project.root / "wheels" / entry["file"]) == dev_members
    assert entry["version"] + ".dev" == published["version"]

    # another change (one TU again), then the patch reverted to the released series: the
    # clean content key is in the wheel cache, so nothing compiles
    write_series(project, "4.0")
    third = project.run("build", "--dev", "cudaext")
    assert third.returncode == 0, third.stderr
    assert compiled_objects(project) == ["scale.cu"]
    write_series(project, "3.0")
    reverted = project.run("build", "--dev", "cudaext")
    assert reverted.returncode == 0, reverted.stderr
    assert "cached (key" in reverted.stdout and "no dev build" in reverted.stdout
    assert only_wheel(dev_wheels).name == entry["file"]
