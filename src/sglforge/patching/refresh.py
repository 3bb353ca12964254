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
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_bytes, remove_tree
from sglforge.base.git import COMMITTER, git, git_out, rev
from sglforge.inputs.pins import FULL_SHA, Lockfile, Pin, rewrite_pin
from sglforge.inputs.project import Project
from sglforge.inputs.settings import Settings
from sglforge.patching.apply import STRICT, PatchFailed, ResolvedEntry, apply_series, check_hunks
from sglforge.patching.backport import resolve_backport
from sglforge.patching.gitpaths import STRIP
from sglforge.patching.series import Backport, LocalPatch, PatchSeries, backport_wants, load_series
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import export_source
from sglforge.sources.fetch import GitWant, fetch_commit, fetch_sources, gitlinks

FORMAT_PATCH = [
    "format-patch",
    "-1",
    "--stdout",
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--no-renames",
    "--src-prefix=a/",
    "--dst-prefix=b/",
]


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
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-C",
        commit,
        cwd=tree,
        config=STRICT,
        env=_commit_env(tree, commit),
    )
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


def _split_backport(
    tree: Path, item: ResolvedEntry, picked: str, failing: list[str], onto: str, number: int
) -> tuple[Backport | None, str, bytes]:
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
        git(
            "apply",
            STRIP,
            "--index",
            "--whitespace=nowarn",
            "-",
            cwd=tree,
            input=diff,
            config=STRICT,
        )
        git(
            "commit",
            "--quiet",
            "--no-verify",
            "-C",
            picked,
            cwd=tree,
            config=STRICT,
            env=_commit_env(tree, picked),
        )
    git("read-tree", "--reset", "-u", picked, cwd=tree)  # index + files = the merged result
    today = dt.date.today().isoformat()
    name = f"{number:04d}-resolve-backport-{entry.commit[:12]}.patch"
    description = textwrap.fill(
        f"Our resolution of the files of upstream commit {entry.commit} that do not apply "
        f"strictly to {onto}: {', '.join(failing)}. The backport entry excludes them. Drop "
        f"this patch together with the backport once the pin contains {entry.commit[:12]}.",
        width=88,
        initial_indent="Description: ",
        subsequent_indent=" ",
    )
    message = (
        f"Resolve backport {entry.commit[:12]} onto {onto[:12]}\n\n{description}\n"
        f"Origin: backport, {entry.url}/commit/{entry.commit}\n"
        f"Forwarded: not-needed\nLast-Update: {today}\n"
    )
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-m",
        message,
        cwd=tree,
        config=STRICT,
        env=dict(
            COMMITTER, GIT_AUTHOR_NAME="sglforge refresh", GIT_AUTHOR_EMAIL="sglforge@localhost"
        ),
    )
    patch = git(*FORMAT_PATCH, "HEAD", cwd=tree).stdout
    return (narrowed if kept else None), name, patch


STATE_FILE = "sglforge-refresh.json"


@dataclass
class RefreshState:
    """Progress of one refresh, kept in the scratch tree's .git so `--continue` can resume."""

    upstream: str
    old: str
    onto: str
    series_digest: str
    next_index: int = 0  # first entry not yet rebased
    pending: dict | None = None  # {"index", "commit", "failing"} of a stopped entry
    new_lines: dict[str, list[str]] = field(default_factory=dict)  # series line -> lines
    new_files: dict[str, str] = field(default_factory=dict)  # patch name -> text (latin-1)
    next_number: int = 1
    lines: list[str] = field(default_factory=list)

    @staticmethod
    def path(tree: Path) -> Path:
        return tree / ".git" / STATE_FILE

    def save(self, tree: Path) -> None:
        atomic_write_bytes(self.path(tree), json.dumps(dataclasses.asdict(self)).encode())

    @classmethod
    def load(cls, tree: Path) -> RefreshState | None:
        path = cls.path(tree)
        return cls(**json.loads(path.read_text())) if path.exists() else None


def refresh_workdir(settings: Settings, upstream: str) -> Path:
    return BuildRoot(settings.build_root).refresh(upstream)


