"""User settings that live outside the repository: cache root, build root, memory budget,
mirrors.

One model (`Settings`, each key declared once with `key(...)`), one merge (`load_settings`):

    defaults  <  user config file  <  environment SGLFORGE_*  <  CLI options

The config file is `--config`, else `$SGLFORGE_CONFIG`, else
`$XDG_CONFIG_HOME/sglforge/config.toml` (`~/.config/...`) if present. Every value remembers
where it came from (`Settings.origins`, printed by `sglforge config`). Mirrors follow git's
`url.<mirror>.insteadOf <upstream>` convention: a URL starting with an upstream prefix is
fetched from the mirror prefix instead, and the pin itself never changes; CLI `--mirror`
entries replace the file's for the same prefix.

    cache-dir = "/var/cache/sglforge"       # SGLFORGE_CACHE_DIR, --cache-dir
    build-root = "/opt/sglforge-build"      # SGLFORGE_BUILD_ROOT, --build-root (absolute)
    mem-available = "24GiB"                 # SGLFORGE_MEM_AVAILABLE: the scheduler's budget
    sign-key = "~/.ssh/sglforge_ed25519"    # SGLFORGE_SIGN_KEY, bundle --sign-key: signs
                                            #   bundle anchors (wheel/bundle.py)
    [mirrors]                               # --mirror UPSTREAM=MIRROR
    "https://github.com/" = "/srv/mirrors/github/"
    [compiler-cache]                        # present: `build` uses ccache (builder/compiler_cache.py)
    kind = "ccache"                         # SGLFORGE_COMPILER_CACHE_KIND, build --compiler-cache
    remote = "redis://cache.internal:6379"  # SGLFORGE_COMPILER_CACHE_REMOTE,
                                            #   build --compiler-cache-remote (password masked)
    read-only = true                        # SGLFORGE_COMPILER_CACHE_READ_ONLY (1/0, true/false),
                                            #   build --compiler-cache-read-only
    dir = "/var/cache/ccache-tilelang"      # SGLFORGE_COMPILER_CACHE_DIR (default <cache-dir>/<kind>)
    [wheel-cache]                           # the remote tier of the wheel cache
    remote = "https://cache.example/sglforge/"  # SGLFORGE_WHEEL_CACHE_REMOTE (WebDAV)
    read-only = true                        # SGLFORGE_WHEEL_CACHE_READ_ONLY; untrusted jobs
    max-size = "16GiB"                      # SGLFORGE_WHEEL_CACHE_MAX_SIZE: largest download
    download-deadline = 1800                # SGLFORGE_WHEEL_CACHE_DOWNLOAD_DEADLINE (seconds)
    [substitutes."sglang-kernel.repo-triton"]   # config file only (sources/substitute.py)
    path = "/srv/subst/triton-v3.6.0"       # a local directory used in place of the pin
    reason = "the triton snapshot is over the fetch limit here"

`[wheel-cache]` is read by its own declaration (`WheelCacheSettings`, `_wheel_cache_layer`);
its origins are named `wheel-cache.remote` / `wheel-cache.read-only`. The remote URL is
checked when loaded (`base.remotestore.url_problem`) and shown without credentials.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from sglforge.base.credentials import mask_url
from sglforge.base.errors import SglforgeError
from sglforge.base.git import check_url
from sglforge.base.tomlfile import (
    Problems,
    TableReader,
    key,
    key_line,
    key_specs,
    load_toml,
    read_keys,
)
from sglforge.inputs.recipes import parse_memory

DEFAULT_BUILD_ROOT = Path("/tmp/sglforge-build")
CONFIG_ENV = "SGLFORGE_CONFIG"


@dataclass(frozen=True)
class Mirror:
    upstream: str  # URL prefix as written in pins
    mirror: str  # replacement prefix: a local path, file:// or another URL


def _masked_repr(self: Any) -> str:
    """A settings table's repr with its remote URL masked (it may hold a password)."""
    shown = ", ".join(
        f"{f.name}={mask_url(v) if isinstance(v, str) else v!r}"
        for f in fields(self)
        for v in [getattr(self, f.name)]
    )
    return f"{type(self).__name__}({shown})"


