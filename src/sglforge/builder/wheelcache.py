"""The content-keyed wheel cache: `<cache-dir>/wheels/<k[:2]>/<k>/{<wheel>, entry.json}`,
and its remote (shared) tier on a WebDAV store, same layout under the store's URL.

An entry is the finished wheel (normalized, stamped, audited) and `entry.json`
(`file`, `sha256`, `name`, `version`, `stat`); a lookup serves it only when the wheel's bytes
match the recorded sha256, otherwise the entry counts as absent and the next build overwrites
it. The wheel is hashed only when its stat stamp (size, mtime_ns, ctime_ns, inode, recorded
when the entry was stored) changed: a no-op build of a multi-GB wheel set reads no wheel. Keys
are `BuildKey.cache_value` (builder/key.py). Entries are written atomically (wheel first, then
entry.json), so an interrupted store leaves no entry.

The remote tier (`RemoteWheelCache`, keys `BuildKey.remote_value`, builder/key.py) holds the
same entries on a `RemoteStore` (base/remotestore.py): each file goes up under a temporary
name and is MOVEd into place, the wheel first and `entry.json` last — `entry.json` is the
commit marker, so an interrupted upload is never an entry.

Whoever can write the store can write any bytes into an entry, so a download believes
nothing `entry.json` says beyond where to look and what to expect; everything that reaches a
file name or a lock line comes from the verified wheel itself. A download is trusted only when
(1) `entry.json` is the JSON sglforge writes: an object with string `file` (a valid wheel file
name, PEP 427), `sha256` (64 hex), `name`, `version` without spaces or control characters,
and an optional integer `size`; (2) the body stays within its cap (`DownloadLimits`: the
entry's `size`, at most `[wheel-cache] max-size`) and its deadline, and its bytes match the
sha256 (checked while downloading; nothing unverified reaches the local tier); (3) the
wheel's own METADATA and WHEEL (read with size caps, wheel/members.py) give a valid name,
version and tags, the name is the recipe's distribution and the version has the recipe's
version or local label (`ExpectedWheel`), and `entry.json`'s file, name and version agree
with them; (4) the `content_key` stamped in the wheel's `sglforge-build.json` is the content
key being looked up — an entry copied or planted under another key is refused, and so is a
dev build (`build --dev` stamps the clean key but is incremental; sglforge never uploads
one). The local file name is derived from the wheel (`WheelIdentity.filename`), never taken
from `entry.json`. A refused entry is a miss (`RemoteRefused`, printed as a warning, and the
wheel is rebuilt; a writer then overwrites the entry); a download past its deadline makes
the remote tier unavailable for the run. Only wheels built in this run are uploaded, never
in read-only mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_bytes, sha256_file
from sglforge.base.remotestore import (
    DEFAULT_DEADLINE,
    MAX_DOWNLOAD,
    DownloadProgress,
    DownloadTooLarge,
    IntegrityError,
    RemoteStore,
    key_problem,
)

ENTRY_LIMIT = 1 << 16  # entry.json: a few hundred bytes when sglforge writes it
DEFAULT_MAX_SIZE = 16 << 30  # [wheel-cache] max-size: the largest wheel a download may be
HARD_MAX_SIZE = MAX_DOWNLOAD  # 64 GiB: what max-size may be set to
WHEEL_FILE = re.compile(r"[A-Za-z0-9._+!-]+\.whl")  # the characters publish allows too
SHA256 = re.compile(r"[0-9a-f]{64}")
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")  # a value that reaches a lock line or file name
TAG = re.compile(r"[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+")
NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508


@dataclass(frozen=True)
class CacheEntry:
    wheel: Path
    sha256: str
    name: str  # distribution name as in the wheel's METADATA
    version: str

    def as_json(self) -> dict[str, Any]:
        return {
            "file": self.wheel.name,
            "sha256": self.sha256,
            "name": self.name,
            "version": self.version,
            "size": self.wheel.stat().st_size,
        }


@dataclass(frozen=True)
class ExpectedWheel:
    """What the recipe builds, which a remote entry must be: its distribution name (the
    recipe's name), and its exact version or its local label where the recipe fixes them."""

    name: str
    version: str | None = None
    local: str | None = None


@dataclass(frozen=True)
class DownloadLimits:
    """Bounds of one remote download (`[wheel-cache] max-size`, `download-deadline`)."""

    max_size: int = DEFAULT_MAX_SIZE
    deadline: float = DEFAULT_DEADLINE  # seconds for one object, connect to last byte
    progress_bytes: int = 256 << 20  # a progress line every this many bytes ...
    progress_seconds: float = 15.0  # ... or seconds, whichever comes first

    def cap(self, size: int | None) -> int:
        """The byte cap of a wheel whose entry says `size` (None: not recorded)."""
        return self.max_size if size is None else min(size, self.max_size)


def read_entry(data: bytes | str) -> dict[str, Any]:
    """`entry.json`'s fields, checked; a ValueError saying why it is not the JSON sglforge
    writes. `stat` (local tier only: the wheel's stat stamp when stored) is kept when it is a
    list, `size` (bytes of the wheel) when an integer."""
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, huge numbers
        raise ValueError(f"not JSON ({str(exc).split(':')[0]})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"not a JSON object (a {type(meta).__name__})")
    fields: dict[str, Any] = {}
    for name in ("file", "sha256", "name", "version"):
        value = meta.get(name)
        if not isinstance(value, str):
            raise ValueError(f"'{name}' is {'missing' if value is None else 'not a string'}")
        if not value or _UNSAFE.search(value):
            raise ValueError(f"'{name}' is empty or has spaces or control characters")
        fields[name] = value
    if not SHA256.fullmatch(fields["sha256"]):
        raise ValueError("'sha256' is not 64 lowercase hex digits")
    file = fields["file"]
    if not WHEEL_FILE.fullmatch(file) or key_problem(file) is not None:
        raise ValueError(f"'file' {file!r} is not a wheel file name")
    try:
        parse_wheel_filename(file)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise ValueError(f"'file' {file!r} is not a wheel file name ({exc})") from None
    size = meta.get("size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= HARD_MAX_SIZE:
            raise ValueError("'size' is not a positive integer number of bytes")
        fields["size"] = size
    if isinstance(meta.get("stat"), list):
        fields["stat"] = meta["stat"]
    return fields


def parse_entry(data: bytes | str) -> dict[str, Any] | None:
    """`read_entry`, or None when the entry is damaged."""
    try:
        return read_entry(data)
    except ValueError:
        return None


def entry_bytes(entry: CacheEntry) -> bytes:
    return (json.dumps(entry.as_json(), indent=2, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class WheelIdentity:
    """Name, version and tags of a wheel file as the wheel itself says (METADATA, WHEEL),
    and the file name they make (PEP 427: escaped name, version, compressed tag set)."""

    name: str  # METADATA Name, as written
    version: str  # METADATA Version
    tags: frozenset[str]  # WHEEL Tag lines
    filename: str


def wheel_identity(path: Path) -> WheelIdentity:
    """Read from the wheel's own METADATA and WHEEL, size-capped; an SglforgeError naming
    the wheel when they are missing, too large or not valid."""
    from sglforge.wheel.members import read_member
    from sglforge.wheel.normalize import compressed_tags, parse_headers
    from sglforge.wheel.runtime import metadata_headers

    headers = metadata_headers(path)
    try:
        with zipfile.ZipFile(path) as archive:
            found = [
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/WHEEL")
            ]
            if len(found) != 1:
                raise SglforgeError(
                    f"{path.name}: expected one <name>.dist-info/WHEEL, found {len(found)}"
                )
            wheel_meta = parse_headers(read_member(archive, found[0], path.name, "WHEEL"))
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise SglforgeError(f"{path.name}: not a readable wheel ({exc})") from None
    name, version = str(headers["Name"]).strip(), str(headers["Version"]).strip()
    if not NAME.fullmatch(name):
        raise SglforgeError(f"{path.name}: METADATA Name {name!r} is not a distribution name")
    if _UNSAFE.search(version):
        raise SglforgeError(
            f"{path.name}: METADATA Version {version!r} has spaces or control characters"
        )
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise SglforgeError(
            f"{path.name}: METADATA Version {version!r} is not a PEP 440 version"
        ) from None
    tags = [str(t).strip() for t in wheel_meta.get_all("Tag") or []]
    if not tags or not all(TAG.fullmatch(t) for t in tags):
        raise SglforgeError(f"{path.name}: WHEEL has no valid Tag lines ({tags[:3]!r})")
    filename = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-{compressed_tags(tags)}.whl"
    try:
        file_name, file_version, _, _ = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise SglforgeError(
            f"{path.name}: its METADATA and WHEEL do not make a valid wheel file name ({exc})"
        ) from None
    if (
        not WHEEL_FILE.fullmatch(filename)
        or file_version != parsed
        or file_name != canonicalize_name(name)
    ):
        raise SglforgeError(
            f"{path.name}: its METADATA and WHEEL do not make a valid wheel "
            f"file name ({filename!r})"
        )
    return WheelIdentity(name, version, frozenset(tags), filename)


def _unprefixed(message: str, wheel: Path) -> str:
    """A reader's message without its leading `<wheel>: ` (the URL replaces it)."""
    for prefix in (f"{wheel}: ", f"{wheel.name}: "):
        message = message.removeprefix(prefix)
    return message


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
        atomic_write_bytes(
            entry_dir / "entry.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
        )
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

    def __init__(
        self, store: RemoteStore, limits: DownloadLimits | None = None, report=print
    ) -> None:
        self.store = store
        self.limits = limits or DownloadLimits()
        self.report = report

    @staticmethod
    def entry_prefix(key: str) -> str:
        return f"{key[:2]}/{key}"

    def has(self, key: str) -> bool:
        """Whether a committed entry (entry.json) exists; not verified (`plan --matrix`)."""
        return self.store.exists(
            f"{self.entry_prefix(key)}/entry.json", deadline=self.limits.deadline
        )

    def fetch(
        self, key: str, content_key: str, dest_dir: Path, expected: ExpectedWheel
    ) -> CacheEntry | None:
        """Download and verify the entry for `key` into `dest_dir`: None when absent,
        `RemoteRefused` when present but not trustworthy (nothing is left in `dest_dir`)."""
        prefix = self.entry_prefix(key)
        where = self.store.url_of(f"{prefix}/entry.json")
        try:
            raw = self.store.get_bytes(
                f"{prefix}/entry.json", limit=ENTRY_LIMIT, deadline=self.limits.deadline
            )
        except DownloadTooLarge as exc:
            raise RemoteRefused(str(exc).removeprefix("remote store: ")) from None
        if raw is None:
            return None
        try:
            meta = read_entry(raw)
        except ValueError as exc:
            raise RemoteRefused(
                f"{where}: damaged entry, not the JSON sglforge writes: {exc}"
            ) from None
        size = meta.get("size")
        if size is not None and size > self.limits.max_size:
            raise RemoteRefused(
                f"{where}: the wheel has {size} bytes, more than [wheel-cache] "
                f"max-size ({self.limits.max_size}); not downloaded"
            )
        wheel_url = self.store.url_of(f"{prefix}/{meta['file']}")
        # a name of ours: nothing from entry.json becomes a local path
        download = dest_dir / f"remote-{key[:16]}.whl"
        progress = DownloadProgress(
            f"    remote cache: {meta['file']}",
            self.report,
            every_bytes=self.limits.progress_bytes,
            every_seconds=self.limits.progress_seconds,
        )
        try:
            try:
                if not self.store.get(
                    f"{prefix}/{meta['file']}",
                    download,
                    sha256=meta["sha256"],
                    max_bytes=self.limits.cap(size),
                    deadline=self.limits.deadline,
                    progress=progress,
                ):
                    raise RemoteRefused(f"{where}: names {meta['file']}, which is not there")
            except (IntegrityError, DownloadTooLarge) as exc:
                raise RemoteRefused(str(exc).removeprefix("remote store: ")) from None
            identity = self._verify(download, wheel_url, meta, expected, content_key)
            final = dest_dir / identity.filename
            os.replace(download, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                download.unlink()
            raise
        return CacheEntry(final, meta["sha256"], identity.name, identity.version)

    def _verify(
        self,
        wheel: Path,
        wheel_url: str,
        meta: dict[str, Any],
        expected: ExpectedWheel,
        content_key: str,
    ) -> WheelIdentity:
        """The checks (3) and (4) of the module docstring; RemoteRefused names the URL."""
        from sglforge.wheel.provenance import read as read_provenance

        try:
            identity = wheel_identity(wheel)
            provenance = read_provenance(wheel)
        except SglforgeError as exc:
            raise RemoteRefused(
                f"{wheel_url}: the wheel is unreadable ({_unprefixed(str(exc), wheel)})"
            ) from None
        name = canonicalize_name(identity.name)

        def refuse(why: str) -> RemoteRefused:
            return RemoteRefused(f"{wheel_url}: {why}")

        stamped = provenance.content_key
        if stamped != content_key:
            raise refuse(
                f"its content_key {(stamped or 'none')[:12]} is not the key looked "
                f"up {content_key[:12]}"
            )
        if provenance.dev:  # incremental, never uploaded by sglforge: planted
            raise refuse("a dev build (`build --dev`), never a release wheel")
        if provenance.substitutes:  # local use only, never uploaded by sglforge: planted
            raise refuse("built with substituted inputs, never uploaded by sglforge")
        if name != canonicalize_name(expected.name):
            raise refuse(
                f"its METADATA Name {identity.name!r} is not {expected.name}, the "
                "wheel the recipe builds"
            )
        if expected.version is not None and identity.version != expected.version:
            raise refuse(f"its version {identity.version} is not {expected.version}, the recipe's")
        if expected.local is not None and not identity.version.endswith(f"+{expected.local}"):
            raise refuse(
                f"its version {identity.version} lacks the recipe's local label +{expected.local}"
            )
        file_name, file_version, _, file_tags = parse_wheel_filename(meta["file"])
        if (file_name, file_version, {str(t) for t in file_tags}) != (
            name,
            Version(identity.version),
            {t.lower() for t in identity.tags},
        ):
            raise refuse(
                f"entry.json names the file {meta['file']}, but the wheel's METADATA "
                f"and WHEEL make it {identity.filename}"
            )
        if canonicalize_name(meta["name"]) != name or meta["version"] != identity.version:
            raise refuse(
                f"entry.json says {meta['name']} {meta['version']}, the wheel's "
                f"METADATA {identity.name} {identity.version}"
            )
        if provenance.version != identity.version or (
            provenance.wheel is not None and provenance.wheel != expected.name
        ):
            raise refuse(
                f"its provenance says {provenance.wheel} {provenance.version}, its "
                f"METADATA {identity.name} {identity.version}"
            )
        return identity

    def upload(self, key: str, entry: CacheEntry) -> None:
        """The wheel first, then entry.json (the commit marker)."""
        prefix = self.entry_prefix(key)
        self.store.put(f"{prefix}/{entry.wheel.name}", entry.wheel)
        self.store.put(f"{prefix}/entry.json", entry_bytes(entry))
