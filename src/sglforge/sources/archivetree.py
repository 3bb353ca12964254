"""An archive upstream (release tarball, registry sdist) as a git work tree of one commit.

A patch series applies as commits on top of a pin, so an archive's extracted files become
the initial commit of a fresh repository: every file exactly as the archive ships it (in-tree
`.gitignore` and `.gitattributes` switched off, no line-ending conversion), with a fixed
author and a fixed date (the pin's `date`, else the archive's newest member time), so the
same pin always gives the same commit and tree id; that date is the build's
SOURCE_DATE_EPOCH. A pinned `tree` is checked ("expected tree … got …"). Git cannot track a path named `.git`: such
members (the `gitdir:` pointer files an sdist made from a checkout with submodules carries)
are dropped and listed. Embedded trees (`embeds`) must be present; a pinned `tree` of one
is checked ("expected tree … got …").
"""

from __future__ import annotations

import datetime as dt
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import remove_tree
from sglforge.base.git import git, git_out
from sglforge.inputs.pins import Pin

AUTHOR = {
    "GIT_AUTHOR_NAME": "sglforge archive import",
    "GIT_AUTHOR_EMAIL": "sglforge@localhost",
    "GIT_COMMITTER_NAME": "sglforge archive import",
    "GIT_COMMITTER_EMAIL": "sglforge@localhost",
}
# Bytes in, bytes out: nothing in the archive may change how its files are stored.
IMPORT_CONFIG = [
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "core.fileMode=true",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "init.defaultBranch=sglforge-archive",
    "-c",
    "commit.gpgSign=false",
]
NEUTRAL_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding -export-subst\n"


@dataclass(frozen=True)
class ArchiveLayout:
    top: str | None  # the single top directory every member sits in, if there is one
    newest: int  # the newest member mtime (SOURCE_DATE_EPOCH of the import)
    sample: str | None = None  # one regular file's member path (tells whether extraction
    #                            kept the top directory)


def archive_layout(archive: Path, label: str) -> ArchiveLayout:
    """Read member names and times only (extraction is export.py's)."""
    try:
        with tarfile.open(archive) as handle:
            members = handle.getmembers()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SglforgeError(f"{label}: cannot read archive {archive}: {exc}") from None
    tops = {
        PurePosixPath(m.name).parts[0]
        for m in members
        if PurePosixPath(m.name).parts and m.name not in (".", "./")
    }
    nested = all(len(PurePosixPath(m.name).parts) > 1 or m.isdir() for m in members)
    top = next(iter(tops)) if len(tops) == 1 and nested else None
    newest = max((int(m.mtime) for m in members if m.mtime > 0), default=0)
    sample = next((m.name for m in members if m.isfile()), None)
    return ArchiveLayout(top, newest, sample)


def check_root(pin: Pin, layout: ArchiveLayout) -> None:
    if pin.archive_root is not None and layout.top != pin.archive_root:
        got = f"'{layout.top}'" if layout.top else "no single top directory"
        raise SglforgeError(
            f"{pin.name}: expected archive root '{pin.archive_root}', got {got}",
            hint="fix archive-root in the lockfile (or the pin)",
        )


def hoist(staged: Path, layout: ArchiveLayout) -> None:
    """Make `staged/<top>/*` the tree when extraction kept the top directory (it drops it
    only when the archive lists it as a member): decided by where a known file landed, so
    an archive whose top directory holds one directory of the same name stays intact.
    Everything stays inside `staged`, which the caller removes on failure."""
    top = layout.top
    entries = list(staged.iterdir())
    if top is None or [e.name for e in entries] != [top] or not entries[0].is_dir():
        return
    if layout.sample is not None and not (staged / layout.sample).is_file():
        return  # already stripped
    parked = staged / ".sglforge-archive-top"
    if (entries[0] / parked.name).exists():
        raise SglforgeError(
            f"{staged}: the archive holds {top}/{parked.name}, a name sglforge "
            "reserves while extracting"
        )
    entries[0].rename(parked)
    for child in sorted(parked.iterdir()):
        child.rename(staged / child.name)
    parked.rmdir()


def drop_git_paths(tree: Path) -> list[str]:
    """Remove every path named `.git` (git refuses to track one); return them, sorted."""
    dropped = []
    for path in sorted(tree.rglob(".git")):
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            remove_tree(path)
        else:
            continue
        dropped.append(str(path.relative_to(tree)))
    return dropped


@dataclass(frozen=True)
class ImportedArchive:
    commit: str  # the synthetic initial commit (not an upstream commit: nothing to fetch)
    tree: str  # its tree id: what the archive holds, as git sees it
    dropped: tuple[str, ...]  # `.git` paths left out
    embedded: dict[str, str]  # embed path -> tree id of that directory


def commit_archive_tree(tree: Path, pin: Pin, newest: int) -> ImportedArchive:
    """Turn the extracted archive at `tree` into a repository with one commit."""
    dropped = drop_git_paths(tree)
    git(*IMPORT_CONFIG, "init", "--quiet", "--", str(tree))
    (tree / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (tree / ".git" / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
    (tree / ".git" / "info" / "exclude").write_text("")
    # -f: the archive's own .gitignore files must not hide any of its files
    git(
        *IMPORT_CONFIG,
        "add",
        "--all",
        "--force",
        "--",
        ".",
        cwd=tree,
        what=f"{pin.name}: import the archive into git",
    )
    epoch = newest
    if pin.date is not None:  # the release date the pin records beats archive mtimes
        epoch = int(
            dt.datetime(
                pin.date.year, pin.date.month, pin.date.day, tzinfo=dt.timezone.utc
            ).timestamp()
        )
    date = f"{epoch} +0000"
    what = pin.sdist or pin.url
    git(
        *IMPORT_CONFIG,
        "commit",
        "--quiet",
        "--no-verify",
        "--allow-empty",
        "-m",
        f"{pin.name}: {what} sha256:{pin.sha256}\n\nThe archive as sglforge imported it "
        "(not an upstream commit).",
        cwd=tree,
        env={**AUTHOR, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
    )
    commit = git_out("rev-parse", "HEAD", cwd=tree)
    tree_id = git_out("rev-parse", "HEAD^{tree}", cwd=tree)
    if pin.tree is not None and pin.tree != tree_id:
        raise SglforgeError(
            f"{pin.name}: expected tree {pin.tree} for the imported archive "
            f"sha256:{pin.sha256[:12]}, got {tree_id}",
            hint="the import changed (an sglforge change, or a pin edited "
            "without its tree); fix the pin",
        )
    embedded = {}
    for embed in pin.embeds:
        found = (
            git("rev-parse", "--verify", "--quiet", f"HEAD:{embed.path}", cwd=tree, check=False)
            .stdout.decode()
            .strip()
        )
        kind = git_out("cat-file", "-t", found, cwd=tree) if found else ""
        if kind != "tree":
            raise SglforgeError(
                f"{pin.name}: embeds '{embed.path}', but the archive has no such directory",
                hint="fix the embeds list in the lockfile",
            )
        if embed.tree is not None and embed.tree != found:
            raise SglforgeError(
                f"{pin.name}: expected tree {embed.tree} for the embedded "
                f"'{embed.path}', got {found}",
                hint="the archive's embedded tree changed; fix the pin",
            )
        embedded[embed.path] = found
    return ImportedArchive(commit, tree_id, tuple(dropped), embedded)