@dataclass(frozen=True, repr=False)
class CompilerCacheSettings:
    """The `[compiler-cache]` table; `verify` ignores it (it always builds without a cache)."""

    # load_settings stores the effective kind: a table or remote without `kind` means ccache
    kind: str | None = key(
        "kind",
        default=None,
        env="SGLFORGE_COMPILER_CACHE_KIND",
        pattern="ccache|sccache|none",
        describe="ccache, sccache or none",
        doc="compiler cache of `build` (default: ccache when this table "
        "or a remote is present, else none)",
    )
    remote: str | None = key(
        "remote",
        default=None,
        env="SGLFORGE_COMPILER_CACHE_REMOTE",
        doc="ccache remote storage: redis://, redis+unix: or http:// URL",
    )
    read_only: bool = key(
        "read-only",
        "bool",
        default=False,
        env="SGLFORGE_COMPILER_CACHE_READ_ONLY",
        doc="read the remote, never write it (untrusted CI jobs)",
    )
    # one cache per long build, kept apart from the source cache (a resumable build's objects
    # must not be evicted by another recipe's)
    dir: Path | None = key(
        "dir",
        default=None,
        env="SGLFORGE_COMPILER_CACHE_DIR",
        doc="the cache tool's directory, absolute (default: <cache-dir>/<kind>)",
    )
    __repr__ = _masked_repr


@dataclass(frozen=True, repr=False)
class WheelCacheSettings:
    """`[wheel-cache]`: the remote (shared) tier of the content-keyed wheel cache."""

    remote: str | None = key(
        "remote",
        default=None,
        env="SGLFORGE_WHEEL_CACHE_REMOTE",
        doc="WebDAV URL of the shared wheel cache (http/https)",
    )
    read_only: bool = key(
        "read-only",
        "bool",
        default=False,
        env="SGLFORGE_WHEEL_CACHE_READ_ONLY",
        doc="read the remote tier, never upload (untrusted jobs)",
    )
    # a download is capped at its entry's size, and never more than this (builder/wheelcache.py)
    max_size: int = key(
        "max-size",
        default=16 << 30,
        env="SGLFORGE_WHEEL_CACHE_MAX_SIZE",
        doc="the largest wheel a remote download may be (e.g. 16GiB)",
    )
    download_deadline: float = key(
        "download-deadline",
        "number",
        default=1800.0,
        env="SGLFORGE_WHEEL_CACHE_DOWNLOAD_DEADLINE",
        maximum=86400.0,
        doc="seconds one remote download may take in all",
    )
    __repr__ = _masked_repr


@dataclass(frozen=True)
class Substitute:
    """A local directory the builder uses in place of a pinned FetchContent input it cannot
    fetch (sources/substitute.py says what follows from that). Only the user config names one:
    the project's files come from other people's pull requests."""

    name: str  # the pin it stands in for (lockfiles/upstreams.toml `name`)
    path: Path  # absolute
    reason: str
    origin: str  # "config: <file>, [substitutes."<name>"]"


SUBSTITUTE_NAME = r"[a-z0-9][a-z0-9._-]*"


@dataclass(frozen=True)
class Settings:
    # one declaration per key: TOML name, environment variable, default (tomlfile.key)
    cache_dir: Path = key(
        "cache-dir", env="SGLFORGE_CACHE_DIR", doc="source cache (bare repos, tarballs)"
    )
    build_root: Path = key(
        "build-root",
        default=DEFAULT_BUILD_ROOT,
        env="SGLFORGE_BUILD_ROOT",
        doc="fixed absolute build root",
    )
    mem_available: int | None = key(
        "mem-available",
        default=None,
        env="SGLFORGE_MEM_AVAILABLE",
        doc="memory budget of the compile scheduler (default: /proc/meminfo MemAvailable)",
    )
    # the SSH key (ssh-keygen -Y sign) that signs a bundle's trust anchor (wheel/bundle.py)
    sign_key: Path | None = key(
        "sign-key",
        default=None,
        env="SGLFORGE_SIGN_KEY",
        doc="SSH private key that signs bundle anchors (ssh-keygen -Y sign; default: unsigned)",
    )
    mirrors: tuple[Mirror, ...] = field(default_factory=tuple)
    compiler_cache: CompilerCacheSettings = field(default_factory=CompilerCacheSettings)
    wheel_cache: WheelCacheSettings = field(default_factory=WheelCacheSettings)
    substitutes: tuple[Substitute, ...] = field(default_factory=tuple)
    config_path: Path | None = None
    # key ("cache-dir", ...) or "mirror <prefix>" -> "default", "config: <file>",
    # "env: SGLFORGE_…", "cli: --…"
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    def origin(self, name: str) -> str:
        return self.origins.get(name, "default")

    def resolve_url(self, url: str) -> str:
        """Apply the longest matching mirror prefix (git's insteadOf rule)."""
        best = max(
            (m for m in self.mirrors if url.startswith(m.upstream)),
            key=lambda m: len(m.upstream),
            default=None,
        )
        return url if best is None else best.mirror + url[len(best.upstream) :]

    def git_mirror_args(self) -> list[str]:
        """`-c url.<mirror>.insteadOf=<upstream>` for every mirror, for git commands."""
        args: list[str] = []
        for m in self.mirrors:
            args += ["-c", f"url.{m.mirror}.insteadOf={m.upstream}"]
        return args


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    base = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "sglforge" / "config.toml"


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
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
    return None if problem is None else f"mirror target {mask_url(mirror)!r} {problem}"


def parse_mirror_option(text: str) -> Mirror:
    upstream, sep, mirror = text.partition("=")
    if not sep or not upstream or not mirror:
        raise SglforgeError(f"--mirror {mask_url(text)!r}: expected UPSTREAM_PREFIX=MIRROR_PREFIX")
    problem = mirror_problem(upstream, mirror)
    if problem is not None:
        raise SglforgeError(f"--mirror {mask_url(text)!r}: {problem}")
    return Mirror(upstream, mirror)


def _mirror_line(text: str, upstream: str) -> int | None:
    """Line of the `"<upstream>" = ...` entry (for error messages)."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith((f'"{upstream}"', f"'{upstream}'")) and "=" in stripped:
            return number
    return None


# Converting one raw value (from a file, the environment or the CLI) to the field's type;
# a returned str is the problem ("must be ...").
def _to_path(raw: Any) -> Path | str:
    text = str(raw)
    return Path(text).expanduser() if text and "\0" not in text else "is not a path"


def _to_abs_path(raw: Any) -> Path | str:
    path = _to_path(raw)
    if isinstance(path, Path) and not path.is_absolute():
        return "must be an absolute path (builds embed it)"
    return path


def _to_size(raw: Any) -> int | str:
    size = parse_memory(str(raw))
    return size if size is not None and size > 0 else "expected a size like 24GiB or 1536MiB"


class Refused(str):
    """Why a table value was refused (its values may be strings themselves)."""


def _to_kind(raw: Any) -> str:
    text = str(raw)
    return (
        text
        if text in ("ccache", "sccache", "none")
        else Refused("expected ccache, sccache or none")
    )


def _to_remote(raw: Any) -> str:
    from sglforge.builder.compiler_cache import remote_problem

    problem = remote_problem(str(raw))
    return str(raw) if problem is None else Refused(problem)


def _to_tool_dir(raw: Any) -> Path | Refused:
    path = _to_abs_path(raw)
    return path if isinstance(path, Path) else Refused("must be an absolute path")


def _to_bool(raw: Any) -> bool | Refused:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    return Refused("expected 1/0, true/false, yes/no or on/off")


CONVERT = {
    "cache_dir": _to_path,
    "build_root": _to_abs_path,
    "mem_available": _to_size,
    "sign_key": _to_path,
}
CLI_FLAGS = {"cache_dir": "--cache-dir", "build_root": "--build-root"}


def _to_download_size(raw: Any) -> int | Refused:
    from sglforge.builder.wheelcache import HARD_MAX_SIZE

    size = parse_memory(str(raw)) if isinstance(raw, str) else None
    if size is None or not 0 < size <= HARD_MAX_SIZE:
        return Refused(f"expected a size like 16GiB or 512MiB, at most {HARD_MAX_SIZE >> 30}GiB")
    return size


def _to_seconds(raw: Any) -> float | Refused:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(raw, bool) or not 0 < value <= 86400:  # NaN fails too
        return Refused("expected a number of seconds > 0 and <= 86400")
    return value


def _to_wheel_remote(raw: Any) -> str:
    from sglforge.base.remotestore import url_problem

    problem = url_problem(str(raw))
    return str(raw) if problem is None else Refused(problem)


@dataclass(frozen=True)
class SettingsTable:
    """A `[table]` of the user config with its own dataclass of `key(...)` declarations: read
    from the file, SGLFORGE_* variables and CLI options by one set of functions
    (`_table_file_layer`, `_table_env_layer`, `_table_cli_layer`, `_merge_table`); origins are
    named `<table>.<key>`; values that may hold a password are shown masked."""

    name: str  # "compiler-cache"
    fields: type  # CompilerCacheSettings
    convert: Mapping[str, Any]  # field -> function(raw) -> value or Refused
    cli_flags: Mapping[str, str] = field(default_factory=dict)


COMPILER_CACHE = SettingsTable(
    "compiler-cache",
    CompilerCacheSettings,
    {"kind": _to_kind, "remote": _to_remote, "read_only": _to_bool, "dir": _to_tool_dir},
    {
        "kind": "--compiler-cache",
        "remote": "--compiler-cache-remote",
        "read_only": "--compiler-cache-read-only",
    },
)
WHEEL_CACHE = SettingsTable(
    "wheel-cache",
    WheelCacheSettings,
    {
        "remote": _to_wheel_remote,
        "read_only": _to_bool,
        "max_size": _to_download_size,
        "download_deadline": _to_seconds,
    },
)
CACHE_TABLE = COMPILER_CACHE.name


def merge_layers(
    layers: list[tuple[str, Mapping[str, Any]]],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The one precedence rule: later layers win; None means "not set here". Returns the
    merged values and, for each, the origin label of the layer it came from."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for origin, layer in layers:
        for name, value in layer.items():
            if value is not None:
                values[name], origins[name] = value, origin
    return values, origins


def _shown(raw: Any) -> str:
    return repr(mask_url(str(raw)))


def _table_file_layer(
    reader: TableReader, text: str, table: SettingsTable
) -> tuple[dict[str, Any], bool]:
    """`table`'s values by field name from the config file, and whether the table is there."""
    data = reader.table(table.name)
    if data is None:
        return {}, False
    header = next(
        (
            n
            for n, line in enumerate(text.splitlines(), 1)
            if line.strip().replace(" ", "") == f"[{table.name}]"
        ),
        1,
    )
    sub = TableReader(
        data, reader.problems, f"[{table.name}]", locate=lambda k: key_line(text, header, k)
    )
    layer: dict[str, Any] = {}
    for name, raw in read_keys(sub, table.fields).items():
        value = table.convert[name](raw)
        if isinstance(value, Refused):  # the URL is shown masked: it may hold a password
            sub.error(key_specs(table.fields)[name].name, f"{_shown(raw)} {value}")
        else:
            layer[name] = value
    sub.finish()
    return layer, True


def _table_env_layer(environ: Mapping[str, str], table: SettingsTable) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for name, spec in key_specs(table.fields).items():
        raw = environ.get(spec.env or "")
        if not raw:
            continue
        value = table.convert[name](raw)
        if isinstance(value, Refused):
            raise SglforgeError(f"{spec.env}={_shown(raw)}: {value}")
        layer[name] = value
    return layer


def _table_cli_layer(options: Mapping[str, Any], table: SettingsTable) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for name, raw in options.items():
        if raw is None:
            continue
        value = table.convert[name](raw)
        if isinstance(value, Refused):
            raise SglforgeError(f"{table.cli_flags[name]} {_shown(raw)}: {value}")
        if isinstance(value, str) and mask_url(value) != value:
            print(
                f"warning: {table.cli_flags[name]} carries a password, which every process "
                "on this host (the build's too) can read in /proc/<pid>/cmdline: put the URL "
                f"in the user config or {key_specs(table.fields)[name].env}",
                file=sys.stderr,
            )
        layer[name] = value
    return layer


def _merge_table(
    table: SettingsTable,
    file_layer: Mapping[str, Any],
    config_origin: str,
    environ: Mapping[str, str],
    cli: Mapping[str, Any],
    origins: dict[str, str],
) -> dict[str, Any]:
    """defaults < [table] < its SGLFORGE_* variables < its CLI options; fills `origins`."""
    specs = key_specs(table.fields)
    values, by_field = merge_layers(
        [
            (config_origin, file_layer),
            ("env", _table_env_layer(environ, table)),
            ("cli", _table_cli_layer(cli, table)),
        ]
    )
    for name, origin in by_field.items():
        if origin == "env":
            origin = f"env: {specs[name].env}"
        elif origin == "cli":
            origin = f"cli: {table.cli_flags[name]}"
        origins[f"{table.name}.{specs[name].name}"] = origin
    return values


def _substitute_key_line(text: str, name: str, key: str) -> int | None:
    """Line of `key` inside `[substitutes."<name>"]` (None for an inline table)."""
    header = re.compile(r"^\s*\[\s*substitutes\s*\.\s*[\"']?" + re.escape(name) + r"[\"']?\s*\]")
    for number, line in enumerate(text.splitlines(), start=1):
        if header.match(line):
            return key_line(text, number, key)
    return None


def _substitutes(reader: TableReader, text: str, path: Path) -> list[Substitute]:
    """`[substitutes."<pin>"]` tables: `path` (an absolute directory) and `reason`, both
    required; whether the pin exists is checked against the lockfile where one is used."""
    found: list[Substitute] = []
    for name, raw in (reader.table("substitutes") or {}).items():
        where = f'[substitutes."{name}"]'
        if not isinstance(name, str) or not re.fullmatch(SUBSTITUTE_NAME, name):
            reader.error(
                "substitutes", f"{_shown(name)} is not a source name from lockfiles/upstreams.toml"
            )
            continue
        if not isinstance(raw, dict):
            reader.error(
                "substitutes", f"{where} must be a table with path and reason, got {_shown(raw)}"
            )
            continue
        sub = TableReader(
            raw,
            reader.problems,
            f"config {where}",
            locate=lambda k, n=name: _substitute_key_line(text, n, k),
        )
        directory = sub.str("path", required=True)
        reason = sub.str("reason", required=True)
        sub.finish()
        if directory is None or reason is None:
            continue
        if not reason.strip():
            sub.error("reason", "must say why the pinned source cannot be used")
            continue
        if not Path(directory).is_absolute():
            sub.error("path", f"{directory!r} must be an absolute path")
            continue
        found.append(Substitute(name, Path(directory), reason.strip(), f"config: {path}, {where}"))
    return found


def _file_layer(
    path: Path,
) -> tuple[dict[str, Any], list[Mirror], dict[str, tuple[dict[str, Any], bool]], list[Substitute]]:
    data, text = load_toml(path)
    problems = Problems(path)
    reader = TableReader(data, problems, "config", locate=lambda k: key_line(text, 1, k))
    layer: dict[str, Any] = {}
    for name, raw in read_keys(reader, Settings).items():
        value = CONVERT[name](raw)
        if isinstance(value, str):
            reader.error(key_specs(Settings)[name].name, f"{raw!r} {value}")
        else:
            layer[name] = value
    mirrors: list[Mirror] = []
    for upstream, mirror in reader.str_table("mirrors").items():
        problem = mirror_problem(upstream, mirror)
        if problem is not None:
            line = _mirror_line(text, upstream)
            at = f" (line {line})" if line else ""
            problems.add(f"[mirrors], key {mask_url(upstream)!r}{at}: {problem}")
            continue
        mirrors.append(Mirror(upstream, mirror))
    tables = {t.name: _table_file_layer(reader, text, t) for t in (COMPILER_CACHE, WHEEL_CACHE)}
    substitutes = _substitutes(reader, text, path)
    reader.finish()
    problems.raise_if_any()
    return layer, mirrors, tables, substitutes


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for name, spec in key_specs(Settings).items():
        raw = environ.get(spec.env or "")
        if not raw:
            continue
        value = CONVERT[name](raw)
        if isinstance(value, str):
            raise SglforgeError(f"{spec.env}={raw!r}: {value}")
        layer[name] = value
    return layer


def _merge_compiler_cache(
    file_layer: dict[str, Any],
    present: bool,
    config_origin: str,
    environ: Mapping[str, str],
    cli: Mapping[str, Any],
    origins: dict[str, str],
) -> CompilerCacheSettings:
    """The merged table; a table or a remote without `kind` means ccache."""
    values = _merge_table(COMPILER_CACHE, file_layer, config_origin, environ, cli, origins)
    if "kind" not in values and (present or values.get("remote")):
        values["kind"] = "ccache"
        origins[f"{CACHE_TABLE}.kind"] = (
            f"implied by {origins[CACHE_TABLE + '.remote']}"
            if values.get("remote")
            else f"implied by [{CACHE_TABLE}] in {config_origin}"
        )
    return CompilerCacheSettings(**values)


def load_settings(
    config_path: Path | None = None,
    *,
    cache_dir: Path | None = None,
    build_root: Path | None = None,
    extra_mirrors: list[str] | tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
    compiler_cache: Mapping[str, Any] | None = None,
) -> Settings:
    """defaults < config file < SGLFORGE_* environment < CLI options, with origins.

    `compiler_cache`: the build verb's options by field name (kind, remote, read_only; None:
    not given)."""
    environ = os.environ if environ is None else environ
    if config_path is not None:
        path, how = config_path, "--config"
    elif environ.get(CONFIG_ENV):
        path, how = Path(environ[CONFIG_ENV]), CONFIG_ENV
    else:
        path, how = default_config_path(environ), None
    file_layer: dict[str, Any] = {}
    mirrors: list[Mirror] = []
    tables: dict[str, tuple[dict[str, Any], bool]] = {}
    substitutes: list[Substitute] = []
    if path.exists():
        file_layer, mirrors, tables, substitutes = _file_layer(path)
    elif how is not None:
        raise SglforgeError(f"{path}: config file not found (set by --config or {CONFIG_ENV})")
    config_origin = f"config: {path}"
    cli_layer: dict[str, Any] = {"cache_dir": cache_dir}
    if build_root is not None:
        # on the command line a relative path is the user's shell's: resolved, not refused
        value = _to_abs_path(os.path.abspath(os.path.expanduser(build_root)))
        assert isinstance(value, Path)
        cli_layer["build_root"] = value
    defaults = {"cache_dir": default_cache_dir(environ), "build_root": DEFAULT_BUILD_ROOT}
    values, by_field = merge_layers(
        [
            ("default", defaults),
            (config_origin, file_layer),
            ("env", _env_layer(environ)),
            ("cli", cli_layer),
        ]
    )
    origins: dict[str, str] = {}
    specs = key_specs(Settings)
    for name, origin in by_field.items():
        if origin == "env":
            origin = f"env: {specs[name].env}"
        elif origin == "cli":
            origin = f"cli: {CLI_FLAGS[name]}"
        origins[specs[name].name] = origin
    for mirror in mirrors:
        origins[f"mirror {mirror.upstream}"] = config_origin
    # CLI mirrors come after the file's: on equal prefixes the CLI wins (last one counts).
    for text in extra_mirrors:
        mirror = parse_mirror_option(text)
        mirrors = [m for m in mirrors if m.upstream != mirror.upstream] + [mirror]
        origins[f"mirror {mirror.upstream}"] = "cli: --mirror"
    if path.exists():
        origins["config-file"] = (
            "--config" if how == "--config" else (f"env: {CONFIG_ENV}" if how else "default")
        )
    cache = _merge_compiler_cache(
        *tables.get(CACHE_TABLE, ({}, False)), config_origin, environ, compiler_cache or {}, origins
    )
    wheel_cache = WheelCacheSettings(
        **_merge_table(
            WHEEL_CACHE,
            tables.get(WHEEL_CACHE.name, ({}, False))[0],
            config_origin,
            environ,
            {},
            origins,
        )
    )
    return Settings(
        **values,
        mirrors=tuple(mirrors),
        compiler_cache=cache,
        wheel_cache=wheel_cache,
        substitutes=tuple(substitutes),
        config_path=path if path.exists() else None,
        origins=origins,
    )


