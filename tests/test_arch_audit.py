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


def _wheel(tmp_path: Path, code: str) -> Path:
    """A wheel holding one shared library compiled for `-gencode arch=compute_X,code=X`."""
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    lib = tmp_path / f"lib{code}.so"
    subprocess.run(
        [
            _nvcc(),
            "-shared",
            "-Xcompiler",
            "-fPIC",
            f"-gencode=arch={code.replace('sm_', 'compute_')},code={code}",
            "-o",
            str(lib),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
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
