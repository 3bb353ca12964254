"""`cuda-from-toolchain` (build/environment.py cuda_gap_env): a CUDA toolkit without cuBLAS /
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
from sglforge.build.environment import cuda_gap_env
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
    assert sorted(p.name for p in lib.iterdir()) == ["libcublas.so", "libcudart.so",
                                                     "libnvrtc.so"]
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
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcublas.so.13", "-o",
                    str(wheel_lib / "libcublas.so.13"), str(src)], check=True)
    main = tmp_path / "main.c"
    main.write_text("int cublas_probe(void); int main(void) { return cublas_probe() - 13; }\n")
    without = subprocess.run(["cc", "-o", str(tmp_path / "a.out"), str(main), "-lcublas"],
                             capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert without.returncode != 0 and "cublas" in without.stderr
    env, _, _ = cuda_gap_env(BuildRoot(tmp_path / "root"), site, toolkit, "13")
    linked = subprocess.run(["cc", "-o", str(tmp_path / "a.out"), str(main), "-lcublas"],
                            capture_output=True, text=True,
                            env={"PATH": os.environ["PATH"], **env})
    assert linked.returncode == 0, linked.stderr
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "a.out")], capture_output=True,
                            text=True, check=True).stdout
    assert "[libcublas.so.13]" in needed  # the SONAME, not the link name


def test_cuda_gap_lib_placeholder_needs_the_key(tmp_path: Path, inputs) -> None:  # noqa: F811
    lock, toolchain = inputs
    body = 'upstream = "purepy"\n{key}[cmake-defines]\nCUDA_nvrtc_LIBRARY = "{{cuda_gap_lib}}/libnvrtc.so"\n'
    path = write(tmp_path, "k", body.format(key=""))
    with pytest.raises(SglforgeError, match=r"\{cuda_gap_lib\} needs 'cuda-from-toolchain"):
        parse_recipe(path, lock, toolchain)
    path = write(tmp_path, "k", body.format(key="cuda-from-toolchain = true\n"))
    assert parse_recipe(path, lock, toolchain).cuda_from_toolchain is True
