"""`python -m demo [--workdir DIR]` (what `nox -s demo` runs): the whole sglforge flow on the
small example project in demo/project, offline, in a few minutes on two cores.

1. generate the two upstreams (demo/upstreams.py) at the commits demo/project pins, as a local
   mirror of https://example.invalid/ (nothing is fetched from the network);
2. copy demo/project to the work directory and write what depends on this host: its
   toolchain.toml (this Python, the installed build tools, the CUDA release found: a build
   runs against exactly what the toolchain pins) and a user config naming the mirror;
3. run `python -m sglforge` the way a user does: preflight (arguments, inputs, nvcc,
   cuobjdump) → fetch (checked commits) → patches check
   (strict apply of the DEP-3 series on scratch exports) → build (both wheels; the arch audit
   requires sm_120a in the CUDA library; the stack check runs at the end) → verify (rebuild
   from scratch, sha256 per wheel) → check → bundle;
4. print where each artifact is.

Needs: nvcc from CUDA 12.8 or newer (sm_120a), cuobjdump (the arch audit), bubblewrap (the
build sandbox) and the build tools the recipes name (setuptools, setuptools-scm, wheel,
scikit-build-core, cmake, ninja) in this interpreter; `nox -s demo` checks the first three
with `python -m demo --preflight` before it installs the build tools. No GPU is needed.

The work directory is wiped first only when it is empty or the demo made it (its marker file
`.sglforge-demo`); anything else is refused. One demo at a time per work directory: the
demo holds the lock a build holds on its output directory (`.<name>.sglforge-lock` beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from demo.upstreams import CUDAEXT, MIRROR_PREFIX, PUREPY, make_repo

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT = HERE / "project"
UPSTREAMS = {"purepy": PUREPY, "cudaext": CUDAEXT}
BUILD_TOOLS = ("setuptools", "setuptools-scm", "wheel", "scikit-build-core", "cmake", "ninja")


MARKER = ".sglforge-demo"  # in a work directory the demo made: only such a one is wiped
CUDA_MIN = (12, 8)  # sm_120a
CUOBJDUMP_HINT = (
    "install the CUDA toolkit's cuobjdump (apt: cuda-cuobjdump-13-0), or "
    '`pip install "nvidia-cuda-cuobjdump>=13.2,<14"` into the interpreter that runs nox (PyPI '
    "has no 13.0 or 13.1 release; a 13.x cuobjdump reads CUDA 13.0 cubins), or set "
    "SGLFORGE_CUOBJDUMP to one"
)


class DemoError(Exception):
    """A demo step that cannot go on; `status` is the exit status (a failed sglforge step's
    own: 1 a failed build or check, 2 bad input)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def check_workdir(workdir: Path) -> None:
    """The demo wipes its work directory: refuse one it did not make (not empty, no marker)."""
    if not workdir.exists() and not workdir.is_symlink():
        return
    if not workdir.is_dir() or workdir.is_symlink():
        raise DemoError(f"--workdir {workdir}: exists and is not a directory; nothing was changed")
    if any(workdir.iterdir()) and not (workdir / MARKER).is_file():
        raise DemoError(
            f"--workdir {workdir}: not empty and not a demo work directory (no {MARKER} "
            "marker): the demo wipes its work directory, so it refuses this one; nothing was "
            "changed. Name a new or empty directory (default: build/demo)"
        )


@contextlib.contextmanager
def workdir_lock(workdir: Path) -> Iterator[None]:
    """The lock a build takes on its output directory, for the demo's work directory: a
    second demo there fails at once naming the holder (it would wipe the first one's files)."""
    from sglforge.base.errors import SglforgeError
    from sglforge.base.fs import exclusive_lock

    lock = workdir.parent / f".{workdir.name}.sglforge-lock"
    try:
        with exclusive_lock(lock, f"demo work directory {workdir}"):
            yield
    except SglforgeError as exc:
        raise DemoError(str(exc)) from None


