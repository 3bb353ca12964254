"""Running git with a controlled environment.

Commits sglforge makes (one per patch) use a fixed committer and the author date as the
committer date, so the same series on the same pin always yields the same commit ids.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sglforge.errors import SglforgeError

COMMITTER = {
    "GIT_COMMITTER_NAME": "sglforge",
    "GIT_COMMITTER_EMAIL": "sglforge@localhost",
}


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_ADVICE": "0"})
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(key, None)
    if extra:
        env.update(extra)
    return env


def git(
    *args: str,
    cwd: Path | None = None,
    git_dir: Path | None = None,
    check: bool = True,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    config: list[str] | None = None,
    what: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run git; on failure raise SglforgeError naming `what` and git's own message."""
    cmd = ["git", *(config or [])]
    if git_dir is not None:
        cmd += ["--git-dir", str(git_dir)]
    cmd += list(args)
    proc = subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, env=git_env(env))
    if check and proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip() or proc.stdout.decode(
            errors="replace").strip()
        raise SglforgeError(f"{what or 'git ' + args[0]} failed: {message}")
    return proc


def git_out(*args: str, **kwargs) -> str:  # noqa: ANN003
    return git(*args, **kwargs).stdout.decode().strip()


def has_commit(git_dir: Path, commit: str) -> bool:
    if not git_dir.exists():
        return False
    proc = git("cat-file", "-e", f"{commit}^{{commit}}", git_dir=git_dir, check=False)
    return proc.returncode == 0
