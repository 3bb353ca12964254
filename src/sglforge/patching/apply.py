"""Strict application of a patch series to an exported work tree: one commit per entry.

Order of work for a series:
1. resolve every entry to a diff (local patches: an mbox or a DEP-3 patch, told apart by the
   first line, anything else refused; backports produced and digest-checked);
2. refuse any path that leaves the tree (absolute, `..`, `.git`, through a symlink) and any
   symlink the series leaves pointing outside it (created, retargeted, renamed/copied, or made
   one by a mode change) — for the whole series, before anything is written;
3. per entry: check every hunk against the tree as it is now (exact context only; a hunk that
   would need fuzz, matches reversed, or differs only in line endings is refused and
   explained), then let git apply and commit it (`git am` for mbox patches; `git apply
   --index` + commit for DEP-3 patches and backports), then re-check the links it touched;
4. on any failure, restore the tree to where it started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sglforge.base.errors import SglforgeError
from sglforge.base.git import COMMITTER, git, git_out
from sglforge.base.linkwalk import LinkEscape, walk
from sglforge.inputs.settings import Settings
from sglforge.patching.backport import CommitInfo, resolve_backport
from sglforge.patching.diff import SYMLINK_MODE, DiffParseError, FilePatch, Hunk, parse_diff
from sglforge.patching.gitpaths import MAIL_CONFIG, STRIP, PathsDisagree, check_names, mail_patch
from sglforge.patching.patchformat import PatchFormatError, dep3_commit, patch_format
from sglforge.patching.series import Backport, Entry, LocalPatch, PatchSeries

STRICT = [
    "-c",
    "core.autocrlf=false",
    "-c",
    "am.threeWay=false",
    "-c",
    "apply.whitespace=nowarn",
    "-c",
    "am.keepcr=true",
    "-c",
    "commit.gpgSign=false",
    *MAIL_CONFIG,
]
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
        where = series.where(entry)
        info = None
        if isinstance(entry, Backport):
            backport = resolve_backport(entry, settings, where)
            diff, files, info = backport.diff, backport.files, backport.info
        else:
            diff = entry.data
            try:
                kind = patch_format(diff)
            except PatchFormatError as exc:
                raise PatchFormatError(f"{where}: {exc}") from None
            try:
                files = parse_diff(diff)
            except DiffParseError as exc:
                raise SglforgeError(
                    f"{where}: malformed diff at line {exc.line} of {entry.name}: {exc.message}"
                ) from None
            if kind == "dep3":
                info = _dep3_info(diff, where)
        if not files:
            raise SglforgeError(f"{where}: contains no file changes")
        try:  # what git will apply (for an mbox: what git am extracts) read by git itself
            check_names(files, mail_patch(diff) if kind_of(entry, info) == "mbox" else diff)
        except PathsDisagree as exc:
            raise PatchFailed(f"{where}: {exc}") from None
        resolved.append(ResolvedEntry(entry, where, diff, files, info))
    return resolved


def kind_of(entry: Entry, info: CommitInfo | None) -> str:
    """How an entry is committed: 'mbox' (git am) or 'apply' (git apply + commit)."""
    return "mbox" if isinstance(entry, LocalPatch) and info is None else "apply"


def _dep3_info(diff: bytes, where: str) -> CommitInfo:
    # Placeholder date: the parent's commit date is only known at commit time (commit_entry).
    try:
        name, mail, date, message = dep3_commit(diff, fallback_date="")
    except PatchFormatError as exc:
        raise PatchFormatError(f"{where}: {exc}") from None
    subject, _, body = message.partition("\n\n")
    return CommitInfo(name, mail, date, subject, body.strip())


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


class _SeriesView:
    """The tree as the series would leave it, for the paths the series touches.

    A touched path maps to (mode, content) or None (removed); content is a thunk (a base and
    the hunks applied on top), evaluated only when a symlink's target is needed. Untouched
    paths are read from the tree, never following a symlink.
    """

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.state: dict[str, tuple[str, _Content] | None] = {}

    def get(self, path: str) -> tuple[str, _Content] | None:
        if path in self.state:
            return self.state[path]
        full = self.tree / path
        if full.is_symlink():
            return SYMLINK_MODE, _Content(os.fsencode(os.readlink(full)).split(b"\n"))
        if full.is_file():
            return "100755" if full.stat().st_mode & 0o111 else "100644", _Content(None, full)
        return None

    def link_target(self, path: str) -> bytes | None:
        node = self.get(path)
        if node is None or node[0] != SYMLINK_MODE:
            return None
        lines = node[1].lines()
        return b"\n".join(lines) if lines is not None else b"?"


class _Content:
    def __init__(
        self,
        lines: list[bytes] | None,
        file: Path | None = None,
        hunks: tuple[list[Hunk], ...] = (),
    ) -> None:
        self._lines, self._file, self._hunks = lines, file, hunks
        self.unknown = False

    def then(self, hunks: list[Hunk], binary: bool) -> _Content:
        content = _Content(self._lines, self._file, self._hunks + (hunks,))
        content.unknown = self.unknown or binary
        return content

    def lines(self) -> list[bytes] | None:
        """The content (lines without their newline), or None where it cannot be known."""
        if self.unknown:
            return None
        lines = self._lines
        if lines is None:
            lines = _split_lines(self._file.read_bytes()) if self._file is not None else []
        for hunks in self._hunks:
            lines = _patched(lines, hunks)
            if lines is None:
                return None
        return lines


def _patched(lines: list[bytes], hunks: list[Hunk]) -> list[bytes] | None:
    """`lines` with `hunks` applied exactly as check_hunks matches them; None if one fails."""
    result: list[bytes] = []
    position = offset = 0
    for hunk in hunks:
        hint = max(hunk.old_start - 1 + offset, 0) if hunk.old_count else hunk.old_start + offset
        found = _find(lines, hunk.old_lines, position, hint)
        if found is None:
            return None
        offset = found - (hunk.old_start - 1 if hunk.old_count else hunk.old_start)
        result += lines[position:found] + hunk.new_lines
        position = found + len(hunk.old_lines)
    return result + lines[position:]


def _link_escape(view: _SeriesView, link: str, target: bytes) -> str | None:
    """Why the symlink at `link` with `target` resolves outside the tree (or into .git),
    following links inside the tree as the series leaves them; None when it stays inside."""
    text = os.fsdecode(target)
    if text.startswith("/"):
        return "is absolute"

    def link_target(path: tuple[str, ...]) -> str | None:
        inner = view.link_target("/".join(path))
        if inner == b"?":
            raise LinkEscape(f"goes through the symlink {'/'.join(path)}, whose target is unknown")
        return None if inner is None else os.fsdecode(inner)

    def guard(path: tuple[str, ...]) -> None:
        if path[0] == ".git":
            raise LinkEscape("points into .git")

    try:
        walk([*PurePosixPath(link).parent.parts, *text.split("/")], link_target, guard=guard)
    except LinkEscape as exc:
        return str(exc)
    return None


def check_paths(tree: Path, resolved: list[ResolvedEntry]) -> None:
    """Refuse every path that would leave the tree, across the whole series, before writing.

    The series is followed file by file as it would leave the tree (`_SeriesView`): a path may
    not go through a symlink (including one an earlier entry created), and every symlink the
    series leaves behind — created, retargeted, renamed or copied to a new place, or made one
    by a mode change to 120000 — must resolve inside the tree, following other links.
    """
    view = _SeriesView(tree)
    problems = []
    for item in resolved:
        for file in item.files:
            escapes = False
            for path in file.paths:
                reason = _escape_reason(path)
                parts = PurePosixPath(path).parts
                for depth in range(1, len(parts)):
                    if reason is not None:
                        break
                    prefix = str(PurePosixPath(*parts[:depth]))
                    target = view.link_target(prefix)
                    if target is not None:
                        reason = f"goes through the symlink {prefix} -> {os.fsdecode(target)}"
                if reason:
                    problems.append(f"{item.where}: file {path!r} {reason}")
                    escapes = True
            if escapes:
                continue  # refused already; never read (or show) what lies behind the path
            old = view.get(file.old_path) if file.old_path else None
            if file.is_deleted:
                view.state[file.old_path] = None
                continue
            if file.is_new or old is None:
                mode, content = file.new_mode or "100644", _Content([])
            else:
                mode, content = file.new_mode or old[0], old[1]
            content = content.then(file.hunks, file.binary)
            if file.is_rename:
                view.state[file.old_path] = None
            view.state[file.new_path] = (mode, content)
            if mode != SYMLINK_MODE:
                continue
            lines = content.lines()
            if lines is None:
                problems.append(
                    f"{item.where}: symlink {file.new_path!r}: its target cannot be "
                    "determined from the patch and the tree — refused"
                )
                continue
            target = b"\n".join(lines)
            reason = _link_escape(view, file.new_path, target)
            if reason:
                how = _link_change(file, old)
                problems.append(
                    f"{item.where}: symlink {file.new_path!r} -> "
                    f"{os.fsdecode(target)!r} points outside the tree ({how}; "
                    f"{reason})"
                )
    if not problems:  # (a link refused above would be named twice)
        problems += [
            f"{resolved[-1].where if resolved else 'series'}: {p}"
            for p in _links_moved_outside(tree, view, upstream_escapes(tree))
        ]
    if problems:
        raise PatchFailed(
            "refused before anything was written: paths outside the tree:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


def tree_links(tree: Path) -> dict[str, bytes]:
    """Every symlink the work tree's index tracks: path -> target."""
    links = {}
    for record in git("ls-files", "-s", "-z", cwd=tree).stdout.split(b"\0"):
        if record.startswith(b"120000 "):
            path = os.fsdecode(record.split(b"\t", 1)[1])
            links[path] = os.fsencode(os.readlink(tree / path))
    return links


