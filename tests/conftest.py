"""Test configuration: tests marked `cuda` need nvcc 13 and cuobjdump.

They skip with a reason where those are missing, except when SGLFORGE_REQUIRE_CUDA=1 (set by
.ci/run), where a missing tool is a failure: CI must run them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _missing_cuda_tools() -> list[str]:
    from sglforge.audit import find_cuobjdump

    missing = []
    nvcc = [Path(os.environ.get("CUDA_HOME", "/nonexistent")) / "bin" / "nvcc",
            Path("/usr/local/cuda/bin/nvcc")]
    if not any(p.is_file() for p in nvcc) and not shutil.which("nvcc"):
        missing.append("nvcc (CUDA 13 toolkit)")
    if find_cuobjdump(Path("/usr/local/cuda")) is None:
        missing.append("cuobjdump (pip install nvidia-cuda-cuobjdump)")
    return missing


def pytest_collection_modifyitems(config, items):  # noqa: ANN001
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