def check_host() -> list[str]:
    """What the demo needs from the host beyond the build tools, checked before any install
    or work: nvcc (CUDA >= 12.8), cuobjdump (the arch audit), bubblewrap (the sandbox)."""
    from sglforge.base.errors import SglforgeError
    from sglforge.builder import sandbox
    from sglforge.wheel.audit import find_cuobjdump

    release = cuda_release()
    if tuple(int(x) for x in release.split(".")[:2]) < CUDA_MIN:
        raise DemoError(f"nvcc is CUDA {release}: the demo builds for sm_120a (CUDA 12.8 or newer)")
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    try:
        cuobjdump = find_cuobjdump(home)
        box = sandbox.find()
    except SglforgeError as exc:
        raise DemoError(str(exc)) from None
    if cuobjdump is None:
        raise DemoError(
            f"cuobjdump not found ({home}/bin, PATH, an nvidia-cuda-cuobjdump wheel of "
            f"{sys.executable}): the demo audits its CUDA wheel for sm_120a with it\n"
            f"hint: {CUOBJDUMP_HINT}"
        )
    return [f"nvcc CUDA {release}", f"cuobjdump {cuobjdump}", f"sandbox bubblewrap {box.version}"]


def pinned_commits() -> dict[str, str]:
    """name -> commit, from demo/project/lockfiles/upstreams.toml (read with sglforge's own
    lockfile reader)."""
    from sglforge.inputs.pins import parse_lockfile

    return {p.name: p.commit for p in parse_lockfile(PROJECT / "lockfiles" / "upstreams.toml").pins}


def make_mirror(mirror: Path) -> dict[str, str]:
    """The upstreams as git repositories under `mirror` (org/<name>); each must come out at
    its pinned commit, or the generator and the pins disagree."""
    commits = {}
    pins = pinned_commits()
    for name, files in UPSTREAMS.items():
        commits[name] = make_repo(mirror / "org" / name, files)
        if commits[name] != pins[name]:
            raise DemoError(
                f"demo/upstreams.py generates {name} at {commits[name]}, but "
                f"demo/project/lockfiles/upstreams.toml pins {pins[name]}"
            )
    return commits


def cuda_release() -> str:
    if os.environ.get("CUDA_HOME") and not Path(os.environ["CUDA_HOME"], "bin", "nvcc").is_file():
        raise DemoError(  # the user's choice: never passed over for /usr/local/cuda
            f"CUDA_HOME={os.environ['CUDA_HOME']}: no bin/nvcc there; point it at a CUDA 12.8+ "
            "toolkit, or unset it to use /usr/local/cuda or the nvcc on PATH"
        )
    for nvcc in (
        os.environ.get("CUDA_HOME", "") + "/bin/nvcc",
        "/usr/local/cuda/bin/nvcc",
        shutil.which("nvcc") or "",
    ):
        if nvcc and Path(nvcc).is_file():
            out = subprocess.run(
                [nvcc, "--version"], capture_output=True, text=True, check=False
            ).stdout
            if "release " in out:
                return out.split("release ")[1].split(",")[0]
    raise DemoError(
        "nvcc not found ($CUDA_HOME/bin, /usr/local/cuda/bin, PATH): the demo "
        "builds a CUDA extension for sm_120a (CUDA 12.8 or newer)"
    )


def toolchain_toml() -> str:
    missing = []
    pins = []
    for name in BUILD_TOOLS:
        try:
            pins.append(f'{name} = "{importlib.metadata.version(name)}"')
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise DemoError(
            f"this interpreter ({sys.executable}) lacks {', '.join(missing)}: "
            "run the demo with `nox -s demo`, which installs them"
        )
    return (
        "# Written by `python -m demo` for this host: the interpreter, build tools and CUDA\n"
        "# release the demo builds with (a build checks it runs with exactly these).\n"
        f'cuda = "{cuda_release()}"\n'
        f'python = "{sys.version_info.major}.{sys.version_info.minor}"\n\n'
        "[build-requires]\n" + "\n".join(pins) + "\n"
    )


