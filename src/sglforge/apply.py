"""Strict application of a patch series to an exported work tree: one commit per entry.

Order of work for a series:
1. resolve every entry to a diff (local patch bytes; backports produced and digest-checked);
2. refuse any path that leaves the tree (absolute, `..`, `.git`, through a symlink) — for the
   whole series, before anything is written;
3. per entry: check every hunk against the tree as it is now (exact context only; a hunk that
   would need fuzz, or matches reversed, is refused and explained), then let git apply and
   commit it (`git am` for mbox patches; `git apply --index` + commit for backports);
4. on any failure, restore the tree to where it started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sglforge.backport import CommitInfo, resolve_backport
from sglforge.config import Settings
from sglforge.diffparse import DiffParseError, FilePatch, Hunk, parse_diff
from sglforge.errors import SglforgeError
from sglforge.git import COMMITTER, git, git_out
from sglforge.series import Backport, Entry, LocalPatch, PatchSeries

STRICT = ["-c", "core.autocrlf=false", "-c", "am.threeWay=false", "-c", "apply.whitespace=nowarn",
          "-c", "am.keepcr=true", "-c", "commit.gpgSign=false"]
MAX_SHOWN_LINES = 12


@dataclass(frozen=True)
class ResolvedEntry:
    entry: Entry
    where: str  # "patches/x/series:3 (0002-foo.patch)"
    diff: bytes
    files: list[FilePatch]
    info: CommitInfo | None = None  # backports: the upstream commit's author and message


@dataclass(frozen=True)
class AppliedEntry:
    label: str
    commit: str


class PatchFailed(SglforgeError):
    """A series entry did not apply; the message names entry, file and hunk."""


def resolve_entries(series: PatchSeries, settings: Settings) -> list[ResolvedEntry]:
    resolved = []
    for entry in series.entries:
        where = f"{series.path}:{entry.line} ({entry.label})"
        info = None
        if isinstance(entry, Backport):
            backport = resolve_backport(entry, settings, where)
            diff, files, info = backport.diff, backport.files, backport.info
        else:
            diff = entry.data
            if not diff.startswith(b"From "):
                raise SglforgeError(f"{where}: not a `git format-patch` mbox (expected a first "
                                    "line 'From <commit> ...')")
            try:
                files = parse_diff(diff)
            except DiffParseError as exc:
                raise SglforgeError(f"{where}: malformed diff: {exc}") from None
        if not files:
            raise SglforgeError(f"{where}: contains no file changes")
        resolved.append(ResolvedEntry(entry, where, diff, files, info))
    return resolved


# ---------------------------------------------------------------------------------------------
# path safety


def _escape_reason(path: str) -> str | None:
    posix = PurePosixPath(path)
    if path.startswith("/") or posix.is_absolute():
        return "is an absolute path"
    if ".." in posix.parts:
        return "contains '..'"
    if ".git" in posix.parts:
        return "writes inside .git"
    return None


def check_paths(tree: Path, resolved: list[ResolvedEntry]) -> None:
    """Refuse every path that would leave the tree, across the whole series, before writing.

    Symlinks are tracked as the series would leave them: a link created by an earlier entry
    counts for the later ones.
    """
    links: dict[str, str | None] = {}  # path -> link target (None = removed by the series)

    def link_target(path: str) -> str | None:
        if path in links:
            return links[path]
        full = tree / path
        return os.readlink(full) if full.is_symlink() else None

    problems = []
    for item in resolved:
        for file in item.files:
            for path in file.paths:
                reason = _escape_reason(path)
                parts = PurePosixPath(path).parts
                for depth in range(1, len(parts)):
                    prefix = str(PurePosixPath(*parts[:depth]))
                    target = link_target(prefix)
                    if reason is None and target is not None:
                        reason = f"goes through the symlink {prefix} -> {target}"
                if reason:
                    problems.append(f"{item.where}: file {path!r} {reason}")
            if file.creates_symlink and file.hunks:
                target = b"".join(file.hunks[0].new_lines).decode(errors="replace").strip()
                anchor = PurePosixPath(file.path).parent
                escaped = target.startswith("/") or _normalize(anchor / target) is None
                if escaped:
                    problems.append(f"{item.where}: symlink {file.path!r} -> {target!r} points "
                                    "outside the tree")
                links[file.path] = target
            elif file.is_deleted and file.old_path:
                links[file.old_path] = None
    if problems:
        raise PatchFailed("refused before anything was written: paths outside the tree:\n"
                          + "\n".join(f"  - {p}" for p in problems))


def _normalize(path: PurePosixPath) -> PurePosixPath | None:
    """Resolve '..' lexically; None when it climbs above the tree root."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


# ---------------------------------------------------------------------------------------------
# hunk checks with explanations


def _find(haystack: list[bytes], needle: list[bytes], start: int, hint: int) -> int | None:
    """Exact match of `needle` at or after `start`, nearest to `hint` first (git's search)."""
    if not needle:
        return max(start, min(hint, len(haystack)))
    last = len(haystack) - len(needle)
    candidates = range(start, last + 1)
    for pos in sorted(candidates, key=lambda p: (abs(p - hint), p)):
        if haystack[pos:pos + len(needle)] == needle:
            return pos
    return None


def _show(lines: list[bytes], first_number: int, marker: str) -> list[str]:
    shown = [f"    {marker} {first_number + i:>6} | {line.decode('utf-8', 'replace')}"
             for i, line in enumerate(lines[:MAX_SHOWN_LINES])]
    if len(lines) > MAX_SHOWN_LINES:
        shown.append(f"    {marker}        | ... ({len(lines) - MAX_SHOWN_LINES} more)")
    return shown


