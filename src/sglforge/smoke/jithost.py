"""A JIT-cache artifact on a serving host (issue 34 item 2): `bundle --jit-cache` carries it,
the bundle's `install.sh` checks it and unpacks it, and a server finds it through an env file.

Bundle side (`bundle_files`): each artifact is read and verified as smoke/jitcache.py does
(archive rules, every member listed with its sha256), refused unless it was made for the lock
being bundled, and placed at `jit/cache/jitcache-<key16>.tar.gz`; it is then one more file of
SHA256SUMS, so the bundle's trust anchor covers it. Beside it go this module and the stdlib-only
sglforge modules it imports (SHIPPED), as source under `jit/`, so install.sh runs the same
key and unpack code as the smoke, in the Python it installs into (no sglforge needed there).

Host side (`main`, run by install.sh as `python -I -B`, never writing bytecode into the bundle):
- `check` (before anything is installed): every artifact of the bundle verified again, and the
  options checked; a corrupt or tampered artifact is refused and nothing is installed.
- `install` (after pip): this host's key components are compared with each artifact's. What
  install.sh can know is checked: the wheel set (the bundle's lock digest), the GPUs' compute
  capability and driver major (nvidia-smi), nvcc's major, and where the installed stack's JIT
  packages are (the same probe as the smoke's). The model's config is checked with --jit-model;
  the server arguments cannot be known before a server starts and are printed instead. One
  artifact matching: unpacked (staged beside the root, renamed into place once every sha256
  matched) into `--jit-root` or DEFAULT_JIT_ROOT/<key16> (the path warm captured it at; caches
  name absolute paths), and `<venv>/sglforge-jit.env` exports the cache variables. None (or
  several, undecided): a warning, nothing unpacked, an env file that exports nothing; the
  install succeeds and the servers JIT-compile as without it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_text
from sglforge.smoke import jitcache

JIT_DIR = "jit"
CACHE_DIR = f"{JIT_DIR}/cache"
STACK_KEY = "jit_caches"  # the section of the bundle's sglforge-stack.json
ENV_FILE = "sglforge-jit.env"
# What install.sh imports, as source: stdlib-only modules (a test runs it from exactly these).
SHIPPED = (
    "sglforge/__init__.py",
    "sglforge/base/__init__.py",
    "sglforge/base/errors.py",
    "sglforge/base/fs.py",
    "sglforge/base/linkwalk.py",
    "sglforge/smoke/__init__.py",
    "sglforge/smoke/dgwarmup.py",
    "sglforge/smoke/jitcache.py",
    "sglforge/smoke/jithost.py",
    "sglforge/sources/__init__.py",
    "sglforge/sources/archive.py",
)
# The key components install.sh checks from the host (model_config with --jit-model too).
HOST_COMPONENTS = ("wheels_lock", "compute_capability", "cuda_major", "driver_major", "stack_path")
_MEMBER = re.compile(rf"{CACHE_DIR}/jitcache-[0-9a-f]{{16}}\.tar\.gz")
_KEY16 = re.compile(r"[0-9a-f]{4,64}")


# ---------------------------------------------------------------------------------------------
# Bundle side


def bundle_files(artifacts: Sequence[Path], lock: Path) -> tuple[dict[str, Path | bytes], dict]:
    """(the bundle's files under jit/, the stack document's `jit_caches` section)."""
    lock_digest = jitcache.file_sha256(lock)
    files: dict[str, Path | bytes] = {}
    entries = []
    for artifact in artifacts:
        if not artifact.is_file():
            raise SglforgeError(f"--jit-cache {artifact}: no such file; nothing written")
        manifest = jitcache.read_manifest(artifact)
        jitcache.verify(artifact, manifest)
        made_for = manifest.key.get("wheels_lock")
        if made_for != lock_digest:
            raise SglforgeError(
                f"--jit-cache {artifact}: key component wheels_lock is {made_for!r}, but {lock} "
                f"(the lock being bundled) has sha256 {lock_digest}: it was made for another "
                "wheel set and would never match; nothing written",
                hint="warm with this lock (`sglforge warm --lock LOCK`), or bundle the lock it "
                "was made for",
            )
        member = f"{CACHE_DIR}/jitcache-{manifest.key_digest[:16]}.tar.gz"
        if member in files:
            raise SglforgeError(
                f"--jit-cache {artifact}: the same key ({manifest.key_digest[:16]}) as "
                f"--jit-cache {files[member]}; give one of them; nothing written"
            )
        files[member] = artifact
        entries.append(
            {
                "file": member,
                "sha256": jitcache.file_sha256(artifact),
                "key": manifest.key,
                "key_digest": manifest.key_digest,
            }
        )
    if not entries:
        return {}, {}
    source = Path(jitcache.__file__).resolve().parents[2]  # the directory holding sglforge/
    for rel in SHIPPED:
        files[f"{JIT_DIR}/{rel}"] = (source / rel).read_bytes()
    section = {
        "wheels_lock_sha256": lock_digest,
        "checked_by_install": [*HOST_COMPONENTS, "model_config (with --jit-model)"],
        "artifacts": sorted(entries, key=lambda e: e["file"]),
    }
    return files, section


# ---------------------------------------------------------------------------------------------
# Host side: what install.sh runs


class _Refused(SglforgeError):
    pass


def _section(bundle: Path) -> dict:
    """The bundle's `jit_caches` section, checked (SHA256SUMS already vouched for the file)."""
    path = bundle / "sglforge-stack.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _Refused(f"{path}: cannot read it ({exc})") from None
    section = document.get(STACK_KEY) if isinstance(document, dict) else None
    artifacts = section.get("artifacts") if isinstance(section, dict) else None
    if not isinstance(artifacts, list) or not isinstance(section.get("wheels_lock_sha256"), str):
        raise _Refused(f"{path}: key {STACK_KEY!r} missing or malformed")
    for number, entry in enumerate(artifacts):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and _MEMBER.fullmatch(entry["file"])
            and isinstance(entry.get("key"), dict)
            and isinstance(entry.get("key_digest"), str)
        ):
            raise _Refused(
                f"{path}: {STACK_KEY}.artifacts[{number}]: 'file' ({CACHE_DIR}/jitcache-"
                "<key16>.tar.gz), 'key' and 'key_digest' are required"
            )
    return section