def abort_refresh(settings: Settings, upstream: str) -> str:
    workdir = refresh_workdir(settings, upstream)
    if RefreshState.load(workdir) is None:
        raise SglforgeError(f"no refresh of {upstream} is in progress ({workdir})")
    remove_tree(workdir)
    return f"aborted the refresh of {upstream}; patches/ and the lockfile were never changed"


def refresh_series(
    project: Project,
    lock: Lockfile,
    upstream: str,
    onto: str | None,
    settings: Settings,
    *,
    offline: bool = False,
    resume: bool = False,
) -> RefreshResult:
    """Start a refresh onto `onto`, or (`resume`) continue one that stopped on a conflict."""
    pin = lock.get(upstream)
    if not pin.is_git or pin.parent is not None:
        raise SglforgeError(f"'{upstream}' is not a git upstream; only upstream series refresh")
    series = load_series(project, upstream)
    workdir = refresh_workdir(settings, upstream)
    state = RefreshState.load(workdir)
    if resume:
        tree = workdir
        state = _resumed_state(state, pin, series, workdir)
    else:
        _check_none_in_progress(state, upstream, workdir)
        onto = _checked_onto(onto)
        _fetch_onto(lock, pin, series, onto, settings, offline)
        tree = _import_series(lock, upstream, series, onto, settings, workdir)
        state = _new_state(pin, series, onto)
        state.save(tree)
    _rebase_series(project, series, state, settings, tree)
    result = RefreshResult(upstream, pin.commit, state.onto, list(state.lines))
    _export(project, lock, series, state, settings, result)
    remove_tree(workdir)
    return result


def _resumed_state(
    state: RefreshState | None, pin: Pin, series: PatchSeries, workdir: Path
) -> RefreshState:
    """The stopped refresh to continue, which must have started from this series and pin."""
    if state is None:
        raise SglforgeError(f"no refresh of {pin.name} to continue ({workdir})")
    if state.series_digest != series.digest or state.old != pin.commit:
        raise SglforgeError(
            f"the series or pin of {pin.name} changed since the refresh "
            "started; run `patches refresh --abort` and start again"
        )
    return state


def _check_none_in_progress(state: RefreshState | None, upstream: str, workdir: Path) -> None:
    if state is not None:
        raise SglforgeError(
            f"a refresh of {upstream} onto {state.onto[:12]} is in progress in {workdir}",
            hint="finish it with `patches refresh UPSTREAM --continue` or "
            "drop it with `patches refresh UPSTREAM --abort`",
        )


def _checked_onto(onto: str | None) -> str:
    if not onto or not FULL_SHA.fullmatch(onto):
        raise SglforgeError(f"--onto {onto!r}: give the full 40-hex commit id of the new pin")
    return onto


def _fetch_onto(
    lock: Lockfile,
    pin: Pin,
    series: PatchSeries,
    onto: str,
    settings: Settings,
    offline: bool,
) -> None:
    """The old pin, the series' backports and the commit `onto` into the source cache."""
    upstream = pin.name
    fetch_sources(
        lock,
        [upstream],
        settings,
        offline=offline,
        extra=backport_wants([series]),
        with_children=False,
    )
    cache = SourceCache(settings.cache_dir)
    # A wrong --onto is the caller's mistake, not the pin's: say so.
    try:
        with cache.locked():
            fetched = fetch_commit(
                cache,
                GitWant(pin.url, onto, f"{upstream}"),
                settings,
                offline,
                hint=f"--onto must name a commit of {pin.url}; "
                "patches/ and the lockfile were not changed",
            )
    except SglforgeError as exc:
        raise SglforgeError(f"--onto {onto}: {exc.args[0]}", hint=exc.hint) from None
    if fetched == "missing":
        raise SglforgeError(
            f"--onto {onto}: offline, and {upstream} commit {onto} is not in the cache"
        )


