"""Checked extraction of tar archives (source tarballs pinned by sha256, source bundles).

An archive is hostile data: a pin names it in a pull request, a bundle arrives from another
host. Nothing here relies on `tarfile`'s extraction filters (Python builds without them are
inside `requires-python`, e.g. Debian 12's 3.11.2) or on `tarfile.extract` at all: every
member is checked against a model of the tree being extracted, in member order, and then
written by this module to the exact path the model resolved.

Refused, naming the archive and the member:
- absolute names, `..` components, empty names, NUL bytes;
- anything but directories, regular files, symbolic and hard links (devices, fifos,
  contiguous and GNU sparse files, unknown types);
- a symlink whose target, resolved against the tree (through earlier links, chains
  included), leaves it, or is absolute; a symlink loop;
- a member whose path passes through a file, or through a link that leaves the tree;
- a hard link whose target is not an earlier regular file of the archive;
- a second member at a path already taken (a directory repeated as a directory is fine);
- more members or more bytes of file content than the caps allow (checked on the headers,
  before any byte is written).
Files are written 0644 (0755 when any execute bit is set), directories 0755: no setuid, no
owners. Links are re-resolved once the whole tree is known, since a later link can change
where an earlier one's target leads.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.linkwalk import LinkEscape, walk

GiB = 1 << 30
# What a broken or hostile archive raises while its headers or data are read.
ARCHIVE_READ_ERRORS = (
    tarfile.TarError,
    EOFError,
    zlib.error,
    OSError,
    ValueError,
    UnicodeError,
    RecursionError,
)


@dataclass(frozen=True)
class ArchiveLimits:
    max_members: int
    max_bytes: int  # total size of regular-file content

    def describe(self) -> str:
        return f"{self.max_members} members, {self.max_bytes / GiB:g} GiB"


# A source archive (a GitHub tarball of CUTLASS is ~9k members, a few hundred MB).
SOURCE_ARCHIVE_LIMITS = ArchiveLimits(max_members=100_000, max_bytes=8 * GiB)


@dataclass(frozen=True)
class PlannedMember:
    """One member to write: `path` is where it goes, relative to the root, with every link
    on the way resolved (only real directories above it)."""

    member: tarfile.TarInfo
    kind: str  # "dir", "file", "symlink", "hardlink"
    path: tuple[str, ...]
    target: str | tuple[str, ...] | None = None  # symlink text / hard link source path


class ArchiveRefused(SglforgeError):
    pass


def member_parts(name: str) -> tuple[str, ...] | None:
    """The components of a member name ('./' and trailing '/' dropped), or None if the name
    is absolute, empty, holds '..' or a NUL byte."""
    if not name or "\0" in name or name.startswith("/"):
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or ".." in parts:
        return None
    return parts


def _kind(member: tarfile.TarInfo) -> str | None:
    if member.issparse():
        return None
    if member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return None


_TYPE_NAMES = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a fifo",
    tarfile.CONTTYPE: "a contiguous file",
}


class TreeModel:
    """The tree as extracted so far: path -> "dir" | "file" | ("link", target text)."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[str, ...], object] = {(): "dir"}

    def _link(self, path: tuple[str, ...]) -> str | None:
        node = self.nodes.get(path)
        return node[1] if isinstance(node, tuple) else None

    def resolve(self, parts: Iterable[str], *, follow_last: bool) -> tuple[str, ...]:
        """Where `parts` (relative to the root) leads, following links as the kernel would;
        components that do not exist yet are taken as names. Raises LinkEscape when the path
        leaves the root (with the reason)."""
        return walk(parts, self._link, follow_last=follow_last)