def upstream_escapes(tree: Path) -> dict[str, bytes]:
    """The links upstream itself ships pointing outside its tree (its business, not a patch's):
    path -> target, at the pin."""
    view = _SeriesView(tree)
    return {
        path: target
        for path, target in tree_links(tree).items()
        if _link_escape(view, path, target)
    }


def _links_moved_outside(
    tree: Path,
    view: _SeriesView,
    allowed: dict[str, bytes],
    when: str = "once the whole series is applied",
) -> list[str]:
    """Links that resolve outside once the series is applied although no section retargets
    them: an untouched upstream link (or one an earlier entry made) whose way goes through a
    directory a later section turned into a link (`u -> sub/deep/../../docs` once sub/deep
    -> ..). Every link of the final tree is resolved against the final tree."""
    problems = []
    paths = set(tree_links(tree)) | set(view.state)
    for path in sorted(paths):
        target = view.link_target(path)
        if target is None or target == b"?" or allowed.get(path) == target:
            continue
        reason = _link_escape(view, path, target)
        if reason:
            problems.append(
                f"symlink {path!r} -> {os.fsdecode(target)!r} points outside the "
                f"tree {when} ({reason})"
            )
    return problems


def _link_change(file: FilePatch, old: tuple[str, _Content] | None) -> str:
    if file.is_new:
        return "created"
    if file.copy:
        return f"copied from {file.old_path}"
    if file.is_rename:
        return f"renamed from {file.old_path}"
    if old is not None and old[0] != SYMLINK_MODE:
        return f"type changed from mode {old[0]} to {SYMLINK_MODE}"
    return "target changed" if file.hunks else "mode changed"


