"""Filesystem helpers that never leave half-written outputs behind."""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from sglforge.base.errors import SglforgeError
from sglforge.base.linkwalk import LinkEscape, walk_on_disk

# Caps for reading input files, by kind: far above any real file of that kind (the largest
# committed TOML input is ~18 KB, the largest patch ~32 KB, runtime.lock ~400 KB), far below
# what would hurt (a hostile pull request can add a gigabyte in one file).
TOML_INPUT_CAP = 1 << 20  # lockfiles, recipes, profiles, waivers, config
SERIES_CAP = 1 << 20  # patches/<upstream>/series
PATCH_CAP = 16 << 20  # one local patch file
TEXT_INPUT_CAP = 16 << 20  # other text inputs: requirement locks, manifests, JSON state


def read_capped(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the input file `path`, refusing more than `limit` bytes.

    `what` says what the file is ("patch", "TOML input") for the message. A missing file, a
    directory, something that is not a regular file (a FIFO would block, a device never ends),
    an unreadable file or one over the cap is an `SglforgeError` naming the file and the cap;
    at most `limit + 1` bytes are ever read, whatever the file's size claims.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SglforgeError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise SglforgeError(f"{path}: is a directory, expected a file") from None
    except OSError as exc:
        raise SglforgeError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SglforgeError(f"{path}: is a directory, expected a file")
        if not stat.S_ISREG(mode):
            raise SglforgeError(f"{path}: not a regular file (a {what} must be one)")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SglforgeError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SglforgeError(
            f"{path}: larger than the {_size(limit)} a {what} may be — refused "
            "(is it the file you meant?)"
        )
    return data


def _size(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` only when the block ends without an exception
    (temporary file in the same directory, fsync, mode 644, rename); else it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory + rename."""
    with atomic_output(path) as handle:
        handle.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_if_changed(path: Path, text: str) -> bool:
    """atomic_write_text unless `path` already holds exactly `text` (a no-op build then writes
    nothing, and fsyncs nothing); True when it wrote."""
    data = text.encode("utf-8")
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass
    atomic_write_bytes(path, data)
    return True


def replace_dir(staged: Path, final: Path) -> None:
    """Move the fully prepared directory `staged` to `final`, replacing what was there."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if final.exists() or final.is_symlink():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
    os.rename(staged, final)
    if old is not None:
        remove_tree(old)


def remove_tree(path: Path) -> None:
    """Remove a tree, including read-only files (git objects are 0444)."""

    def onerror(func, name, _exc):
        os.chmod(name, 0o700)
        func(name)

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=onerror)


@contextlib.contextmanager
def staging_dir(final: Path) -> Iterator[Path]:
    """A fresh sibling directory of `final`; removed on failure, caller promotes on success."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{final.name}.new-", dir=final.parent))
    try:
        yield staged
    except BaseException:
        remove_tree(staged)
        raise


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, *, wait: bool = False) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path`. If someone else holds it, fail at once
    naming the holder, or (`wait`) block until it is free."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if not wait:
                raise SglforgeError(f"{what} is in use by {holder} (lock {path})") from None
            # say why nothing happens instead of sitting silent (two fetches meeting)
            print(
                f"waiting for the {what} lock held by {holder} ({path})",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------
# copies from and into upstream trees: no link is followed out of the tree (issue 31)


def path_inside(root: Path, rel: str, what: str, *, follow_last: bool = True) -> Path:
    """Where `rel` (a relative path) leads under the real directory `root`, its links
    followed as the kernel would: a path under `root` whose components are no links (but the
    last, without `follow_last`). A way out of `root` (an absolute link, one climbing above
    it, a loop) is an SglforgeError naming `what` (the pin), `rel` and the link, before
    anything is read or written there."""
    parts = rel.split("/")
    if rel.startswith("/"):
        raise SglforgeError(f"{what}: {rel} is an absolute path, not one inside the tree")
    try:
        inside = walk_on_disk(root, parts, follow_last=follow_last)
    except LinkEscape as exc:
        raise SglforgeError(
            f"{what}: {rel} {exc}: it leads outside the tree {root}, and "
            "sglforge follows no link out of an upstream tree"
        ) from None
    return root.joinpath(*inside)


def copy_tree_inside(src: Path, dest: Path, what: str, *, ignore: tuple[str, ...] = ()) -> None:
    """Copy the directory `src` to `dest` (which must not exist): directories, regular files
    (mode without setuid/setgid/sticky, mtime) and links — copied as links, never followed,
    and only when they resolve inside `src` (resolved against `src` on disk, chains
    included). `src` itself must be a directory, not a link. Anything else — a link whose
    target is absolute or leads out of `src`, a device, a fifo, a socket — is an
    SglforgeError naming `what` (the pin) and the path inside `src`. Names matching one of
    the `ignore` patterns (fnmatch, any depth) are left out."""
    try:
        top = os.lstat(src)
    except OSError as exc:
        raise SglforgeError(f"{what}: cannot read {src} ({exc.strerror or exc})") from None
    if stat.S_ISLNK(top.st_mode):
        raise SglforgeError(
            f"{what}: {src} is a symlink (to {os.readlink(src)!r}); sglforge "
            "copies a tree only from the directory itself, never through a "
            "link"
        )
    if not stat.S_ISDIR(top.st_mode):
        raise SglforgeError(f"{what}: {src} is not a directory")

    def refuse(rel: str, why: str) -> SglforgeError:
        return SglforgeError(
            f"{what}: {rel} {why}; sglforge copies no link out of a tree (copying {src})"
        )

    def copy_file(source: str, target: str, rel: str) -> os.stat_result:
        try:
            fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise refuse(rel, f"cannot be read ({exc.strerror or exc})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # swapped since it was listed
                raise refuse(rel, "is no longer a regular file")
            out = os.open(
                target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            try:
                while chunk := os.read(fd, 1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
                os.fchmod(out, stat.S_IMODE(info.st_mode) & 0o777)
                os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
            finally:
                os.close(out)
        finally:
            os.close(fd)
        return info

    def copy_dir(parts: tuple[str, ...], target: str, mode: int) -> None:
        source = os.path.join(src, *parts)
        os.mkdir(target, 0o700)
        with os.scandir(source) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            if any(fnmatch.fnmatch(entry.name, pattern) for pattern in ignore):
                continue
            here = (*parts, entry.name)
            rel = "/".join(here)
            out = os.path.join(target, entry.name)
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                text = os.readlink(entry.path)
                if not text or text.startswith("/"):
                    raise refuse(rel, f"is a symlink to {text!r} (absolute or empty)")
                try:
                    walk_on_disk(src, [*parts, *text.split("/")])
                except LinkEscape as exc:
                    raise refuse(rel, f"is a symlink to {text!r}, which {exc}") from None
                os.symlink(text, out)
            elif stat.S_ISDIR(info.st_mode):
                copy_dir(here, out, info.st_mode)
            elif stat.S_ISREG(info.st_mode):
                copy_file(entry.path, out, rel)
            else:
                raise SglforgeError(
                    f"{what}: {rel} is not a regular file, directory or link (copying {src})"
                )
        os.chmod(target, stat.S_IMODE(mode) & 0o777)

    copy_dir((), os.fspath(dest), top.st_mode)


def check_writable(path: Path, what: str) -> None:
    """`path` (a directory, made if missing) can be written: a read-only mount, a file in
    the way or a missing permission is an SglforgeError naming `what` now, not an OSError
    mid-build."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".sglforge-write-probe-"):
            pass
    except OSError as exc:
        raise SglforgeError(
            f"{what} {path} is not writable: {exc.strerror or exc}",
            hint="choose another directory (--build-root DIR, or build-root in the config), "
            "or make this one writable",
        ) from None
