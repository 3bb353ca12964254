"""Export clean trees from the source cache: a git work tree detached at the pin (submodules
placed as plain files) or an extracted archive; plus snapshots of arbitrary directories."""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import copy_tree_inside, replace_dir, staging_dir
from sglforge.base.git import git, git_out, has_commit, rev
from sglforge.inputs.pins import Lockfile, Pin
from sglforge.inputs.settings import Settings
from sglforge.sources.archive import SOURCE_ARCHIVE_LIMITS, extract_tar, extract_zip
from sglforge.sources.archivetree import (
    ImportedArchive,
    archive_layout,
    check_root,
    commit_archive_tree,
    hoist,
)
from sglforge.sources.cache import SourceCache
from sglforge.sources.exportcheck import check_exported_tree, checkout_errors, checkout_pin
from sglforge.sources.fetch import verify_git_pin
from sglforge.sources.substitute import place_substitute, substitutes_for


@dataclass(frozen=True)
class ExportedTree:
    name: str
    path: Path
    commit: str | None  # the pin's commit; an archive upstream: its import commit
    placed: tuple[str, ...]  # "<path> @ <commit>" of submodules placed inside
    imported: ImportedArchive | None = None  # an archive upstream (sources/archivetree.py)
    substitute: str | None = None  # placed from [substitutes] instead of the pin


def _checkout_files(label: str, git_dir: Path, commit: str, dest: Path) -> None:
    """Write the files of `commit` into `dest` (no .git), using a throwaway index, and check
    them against the commit's tree (sources/exportcheck.py)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sglforge-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git("read-tree", "--end-of-options", commit, git_dir=git_dir, env=env, what=label)
        proc = git(
            f"--work-tree={dest}",
            "checkout-index",
            "--all",
            "--force",
            git_dir=git_dir,
            env=env,
            check=False,
        )
    said = checkout_errors(proc)
    if proc.returncode != 0 and not said:
        said = [f"git checkout-index exited with status {proc.returncode}"]
    tree = git_out("rev-parse", rev(f"{commit}^{{tree}}"), git_dir=git_dir, what=label)
    check_exported_tree(label, git_dir, dest, commit, tree, cache_git_dir=git_dir, git_said=said)


def _shared_work_tree(git_dir: Path, dest: Path) -> None:
    """A repository at `dest` that borrows the cache's objects (what `clone --shared` makes,
    without its remote). Written by hand because clone ignores --shared for a shallow source
    (a cache filled from `fetch --bundle --depth`); the cache's shallow list comes along."""
    git("init", "--quiet", "--", str(dest))
    (dest / ".git" / "objects" / "info" / "alternates").write_text(
        str((git_dir / "objects").resolve()) + "\n"
    )
    if (git_dir / "shallow").exists():
        shutil.copyfile(git_dir / "shallow", dest / ".git" / "shallow")


def _submodule_target(sub: Pin, pin: Pin, root: Path) -> Path:
    """Where submodule `sub` goes in `root`, the tree of `pin`: through real directories only
    (git itself never checks out through a link). A link on the way — `third_party` shipped
    as a link out of the tree — would have the submodule's files written out there; `.git`
    would put them among git's own files (hooks). Both are refused, naming the pins."""
    assert sub.path is not None
    target = root
    for part in PurePosixPath(sub.path).parts:
        if part == ".git":
            raise SglforgeError(
                f"{sub.name}: cannot place submodule at {sub.path}: inside '.git' of '{pin.name}'"
            )
        target = target / part
        if target.is_symlink():
            raise SglforgeError(
                f"{sub.name}: cannot place submodule at {sub.path}: "
                f"{target.relative_to(root)} is a symlink (to "
                f"{os.readlink(target)!r}) in '{pin.name}'; sglforge writes "
                "nothing into a tree through a link"
            )
    return target


def _place_submodules(lock: Lockfile, cache: SourceCache, pin: Pin, root: Path) -> list[str]:
    placed = []
    for sub in lock.submodules(pin.name):
        target = _submodule_target(sub, pin, root)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise SglforgeError(
                f"{sub.name}: cannot place submodule at {sub.path}: not an "
                f"empty directory in '{pin.name}'"
            )
        label = f"{sub.name} ({sub.path} of {pin.name})"
        _checkout_files(label, cache.git_dir(sub.url), sub.commit, target)
        placed.append(f"{sub.path} @ {sub.commit[:12]}")
        placed += [f"{sub.path}/{p}" for p in _place_submodules(lock, cache, sub, target)]
    return placed