def prepare(workdir: Path) -> dict[str, Path]:
    check_workdir(workdir)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text("made by `python -m demo`; wiped by the next demo run\n")
    paths = {
        "project": workdir / "project",
        "mirror": workdir / "mirror",
        "cache": workdir / "cache",
        "build_root": workdir / "build-root",
        "config": workdir / "config.toml",
    }
    make_mirror(paths["mirror"])
    shutil.copytree(PROJECT, paths["project"])
    (paths["project"] / "lockfiles" / "toolchain.toml").write_text(toolchain_toml())
    (paths["project"] / "wheels").mkdir()
    paths["config"].write_text(f'[mirrors]\n"{MIRROR_PREFIX}" = "{paths["mirror"]}/"\n')
    return paths


def sglforge(paths: dict[str, Path], *args: str) -> str:
    """One `python -m sglforge` step, output shown as it comes; a failure stops the demo."""
    cmd = [
        sys.executable,
        "-m",
        "sglforge",
        "--project",
        str(paths["project"]),
        "--config",
        str(paths["config"]),
        "--cache-dir",
        str(paths["cache"]),
        "--build-root",
        str(paths["build_root"]),
        *args,
    ]
    print(f"\n$ sglforge {' '.join(args)}", flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("SGLFORGE_PROJECT", "SGLFORGE_CONFIG")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        raise DemoError(
            f"`sglforge {' '.join(args)}` exited with status {proc.returncode}",
            status=proc.returncode if proc.returncode > 0 else 2,
        )
    return proc.stdout


def run(workdir: Path) -> int:
    started = time.monotonic()
    check_workdir(workdir)  # before anything else: nothing is run for a refused directory
    check_host()
    with workdir_lock(workdir):
        return _run(workdir, started)


def _run(workdir: Path, started: float) -> int:
    paths = prepare(workdir)
    print(
        f"demo project: {paths['project']} (a copy of demo/project)\n"
        f"local mirror: {paths['mirror']} (of {MIRROR_PREFIX}; generated, pinned commits)"
    )
    sglforge(paths, "preflight", "--no-fetch", "build")  # host and inputs, before any work
    sglforge(paths, "fetch")
    sglforge(paths, "patches", "check")
    sglforge(paths, "build")
    verify_out = paths["project"] / "verify"
    sglforge(paths, "verify", "--out", str(verify_out))
    sglforge(paths, "check")
    bundle = sglforge(paths, "bundle", "--out", str(workdir / "dist"))
    bundle = next(line for line in bundle.splitlines() if line.startswith("bundle: wrote"))
    wheels = sorted((paths["project"] / "wheels").glob("*.whl"))
    print(f"\ndemo: done in {time.monotonic() - started:.0f}s. Artifacts:")
    for wheel in wheels:
        print(f"  wheel           {wheel}")
    print(f"  manifest        {paths['project'] / 'wheels' / 'manifest.json'}")
    print(f"  hash lock       {paths['project'] / 'lockfiles' / 'wheels.lock'}")
    print(f"  build logs      {paths['build_root'] / 'logs'}")
    print(f"  patched trees   {paths['build_root'] / 'src'}")
    print(f"  verify rebuild  {verify_out} (bit-identical to wheels/)")
    print(f"  bundle          {bundle.strip().rsplit(' ', 1)[-1]}")
    print(f"  source cache    {paths['cache']}")
    print(
        f"  smoke (no GPU)  nox -s smoke -- --project {paths['project']} --profile laptop"
        "  (stand-in servers: the smoke's plumbing)"
    )
    return 0


def preflight(workdir: Path) -> int:
    check_workdir(workdir)
    with workdir_lock(workdir):  # free now (a demo running there is named)
        pass
    found = check_host()
    print(f"demo preflight: work directory {workdir} ok; {'; '.join(found)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description=" ".join(__doc__.split("\n\n")[0].split()),
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=ROOT / "build" / "demo",
        help=f"where the demo writes everything (default: build/demo); wiped first, and "
        f"refused unless new, empty or made by the demo (its {MARKER} marker)",
    )
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="only check the work directory, its lock and the host (nvcc, cuobjdump, "
        "bubblewrap), in seconds: what `nox -s demo` runs before it installs anything",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    try:
        if args.preflight:
            return preflight(args.workdir.resolve())
        return run(args.workdir.resolve())
    except DemoError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("demo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
