"""`fetch --bundle/--from-bundle`: move the cache entries of a pinned set between hosts as
one tar file (a git bundle per repository, the archives, a manifest), verified on import.

`--depth N` writes shallow git bundles: each pinned commit with N-1 generations of history
(a backport commit with at least its parent, whose tree its diff needs), and the manifest
names the boundary commits the receiving cache records as shallow. That is what carries an
upstream with a long history (sglang: GBs) to a host that only builds it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import atomic_output, atomic_write_bytes, atomic_write_text
from sglforge.base.git import check_url, git, git_out, has_commit, remove_fetch_litter
from sglforge.base.staletemp import directory_locked, remove_stale_temps
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.settings import Settings
from sglforge.sources.archive import ARCHIVE_READ_ERRORS
from sglforge.sources.cache import PIN_REF, SourceCache, ensure_bare
from sglforge.sources.fetch import GitWant, pinned_set

BUNDLE_FORMAT = 2  # 2: git entries carry "shallow" (1, without it, is still read)
READABLE_FORMATS = (1, 2)
MAX_DEPTH = 1000


def _shallow_bundle(
    git_dir: Path,
    pinned: set[str],
    backports: set[str],
    depth: int,
    work: Path,
    out: Path,
    url: str,
) -> list[str]:
    """A git bundle at `out` of the pinned commits with `depth` generations (backport commits
    with at least 2); returns the boundary commits the receiver records as shallow."""
    shallow_repo = work / "shallow.git"
    shutil.rmtree(shallow_repo, ignore_errors=True)
    git("init", "--quiet", "--bare", "--", str(shallow_repo))
    source = "file://" + str(git_dir.resolve())  # file://: --depth needs the transport
    for commits, generations in ((pinned, depth), (backports, max(depth, 2))):
        if commits:
            git(
                "fetch",
                "--quiet",
                "--no-tags",
                f"--depth={generations}",
                "--",
                source,
                *[f"+{PIN_REF}{c}:{PIN_REF}{c}" for c in sorted(commits)],
                git_dir=shallow_repo,
                what=f"shallow copy of {url}",
            )
    git(
        "bundle",
        "create",
        str(out),
        *[PIN_REF + c for c in sorted(pinned | backports)],
        git_dir=shallow_repo,
        what=f"git bundle for {url}",
    )
    boundary = shallow_repo / "shallow"
    return sorted(boundary.read_text().split()) if boundary.exists() else []


def _boundary_of(git_dir: Path, commits: set[str]) -> list[str]:
    """The cache repository's own shallow boundary below `commits` (a cache filled by a
    depth-limited fetch or a shallow bundle): the receiver must record it too."""
    recorded = git_dir / "shallow"
    if not recorded.exists():
        return []
    cut = set(recorded.read_text().split())
    history = git_out("rev-list", "--end-of-options", *sorted(commits), git_dir=git_dir).split()
    return sorted(cut.intersection(history))


def write_bundle(
    lock: Lockfile,
    names: list[str],
    settings: Settings,
    out: Path,
    extra: list[GitWant] = (),
    depth: int | None = None,
) -> list[str]:
    """Write one tar file with a git bundle per repository and the tarballs of the set;
    with `depth`, shallow git bundles (module docstring)."""
    from sglforge.sources.substitute import substitutes_for

    if depth is not None and not 1 <= depth <= MAX_DEPTH:
        raise SglforgeError(f"--depth {depth}: must be from 1 to {MAX_DEPTH}")

    cache = SourceCache(settings.cache_dir)
    substitutes = substitutes_for(lock, settings)
    # a substitute is this host's local directory, never fetched: not carried (the receiving
    # host needs its own [substitutes] entry, or the pinned source)
    left_out = [
        f"{p.name}: NOT bundled, SUBSTITUTED by {substitutes[p.name].path} here"
        for p in pinned_set(lock, names)
        if p.name in substitutes
    ]
    pins = [p for p in pinned_set(lock, names) if p.name not in substitutes]
    pinned: dict[str, set[str]] = {}
    backports: dict[str, set[str]] = {}
    for pin in pins:
        if pin.is_git:
            pinned.setdefault(pin.url, set()).add(pin.commit)
    for want in extra:
        backports.setdefault(want.url, set()).add(want.commit)
    manifest: dict = {"format": BUNDLE_FORMAT, "git": [], "tarballs": []}
    with tempfile.TemporaryDirectory(prefix="sglforge-bundle-") as tmp:
        work = Path(tmp)
        for index, url in enumerate(sorted(set(pinned) | set(backports))):
            git_dir = cache.git_dir(url)
            commits = pinned.get(url, set()) | backports.get(url, set())
            missing = [c for c in sorted(commits) if not has_commit(git_dir, c)]
            if missing:
                raise SglforgeError(
                    f"cannot bundle {url}: commit(s) {', '.join(missing)} not "
                    "in the cache; run fetch first"
                )
            for commit in commits:
                git("update-ref", "--", PIN_REF + commit, commit, git_dir=git_dir)
            name = f"git/{index:03d}.bundle"
            (work / "git").mkdir(exist_ok=True)
            if depth is None:
                git(
                    "bundle",
                    "create",
                    str(work / name),
                    *[PIN_REF + c for c in sorted(commits)],
                    git_dir=git_dir,
                    what=f"git bundle for {url}",
                )
                shallow = _boundary_of(git_dir, commits)
            else:  # a pinned commit that is also a backport gets the backport's depth
                shallow = _shallow_bundle(
                    git_dir,
                    pinned.get(url, set()) - backports.get(url, set()),
                    backports.get(url, set()),
                    depth,
                    work,
                    work / name,
                    url,
                )
            manifest["git"].append(
                {"url": url, "commits": sorted(commits), "file": name, "shallow": shallow}
            )
        for pin in pins:
            if pin.sha256:
                if not cache.tarball(pin.sha256).exists():
                    raise SglforgeError(
                        f"cannot bundle {pin.name}: archive not in the cache; run fetch first"
                    )
                manifest["tarballs"].append(
                    {"name": pin.name, "sha256": pin.sha256, "file": f"tarballs/{pin.sha256}"}
                )
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        # Under the directory's lock, a temporary of this bundle a killed run left is stale.
        with directory_locked(out.parent, "fetch --bundle"):
            remove_stale_temps(out.parent, output=re.compile(re.escape(out.name)))
            with atomic_output(out) as raw, tarfile.open(fileobj=raw, mode="w") as archive:
                archive.add(work / "manifest.json", "manifest.json")  # first: read first
                for entry in manifest["git"]:
                    archive.add(work / entry["file"], entry["file"])
                for entry in manifest["tarballs"]:
                    archive.add(cache.tarball(entry["sha256"]), entry["file"])
    return (
        [
            f"{e['url']}: {len(e['commits'])} commit(s)"
            + (f", shallow ({len(e['shallow'])} boundary commit(s))" if e["shallow"] else "")
            for e in manifest["git"]
        ]
        + [f"{e['name']}: sha256 {e['sha256'][:12]}" for e in manifest["tarballs"]]
        + left_out
    )


# A bundle is an uncompressed tar, so what it unpacks to is never larger than the file; its
# members are exactly the manifest (first, capped) and the files the manifest names.
MANIFEST_MAX_BYTES = 4 << 20
MAX_ENTRIES = 10_000
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_GIT_FILE = re.compile(r"git/[0-9]{3,6}\.bundle")
_PIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


@dataclass(frozen=True)
class BundledRepo:
    url: str
    commits: tuple[str, ...]
    file: str  # git/NNN.bundle
    shallow: tuple[str, ...] = ()  # boundary commits whose parents the bundle leaves out


@dataclass(frozen=True)
class BundledArchive:
    name: str
    sha256: str
    file: str  # tarballs/<sha256>


@dataclass(frozen=True)
class BundleManifest:
    repos: tuple[BundledRepo, ...]
    archives: tuple[BundledArchive, ...]

    def files(self) -> set[str]:
        return {r.file for r in self.repos} | {a.file for a in self.archives}


def _entries(document: dict, key: str, fields: set[str], problems: list[str]) -> list[dict]:
    value = document.get(key)
    if not isinstance(value, list):
        problems.append(f"'{key}' must be a list, got {type(value).__name__}")
        return []
    if len(value) > MAX_ENTRIES:
        problems.append(f"'{key}' has {len(value)} entries (more than {MAX_ENTRIES})")
        return []
    good = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or set(entry) != fields:
            keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            problems.append(
                f"{key}[{i}]: must be a table with exactly the keys "
                f"{', '.join(sorted(fields))} (got {keys})"
            )
            continue
        good.append(entry)
    return good


def parse_manifest(data: bytes) -> BundleManifest:
    """The manifest of a bundle, every field checked; problems raise ConfigErrors-style
    lists (the caller names the bundle). Nothing in it is trusted: URLs pass `check_url`,
    commits and digests are full hex, files follow the bundle's own layout only."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = f"not valid JSON ({type(exc).__name__}: {str(exc)[:200]})"
        raise _ManifestProblems([why]) from None
    if not isinstance(document, dict):
        raise _ManifestProblems([f"must be a JSON object, got {type(document).__name__}"])
    problems: list[str] = []
    unknown = sorted(set(document) - {"format", "git", "tarballs"})
    if unknown:
        problems.append(f"unknown key(s) {', '.join(map(repr, unknown))}")
    version = document.get("format")
    if type(version) is not int or version not in READABLE_FORMATS:
        why = f"bundle format {version!r} is not one of {', '.join(map(str, READABLE_FORMATS))}"
        raise _ManifestProblems([why])
    repos, archives, seen = [], [], set()
    fields = {"url", "commits", "file"} | ({"shallow"} if version >= 2 else set())
    for i, entry in enumerate(_entries(document, "git", fields, problems)):
        url, commits, file = entry["url"], entry["commits"], entry["file"]
        shallow = entry.get("shallow", [])
        if not (
            isinstance(shallow, list)
            and len(shallow) <= MAX_ENTRIES
            and all(isinstance(c, str) and _HEX40.fullmatch(c) for c in shallow)
        ):
            problems.append(f"git[{i}].shallow must be a list of full 40-hex commit ids")
        why = check_url(url) if isinstance(url, str) else "must be a string"
        if why:
            problems.append(f"git[{i}].url {str(url)[:200]!r} {why}")
        if not (
            isinstance(commits, list)
            and commits
            and len(commits) <= MAX_ENTRIES
            and all(isinstance(c, str) and _HEX40.fullmatch(c) for c in commits)
        ):
            problems.append(f"git[{i}].commits must be a non-empty list of full 40-hex commit ids")
        if not isinstance(file, str) or not _GIT_FILE.fullmatch(file) or file in seen:
            problems.append(f"git[{i}].file {str(file)[:200]!r} must be a unique 'git/NNN.bundle'")
        if not problems:
            seen.add(file)
            repos.append(BundledRepo(url, tuple(commits), file, tuple(shallow)))
    for i, entry in enumerate(_entries(document, "tarballs", {"name", "sha256", "file"}, problems)):
        name, digest, file = entry["name"], entry["sha256"], entry["file"]
        if not isinstance(name, str) or not _PIN_NAME.fullmatch(name):
            problems.append(f"tarballs[{i}].name {str(name)[:200]!r} is not a source name")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            problems.append(f"tarballs[{i}].sha256 must be 64 lowercase hex digits")
        elif file != f"tarballs/{digest}" or file in seen:
            problems.append(
                f"tarballs[{i}].file {str(file)[:200]!r} must be a unique 'tarballs/{digest}'"
            )
        if not problems:
            seen.add(file)
            archives.append(BundledArchive(name, digest, file))
    if problems:
        raise _ManifestProblems(problems)
    return BundleManifest(tuple(repos), tuple(archives))


