"""Upstream-drift canary: our series tried on an upstream's newest release and branch head.

For each target commit (sources/upstream_refs.py picks them) the upstream is exported from the
source cache at that commit exactly as `patches check` exports the pin (a fresh work tree in a
temporary directory, always removed), and the series' entries are tried in order, each on the
target with the earlier entries that applied (what a maintainer rebasing the series sees).
Each entry gets one status:

- `applies`: every hunk matches exactly (apply.hunk_failures: no fuzz, no offset beyond
  git's own search) and git applied and committed it; later entries see it applied.
- `upstream`: it does not apply, and its reverse applies strictly (`git apply -R --check`,
  no fuzz): every file it creates exists with that content, every file it deletes is gone,
  and every hunk's result (context and added lines) stands in the file. The change is in the
  target: a candidate to drop. It is not applied (it is there already).
- `conflicts`: neither; `hunks` names each file and hunk that does not match and why
  (apply.HUNK_REASONS: `already-applied` marks a hunk whose result is in the target although
  the whole entry is not). Not applied; `after_skipped` on a later entry lists the earlier
  entries that were not applied, whose absence may be the cause of its conflict.
- `refused`: a path of the entry would leave the tree on this target (apply.check_paths,
  check_links_in_tree): bad input, never written.

Nothing here runs upstream code: git applies diffs in a work tree made by `git init`, every
git sglforge runs has `core.hooksPath=/dev/null` (base/git.py: no hook runs, not even one the
user's config names), and nothing in the tree is executed.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.git import git, git_out
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.project import Project
from sglforge.inputs.settings import Settings
from sglforge.patching.apply import (
    STRICT,
    PatchFailed,
    ResolvedEntry,
    check_links_in_tree,
    check_paths,
    commit_entry,
    hunk_failures,
    resolve_entries,
    restore_tree,
    upstream_escapes,
)
from sglforge.patching.gitpaths import STRIP
from sglforge.patching.series import backport_wants, load_series
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import export_source
from sglforge.sources.fetch import fetch_sources
from sglforge.sources.upstream_refs import (
    Target,
    cached_refs,
    fetch_targets,
    pick_targets,
    remote_refs,
)

STATUSES = ("applies", "upstream", "conflicts", "refused")


@dataclass(frozen=True)
class HunkResult:
    file: str
    hunk: str | None  # the @@ header; None: the whole file
    reason: str  # apply.HUNK_REASONS key, or "git" when git itself refused the entry


@dataclass(frozen=True)
class EntryResult:
    entry: str  # its label: the patch file name or "backport <commit12>"
    where: str  # patches/<upstream>/series:<line> (<label>)
    status: str  # one of STATUSES
    hunks: tuple[HunkResult, ...] = ()
    after_skipped: tuple[str, ...] = ()  # earlier entries not applied on this target
    detail: str = ""  # the full explanation (expected vs actual lines, git's message)
    total_hunks: int = 0  # the entry's hunks (a file without hunks counts as one)
    failed_hunks: int = 0  # of those, the ones that do not match (a missing file: all of its)

    @property
    def files(self) -> list[str]:
        return sorted({h.file for h in self.hunks})

    @property
    def already_applied(self) -> int:
        """Failing hunks whose result is in the target anyway (part of it is upstream)."""
        return sum(h.reason == "already-applied" for h in self.hunks)


@dataclass
class TargetResult:
    target: Target
    entries: list[EntryResult] = field(default_factory=list)
    error: str | None = None  # the target could not be exported (a gap in the snapshot)
    seconds: float = 0.0
    date: str = ""  # the target commit's committer date (ISO 8601)
    same_as: str | None = None  # another target of this upstream at the same commit

    def count(self, status: str) -> int:
        return sum(e.status == status for e in self.entries)


def try_target(
    lock: Lockfile,
    name: str,
    resolved: list[ResolvedEntry],
    target: Target,
    settings: Settings,
) -> TargetResult:
    """Export `name` at `target.commit` into a temporary work tree and try every entry."""
    pin = lock.get(name)
    moved = Lockfile(
        lock.path,
        tuple(
            dataclasses.replace(p, commit=target.commit, tree=None, ref=target.ref)
            if p.name == name
            else p
            for p in lock.pins
        ),
    )
    result = TargetResult(target)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"sglforge-canary-{name}-") as tmp:
        try:
            tree = export_source(moved, name, Path(tmp) / name, settings, with_submodules=False)
        except SglforgeError as exc:
            result.error = f"cannot export {pin.url} at {target.commit}: {exc}"
            result.seconds = time.monotonic() - start
            return result
        result.date = git_out("log", "-1", "--format=%cI", cwd=tree.path)
        result.entries = try_entries(tree.path, resolved)
    result.seconds = time.monotonic() - start
    return result


def try_entries(tree: Path, resolved: list[ResolvedEntry]) -> list[EntryResult]:
    """Every entry in order on `tree`, each on top of the earlier ones that applied."""
    allowed = upstream_escapes(tree)  # links the target itself ships pointing out
    skipped: list[str] = []
    results = []
    for item in resolved:
        result = _try_entry(tree, item, allowed, tuple(skipped))
        if result.status != "applies" and result.status != "upstream":
            skipped.append(item.entry.label)
        results.append(result)
    return results


def _try_entry(
    tree: Path, item: ResolvedEntry, allowed: dict[str, bytes], skipped: tuple[str, ...]
) -> EntryResult:
    result = _tried(tree, item, allowed, skipped)
    per_file = {path: max(len(f.hunks), 1) for f in item.files for path in f.paths}
    failed = sum(per_file.get(h.file, 1) if h.hunk is None else 1 for h in result.hunks)
    return dataclasses.replace(
        result, total_hunks=sum(max(len(f.hunks), 1) for f in item.files), failed_hunks=failed
    )


def _tried(
    tree: Path, item: ResolvedEntry, allowed: dict[str, bytes], skipped: tuple[str, ...]
) -> EntryResult:
    label, where = item.entry.label, item.where
    try:
        check_paths(tree, [item])
    except PatchFailed as exc:
        return EntryResult(label, where, "refused", after_skipped=skipped, detail=str(exc))
    failures = hunk_failures(tree, item)
    if not failures:
        parent = git_out("rev-parse", "HEAD", cwd=tree)
        try:
            commit_entry(tree, item)
        except PatchFailed as exc:  # git refused what the hunk check accepted (binary, mode)
            restore_tree(tree, parent)
            hunk = HunkResult(item.files[0].path, None, "git")
            return EntryResult(label, where, "conflicts", (hunk,), skipped, str(exc))
        try:
            check_links_in_tree(tree, item, parent, allowed)
        except PatchFailed as exc:
            restore_tree(tree, parent)
            return EntryResult(label, where, "refused", after_skipped=skipped, detail=str(exc))
        return EntryResult(label, where, "applies", after_skipped=skipped)
    if reverse_applies(tree, item):
        return EntryResult(label, where, "upstream", after_skipped=skipped)
    hunks = tuple(HunkResult(f.file, f.hunk, f.reason) for f in failures)
    detail = "\n".join(f.message for f in failures)
    return EntryResult(label, where, "conflicts", hunks, skipped, detail)


def reverse_applies(tree: Path, item: ResolvedEntry) -> bool:
    """The entry's reverse applies strictly to `tree`: its change is already there."""
    proc = git(
        "apply",
        STRIP,
        "-R",
        "--check",
        "--whitespace=nowarn",
        "-",
        cwd=tree,
        input=item.diff,
        check=False,
        config=STRICT,
    )
    return proc.returncode == 0