def committed_changes(tree: Path, parent: str) -> list[tuple[str, str, str]]:
    """(path, new mode, new blob) of every path the commit on top of `parent` changed, as git
    recorded it (mode '000000' for a removal): what git did, not what the patch was read to
    say."""
    raw = git(
        "diff-tree",
        "-r",
        "-z",
        "--raw",
        "--no-renames",
        "--no-commit-id",
        parent,
        "HEAD",
        "--",
        cwd=tree,
    ).stdout.split(b"\0")
    changes = []
    for index in range(0, len(raw) - 1, 2):  # ":<old mode> <new mode> <old> <new> <status>", path
        fields = raw[index].decode().split(" ")
        changes.append((os.fsdecode(raw[index + 1]), fields[1], fields[3]))
    return changes


def check_links_in_tree(
    tree: Path, item: ResolvedEntry, parent: str, allowed: dict[str, bytes] | None = None
) -> None:
    """After an entry is committed, from what git actually wrote (defence in depth for
    check_paths, which predicts rather than observes): every path the commit changed is one
    the patch was read to name, every symlink it left resolves inside the tree, and so does
    every other link of the tree but those upstream ships pointing out (`allowed`)."""
    view = _SeriesView(tree)
    if allowed is not None:
        for problem in _links_moved_outside(tree, view, allowed, "now that it is applied"):
            raise PatchFailed(f"{item.where}: {problem}")
    named = {path for file in item.files for path in file.paths}
    for path, mode, blob in committed_changes(tree, parent):
        if path not in named:
            raise PatchFailed(
                f"{item.where}: git changed {path!r}, a path sglforge did not "
                "read in the patch — refused"
            )
        if mode != SYMLINK_MODE:
            continue
        target = git("cat-file", "blob", blob, cwd=tree).stdout  # what a checkout links to
        reason = _link_escape(view, path, target)
        if reason:
            raise PatchFailed(
                f"{item.where}: symlink {path!r} -> "
                f"{os.fsdecode(target)!r} points outside the tree: {reason}"
            )


