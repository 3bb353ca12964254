"""One stack, two targets (issue 22 item 6): `--target NAME` builds the same pins and series
with a committed target profile's per-recipe overrides (archs, label), under other content
keys, into wheels/targets/NAME/, with the target in provenance; no second lockfile."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.recipes import load_recipes
from sglforge.inputs.targets import load_target
from sglforge.inputs.toolchain import load_toolchain
from tests.fixtures.project import make_project

REPO = Path(__file__).resolve().parents[1]


def _write_target(root: Path, text: str, name: str = "verify") -> None:
    (root / "targets").mkdir(exist_ok=True)
    (root / "targets" / f"{name}.toml").write_text(text)


def test_target_build_differs_in_key_label_and_place_not_in_pins(tmp_path):
    project = make_project(tmp_path, ("purepy",))
    _write_target(
        project.root,
        'description = "second target"\n[recipe.purepy]\nlocal-version = "cpu2.{patchset8}"\n',
    )
    product = project.run("build")
    assert product.returncode == 0, product.stdout + product.stderr
    lock_before = project.root.joinpath("lockfiles", "wheels.lock").read_text()
    [prod] = project.manifest()["wheels"]

    result = project.run("build", "--target", "verify")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "target verify (verify.toml: second target)" in result.stdout
    out = project.root / "wheels" / "targets" / "verify"
    [entry] = json.loads((out / "manifest.json").read_text())["wheels"]
    assert entry["version"].startswith("1.2.3+cpu2.")
    assert entry["provenance"]["target"] == "verify"
    assert entry["provenance"]["content_key"] != prod["provenance"]["content_key"]
    assert entry["provenance"]["commit"] == prod["provenance"]["commit"]  # same pin
    assert entry["provenance"]["tree"] == prod["provenance"]["tree"]  # same source tree
    with zipfile.ZipFile(out / entry["file"]) as archive:
        name = next(n for n in archive.namelist() if n.endswith("sglforge-build.json"))
        assert json.loads(archive.read(name))["target"] == "verify"
    # the product's outputs are untouched
    assert project.root.joinpath("lockfiles", "wheels.lock").read_text() == lock_before
    assert project.manifest()["wheels"] == [prod]
    assert "target" not in prod["provenance"]

    again = project.run("verify", "--target", "verify", "--out", str(tmp_path / "v"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "all 1 wheel(s) rebuilt bit-identical" in again.stdout
    plan = project.run("plan", "--target", "verify")
    assert plan.returncode == 0, plan.stderr
    assert "label +cpu2.<patchset8>" in plan.stdout


def test_target_overrides_archs_and_is_validated_as_a_recipe(tmp_path):
    project = make_project(tmp_path, ("cudaext",))
    lock = parse_lockfile(project.root / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(project.root / "lockfiles" / "toolchain.toml")
    _write_target(
        project.root,
        '[recipe.cudaext]\ncuda-archs = ["sm_90a"]\nlocal-version = "sm90.cu{cuda}.{patchset8}"\n',
    )
    product = load_recipes(project.root / "recipes", lock, toolchain)["cudaext"]
    target = load_target(project.root, "verify")
    h200 = load_recipes(project.root / "recipes", lock, toolchain, target)["cudaext"]
    assert product.cuda_archs == ("sm_120a",) and h200.cuda_archs == ("sm_90a",)
    assert h200.arch_values["cmake_cuda_architectures"] == "90a"
    assert h200.local_label("abcd1234", "130") == "sm90.cu130.abcd1234"
    assert h200.sha256 != product.sha256  # so the content keys differ

    _write_target(project.root, '[recipe.cudaext]\ncuda-archs = ["sm_90a"]\n')  # label sm120
    with pytest.raises(SglforgeError) as err:
        load_recipes(project.root / "recipes", lock, toolchain, load_target(project.root, "verify"))
    assert "the label names sm120 but cuda-archs (sm_90a)" in str(err.value)
    _write_target(project.root, '[recipe.cudaext]\nupstream = "other"\n')
    with pytest.raises(SglforgeError) as err:
        load_target(project.root, "verify")
    assert "key 'upstream'" in str(err.value) and "may override only" in str(err.value)
    _write_target(project.root, '[recipe.cudaext]\ncuda-archs = "sm_90a"\n')
    with pytest.raises(SglforgeError) as err:
        load_target(project.root, "verify")
    assert "verify.toml" in str(err.value) and "[recipe.cudaext], key 'cuda-archs' (line 2)" in str(
        err.value
    )
    _write_target(project.root, '[recipe.nosuch]\ncuda-archs = ["sm_90a"]\n')
    with pytest.raises(SglforgeError) as err:
        load_recipes(project.root / "recipes", lock, toolchain, load_target(project.root, "verify"))
    assert "[recipe.nosuch]: no recipe named 'nosuch'" in str(err.value)
    with pytest.raises(SglforgeError) as err:
        load_target(project.root, "h100")
    assert "no " in str(err.value) and "h100.toml" in str(err.value)


def test_committed_h200_target_loads_against_the_real_recipes():
    lock = parse_lockfile(REPO / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(REPO / "lockfiles" / "toolchain.toml")
    target = load_target(REPO, "h200-verify")
    recipes = load_recipes(REPO / "recipes", lock, toolchain, target)
    kernel = recipes["sglang-kernel"]
    assert kernel.cuda_archs == ("sm_90a",)
    assert kernel.cmake_defines["SGL_KERNEL_CUDA_ARCHS"] == "{sgl_kernel_cuda_archs}"
    assert kernel.arch_values["sgl_kernel_cuda_archs"] == "90a"
    assert kernel.local_label("0" * 8, toolchain.cuda_tag).startswith("sm90.")
    assert not (REPO / "stacks" / "h200-verify").exists()  # no second lock set