def _explain_hunk(item: ResolvedEntry, file: FilePatch, hunk: Hunk, content: list[bytes],
                  start: int, hint: int) -> str:
    head = [f"{item.where} does not apply:", f"  file: {file.path}", f"  hunk: {hunk.header}"]
    new_lines = hunk.new_lines
    if new_lines != hunk.old_lines and _find(content, new_lines, 0, hint) is not None:
        return "\n".join(head + ["  the hunk's result is already in the file (it would only "
                                 "apply reversed) — refused; drop or refresh the patch"])
    for fuzz in (1, 2):
        trimmed, dropped = hunk.context_trimmed(fuzz)
        if _find(content, trimmed, start, hint + dropped) is not None:
            return "\n".join(head + [
                f"  it would apply only with fuzz {fuzz} (context lines differ) — refused; "
                f"refresh the patch (`patches refresh`)"])
    expected = hunk.old_lines
    actual = content[hint:hint + len(expected)]
    differ = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b),
                  min(len(expected), len(actual)))
    return "\n".join(head + ["  expected (from the patch):"] + _show(expected, hint + 1, "-")
                     + ["  actual (in the tree):"] + _show(actual, hint + 1, "+")
                     + [f"  first difference at line {hint + differ + 1}"])


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def check_hunks(tree: Path, item: ResolvedEntry) -> None:
    """Raise PatchFailed explaining the first hunk that does not match the tree exactly."""
    for file in item.files:
        target = tree / file.old_path if file.old_path else None
        if file.is_new:
            if (tree / file.path).exists() or (tree / file.path).is_symlink():
                raise PatchFailed(f"{item.where} does not apply:\n  file: {file.path}\n"
                                  "  the patch creates it, but it already exists in the tree")
            continue
        if target is None or not (target.is_file() or target.is_symlink()):
            raise PatchFailed(f"{item.where} does not apply:\n  file: {file.old_path}\n"
                              "  the patch changes it, but it does not exist in the tree")
        if file.binary or not file.hunks:
            continue
        content = _split_lines(os.readlink(target).encode() if target.is_symlink()
                               else target.read_bytes())
        position = 0
        offset = 0
        for hunk in file.hunks:
            hint = max(hunk.old_start - 1 + offset, 0) if hunk.old_count else hunk.old_start + offset
            found = _find(content, hunk.old_lines, position, hint)
            if found is None:
                raise PatchFailed(_explain_hunk(item, file, hunk, content, position, hint))
            offset = found - (hunk.old_start - 1 if hunk.old_count else hunk.old_start)
            position = found + len(hunk.old_lines)


# ---------------------------------------------------------------------------------------------
# application


def _commit_entry(tree: Path, item: ResolvedEntry) -> str:
    if isinstance(item.entry, LocalPatch):
        proc = git("am", "--quiet", "--no-3way", "--keep-cr", "--whitespace=nowarn",
                   "--committer-date-is-author-date", cwd=tree, input=item.diff, check=False,
                   config=STRICT, env=COMMITTER)
    else:
        backport = item.entry
        proc = git("apply", "--index", "--whitespace=nowarn", "-", cwd=tree, input=item.diff,
                   check=False, config=STRICT)
        if proc.returncode == 0:
            info = item.info
            message = (f"{info.subject}\n\n{info.body}\n\n" if info.body else
                       f"{info.subject}\n\n")
            message += f"Backport: {backport.url} {backport.commit}\n"
            if backport.excludes:
                message += f"Excluded: {', '.join(backport.excludes)}\n"
            env = dict(COMMITTER, GIT_AUTHOR_NAME=info.author_name,
                       GIT_AUTHOR_EMAIL=info.author_email, GIT_AUTHOR_DATE=info.author_date,
                       GIT_COMMITTER_DATE=info.author_date)
            proc = git("commit", "--quiet", "--no-verify", "--allow-empty", "-F", "-",
                       cwd=tree, input=message.encode(), check=False, config=STRICT, env=env)
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip() or proc.stdout.decode(
            errors="replace").strip()
        raise PatchFailed(f"{item.where} does not apply (git): {message}")
    return git_out("rev-parse", "HEAD", cwd=tree)


def _restore(tree: Path, start: str) -> None:
    if (tree / ".git" / "rebase-apply").exists():
        git("am", "--abort", cwd=tree, check=False)
    git("reset", "--quiet", "--hard", start, cwd=tree)


def apply_series(tree: Path, series: PatchSeries, settings: Settings) -> list[AppliedEntry]:
    """Apply `series` to the git work tree `tree` (exported at its pin). All or nothing."""
    if not (tree / ".git").exists():
        raise SglforgeError(f"{tree}: not an exported work tree (no .git); run fetch first")
    dirty = git_out("status", "--porcelain", "--untracked-files=no", cwd=tree)
    if dirty:
        raise SglforgeError(f"{tree}: work tree has uncommitted changes; export it afresh "
                            f"(`nox -s fetch`):\n{dirty}")
    resolved = resolve_entries(series, settings)
    check_paths(tree, resolved)
    start = git_out("rev-parse", "HEAD", cwd=tree)
    applied: list[AppliedEntry] = []
    try:
        for item in resolved:
            check_hunks(tree, item)
            applied.append(AppliedEntry(item.entry.label, _commit_entry(tree, item)))
    except BaseException as exc:
        _restore(tree, start)
        if isinstance(exc, PatchFailed):
            raise PatchFailed(f"{exc}\nThe work tree {tree} was restored to {start[:12]}; "
                              f"{len(applied)} of {len(resolved)} entries had applied.") from None
        raise
    return applied