class _ManifestProblems(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems)
        self.problems = problems


def _unpack_bundle(bundle: Path, work: Path) -> tuple[BundleManifest, dict[str, str]]:
    """Stream the bundle: the manifest must come first and is checked before anything else is
    read; then each member must be a regular file the manifest names, once. Returns the
    manifest and the sha256 of each unpacked file (computed while writing it)."""
    manifest: BundleManifest | None = None
    digests: dict[str, str] = {}
    try:
        with tarfile.open(bundle, mode="r|") as archive:
            for member in archive:
                if manifest is None:
                    if member.name != "manifest.json" or not member.isreg():
                        raise SglforgeError(
                            f"{bundle}: first member is {member.name!r}, not "
                            "the manifest.json a sglforge bundle starts with"
                        )
                    if member.size > MANIFEST_MAX_BYTES:
                        raise SglforgeError(
                            f"{bundle}: manifest.json is {member.size} bytes "
                            f"(more than {MANIFEST_MAX_BYTES}); refused"
                        )
                    try:
                        manifest = parse_manifest(archive.extractfile(member).read())
                    except _ManifestProblems as exc:
                        raise ConfigErrors(f"{bundle}: manifest.json", exc.problems) from None
                    expected = manifest.files()
                    continue
                if member.name not in expected or member.name in digests:
                    raise SglforgeError(
                        f"{bundle}: member {member.name!r} is not a file its manifest names "
                        "(or appears twice); refusing the bundle"
                    )
                if not member.isreg() or member.issparse():
                    raise SglforgeError(
                        f"{bundle}: member {member.name!r} is not a regular "
                        "file; refusing the bundle"
                    )
                digests[member.name] = _write_member(archive, member, work / member.name)
    except SglforgeError:
        raise
    except ARCHIVE_READ_ERRORS as exc:
        raise SglforgeError(
            f"{bundle}: not a sglforge bundle, which is an uncompressed tar "
            f"file ({type(exc).__name__}: {exc})"
        ) from None
    if manifest is None:
        raise SglforgeError(f"{bundle}: not a sglforge bundle (empty: no manifest.json)")
    missing = sorted(manifest.files() - set(digests))
    if missing:
        raise SglforgeError(
            f"{bundle}: truncated: its manifest names {', '.join(missing)}, "
            "which the bundle does not hold"
        )
    return manifest, digests


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, where: Path) -> str:
    digest = hashlib.sha256()
    where.parent.mkdir(parents=True, exist_ok=True)
    source = archive.extractfile(member)
    with open(where, "xb") as out:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def import_bundle(bundle: Path, settings: Settings) -> list[str]:
    """Load a bundle written by `write_bundle` into this host's cache, verifying everything."""
    cache = SourceCache(settings.cache_dir)
    if not bundle.is_file():
        raise SglforgeError(f"{bundle}: bundle file not found")
    imported = []
    with tempfile.TemporaryDirectory(prefix="sglforge-unbundle-") as tmp, cache.locked():
        work = Path(tmp)
        cache.remove_partial_downloads()
        manifest, digests = _unpack_bundle(bundle, work)
        for entry in manifest.archives:  # check every digest before the cache changes
            if digests[entry.file] != entry.sha256:
                raise SglforgeError(
                    f"{bundle}: {entry.name}: expected sha256 "
                    f"{entry.sha256}, got {digests[entry.file]}"
                )
        for entry in manifest.repos:
            git_dir = cache.git_dir(entry.url)
            ensure_bare(git_dir)
            remove_fetch_litter(git_dir)
            path = str(work / entry.file)
            # A boundary already in the cache keeps its history: only new commits are cut.
            boundary = [c for c in entry.shallow if not has_commit(git_dir, c)]
            before = _add_shallow(git_dir, boundary)
            try:
                git(
                    "bundle",
                    "verify",
                    "--quiet",
                    path,
                    git_dir=git_dir,
                    what=f"{bundle}: verify {entry.file} ({entry.url})",
                )
                git(
                    "fetch",
                    "--quiet",
                    "--",
                    path,
                    f"+{PIN_REF}*:{PIN_REF}*",
                    git_dir=git_dir,
                    what=f"{bundle}: import {entry.file}",
                )
                absent = [c for c in (*entry.commits, *boundary) if not has_commit(git_dir, c)]
                if absent:
                    raise SglforgeError(
                        f"{bundle}: expected commit {absent[0]} for {entry.url}, got nothing"
                    )
            except BaseException:
                remove_fetch_litter(git_dir)
                _restore_shallow(git_dir, before)
                raise
            imported.append(
                f"{entry.url}: {len(entry.commits)} commit(s)" + (", shallow" if boundary else "")
            )
        for entry in manifest.archives:
            target = cache.tarball(entry.sha256)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(work / entry.file, target.with_suffix(".tmp"))
            os.replace(target.with_suffix(".tmp"), target)
            imported.append(f"{entry.name}: sha256 {entry.sha256[:12]}")
    return imported


def _add_shallow(git_dir: Path, commits: list[str]) -> bytes | None:
    """Record `commits` in the cache repository's `shallow` file (git's list of commits whose
    parents it lacks) before fetching a shallow bundle, whose connectivity check needs it;
    returns the file's earlier bytes (None: there was none) for `_restore_shallow`."""
    path = git_dir / "shallow"
    before = path.read_bytes() if path.exists() else None
    if commits:
        lines = set((before or b"").decode("ascii", errors="replace").split()) | set(commits)
        atomic_write_text(path, "".join(f"{c}\n" for c in sorted(lines)))
    return before


def _restore_shallow(git_dir: Path, before: bytes | None) -> None:
    path = git_dir / "shallow"
    if before is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write_bytes(path, before)
