"""Tree ids of what a build compiles: the upstream after its series, and each input placed in
or injected into it (submodules, FetchContent archives).

A tree id is git's own content address of a directory (`git write-tree`), so a peer checks a
recorded one with nothing but git: export the pin, apply the series, `git write-tree`. The
build writes them into provenance, `patches check` and `plan` print them, `verify` compares
them (builder/verify.py). A submodule's tree is its pinned commit's; a FetchContent archive's
is that of the directory the build injects (the extracted archive), computed once per sha256.

Records under `<cache>/trees/` let `plan` (which runs nothing) print trees already computed:
`patched-<key>` (the upstream after a series; key = sha256 of pin identity + series digest)
and `archive-<sha256>`. A record is a convenience for reading, never trusted for building.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.fs import atomic_write_text
from sglforge.base.git import git, git_out, has_commit, rev
from sglforge.inputs.pins import Lockfile, Pin
from sglforge.sources.cache import SourceCache

TREE_ID = re.compile(r"[0-9a-f]{40}")
NOT_COMPUTED = "not computed: run patches check"
NEUTRAL = "* -text -eol -filter -ident -working-tree-encoding\n"


@dataclass(frozen=True)
class SourceTrees:
    """The tree ids of one upstream's build input."""

    upstream: str  # name
    tree: str  # the upstream's tree after its series
    inputs: dict[str, str] = field(default_factory=dict)  # child pin name -> tree id


def worktree_tree(path: Path) -> str:
    """`git write-tree` of a work tree whose series is committed (its index is HEAD's)."""
    return git_out("write-tree", cwd=path, what=f"git write-tree in {path}")


def directory_tree(path: Path) -> str:
    """The tree id git gives the files of a plain directory, exactly as they are (ignore
    rules and attributes off), with a throwaway repository and index."""
    with tempfile.TemporaryDirectory(prefix="sglforge-tree-") as tmp:
        git_dir = Path(tmp) / "repo.git"
        git("init", "--quiet", "--bare", "--", str(git_dir))
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "attributes").write_text(NEUTRAL)
        config = [
            "-c",
            "core.autocrlf=false",
            "-c",
            "core.excludesFile=/dev/null",
            "-c",
            "core.attributesFile=/dev/null",
            "-c",
            "core.fileMode=true",
            "-c",
            "core.bare=false",
        ]
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(
            *config,
            f"--work-tree={path}",
            "add",
            "--all",
            "--force",
            "--",
            ".",
            git_dir=git_dir,
            env=env,
            what=f"tree id of {path}",
        )
        return git_out("write-tree", git_dir=git_dir, env=env)


def pin_tree(cache: SourceCache, pin: Pin) -> str | None:
    """A git pin's tree from the cache (None: the commit is not there)."""
    git_dir = cache.git_dir(pin.url)
    if pin.commit is None or not has_commit(git_dir, pin.commit):
        return None
    return git_out("rev-parse", rev(f"{pin.commit}^{{tree}}"), git_dir=git_dir)


class TreeRecords:
    def __init__(self, cache: SourceCache) -> None:
        self.root = cache.root / "trees"

    @staticmethod
    def patched_key(pin: Pin, series_digest: str) -> str:
        blob = json.dumps(
            {"name": pin.name, "source": pin.identity, "series": series_digest}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def _read(self, name: str) -> str | None:
        try:
            text = (self.root / name).read_text().strip()
        except OSError:
            return None
        return text if TREE_ID.fullmatch(text) else None

    def _write(self, name: str, tree: str) -> None:
        if self._read(name) != tree:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.root / name, tree + "\n")

    def patched(self, pin: Pin, series_digest: str) -> str | None:
        return self._read(f"patched-{self.patched_key(pin, series_digest)}")

    def record_patched(self, pin: Pin, series_digest: str, tree: str) -> None:
        self._write(f"patched-{self.patched_key(pin, series_digest)}", tree)

    def archive(self, sha256: str) -> str | None:
        return self._read(f"archive-{sha256}")

    def record_archive(self, sha256: str, tree: str) -> None:
        self._write(f"archive-{sha256}", tree)


def input_tree(
    cache: SourceCache, pin: Pin, exported: Path | None = None, substituted: bool = False
) -> str | None:
    """The tree of one child input: a submodule's from the cache; an archive's from its
    record, else computed from `exported` (its extracted directory) and recorded. A
    substituted input's is computed from `exported` and never recorded under the pin."""
    if substituted:
        return directory_tree(exported) if exported is not None else None
    if pin.commit is not None:
        return pin_tree(cache, pin)
    assert pin.sha256 is not None
    records = TreeRecords(cache)
    known = records.archive(pin.sha256)
    if known is None and exported is not None:
        known = directory_tree(exported)
        records.record_archive(pin.sha256, known)
    return known


def input_trees(
    lock: Lockfile,
    cache: SourceCache,
    upstream: str,
    exported: dict[str, Path] | None = None,
    substituted: Collection[str] = (),
) -> dict[str, str | None]:
    """Child pin name -> tree id (None: not computable from what is here)."""
    return {
        pin.name: input_tree(
            cache, pin, (exported or {}).get(pin.name), substituted=pin.name in substituted
        )
        for pin in lock.closure(upstream)[1:]
    }


def planned_tree(cache: SourceCache, pin: Pin, series_digest: str, has_series: bool) -> str | None:
    """The upstream's tree after its series, where known without running anything: a record
    (from `patches check` or a build), or the pin's own tree when there is no series."""
    known = TreeRecords(cache).patched(pin, series_digest)
    if known is None and not has_series:
        # a git pin's own tree, or an archive's pinned import tree (checked on every export)
        known = pin_tree(cache, pin) if pin.commit is not None else pin.tree
    return known
