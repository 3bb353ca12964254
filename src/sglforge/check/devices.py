"""Does each wheel's device code run on the serving GPUs (`check --gpu 12.0,12.1`)?

"no kernel image is available for execution on the device" is what a serving host sees when
an extension carries neither SASS that its GPU runs nor PTX it can JIT-compile. This part
answers that offline, from what each ELF carries (`cuobjdump`, the arch audit's rules in
wheel/audit.py `runs_on`), for GPUs no build host has: an error per ELF that a named GPU
could not load, and per wheel how each GPU would run it (SASS, or PTX compiled at load).
A family cubin, which `--list-elf` names bare (`sm_120`), is named as its fatbin header
says (`sm_120f`), so a message shows what the build asked for.
"""

from __future__ import annotations

from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.check.findings import Findings
from sglforge.check.stack import Stack
from sglforge.wheel import audit

PART = "devices"


def check_devices(
    stack: Stack, devices: tuple[str, ...], findings: Findings, cuobjdump: Path | None = None
) -> None:
    cuobjdump = cuobjdump or audit.find_cuobjdump(Path("/usr/local/cuda"))
    if cuobjdump is None:
        findings.error(
            PART,
            "--gpu needs cuobjdump (CUDA toolkit, PATH, $SGLFORGE_CUOBJDUMP or PyPI "
            "'nvidia-cuda-cuobjdump>=13.2,<14'), none found: device code not checked",
        )
        return
    for wheel in stack.wheels:
        try:
            found = audit.device_code(wheel.file, cuobjdump, families=True)
        except SglforgeError as exc:  # an ELF cuobjdump cannot read: this wheel's error
            findings.error(PART, f"{wheel.file.name}: {exc}")
            continue
        if not found:
            continue
        gaps = audit.load_gaps(found, devices)
        for gap in gaps:
            findings.error(PART, f"{wheel.file.name}: {gap}")
        if not gaps:
            findings.info(PART, f"{wheel.file.name}: {_how(found, devices)}")


def _how(found: list[audit.ElfArchs], devices: tuple[str, ...]) -> str:
    """ "3 ELF(s) with device code; 12.0: SASS in 3; 12.1: SASS in 2, PTX (JIT) in 1"."""
    parts = [f"{len(found)} ELF(s) with device code"]
    for device in devices:
        ways = [e.runs_with(device) or "" for e in found]
        sass = sum(w.startswith("SASS") for w in ways)
        jit = sum(w.startswith("PTX") for w in ways)
        parts.append(
            f"{device}: "
            + ", ".join(f"{what} in {n}" for what, n in (("SASS", sass), ("PTX (JIT)", jit)) if n)
        )
    return "; ".join(parts)
