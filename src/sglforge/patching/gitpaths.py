"""git's own reading of a patch's file names: the last word on which paths a patch writes.

sglforge reads names the way apply.c does (patching/diff.py), but a hostile patch only has to
find one corner where the two readings differ for every path check to look one directory
away from where git writes. So before anything is applied, git is asked: `git apply -p1
--numstat -z` lists, per file section, the name git will write (the new name; the old one for
a deletion), and the same with `-R` the name it reads (the old name; the new one for a
creation; -R lists the last section first), unquoted and NUL-terminated. Any difference from
sglforge's reading, in the number of sections or in one name, refuses the patch.

For an mbox, git am applies what `git mailinfo` extracts from the mail, not the file's bytes:
the mail must hold exactly one message whose extracted patch is the file's own tail, word for
word (a transfer-encoded or multipart mail would make git apply text sglforge never read).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.git import git
from sglforge.patching.diff import FilePatch

# The one strip level sglforge reads and git applies with (never git's guess: without an
# explicit -p, apply guesses -p0 for a plain diff whose names have no '/').
STRIP = "-p1"
# The settings git am uses to split the mail, pinned so a user's git config cannot move the
# boundary between message and patch.
MAIL_CONFIG = ["-c", "mailinfo.scissors=false", "-c", "core.autocrlf=false"]


@dataclass(frozen=True)
class GitNames:
    writes: str  # the new name (the old one for a deletion)
    reads: str  # the old name (the new one for a creation)


class PathsDisagree(SglforgeError):
    """git reads a patch's file names differently from sglforge: the patch is refused."""


def _numstat(diff: bytes, reverse: bool, scratch: Path) -> list[str]:
    args = ["apply", STRIP, "--numstat", "-z"] + (["-R"] if reverse else [])
    # Outside any repository (a prefix would change the names), nothing is touched: --numstat
    # only reads the patch.
    proc = git(
        *args,
        "-",
        cwd=scratch,
        input=diff,
        check=False,
        env={"GIT_CEILING_DIRECTORIES": str(scratch.parent)},
    )
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PathsDisagree(f"git cannot read the patch: {message[0] if message else '?'}")
    names = []
    for record in proc.stdout.split(b"\0")[:-1]:
        fields = record.split(b"\t", 2)
        if len(fields) != 3:
            raise PathsDisagree(f"unexpected `git apply --numstat` output {record[:80]!r}")
        names.append(fields[2].decode("utf-8", "surrogateescape"))
    return names


def git_names(diff: bytes) -> list[GitNames]:
    """Per file section, in order, the names git writes and reads."""
    with tempfile.TemporaryDirectory(prefix="sglforge-names-") as tmp:
        scratch = Path(tmp) / "outside-any-repo"
        scratch.mkdir()
        writes = _numstat(diff, False, scratch)
        reads = _numstat(diff, True, scratch)[::-1]  # -R also lists the sections last first
    if len(writes) != len(reads):  # cannot happen: -R changes names, not sections
        raise PathsDisagree("git reads a different number of files forwards and reversed")
    return [GitNames(w, r) for w, r in zip(writes, reads)]


def mail_patch(mbox: bytes) -> bytes:
    """The patch `git am` applies from `mbox` (one message; see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="sglforge-mail-") as tmp:
        work = Path(tmp)
        (work / "mail").write_bytes(mbox)
        (work / "split").mkdir()
        split = git(
            *MAIL_CONFIG,
            "mailsplit",
            "--keep-cr",
            f"-o{work / 'split'}",
            "--",
            str(work / "mail"),
            cwd=work,
            check=False,
        )
        messages = sorted((work / "split").iterdir())
        if split.returncode != 0 or not messages:
            raise PathsDisagree("git am finds no mail in it")
        if len(messages) != 1:
            raise PathsDisagree(
                f"git am would read {len(messages)} messages from it, not one "
                "(a line starting with 'From ' splits an mbox)"
            )
        info = git(
            *MAIL_CONFIG,
            "mailinfo",
            str(work / "msg"),
            str(work / "patch"),
            cwd=work,
            input=messages[0].read_bytes(),
            check=False,
        )
        if info.returncode != 0:
            raise PathsDisagree(
                "git mailinfo cannot read the mail: "
                + info.stderr.decode("utf-8", "replace").strip()[:200]
            )
        patch = (work / "patch").read_bytes()
    if not mbox.endswith(patch):
        raise PathsDisagree(
            "the patch git am would apply is not the text of the file (a "
            "transfer-encoded or multipart mail): write it with `git "
            "format-patch` as plain text"
        )
    return patch


def check_names(files: list[FilePatch], diff: bytes) -> None:
    """Refuse `diff` unless git reads exactly the file names sglforge read into `files`."""
    theirs = git_names(diff)
    ours = [GitNames(f.new_path or f.old_path or "", f.old_path or f.new_path or "") for f in files]
    if len(theirs) != len(ours):
        raise PathsDisagree(
            f"git reads {len(theirs)} file sections where sglforge reads "
            f"{len(ours)}: refused (paths are checked only where git reads "
            "them)"
        )
    for number, (git_side, our_side, file) in enumerate(zip(theirs, ours, files), 1):
        if git_side != our_side:
            raise PathsDisagree(
                f"file section {number} (line {file.line}): git writes {git_side.writes!r} "
                f"and reads {git_side.reads!r}, sglforge read {our_side.writes!r} and "
                f"{our_side.reads!r}: refused (paths are checked only where git writes them)"
            )
