"""Reading one member of a wheel (a zip) into memory, with a size cap that fits its kind.

A wheel is input (a remote cache entry, a reference wheel, a file in wheels/): a small zip
can hold a member of any size — 200 MB of METADATA deflates to a few hundred KB, and reading
it whole took the stack check to 1.4 GB. So every member sglforge reads into memory goes
through `read_member`: the zip's declared size is checked before anything is decompressed,
and at most cap + 1 bytes are decompressed, because a declared size can lie. Input files on
disk have their own capped reader (base/fs.py); this one is only for zip members.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from sglforge.base.errors import SglforgeError

# Caps by member kind: far above any real wheel's (torch's METADATA is ~50 KB and its RECORD
# ~3 MB; sglang's largest module ~300 KB), far below what hurts a build host.
CAPS = {
    "METADATA": 16 << 20,  # the long description embeds a README
    "WHEEL": 64 << 10,
    "sglforge-build.json": 4 << 20,  # provenance: pins, patch digests, removed members
    "RECORD": 64 << 20,  # one line per file
    "entry_points.txt": 4 << 20,
    "source": 32 << 20,  # a Python module the stack check parses
    "sglforge.cdx.json": 8 << 20,  # the SBOM (wheel/sbom.py): the provenance's facts, as JSON
}


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


class MemberTooLarge(SglforgeError):
    """A wheel member is larger than the cap for its kind."""


def member_kind(name: str) -> str:
    """The cap's kind of member `name`: a .dist-info file by its name, else "source"."""
    last = name.rsplit("/", 1)[-1]
    if ".dist-info/" in name and last in CAPS:
        return last
    return "source"


def read_member(
    archive: zipfile.ZipFile, name: str, wheel: Path | str, kind: str | None = None
) -> bytes:
    """Member `name` of `archive` (the wheel file `wheel`, for messages), at most the cap of
    its kind; a larger, missing or undecodable member is an error naming the wheel and it."""
    kind = kind or member_kind(name)
    cap = CAPS[kind]
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise SglforgeError(f"{wheel}: has no member {name}") from None
    if info.file_size > cap:
        raise MemberTooLarge(
            f"{wheel}: member {name} declares {info.file_size} bytes, more "
            f"than the {_size(cap)} a {kind} may have (not read)"
        )
    try:
        with archive.open(info) as handle:
            data = handle.read(cap + 1)
    except (
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        NotImplementedError,
        RuntimeError,
        ValueError,
        OSError,
    ) as exc:
        # RuntimeError: encrypted; NotImplementedError: unknown compression; BadZipFile: CRC
        raise SglforgeError(
            f"{wheel}: member {name} is unreadable ({type(exc).__name__}: {exc})"
        ) from None
    if len(data) > cap:  # the declared size lied
        raise MemberTooLarge(
            f"{wheel}: member {name} is larger than the {_size(cap)} a "
            f"{kind} may have (its declared size {info.file_size} is wrong)"
        )
    return data