def _check_artifact(bundle: Path, entry: dict, lock_digest: str) -> jitcache.Manifest:
    artifact = bundle / entry["file"]
    manifest = jitcache.read_manifest(artifact)
    if manifest.key_digest != entry["key_digest"] or manifest.key != entry["key"]:
        raise _Refused(
            f"JIT cache {artifact}: its key {manifest.key_digest[:16]} is not the one "
            f"sglforge-stack.json lists ({entry['key_digest'][:16]})"
        )
    if manifest.key.get("wheels_lock") != lock_digest:
        raise _Refused(f"JIT cache {artifact}: made for another wheel set than this bundle's")
    return manifest


def _gpu_facts() -> tuple[str, str, str]:
    """(compute capabilities, driver major, why unknown) from nvidia-smi, as the smoke's doctor
    asks it: every GPU it lists."""
    if shutil.which("nvidia-smi") is None:
        return "unknown", "unknown", "nvidia-smi not found on PATH"
    query = "--query-gpu=index,name,compute_cap,driver_version,pci.bus_id"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "unknown", "unknown", f"nvidia-smi failed ({exc})"
    rows = [[p.strip() for p in line.split(",")] for line in out.stdout.splitlines()]
    rows = [r for r in rows if len(r) >= 5 and r[0].isdigit()]
    if out.returncode != 0 or not rows:
        return "unknown", "unknown", f"nvidia-smi failed (exit {out.returncode}) or listed no GPU"
    caps = ",".join(sorted({r[2] for r in rows}))
    return caps, rows[0][3].split(".")[0], ""