@dataclass
class UpstreamResult:
    name: str
    url: str | None
    pin: str | None  # the pinned commit (or sha256:<hex> of an archive pin)
    series: str  # patches/<name>/series, relative to the project
    entries: int = 0
    patchset: str = ""
    refs_from: str = ""  # where the tags and head were read (a mirror path, URL, the cache)
    newest_tags: tuple[str, ...] = ()  # the newest version tags seen, newest last (up to 5)
    version_tags: int = 0
    other_tags: int = 0  # tags whose names are not versions (not releases)
    targets: list[TargetResult] = field(default_factory=list)
    error: str | None = None  # bad input or an unreachable upstream: exit status 2
    note: str | None = None  # why nothing was tried (no series; not a git pin)


def canary_upstream(
    project: Project,
    lock: Lockfile,
    name: str,
    settings: Settings,
    *,
    offline: bool = False,
    branch: str | None = None,
) -> UpstreamResult:
    """Targets of `name` and its series tried on each; every problem lands in the result."""
    pin = lock.get(name)
    path = project.series_file(name)
    result = UpstreamResult(
        name, pin.url if pin.is_git else None, pin.identity, _rel(project, path)
    )
    if not pin.is_git:
        result.note = "not a git pin (an archive or sdist): no tags or branch to try"
        return result
    try:
        series = load_series(project, name)
        result.entries, result.patchset = len(series.entries), series.patchset8
        if not series.entries and offline:  # targets are recorded only for a series
            result.note = "no series: nothing to try"
            return result
        cache = SourceCache(settings.cache_dir)
        refs = (
            cached_refs(cache, pin.url, branch)
            if offline
            else remote_refs(pin.url, settings, branch)
        )
        result.refs_from, result.other_tags = refs.source, refs.ignored_tags
        result.version_tags, result.newest_tags = (
            len(refs.tags),
            tuple(t.name for t in refs.tags[-5:]),
        )
        targets = pick_targets(refs)
        if not targets:
            raise SglforgeError(f"{pin.url}: no release tag and no branch head to try")
        result.targets = [TargetResult(t) for t in targets]
        if not series.entries:
            result.note = "no series: nothing to try"
            return result
        fetch_sources(
            lock,
            [name],
            settings,
            offline=offline,
            extra=backport_wants([series]),
            with_children=False,
        )
        with cache.locked():
            fetch_targets(cache, pin.url, targets, settings, offline)
        resolved = resolve_entries(series, settings)
    except SglforgeError as exc:
        result.error = str(exc)
        return result
    tried: dict[str, TargetResult] = {}
    for index, target in enumerate(targets):
        if target.commit in tried:  # the head is the release: one try, reported twice
            same = tried[target.commit]
            result.targets[index] = dataclasses.replace(
                same, target=target, same_as=f"{same.target.kind} {same.target.ref}", seconds=0.0
            )
            continue
        tried_here = try_target(lock, name, resolved, target, settings)
        root = f"{project.root}/"
        tried_here.entries = [  # series paths relative to the project, as the table shows them
            dataclasses.replace(e, where=e.where.removeprefix(root)) for e in tried_here.entries
        ]
        result.targets[index] = tried[target.commit] = tried_here
    return result


