"""Backports by reference: the diff of an upstream commit, produced locally and verified.

The diff is `git diff <commit>^1 <commit>` in one normalized form (fixed prefixes, full
index lines, no renames, Myers), so its sha256 is stable across hosts and git settings;
the series records that digest and a mismatch fails closed (like Nix `fetchpatch`).
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass

from sglforge.base.errors import SglforgeError
from sglforge.base.git import git, git_out, has_commit
from sglforge.inputs.settings import Settings
from sglforge.patching.diff import DiffParseError, FilePatch, parse_diff, render_files
from sglforge.patching.series import Backport
from sglforge.sources.cache import SourceCache

NORMALIZE_CONFIG = [
    "-c",
    "core.quotePath=true",
    "-c",
    "diff.suppressBlankEmpty=false",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.relative=false",
]


@dataclass(frozen=True)
class CommitInfo:
    author_name: str
    author_email: str
    author_date: str  # raw git format: "<unix> <tz>"
    subject: str
    body: str


def normalized_diff(git_dir, commit: str) -> bytes:
    parents = git_out(
        "rev-list", "--parents", "-n", "1", "--end-of-options", commit, git_dir=git_dir
    ).split()[1:]
    if not parents:
        raise SglforgeError(f"backport {commit}: a root commit has no parent to diff against")
    return git(
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--full-index",
        "--binary",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        "--diff-algorithm=myers",
        "--end-of-options",
        parents[0],
        commit,
        git_dir=git_dir,
        config=NORMALIZE_CONFIG,
    ).stdout


def commit_info(git_dir, commit: str) -> CommitInfo:
    raw = git(
        "log",
        "-1",
        "--format=%an%x00%ae%x00%ad%x00%s%x00%b",
        "--date=raw",
        "--end-of-options",
        commit,
        git_dir=git_dir,
    ).stdout.decode("utf-8", errors="replace")
    name, mail, date, subject, body = raw.split("\0", 4)
    return CommitInfo(name, mail, date, subject, body.strip())


def digest_of(git_dir, commit: str) -> str:
    return hashlib.sha256(normalized_diff(git_dir, commit)).hexdigest()


@dataclass(frozen=True)
class BackportDiff:
    entry: Backport
    diff: bytes  # after `exclude=` filtering
    files: list[FilePatch]
    info: CommitInfo


def resolve_backport(entry: Backport, settings: Settings, where: str) -> BackportDiff:
    """Produce, verify and filter the backport's diff from the cached upstream repository."""
    git_dir = SourceCache(settings.cache_dir).git_dir(entry.url)
    if not has_commit(git_dir, entry.commit):
        raise SglforgeError(
            f"{where}: backport commit {entry.commit} from {entry.url} is not in "
            "the cache; run `nox -s fetch` first"
        )
    diff = normalized_diff(git_dir, entry.commit)
    actual = hashlib.sha256(diff).hexdigest()
    if actual != entry.sha256:
        raise SglforgeError(
            f"{where}: backport {entry.url} {entry.commit}: expected sha256 {entry.sha256}, "
            f"got {actual}",
            hint="the series names the wrong digest or commit; nothing was applied",
        )
    try:
        files = parse_diff(diff)
    except DiffParseError as exc:
        raise SglforgeError(
            f"{where}: the diff of backport {entry.commit[:12]} does not parse "
            f"at line {exc.line}: {exc.message}"
        ) from None
    if entry.excludes:
        unused = [
            g
            for g in entry.excludes
            if not any(fnmatch.fnmatchcase(p, g) for f in files for p in f.paths)
        ]
        if unused:
            raise SglforgeError(
                f"{where}: exclude pattern(s) {', '.join(unused)} match no file "
                f"of backport {entry.commit[:12]}"
            )
        files = [
            f
            for f in files
            if not any(fnmatch.fnmatchcase(p, g) for p in f.paths for g in entry.excludes)
        ]
        diff = render_files(files)
    return BackportDiff(entry, diff, files, commit_info(git_dir, entry.commit))