def _extract_tarball(path: Path, dest: Path, label: str) -> None:
    """Extract a pinned archive member by member, checked (sources/archive.py), dropping the
    single top-level directory GitHub-style archives have. A zip (a meson wrapdb patch, which
    builder/mesonwraps.py hands to meson as the file itself) is extracted as it is, for its
    tree id."""
    if zipfile.is_zipfile(path):
        extract_zip(path, dest, f"{label}: archive {path}", SOURCE_ARCHIVE_LIMITS)
        return
    extract_tar(path, dest, f"{label}: archive {path}", SOURCE_ARCHIVE_LIMITS, strip_top=True)


def export_source(
    lock: Lockfile, name: str, dest: Path, settings: Settings, *, with_submodules: bool = True
) -> ExportedTree:
    """Export a clean tree of `name` at `dest`, replacing what is there only on success.

    Git upstreams become a git work tree detached at the pin (patches are then committed on
    top), with pinned submodules placed as plain files (unless `with_submodules` is off, as
    for checking patches). Tarballs are extracted; an archive upstream (tarball or sdist
    without a parent) is then committed as one commit (sources/archivetree.py).
    """
    cache = SourceCache(settings.cache_dir)
    pin = lock.get(name)
    substitute = substitutes_for(lock, settings).get(name)
    if substitute is not None:  # the user config's local directory, not the pin
        place_substitute(substitute, dest)
        return ExportedTree(
            name=name, path=dest, commit=None, placed=(), substitute=substitute.name
        )
    imported = None
    with staging_dir(dest) as staged:
        if pin.is_git:
            git_dir = cache.git_dir(pin.url)
            if not has_commit(git_dir, pin.commit):
                raise SglforgeError(
                    f"{name}: commit {pin.commit} is not in the cache; run `nox -s fetch` first"
                )
            tree = verify_git_pin(cache, pin)
            _shared_work_tree(git_dir, staged)
            said = checkout_pin(name, staged, pin.commit)
            # before submodules are placed: each of those is checked against its own tree
            check_exported_tree(
                name,
                staged / ".git",
                staged,
                pin.commit,
                tree,
                cache_git_dir=git_dir,
                git_said=said,
            )
            placed = _place_submodules(lock, cache, pin, staged) if with_submodules else []
        else:
            tarball = cache.verified_tarball(name, pin.sha256)
            # checked extraction first (member-count and size caps), so the layout read
            # below never walks an archive the caps refuse
            _extract_tarball(tarball, staged, name)
            # an archive upstream becomes a one-commit repository so its series applies
            layout = archive_layout(tarball, name) if pin.is_archive_upstream else None
            if layout is not None:
                check_root(pin, layout)
            placed = []
            if layout is not None:
                hoist(staged, layout)
                imported = commit_archive_tree(staged, pin, layout.newest)
        # the staging directory is mkdtemp's 0700: an exported input stays readable to a build
        # whose user namespace maps another uid (builder/sandbox.py, as another user)
        staged.chmod(0o755)
        replace_dir(staged, dest)
    return ExportedTree(
        name=name,
        path=dest,
        placed=tuple(placed),
        imported=imported,
        commit=imported.commit if imported else pin.commit,
    )


def snapshot_directory(source: Path, dest: Path, prefix: str = "") -> Path:
    """A git work tree at `dest` holding a copy of `source` under `prefix`, as one commit.

    For checking a series against a tree that is not a pinned commit (e.g. the python/ tree
    of a release wheel). Symlinks are copied as links, and only those resolving inside
    `source` (base/fs.copy_tree_inside); nothing outside `source` is read.
    """
    if not source.is_dir():
        raise SglforgeError(f"{source}: not a directory")
    target = dest / prefix if prefix else dest
    if PurePosixPath(prefix).is_absolute() or ".." in PurePosixPath(prefix).parts:
        raise SglforgeError(f"--against-prefix {prefix!r} must be a relative path")
    target.parent.mkdir(parents=True, exist_ok=True)
    # the directory named on the command line may be a link; what is copied is the tree
    copy_tree_inside(
        Path(os.path.realpath(source)), target, str(source), ignore=(".git", "__pycache__", "*.pyc")
    )
    git("init", "--quiet", "--", str(dest))
    git("add", "-A", cwd=dest)
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-m",
        f"snapshot of {source}",
        cwd=dest,
        env={
            "GIT_AUTHOR_NAME": "sglforge",
            "GIT_AUTHOR_EMAIL": "sglforge@localhost",
            "GIT_COMMITTER_NAME": "sglforge",
            "GIT_COMMITTER_EMAIL": "sglforge@localhost",
        },
    )
    return dest
