"""Temporary files a killed writer left behind, removed by the next run that holds the lock.

`base.fs.atomic_output` writes `<dir>/.<name>.<8 random chars>.tmp` and renames it into
place; a SIGKILL (OOM killer, a CI timeout) skips its cleanup, leaving a hidden file as large
as the output (a bundle, a wheel in a served index). Only a process that holds the exclusive
lock on the directory may remove them (then no live writer can own one), and only names of
exactly that pattern are touched: nothing a user put there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from sglforge.base.errors import SglforgeError

# mkstemp's random part: 8 of [a-z0-9_] (tempfile._RandomNameSequence)
ATOMIC_TEMP = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


@contextlib.contextmanager
def directory_locked(directory: Path, what: str) -> Iterator[None]:
    """An exclusive flock on `directory` itself (no lock file left in it); a second holder is
    refused at once, naming `what`."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise SglforgeError(
            f"{directory}: cannot use it as the output directory ({exc.strerror or exc})"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SglforgeError(
                f"{directory}: another {what} is writing here; try again when it is done"
            ) from None
        yield
    finally:
        os.close(fd)


def remove_stale_temps(
    directory: Path, *, recursive: bool = False, output: re.Pattern[str] | None = None
) -> list[Path]:
    """Delete `atomic_output` temporaries in `directory` (and below, with `recursive`); with
    `output`, only those whose output name (`.<name>.` part) matches it. Call with the
    directory's lock held. Returns what was removed."""
    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    candidates = directory.rglob(".*.tmp") if recursive else directory.glob(".*.tmp")
    for path in sorted(candidates):
        if not ATOMIC_TEMP.fullmatch(path.name) or path.is_symlink() or not path.is_file():
            continue
        if output is not None and not output.fullmatch(path.name[1 : -len(".xxxxxxxx.tmp")]):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed
