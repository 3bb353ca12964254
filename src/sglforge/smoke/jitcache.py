"""The JIT-cache artifact (issue 34): what a profile's servers compiled at run time, captured once
by `sglforge warm` and carried to serving hosts, so a start loads kernels instead of building them.

An artifact is a gzip'd tar, packed reproducibly (members sorted, mtime/owner fixed, modes
0644/0755, gzip without a timestamp), whose first member is `jitcache.json`:

    {"format": 1, "kind": "sglforge-jit-cache", "key": {...components...}, "key_digest": "...",
     "roots": ["triton", ...], "files": [{"path": "roots/triton/...", "sha256": ..., "size": ...,
     "mode": 420}, ...], "skipped": [...]}

and whose other members are `roots/<root>/<relative path>`, one directory per cache root below.

The key (`JitKey`) binds it to what decides which kernels exist and whether they load: the wheel
set (sha256 of the lock that pins it), the GPU's compute capability, the CUDA (nvcc) and driver
majors, the server arguments that can change what compiles, the model's config, and where the
stack is installed (caches that name files by absolute path). At start the
key is computed for this host and run; a different key is a warning and the cache is not used
(the servers JIT-compile as they would without it), never a kernel built for something else.

The archive is untrusted input: it is checked member by member with sources/archive.py's rules
(names, types, caps), and beyond them only regular files and directories under `roots/<known
root>/` are accepted, every file listed in the manifest with its size and sha256, every listed
file present; the sha256 is checked as it is written, into a staging directory that replaces
the cache root only when everything matched. Anything else is refused, naming the artifact and
the member.

Cache paths are absolute inside some caches (flashinfer's build.ninja names its objects by
absolute path, so a moved cache is rebuilt by ninja), so the root lives at one fixed path per
key (`DEFAULT_JIT_ROOT/<key16>`), the same where it was captured and where it is used.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_output, remove_tree, replace_dir, staging_dir
from sglforge.sources.archive import (
    ARCHIVE_READ_ERRORS,
    ArchiveLimits,
    ArchiveRefused,
    GiB,
    plan_members,
)

FORMAT = 1
KIND = "sglforge-jit-cache"
MANIFEST = "jitcache.json"
MTIME = 315532800  # 1980-01-01, as the bundle (wheel/bundle.py)
MAX_MANIFEST_BYTES = 64 << 20
JIT_LIMITS = ArchiveLimits(max_members=200_000, max_bytes=16 * GiB)
DEFAULT_JIT_ROOT = Path("/var/tmp/sglforge-jit")
ROOT_MARKER = ".sglforge-jit-root"  # a directory sglforge made (and may therefore replace)

# Every JIT cache the servers write, by root name: the environment variables that point at it.
# The roots NVIDIA's ModelExpress ships for SGLang, plus SGLang's own cache directory and the
# CUDA driver's PTX cache. SGLang overwrites DG_JIT_CACHE_DIR with SGLANG_DG_CACHE_DIR (or
# ~/.cache/deep_gemm) at import, so both are set.
CACHE_ROOTS: dict[str, tuple[str, ...]] = {
    "cuda": ("CUDA_CACHE_PATH",),
    "cute_dsl": ("CUTE_DSL_CACHE_DIR",),
    "deep_gemm": ("SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR"),
    "flashinfer": ("FLASHINFER_WORKSPACE_BASE",),
    "inductor": ("TORCHINDUCTOR_CACHE_DIR",),
    "sglang": ("SGLANG_CACHE_DIR",),
    "tilelang": ("TILELANG_CACHE_DIR",),
    "triton": ("TRITON_CACHE_DIR",),
    "tvm_ffi": ("TVM_FFI_CACHE_DIR",),
}
# What a cache writes that is no kernel: lock files and the temporaries of an unfinished write.
_SKIP = re.compile(r"(.*\.lock|tmp\..*|.*\.tmp|.*\.ninja_lock)")

# Server arguments that cannot change which kernels compile (addresses, logging, timeouts); the
# model path is replaced by the model config's digest. Every other argument is part of the key:
# an argument nobody classified costs a needless JIT at worst, never a cache used where it does
# not fit.
NOT_KERNEL_ARGS = frozenset(
    {
        "--host",
        "--port",
        "--disaggregation-bootstrap-port",
        "--log-level",
        "--log-level-http",
        "--watchdog-timeout",
        "--model-path",
        "--tokenizer-path",
    }
)


class JitCacheRefused(ArchiveRefused):
    """A corrupt, tampered or hostile artifact: never used, never a traceback."""


@dataclass(frozen=True)
class JitKey:
    wheels_lock: str  # sha256 of the lock that pins the wheel set
    compute_capability: str  # "9.0"; several GPUs of different kinds: "8.0,9.0"
    cuda_major: str  # nvcc's: the compiler JIT builds with
    driver_major: str  # the driver's: its PTX JIT cache is per driver
    server_args: tuple[str, ...]  # one line per server role, kernel-relevant arguments only
    model_config: str  # sha256 of the model's config.json, canonical JSON
    # Where the stack's JIT packages are installed: flashinfer's ninja files and SGLang's JIT
    # inputs name installed files by absolute path, so the same artifact under another install
    # path compiles again (measured on the H200: 101.8 s instead of 59.1 s). A different path
    # is a mismatch the operator is told about, not a silent JIT.
    stack_path: str

    def components(self) -> dict[str, object]:
        data = asdict(self)
        data["server_args"] = list(self.server_args)
        return data

    @property
    def digest(self) -> str:
        return key_digest(self.components())

    @property
    def short(self) -> str:
        return self.digest[:16]


def key_digest(components: Mapping[str, object]) -> str:
    text = json.dumps(components, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_args(argv: Iterable[str]) -> str:
    """A server's command line reduced to what may change its kernels: options after the
    launcher (`-m module` and what precedes it dropped), NOT_KERNEL_ARGS and their values
    removed."""
    words = list(argv)
    if "-m" in words:
        words = words[words.index("-m") + 2 :]
    kept: list[str] = []
    skip_value = False
    for word in words:
        if skip_value:
            skip_value = False
            if not word.startswith("--"):
                continue
        name = word.split("=", 1)[0]
        if name in NOT_KERNEL_ARGS:
            skip_value = "=" not in word
            continue
        kept.append(word)
    return " ".join(kept)


def model_config_digest(model: Path) -> str:
    """sha256 of the model's config.json as canonical JSON (key order and whitespace do not
    matter); "none" when the model has no readable config (a remote name)."""
    try:
        raw = (model / "config.json").read_bytes()
    except OSError:
        return "none"
    try:
        document = json.loads(raw)
    except ValueError:
        return hashlib.sha256(raw).hexdigest()
    return key_digest(document if isinstance(document, dict) else {"config": document})


JIT_PACKAGES = ("sglang", "flashinfer", "deep_gemm", "tilelang")
_FIND = (
    "import importlib.util as u, os, sys\n"
    "for name in sys.argv[1:]:\n"
    "    spec = u.find_spec(name)\n"
    "    origin = spec.origin if spec and spec.origin else None\n"
    "    print(name + '=' + (os.path.dirname(os.path.dirname(origin)) if origin else '-'))\n"
)


def stack_path(python: Path, env: Mapping[str, str]) -> str:
    """Where the stack's interpreter finds the JIT packages (found, not imported: importing
    SGLang takes seconds), with the servers' environment; "unknown" if it cannot say. The
    smoke (smoke/jitstep.py) and a serving host's install.sh (smoke/jithost.py) both ask
    this, so the key component means the same on both."""
    import subprocess

    try:
        result = subprocess.run(
            [str(python), "-c", _FIND, *JIT_PACKAGES],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if result.returncode != 0:
        return "unknown"
    return ";".join(result.stdout.split())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def root_env(root: Path) -> dict[str, str]:
    """The environment that points every known cache at its directory under `root`."""
    return {var: str(root / name) for name, names in CACHE_ROOTS.items() for var in names}


# ---------------------------------------------------------------------------------------------
# Packing


@dataclass
class Packed:
    path: Path
    files: int
    bytes: int
    skipped: list[str] = field(default_factory=list)
    sha256: str = ""


def _collect(root: Path) -> tuple[list[tuple[str, Path, int]], list[str]]:
    """(member name, file, mode) of every file under the cache roots, sorted; what was left out
    (links, lock files, temporaries, sockets) with the reason."""
    files: list[tuple[str, Path, int]] = []
    skipped: list[str] = []
    for name in sorted(CACHE_ROOTS):
        base = root / name
        if not base.is_dir() or base.is_symlink():
            continue
        for folder, dirs, names in os.walk(base):
            dirs.sort()
            here = Path(folder)
            for entry in sorted(names + [d for d in dirs if (here / d).is_symlink()]):
                path = here / entry
                rel = f"roots/{name}/{path.relative_to(base).as_posix()}"
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    skipped.append(f"{rel} (a link)")
                elif not stat.S_ISREG(info.st_mode):
                    skipped.append(f"{rel} (not a regular file)")
                elif _SKIP.fullmatch(entry):
                    skipped.append(f"{rel} (lock or temporary file)")
                else:
                    files.append((rel, path, 0o755 if info.st_mode & 0o111 else 0o644))
    return files, skipped


def _tarinfo(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.mtime = size, mode, kind, MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(root: Path, key: JitKey, out_dir: Path, deep_gemm_warmup: dict | None = None) -> Packed:
    """Pack the cache roots under `root` into `out_dir/jitcache-<key16>.tar.gz`: reproducible
    (the same files give the same bytes), written through a temporary file and a rename; with
    `deep_gemm_warmup` (smoke/dgwarmup.py's marker) in the manifest.

    Members carry the fixed MTIME; the manifest records each file's own mtime (`mtime_ns`) and
    unpacking restores it. Measured on the H200 (bench/coldstart-h200.json): flashinfer runs
    ninja on every load, and ninja rebuilds an output whose mtime differs from what its
    `.ninja_deps` recorded, so a cache unpacked with new mtimes recompiled flashinfer's norm
    (~30 s of the first batch). SGLang's tvm-ffi and Triton caches are content-addressed and
    do not care."""
    files, skipped = _collect(root)
    entries = [
        {
            "path": rel,
            "sha256": file_sha256(path),
            "size": path.stat().st_size,
            "mode": mode,
            "mtime_ns": path.stat().st_mtime_ns,
        }
        for rel, path, mode in files
    ]
    manifest = {
        "format": FORMAT,
        "kind": KIND,
        "key": key.components(),
        "key_digest": key.digest,
        "roots": sorted({rel.split("/")[1] for rel, _, _ in files}),
        "files": entries,
        "skipped": skipped,
    }
    if deep_gemm_warmup is not None:
        manifest["deep_gemm_warmup"] = deep_gemm_warmup
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    dirs = sorted({str(Path(rel).parent) for rel, _, _ in files} | {"roots"})
    dirs = sorted({p for d in dirs for p in [d, *map(str, Path(d).parents)] if p not in ("", ".")})
    target = out_dir / f"jitcache-{key.short}.tar.gz"
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_output(target) as raw:
        stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
        with stream, tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_tarinfo(MANIFEST, len(data), 0o644), io.BytesIO(data))
            members: dict[str, tuple | None] = {name: None for name in dirs}
            members.update(
                {rel: (path, mode, e["size"]) for e, (rel, path, mode) in zip(entries, files)}
            )
            for name in sorted(members):  # a directory sorts before what it holds
                item = members[name]
                if item is None:
                    tar.addfile(_tarinfo(name, 0, 0o755, tarfile.DIRTYPE))
                    continue
                with open(item[0], "rb") as handle:
                    tar.addfile(_tarinfo(name, item[2], item[1]), handle)
    total = sum(e["size"] for e in entries)
    return Packed(target, len(entries), total, skipped, file_sha256(target))


# ---------------------------------------------------------------------------------------------
# Reading and unpacking


@dataclass(frozen=True)
class Manifest:
    key: dict[str, object]
    key_digest: str
    files: dict[str, tuple[str, int]]  # member name -> (sha256, size)
    mtimes: dict[str, int] = field(default_factory=dict)  # member name -> st_mtime_ns
    deep_gemm_warmup: dict | None = None  # smoke/dgwarmup.py's marker, when warm wrote one


@dataclass(frozen=True)
class KeyCheck:
    matches: bool
    differing: tuple[str, ...]  # the key components that differ, "name: artifact X, here Y"


def check_key(manifest: Manifest, expected: JitKey) -> KeyCheck:
    here = expected.components()
    differing = tuple(
        f"{name}: artifact {manifest.key.get(name)!r}, here {value!r}"
        for name, value in here.items()
        if manifest.key.get(name) != value
    )
    extra = tuple(f"{name}: only in the artifact" for name in manifest.key if name not in here)
    return KeyCheck(not (differing or extra), differing + extra)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _parse_manifest(data: bytes, label: str) -> Manifest:
    def refuse(why: str) -> JitCacheRefused:
        return JitCacheRefused(f"{label}: member {MANIFEST!r}: {why}")

    try:
        document = json.loads(data)
    except (ValueError, UnicodeError) as exc:
        raise refuse(f"not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise refuse(f"not an sglforge JIT-cache manifest (kind {KIND!r} expected)")
    if document.get("format") != FORMAT:
        raise refuse(f"format {document.get('format')!r}, this sglforge reads {FORMAT}")
    key, digest, files = document.get("key"), document.get("key_digest"), document.get("files")
    if not isinstance(key, dict) or not isinstance(digest, str) or not isinstance(files, list):
        raise refuse("'key' (a table), 'key_digest' and 'files' (a list) are required")
    if key_digest(key) != digest:
        raise refuse("'key_digest' is not the digest of 'key' (the manifest was changed)")
    listed: dict[str, tuple[str, int]] = {}
    mtimes: dict[str, int] = {}
    for number, entry in enumerate(files):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("path"), str)
            and isinstance(entry.get("sha256"), str)
            and _HEX64.fullmatch(entry["sha256"])
            and type(entry.get("size")) is int
            and entry["size"] >= 0
        ):
            raise refuse(f"files[{number}]: 'path', 'sha256' (64 hex) and 'size' are required")
        if entry["path"] in listed:
            raise refuse(f"files[{number}]: {entry['path']!r} is listed twice")
        listed[entry["path"]] = (entry["sha256"], entry["size"])
        mtime = entry.get("mtime_ns")
        if mtime is not None:
            if type(mtime) is not int or not 0 <= mtime < 1 << 63:
                raise refuse(f"files[{number}]: 'mtime_ns' must be a non-negative integer")
            mtimes[entry["path"]] = mtime
    warmup = document.get("deep_gemm_warmup")
    if warmup is not None:
        from sglforge.smoke.dgwarmup import check_marker

        wrong = check_marker(warmup)
        if wrong:
            raise refuse(f"'deep_gemm_warmup': {wrong}")
    return Manifest(key, digest, listed, mtimes, warmup)


def read_manifest(artifact: Path) -> Manifest:
    """The artifact's manifest (its first member), checked; JitCacheRefused otherwise."""
    label = f"JIT cache {artifact}"
    try:
        with tarfile.open(artifact) as archive:
            first = archive.next()
            if first is None or first.name != MANIFEST or not first.isreg():
                name = first.name if first is not None else None
                raise JitCacheRefused(
                    f"{label}: the first member must be the regular file {MANIFEST!r}, "
                    f"found {name!r}"
                )
            if first.size > MAX_MANIFEST_BYTES:
                raise JitCacheRefused(
                    f"{label}: member {MANIFEST!r} is {first.size} bytes, more than "
                    f"{MAX_MANIFEST_BYTES}"
                )
            handle = archive.extractfile(first)
            data = handle.read() if handle else b""
    except SglforgeError:
        raise
    except ARCHIVE_READ_ERRORS as exc:
        raise JitCacheRefused(
            f"{label}: not a readable tar archive ({type(exc).__name__}: {exc})"
        ) from None
    return _parse_manifest(data, label)


@dataclass(frozen=True)
class Unpacked:
    root: Path
    files: int
    bytes: int


def _check_member(member: tarfile.TarInfo, manifest: Manifest, label: str) -> None:
    """Beyond the archive rules: only files and directories, under roots/<known root>/, each
    file listed with its size."""
    parts = member.name.strip("/").split("/")
    if member.name == MANIFEST:
        return
    if not (member.isreg() or member.isdir()):
        what = "a symlink" if member.issym() else "a hard link" if member.islnk() else "special"
        raise JitCacheRefused(
            f"{label}: member {member.name!r} is {what}; a JIT cache holds only files and "
            "directories"
        )
    if parts[0] != "roots" or (len(parts) > 1 and parts[1] not in CACHE_ROOTS):
        raise JitCacheRefused(
            f"{label}: member {member.name!r} is outside roots/<cache root>/ "
            f"(roots: {', '.join(CACHE_ROOTS)})"
        )
    if member.isreg():
        listed = manifest.files.get(member.name)
        if listed is None:
            raise JitCacheRefused(f"{label}: member {member.name!r} is not in the manifest")
        if listed[1] != member.size:
            raise JitCacheRefused(
                f"{label}: member {member.name!r} is {member.size} bytes, the manifest says "
                f"{listed[1]}"
            )


def _members(archive: tarfile.TarFile, manifest: Manifest, label: str):
    for member in archive:
        _check_member(member, manifest, label)
        yield member


def unpack(
    artifact: Path, manifest: Manifest, root: Path, limits: ArchiveLimits = JIT_LIMITS
) -> Unpacked:
    """Check every member and extract the cache roots into `root` (replacing it once all
    matched: a directory sglforge made, or an absent or empty one). Two streaming passes: the
    first checks every header (sources/archive.py's rules and ours), the second writes."""
    label = f"JIT cache {artifact}"
    check_replaceable(root)
    try:
        with tarfile.open(artifact, "r|*") as archive:
            planned = plan_members(_members(archive, manifest, label), label, limits)
        with staging_dir(root) as staged:
            seen = _write_members(artifact, planned, manifest, staged, label)
            _refuse_missing(manifest, seen, label)
            (staged / ROOT_MARKER).write_text(manifest.key_digest + "\n")
            replace_dir(staged, root)
    except SglforgeError:
        raise
    except ARCHIVE_READ_ERRORS as exc:
        raise JitCacheRefused(
            f"{label}: not a readable tar archive ({type(exc).__name__}: {exc})"
        ) from None
    return Unpacked(root, len(seen), sum(size for _, size in manifest.files.values()))


def verify(artifact: Path, manifest: Manifest, limits: ArchiveLimits = JIT_LIMITS) -> Unpacked:
    """Every check `unpack` makes (the archive rules, ours, each file's sha256, nothing of the
    manifest missing), writing nothing: `bundle` and install.sh refuse a bad artifact with this
    before anything is bundled or installed."""
    label = f"JIT cache {artifact}"
    try:
        with tarfile.open(artifact, "r|*") as archive:
            planned = plan_members(_members(archive, manifest, label), label, limits)
        seen = _write_members(artifact, planned, manifest, None, label)
    except SglforgeError:
        raise
    except ARCHIVE_READ_ERRORS as exc:
        raise JitCacheRefused(
            f"{label}: not a readable tar archive ({type(exc).__name__}: {exc})"
        ) from None
    _refuse_missing(manifest, seen, label)
    return Unpacked(Path(), len(seen), sum(size for _, size in manifest.files.values()))


def _refuse_missing(manifest: Manifest, seen: set[str], label: str) -> None:
    missing = sorted(set(manifest.files) - seen)
    if missing:
        raise JitCacheRefused(
            f"{label}: {len(missing)} file(s) of the manifest are not in the archive, "
            f"first {missing[0]!r}"
        )


def _write_members(
    artifact: Path, planned: list, manifest: Manifest, staged: Path | None, label: str
) -> set[str]:
    """The second pass: the planned members, in the same order, written under `staged` (or,
    with None, only read and their sha256 checked)."""
    seen: set[str] = set()
    with tarfile.open(artifact, "r|*") as archive:
        for member, item in zip(archive, planned):
            if member.name != item.member.name:  # the file changed between the passes
                raise JitCacheRefused(f"{label}: member {member.name!r} changed while read")
            if member.name == MANIFEST or item.kind == "dir":
                if staged is not None and item.kind == "dir":
                    staged.joinpath(*item.path[1:]).mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            sha256 = manifest.files[member.name][0]
            if staged is None:
                _write_checked(archive, member, None, sha256, label)
                seen.add(member.name)
                continue
            where = staged.joinpath(*item.path[1:])
            where.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            _write_checked(archive, member, where, sha256, label)
            mtime = manifest.mtimes.get(member.name)
            if mtime is not None:  # ninja-built caches (flashinfer) compare them: see pack()
                os.utime(where, ns=(mtime, mtime), follow_symlinks=False)
            seen.add(member.name)
    return seen


def _write_checked(
    archive: tarfile.TarFile, member: tarfile.TarInfo, where: Path | None, sha256: str, label: str
) -> None:
    source = archive.extractfile(member)
    if source is None:
        raise JitCacheRefused(f"{label}: member {member.name!r} has no data")
    mode = 0o755 if member.mode & 0o111 else 0o644
    digest = hashlib.sha256()
    if where is None:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    else:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(where, flags, mode), "wb") as out:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        os.chmod(where, mode)
    if digest.hexdigest() != sha256:
        raise JitCacheRefused(
            f"{label}: member {member.name!r} has sha256 {digest.hexdigest()}, the manifest "
            f"says {sha256} (the artifact was changed)"
        )


def check_replaceable(root: Path) -> None:
    """`root` is absent, empty or a cache root sglforge made: never replace a stranger."""
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise SglforgeError(f"JIT cache root {root} is not a directory")
    if root.is_dir() and any(root.iterdir()) and not (root / ROOT_MARKER).is_file():
        raise SglforgeError(
            f"JIT cache root {root} holds files sglforge did not put there (no {ROOT_MARKER})",
            hint="name an empty directory with --jit-root, or remove that one",
        )


def fresh_root(root: Path, key: JitKey) -> None:
    """An empty cache root for a warm run (the previous one of sglforge's removed)."""
    check_replaceable(root)
    remove_tree(root)
    root.mkdir(parents=True)
    (root / ROOT_MARKER).write_text(key.digest + "\n")
