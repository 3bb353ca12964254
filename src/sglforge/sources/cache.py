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
import re
from collections.abc import Iterator
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import exclusive_lock, sha256_file
from sglforge.base.git import git

PIN_REF = "refs/sglforge/pins/"


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

    def verified_tarball(self, name: str, sha256: str) -> Path:
        """The cached archive of pin `name`, its bytes checked against `sha256` now (a cache
        is shared and may have been damaged since the fetch verified it)."""
        path = self.tarball(sha256)
        if not path.is_file():
            raise SglforgeError(
                f"{name}: archive sha256 {sha256} is not in the cache; run `nox -s fetch` first"
            )
        actual = sha256_file(path)
        if actual != sha256:
            raise SglforgeError(
                f"{name}: cached archive is corrupt: expected sha256 "
                f"{sha256}, got {actual} ({path})"
            )
        return path

    def remove_partial_downloads(self) -> list[str]:
        """Delete archive downloads and imports a killed run left in tarballs/ (`.download-*`
        of fetch, `<sha256>.tmp` of a bundle import). Call with the cache locked."""
        removed = []
        folder = self.root / "tarballs"
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.name.startswith(".download-") or path.name.endswith(".tmp"):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                        removed.append(path.name)
        return removed

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize writers of this cache (waiting): fetches from two builds may overlap."""
        with exclusive_lock(self.root / ".lock", f"source cache {self.root}", wait=True):
            yield


def ensure_bare(git_dir: Path) -> None:
    """Create the bare repository of a cache entry if it is not there yet."""
    if not (git_dir / "HEAD").exists():
        git_dir.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", "--bare", "--", str(git_dir))