def _rel(project: Project, path: Path) -> str:
    try:
        return str(path.relative_to(project.root))
    except ValueError:
        return str(path)


def exit_status(results: list[UpstreamResult]) -> int:
    """2: bad input or an unreachable upstream/target (or an entry refused); 1: a conflict
    or a drop candidate; 0: every entry applies on every target."""
    targets = [t for r in results for t in r.targets]
    if any(r.error for r in results) or any(t.error or t.count("refused") for t in targets):
        return 2
    if any(t.count("conflicts") or t.count("upstream") for t in targets):
        return 1
    return 0


def document(results: list[UpstreamResult]) -> dict:
    """The report (schema sglforge-canary, docs/reference.md), without schema/version."""
    return {
        "exit_status": exit_status(results),
        "mode": "cumulative",  # each entry on the target plus the earlier entries that applied
        "upstreams": [_upstream_doc(r) for r in results],
    }


def _upstream_doc(result: UpstreamResult) -> dict:
    body = {
        key: getattr(result, key)
        for key in ("name", "url", "pin", "series", "entries", "patchset", "error", "note")
    }
    body["refs"] = {
        "from": result.refs_from,
        "version_tags": result.version_tags,
        "other_tags": result.other_tags,
        "newest": list(result.newest_tags),
    }
    body["targets"] = [_target_doc(t) for t in result.targets]
    return body


def _target_doc(result: TargetResult) -> dict:
    target = result.target
    return {
        "kind": target.kind,
        "ref": target.ref,
        "commit": target.commit,
        "date": result.date,
        "error": result.error,
        "same_as": result.same_as,
        "seconds": round(result.seconds, 2),
        "counts": {status: result.count(status) for status in STATUSES},
        "entries": [
            {
                "entry": e.entry,
                "where": e.where,
                "status": e.status,
                "files": e.files,
                "total_hunks": e.total_hunks,
                "failed_hunks": e.failed_hunks,
                "already_applied_hunks": e.already_applied,
                "hunks": [{"file": h.file, "hunk": h.hunk, "reason": h.reason} for h in e.hunks],
                "after_skipped": list(e.after_skipped),
                "detail": e.detail,
            }
            for e in result.entries
        ],
    }
