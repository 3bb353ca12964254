"""Test configuration: tests marked `cuda` need nvcc 13 and cuobjdump.

They skip with a reason where those are missing, except when SGLFORGE_REQUIRE_CUDA=1 (set by
.ci/run), where a missing tool is a failure: CI must run them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.fixtures.gitrepos import World
from tests.fixtures.webdav_server import webdav, webdav_auth  # noqa: F401 (fixtures)


def _missing_cuda_tools() -> list[str]:
    from sglforge.wheel.audit import find_cuobjdump

    missing = []
    nvcc = [
        Path(os.environ.get("CUDA_HOME", "/nonexistent")) / "bin" / "nvcc",
        Path("/usr/local/cuda/bin/nvcc"),
    ]
    if not any(p.is_file() for p in nvcc) and not shutil.which("nvcc"):
        missing.append("nvcc (CUDA 13 toolkit)")
    if find_cuobjdump(Path("/usr/local/cuda")) is None:
        missing.append("cuobjdump (pip install nvidia-cuda-cuobjdump)")
    return missing


def pytest_collection_modifyitems(config, items):
    if not any("cuda" in item.keywords for item in items):
        return
    missing = _missing_cuda_tools()
    if not missing:
        return
    if os.environ.get("SGLFORGE_REQUIRE_CUDA") == "1":
        raise pytest.UsageError("SGLFORGE_REQUIRE_CUDA=1 but missing: " + ", ".join(missing))
    skip = pytest.mark.skip(reason="needs " + " and ".join(missing))
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


@pytest.fixture
def upstreams(world):
    """alpha (a Python package with history, a tag and a moving branch) with submodule beta
    pinned in the lockfile, plus gamma: a FetchContent-style tarball."""
    from tests.fixtures.gitrepos import make_tarball, source_entry

    beta = world.repo("org/beta")
    beta_v1 = beta.commit("beta v1", {"beta.h": "#define BETA 1\n"})
    beta_v2 = beta.commit("beta v2", {"beta.h": "#define BETA 2\n"})
    alpha = world.repo("org/alpha")
    alpha.commit(
        "initial",
        {
            "pyproject.toml": '[project]\nname = "alpha"\nversion = "1.0"\n',
            "src/alpha/__init__.py": "VALUE = 1\n",
            "src/alpha/core.py": "".join(f"def f{i}():\n    return {i}\n\n" for i in range(30)),
        },
    )
    alpha.tag("v1")
    alpha.add_submodule(beta, "third_party/beta", beta_v2)
    pinned = alpha.commit("add beta submodule")
    moved = alpha.commit("later work on main", {"src/alpha/__init__.py": "VALUE = 2\n"})
    gamma_sha = make_tarball(
        world.mirror / "org/gamma/archive/v1.tar.gz",
        "gamma-1.0",
        {"CMakeLists.txt": "project(gamma)\n", "gamma.h": "int g;\n"},
    )
    text = (
        source_entry("alpha", world.url("org/alpha"), pinned, ref="main")
        + source_entry(
            "alpha.beta", world.url("org/beta"), beta_v2, parent="alpha", path="third_party/beta"
        )
        + '[[source]]\nname = "alpha.gamma"\nparent = "alpha"\n'
        'fetchcontent = "repo-gamma"\n'
        f'url = "{world.url("org/gamma/archive/v1.tar.gz")}"\nsha256 = "{gamma_sha}"\n'
    )
    world.write_lockfile(text)

    class Upstreams:
        pass

    u = Upstreams()
    u.alpha, u.beta, u.pinned, u.moved = alpha, beta, pinned, moved
    u.beta_v1, u.beta_v2, u.gamma_sha = beta_v1, beta_v2, gamma_sha
    return u
