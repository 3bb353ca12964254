"""An exported git tree is the pinned tree, or the export fails (issue 32, item 3).

`git checkout` exits 0 after `error: unable to read sha1 file of <path>` and leaves the file
out; `checkout-index` exits 1 for the same; git never re-hashes what it read from a loose
object, so a damaged object can also write the wrong bytes. So after every checkout the files
on disk are hashed back into a throwaway index of the pinned commit (`read-tree` leaves its
stat data empty, so `update-index --refresh` reads every file, through the same attributes
and filters the checkout used), and any file missing, different or extra is an error naming
the source and the path; the index then has to write exactly the recorded tree id.

Cost: one read and hash of every exported file (docs/reproducibility.md has the figure on a
real tree); it runs before submodules are placed, each submodule checked on its own.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.git import git, git_out, rev, stderr_text

SHOWN = 20  # paths listed in an error; the count says how many more
_GIT_ERROR = re.compile(r"^(?:error|fatal):", re.MULTILINE)
_STATUS = {"D": "missing", "M": "differs", "T": "type differs"}


def checkout_errors(proc) -> list[str]:
    """The error lines of a git checkout, however it exited."""
    text = stderr_text(proc)
    return [line for line in text.splitlines() if _GIT_ERROR.match(line)]


def _differences(git_dir: Path, work_tree: Path, env: dict[str, str]) -> list[tuple[str, str, str]]:
    """(status, path, expected object id) for each file of the index not matching the disk,
    then ("extra", path, "") for each file on disk the tree does not have."""
    opts = {"git_dir": git_dir, "env": env}
    wt = f"--work-tree={work_tree}"
    # stat data is empty after read-tree: every file is read and hashed here
    git(wt, "update-index", "-q", "--refresh", **opts, what=f"hashing {work_tree}")
    raw = git(wt, "diff-files", "-z", "--no-renames", **opts).stdout.decode(errors="replace")
    fields = raw.split("\0")
    found = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta:
            continue
        _old_mode, _new_mode, old_id, _new_id, status = meta.lstrip(":").split()
        found.append((_STATUS.get(status[0], status), path, old_id))
    found = _raw_matches_dropped(found, git_dir, work_tree, env)
    others = git(wt, "ls-files", "--others", "-z", **opts).stdout.decode(errors="replace")
    found += [("extra", path, "") for path in others.split("\0") if path]
    return found


def _raw_matches_dropped(
    found: list[tuple[str, str, str]], git_dir: Path, work_tree: Path, env: dict[str, str]
) -> list[tuple[str, str, str]]:
    """Without the files whose bytes on disk are exactly their blob's: the comparison above
    hashes through the tree's attributes, and a file committed with CRLF under `* text` is
    'modified' that way (git status says so too on a fresh clone) though checkout wrote the
    committed bytes. A conversion checkout applies (`eol=crlf`) is what the first pass
    matches; this one matches the bytes as committed."""
    differs = [entry for entry in found if entry[0] == "differs"]
    if not differs:
        return found
    paths = "".join(f"{path}\n" for _, path, _ in differs)
    if any("\n" in path for _, path, _ in differs):  # --stdin-paths is line-based
        return found
    raw = (
        git(
            "hash-object",
            "--no-filters",
            "--stdin-paths",
            cwd=work_tree,
            git_dir=git_dir,
            env=env,
            input=paths.encode(),
            what=f"hashing {work_tree}",
        )
        .stdout.decode()
        .split()
    )
    same = {path for (_, path, oid), got in zip(differs, raw) if got == oid}
    return [entry for entry in found if entry[1] not in same]


def _describe(found: list[tuple[str, str, str]], git_dir: Path) -> list[str]:
    """One line per difference (the first SHOWN), saying what the cache holds."""
    lines = []
    for status, path, oid in found[:SHOWN]:
        line = f"  {status:8} {path}"
        if oid and status in ("missing", "differs"):
            present = git("cat-file", "-e", "--end-of-options", oid, git_dir=git_dir, check=False)
            if present.returncode != 0:
                line += f" (object {oid} is not in the source cache)"
            elif status == "differs":
                line += f" (its bytes do not hash to {oid}: the cached object is damaged)"
        lines.append(line)
    if len(found) > SHOWN:
        lines.append(f"  ... and {len(found) - SHOWN} more")
    return lines


def check_exported_tree(
    label: str,
    git_dir: Path,
    work_tree: Path,
    commit: str,
    expected_tree: str,
    *,
    cache_git_dir: Path,
    git_said: list[str] = (),
) -> None:
    """Fail unless the files under `work_tree` are exactly `commit`'s tree `expected_tree`.

    `label` names the source and where it goes ("alpha.beta (third_party/beta of alpha)"),
    paths in the error are relative to its tree. `git_dir` is the repository the checkout
    used (the export's own, or the cache for a placed submodule); `cache_git_dir` is the
    cache repository the hint says to remove.
    `git_said`: error lines the checkout printed; an export with any of them fails too.
    """
    with tempfile.TemporaryDirectory(prefix="sglforge-exportcheck-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git("read-tree", "--end-of-options", commit, git_dir=git_dir, env=env, what=label)
        found = _differences(git_dir, work_tree, env)
        tree = git_out("write-tree", git_dir=git_dir, env=env) if not found else None
    if not found and tree == expected_tree and not git_said:
        return
    lines = _describe(found, git_dir)
    if tree is not None and tree != expected_tree:
        lines.append(f"  the checkout's index writes tree {tree}")
    if git_said:
        lines += ["  git said:"] + [f"    {line}" for line in git_said[:SHOWN]]
    raise SglforgeError(
        f"{label}: the exported files are not commit {commit} (tree {expected_tree}):\n"
        + "\n".join(lines),
        hint=f"the source cache is damaged: remove {cache_git_dir} and run `nox -s fetch` "
        "again; nothing was exported",
    )


def checkout_pin(label: str, work_tree: Path, commit: str) -> list[str]:
    """`git checkout --detach commit` in the export's own repository; an exit status other
    than 0 is an error naming the source, error lines printed with status 0 are returned."""
    proc = git("checkout", "--quiet", "--detach", rev(commit), cwd=work_tree, check=False)
    if proc.returncode != 0:
        raise SglforgeError(
            f"{label}: git checkout of {commit} failed:\n{stderr_text(proc)}",
            hint="the source cache may be damaged: remove it and run `nox -s fetch` again",
        )
    return checkout_errors(proc)
