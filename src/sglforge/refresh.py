"""`patches refresh UPSTREAM --onto COMMIT`: rebase a series onto a new pin, gbp-pq style.

1. import: export the old pin and apply the series strictly (one commit per entry);
2. rebase: replay each entry's commit onto COMMIT with git's 3-way merge, one at a time;
   - an entry whose change is already upstream becomes empty and is dropped;
   - a conflict stops the refresh: nothing in patches/ or the lockfile changes, and the
     scratch tree is kept for inspection;
   - a backport that no longer applies strictly but merges cleanly is split: the backport
     keeps the files that still apply (the rest go to `exclude=`), and a new local patch
     carries our resolution of the other files;
3. export: regenerate local patches from the rebased commits, rewrite the series (comments
   kept) and move the pin in the lockfile — all only after every entry rebased.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from sglforge import sources
from sglforge.apply import STRICT, PatchFailed, ResolvedEntry, apply_series, check_hunks
from sglforge.backport import resolve_backport
from sglforge.config import Settings
from sglforge.errors import SglforgeError
from sglforge.fsutil import atomic_write_bytes, remove_tree
from sglforge.git import COMMITTER, git, git_out
from sglforge.pins import FULL_SHA, Lockfile, rewrite_pin
from sglforge.project import Project
from sglforge.series import Backport, LocalPatch, backport_wants, load_series

FORMAT_PATCH = ["format-patch", "-1", "--stdout", "--zero-commit", "--no-signature",
                "--full-index", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/"]


@dataclass
class RefreshResult:
    upstream: str
    old: str
    new: str
    lines: list[str] = field(default_factory=list)

    def summary(self) -> str:
        head = f"refreshed {self.upstream}: {self.old[:12]} -> {self.new[:12]}"
        return "\n".join([head] + [f"  {line}" for line in self.lines])


def _commit_env(tree: Path, commit: str) -> dict[str, str]:
    date = git_out("log", "-1", "--format=%ad", "--date=raw", commit, cwd=tree)
    return dict(COMMITTER, GIT_COMMITTER_DATE=date)


def _conflicts(tree: Path) -> list[str]:
    return git_out("diff", "--name-only", "--diff-filter=U", cwd=tree).splitlines()


def _replay(tree: Path, commit: str) -> str | None:
    """Cherry-pick `commit` onto HEAD; return the new commit, or None if it became empty.

    Raises SglforgeError listing conflicted files when the 3-way merge stops.
    """
    proc = git("cherry-pick", "--no-commit", commit, cwd=tree, check=False, config=STRICT)
    if proc.returncode != 0:
        conflicted = _conflicts(tree)
        if conflicted:
            raise SglforgeError("conflicts in " + ", ".join(conflicted))
        raise SglforgeError(proc.stderr.decode(errors="replace").strip())
    if git("diff", "--cached", "--quiet", cwd=tree, check=False).returncode == 0:
        git("reset", "--quiet", "--hard", "HEAD", cwd=tree)
        return None
    git("commit", "--quiet", "--no-verify", "-C", commit, cwd=tree, config=STRICT,
        env=_commit_env(tree, commit))
    return git_out("rev-parse", "HEAD", cwd=tree)


def _strictly_failing_files(tree: Path, item: ResolvedEntry) -> list[str]:
    failing = []
    for file in item.files:
        single = ResolvedEntry(item.entry, item.where, file.raw, [file], item.info)
        try:
            check_hunks(tree, single)
        except PatchFailed:
            failing.append(file.path)
    return failing


def _split_backport(tree: Path, item: ResolvedEntry, picked: str, failing: list[str],
                    onto: str, number: int) -> tuple[Backport | None, str, bytes]:
    """Returns (narrowed backport or None when no file still applies, patch name, patch)."""
    # Rewrite the merged backport commit as (strict backport minus `failing`) + resolution.
    entry = item.entry
    assert isinstance(entry, Backport)
    excludes = tuple(dict.fromkeys(entry.excludes + tuple(failing)))
    narrowed = Backport(entry.url, entry.commit, entry.sha256, excludes, entry.line)
    git("reset", "--quiet", "--hard", f"{picked}^", cwd=tree)
    kept = [f for f in item.files if f.path not in failing]
    if kept:
        diff = b"".join(f.raw for f in kept)
        git("apply", "--index", "--whitespace=nowarn", "-", cwd=tree, input=diff, config=STRICT)
        git("commit", "--quiet", "--no-verify", "-C", picked, cwd=tree, config=STRICT,
            env=_commit_env(tree, picked))
    git("read-tree", "--reset", "-u", picked, cwd=tree)  # index + files = the merged result
    today = dt.date.today().isoformat()
    name = f"{number:04d}-resolve-backport-{entry.commit[:12]}.patch"
    message = (
        f"Resolve backport {entry.commit[:12]} onto {onto[:12]}\n\n"
        f"Description: Our resolution of the files of upstream commit {entry.commit} that do\n"
        f" not apply strictly to {onto}: {', '.join(failing)}. The backport entry\n"
        f" excludes them. Drop this patch together with the backport once the pin contains\n"
        f" {entry.commit[:12]}.\n"
        f"Origin: backport, {entry.url}/commit/{entry.commit}\n"
        f"Forwarded: not-needed\nLast-Update: {today}\n")
    git("commit", "--quiet", "--no-verify", "-m", message, cwd=tree, config=STRICT,
        env=dict(COMMITTER, GIT_AUTHOR_NAME="sglforge refresh",
                 GIT_AUTHOR_EMAIL="sglforge@localhost"))
    patch = git(*FORMAT_PATCH, "HEAD", cwd=tree).stdout
    return (narrowed if kept else None), name, patch


def refresh_series(project: Project, lock: Lockfile, upstream: str, onto: str,
                   settings: Settings, *, offline: bool = False) -> RefreshResult:
    pin = lock.get(upstream)
    if not pin.is_git or pin.parent is not None:
        raise SglforgeError(f"'{upstream}' is not a git upstream; only upstream series refresh")
    if not FULL_SHA.fullmatch(onto):
        raise SglforgeError(f"--onto {onto!r}: give the full 40-hex commit id of the new pin")
    series = load_series(project, upstream)
    result = RefreshResult(upstream, pin.commit, onto)
    sources.fetch_sources(lock, [upstream], settings, offline=offline,
                          extra=backport_wants([series]))
    cache = sources.SourceCache(settings.cache_dir)
    with cache.locked():
        state = sources.fetch_commit(cache, sources.GitWant(pin.url, onto, f"{upstream} --onto"),
                                     settings, offline)
    if state == "missing":
        raise SglforgeError(f"offline: {upstream} commit {onto} is not in the cache")

    workdir = settings.build_root / "refresh" / upstream
    tree = sources.export_source(lock, upstream, workdir, settings).path
    applied = apply_series(tree, series, settings)  # import: strict, on the old pin
    git("branch", "--quiet", "-f", "patch-queue/old", "HEAD", cwd=tree)
    git("checkout", "--quiet", "--detach", onto, cwd=tree)

    new_lines: dict[int, list[str]] = {}  # series line -> replacement lines
    new_files: dict[str, bytes] = {}
    numbers = [int(e.name[:4]) for e in series.entries
               if isinstance(e, LocalPatch) and e.name[:4].isdigit()]
    next_number = max(numbers, default=0) + 1
    for entry, old_commit in zip(series.entries, (a.commit for a in applied)):
        where = f"{series.path}:{entry.line} ({entry.label})"
        item = None
        if isinstance(entry, Backport):
            backport = resolve_backport(entry, settings, where)
            item = ResolvedEntry(entry, where, backport.diff, backport.files, backport.info)
            failing = _strictly_failing_files(tree, item)
        try:
            picked = _replay(tree, old_commit)
        except SglforgeError as exc:
            git("reset", "--quiet", "--hard", "HEAD", cwd=tree)
            raise SglforgeError(
                f"refresh of {upstream} onto {onto[:12]} stopped at {where}: {exc}. "
                f"Nothing in {project.patches_dir / upstream} or the lockfile was changed.",
                hint=f"the scratch tree {tree} has the series imported up to that entry "
                     "(branch patch-queue/old holds the old series); resolve by hand, or fix "
                     "the patch and refresh again") from None
        if picked is None:
            new_lines[entry.line] = [f"# dropped by refresh onto {onto[:12]} (already "
                                     f"upstream): {entry.label}"]
            result.lines.append(f"dropped   {entry.label} (its change is already in "
                                f"{onto[:12]})")
            continue
        if isinstance(entry, LocalPatch):
            new_files[entry.name] = git(*FORMAT_PATCH, picked, cwd=tree).stdout
            new_lines[entry.line] = [entry.name]
            changed = "regenerated" if new_files[entry.name] != entry.data else "unchanged"
            result.lines.append(f"{changed:<9} {entry.name}")
        elif failing:
            narrowed, name, patch = _split_backport(tree, item, picked, failing, onto,
                                                    next_number)
            next_number += 1
            new_files[name] = patch
            head = narrowed.render() if narrowed else (
                f"# {entry.render()}  # no file applies strictly to {onto[:12]}; "
                f"carried by {name}")
            new_lines[entry.line] = [head, name]
            result.lines.append(f"split     {entry.label}: {', '.join(failing)} no longer "
                                f"apply strictly -> excluded, resolution in {name}")
        else:
            new_lines[entry.line] = [entry.render()]
            result.lines.append(f"kept      {entry.label} (applies strictly)")

    # Export: verify the new series applies strictly to the new pin before writing anything.
    series_text = []
    for number, line in enumerate(series.text.decode().splitlines(), 1):
        series_text += new_lines.get(number, [line])
    patch_dir = project.patches_dir / upstream
    staged_project = Project(settings.build_root / "refresh" / f"{upstream}-export")
    remove_tree(staged_project.root)
    staged_dir = staged_project.patches_dir / upstream
    staged_dir.mkdir(parents=True)
    for name, data in new_files.items():
        (staged_dir / name).write_bytes(data)
    (staged_dir / "series").write_text("\n".join(series_text) + "\n")
    check_tree = settings.build_root / "refresh" / f"{upstream}-check"
    new_lock = Lockfile(lock.path, tuple(
        p if p.name != upstream else dataclasses.replace(p, commit=onto, tree=None)
        for p in lock.pins))
    sources.export_source(new_lock, upstream, check_tree, settings)
    apply_series(check_tree, load_series(staged_project, upstream), settings)
    remove_tree(check_tree)

    for entry in series.entries:
        if isinstance(entry, LocalPatch) and entry.name not in new_files:
            (patch_dir / entry.name).unlink()
    for name, data in new_files.items():
        atomic_write_bytes(patch_dir / name, data)
    atomic_write_bytes(patch_dir / "series", (staged_dir / "series").read_bytes())
    remove_tree(staged_project.root)

    git_dir = cache.git_dir(pin.url)
    updates = {"commit": onto,
               "date": git_out("log", "-1", "--format=%cs", onto, git_dir=git_dir)}
    if pin.tree:
        updates["tree"] = git_out("rev-parse", f"{onto}^{{tree}}", git_dir=git_dir)
    rewrite_pin(lock.path, upstream, updates)
    result.lines.append(f"pin       {lock.path.name}: {upstream} commit = {onto}")
    pinned_subs = {p.path: p for p in lock.submodules(upstream)}
    for path, commit in sorted(sources.gitlinks(git_dir, onto).items()):
        sub = pinned_subs.get(path)
        if sub is None:
            result.lines.append(f"note      new submodule {path} @ {commit}: add a pin")
        elif sub.commit != commit:
            result.lines.append(f"note      {sub.name}: {onto[:12]} records {commit}, pinned "
                                f"{sub.commit}; update the pin if the bump is wanted")
    remove_tree(workdir)
    return result