def describe_settings(settings: Settings, searched: Path | None = None) -> str:
    """The effective settings, one per line, each with where it came from."""
    rows: list[tuple[str, str, str]] = []
    config = settings.config_path or searched
    rows.append(
        (
            "config-file",
            str(config) if config else "(none)",
            settings.origin("config-file") if settings.config_path else "not present",
        )
    )
    for f in fields(Settings):
        spec = key_specs(Settings).get(f.name)
        if spec is None:
            continue
        value = getattr(settings, f.name)
        if f.name == "mem_available":
            shown = "MemAvailable (/proc/meminfo)" if value is None else _show_size(value)
        elif value is None:
            shown = "(none)"
        else:
            shown = str(value)
        rows.append((spec.name, shown, settings.origin(spec.name)))
    for table, values in (
        (COMPILER_CACHE, settings.compiler_cache),
        (WHEEL_CACHE, settings.wheel_cache),
    ):
        for name, spec in key_specs(table.fields).items():
            value = getattr(values, name)
            if isinstance(value, bool):
                shown = str(value).lower()
            elif isinstance(value, (int, float)):  # wheel-cache sizes and seconds
                shown = _show_size(value) if name == "max_size" else f"{value:g}s"
            elif isinstance(value, Path) or name == "dir":  # compiler-cache.dir
                shown = str(value) if value else "<cache-dir>/<kind>"
            else:  # a remote URL may hold a password
                shown = (
                    "(none)" if value is None and name == "remote" else mask_url(value or "none")
                )
            label = f"{table.name}.{spec.name}"
            rows.append((label, shown, settings.origin(label)))
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    lines = [f"{n:<{width}} = {v:<{value_width}}   ({o})" for n, v, o in rows]
    lines.append("mirrors:" if settings.mirrors else "mirrors: (none)")
    for m in settings.mirrors:
        lines.append(
            f"  {mask_url(m.upstream)} -> {mask_url(m.mirror)}   "
            f"({settings.origin('mirror ' + m.upstream)})"
        )
    if settings.substitutes:
        lines.append("substitutes (pins NOT used; wheels built with them are local-only):")
    for sub in settings.substitutes:
        lines.append(f"  {sub.name} -> {sub.path}   ({sub.origin}): {sub.reason}")
    return "\n".join(lines)


def _show_size(value: int) -> str:
    if value % (1 << 30) == 0:
        return f"{value >> 30}GiB"
    if value % (1 << 20) == 0:
        return f"{value >> 20}MiB"
    return f"{value} bytes"
