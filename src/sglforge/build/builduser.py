"""Who runs a build's commands: when sglforge runs as root, an unprivileged build user, the
way Nix's build users (nixbld1…) work; otherwise the invoking user.

The code being built is untrusted (a patch can change `setup.py`). Run as another uid it
cannot read `/proc/<pid>/environ`, `mem` or `fd/` of sglforge or of any other process of
yours (the kernel allows that only to the same uid or with CAP_SYS_PTRACE), nor files only
root may read (root's `~/.netrc`, a `0600` config file). `setpriv --no-new-privs` makes
setuid programs (`sudo`, `su`) run without their privileges, so the build cannot get root
back.

The user: `sglforge-build` from the password database when it exists (create it as a system
user to choose its uid), else uid/gid 64999 with no name (ccache and pip need only a
writable HOME, which the build gets). While a build runs, the directories it writes (its
source tree, work dir, HOME, TMPDIR and the ccache directory) belong to that user; afterwards
the tree and work dir are given back to root, so sglforge's own git commands never see a
repository owned by someone else.

The build user must reach the build root, the cache directory and the interpreter (every
parent directory searchable by others, `o+x`). Where it cannot (typically an interpreter
under `/root`, e.g. pyenv's), the build runs as root *without capabilities* instead
(`setpriv --bounding-set=-all --inh-caps=-all --no-new-privs`) and the build log says why:
without CAP_SYS_PTRACE it still cannot read `/proc/<pid>/environ` of sglforge or of any
other root process with capabilities (the kernel's ptrace access check wants the caller's
capabilities to cover the target's), but it can read root's files (`/root/.netrc`, a config
file owned by root). Install the interpreter where others can reach it to get the build
user.

Not root: nothing changes hands, and the build runs as you. It cannot read sglforge's
`/proc/<pid>/environ` (sglforge makes itself non-dumpable, base/credentials.py), but it can
read your files and the environment of your other processes (your shell's, nox's): keep
secrets out of those, or build as root. docs/architecture.md ("Trust") has the whole list.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

USER_NAME = "sglforge-build"
DEFAULT_ID = 64999

# Drops to uid/gid without setpriv (util-linux): groups cleared, no_new_privs set. The command
# is looked up first: after the drop the interpreter's own stdlib may be out of reach.
_DROP = ("import ctypes, os, shutil, sys; cmd = shutil.which(sys.argv[1]) or sys.argv[1]; "
         "os.setgroups([]); os.setgid({gid}); os.setuid({uid}); "
         "ctypes.CDLL(None).prctl(38, 1, 0, 0, 0); os.execv(cmd, sys.argv[1:])")


@dataclass(frozen=True)
class BuildUser:
    uid: int
    gid: int
    name: str  # for messages and the build log
    caps_only: bool = False  # root without capabilities (the fallback, module docstring)

    def prefix(self) -> list[str]:
        """Command prefix that runs the rest as this user, without privileges."""
        setpriv = shutil.which("setpriv")
        if self.caps_only:
            return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs",
                    "--"] if setpriv else []
        if setpriv is not None:
            return [setpriv, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                    "--no-new-privs", "--"]
        return [sys.executable, "-I", "-c", _DROP.format(uid=self.uid, gid=self.gid)]

    def hand_over(self, paths: Iterable[Path]) -> None:
        """`paths` (trees) now belong to the build user. Capability-less root cannot write
        what another uid owns (no CAP_DAC_OVERRIDE): a ccache directory an earlier build
        user filled comes back to root."""
        for path in paths:
            if self.caps_only and (not path.exists() or path.stat().st_uid == 0):
                continue
            _chown_tree(path, self.uid, self.gid)

    def take_back(self, paths: Iterable[Path]) -> None:
        """`paths` belong to root again (links are not followed: a build may plant them)."""
        if not self.caps_only:
            for path in paths:
                _chown_tree(path, 0, 0)


def build_user(reach: Iterable[Path] = ()) -> BuildUser | None:
    """Who runs the build when sglforge runs as root (None: not root, builds run as the
    caller). The build user, when it can reach every path in `reach` (and the interpreter);
    else root without capabilities, named with the directory that stopped it."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(USER_NAME)
        user = BuildUser(entry.pw_uid, entry.pw_gid, USER_NAME)
    except KeyError:
        user = BuildUser(DEFAULT_ID, DEFAULT_ID, f"uid {DEFAULT_ID}")
    interpreter = Path(os.path.realpath(sys.executable))
    blocked = unreachable(user.uid, [*reach, interpreter, Path(sys.executable)])
    if blocked is None:
        return user
    return BuildUser(0, 0, f"root without capabilities ({user.name} cannot reach {blocked}: "
                           "not searchable by others)", caps_only=True)


def unreachable(uid: int, paths: Iterable[Path]) -> Path | None:
    """The first directory above one of `paths` that `uid` cannot search (None: none)."""
    for path in paths:
        for parent in path.parents:
            if not parent.exists():
                continue
            info = parent.stat()
            if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
                return parent
    return None


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    if not os.path.lexists(top):
        return
    os.lchown(top, uid, gid)
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)
