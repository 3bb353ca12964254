"""`[compiler-cache] dir`: the cache tool's directory, apart from the source cache.

A long build (tilelang compiles TVM for hours) keeps its own ccache directory, so another
recipe's objects never evict the ones a resumed build needs; default <cache-dir>/<kind>."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.fixtures.project import make_project


def _ccache_stats(directory) -> dict[str, int]:
    out = subprocess.run(
        ["ccache", "--print-stats"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, CCACHE_DIR=str(directory)),
    ).stdout
    return {
        k: int(v)
        for k, v in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        if v.strip().isdigit()
    }


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")
def test_ccache_objects_go_to_the_configured_dir_and_hit_from_there(tmp_path):
    project = make_project(tmp_path, ("fcdemo",))  # a host-only CMake build
    tool_dir = tmp_path / "ccache-fcdemo"
    project.config.write_text(f'[compiler-cache]\ndir = "{tool_dir}"\n')
    cold = project.run("build")  # the table alone turns ccache on
    assert cold.returncode == 0, cold.stderr
    log = (project.build_root / "logs" / "fcdemo.log").read_text()
    assert f"CCACHE_DIR={tool_dir}\n" in log
    assert not (project.cache / "ccache").exists()  # nothing in the source cache
    stats = _ccache_stats(tool_dir)
    assert stats.get("cache_miss", 0) >= 1
    reference = project.manifest()["wheels"][0]["sha256"]

    shutil.rmtree(project.build_root)
    warm = project.run("build", "--no-wheel-cache")
    assert warm.returncode == 0, warm.stderr
    stats = _ccache_stats(tool_dir)
    assert stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0) >= 1
    assert project.manifest()["wheels"][0]["sha256"] == reference


def test_config_names_a_relative_cache_dir_and_shows_the_origin(tmp_path):
    project = make_project(tmp_path)
    project.config.write_text('[compiler-cache]\ndir = "relative/ccache"\n')
    bad = project.run("config")
    assert bad.returncode == 2
    assert (
        "[compiler-cache], key 'dir' (line 2): 'relative/ccache' must be an absolute path"
    ) in bad.stderr
    assert "Traceback" not in bad.stderr

    project.config.write_text("")
    env = dict(os.environ, SGLFORGE_COMPILER_CACHE_DIR=str(tmp_path / "cc"))
    shown = subprocess.run(
        [sys.executable, "-m", "sglforge", *project.args(), "config"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if x.startswith("compiler-cache.dir")]
    assert str(tmp_path / "cc") in line and "(env: SGLFORGE_COMPILER_CACHE_DIR)" in line
    default = project.run("config")
    [line] = [x for x in default.stdout.splitlines() if x.startswith("compiler-cache.dir")]
    assert "<cache-dir>/<kind>" in line and "(default)" in line
