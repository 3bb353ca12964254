"""What an upstream offers beyond its pin: its newest release tag and its default branch head.

For the drift canary (`sglforge canary`, patching/canary.py). The refs come from the upstream
URL through the mirror rules (`git ls-remote`, the URL after `--`) or, offline, from what an
earlier canary run recorded in the source cache (`refs/sglforge/canary/`). Ref names are data:
a tag counts only when its whole name is a version (below); names never reach git as
arguments, only the commit ids they point at do.

Release tags, in version order (never by date): `v1.2.3` or `1.2.3` (one to four numeric
parts), optionally `.postN` / `postN`: final releases. `v1.2.3rc1`, `v1.2.3-rc.1`, `a`/`b`/
`alpha`/`beta` forms: pre-releases. Anything else (`nv_dev_c491439`, `v1.4.0-ep-sync`,
`liburing-2.14`) is not a release. The targets: the newest final release; the newest
pre-release too when it is newer than every final release (or there is none); the default
branch head (the repository's HEAD, or the branch asked for).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.git import git, stderr_text
from sglforge.inputs.settings import Settings
from sglforge.sources.cache import SourceCache, ensure_bare
from sglforge.sources.download import describe_source
from sglforge.sources.fetch import GitWant, fetch_commit

CANARY_REF = "refs/sglforge/canary/"
_HEX = re.compile(r"[0-9a-f]{40}")
_NUMBERS = r"(?P<release>\d{1,9}(?:\.\d{1,9}){0,3})"
FINAL_TAG = re.compile(rf"v?{_NUMBERS}(?:\.?post(?P<post>\d{{1,9}}))?")
PRE_TAG = re.compile(rf"v?{_NUMBERS}[-.]?(?P<stage>a|alpha|b|beta|rc)\.?(?P<n>\d{{1,9}})")
_STAGES = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "rc": 2}
BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
MAX_REF_LINES = 200_000  # a mirror with more refs than this is refused, not read


@dataclass(frozen=True)
class Tag:
    name: str
    commit: str
    key: tuple[tuple[int, ...], int, int, int]  # (release, stage: 0 a, 1 b, 2 rc, 3 final, n, post)

    @property
    def final(self) -> bool:
        return self.key[1] == 3


@dataclass(frozen=True)
class Target:
    kind: str  # "release" | "prerelease" | "head"
    ref: str  # the tag name, or "HEAD -> main" / the branch asked for
    commit: str


@dataclass(frozen=True)
class UpstreamRefs:
    tags: tuple[Tag, ...]  # release and pre-release tags, in version order
    head: Target | None
    ignored_tags: int  # tags whose names are not versions
    source: str  # where they were read: the mirror path or URL, or "source cache"


def version_key(name: str) -> tuple[tuple[int, ...], int, int, int] | None:
    """Sort key of a release or pre-release tag name; None when it is not one."""
    match = FINAL_TAG.fullmatch(name)
    stage, number, post = 3, 0, 0
    if match:
        post = int(match.group("post") or 0)
    else:
        match = PRE_TAG.fullmatch(name)
        if not match:
            return None
        stage, number = _STAGES[match.group("stage")], int(match.group("n"))
    release = tuple(int(part) for part in match.group("release").split("."))
    while len(release) > 1 and release[-1] == 0:  # 1.2.0 == 1.2
        release = release[:-1]
    return release, stage, number, post


def pick_targets(refs: UpstreamRefs) -> list[Target]:
    """The newest final release, a newer pre-release, and the head (module docstring)."""
    finals = [t for t in refs.tags if t.final]
    pres = [t for t in refs.tags if not t.final]
    targets = []
    if finals:
        targets.append(Target("release", finals[-1].name, finals[-1].commit))
    if pres and (not finals or pres[-1].key > finals[-1].key):
        targets.append(Target("prerelease", pres[-1].name, pres[-1].commit))
    if refs.head is not None:
        targets.append(refs.head)
    return targets


def parse_ls_remote(text: str, branch: str | None) -> tuple[list[Tag], Target | None, int]:
    """`git ls-remote --symref` output -> (version tags sorted, head, ignored tag count).

    Peeled lines (`refs/tags/x^{}`) give an annotated tag's commit; lines that are not
    `<40 hex>\\t<ref>` or `ref: <target>\\tHEAD` are skipped."""
    lines = text.splitlines()
    if len(lines) > MAX_REF_LINES:
        raise SglforgeError(f"the repository lists {len(lines)} refs (at most {MAX_REF_LINES})")
    tags: dict[str, str] = {}
    peeled: dict[str, str] = {}
    symref, heads = None, {}
    for line in lines:
        value, _, ref = line.partition("\t")
        if value.startswith("ref: ") and ref == "HEAD":
            symref = value[5:]
        elif not _HEX.fullmatch(value):
            continue
        elif ref.startswith("refs/tags/") and ref.endswith("^{}"):
            peeled[ref[10:-3]] = value
        elif ref.startswith("refs/tags/"):
            tags[ref[10:]] = value
        elif ref == "HEAD" or ref.startswith("refs/heads/"):
            heads[ref] = value
    versions, ignored = [], 0
    for name, commit in tags.items():
        key = version_key(name)
        if key is None:
            ignored += 1
            continue
        versions.append(Tag(name, peeled.get(name, commit), key))
    versions.sort(key=lambda t: (t.key, t.name))
    if branch is not None:
        commit = heads.get(f"refs/heads/{branch}")
        head = Target("head", branch, commit) if commit else None
    else:
        commit = heads.get("HEAD")
        label = f"HEAD -> {symref.removeprefix('refs/heads/')}" if symref else "HEAD"
        head = Target("head", label, commit) if commit else None
    return versions, head, ignored


def remote_refs(url: str, settings: Settings, branch: str | None = None) -> UpstreamRefs:
    """Tags and head of `url` (through the mirror rules), read with `git ls-remote`."""
    if branch is not None and not BRANCH.fullmatch(branch):
        raise SglforgeError(f"branch {branch!r} is not a plain branch name")
    patterns = ["HEAD", "refs/tags/*"] + ([f"refs/heads/{branch}"] if branch else [])
    proc = git(
        "ls-remote",
        "--symref",
        "--",
        url,
        *patterns,
        config=settings.git_mirror_args() + ["-c", "protocol.version=2"],
        check=False,
    )
    where = describe_source(url, settings)
    if proc.returncode != 0:
        raise SglforgeError(
            f"cannot list the tags and head of {where}: git says:\n"
            + "\n".join("  " + line for line in stderr_text(proc).splitlines())
        )
    tags, head, ignored = parse_ls_remote(proc.stdout.decode("utf-8", "replace"), branch)
    if branch is not None and head is None:
        raise SglforgeError(f"{where} has no branch {branch!r}")
    return UpstreamRefs(tuple(tags), head, ignored, settings.resolve_url(url))


def cached_refs(cache: SourceCache, url: str, branch: str | None = None) -> UpstreamRefs:
    """Offline: the targets an earlier online canary run recorded in the cache."""
    git_dir = cache.git_dir(url)
    if not (git_dir / "HEAD").exists():
        raise SglforgeError(f"offline: the source cache has no repository for {url}")
    out = git(
        "for-each-ref", "--format=%(objectname)\t%(refname)", "--", CANARY_REF, git_dir=git_dir
    ).stdout.decode("utf-8", "replace")
    lines = []
    for line in out.splitlines():
        commit, _, ref = line.partition("\t")
        rest = ref.removeprefix(CANARY_REF)
        if rest.startswith("tags/"):
            lines.append(f"{commit}\trefs/tags/{rest[5:]}")
        elif rest.startswith("heads/"):
            lines.append(f"{commit}\trefs/heads/{rest[6:]}")
            if branch is None:
                lines += [f"ref: refs/heads/{rest[6:]}\tHEAD", f"{commit}\tHEAD"]
    tags, head, ignored = parse_ls_remote("\n".join(lines), branch)
    if not tags and head is None:
        raise SglforgeError(
            f"offline: the source cache holds no canary targets for {url}; "
            "run `sglforge canary` online (or with a mirror) first"
        )
    return UpstreamRefs(tuple(tags), head, ignored, "source cache")


def fetch_targets(
    cache: SourceCache, url: str, targets: list[Target], settings: Settings, offline: bool
) -> None:
    """Make every target commit present in the cache and record it under CANARY_REF (so an
    offline run finds it); the cache must be locked by the caller."""
    git_dir = cache.git_dir(url)
    for target in targets:
        state = fetch_commit(
            cache, GitWant(url, target.commit, f"{target.kind} {target.ref}"), settings, offline
        )
        if state == "missing":
            raise SglforgeError(f"offline: commit {target.commit} ({target.ref}) is not cached")
    if not offline:  # offline, the targets are the recorded ones
        ensure_bare(git_dir)
        _record(git_dir, targets)


def _record(git_dir: Path, targets: list[Target]) -> None:
    """Replace the recorded targets: one ref per tag target, one for the head's branch."""
    stale = git(
        "for-each-ref", "--format=%(refname)", "--", CANARY_REF, git_dir=git_dir
    ).stdout.decode()
    commands = []
    for target in targets:
        if target.kind == "head":
            name = target.ref.removeprefix("HEAD -> ")
            if ".." in name or not BRANCH.fullmatch(name):  # a remote's symref is data too
                name = "HEAD"
            commands.append(f"update {CANARY_REF}heads/{name} {target.commit}")
        else:
            commands.append(f"update {CANARY_REF}tags/{target.ref} {target.commit}")
    kept = {command.split()[1] for command in commands}
    commands += [f"delete {ref}" for ref in stale.split() if ref not in kept]
    git("update-ref", "--stdin", git_dir=git_dir, input=("\n".join(commands) + "\n").encode())
