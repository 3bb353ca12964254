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


def test_check_gpu_says_which_gpus_the_device_code_runs_on(tmp_path, monkeypatch):
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
    # a GPU outside the family: the error names the family cubin as built, not as listed
    other = _check_gpu(tmp_path, family, "9.0")
    assert other.returncode == 1, other.stdout + other.stderr
    assert f"{member}: nothing runs on 9.0 (carries sm_120f; PTX compute_120f)" in other.stdout

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

    # a cuobjdump that lists the family cubin but cannot dump its fatbin headers (a broken or
    # mismatched install): the ELF is named, not the temporary file it was read from
    failing = tmp_path / "cuobjdump-no-elf"
    real = audit.find_cuobjdump(Path("/usr/local/cuda"))
    failing.write_text(f'#!/bin/sh\n[ "$1" = -elf ] && exit 3\nexec {real} "$@"\n')
    failing.chmod(0o755)
    monkeypatch.setenv("SGLFORGE_CUOBJDUMP", str(failing))
    headless = _check_gpu(tmp_path, family, "12.0")
    monkeypatch.undo()
    assert headless.returncode == 1, headless.stdout + headless.stderr
    assert f"cuobjdump -elf failed on {member} (exit status 3)" in headless.stdout

    bad = _check_gpu(tmp_path, family, "12.5")
    assert bad.returncode == 2 and "'12.5' is not a known compute capability" in bad.stderr
    assert "Traceback" not in bad.stderr


# A TU guarded the way CUTLASS 57e3cfb4 guards its SM120 MMA atoms and kernels
# (cutlass/arch/config.h defines CUTLASS_ARCH_MMA_SM120A_ENABLED from __CUDA_ARCH_FEAT_SM120_ALL,
# which only the arch-specific target sm_120a sets; the family twin CUTLASS_ARCH_MMA_SM120F_ENABLED
# comes from __CUDA_ARCH_FAMILY_SPECIFIC__), here with a guard that knows only the `a` form: an
# sm_120f build compiles the GEMM to CUTLASS's stub message. The Hopper kernel beside it is a
# stub in every sm_12x cubin and is only launched on 9.0 (the host dispatches by CC).
GUARDED = r"""
#include <cstdint>
#include <cstdio>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1200 && defined(__CUDA_ARCH_FEAT_SM120_ALL)
#  define DEMO_ARCH_MMA_SM120A_ENABLED 1
#endif
template <int N> struct MainloopSm120Demo {};
template <class Policy>
__global__ void gemm_f8f6f4(float *d, const uint32_t *a, const uint32_t *b) {
#if defined(DEMO_ARCH_MMA_SM120A_ENABLED)
  float c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  asm volatile("mma.sync.aligned.kind::f8f6f4.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  d[threadIdx.x] = c0 + c1 + c2 + c3;
#else
  printf("ERROR : Arch conditional MMA instruction used without targeting appropriate "
         "compute capability. Aborting.\n");
  __trap();
#endif
}
__global__ void hopper_gemm(float *d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  d[threadIdx.x] = 1.0f;
#else
  printf("Attempting to use SM90_64x8x16_F16F16F16_SS without CUTE_ARCH_MMA_SM90A_ENABLED");
  __trap();
#endif
}
extern "C" void launch(float *d, const uint32_t *a, const uint32_t *b) {
  gemm_f8f6f4<MainloopSm120Demo<1>><<<1, 32>>>(d, a, b);
  hopper_gemm<<<1, 32>>>(d);
}
"""


def _guarded_wheel(tmp_path: Path, code: str) -> Path:
    src = tmp_path / "guarded.cu"
    src.write_text(GUARDED)
    lib = tmp_path / f"guarded_{code}.so"
    subprocess.run(
        [_nvcc(), "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(src)]
        + [f"-gencode=arch={code.replace('sm_', 'compute_')},code={code}"],
        check=True,
        capture_output=True,
    )
    wheel = tmp_path / f"g_{code}-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("g/libg.so", lib.read_bytes())
    return wheel


def test_a_kernel_compiled_to_an_arch_conditional_stub_fails_the_audit(tmp_path):
    cuobjdump = audit.find_cuobjdump(Path("/usr/local/cuda"))
    assert cuobjdump is not None
    # sm_120f: the SASS is there (the arch check alone passes), but the GEMM is a stub
    with pytest.raises(SglforgeError) as failed:
        audit.audit_wheel(_guarded_wheel(tmp_path, "sm_120f"), ("sm_120f",), cuobjdump)
    message = str(failed.value)
    assert "arch-conditional stubs" in message and "g/libg.so: " in message
    assert "g/libg.so: cubin 2 (sm_120f): " in message
    assert "'ERROR : Arch conditional MMA instruction used without targeting" in message
    assert "_Z11gemm_f8f6f4I17MainloopSm120DemoILi1EEEvPfPKjS4_" in message
    # sm_120a: the guard holds, the MMA is real; the Hopper stub is found, named, not fatal
    [elf] = audit.audit_wheel(_guarded_wheel(tmp_path, "sm_120a"), ("sm_120a",), cuobjdump)
    [stub] = elf.stubs
    assert (stub.arch, stub.fatal, stub.kernels) == ("sm_120a", False, ("_Z11hopper_gemmPf",))
    assert stub.messages == (
        "Attempting to use SM90_64x8x16_F16F16F16_SS without CUTE_ARCH_MMA_SM90A_ENABLED",
    )


def test_stub_rules_by_the_archs_a_message_or_kernel_names():
    assert audit.named_majors("Attempting to use SM120_16x8x32_TN without CUTE_ARCH_F8F6F4") == {12}
    assert audit.named_majors("_ZN7cutlass4arch4Sm90E") == {9}
    assert audit.named_majors("Trying to use TMEM_LOAD without CUTE_ARCH_TCGEN05_TMEM_ENABLED") == {
        10
    }
    assert audit.named_majors("ERROR : Arch conditional MMA instruction used without") == set()
    # not an ELF: no stub evidence can be read from it, and none is claimed
    assert audit.cubin_stub("x.sm_120.cubin", "sm_120", b"no stub here") is None
    stub = audit.cubin_stub(
        "x.sm_120.cubin", "sm_120", b"\0Attempting to use SM120_16x8x32_TN without CUTE_ARCH_X\0"
    )
    assert stub is not None and stub.fatal and stub.kernels == ()
    other = audit.cubin_stub(
        "x.sm_120.cubin", "sm_120", b"\0Attempting to use SM100_MMA_TF32 without CUTE_ARCH_X\0"
    )
    assert other is not None and not other.fatal
