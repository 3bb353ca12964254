"""Fetch pinned sources into a content-addressed cache, verify them, export clean trees.

Cache layout (shared by every build on the host, safe to copy between hosts):
    <cache>/git/<slug>-<hash of url>.git   bare repos; fetched pins kept alive by
                                           refs/sglforge/pins/<commit>
    <cache>/tarballs/<sha256>              downloaded archives, named by content
A git object is addressed by its id, a tarball by its sha256, so a cache entry can never hold
the wrong content for a pin; the URL only says where to look.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import exclusive_lock, replace_dir, sha256_file, staging_dir
from sglforge.base.git import (
    git,
    git_out,
    has_commit,
    missing_object,
    remove_fetch_litter,
    rev,
    stderr_text,
)
from sglforge.inputs.pins import Lockfile, Pin
from sglforge.inputs.settings import Settings

PIN_REF = "refs/sglforge/pins/"
BUNDLE_FORMAT = 1


@dataclass(frozen=True)
class GitWant:
    """A commit some step needs from a repository (a pin, or a backport's source)."""

    url: str
    commit: str
    label: str  # who wants it, for messages ("flashinfer", "backport in patches/x/series")


@dataclass
class FetchReport:
    fetched: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ExportedTree:
    name: str
    path: Path
    commit: str | None
    tree: str | None
    placed: tuple[str, ...]  # "<path> @ <commit>" of submodules placed inside


class SourceCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def git_dir(self, url: str) -> Path:
        stripped = url.rstrip("/").removesuffix(".git")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", stripped.rsplit("/", 1)[-1])[:40] or "repo"
        digest = hashlib.sha256(stripped.encode()).hexdigest()[:16]
        return self.root / "git" / f"{slug}-{digest}.git"

    def tarball(self, sha256: str) -> Path:
        return self.root / "tarballs" / sha256

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize writers of this cache (waiting): fetches from two builds may overlap."""
        with exclusive_lock(self.root / ".lock", f"source cache {self.root}", wait=True):
            yield


# ---------------------------------------------------------------------------------------------
# fetching


def _ensure_bare(git_dir: Path) -> None:
    if not (git_dir / "HEAD").exists():
        git_dir.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", "--bare", "--", str(git_dir))


def _describe_source(url: str, settings: Settings) -> str:
    resolved = settings.resolve_url(url)
    return url if resolved == url else f"{url} (mirror {resolved})"


def _fetch_failure(want: GitWant, settings: Settings, procs: list) -> SglforgeError:
    """git fetch failed: say which source, show git's whole stderr and any missing object.

    `procs` are the attempts (by id, then all branches); a line both print is shown once.
    """
    lines: list[str] = []
    for proc in procs:
        if proc.returncode != 0:
            lines += [line for line in stderr_text(proc).splitlines()
                      if line.strip() not in {seen.strip() for seen in lines}]
    detail = "\n".join(lines) or f"git fetch exited with status {procs[-1].returncode}"
    missing = missing_object(detail)
    what = f"the source is missing object {missing}; " if missing else ""
    return SglforgeError(
        f"{want.label}: cannot fetch {_describe_source(want.url, settings)}: {what}git says:\n"
        + "\n".join("  " + line for line in detail.splitlines()),
        hint=("the mirror or repository is incomplete or corrupt; repair it (e.g. fetch it "
              "again from upstream)" if missing else
              "check the URL, your network, or add a mirror (--mirror or [mirrors] in the "
              "config file)"))


def fetch_commit(cache: SourceCache, want: GitWant, settings: Settings, offline: bool,
                 ref_hint: str | None = None, hint: str | None = None) -> str:
    """Make `want.commit` present in the cache; return 'cached' or 'fetched'.

    Fetches the commit by id first (what GitHub and protocol v2 servers allow); if the
    server refuses, fetches all branches and tags and looks again. Fails closed when the
    commit is not there: "expected commit X, got ..." (`hint` says what to fix then). The
    URL and commit go after `--`; temporary packs of a failed fetch are removed.
    """
    git_dir = cache.git_dir(want.url)
    if has_commit(git_dir, want.commit):
        git("update-ref", "--", PIN_REF + want.commit, want.commit, git_dir=git_dir)
        return "cached"
    if offline:
        return "missing"
    _ensure_bare(git_dir)
    mirror_cfg = settings.git_mirror_args() + ["-c", "protocol.version=2",
                                               "-c", "uploadpack.allowAnySHA1InWant=true"]
    by_id = git("fetch", "--quiet", "--no-tags", "--", want.url, want.commit, git_dir=git_dir,
                config=mirror_cfg, check=False)
    if by_id.returncode != 0:
        remove_fetch_litter(git_dir)
    if by_id.returncode != 0 or not has_commit(git_dir, want.commit):
        every = git("fetch", "--quiet", "--prune", "--", want.url,
                    "+refs/heads/*:refs/sglforge/upstream/heads/*",
                    "+refs/tags/*:refs/sglforge/upstream/tags/*",
                    git_dir=git_dir, config=mirror_cfg, check=False)
        if every.returncode != 0:
            remove_fetch_litter(git_dir)
            raise _fetch_failure(want, settings, [by_id, every])
    if not has_commit(git_dir, want.commit):
        got = "no such commit in the repository"
        if ref_hint:
            head = git("rev-parse", "--verify", "--quiet",
                       f"refs/sglforge/upstream/heads/{ref_hint}^{{commit}}", git_dir=git_dir,
                       check=False).stdout.decode().strip() or git(
                "rev-parse", "--verify", "--quiet",
                f"refs/sglforge/upstream/tags/{ref_hint}^{{commit}}", git_dir=git_dir,
                check=False).stdout.decode().strip()
            if head:
                got += f" ('{ref_hint}' is now at {head})"
        raise SglforgeError(
            f"{want.label}: expected commit {want.commit} from "
            f"{_describe_source(want.url, settings)}, got {got}",
            hint=hint or "the pin is wrong or upstream history was rewritten; fix "
                         "lockfiles/upstreams.toml")
    git("update-ref", "--", PIN_REF + want.commit, want.commit, git_dir=git_dir)
    return "fetched"


def _open_url(url: str):  # noqa: ANN202 - a binary file-like object
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        return open(urllib.parse.unquote(parsed.path) if parsed.scheme else url, "rb")
    request = urllib.request.Request(url, headers={"User-Agent": "sglforge"})
    return urllib.request.urlopen(request, timeout=60)  # noqa: S310 - URL comes from the pin


def fetch_tarball(cache: SourceCache, pin: Pin, settings: Settings, offline: bool) -> str:
    assert pin.sha256 is not None
    target = cache.tarball(pin.sha256)
    if target.exists():
        return "cached"
    if offline:
        return "missing"
    target.parent.mkdir(parents=True, exist_ok=True)
    resolved = settings.resolve_url(pin.url)
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=target.parent)
    digest = hashlib.sha256()
    try:
        try:
            with _open_url(resolved) as response, os.fdopen(fd, "wb") as out:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as exc:
            raise SglforgeError(f"{pin.name}: cannot download "
                                f"{_describe_source(pin.url, settings)}: {exc}") from None
        if digest.hexdigest() != pin.sha256:
            raise SglforgeError(
                f"{pin.name}: expected sha256 {pin.sha256}, got {digest.hexdigest()} from "
                f"{_describe_source(pin.url, settings)}",
                hint="the archive changed upstream or the pin is wrong; nothing was cached")
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return "fetched"


def gitlinks(git_dir: Path, commit: str) -> dict[str, str]:
    """Submodule entries (path -> commit) recorded in a commit's tree."""
    out = git("ls-tree", "-r", "-z", "--end-of-options", commit, git_dir=git_dir).stdout.decode()
    links = {}
    for record in filter(None, out.split("\0")):
        meta, path = record.split("\t", 1)
        mode, kind, obj = meta.split()
        if kind == "commit":
            links[path] = obj
    return links


def check_submodule_pins(lock: Lockfile, cache: SourceCache, pin: Pin) -> list[str]:
    """Every gitlink in `pin`'s tree must be pinned; a different commit is reported (warning).

    The lockfile wins: a pinned submodule commit different from upstream's gitlink is how a
    deliberate submodule bump is expressed, so it is a warning, not an error.
    """
    assert pin.commit is not None
    links = gitlinks(cache.git_dir(pin.url), pin.commit)
    pinned = {p.path: p for p in lock.submodules(pin.name)}
    unpinned = sorted(set(links) - set(pinned))
    if unpinned:
        entries = "\n".join(
            f'  [[source]]\n  name = "{pin.name}.{PurePosixPath(path).name}"\n'
            f'  parent = "{pin.name}"\n  path = "{path}"\n  url = "<submodule url>"\n'
            f'  commit = "{links[path]}"' for path in unpinned)
        raise SglforgeError(
            f"{lock.path}: '{pin.name}' at {pin.commit[:12]} has submodule(s) without a pin: "
            f"{', '.join(unpinned)}. Add:\n{entries}")
    warnings = []
    for path, sub in pinned.items():
        if path not in links:
            raise SglforgeError(
                f"{lock.path}: source '{sub.name}' (line {sub.line}) places a submodule at "
                f"'{path}', but '{pin.name}' at {pin.commit[:12]} has no submodule there")
        if links[path] != sub.commit:
            warnings.append(f"{sub.name}: pinned {sub.commit} differs from the commit "
                            f"'{pin.name}' records at {path} ({links[path]}); using the pin")
    return warnings


def fetch_sources(lock: Lockfile, names: list[str], settings: Settings, *, offline: bool,
                  extra: list[GitWant] = (), with_children: bool = True) -> FetchReport:
    """Fetch the closure of `names` (all upstreams if empty) plus `extra` commits.

    `with_children=False` fetches only the named sources themselves: enough to check patch
    series, which never reach into submodules or FetchContent archives.
    Offline, nothing is fetched; every missing item is listed in one error.
    """
    cache = SourceCache(settings.cache_dir)
    report = FetchReport()
    targets = names or [p.name for p in lock.upstreams()]
    pins: list[Pin] = []
    for name in targets:
        closure = lock.closure(name) if with_children else [lock.get(name)]
        pins += [p for p in closure if p not in pins]
    with cache.locked():
        for pin in pins:
            label = f"{pin.name} {pin.short}"
            if pin.is_git:
                state = fetch_commit(cache, GitWant(pin.url, pin.commit, pin.name), settings,
                                     offline, ref_hint=pin.ref)
                if state == "missing":
                    report.missing.append(f"{pin.name}: commit {pin.commit} from {pin.url}")
                    continue
                verify_git_pin(cache, pin)
            else:
                state = fetch_tarball(cache, pin, settings, offline)
                if state == "missing":
                    report.missing.append(f"{pin.name}: sha256 {pin.sha256} from {pin.url}")
                    continue
            getattr(report, state).append(label)
        for want in extra:
            state = fetch_commit(cache, want, settings, offline)
            if state == "missing":
                report.missing.append(f"{want.label}: commit {want.commit} from {want.url}")
            else:
                getattr(report, state).append(f"{want.label} {want.commit[:12]}")
        if report.missing:
            raise SglforgeError(
                f"offline: {len(report.missing)} source(s) missing from the cache "
                f"{cache.root}:\n" + "\n".join(f"  - {m}" for m in report.missing),
                hint="run `nox -s fetch` on a connected host and move the cache with "
                     "`--bundle FILE` / `--from-bundle FILE`")
        for pin in pins:
            if pin.is_git and with_children:
                report.warnings += check_submodule_pins(lock, cache, pin)
    return report


def verify_git_pin(cache: SourceCache, pin: Pin) -> str:
    """Check the cached commit (and its tree when pinned); return the tree id."""
    git_dir = cache.git_dir(pin.url)
    tree = git_out("rev-parse", rev(f"{pin.commit}^{{tree}}"), git_dir=git_dir)
    if pin.tree and tree != pin.tree:
        raise SglforgeError(f"{pin.name}: expected tree {pin.tree} for commit {pin.commit}, "
                            f"got {tree}")
    return tree


# ---------------------------------------------------------------------------------------------
# exporting


def _checkout_files(git_dir: Path, commit: str, dest: Path) -> None:
    """Write the files of `commit` into `dest` (no .git), using a throwaway index."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sglforge-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git("read-tree", "--end-of-options", commit, git_dir=git_dir, env=env)
        git(f"--work-tree={dest}", "checkout-index", "--all", "--force", git_dir=git_dir,
            env=env)


def _place_submodules(lock: Lockfile, cache: SourceCache, pin: Pin, root: Path) -> list[str]:
    placed = []
    for sub in lock.submodules(pin.name):
        target = root / sub.path
        if target.is_symlink() or (target.exists() and any(target.iterdir())):
            raise SglforgeError(f"{sub.name}: cannot place submodule at {sub.path}: not an "
                                f"empty directory in '{pin.name}'")
        _checkout_files(cache.git_dir(sub.url), sub.commit, target)
        placed.append(f"{sub.path} @ {sub.commit[:12]}")
        placed += [f"{sub.path}/{p}" for p in _place_submodules(lock, cache, sub, target)]
    return placed


def _safe_members(archive: tarfile.TarFile, source: str) -> list[tarfile.TarInfo]:
    members = archive.getmembers()
    for member in members:
        path = PurePosixPath(member.name)
        if path.is_absolute() or ".." in path.parts:
            raise SglforgeError(f"{source}: archive member {member.name!r} escapes the tree")
        if member.issym() or member.islnk():
            target = PurePosixPath(member.linkname)
            if target.is_absolute() or ".." in (path.parent / target).parts[:1]:
                raise SglforgeError(f"{source}: archive link {member.name!r} -> "
                                    f"{member.linkname!r} escapes the tree")
    return members


def _extract_tarball(path: Path, dest: Path, label: str) -> None:
    """Extract, dropping the single top-level directory GitHub-style archives have."""
    with tarfile.open(path) as archive:
        members = _safe_members(archive, label)
        tops = {PurePosixPath(m.name).parts[0] for m in members if m.name not in ("", ".")}
        strip = len(tops) == 1 and any(m.isdir() and PurePosixPath(m.name).parts ==
                                       (next(iter(tops)),) for m in members)
        for member in members:
            parts = PurePosixPath(member.name).parts
            if strip:
                parts = parts[1:]
                if not parts:
                    continue
            member.name = str(PurePosixPath(*parts))
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            archive.extract(member, dest, **kwargs)


def export_source(lock: Lockfile, name: str, dest: Path, settings: Settings, *,
                  with_submodules: bool = True) -> ExportedTree:
    """Export a clean tree of `name` at `dest`, replacing what is there only on success.

    Git upstreams become a git work tree detached at the pin (patches are then committed on
    top), with pinned submodules placed as plain files (unless `with_submodules` is off, as
    for checking patches). Tarballs are extracted.
    """
    cache = SourceCache(settings.cache_dir)
    pin = lock.get(name)
    with staging_dir(dest) as staged:
        if pin.is_git:
            git_dir = cache.git_dir(pin.url)
            if not has_commit(git_dir, pin.commit):
                raise SglforgeError(f"{name}: commit {pin.commit} is not in the cache; run "
                                    "`nox -s fetch` first")
            tree = verify_git_pin(cache, pin)
            git("clone", "--quiet", "--shared", "--no-checkout", "--", str(git_dir), str(staged))
            git("checkout", "--quiet", "--detach", rev(pin.commit), cwd=staged)
            git("remote", "remove", "origin", cwd=staged)
            placed = _place_submodules(lock, cache, pin, staged) if with_submodules else []
        else:
            tarball = cache.tarball(pin.sha256)
            if not tarball.exists():
                raise SglforgeError(f"{name}: archive sha256 {pin.sha256} is not in the cache; "
                                    "run `nox -s fetch` first")
            actual = sha256_file(tarball)
            if actual != pin.sha256:
                raise SglforgeError(f"{name}: cached archive is corrupt: expected sha256 "
                                    f"{pin.sha256}, got {actual} ({tarball})")
            _extract_tarball(tarball, staged, name)
            tree, placed = None, []
        replace_dir(staged, dest)
    return ExportedTree(name=name, path=dest, commit=pin.commit, tree=tree,
                        placed=tuple(placed))


def snapshot_directory(source: Path, dest: Path, prefix: str = "") -> Path:
    """A git work tree at `dest` holding a copy of `source` under `prefix`, as one commit.

    For checking a series against a tree that is not a pinned commit (e.g. the python/ tree
    of a release wheel). Symlinks are copied as links; nothing outside `source` is read.
    """
    if not source.is_dir():
        raise SglforgeError(f"{source}: not a directory")
    target = dest / prefix if prefix else dest
    if PurePosixPath(prefix).is_absolute() or ".." in PurePosixPath(prefix).parts:
        raise SglforgeError(f"--against-prefix {prefix!r} must be a relative path")
    shutil.copytree(source, target, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
    git("init", "--quiet", "--", str(dest))
    git("add", "-A", cwd=dest)
    git("commit", "--quiet", "--no-verify", "-m", f"snapshot of {source}", cwd=dest,
        env={"GIT_AUTHOR_NAME": "sglforge", "GIT_AUTHOR_EMAIL": "sglforge@localhost",
             "GIT_COMMITTER_NAME": "sglforge", "GIT_COMMITTER_EMAIL": "sglforge@localhost"})
    return dest


# ---------------------------------------------------------------------------------------------
# bundles: moving the cache for a pinned set between hosts


def write_bundle(lock: Lockfile, names: list[str], settings: Settings, out: Path,
                 extra: list[GitWant] = ()) -> list[str]:
    """Write one tar file with a git bundle per repository and the tarballs of the set."""
    cache = SourceCache(settings.cache_dir)
    targets = names or [p.name for p in lock.upstreams()]
    pins = []
    for name in targets:
        pins += [p for p in lock.closure(name) if p not in pins]
    by_repo: dict[str, set[str]] = {}
    for pin in pins:
        if pin.is_git:
            by_repo.setdefault(pin.url, set()).add(pin.commit)
    for want in extra:
        by_repo.setdefault(want.url, set()).add(want.commit)
    manifest: dict = {"format": BUNDLE_FORMAT, "git": [], "tarballs": []}
    with tempfile.TemporaryDirectory(prefix="sglforge-bundle-") as tmp:
        work = Path(tmp)
        for index, (url, commits) in enumerate(sorted(by_repo.items())):
            git_dir = cache.git_dir(url)
            missing = [c for c in sorted(commits) if not has_commit(git_dir, c)]
            if missing:
                raise SglforgeError(f"cannot bundle {url}: commit(s) {', '.join(missing)} not "
                                    "in the cache; run fetch first")
            for commit in commits:
                git("update-ref", "--", PIN_REF + commit, commit, git_dir=git_dir)
            name = f"git/{index:03d}.bundle"
            (work / "git").mkdir(exist_ok=True)
            git("bundle", "create", str(work / name), *[PIN_REF + c for c in sorted(commits)],
                git_dir=git_dir, what=f"git bundle for {url}")
            manifest["git"].append({"url": url, "commits": sorted(commits), "file": name})
        for pin in pins:
            if pin.sha256:
                if not cache.tarball(pin.sha256).exists():
                    raise SglforgeError(f"cannot bundle {pin.name}: archive not in the cache; "
                                        "run fetch first")
                manifest["tarballs"].append({"name": pin.name, "sha256": pin.sha256,
                                             "file": f"tarballs/{pin.sha256}"})
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, staged = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        os.close(fd)
        try:
            with tarfile.open(staged, "w") as archive:
                archive.add(work / "manifest.json", "manifest.json")
                for entry in manifest["git"]:
                    archive.add(work / entry["file"], entry["file"])
                for entry in manifest["tarballs"]:
                    archive.add(cache.tarball(entry["sha256"]), entry["file"])
            os.chmod(staged, 0o644)
            os.replace(staged, out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)
    return [f"{e['url']}: {len(e['commits'])} commit(s)" for e in manifest["git"]] + [
        f"{e['name']}: sha256 {e['sha256'][:12]}" for e in manifest["tarballs"]]


def import_bundle(bundle: Path, settings: Settings) -> list[str]:
    """Load a bundle written by `write_bundle` into this host's cache, verifying everything."""
    cache = SourceCache(settings.cache_dir)
    if not bundle.is_file():
        raise SglforgeError(f"{bundle}: bundle file not found")
    imported = []
    with tempfile.TemporaryDirectory(prefix="sglforge-unbundle-") as tmp, cache.locked():
        work = Path(tmp)
        try:
            with tarfile.open(bundle) as archive:
                for member in _safe_members(archive, str(bundle)):
                    kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                    archive.extract(member, work, **kwargs)
        except tarfile.TarError as exc:
            raise SglforgeError(f"{bundle}: not a sglforge bundle ({exc})") from None
        try:
            manifest = json.loads((work / "manifest.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError) as exc:
            raise SglforgeError(f"{bundle}: missing or bad manifest.json ({exc})") from None
        if manifest.get("format") != BUNDLE_FORMAT:
            raise SglforgeError(f"{bundle}: bundle format {manifest.get('format')!r} is not "
                                f"{BUNDLE_FORMAT}")
        for entry in manifest["git"]:
            git_dir = cache.git_dir(entry["url"])
            _ensure_bare(git_dir)
            path = str(work / entry["file"])
            git("bundle", "verify", "--quiet", path, git_dir=git_dir,
                what=f"{bundle}: verify {entry['file']} ({entry['url']})")
            git("fetch", "--quiet", "--", path, f"+{PIN_REF}*:{PIN_REF}*", git_dir=git_dir,
                what=f"{bundle}: import {entry['file']}")
            for commit in entry["commits"]:
                if not has_commit(git_dir, commit):
                    raise SglforgeError(f"{bundle}: expected commit {commit} for "
                                        f"{entry['url']}, got nothing")
            imported.append(f"{entry['url']}: {len(entry['commits'])} commit(s)")
        for entry in manifest["tarballs"]:
            source = work / entry["file"]
            actual = sha256_file(source)
            if actual != entry["sha256"]:
                raise SglforgeError(f"{bundle}: {entry['name']}: expected sha256 "
                                    f"{entry['sha256']}, got {actual}")
            target = cache.tarball(entry["sha256"])
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target.with_suffix(".tmp"))
            os.replace(target.with_suffix(".tmp"), target)
            imported.append(f"{entry['name']}: sha256 {entry['sha256'][:12]}")
    return imported
