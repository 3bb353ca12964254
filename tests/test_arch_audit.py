"""The arch audit with the real nvcc 13 and cuobjdump: family-specific SASS (`sm_120f`, what
flashinfer-jit-cache's FLASHINFER_CUDA_ARCH_LIST=12.0f compiles) is listed by
`cuobjdump --list-elf` as `….sm_120.cubin`; the audit reads the fatbin headers for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.wheel import audit

pytestmark = pytest.mark.cuda

KERNEL = (
    "__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }\n"
    'extern "C" void launch(float *x) { scale<<<1, 32>>>(x, 2.0f); }\n'
)


def _nvcc() -> str:
    home = os.environ.get("CUDA_HOME")
    for candidate in ([Path(home) / "bin" / "nvcc"] if home else []) + [
        Path("/usr/local/cuda/bin/nvcc")
    ]:
        if candidate.is_file():
            return str(candidate)
    return shutil.which("nvcc") or "nvcc"


def _library(tmp_path: Path, *gencodes: str) -> Path:
    """A shared library compiled by the real nvcc with these `-gencode` values."""
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    lib = tmp_path / f"lib{abs(hash(gencodes))}.so"
    subprocess.run(
        [_nvcc(), "-shared", "-Xcompiler", "-fPIC"]
        + [f"-gencode={g}" for g in gencodes]
        + ["-o", str(lib), str(src)],
        check=True,
        capture_output=True,
    )
    return lib


def _wheel(tmp_path: Path, code: str) -> Path:
    """A wheel holding one shared library compiled for `-gencode arch=compute_X,code=X`."""
    lib = _library(tmp_path, f"arch={code.replace('sm_', 'compute_')},code={code}")
    wheel = tmp_path / f"k_{code}-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("k/libk.so", lib.read_bytes())
        archive.writestr("k/__init__.py", "")
    return wheel


def test_family_specific_sass_passes_the_audit_and_plain_sass_does_not(tmp_path):
    cuobjdump = audit.find_cuobjdump(Path("/usr/local/cuda"))
    assert cuobjdump is not None
    family = _wheel(tmp_path, "sm_120f")
    [elf] = audit.audit_wheel(family, ("sm_120f",), cuobjdump)
    assert (elf.member, elf.archs) == ("k/libk.so", ("sm_120f",))
    with zipfile.ZipFile(family) as archive:  # what --list-elf alone says, and why
        (tmp_path / "f.so").write_bytes(archive.read("k/libk.so"))
    assert audit.list_archs(cuobjdump, tmp_path / "f.so") == ("sm_120",)
    plain = _wheel(tmp_path, "sm_120")
    with pytest.raises(SglforgeError, match=r"k/libk.so: missing sm_120f \(has sm_120\)"):
        audit.audit_wheel(plain, ("sm_120f",), cuobjdump)
    # an arch-specific requirement is unaffected: sm_120f SASS is not sm_120a
    with pytest.raises(SglforgeError, match=r"missing sm_120a \(has sm_120\)"):
        audit.audit_wheel(family, ("sm_120a",), cuobjdump)


def _check_gpu(tmp_path: Path, library: Path, gpus: str) -> subprocess.CompletedProcess:
    """`sglforge check --gpu` on a fixture stack whose DeepGEMM wheel carries `library`."""
    import sys
    import tempfile

    from tests.test_check import SRC, Stack

    stack = Stack(Path(tempfile.mkdtemp(dir=tmp_path)) / "project")
    stack.dg_files["deep_gemm/_C_stub.cpython-312-x86_64-linux-gnu.so"] = library.read_bytes()
    stack.write()
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(stack.root), "check", "--gpu", gpus],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=False,
    )


def test_check_gpu_says_which_gpus_the_device_code_runs_on(tmp_path):
    """RTX PRO 6000 is 12.0, DGX Spark / GB10 12.1: an sm_120a-only build is 'no kernel image'
    on GB10, named per ELF; the family build (sm_120f SASS + compute_120f PTX) runs on both
    from SASS; sm_90a SASS with compute_90 PTX runs on 12.1 only through the JIT."""
    member = "deep_gemm/_C_stub.cpython-312-x86_64-linux-gnu.so"
    specific = _check_gpu(
        tmp_path, _library(tmp_path, "arch=compute_120a,code=sm_120a"), "12.0,12.1"
    )
    assert specific.returncode == 1, specific.stdout + specific.stderr
    assert f"{member}: nothing runs on 12.1 (carries sm_120a)" in specific.stdout
    assert "devices 1 error(s)" in specific.stdout and "Traceback" not in specific.stderr

    family = _library(tmp_path, "arch=compute_120f,code=[sm_120f,compute_120f]")
    both = _check_gpu(tmp_path, family, "12.0,12.1")
    assert both.returncode == 0, both.stdout + both.stderr
    assert "1 ELF(s) with device code; 12.0: SASS in 1; 12.1: SASS in 1" in both.stdout
    assert "devices ok" in both.stdout

    hopper = _library(tmp_path, "arch=compute_90a,code=sm_90a", "arch=compute_90,code=compute_90")
    jit = _check_gpu(tmp_path, hopper, "9.0,12.1")
    assert jit.returncode == 0, jit.stdout + jit.stderr
    assert "9.0: SASS in 1; 12.1: PTX (JIT) in 1" in jit.stdout

    # an ELF cuobjdump cannot read is that wheel's error, named; the check goes on
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"\x7fELF")
    unreadable = _check_gpu(tmp_path, broken, "12.0")
    assert unreadable.returncode == 1, unreadable.stdout + unreadable.stderr
    assert "ERROR  devices    sgl_deep_gemm-" in unreadable.stdout
    assert "cuobjdump failed on " + member in unreadable.stdout

    bad = _check_gpu(tmp_path, family, "12.5")
    assert bad.returncode == 2 and "'12.5' is not a known compute capability" in bad.stderr
    assert "Traceback" not in bad.stderr
