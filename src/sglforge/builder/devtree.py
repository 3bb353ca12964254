"""`sglforge build --dev RECIPE`: a persistent work tree and build directory per recipe.

A release build exports its upstream afresh and compiles in a wiped build directory, so every
build pays CMake configure, compiler detection and every translation unit. The dev loop keeps,
for one recipe, under `<build-root>/dev/<recipe>/` (base/buildroot.py):

    tree/          the upstream work tree with the series applied
    build/         the build directory (the recipe's `{build_dir}`: CMake's, ninja's)
    deps/<name>/   the recipe's FetchContent trees
    state.json     what they were made for (recipe, toolchain, interpreter) and their inodes

Between builds they are *parked* there; a dev build moves (renames) them to exactly the paths
a release build uses (`<root>/src/<upstream>`, `<root>/work/<recipe>/build`,
`<root>/deps/<name>`), so the compiler sees the same absolute paths and the wheel's content
equals a release build's, and moves them back afterwards (also on failure or interrupt).

Updating the tree stays strict: the upstream is exported and its series applied into
`scratch/` exactly as a release build does (apply_series: no fuzz, one commit per entry), then
`sync_tree` makes the live tree equal to it, writing only files whose bytes differ (and
removing what the series no longer creates), so unchanged files keep their mtimes and ninja
rebuilds only what depends on a changed file.

Recovery: `state.json` is removed before a sync and written only after it completed; without
it (an interrupted sync, a different recipe or toolchain) the next dev build starts from an
empty tree and build directory. A dev build killed before it could park leaves the tree at
the live paths; the next one adopts it when the inode recorded in `state.json` matches, else
starts afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_text, remove_tree

STATE_FORMAT = 1


# ---------------------------------------------------------------------------------------------
# sync: make `dest` equal to `src`, touching only what differs


@dataclass
class SyncStats:
    written: list[str] = field(default_factory=list)  # created or rewritten (new mtime)
    removed: list[str] = field(default_factory=list)
    mode_changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    tracked: list[str] = field(default_factory=list)  # every path of `src` (the next previous)

    def describe(self) -> str:
        return (
            f"{len(self.written)} file(s) written, {len(self.removed)} removed, "
            f"{self.unchanged} unchanged"
        )


def _same_bytes(a: str, b: str, size: int) -> bool:
    if size == 0:
        return True
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            chunk = fa.read(1 << 20)
            if chunk != fb.read(1 << 20):
                return False
            if not chunk:
                return True


def _copy_file(src: str, dest: str, mode: int) -> None:
    """Write `dest` atomically (temporary file beside it, then rename): an interrupted sync
    never leaves a half-written file."""
    directory = os.path.dirname(dest)
    fd, tmp = tempfile.mkstemp(prefix=".sglforge-sync-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            while chunk := inp.read(1 << 20):
                out.write(chunk)
        os.chmod(tmp, stat.S_IMODE(mode))
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _remove(path: str) -> None:
    remove_tree(Path(path))


def sync_tree(
    src: Path,
    dest: Path,
    stats: SyncStats | None = None,
    rel: str = "",
    previous: set[str] | None = None,
) -> SyncStats:
    """Make `dest` a copy of `src` (files, directories, symlinks as links, modes), writing only
    files whose bytes or type differ. Unchanged files keep their mtime; a mode-only change is a
    chmod (ninja looks at mtimes, not ctimes).

    Entries `src` lacks are removed when `previous` is None, else only those an earlier sync
    wrote (`previous`: its `tracked` paths): what the build itself created in the tree (an
    in-tree `build/` of setuptools or torch cpp_extension, egg-info) stays, as in a git
    checkout's untracked files.

    Nothing in `dest` is followed: an entry the build replaced by a link (to a directory out
    of the tree, say) is removed and written afresh, and `dest` itself must not be a link."""
    stats = stats if stats is not None else SyncStats()
    if dest.is_symlink():
        raise SglforgeError(
            f"{dest}: is a symlink (to {os.readlink(dest)!r}); a dev tree is "
            "synced only into a directory of its own, never through a link"
        )
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {}
    with os.scandir(src) as entries:
        for entry in entries:
            wanted[entry.name] = entry
    with os.scandir(dest) as entries:
        existing = {entry.name: entry for entry in entries}
    for name in sorted(set(existing) - set(wanted)):
        if previous is None or f"{rel}{name}" in previous:
            _remove(existing[name].path)
            stats.removed.append(f"{rel}{name}")
    for name in sorted(wanted):
        entry, path = wanted[name], os.path.join(dest, name)
        have = existing.get(name)
        label = f"{rel}{name}"
        stats.tracked.append(label)
        if entry.is_symlink():
            target = os.readlink(entry.path)
            if have is not None and have.is_symlink() and os.readlink(have.path) == target:
                stats.unchanged += 1
                continue
            if have is not None:
                _remove(have.path)
            os.symlink(target, path)
            stats.written.append(label)
        elif entry.is_dir(follow_symlinks=False):
            if have is not None and not have.is_dir(follow_symlinks=False):
                _remove(have.path)
                have = None
            sync_tree(Path(entry.path), Path(path), stats, f"{label}/", previous)
        elif entry.is_file(follow_symlinks=False):
            info = entry.stat(follow_symlinks=False)
            if have is not None and have.is_file(follow_symlinks=False):
                mine = have.stat(follow_symlinks=False)
                if mine.st_size == info.st_size and _same_bytes(
                    entry.path, have.path, info.st_size
                ):
                    if stat.S_IMODE(mine.st_mode) != stat.S_IMODE(info.st_mode):
                        os.chmod(have.path, stat.S_IMODE(info.st_mode))
                        stats.mode_changed.append(label)
                    stats.unchanged += 1
                    continue
            elif have is not None:
                _remove(have.path)
            _copy_file(entry.path, path, info.st_mode)
            stats.written.append(label)
        # sockets, fifos, devices: an export never has them; skipped
    return stats


# ---------------------------------------------------------------------------------------------
# the parked state of one recipe


def state_config(
    recipe_sha256: str, toolchain_digest: str, build_root: Path, build_format: int
) -> str:
    """What a dev tree and build directory are valid for: the recipe's bytes (CMake defines,
    env), the toolchain (a CMake cache must not outlive its compiler), the interpreter's
    location and the build root. A change starts the dev state afresh."""
    blob = json.dumps(
        {
            "recipe": recipe_sha256,
            "toolchain": toolchain_digest,
            "build_root": str(build_root),
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
            "format": build_format,
            "state_format": STATE_FORMAT,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class _Slot:
    key: str  # "tree", "build", "deps/<name>"
    parked: Path
    live: Path


class DevWorkspace:
    """The dev state of one recipe: parked under <root>/dev/<recipe>, live while it builds."""

    def __init__(
        self, root: BuildRoot, recipe: str, upstream: str, deps: list[str], config: str
    ) -> None:
        self.root, self.recipe, self.config = root, recipe, config
        self.home = root.dev(recipe)
        self.state_path = self.home / "state.json"
        self.tracked_path = self.home / "tracked.json"  # what the last sync wrote, per slot
        self.scratch = self.home / "scratch"
        self.slots = [
            _Slot("tree", self.home / "tree", root.src(upstream)),
            _Slot("build", self.home / "build", root.work(recipe) / "build"),
        ]
        self.slots += [_Slot(f"deps/{d}", self.home / "deps" / d, root.dep(d)) for d in deps]
        self.fresh = False  # set by checkout: True when the state was started afresh

    def slot(self, key: str) -> _Slot:
        return next(s for s in self.slots if s.key == key)

    def _read_state(self) -> dict | None:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None
        if (
            not isinstance(data, dict)
            or data.get("config") != self.config
            or not isinstance(data.get("inodes"), dict)
        ):
            return None
        return data

    def checkout(self) -> None:
        """Move the parked state to the live paths (adopting a live one left by a killed dev
        build), or start afresh; then remove state.json until `mark_synced`."""
        self.home.mkdir(parents=True, exist_ok=True)
        state = self._read_state()
        where: dict[str, Path] = {}
        if state is not None:
            for slot in self.slots:
                inode = state["inodes"].get(slot.key)
                # a link is never adopted (the build may plant one): that slot starts afresh
                if _real_dir(slot.parked):
                    where[slot.key] = slot.parked
                elif _real_dir(slot.live) and inode == slot.live.stat().st_ino:
                    where[slot.key] = slot.live  # a dev build was killed before parking
        self.fresh = state is None or len(where) != len(self.slots)
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()
        for slot in self.slots:
            if self.fresh or where.get(slot.key) != slot.live:
                remove_tree(slot.live)  # a release build's leftovers, or a stale dev state
            if self.fresh:
                remove_tree(slot.parked)
                slot.live.mkdir(parents=True, exist_ok=True)
            elif where[slot.key] == slot.parked:
                slot.live.parent.mkdir(parents=True, exist_ok=True)
                os.rename(slot.parked, slot.live)

    def previous(self, key: str) -> set[str] | None:
        """Paths the last complete sync wrote into slot `key` (None: unknown, or fresh)."""
        if self.fresh:
            return None
        try:
            data = json.loads(self.tracked_path.read_text())
            paths = data.get(key) if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None
        return set(paths) if isinstance(paths, list) else None

    def mark_synced(self, tracked: dict[str, list[str]] | None = None) -> None:
        """The live tree now equals a strict export + series: record it (and the inodes that
        let a later dev build adopt the live paths)."""
        if tracked is not None:
            atomic_write_text(self.tracked_path, json.dumps(tracked) + "\n")
        inodes = {slot.key: slot.live.stat().st_ino for slot in self.slots}
        atomic_write_text(
            self.state_path,
            json.dumps(
                {
                    "format": STATE_FORMAT,
                    "recipe": self.recipe,
                    "config": self.config,
                    "inodes": inodes,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n",
        )

    def park(self) -> None:
        """Move the live state back under <root>/dev/<recipe> (renames keep mtimes, inodes)."""
        for slot in self.slots:
            if slot.live.is_dir() and not slot.parked.exists():
                slot.parked.parent.mkdir(parents=True, exist_ok=True)
                os.rename(slot.live, slot.parked)
        remove_tree(self.scratch)

    @contextlib.contextmanager
    def live(self) -> Iterator[DevWorkspace]:
        """checkout … park, parking also when the build fails or is interrupted."""
        self.checkout()
        try:
            yield self
        finally:
            self.park()


def _real_dir(path: Path) -> bool:
    """A directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def check_dev_names(names: tuple[str, ...]) -> str:
    if len(names) != 1:
        raise SglforgeError(
            "build --dev takes exactly one recipe (its dependencies are "
            f"built or taken from the wheel cache as usual); got "
            f"{len(names)}: {' '.join(names) or '(none)'}"
        )
    return names[0]
