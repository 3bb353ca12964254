"""The content-keyed wheel cache: `<cache-dir>/wheels/<k[:2]>/<k>/{<wheel>, entry.json}`.

An entry is the finished wheel (normalized, stamped, audited) and `entry.json`
(`file`, `sha256`, `name`, `version`, `stat`); a lookup serves it only when the wheel's bytes
match the recorded sha256, otherwise the entry counts as absent and the next build overwrites
it. The wheel is hashed only when its stat stamp (size, mtime_ns, ctime_ns, inode, recorded
when the entry was stored) changed: a no-op build of a multi-GB wheel set reads no wheel. Keys
are `BuildKey.cache_value` (build/key.py). Entries are written atomically (wheel first, then
entry.json), so an interrupted store leaves no entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.fs import atomic_write_bytes, sha256_file


@dataclass(frozen=True)
class CacheEntry:
    wheel: Path
    sha256: str
    name: str  # distribution name as in the wheel's METADATA
    version: str

    def as_json(self) -> dict[str, str]:
        return {"file": self.wheel.name, "sha256": self.sha256, "name": self.name,
                "version": self.version}


class WheelCache:
    """The local tier: a directory on this host."""

    def __init__(self, cache_dir: Path) -> None:
        self.root = cache_dir / "wheels"

    def entry_dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lookup(self, key: str) -> CacheEntry | None:
        entry_dir = self.entry_dir(key)
        entry = entry_dir / "entry.json"
        if not entry.is_file():
            return None
        try:
            meta = json.loads(entry.read_text())
            file, digest = meta["file"], meta["sha256"]
            name, version = meta["name"], meta["version"]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # damaged entry: rebuild (and overwrite it)
        if not isinstance(file, str) or "/" in file or file in ("", ".", ".."):
            return None
        wheel = entry_dir / file
        if not wheel.is_file():
            return None
        if meta.get("stat") != _stamp(wheel) and sha256_file(wheel) != digest:
            return None
        return CacheEntry(wheel, digest, str(name), str(version))

    def store(self, key: str, wheel: Path, sha256: str, name: str, version: str) -> CacheEntry:
        entry_dir = self.entry_dir(key)
        atomic_write_bytes(entry_dir / wheel.name, wheel.read_bytes())
        entry = CacheEntry(entry_dir / wheel.name, sha256, name, version)
        meta = {**entry.as_json(), "stat": _stamp(entry.wheel)}
        atomic_write_bytes(entry_dir / "entry.json",
                           (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
        return entry


def _stamp(path: Path) -> list[int]:
    """What changes when a file is rewritten or modified in place (ctime: even a write that
    restores the mtime)."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