# ---------------------------------------------------------------------------------------------
# hunk checks with explanations


def _find(haystack: list[bytes], needle: list[bytes], start: int, hint: int) -> int | None:
    """Exact match of `needle` at or after `start`, nearest to `hint` first (git's search)."""
    if not needle:
        return max(start, min(hint, len(haystack)))
    last = len(haystack) - len(needle)
    candidates = range(start, last + 1)
    for pos in sorted(candidates, key=lambda p: (abs(p - hint), p)):
        if haystack[pos : pos + len(needle)] == needle:
            return pos
    return None


def _show(lines: list[bytes], first_number: int, marker: str) -> list[str]:
    shown = [
        f"    {marker} {first_number + i:>6} | {line.decode('utf-8', 'replace')}"
        for i, line in enumerate(lines[:MAX_SHOWN_LINES])
    ]
    if len(lines) > MAX_SHOWN_LINES:
        shown.append(f"    {marker}        | ... ({len(lines) - MAX_SHOWN_LINES} more)")
    return shown


def _explain_hunk(
    item: ResolvedEntry, file: FilePatch, hunk: Hunk, content: list[bytes], start: int, hint: int
) -> tuple[str, str]:
    """Why `hunk` does not match: (reason, message); reasons are HUNK_REASONS' keys."""
    head = [f"{item.where} does not apply:", f"  file: {file.path}", f"  hunk: {hunk.header}"]
    endings = _line_endings_differ(hunk.old_lines, content, start, hint)
    if endings:
        return "line-endings", "\n".join(
            head
            + [
                (
                    f"  line endings differ: {endings} — refused; convert "
                    "the patch back (e.g. dos2unix) or refresh it"
                )
            ]
        )
    new_lines = hunk.new_lines
    if new_lines != hunk.old_lines and _find(content, new_lines, 0, hint) is not None:
        return "already-applied", "\n".join(
            head
            + [
                (
                    "  the hunk's result is already in the file (it would only "
                    "apply reversed) — refused; drop or refresh the patch"
                )
            ]
        )
    for fuzz in (1, 2):
        trimmed, dropped = hunk.context_trimmed(fuzz)
        if _find(content, trimmed, start, hint + dropped) is not None:
            return f"fuzz-{fuzz}", "\n".join(
                head
                + [
                    (
                        f"  it would apply only with fuzz {fuzz} (context lines differ) — refused; "
                        f"refresh the patch (`patches refresh`)"
                    )
                ]
            )
    expected = hunk.old_lines
    actual = content[hint : hint + len(expected)]
    differ = next(
        (i for i, (a, b) in enumerate(zip(expected, actual)) if a != b),
        min(len(expected), len(actual)),
    )
    return "context-differs", "\n".join(
        head
        + ["  expected (from the patch):"]
        + _show(expected, hint + 1, "-")
        + ["  actual (in the tree):"]
        + _show(actual, hint + 1, "+")
        + [f"  first difference at line {hint + differ + 1}"]
    )


