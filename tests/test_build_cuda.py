"""CUDA builds with the real nvcc 13 for sm_120a: arch audit and bit-identical rebuilds.

Marked `cuda`: they run in CI (.ci/run sets SGLFORGE_REQUIRE_CUDA=1, so a missing nvcc or
cuobjdump fails instead of skipping) and skip elsewhere with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.project import SRC, make_project
from tests.helpers import fresh_venv, install_lock, snapshot

pytestmark = pytest.mark.cuda


def test_clean_rebuilds_are_bit_identical_and_audited(tmp_path):
    """Two clean builds, the second at another build root (deeper, another name), from a
    different copy of the project and of sglforge itself and with a fresh cache, give
    byte-identical wheels for the pure-Python and the CUDA package: the sandbox shows every
    build its root at /sglforge-build, and that is the root the key and provenance record."""
    project = make_project(tmp_path, ("purepy", "cudaext"))
    first = project.run("build")
    assert first.returncode == 0, first.stderr
    # the audit says where the wheel runs, by CUDA's rules: an arch-specific build not on GB10
    assert (
        "audit ok: cudaext/libcudaext.so: sm_120a; PTX compute_120a; runs on 12.0 (SASS "
        "sm_120a); not on 12.1"
    ) in first.stdout
    wheels = {e["name"]: e for e in project.manifest()["wheels"]}
    cuda = wheels["cudaext"]
    assert cuda["version"] == "0.3.0+sm120.cu130.e3b0c442"
    assert cuda["provenance"]["cuda_archs"] == ["sm_120a"]
    assert cuda["provenance"]["toolchain"]["cuda"] == "13.0"
    assert cuda["provenance"]["build_root"] == "/sglforge-build"

    # the CUDA wheel installs offline from the lock and its library loads; __FILE__ is
    # prefix-mapped away from the build root
    python = fresh_venv(tmp_path / "serving")
    install = install_lock(python, project.root)
    assert install.returncode == 0, install.stderr
    source = subprocess.run(
        [str(python), "-c", "import cudaext; print(cudaext.source_file())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert source == "/sglforge-build/src/cudaext/src/vecadd.cu"

    shutil.rmtree(project.build_root)
    project.build_root = tmp_path / "elsewhere" / "a-much-longer-name" / "build-root"
    other_root = tmp_path / "checkout2" / "project"
    shutil.copytree(project.root, other_root)
    shutil.rmtree(other_root / "wheels")
    (other_root / "wheels").mkdir()
    other_src = tmp_path / "checkout2" / "src"
    shutil.copytree(SRC, other_src, ignore=shutil.ignore_patterns("__pycache__"))
    second = project.run("build", src=other_src, root=other_root, cache=tmp_path / "cache2")
    assert second.returncode == 0, second.stderr
    assert "cached" not in second.stdout
    rebuilt = {
        e["name"]: e
        for e in json.loads((other_root / "wheels" / "manifest.json").read_text())["wheels"]
    }
    for name in ("purepy", "cudaext"):
        assert rebuilt[name]["file"] == wheels[name]["file"]
        assert rebuilt[name]["sha256"] == wheels[name]["sha256"], name


def test_audit_fails_naming_the_library_when_the_recipe_drops_sm_120a(tmp_path):
    project = make_project(tmp_path, ("cudaext",))
    recipe = project.recipe("cudaext")
    # the build compiles for sm_90a only, while the recipe still requires sm_120a
    recipe.write_text(
        recipe.read_text().replace(
            'CUDAEXT_ARCHS = "{cmake_cuda_architectures}"', 'CUDAEXT_ARCHS = "90a"'
        )
    )
    before = snapshot(project.root / "wheels")
    result = project.run("build")
    assert result.returncode == 1  # the audit failed a built wheel
    assert "arch audit failed" in result.stderr
    assert "cudaext/libcudaext.so: missing sm_120a (has sm_90a)" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(project.root / "wheels") == before


def test_archs_are_selectable_per_recipe(tmp_path):
    """cuda-archs drives both the compile (via {cmake_cuda_architectures}) and the audit, so
    an sm_90a build for an H200 is a one-line change."""
    project = make_project(tmp_path, ("cudaext",))
    recipe = project.recipe("cudaext")
    recipe.write_text(
        recipe.read_text().replace('cuda-archs = ["sm_120a"]', 'cuda-archs = ["sm_90a", "sm_120a"]')
    )
    result = project.run("build")
    assert result.returncode == 0, result.stderr
    assert "audit ok: cudaext/libcudaext.so: sm_120a, sm_90a; PTX " in result.stdout
    assert "runs on 9.0 (SASS sm_90a), 12.0 (SASS sm_120a); not on 12.1" in result.stdout
    # the ELF audits ran: platform tag (not pure) and every DT_NEEDED resolved (system libs)
    assert "DT_NEEDED ok: " in result.stdout and "libc.so.6 (system)" in result.stdout
    [entry] = project.manifest()["wheels"]
    assert entry["file"].endswith("-linux_x86_64.whl")
    with zipfile.ZipFile(project.root / "wheels" / entry["file"]) as archive:
        assert "cudaext/libcudaext.so" in archive.namelist()
        wheel = archive.read(next(n for n in archive.namelist() if n.endswith("/WHEEL")))
        assert b"Root-Is-Purelib: false" in wheel and b"-any" not in wheel
    assert Path(project.build_root / "logs" / "cudaext.log").is_file()


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")
def test_compiler_cache_wraps_nvcc_without_changing_the_wheel(tmp_path):
    import os

    project = make_project(tmp_path, ("cudaext",))
    cold = project.run("build", "--compiler-cache", "ccache")
    assert cold.returncode == 0, cold.stderr
    reference = project.manifest()["wheels"][0]["sha256"]
    shutil.rmtree(project.build_root)
    warm = project.run("build", "--compiler-cache", "ccache", "--no-wheel-cache")
    assert warm.returncode == 0, warm.stderr
    assert project.manifest()["wheels"][0]["sha256"] == reference
    stats = subprocess.run(
        ["ccache", "--print-stats"],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, CCACHE_DIR=str(project.cache / "ccache")),
    ).stdout
    hits = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    assert (
        int(hits.get("direct_cache_hit", "0")) + int(hits.get("preprocessed_cache_hit", "0")) >= 3
    )  # the .cu files


def test_verify_from_lock_on_a_fresh_clone_at_another_path(tmp_path):
    """The committed lock is the record anyone can check: a fresh `git clone` of the project
    (no wheels/, another checkout path, another build root, an empty cache) rebuilds every
    wheel of lockfiles/wheels.lock and finds the recorded bytes."""
    project = make_project(tmp_path, ("purepy", "cudaext"))
    built = project.run("build")
    assert built.returncode == 0, built.stdout + built.stderr
    (project.root / ".gitignore").write_text("/wheels/\n")
    for cmd in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "record"],
    ):
        subprocess.run(["git", *cmd], cwd=project.root, check=True)
    clone = tmp_path / "another" / "checkout" / "project"
    subprocess.run(["git", "clone", "-q", str(project.root), str(clone)], check=True)
    assert not (clone / "wheels").exists()
    project.build_root = tmp_path / "another-host-disk" / "root"
    ok = project.run("verify", "--from-lock", root=clone, cache=tmp_path / "empty-cache")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    recorded = {
        e["name"]: e["version"] for e in project.manifest()["wheels"]
    }  # the first checkout's manifest
    for name in ("purepy", "cudaext"):
        assert f"identical  {name}=={recorded[name]}" in ok.stdout, ok.stdout
