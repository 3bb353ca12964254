"""Rebuild a meson wrapdb patch zip byte for byte from a mesonbuild/wrapdb git repository.

wrapdb's release job (tools/create_release.py at the release tag) copies
subprojects/packagefiles/<name>/ (shutil.copytree, file times kept), adds wrapdb's COPYING as
LICENSE.build (a new file, which also sets the directory's time) and zips `<directory>/` with
shutil.make_archive. Everything in the zip comes from git except two times: the checkout's
(meson.build) and LICENSE.build's (also the directory entry's). This script searches both,
2-second DOS steps, from a start time (the release commit's) until the sha256 matches the
wrap's patch_hash, and writes the zip. It proves the pinned sha256 is that content; it is not
part of any build (the build takes the zip from the source cache by its sha256).

    python bench/wrapdb_patch_zip.py WRAPDB_GIT TAG DIRECTORY SHA256 START_UTC HOURS OUT.zip
    e.g. ... asio_1.30.2-2 asio-1.30.2 8bed3693... 2024-10-17T14:38:00 3 asio_1.30.2-2_patch.zip

Measured 2026-12-01 (Python 3.11 zipfile/zlib): abseil-cpp_20250814.1-1 matched with both
times 2025-09-24 20:21:18 UTC; asio_1.30.2-2 with 14:39:06 / 14:39:08 on 2024-10-17; both with
the order (meson.build, LICENSE.build) and modes 0644/0755.
"""

from __future__ import annotations

import calendar
import hashlib
import io
import struct
import subprocess
import sys
import time
import zipfile

MAX_GAP_STEPS = 450  # LICENSE.build is written at most 15 minutes after the checkout


def git_show(repo: str, spec: str) -> bytes:
    return subprocess.run(["git", "-C", repo, "show", spec], check=True, capture_output=True).stdout


def zip_bytes(directory: str, files: dict[str, bytes], order: list[str]) -> bytearray:
    """The zip make_archive writes, with all times at 1980-01-01 (patched in later)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        entry = zipfile.ZipInfo(directory + "/", (1980, 1, 1, 0, 0, 0))
        entry.external_attr = (0o40755 << 16) | 0x10  # what ZipFile.write records for a dir
        entry.compress_type = zipfile.ZIP_STORED
        zf.writestr(entry, b"")
        for name in order:
            entry = zipfile.ZipInfo(f"{directory}/{name}", (1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o100644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, files[name])
    return bytearray(buf.getvalue())


def dos_time(epoch: int) -> bytes:
    t = time.gmtime(epoch)
    return struct.pack(
        "<HH",
        (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2),
        ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday,
    )


def time_fields(data: bytearray) -> list[tuple[int, int]]:
    """Offsets of (local header, central directory) time/date fields, entry by entry."""
    local = [i + 10 for i in range(len(data) - 4) if data[i : i + 4] == b"PK\x03\x04"]
    central = [i + 12 for i in range(len(data) - 4) if data[i : i + 4] == b"PK\x01\x02"]
    return list(zip(local, central, strict=True))


def search(data: bytearray, groups: list[str], want: str, start: int, steps: int) -> int | None:
    fields = time_fields(data)
    for first in range(steps):
        checkout = start + 2 * first
        for k, group in enumerate(groups):
            if group == "checkout":
                for off in fields[k]:
                    data[off : off + 4] = dos_time(checkout)
        for gap in range(MAX_GAP_STEPS + 1):
            for k, group in enumerate(groups):
                if group == "license":
                    for off in fields[k]:
                        data[off : off + 4] = dos_time(checkout + 2 * gap)
            if hashlib.sha256(data).hexdigest() == want:
                return checkout
    return None


def main(argv: list[str]) -> int:
    repo, tag, directory, want, start_utc, hours, out = argv
    name = tag.rsplit("_", 1)[0]
    listing = subprocess.run(
        ["git", "-C", repo, "ls-tree", "--name-only", f"{tag}:subprojects/packagefiles/{name}/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if listing != ["meson.build"]:
        print(f"packagefiles/{name} holds {listing}: only meson.build is handled", file=sys.stderr)
        return 2
    files = {
        "meson.build": git_show(repo, f"{tag}:subprojects/packagefiles/{name}/meson.build"),
        "LICENSE.build": git_show(repo, f"{tag}:COPYING"),
    }
    start = calendar.timegm(time.strptime(start_utc, "%Y-%m-%dT%H:%M:%S")) // 2 * 2
    for order in (["meson.build", "LICENSE.build"], ["LICENSE.build", "meson.build"]):
        data = zip_bytes(directory, files, order)
        groups = ["license"] + ["license" if n == "LICENSE.build" else "checkout" for n in order]
        found = search(data, groups, want, start, int(float(hours) * 1800))
        if found is not None:
            with open(out, "wb") as f:
                f.write(data)
            print(
                f"sha256 {want} matched: order {order}, checkout "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(found))}"
            )
            return 0
    print("no match in the window", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
