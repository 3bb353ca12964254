"""`cuda-from-toolchain` (builder/environment.py cuda_gap_env): a CUDA toolkit without cuBLAS /
NVRTC development files (this machine's) gets exactly its gaps filled from the toolchain's
nvidia-* wheels; what the toolkit has is never shadowed, and `{cuda_gap_lib}` is only for
recipes that ask for it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import SglforgeError
from sglforge.builder.environment import cuda_gap_env
from sglforge.inputs.recipes import parse_recipe
from tests.test_recipes import inputs, write  # noqa: F401  (fixture)


def _fake_layout(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "site-packages"
    wheels = site / "nvidia" / "cu13"
    (wheels / "include").mkdir(parents=True)
    (wheels / "lib").mkdir()
    for header in ("cublasLt.h", "nvrtc.h", "cuda_runtime.h"):
        (wheels / "include" / header).write_text(f"/* wheel {header} */\n")
    for lib in ("libcublas.so.13", "libnvrtc.so.13", "libcudart.so.13"):
        (wheels / "lib" / lib).write_bytes(b"")
    toolkit = tmp_path / "cuda"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "lib64").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("/* toolkit */\n")
    (toolkit / "lib64" / "libcudart.so").write_bytes(b"")
    return site, toolkit


def test_only_the_toolkits_gaps_are_filled(tmp_path: Path) -> None:
    site, toolkit = _fake_layout(tmp_path)
    root = BuildRoot(tmp_path / "root")
    env, lib, linked = cuda_gap_env(root, site, toolkit, "13")
    include = Path(env["CPATH"])
    assert sorted(p.name for p in include.iterdir()) == ["cublasLt.h", "nvrtc.h"]
    # every link name is there (so {cuda_gap_lib}/libX.so always names a library); only
    # the toolkit's gaps point into the wheels
    assert sorted(p.name for p in lib.iterdir()) == ["libcublas.so", "libcudart.so", "libnvrtc.so"]
    assert os.readlink(lib / "libnvrtc.so") == str(site / "nvidia/cu13/lib/libnvrtc.so.13")
    assert os.readlink(lib / "libcudart.so") == str(toolkit / "lib64/libcudart.so")
    assert not any("libcudart" in x for x in linked)
    assert env["LIBRARY_PATH"] == str(lib)
    assert "lib/libcublas.so -> libcublas.so.13" in linked
    # a second build starts from a clean directory (nothing stale from an earlier toolchain)
    (site / "nvidia/cu13/lib/libnvrtc.so.13").unlink()
    _, lib, _ = cuda_gap_env(root, site, toolkit, "13")
    assert sorted(p.name for p in lib.iterdir()) == ["libcublas.so", "libcudart.so"]


def test_the_linker_resolves_a_versioned_only_library_through_the_gap_dir(tmp_path: Path) -> None:
    """What `-lcublas` needs: a real shared library with only its SONAME file in the wheel."""
    site, toolkit = _fake_layout(tmp_path)
    wheel_lib = site / "nvidia/cu13/lib"
    (wheel_lib / "libcublas.so.13").unlink()
    src = tmp_path / "cublas.c"
    src.write_text("int cublas_probe(void) { return 13; }\n")
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcublas.so.13",
            "-o",
            str(wheel_lib / "libcublas.so.13"),
            str(src),
        ],
        check=True,
    )
    main = tmp_path / "main.c"
    main.write_text("int cublas_probe(void); int main(void) { return cublas_probe() - 13; }\n")
    without = subprocess.run(
        ["cc", "-o", str(tmp_path / "a.out"), str(main), "-lcublas"],
        check=False,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert without.returncode != 0 and "cublas" in without.stderr
    env, _, _ = cuda_gap_env(BuildRoot(tmp_path / "root"), site, toolkit, "13")
    linked = subprocess.run(
        ["cc", "-o", str(tmp_path / "a.out"), str(main), "-lcublas"],
        check=False,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], **env},
    )
    assert linked.returncode == 0, linked.stderr
    needed = subprocess.run(
        ["readelf", "-d", str(tmp_path / "a.out")], capture_output=True, text=True, check=True
    ).stdout
    assert "[libcublas.so.13]" in needed  # the SONAME, not the link name


def test_cuda_gap_lib_placeholder_needs_the_key(tmp_path: Path, inputs) -> None:  # noqa: F811
    lock, toolchain = inputs
    body = 'upstream = "purepy"\n{key}[cmake-defines]\nCUDA_nvrtc_LIBRARY = "{{cuda_gap_lib}}/libnvrtc.so"\n'
    path = write(tmp_path, "k", body.format(key=""))
    with pytest.raises(SglforgeError, match=r"\{cuda_gap_lib\} needs 'cuda-from-toolchain"):
        parse_recipe(path, lock, toolchain)
    path = write(tmp_path, "k", body.format(key="cuda-from-toolchain = true\n"))
    assert parse_recipe(path, lock, toolchain).cuda_from_toolchain is True


# A driver header with cuda.h's three kinds of name mapping: versioned (_v2), per-thread
# default stream (_ptds), and the legacy names the driver's own view (__CUDA_API_VERSION_INTERNAL)
# declares.
MINI_CUDA_H = """\
#include <stddef.h>
typedef int CUresult;
#if defined(__CUDA_API_VERSION_INTERNAL) || defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define __CUDA_API_PER_THREAD_DEFAULT_STREAM
#endif
#if defined(__CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define cuMemcpy cuMemcpy_ptds
#endif
#ifndef __CUDA_API_VERSION_INTERNAL
#define cuMemAlloc cuMemAlloc_v2
#endif
typedef void (*CUhostFn)(void *userData);
CUresult cuInit(unsigned int Flags);
CUresult cuMemAlloc(void **dptr, size_t bytesize);
CUresult cuMemcpy(void *dst, const void *src, size_t ByteCount);
"""


def _toolkit_with_driver_header(tmp_path: Path) -> tuple[Path, Path]:
    site, toolkit = _fake_layout(tmp_path)
    (toolkit / "include" / "cuda.h").write_text(MINI_CUDA_H)
    return site, toolkit


def _readelf(path: Path) -> str:
    return subprocess.run(
        ["readelf", "-d", "--dyn-syms", str(path)], capture_output=True, text=True, check=True
    ).stdout


def test_a_toolkit_without_libcuda_gets_a_link_stub_of_the_driver(tmp_path: Path) -> None:
    """No driver and no lib64/stubs (this machine's toolkit): `-lcuda` fails, so the gap dir
    gets a stub with SONAME libcuda.so.1 defining every name the header lets code reference;
    an extension linked against it records NEEDED libcuda.so.1, as with NVIDIA's stub."""
    site, toolkit = _toolkit_with_driver_header(tmp_path)
    ext = tmp_path / "ext.c"
    ext.write_text(
        "#include <cuda.h>\nint probe(void) { void *p; cuInit(0); return cuMemAlloc(&p, 16); }\n"
    )
    link = [
        "cc",
        "-shared",
        "-fPIC",
        f"-I{toolkit / 'include'}",
        "-o",
        str(tmp_path / "ext.so"),
        str(ext),
        "-lcuda",
    ]
    without = subprocess.run(
        link, check=False, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}
    )
    assert without.returncode != 0 and "-lcuda" in without.stderr

    env, lib, linked = cuda_gap_env(BuildRoot(tmp_path / "root"), site, toolkit, "13")
    stub = lib / "libcuda.so"
    assert any(x.startswith("lib/libcuda.so -> a link stub (libcuda.so.1, 5 ") for x in linked)
    dynamic = _readelf(stub)
    assert "Library soname: [libcuda.so.1]" in dynamic
    defined = {
        line.split()[-1]
        for line in dynamic.splitlines()
        if " FUNC " in line and " UND " not in line
    }
    assert defined == {"cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpy", "cuMemcpy_ptds"}

    linked_ext = subprocess.run(
        link, check=False, capture_output=True, text=True, env={"PATH": os.environ["PATH"], **env}
    )
    assert linked_ext.returncode == 0, linked_ext.stderr
    ext_dynamic = _readelf(tmp_path / "ext.so")
    assert "Shared library: [libcuda.so.1]" in ext_dynamic
    assert "UND cuMemAlloc_v2" in ext_dynamic  # left for the real driver at run time


