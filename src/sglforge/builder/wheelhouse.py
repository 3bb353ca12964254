"""`sglforge wheelhouse DIR`: every wheel the air-gapped sessions install, hash-pinned, in one
directory (issue 33 item 2).

The offline route is one setting: on a host without an index, `SGLFORGE_INDEX=DIR` (a local
directory of wheels) is where every pip install sglforge makes comes from, with no other
index (`--no-index --find-links DIR`, pip's configuration off):

- the toolchain venv of `demo`, `build`, `verify` and `matrix`: lockfiles/sglforge.lock
  (sglforge's own dependencies and build backend) and lockfiles/toolchain.lock ([build];
  [torch-deps] and [torch] when a selected recipe needs torch; `SGLFORGE_TORCH_INDEX`
  defaults to the same directory then);
- the small venvs of `patches` (unidiff) and `check` (packaging), from sglforge.lock's pins;
- the smoke venv: the third-party pins of lockfiles/wheels.lock when no `--wheelhouse` /
  `--index-url` (or profile `[install]`) names a source.

This verb writes DIR on a connected host: `pip download --require-hashes --no-deps
--only-binary :all:` of exactly those pins for the toolchain's Python and this machine's
platform, from the index each would be installed from (toolchain.toml `index`/`torch-index`,
or SGLFORGE_INDEX / SGLFORGE_TORCH_INDEX naming a mirror), pip's configuration off; the hashes
decide what is accepted, here and again when the sessions install.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError

# manylinux tags pip must accept when it downloads for another interpreter than its own
# (`--platform` is taken literally): the lock's wheels carry tags from 2_17 to 2_28.
MANYLINUX = tuple(f"manylinux_2_{minor}" for minor in range(17, 29)) + ("manylinux2014",)


@dataclass(frozen=True)
class Download:
    what: str  # for the log: "lockfiles/toolchain.lock [build]"
    lines: tuple[str, ...]  # requirement lines with --hash
    index: str  # the index URL (or local directory) to download from


def plan(project_root: Path, checkout: Path, *, torch: bool, runtime: bool) -> list[Download]:
    """What DIR must hold: sglforge.lock, toolchain.lock's sections, and (runtime) the
    third-party pins of lockfiles/runtime.lock."""
    from sglforge.builder import selflock, toolchain_lock
    from sglforge.inputs.toolchain import load_toolchain

    toolchain = load_toolchain(project_root / "lockfiles" / "toolchain.toml")
    try:
        lock = toolchain_lock.parse_lock(project_root / "lockfiles" / "toolchain.lock")
    except toolchain_lock.LockError as exc:
        raise SglforgeError(str(exc)) from None
    index = toolchain_lock.index_for("build", toolchain.index, None)
    downloads = [
        Download(
            f"lockfiles/{selflock.LOCK} (sglforge's own dependencies)",
            tuple(
                p.render() for p in selflock.parse_self_lock(checkout / "lockfiles" / selflock.LOCK)
            ),
            index,
        )
    ]
    for section in toolchain_lock.SECTIONS:
        if section.startswith("torch") and not torch:
            continue
        entries = lock.sections.get(section, [])
        if entries:
            downloads.append(
                Download(
                    f"lockfiles/toolchain.lock [{section}]",
                    tuple(e.render() for e in entries),
                    toolchain_lock.index_for(section, toolchain.index, toolchain.torch_index),
                )
            )
    if runtime:
        runtime_lock = project_root / "lockfiles" / "runtime.lock"
        if not runtime_lock.is_file():
            raise SglforgeError(f"--runtime: {runtime_lock} does not exist")
        downloads.append(Download("lockfiles/runtime.lock", _runtime_lines(runtime_lock), index))
    return downloads


def _runtime_lines(path: Path) -> tuple[str, ...]:
    """runtime.lock's entries (with their continuation lines), comments dropped."""
    from sglforge.base.fs import TEXT_INPUT_CAP
    from sglforge.base.requirements import parse_pinned
    from sglforge.base.tomlfile import read_input_text

    pins, problems = parse_pinned(read_input_text(path, TEXT_INPUT_CAP, "runtime lock"))
    if problems:
        raise SglforgeError(f"{path}:\n" + "\n".join(f"  {p}" for p in problems))
    return tuple(p.render() for p in pins)


def pip_download(python: str, download: Download, dest: Path, version: str, workdir: Path):
    """The `pip download` command line for one group of pins."""
    from sglforge.builder import toolchain_lock

    requirements = workdir / f"wheelhouse-{abs(hash(download.what)):x}.txt"
    requirements.write_text("\n".join(download.lines) + "\n", encoding="utf-8")
    machine = platform.machine()
    platforms = [f"{tag}_{machine}" for tag in MANYLINUX] + [f"linux_{machine}", "any"]
    return [
        python,
        "-m",
        "pip",
        "download",
        "--require-hashes",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--python-version",
        version,
        "--implementation",
        "cp",
        *[arg for tag in platforms for arg in ("--platform", tag)],
        *toolchain_lock.index_args(download.index),
        "--dest",
        str(dest),
        "-r",
        str(requirements),
    ]


def write_wheelhouse(
    project_root: Path, checkout: Path, dest: Path, *, torch: bool, runtime: bool
) -> list[str]:
    """Download every planned pin into `dest`; the lines to print. A pip failure is an error
    naming the group (pip's own output was shown)."""
    import tempfile

    from sglforge.builder import toolchain_lock
    from sglforge.inputs.toolchain import load_toolchain

    version = load_toolchain(project_root / "lockfiles" / "toolchain.toml").python
    downloads = plan(project_root, checkout, torch=torch, runtime=runtime)
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    with tempfile.TemporaryDirectory(prefix="sglforge-wheelhouse-") as tmp:
        for download in downloads:
            print(
                f"wheelhouse: {download.what}: {len(download.lines)} wheel(s) from "
                f"{download.index}",
                flush=True,
            )
            cmd = pip_download(sys.executable, download, dest, version, Path(tmp))
            proc = subprocess.run(cmd, env=toolchain_lock.pip_env(), check=False)
            if proc.returncode != 0:
                raise SglforgeError(
                    f"wheelhouse: pip download of {download.what} failed (exit "
                    f"{proc.returncode}); {dest} holds what came before it",
                    hint="check the network or the index (SGLFORGE_INDEX); the hashes come "
                    "from the lock, so a mirror must serve the same files",
                )
            done.append(f"{download.what}: {len(download.lines)} wheel(s)")
    return done
