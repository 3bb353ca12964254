"""Where the repository's own inputs live (lockfiles/, patches/, recipes/, profiles/)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def lockfile(self) -> Path:
        return self.root / "lockfiles" / "upstreams.toml"

    @property
    def toolchain(self) -> Path:
        return self.root / "lockfiles" / "toolchain.toml"

    @property
    def wheels_lock(self) -> Path:
        return self.root / "lockfiles" / "wheels.lock"

    @property
    def runtime_lock(self) -> Path:
        """Hand-reviewed, hash-pinned third-party runtime requirements (copied into wheels.lock)."""
        return self.root / "lockfiles" / "runtime.lock"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def recipes_dir(self) -> Path:
        return self.root / "recipes"

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def wheels_dir(self) -> Path:
        return self.root / "wheels"

    def series_file(self, upstream: str) -> Path:
        return self.patches_dir / upstream / "series"


def find_project(start: Path | None = None) -> Project:
    """The nearest directory upwards holding lockfiles/upstreams.toml (or $SGLFORGE_PROJECT)."""
    env = os.environ.get("SGLFORGE_PROJECT")
    if env:
        return Project(Path(env).resolve())
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "lockfiles" / "upstreams.toml").exists():
            return Project(candidate)
    raise SglforgeError(
        f"no sglforge project found at or above {here} (looked for lockfiles/upstreams.toml)"
    )