def _import_series(
    lock: Lockfile,
    upstream: str,
    series: PatchSeries,
    onto: str,
    settings: Settings,
    workdir: Path,
) -> Path:
    """Step 1: the series applied strictly on the old pin (branch patch-queue/old), and the
    scratch tree checked out at `onto`; returns the tree."""
    tree = export_source(lock, upstream, workdir, settings, with_submodules=False).path
    apply_series(tree, series, settings)  # import: strict, on the old pin
    git("branch", "--quiet", "-f", "patch-queue/old", "HEAD", cwd=tree)
    git("checkout", "--quiet", "--detach", rev(onto), cwd=tree)
    return tree


def _new_state(pin: Pin, series: PatchSeries, onto: str) -> RefreshState:
    """A refresh's state before its first entry; new local patches number after the last."""
    numbers = [
        int(e.name[:4])
        for e in series.entries
        if isinstance(e, LocalPatch) and e.name[:4].isdigit()
    ]
    return RefreshState(
        pin.name, pin.commit, onto, series.digest, next_number=max(numbers, default=0) + 1
    )


def _rebase_series(
    project: Project, series: PatchSeries, state: RefreshState, settings: Settings, tree: Path
) -> None:
    """Step 2: replay each entry not yet rebased onto `state.onto`, one at a time, recording
    each in the state (saved after every entry)."""
    old_commits = git_out(
        "rev-list", "--reverse", "--end-of-options", f"{state.old}..patch-queue/old", cwd=tree
    ).split()
    for index in range(state.next_index, len(series.entries)):
        entry = series.entries[index]
        where = series.where(entry)
        item = None
        if isinstance(entry, Backport):
            backport = resolve_backport(entry, settings, where)
            item = ResolvedEntry(entry, where, backport.diff, backport.files, backport.info)
        picked, failing = _pick_entry(project, state, index, item, tree, old_commits[index], where)
        state.pending = None
        _record(state, entry, item, picked, failing, tree, state.onto)
        state.next_index = index + 1
        state.save(tree)


def _pick_entry(
    project: Project,
    state: RefreshState,
    index: int,
    item: ResolvedEntry | None,
    tree: Path,
    old_commit: str,
    where: str,
) -> tuple[str | None, list[str]]:
    """(the entry's rebased commit or None when it became empty, the files of a backport that
    no longer apply strictly): what the user resolved for the entry the refresh stopped at,
    else the 3-way replay of its old commit. A conflict saves the state and stops."""
    if state.pending and state.pending["index"] == index:
        failing = state.pending["failing"]
        return _finish_by_hand(tree, old_commit, where), failing
    failing = _strictly_failing_files(tree, item) if item else []
    try:
        return _replay(tree, old_commit), failing
    except SglforgeError as exc:
        state.next_index = index
        state.pending = {"index": index, "failing": failing}
        state.save(tree)
        upstream = state.upstream
        raise SglforgeError(
            f"refresh of {upstream} onto {state.onto[:12]} stopped at {where}: {exc}. "
            f"Nothing in {project.patches_dir / upstream} or the lockfile was changed.",
            hint=f"resolve the conflicts in {tree} and `git add` the files, then run "
            f"`patches refresh {upstream} --continue` (or `--abort`)",
        ) from None


def _finish_by_hand(tree: Path, old_commit: str, where: str) -> str | None:
    """Commit what the user resolved for a stopped entry (None when it ended up empty)."""
    conflicted = _conflicts(tree)
    if conflicted:
        raise SglforgeError(
            f"{where}: still unresolved in {tree}: {', '.join(conflicted)}",
            hint="edit the files, `git add` them, and run --continue again",
        )
    git("add", "-u", cwd=tree)
    if git("diff", "--cached", "--quiet", cwd=tree, check=False).returncode == 0:
        git("cherry-pick", "--quit", cwd=tree, check=False)
        return None
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-C",
        old_commit,
        cwd=tree,
        config=STRICT,
        env=_commit_env(tree, old_commit),
    )
    git("cherry-pick", "--quit", cwd=tree, check=False)
    return git_out("rev-parse", "HEAD", cwd=tree)


