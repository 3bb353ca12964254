"""Synthetic upstreams: real git repositories holding real PEP 517 projects, generated at
fixed commits. The demo (`nox -s demo`) builds its example project from them and the tests
build their fixtures from them (tests/fixtures/upstreams.py adds more).

- `purepy`: setuptools + setuptools-scm, pure Python (version from the upstream's own
  SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PUREPY, like sglang).
- `cudaext`: scikit-build-core + CMake, three `.cu` files compiled by nvcc into one shared
  library (`CUDAEXT_ARCHS`, default 120a) with `extern "C"` entry points callable via ctypes
  (`cudaext.vector_add`), so the wheel can be run on a GPU.

Commits use fixed author/committer dates so commit ids (and SOURCE_DATE_EPOCH) are stable:
the demo's lockfile pins them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

COMMIT_DATE = "2026-08-01T12:00:00+00:00"
MIRROR_PREFIX = "https://example.invalid/"


def git(cwd: Path, *args: str, date: str = COMMIT_DATE) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="Upstream",
        GIT_AUTHOR_EMAIL="up@example.invalid",
        GIT_COMMITTER_NAME="Upstream",
        GIT_COMMITTER_EMAIL="up@example.invalid",
        GIT_AUTHOR_DATE=date,
        GIT_COMMITTER_DATE=date,
        GIT_CONFIG_NOSYSTEM="1",
        HOME=str(cwd),
    )
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout.strip()


def make_repo(path: Path, files: dict[str, str], date: str = COMMIT_DATE) -> str:
    """Create a git repo at `path` with `files` in one commit; return the commit id."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "initial", date=date)
    return git(path, "rev-parse", "HEAD")


def make_patch(repo: Path, name: str, edit: dict[str, str], subject: str, dest: Path) -> Path:
    """A `git format-patch` file for `edit` on top of `repo`'s HEAD (repo is left unchanged)."""
    for file, text in edit.items():
        (repo / file).parent.mkdir(parents=True, exist_ok=True)
        (repo / file).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", subject)
    patch = git(repo, "format-patch", "-1", "--stdout", "HEAD")
    git(repo, "reset", "--quiet", "--hard", "HEAD~1")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / name
    out.write_text(patch + "\n")
    return out


PUREPY = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "purepy"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.setuptools_scm]

[tool.setuptools.packages.find]
where = ["src"]
""",
    "src/purepy/__init__.py": 'GREETING = "hello"\n\n\ndef greet():\n    return GREETING\n',
    "src/purepy/tool.sh": "#!/bin/sh\necho purepy\n",
}

CUDAEXT_CU = {
    "src/vecadd.cu": r"""
#include <cuda_runtime.h>

namespace {  // anonymous namespace: its mangled names carry a path-derived hash
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
}  // namespace

extern "C" int cudaext_vector_add(const float* a, const float* b, float* c, int n) {
    float *da = nullptr, *db = nullptr, *dc = nullptr;
    size_t bytes = sizeof(float) * (size_t)n;
    cudaError_t err = cudaMalloc(&da, bytes);
    if (err == cudaSuccess) err = cudaMalloc(&db, bytes);
    if (err == cudaSuccess) err = cudaMalloc(&dc, bytes);
    if (err == cudaSuccess) err = cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) err = cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
        add_kernel<<<(n + 255) / 256, 256>>>(da, db, dc, n);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost);
    cudaFree(da); cudaFree(db); cudaFree(dc);
    return (int)err;
}

extern "C" const char* cudaext_source_file(void) { return __FILE__; }
""",
    "src/scale.cu": r"""
#include <cuda_runtime.h>

__global__ void cudaext_scale_kernel(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

extern "C" int cudaext_scale(float* x, float s, int n) {
    float* dx = nullptr;
    size_t bytes = sizeof(float) * (size_t)n;
    cudaError_t err = cudaMalloc(&dx, bytes);
    if (err == cudaSuccess) err = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
        cudaext_scale_kernel<<<(n + 255) / 256, 256>>>(dx, s, n);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaMemcpy(x, dx, bytes, cudaMemcpyDeviceToHost);
    cudaFree(dx);
    return (int)err;
}
""",
    "src/reduce.cu": r"""
#include <cuda_runtime.h>

namespace {
__global__ void sum_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}
}  // namespace

extern "C" int cudaext_sum(const float* x, int n, float* result) {
    float *dx = nullptr, *dout = nullptr;
    size_t bytes = sizeof(float) * (size_t)n;
    cudaError_t err = cudaMalloc(&dx, bytes);
    if (err == cudaSuccess) err = cudaMalloc(&dout, sizeof(float));
    if (err == cudaSuccess) err = cudaMemset(dout, 0, sizeof(float));
    if (err == cudaSuccess) err = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
        sum_kernel<<<(n + 255) / 256, 256>>>(dx, dout, n);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaMemcpy(result, dout, sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dx); cudaFree(dout);
    return (int)err;
}
""",
}


def skbuild_pyproject(name: str) -> str:
    """pyproject.toml of a scikit-build-core extension fixture (python/<name>, setuptools-scm)."""
    return f"""\
[build-system]
requires = ["scikit-build-core>=0.10", "setuptools-scm>=8"]
build-backend = "scikit_build_core.build"

[project]
name = "{name}"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.scikit-build]
metadata.version.provider = "scikit_build_core.metadata.setuptools_scm"
wheel.py-api = "py3"
wheel.packages = ["python/{name}"]
cmake.build-type = "Release"

[tool.setuptools_scm]
"""


CUDAEXT = {
    "pyproject.toml": skbuild_pyproject("cudaext"),
    "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.24)
project(cudaext LANGUAGES CXX CUDA)
set(CUDAEXT_ARCHS "120a" CACHE STRING "CUDA architectures (CMake form, e.g. 120a;90a)")
add_library(cudaext SHARED src/vecadd.cu src/scale.cu src/reduce.cu)
set_target_properties(cudaext PROPERTIES CUDA_ARCHITECTURES "${CUDAEXT_ARCHS}")
install(TARGETS cudaext LIBRARY DESTINATION cudaext)
""",
    "python/cudaext/__init__.py": '''\
"""Tiny CUDA extension used by sglforge's tests; `vector_add` runs a kernel on the GPU."""
import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libcudaext.so"))
_lib.cudaext_source_file.restype = ctypes.c_char_p


def vector_add(a, b):
    n = len(a)
    arr = ctypes.c_float * n
    out = arr()
    err = _lib.cudaext_vector_add(arr(*a), arr(*b), out, n)
    if err:
        raise RuntimeError(f"CUDA error {err}")
    return list(out)


def source_file():
    return _lib.cudaext_source_file().decode()
''',
    **CUDAEXT_CU,
}