def plan_members(
    members: Iterable[tarfile.TarInfo],
    label: str,
    limits: ArchiveLimits,
    *,
    strip_top: bool = False,
) -> list[PlannedMember]:
    """Check every member (see the module docstring) and say where each one goes.

    `members` may be a lazy iterator over the archive: the caps are checked as headers
    arrive, so an archive over them is refused before the rest of it is read.
    `strip_top` drops the single top-level directory GitHub-style archives have (when there
    is exactly one and it is a directory member).
    """
    named: list[tuple[tarfile.TarInfo, tuple[str, ...], str]] = []
    total = 0
    for count, member in enumerate(members, 1):
        if count > limits.max_members:
            raise ArchiveRefused(
                f"{label}: more than {limits.max_members} members; refusing "
                f"the archive (cap: {limits.describe()})"
            )
        parts = member_parts(member.name)
        if parts is None:
            raise ArchiveRefused(
                f"{label}: member {member.name!r}: absolute, empty or '..' "
                "name (it would escape the tree)"
            )
        kind = _kind(member)
        if kind is None:
            what = _TYPE_NAMES.get(
                member.type,
                "a sparse file" if member.issparse() else f"of unsupported type {member.type!r}",
            )
            raise ArchiveRefused(
                f"{label}: member {member.name!r} is {what}; only "
                "directories, files and links are extracted"
            )
        if kind == "file":
            total += member.size
            if total > limits.max_bytes:
                raise ArchiveRefused(
                    f"{label}: more than {limits.max_bytes} bytes of file "
                    f"content (at member {member.name!r}); refusing the "
                    f"archive (cap: {limits.describe()})"
                )
        named.append((member, parts, kind))
    strip = 0
    if strip_top:
        tops = {parts[0] for _, parts, _ in named}
        if len(tops) == 1 and any(k == "dir" and len(p) == 1 for _, p, k in named):
            strip = 1
    tree = TreeModel()
    planned: list[PlannedMember] = []
    for member, parts, kind in named:
        parts = parts[strip:]
        if not parts:
            continue
        planned.append(_plan_one(tree, member, parts, kind, label, strip))
    for path, node in tree.nodes.items():  # the whole tree is known now
        if isinstance(node, tuple):
            try:
                tree.resolve(path, follow_last=True)
            except LinkEscape as exc:
                raise ArchiveRefused(
                    f"{label}: symlink {'/'.join(path)!r} -> {node[1]!r} "
                    f"{exc} once the whole archive is extracted"
                ) from None
    return planned


def _plan_one(
    tree: TreeModel,
    member: tarfile.TarInfo,
    parts: tuple[str, ...],
    kind: str,
    label: str,
    strip: int,
) -> PlannedMember:
    def refuse(why: str) -> ArchiveRefused:
        return ArchiveRefused(f"{label}: member {member.name!r} {why}")

    try:
        parent = tree.resolve(parts[:-1], follow_last=True)
    except LinkEscape as exc:
        raise refuse(f"is written through a link that {exc}") from None
    for depth in range(1, len(parent) + 1):
        node = tree.nodes.get(parent[:depth])
        if node is None:
            tree.nodes[parent[:depth]] = "dir"  # made on the way, like tar does
        elif node != "dir":
            raise refuse(f"is written below {'/'.join(parent[:depth])!r}, which is not a directory")
    path = parent + (parts[-1],)
    existing = tree.nodes.get(path)
    if existing is not None:
        if kind == "dir" and existing == "dir":
            return PlannedMember(member, kind, path)
        raise refuse(
            f"names a path already in the archive ({'/'.join(path)!r}); refusing duplicate members"
        )
    target: str | tuple[str, ...] | None = None
    if kind == "symlink":
        text = member.linkname
        if not text or "\0" in text or text.startswith("/"):
            raise refuse(f"is a symlink to {text!r}: absolute or empty link targets are refused")
        try:
            tree.resolve(parent + tuple(text.split("/")), follow_last=True)
        except LinkEscape as exc:
            raise refuse(f"is a symlink to {text!r}, which {exc}") from None
        tree.nodes[path] = ("link", text)
        target = text
    elif kind == "hardlink":
        # A hard link names another member by its full name (top directory included).
        source = member_parts(member.linkname)
        if source is not None and strip:
            top = member_parts(member.name)[:strip]
            source = source[strip:] if source[:strip] == top else None
        resolved = None
        if source:
            try:
                resolved = tree.resolve(source, follow_last=False)
            except LinkEscape:
                resolved = None
        if resolved is None or tree.nodes.get(resolved) != "file":
            raise refuse(
                f"is a hard link to {member.linkname!r}, which is not an earlier "
                "regular file of the archive"
            )
        tree.nodes[path] = "file"
        target = resolved
    else:
        tree.nodes[path] = kind
    return PlannedMember(member, kind, path, target)


def _mode(member: tarfile.TarInfo) -> int:
    return 0o755 if member.mode & 0o111 else 0o644