def _record(
    state: RefreshState, entry, item, picked: str | None, failing: list[str], tree: Path, onto: str
) -> None:
    """Turn one rebased entry into its new series line(s) and patch file."""
    key = str(entry.line)
    if picked is None:
        state.new_lines[key] = [
            (f"# dropped by refresh onto {onto[:12]} (already upstream): {entry.label}")
        ]
        state.lines.append(f"dropped   {entry.label} (its change is already in {onto[:12]})")
    elif isinstance(entry, LocalPatch):
        data = git(*FORMAT_PATCH, picked, cwd=tree).stdout
        state.new_files[entry.name] = data.decode("latin-1")
        state.new_lines[key] = [entry.name]
        changed = "regenerated" if data != entry.data else "unchanged"
        state.lines.append(f"{changed:<9} {entry.name}")
    elif failing:
        narrowed, name, patch = _split_backport(
            tree, item, picked, failing, onto, state.next_number
        )
        state.next_number += 1
        state.new_files[name] = patch.decode("latin-1")
        head = (
            narrowed.render()
            if narrowed
            else (
                f"# {entry.render()}  # no file applies strictly to {onto[:12]}; carried by {name}"
            )
        )
        state.new_lines[key] = [head, name]
        state.lines.append(
            f"split     {entry.label}: {', '.join(failing)} no longer apply "
            f"strictly -> excluded, resolution in {name}"
        )
    else:
        state.new_lines[key] = [entry.render()]
        state.lines.append(f"kept      {entry.label} (applies strictly)")


def _export(
    project: Project,
    lock: Lockfile,
    series,
    state: RefreshState,
    settings: Settings,
    result: RefreshResult,
) -> None:
    """Check the new series on a fresh export of the new pin, then write it and the pin."""
    upstream, onto = state.upstream, state.onto
    series_text = []
    for number, line in enumerate(series.text.decode().splitlines(), 1):
        series_text += state.new_lines.get(str(number), [line])
    new_files = {name: text.encode("latin-1") for name, text in state.new_files.items()}
    staged_project = Project(BuildRoot(settings.build_root).refresh(upstream, "export"))
    remove_tree(staged_project.root)
    staged_dir = staged_project.patches_dir / upstream
    staged_dir.mkdir(parents=True)
    for name, data in new_files.items():
        (staged_dir / name).write_bytes(data)
    (staged_dir / "series").write_text("\n".join(series_text) + "\n")
    check_tree = BuildRoot(settings.build_root).refresh(upstream, "check")
    new_lock = Lockfile(
        lock.path,
        tuple(
            p if p.name != upstream else dataclasses.replace(p, commit=onto, tree=None)
            for p in lock.pins
        ),
    )
    export_source(new_lock, upstream, check_tree, settings, with_submodules=False)
    apply_series(check_tree, load_series(staged_project, upstream), settings)
    remove_tree(check_tree)

    patch_dir = project.patches_dir / upstream
    for entry in series.entries:
        if isinstance(entry, LocalPatch) and entry.name not in new_files:
            (patch_dir / entry.name).unlink()
    for name, data in new_files.items():
        atomic_write_bytes(patch_dir / name, data)
    atomic_write_bytes(patch_dir / "series", (staged_dir / "series").read_bytes())
    remove_tree(staged_project.root)

    pin = lock.get(upstream)
    git_dir = SourceCache(settings.cache_dir).git_dir(pin.url)
    updates = {
        "commit": onto,
        "date": git_out("log", "-1", "--format=%cs", "--end-of-options", onto, git_dir=git_dir),
    }
    if pin.tree:
        updates["tree"] = git_out("rev-parse", rev(f"{onto}^{{tree}}"), git_dir=git_dir)
    rewrite_pin(lock.path, upstream, updates)
    result.lines.append(f"pin       {lock.path.name}: {upstream} commit = {onto}")
    pinned_subs = {p.path: p for p in lock.submodules(upstream)}
    for path, commit in sorted(gitlinks(git_dir, onto).items()):
        sub = pinned_subs.get(path)
        if sub is None:
            result.lines.append(f"note      new submodule {path} @ {commit}: add a pin")
        elif sub.commit != commit:
            result.lines.append(
                f"note      {sub.name}: {onto[:12]} records {commit}, pinned "
                f"{sub.commit}; update the pin if the bump is wanted"
            )