def _line_endings_differ(
    expected: list[bytes], content: list[bytes], start: int, hint: int
) -> str | None:
    """'the patch has CRLF, the file has LF' (or the reverse) when the hunk matches the tree
    once carriage returns are ignored; None otherwise."""
    bare = [line.removesuffix(b"\r") for line in expected]
    found = _find([line.removesuffix(b"\r") for line in content], bare, start, hint)
    if found is None or not expected:
        return None
    patch_cr = sum(line.endswith(b"\r") for line in expected) * 2 > len(expected)
    region = content[found : found + len(expected)]
    file_cr = sum(line.endswith(b"\r") for line in region) * 2 > len(region)
    if patch_cr == file_cr:
        return None
    name = {True: "CRLF", False: "LF"}
    return f"the patch has {name[patch_cr]}, the file has {name[file_cr]}"


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


# Why a hunk (or a whole file) does not apply strictly; `patches canary` reports these.
HUNK_REASONS = {
    "file-exists": "the patch creates the file, but it already exists",
    "file-missing": "the patch changes the file, but it does not exist",
    "already-applied": "the hunk's result is already in the file",
    "fuzz-1": "applies only with fuzz 1 (context lines differ)",
    "fuzz-2": "applies only with fuzz 2 (context lines differ)",
    "line-endings": "matches only if line endings are ignored",
    "context-differs": "the lines the hunk expects are not in the file",
}


@dataclass(frozen=True)
class HunkFailure:
    file: str
    hunk: str | None  # the hunk's @@ header; None when the whole file is the problem
    reason: str  # a key of HUNK_REASONS
    message: str  # the explanation check_hunks raises (expected vs actual lines)


def check_hunks(tree: Path, item: ResolvedEntry) -> None:
    """Raise PatchFailed explaining the first hunk that does not match the tree exactly."""
    failures = hunk_failures(tree, item, first_only=True)
    if failures:
        raise PatchFailed(failures[0].message)


def hunk_failures(tree: Path, item: ResolvedEntry, first_only: bool = False) -> list[HunkFailure]:
    """Every file and hunk of `item` that does not match the tree exactly (or the first)."""
    failures: list[HunkFailure] = []
    removed: set[str] = set()  # deleted earlier in this entry (git's type change: delete+create)
    for file in item.files:
        if first_only and failures:
            break
        target = tree / file.old_path if file.old_path else None
        if file.is_deleted and file.old_path:
            removed.add(file.old_path)
        if file.is_new:
            if file.path not in removed and (
                (tree / file.path).exists() or (tree / file.path).is_symlink()
            ):
                failures.append(
                    HunkFailure(
                        file.path,
                        None,
                        "file-exists",
                        f"{item.where} does not apply:\n  file: {file.path}\n"
                        "  the patch creates it, but it already exists in the tree",
                    )
                )
            continue
        if target is None or not (target.is_file() or target.is_symlink()):
            failures.append(
                HunkFailure(
                    file.old_path or file.path,
                    None,
                    "file-missing",
                    f"{item.where} does not apply:\n  file: {file.old_path}\n"
                    "  the patch changes it, but it does not exist in the tree",
                )
            )
            continue
        if file.binary or not file.hunks:
            continue
        content = _split_lines(
            os.readlink(target).encode() if target.is_symlink() else target.read_bytes()
        )
        failures += _file_hunk_failures(item, file, content, first_only)
    return failures[:1] if first_only else failures


def _file_hunk_failures(
    item: ResolvedEntry, file: FilePatch, content: list[bytes], first_only: bool
) -> list[HunkFailure]:
    """The hunks of `file` that do not match `content`; a failed hunk moves nothing on (the
    next one is searched from where the last matching one ended)."""
    failures = []
    position = offset = 0
    for hunk in file.hunks:
        hint = max(hunk.old_start - 1 + offset, 0) if hunk.old_count else hunk.old_start + offset
        found = _find(content, hunk.old_lines, position, hint)
        if found is None:
            reason, message = _explain_hunk(item, file, hunk, content, position, hint)
            failures.append(HunkFailure(file.path, hunk.header, reason, message))
            if first_only:
                break
            continue
        offset = found - (hunk.old_start - 1 if hunk.old_count else hunk.old_start)
        position = found + len(hunk.old_lines)
    return failures


