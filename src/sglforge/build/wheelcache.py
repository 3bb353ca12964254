"""The content-keyed wheel cache: `<cache-dir>/wheels/<k[:2]>/<k>/{<wheel>, entry.json}`,
and its remote (shared) tier on a WebDAV store, same layout under the store's URL.

An entry is the finished wheel (normalized, stamped, audited) and `entry.json`
(`file`, `sha256`, `name`, `version`, `stat`); a lookup serves it only when the wheel's bytes
match the recorded sha256, otherwise the entry counts as absent and the next build overwrites
it. The wheel is hashed only when its stat stamp (size, mtime_ns, ctime_ns, inode, recorded
when the entry was stored) changed: a no-op build of a multi-GB wheel set reads no wheel. Keys
are `BuildKey.cache_value` (build/key.py). Entries are written atomically (wheel first, then
entry.json), so an interrupted store leaves no entry.

The remote tier (`RemoteWheelCache`, keys `BuildKey.remote_value`, build/key.py) holds the
same entries on a `RemoteStore` (base/remotestore.py): each file goes up under a temporary
name and is MOVEd into place, the wheel first and `entry.json` last — `entry.json` is the
commit marker, so an interrupted upload is never an entry. A download is trusted only when
(1) `entry.json` parses and names a plain file, (2) the wheel's bytes match its sha256
(checked while downloading; nothing unverified reaches the local tier), and (3) the
`content_key` stamped in the wheel's `sglforge-build.json` is the content key being looked
up — an entry copied or planted under another key is refused, and so is a dev build
(`build --dev` stamps the clean key but is incremental; sglforge never uploads one). A
refused entry is a miss (`RemoteRefused`, printed as a warning, and the wheel is rebuilt; a
writer then overwrites the entry); only wheels built in this run are uploaded, never in
read-only mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_bytes, sha256_file
from sglforge.base.remotestore import IntegrityError, RemoteStore, key_problem


@dataclass(frozen=True)
class CacheEntry:
    wheel: Path
    sha256: str
    name: str  # distribution name as in the wheel's METADATA
    version: str

    def as_json(self) -> dict[str, str]:
        return {"file": self.wheel.name, "sha256": self.sha256, "name": self.name,
                "version": self.version}


def parse_entry(data: bytes | str) -> dict[str, Any] | None:
    """`entry.json`'s fields, or None when damaged (not JSON, a field missing, a bad file).
    `stat` (local tier only: the wheel's stat stamp when stored) is kept when it is a list."""
    try:
        meta = json.loads(data)
        fields: dict[str, Any] = {k: meta[k] for k in ("file", "sha256", "name", "version")}
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if not all(isinstance(v, str) for v in fields.values()):
        return None
    if isinstance(meta.get("stat"), list):
        fields["stat"] = meta["stat"]
    file = fields["file"]
    if "/" in file or file in ("", ".", "..") or key_problem(file) is not None:
        return None
    return fields


def entry_bytes(entry: CacheEntry) -> bytes:
    return (json.dumps(entry.as_json(), indent=2, sort_keys=True) + "\n").encode()


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
            meta = parse_entry(entry.read_bytes())
        except OSError:
            meta = None
        if meta is None:
            return None  # damaged entry: rebuild (and overwrite it)
        file, digest, name, version = meta["file"], meta["sha256"], meta["name"], meta["version"]
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


class RemoteRefused(SglforgeError):
    """A remote entry exists but is not trusted (the message says why); it counts as a miss."""


class RemoteWheelCache:
    """The remote tier: a WebDAV collection shared by build hosts (module docstring)."""

    def __init__(self, store: RemoteStore) -> None:
        self.store = store

    @staticmethod
    def entry_prefix(key: str) -> str:
        return f"{key[:2]}/{key}"

    def has(self, key: str) -> bool:
        """Whether a committed entry (entry.json) exists; not verified (`plan --matrix`)."""
        return self.store.exists(f"{self.entry_prefix(key)}/entry.json")

    def fetch(self, key: str, content_key: str, dest_dir: Path) -> CacheEntry | None:
        """Download and verify the entry for `key` into `dest_dir`: None when absent,
        `RemoteRefused` when present but not trustworthy (nothing is left in `dest_dir`)."""
        prefix = self.entry_prefix(key)
        where = self.store.url_of(f"{prefix}/entry.json")
        raw = self.store.get_bytes(f"{prefix}/entry.json", limit=1 << 16)
        if raw is None:
            return None
        meta = parse_entry(raw)
        if meta is None:
            raise RemoteRefused(f"{where}: damaged entry (not the JSON sglforge writes)")
        dest = dest_dir / meta["file"]
        try:
            if not self.store.get(f"{prefix}/{meta['file']}", dest, sha256=meta["sha256"]):
                raise RemoteRefused(f"{where}: names {meta['file']}, which is not there")
        except IntegrityError as exc:
            raise RemoteRefused(str(exc).removeprefix("remote store: ")) from None
        try:
            from sglforge.wheel.provenance import read as read_provenance

            provenance = read_provenance(dest)
            stamped = provenance.content_key
            if stamped != content_key:
                raise RemoteRefused(
                    f"{self.store.url_of(prefix + '/' + meta['file'])}: its content_key "
                    f"{(stamped or 'none')[:12]} is not the key looked up {content_key[:12]}")
            if provenance.dev:  # incremental, never uploaded by sglforge: planted
                raise RemoteRefused(
                    f"{self.store.url_of(prefix + '/' + meta['file'])}: a dev build "
                    "(`build --dev`), never a release wheel")
        except SglforgeError as exc:
            dest.unlink(missing_ok=True)
            if isinstance(exc, RemoteRefused):
                raise
            raise RemoteRefused(f"{where}: the wheel is unreadable ({exc})") from None
        return CacheEntry(dest, meta["sha256"], meta["name"], meta["version"])

    def upload(self, key: str, entry: CacheEntry) -> None:
        """The wheel first, then entry.json (the commit marker)."""
        prefix = self.entry_prefix(key)
        self.store.put(f"{prefix}/{entry.wheel.name}", entry.wheel)
        self.store.put(f"{prefix}/entry.json", entry_bytes(entry))