def _nvcc_major() -> str:
    import os

    nvcc = shutil.which("nvcc")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if nvcc is None and os.environ.get(var) and Path(os.environ[var], "bin/nvcc").exists():
            nvcc = str(Path(os.environ[var], "bin/nvcc"))
    if nvcc is None:
        return "unknown"
    try:
        out = subprocess.run(
            [nvcc, "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"release (\d+)\.\d+", out.stdout)
    return match.group(1) if match else "unknown"


def host_components(lock_digest: str, model: Path | None) -> tuple[dict[str, str], str]:
    """(this host's key components that install.sh can know, a note on unknown GPU facts)."""
    caps, driver, why = _gpu_facts()
    here = {
        "wheels_lock": lock_digest,
        "compute_capability": caps,
        "cuda_major": _nvcc_major(),
        "driver_major": driver,
        "stack_path": jitcache.stack_path(Path(sys.executable), {}),
    }
    if model is not None:
        here["model_config"] = jitcache.model_config_digest(model)
    return here, why


def differing(key: dict, here: dict[str, str]) -> list[str]:
    """The components that differ, as jitcache.check_key words them; a fact this host could not
    read ("unknown") never matches."""
    return [
        f"{name}: artifact {key.get(name)!r}, here {value!r}"
        for name, value in here.items()
        if key.get(name) != value or value == "unknown"
    ]


def check_root(root: Path, parent_only: bool = False) -> None:
    """A root the servers will load kernels from must be nobody else's to change: it and its
    directory (when they exist) owned by this user (the directory may be root's), and the
    directory writable by no one else unless sticky (/var/tmp); then sglforge's own rule
    (jitcache.check_replaceable: absent, empty or a root sglforge made)."""
    import os
    import stat

    me = os.geteuid()
    for path, owners in ((root.parent, (me, 0)), (root, (me,)))[: 1 if parent_only else 2]:
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise SglforgeError(f"JIT cache root {root}: {path} is a symbolic link")
        if info.st_uid not in owners:
            raise SglforgeError(
                f"JIT cache root {root}: {path} belongs to uid {info.st_uid}, not to this user "
                f"({me}): whoever owns it could change the kernels the servers load",
                hint="pass --jit-root DIR in a directory of your own (e.g. under the venv)",
            )
        if path == root.parent and info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise SglforgeError(
                f"JIT cache root {root}: {path} is writable by others (mode "
                f"{stat.S_IMODE(info.st_mode):o}): they could replace the root",
                hint="pass --jit-root DIR in a directory of your own (e.g. under the venv)",
            )
    if not parent_only:
        jitcache.check_replaceable(root)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="install.sh (JIT cache)")
    p.add_argument("stage", choices=("check", "install"))
    p.add_argument("bundle", type=Path)
    p.add_argument("--root", type=Path, default=None)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--key", default=None)
    p.add_argument("--env-file", type=Path, default=None)
    return p


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    for name in ("root", "model", "env_file"):  # the env file must name absolute paths
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).absolute())
    try:
        section = _section(args.bundle)
        if args.stage == "check":
            return _check_stage(args, section)
        return _install_stage(args, section)
    except (SglforgeError, OSError) as exc:  # refused (corrupt, tampered), a root not ours
        refused = isinstance(exc, (_Refused, jitcache.JitCacheRefused))
        where = (
            "nothing installed"
            if args.stage == "check"
            else "the stack is installed, no JIT cache unpacked"
        )
        print(
            f"install.sh: JIT cache {'refused' if refused else 'error'}; {where}:\n  {exc}",
            file=sys.stderr,
        )
        return 1


