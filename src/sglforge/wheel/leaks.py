"""Reproducibility lint: no wheel member may contain the build root or interpreter paths.

After a build every ELF and text member of the wheel is searched for the paths of the
machine it was built on (builder/prefixmap.py `leak_needles`: the build root, the build
interpreter's prefix and base prefix). A hit means the wheel's bytes depend on where the
tool ran, so the build fails naming each member, like the arch audit. The provenance
stamp (`*.dist-info/sglforge-build.json`) records the build root on purpose and is skipped,
and so is the SBOM made from it (`*.dist-info/sboms/sglforge.cdx.json`, wheel/sbom.py: an
--unsafe-no-sandbox build's root is in both); any other SBOM in `sboms/` is searched.
Other binary members (images, archives) are not searched.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.wheel.provenance import PROVENANCE_FILE as PROVENANCE_NAME
from sglforge.wheel.sbom import SBOM_DIR, SBOM_FILE

ELF_MAGIC = b"\x7fELF"
TEXT_PROBE = 8192


@dataclass(frozen=True)
class Leak:
    member: str
    kind: str  # "ELF" | "text"
    needle: str
    count: int
    sample: str  # the first hit with some context


def member_kind(data: bytes) -> str | None:
    """ "ELF", "text" (no NUL in the first 8 KiB, valid UTF-8) or None (other binary)."""
    if data.startswith(ELF_MAGIC):
        return "ELF"
    if b"\0" in data[:TEXT_PROBE]:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text"


def _sample(data: bytes, at: int, needle: bytes) -> str:
    start = at
    while start > 0 and at - start < 60 and 32 <= data[start - 1] < 127:
        start -= 1
    end = at + len(needle)
    while end < len(data) and end - at < 120 and 32 <= data[end] < 127:
        end += 1
    return data[start:end].decode("ascii", errors="replace")


def scan_wheel(wheel: Path, needles: list[str]) -> list[Leak]:
    leaks = []
    encoded = [(n, n.encode()) for n in needles if n]
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir() or info.filename.endswith(
                (f".dist-info/{PROVENANCE_NAME}", f".dist-info/{SBOM_DIR}/{SBOM_FILE}")
            ):
                continue
            data = archive.read(info)
            kind = member_kind(data)
            if kind is None:
                continue
            for needle, raw in encoded:
                count = data.count(raw)
                if count:
                    leaks.append(
                        Leak(info.filename, kind, needle, count, _sample(data, data.find(raw), raw))
                    )
    return leaks


def render(wheel: Path, leaks: list[Leak]) -> str:
    members = sorted({leak.member for leak in leaks})
    head = (
        f"{wheel.name}: {len(members)} member(s) contain build-machine paths "
        "(the wheel's bytes would depend on where sglforge ran):"
    )
    lines = [head]
    for leak in leaks:
        lines.append(
            f"  {leak.member} ({leak.kind}): {leak.count}x {leak.needle}  e.g. {leak.sample!r}"
        )
    return "\n".join(lines)


def check_wheel(wheel: Path, needles: list[str]) -> None:
    leaks = scan_wheel(wheel, needles)
    if leaks:
        raise SglforgeError(
            render(wheel, leaks),
            hint="a compiler invocation missed the prefix maps "
            "(builder/prefixmap.py), or a build script writes absolute "
            "paths into a package file: patch it or exclude the member",
        )