def test_no_stub_where_the_toolkit_has_a_libcuda(tmp_path: Path) -> None:
    site, toolkit = _toolkit_with_driver_header(tmp_path)
    (toolkit / "lib64" / "stubs").mkdir()
    (toolkit / "lib64" / "stubs" / "libcuda.so").write_bytes(b"")
    _, lib, linked = cuda_gap_env(BuildRoot(tmp_path / "root"), site, toolkit, "13")
    assert not (lib / "libcuda.so").exists()
    assert not any("libcuda" in x for x in linked)


def test_a_stub_that_cannot_be_built_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    from sglforge.builder import cudastub

    _, toolkit = _toolkit_with_driver_header(tmp_path)
    target = tmp_path / "lib" / "libcuda.so"
    target.parent.mkdir()
    with pytest.raises(SglforgeError, match=r"preprocessing .*cuda\.h with /bin/false failed"):
        cudastub.write_stub(target, toolkit, compiler="/bin/false")
    (toolkit / "include" / "cuda.h").write_text("#error not a header\n")
    with pytest.raises(SglforgeError, match="preprocessing"):
        cudastub.write_stub(target, toolkit)
    assert list(target.parent.iterdir()) == []


@pytest.mark.skipif(
    not Path("/usr/local/cuda/include/cuda.h").is_file(), reason="needs the CUDA toolkit's cuda.h"
)
def test_the_real_driver_header_gives_the_names_sgl_kernel_links() -> None:
    """The names sgl-kernel 0.4.4's common_ops and spatial_ops leave for libcuda (nm of their
    objects, built here for sm_120a): all must be in the stub, or -lcuda would not stand in for
    the driver."""
    from sglforge.builder import cudastub

    names = set(cudastub.driver_symbols(Path("/usr/local/cuda"), "cc"))
    sgl_kernel = {
        "cuCtxFromGreenCtx",
        "cuCtxPopCurrent_v2",
        "cuCtxPushCurrent_v2",
        "cuDevResourceGenerateDesc",
        "cuDevSmResourceSplitByCount",
        "cuDeviceGetDevResource",
        "cuDriverGetVersion",
        "cuGetErrorString",
        "cuGetProcAddress_v2",
        "cuGreenCtxCreate",
        "cuGreenCtxDestroy",
        "cuGreenCtxGetDevResource",
        "cuPointerGetAttribute",
        "cuStreamCreate",
    }
    assert sgl_kernel <= names
    assert {"cuTensorMapEncodeTiled", "cuMemcpy_ptds", "cuMemAlloc", "cuProfilerStart"} <= names