def write_planned(
    archive: tarfile.TarFile, planned: list[PlannedMember], dest: Path, label: str
) -> None:
    """Write the checked members under `dest` (an empty directory sglforge made)."""
    for item in planned:
        where = dest.joinpath(*item.path)
        try:
            if item.kind == "dir":
                where.mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            where.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            if item.kind == "symlink":
                os.symlink(item.target, where)
            elif item.kind == "hardlink":
                os.link(dest.joinpath(*item.target), where, follow_symlinks=False)
            else:
                _write_file(archive, item.member, where, label)
        except OSError as exc:
            raise SglforgeError(
                f"{label}: cannot extract member {item.member.name!r}: {exc.strerror or exc}"
            ) from None


def _write_file(archive: tarfile.TarFile, member: tarfile.TarInfo, where: Path, label: str) -> None:
    source = archive.extractfile(member)
    if source is None:
        raise SglforgeError(f"{label}: member {member.name!r} has no data")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(where, flags, _mode(member))
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            out.write(chunk)
    os.chmod(where, _mode(member))  # umask would have narrowed it
    try:
        os.utime(where, (member.mtime, member.mtime))
    except (OverflowError, ValueError, TypeError):
        pass  # a nonsense time in a header: the file keeps the time of extraction


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    yield from archive


def extract_tar(
    path: Path,
    dest: Path,
    label: str,
    limits: ArchiveLimits = SOURCE_ARCHIVE_LIMITS,
    *,
    strip_top: bool = True,
) -> None:
    """Check every member of the tar archive at `path` (any compression tarfile reads), then
    extract it into the empty directory `dest`. `label` names the archive in errors."""
    try:
        with tarfile.open(path) as archive:
            planned = plan_members(_members(archive), label, limits, strip_top=strip_top)
            write_planned(archive, planned, dest, label)
    except SglforgeError:
        raise
    except ARCHIVE_READ_ERRORS as exc:
        raise SglforgeError(
            f"{label}: not a readable tar archive ({type(exc).__name__}: {exc})"
        ) from None


# ---------------------------------------------------------------------------------------------
# zip (wheels unpacked for a dependent build: they may come from a remote cache)

WHEEL_LIMITS = ArchiveLimits(max_members=100_000, max_bytes=16 * GiB)


def extract_zip(path: Path, dest: Path, label: str, limits: ArchiveLimits = WHEEL_LIMITS) -> None:
    """Check every member of the zip at `path` (names as for tar; no symlink entries, no
    duplicates, caps on the central directory's sizes), then write the files under `dest`.
    `zipfile` never reads more than a member's declared size, so the caps hold."""
    import stat
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > limits.max_members:
                raise ArchiveRefused(
                    f"{label}: more than {limits.max_members} members; "
                    f"refusing the archive (cap: {limits.describe()})"
                )
            total = sum(i.file_size for i in infos)
            if total > limits.max_bytes:
                raise ArchiveRefused(
                    f"{label}: {total} bytes of file content, more than "
                    f"{limits.max_bytes}; refusing the archive"
                )
            tree = TreeModel()
            planned = []
            for info in infos:
                parts = member_parts(info.filename)
                if parts is None or "\\" in info.filename:
                    raise ArchiveRefused(
                        f"{label}: member {info.filename!r}: absolute, empty, "
                        "'..' or backslash name (it would escape the tree)"
                    )
                mode = info.external_attr >> 16
                kind = "dir" if info.is_dir() else "file"
                if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise ArchiveRefused(
                        f"{label}: member {info.filename!r} is not a regular "
                        "file or directory (a link or a device)"
                    )
                fake = tarfile.TarInfo(info.filename)
                fake.type = tarfile.DIRTYPE if kind == "dir" else tarfile.REGTYPE
                planned.append((info, _plan_one(tree, fake, parts, kind, label, 0)))
            for info, item in planned:
                where = dest.joinpath(*item.path)
                if item.kind == "dir":
                    where.mkdir(mode=0o755, parents=True, exist_ok=True)
                    continue
                where.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                if where.is_file() and not where.is_symlink():
                    where.unlink()  # an earlier wheel's file in the same directory: replaced
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                executable = (info.external_attr >> 16) & 0o111
                with (
                    archive.open(info) as source,
                    os.fdopen(os.open(where, flags, 0o755 if executable else 0o644), "wb") as out,
                ):
                    for chunk in iter(lambda: source.read(1 << 20), b""):
                        out.write(chunk)
    except SglforgeError:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,
        *ARCHIVE_READ_ERRORS,
    ) as exc:
        raise SglforgeError(
            f"{label}: not a readable zip archive, or a member could not be "
            f"written ({type(exc).__name__}: {exc})"
        ) from None
