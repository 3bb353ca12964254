"""Running git with a controlled environment.

Commits sglforge makes (one per patch) use a fixed committer and the author date as the
committer date, so the same series on the same pin always yields the same commit ids.

URLs, refs and paths come from files in pull requests, so they are data, never options:
`check_url` is the one place that decides which URLs are acceptable (lockfile, series,
mirrors), every call site puts `--` (or `--end-of-options`) before such arguments, and git
runs with stdin closed, no prompts, and the `ext::`/`fd::` transports off.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from pathlib import Path

from sglforge.base.credentials import url_parse_problem
from sglforge.base.errors import SglforgeError
from sglforge.base.procgroup import terminate_sessions

COMMITTER = {
    "GIT_COMMITTER_NAME": "sglforge",
    "GIT_COMMITTER_EMAIL": "sglforge@localhost",
}


# Transport policy for every git process (and the ones it starts, e.g. upload-pack):
# remote helpers that run commands or read our stdin are off; a URL taken from a file is
# not "from the user" (GIT_PROTOCOL_FROM_USER=0), so only the transports allowed here work.
SAFE_CONFIG = (
    ("protocol.ext.allow", "never"),
    ("protocol.fd.allow", "never"),
    ("protocol.file.allow", "always"),  # local mirrors; default "user" is off without the user
    ("core.askPass", "true"),
    # no hook runs, whatever the user's config says: sglforge's commits, checkouts and
    # `git am` in work trees of untrusted code (and the canary's) must not execute anything
    ("core.hooksPath", "/dev/null"),
    ("credential.interactive", "false"),
)
ALLOWED_SCHEMES = ("https", "http", "file", "ssh")
GIT_GRACE_SECONDS = 5.0  # after SIGTERM on an interrupt, before SIGKILL
_TRANSPORT = re.compile(r"^[^/\[\]:]*::")  # git: `<helper>::<address>` runs git-remote-<helper>
_SCP = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^@/:\[\]]+|\[[^\]/]+\]):(?P<path>.*)$")


def check_url(url: str) -> str | None:
    """Why `url` may not reach git (or a download), or None when it is acceptable.

    Allowed: https://, http://, file://, ssh:// with a host (no leading '-' in host or user),
    scp-style [user@]host:path, and absolute local paths. Refused: anything starting with
    '-' (git would read it as an option), `<transport>::` remote-helper forms (`ext::` runs
    commands, `fd::` reads our stdin), other schemes, relative paths, control characters.
    """
    if not isinstance(url, str) or not url.strip():
        return "must not be empty"
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        return "contains control characters"
    if url != url.strip():
        return "has leading or trailing whitespace"
    if url.startswith("-"):
        return "starts with '-' (git would read it as an option)"
    transport = _TRANSPORT.match(url)
    if transport:
        return (
            f"uses the remote-helper transport '{transport.group(0)}', which is not allowed "
            f"(allowed: {', '.join(s + '://' for s in ALLOWED_SCHEMES)}, "
            "user@host:path, absolute paths)"
        )
    if "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in ALLOWED_SCHEMES:
            return (
                f"scheme '{scheme}://' is not allowed "
                f"(allowed: {', '.join(s + '://' for s in ALLOWED_SCHEMES)})"
            )
        problem = url_parse_problem(url)  # never the parser's text: it quotes a password
        if problem is not None:
            return problem
        parts = urllib.parse.urlsplit(url)
        host, user = parts.hostname or "", parts.username or ""
        if scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                return "file:// URLs must name an absolute local path (file:///path)"
            return None
        if not host:
            return f"{scheme}:// URL has no host"
        if host.startswith("-") or user.startswith("-"):
            return "host or user starts with '-' (ssh would read it as an option)"
        return None
    if url.startswith("/"):
        return None
    scp = _SCP.match(url)
    if scp:
        if scp.group("host").startswith("-") or (scp.group("user") or "").startswith("-"):
            return "host or user starts with '-' (ssh would read it as an option)"
        return None
    return (
        "is neither a URL (https://, http://, file://, ssh://), user@host:path, nor an "
        "absolute path"
    )


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
            "GIT_ADVICE": "0",
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_ASKPASS": "true",
            "SSH_ASKPASS": "true",
            "GCM_INTERACTIVE": "never",
        }
    )
    # GIT_ALLOW_PROTOCOL would override the transport policy below.
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_ALLOW_PROTOCOL"):
        env.pop(key, None)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    for key, value in SAFE_CONFIG:  # after the user's own GIT_CONFIG_* entries: ours win
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    if extra:
        env.update(extra)
    return env


def stderr_text(proc: subprocess.CompletedProcess[bytes], limit: int = 40) -> str:
    """git's whole stderr (or stdout when stderr is empty), trimmed: no blank lines or
    trailing spaces, at most `limit` lines (the first ones, where git says what went wrong)."""
    raw = proc.stderr.decode(errors="replace") or proc.stdout.decode(errors="replace")
    # sideband "clear to end of line" sequences and stray control bytes (NUL from remotes)
    raw = re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", "", raw)
    lines = [line.rstrip() for line in raw.splitlines() if line.strip()]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "\n".join(lines)


MISSING_OBJECT = re.compile(
    r"(?:unable to read|could not read|bad object|missing (?:blob|tree|commit|tag|object)|"
    r"corrupt loose object|loose object|did not send all necessary objects.*?)\s*'?"
    r"([0-9a-f]{40}(?:[0-9a-f]{24})?)",
    re.IGNORECASE,
)


def missing_object(text: str) -> str | None:
    """The object id git names as missing or unreadable in `text`, if any."""
    match = MISSING_OBJECT.search(text)
    return match.group(1) if match else None


def remove_fetch_litter(git_dir: Path) -> list[str]:
    """Delete what an interrupted or killed fetch leaves in `git_dir`: temporary packs and
    indexes (tmp_pack_*, ...), loose tmp_obj_* files, the .keep a fetch holds on its pack
    until its refs are written, and stale lock files (which would make the next fetch fail).

    Call only with the source cache locked: then no other git process of ours is working in
    `git_dir`, so all of these are left over from one that died."""
    removed = []
    objects = git_dir / "objects"
    candidates: list[Path] = []
    pack_dir = objects / "pack"
    if pack_dir.is_dir():
        for path in pack_dir.iterdir():
            temporary = path.name.startswith(("tmp_pack_", "tmp_idx_", "tmp_rev_", "tmp_mtimes_"))
            if temporary or (path.suffix == ".keep" and _fetch_keep(path)):
                candidates.append(path)
    if objects.is_dir():
        for fanout in objects.iterdir():
            if len(fanout.name) == 2 and fanout.is_dir():
                candidates += [p for p in fanout.iterdir() if p.name.startswith("tmp_obj_")]
    for name in ("packed-refs.lock", "shallow.lock", "config.lock", "HEAD.lock", "FETCH_HEAD.lock"):
        candidates.append(git_dir / name)
    if (git_dir / "refs").is_dir():
        candidates += (git_dir / "refs").rglob("*.lock")
    for path in sorted(candidates):
        try:
            path.unlink()
            removed.append(str(path.relative_to(git_dir)))
        except (FileNotFoundError, IsADirectoryError):
            pass
    return removed


def _fetch_keep(path: Path) -> bool:
    """A .keep that fetch-pack/index-pack wrote ("fetch-pack <pid> on <host>"), not one a
    person made to keep a pack."""
    try:
        with open(path, "rb") as handle:
            return handle.read(64).startswith(b"fetch-pack ")
    except OSError:
        return False


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
    # git runs in a session of its own, so that an interrupt stops all of it: `git fetch`
    # starts upload-pack (and that pack-objects) for a local or ssh source, which the
    # kill() subprocess.run does on an exception would leave running.
    child = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=git_env(env),
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(input)
    except BaseException:  # KeyboardInterrupt, Terminated: reap the session, then go on
        terminate_sessions([child], grace=GIT_GRACE_SECONDS)
        raise
    proc = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        raise SglforgeError(f"{what or 'git ' + args[0]} failed: {stderr_text(proc)}")
    return proc


def rev(value: str) -> str:
    """`value` as a revision argument where git 2.39 takes neither `--` nor `--end-of-options`
    before it (checkout, rev-parse): refuse anything git could read as an option. Loaders
    already allow only full hex ids there; this is the second line of defence."""
    if not value or value.startswith("-"):
        raise SglforgeError(f"refusing revision {value!r}: it would reach git as an option")
    return value


def git_out(*args: str, **kwargs) -> str:
    return git(*args, **kwargs).stdout.decode().strip()


def has_commit(git_dir: Path, commit: str) -> bool:
    if not git_dir.exists():
        return False
    proc = git(
        "cat-file", "-e", "--end-of-options", f"{commit}^{{commit}}", git_dir=git_dir, check=False
    )
    return proc.returncode == 0
