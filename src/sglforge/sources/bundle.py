"""`fetch --bundle/--from-bundle`: move the cache entries of a pinned set between hosts as
one tar file (a git bundle per repository, the archives, a manifest), verified on import."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import sha256_file
from sglforge.base.git import git, has_commit
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.settings import Settings
from sglforge.sources.cache import PIN_REF, SourceCache, ensure_bare
from sglforge.sources.export import safe_members
from sglforge.sources.fetch import GitWant, pinned_set

BUNDLE_FORMAT = 1


def write_bundle(lock: Lockfile, names: list[str], settings: Settings, out: Path,
                 extra: list[GitWant] = ()) -> list[str]:
    """Write one tar file with a git bundle per repository and the tarballs of the set."""
    cache = SourceCache(settings.cache_dir)
    pins = pinned_set(lock, names)
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
                for member in safe_members(archive, str(bundle)):
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
            ensure_bare(git_dir)
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
