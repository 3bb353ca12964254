"""Shared helpers for the build tests: fresh venvs and offline, hash-checked installs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from sglforge.wheel.provenance import Provenance


def default_signals() -> None:
    """`preexec_fn` for a child a test will interrupt: SIGINT/SIGTERM/SIGHUP back to their
    default dispositions. A suite started as `nohup … &` or from a non-interactive shell's `&`
    runs with SIGINT ignored, and an ignored signal stays ignored across exec (Python then
    installs no KeyboardInterrupt handler), so the child would never see the Ctrl-C the test
    sends (issue 23 item 14)."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(directory: Path) -> dict[str, str]:
    """name -> sha256 of every file (to prove a directory was left untouched)."""
    return {
        str(p.relative_to(directory)): sha256(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def pip_env() -> dict[str, str]:
    """No config files, no find-links/index from the host: only what the command names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def install_lock(python: Path, project_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--require-hashes",
            "--no-index",
            "--find-links",
            str(project_root / "wheels"),
            "-r",
            str(project_root / "lockfiles" / "wheels.lock"),
        ],
        capture_output=True,
        text=True,
        env=pip_env(),
        check=False,
    )


def provenance_stub(**fields) -> Provenance:
    """A minimal valid Provenance, for tests of post-processing (a build records much more)."""
    return Provenance(
        **{
            "upstream": "demo",
            "commit": "0" * 40,
            "version": "",
            "cuda_archs": (),
            "requires_torch": None,
            "toolchain": {},
            **fields,
        }
    )


def host_view(*, hide: tuple[Path, ...] = (), offline: bool = False) -> list[str] | None:
    """A command prefix that runs a command on this host with `hide` (directories) replaced
    by empty ones and, `offline`, in a network namespace of its own (only loopback): a host
    without CUDA, without cuobjdump or without a network, made with bubblewrap. None where
    bubblewrap cannot do that here (the caller skips)."""
    import shutil

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    prefix = [bwrap, "--dev-bind", "/", "/", "--die-with-parent"]
    for path in hide:
        prefix += ["--tmpfs", str(path)]
    if offline:
        prefix.append("--unshare-net")
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    return [*prefix, "--"] if probe.returncode == 0 else None


def in_mount_namespace(setup: str, *args: str) -> list[str] | None:
    """A command prefix: `setup` (sh, with $1.. = `args`) runs as root in a mount namespace of
    its own (a small tmpfs, a read-only bind mount), then the command. None where that cannot
    be made here (not root, no unshare): the caller skips."""
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    script = f'{setup} && shift {len(args)} && exec "$@"'
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *args]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    return prefix if probe.returncode == 0 else None


def read_only(directory: Path) -> list[str] | None:
    """Run with `directory` read-only (a bind mount over itself), in a mount namespace."""
    return in_mount_namespace(
        'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1"', str(directory)
    )


def small_disk(directory: Path, size: str) -> list[str] | None:
    """Run with a tmpfs of `size` (e.g. "8m") mounted at `directory`: a disk that fills."""
    return in_mount_namespace('mount -t tmpfs -o size="$2" tmpfs "$1"', str(directory), size)