# ---------------------------------------------------------------------------------------------
# application


def commit_entry(tree: Path, item: ResolvedEntry) -> str:
    """Commit one checked entry (git am for an mbox, git apply + commit otherwise)."""
    if kind_of(item.entry, item.info) == "mbox":
        proc = git(
            "am",
            STRIP,
            "--quiet",
            "--no-3way",
            "--keep-cr",
            "--whitespace=nowarn",
            "--committer-date-is-author-date",
            cwd=tree,
            input=item.diff,
            check=False,
            config=STRICT,
            env=COMMITTER,
        )
    else:
        proc = git(
            "apply",
            STRIP,
            "--index",
            "--whitespace=nowarn",
            "-",
            cwd=tree,
            input=item.diff,
            check=False,
            config=STRICT,
        )
        if proc.returncode == 0:
            info = item.info
            message = f"{info.subject}\n\n{info.body}\n\n" if info.body else f"{info.subject}\n\n"
            date = info.author_date or git_out(
                "log", "-1", "--format=%cd", "--date=raw", cwd=tree
            )  # DEP-3 without Last-Update
            if isinstance(item.entry, Backport):
                backport = item.entry
                message += f"Backport: {backport.url} {backport.commit}\n"
                if backport.excludes:
                    message += f"Excluded: {', '.join(backport.excludes)}\n"
            env = dict(
                COMMITTER,
                GIT_AUTHOR_NAME=info.author_name,
                GIT_AUTHOR_EMAIL=info.author_email,
                GIT_AUTHOR_DATE=date,
                GIT_COMMITTER_DATE=date,
            )
            proc = git(
                "commit",
                "--quiet",
                "--no-verify",
                "--allow-empty",
                "-F",
                "-",
                cwd=tree,
                input=message.encode(),
                check=False,
                config=STRICT,
                env=env,
            )
    if proc.returncode != 0:
        message = (
            proc.stderr.decode(errors="replace").strip()
            or proc.stdout.decode(errors="replace").strip()
        )
        raise PatchFailed(f"{item.where} does not apply (git): {message}")
    return git_out("rev-parse", "HEAD", cwd=tree)


def restore_tree(tree: Path, start: str) -> None:
    """Back to `start`: a stopped git am aborted, the index and files reset."""
    if (tree / ".git" / "rebase-apply").exists():
        git("am", "--abort", cwd=tree, check=False)
    git("reset", "--quiet", "--hard", start, cwd=tree)


def apply_series(tree: Path, series: PatchSeries, settings: Settings) -> list[AppliedEntry]:
    """Apply `series` to the git work tree `tree` (exported at its pin). All or nothing."""
    if not (tree / ".git").exists():
        raise SglforgeError(f"{tree}: not an exported work tree (no .git); run fetch first")
    dirty = git_out("status", "--porcelain", "--untracked-files=no", cwd=tree)
    if dirty:
        raise SglforgeError(
            f"{tree}: work tree has uncommitted changes; export it afresh "
            f"(`nox -s fetch`):\n{dirty}"
        )
    resolved = resolve_entries(series, settings)
    check_paths(tree, resolved)
    start = git_out("rev-parse", "HEAD", cwd=tree)
    allowed = upstream_escapes(tree)
    applied: list[AppliedEntry] = []
    try:
        parent = start
        for item in resolved:
            check_hunks(tree, item)
            commit = commit_entry(tree, item)
            check_links_in_tree(tree, item, parent, allowed)
            parent = commit
            applied.append(AppliedEntry(item.entry.label, commit))
    except BaseException as exc:
        restore_tree(tree, start)
        if isinstance(exc, PatchFailed):
            raise PatchFailed(
                f"{exc}\nThe work tree {tree} was restored to {start[:12]}; "
                f"{len(applied)} of {len(resolved)} entries had applied."
            ) from None
        raise
    return applied