def _check_stage(args: argparse.Namespace, section: dict) -> int:
    """Before pip: every artifact verified, the options sane."""
    entries = section["artifacts"]
    for entry in entries:
        manifest = _check_artifact(args.bundle, entry, section["wheels_lock_sha256"])
        jitcache.verify(args.bundle / entry["file"], manifest)
    if args.key is not None:
        if not _KEY16.fullmatch(args.key):
            raise SglforgeError(f"--jit-key {args.key!r}: not 4 to 64 lowercase hex digits")
        if not [e for e in entries if e["key_digest"].startswith(args.key)]:
            keys = ", ".join(e["key_digest"][:16] for e in entries)
            raise SglforgeError(
                f"--jit-key {args.key}: no JIT cache of this bundle has that key (keys: {keys})"
            )
    if args.model is not None and not (args.model / "config.json").is_file():
        raise SglforgeError(f"--jit-model {args.model}: no config.json there")
    if args.root is not None:
        check_root(args.root)
    else:  # the root itself is known once a key matched; its directory now
        check_root(jitcache.DEFAULT_JIT_ROOT / "<key16>", parent_only=True)
    print(
        f"install.sh: JIT cache OK: {len(entries)} artifact(s), every member in its manifest "
        "with a matching sha256"
    )
    return 0


def _install_stage(args: argparse.Namespace, section: dict) -> int:
    """After pip: the matching artifact unpacked and the env file written, or a warning."""
    here, why = host_components(section["wheels_lock_sha256"], args.model)
    env_file = args.env_file or Path(sys.prefix) / ENV_FILE
    candidates, rejected = [], []
    for entry in section["artifacts"]:
        if args.key is not None and not entry["key_digest"].startswith(args.key):
            continue
        differs = differing(entry["key"], here)
        (rejected if differs else candidates).append((entry, differs))
    if len(candidates) != 1:
        if candidates:
            keys = ", ".join(e["key_digest"][:16] for e, _ in candidates)
            reason = (
                f"{len(candidates)} JIT caches match this host on what install.sh checks "
                f"(keys {keys}); they differ in server_args or model_config: pass --jit-model "
                "DIR or --jit-key KEY16"
            )
        else:
            reason = "no JIT cache of this bundle matches this host" + (f" ({why})" if why else "")
            for entry, differs in rejected:
                reason += f"\n  {entry['file']}: " + "; ".join(differs)
        print(
            f"install.sh: WARNING: {reason}\ninstall.sh: nothing unpacked; the servers "
            "JIT-compile as without a cache",
            file=sys.stderr,
        )
        _write_env(env_file, None, [f"no JIT cache used: {reason.splitlines()[0]}"])
        return 0
    entry = candidates[0][0]
    key16 = entry["key_digest"][:16]
    root = args.root or jitcache.DEFAULT_JIT_ROOT / key16
    artifact = args.bundle / entry["file"]
    manifest = _check_artifact(args.bundle, entry, section["wheels_lock_sha256"])
    check_root(root)
    unpacked = jitcache.unpack(artifact, manifest, root)
    unchecked = ["server_args"] + ([] if args.model else ["model_config"])
    made_for = [f"{name}: {entry['key'].get(name)!r}" for name in unchecked]
    _write_env(env_file, root, [f"JIT cache {key16} ({entry['file']}), made for", *made_for])
    print(
        f"install.sh: JIT cache {key16} matches this host ({', '.join(here)}); "
        f"{unpacked.files} files unpacked into {root}"
    )
    print(f"install.sh: not checked here (a server's start decides them): {'; '.join(made_for)}")
    print(f"install.sh: before starting a server: . {shlex.quote(str(env_file))}")
    return 0


def _write_env(path: Path, root: Path | None, notes: list[str]) -> None:
    """The env file a server's start sources; with no root it exports nothing."""
    lines = [
        f"# {ENV_FILE}: GENERATED by a bundle's install.sh (sglforge JIT cache, issue 34).",
        f"# Source it before starting a server: . {shlex.quote(str(path))}",
        *(f"# {note}" for note in notes),
    ]
    if root is not None:
        lines += [
            f"export {var}={shlex.quote(value)}"
            for var, value in sorted(jitcache.root_env(root).items())
        ]
    atomic_write_text(path, "\n".join(lines) + "\n")
