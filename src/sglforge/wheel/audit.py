"""Architecture audit: every ELF in a wheel that holds device code must carry the SASS the
recipe requires (e.g. `sm_120a`). Uses `cuobjdump --list-elf` (CUDA toolkit, or the PyPI
package `nvidia-cuda-cuobjdump`), which prints one line per embedded cubin:

    ELF file    1: common_ops.1.sm_120a.cubin
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError

CUBIN_LINE = re.compile(r"ELF file\s+[0-9]+:\s*\S*?\.(sm_[0-9]+[af]?)\.cubin")


@dataclass(frozen=True)
class ElfArchs:
    member: str  # path inside the wheel
    archs: tuple[str, ...]  # SASS targets found, sorted


def find_cuobjdump(cuda_home: Path | None = None) -> Path | None:
    candidates = []
    if cuda_home is not None:
        candidates.append(cuda_home / "bin" / "cuobjdump")
    on_path = shutil.which("cuobjdump")
    if on_path:
        candidates.append(Path(on_path))
    for base in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                 *[p for p in sys.path if p.endswith("site-packages")]}:
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            candidates.append(Path(base) / "nvidia" / sub / "bin" / "cuobjdump")
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def list_archs(cuobjdump: Path, elf: Path) -> tuple[str, ...]:
    proc = subprocess.run([str(cuobjdump), "--list-elf", str(elf)], capture_output=True,
                          text=True, check=False)
    text = proc.stdout + proc.stderr
    archs = sorted(set(CUBIN_LINE.findall(text)))
    if proc.returncode != 0 and not archs and "does not contain device code" not in text:
        raise SglforgeError(f"cuobjdump failed on {elf.name}: {text.strip()[-500:]}")
    return tuple(archs)


def audit_wheel(wheel: Path, required: tuple[str, ...], cuobjdump: Path) -> list[ElfArchs]:
    """Check every device-code ELF; raise naming each file that misses a required arch."""
    found: list[ElfArchs] = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for info in archive.infolist():
            if info.is_dir():
                continue
            with archive.open(info) as handle:
                if handle.read(4) != b"\x7fELF":
                    continue
            target = Path(tmp) / "member.elf"
            target.write_bytes(archive.read(info))
            archs = list_archs(cuobjdump, target)
            if archs:
                found.append(ElfArchs(info.filename, archs))
    if required:
        if not found:
            raise SglforgeError(f"{wheel.name}: arch audit: no ELF in the wheel holds device "
                                f"code, but the recipe requires {', '.join(required)}")
        gaps = [f"  - {e.member}: missing {', '.join(sorted(set(required) - set(e.archs)))} "
                f"(has {', '.join(e.archs)})" for e in found if set(required) - set(e.archs)]
        if gaps:
            raise SglforgeError(f"{wheel.name}: arch audit failed:\n" + "\n".join(gaps),
                                hint="check the recipe's arch list (gencodes / arch env)")
    return found
