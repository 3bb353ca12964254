"""User settings that live outside the repository: cache root, build root, mirrors.

Read from `$SGLFORGE_CONFIG` or `~/.config/sglforge/config.toml` (if present), then
overridden by CLI options. Mirrors follow git's `url.<mirror>.insteadOf <upstream>`
convention: a URL starting with an upstream prefix is fetched from the mirror prefix instead,
and the pin itself never changes.

    cache-dir = "/var/cache/sglforge"
    build-root = "/opt/sglforge-build"
    [mirrors]
    "https://github.com/" = "/srv/mirrors/github/"
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.git import check_url
from sglforge.base.tomlfile import Problems, TableReader, load_toml

DEFAULT_BUILD_ROOT = Path("/tmp/sglforge-build")


@dataclass(frozen=True)
class Mirror:
    upstream: str  # URL prefix as written in pins
    mirror: str  # replacement prefix: a local path, file:// or another URL


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    build_root: Path
    mirrors: tuple[Mirror, ...] = field(default_factory=tuple)
    config_path: Path | None = None

    def resolve_url(self, url: str) -> str:
        """Apply the longest matching mirror prefix (git's insteadOf rule)."""
        best = max((m for m in self.mirrors if url.startswith(m.upstream)),
                   key=lambda m: len(m.upstream), default=None)
        return url if best is None else best.mirror + url[len(best.upstream):]

    def git_mirror_args(self) -> list[str]:
        """`-c url.<mirror>.insteadOf=<upstream>` for every mirror, for git commands."""
        args: list[str] = []
        for m in self.mirrors:
            args += ["-c", f"url.{m.mirror}.insteadOf={m.upstream}"]
        return args


def default_config_path() -> Path:
    env = os.environ.get("SGLFORGE_CONFIG")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "sglforge" / "config.toml"


def default_cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sglforge"


def mirror_problem(upstream: str, mirror: str) -> str | None:
    """Why a mirror entry is refused: its target must pass `check_url` like any pin URL."""
    if not upstream:
        return "the upstream prefix must not be empty"
    if any(ord(c) < 32 for c in upstream):
        return "the upstream prefix contains control characters"
    problem = check_url(mirror)
    if problem is None and "=" in mirror:
        problem = "contains '=' (cannot be passed to git's url.<mirror>.insteadOf)"
    return None if problem is None else f"mirror target {mirror!r} {problem}"


def parse_mirror_option(text: str) -> Mirror:
    upstream, sep, mirror = text.partition("=")
    if not sep or not upstream or not mirror:
        raise SglforgeError(f"--mirror {text!r}: expected UPSTREAM_PREFIX=MIRROR_PREFIX")
    problem = mirror_problem(upstream, mirror)
    if problem is not None:
        raise SglforgeError(f"--mirror {text!r}: {problem}")
    return Mirror(upstream, mirror)


def _mirror_line(text: str, upstream: str) -> int | None:
    """Line of the `"<upstream>" = ...` entry (for error messages)."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith((f'"{upstream}"', f"'{upstream}'")) and "=" in stripped:
            return number
    return None


def load_settings(
    config_path: Path | None = None,
    *,
    cache_dir: Path | None = None,
    build_root: Path | None = None,
    extra_mirrors: list[str] | tuple[str, ...] = (),
) -> Settings:
    path = config_path or default_config_path()
    explicit = config_path is not None or "SGLFORGE_CONFIG" in os.environ
    file_cache = file_root = None
    mirrors: list[Mirror] = []
    if path.exists():
        data, text = load_toml(path)
        problems = Problems(path)
        reader = TableReader(data, problems, "config")
        file_cache = reader.str("cache-dir")
        file_root = reader.str("build-root")
        for upstream, mirror in reader.str_table("mirrors").items():
            problem = mirror_problem(upstream, mirror)
            if problem is not None:
                line = _mirror_line(text, upstream)
                at = f" (line {line})" if line else ""
                problems.add(f"[mirrors], key {upstream!r}{at}: {problem}")
                continue
            mirrors.append(Mirror(upstream, mirror))
        reader.finish()
        if file_root is not None and not Path(file_root).is_absolute():
            reader.error("build-root", f"{file_root!r} must be an absolute path (builds embed it)")
        problems.raise_if_any()
    elif explicit:
        raise SglforgeError(f"{path}: config file not found (set by --config or SGLFORGE_CONFIG)")
    # CLI mirrors come after the file's: on equal prefixes the CLI wins (last one counts).
    for text in extra_mirrors:
        mirror = parse_mirror_option(text)
        mirrors = [m for m in mirrors if m.upstream != mirror.upstream] + [mirror]
    root = build_root or (Path(file_root) if file_root else DEFAULT_BUILD_ROOT)
    if not root.is_absolute():
        raise SglforgeError(f"build root {root} must be an absolute path (builds embed it)")
    return Settings(
        cache_dir=(cache_dir or (Path(file_cache).expanduser() if file_cache else default_cache_dir())),
        build_root=root,
        mirrors=tuple(mirrors),
        config_path=path if path.exists() else None,
    )
