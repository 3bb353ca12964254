"""Thin sessions: each installs what it needs and calls `sglforge <verb>`.

`plan` and `fetch` run sglforge from src/ with the interpreter nox runs under (standard
library only), so they work on an air-gapped host that has nox and git. `patches` also runs
from src/, in a venv holding only `unidiff` (the diff parser; pure Python, no dependencies):
on an air-gapped host point pip at a local copy of that one wheel (PIP_FIND_LINKS=DIR
PIP_NO_INDEX=1). sglforge imports unidiff only where it parses a diff.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = os.path.dirname(os.path.abspath(__file__))
SRC_ENV = {"PYTHONPATH": os.path.join(ROOT, "src")}
UNIDIFF = "unidiff>=1.0,<2"  # as in pyproject.toml
UV = "uv==0.13.9"  # the resolver of lockfiles/runtime.lock (sglforge.wheel.runtime.UV_VERSION)
PACKAGING = "packaging>=24"  # as in pyproject.toml; `check` needs only this (+ tomli < 3.11)


def _sglforge(session: nox.Session, verb: str) -> None:
    session.run(sys.executable, "-m", "sglforge", verb, *session.posargs, env=SRC_ENV,
                external=True)


@nox.session(python=False)
def plan(session: nox.Session) -> None:
    """Print pins, patch series with digests and build steps (offline)."""
    _sglforge(session, "plan")


@nox.session(python=False)
def fetch(session: nox.Session) -> None:
    """Fetch pinned sources into the cache and export clean work trees.

    -- [UPSTREAM...] [--offline] [--bundle FILE | --from-bundle FILE] [--mirror U=M]
    """
    _sglforge(session, "fetch")


@nox.session
def patches(session: nox.Session) -> None:
    """Check, apply, refresh or lint the patch series.

    -- check|apply|refresh|lint [UPSTREAM...] [--offline] [--onto COMMIT]
    """
    session.install(UNIDIFF)
    session.run("python", "-m", "sglforge", "patches", *session.posargs, env=SRC_ENV)


@nox.session
def check(session: nox.Session) -> None:
    """Check that the built wheels and runtime.lock fit together.

    Requirements resolve, SGLang's kernel API names exist, labels match pins, one
    Python/torch ABI (offline, CPU only; -- --wheels DIR ...)."""
    session.install(PACKAGING, "tomli>=2.0; python_version < '3.11'")
    session.run("python", "-m", "sglforge", "check", *session.posargs, env=SRC_ENV)


@nox.session(python=False)
def smoke(session: nox.Session) -> None:
    """GPU host: smoke-test the wheels with a prefill/decode pair.

    Installs wheels/ into a fresh venv, launches the PD pair + router, runs checks
    (-- --model PATH|tiny, --profile NAME, --dry-run, --python PATH). It builds its own venv
    from the lock, unless --python/--venv names an existing environment.
    """
    _sglforge(session, "smoke")


@nox.session(python=False)
def doctor(session: nox.Session) -> None:
    """Check this host against a smoke profile and the built wheels.

    -- [--profile NAME] [--python PATH]
    """
    _sglforge(session, "doctor")


@nox.session(default=False)
def dev(session: nox.Session) -> None:
    """Make a venv with sglforge installed editable (the `sglforge` CLI).

    Then `source .nox/dev/bin/activate` (printed) and run `sglforge --help`, or call
    `.nox/dev/bin/sglforge …` directly. Every documented command also works as `nox -s VERB`.
    """
    session.install("-e", ".")
    session.run("sglforge", "--help", silent=True)  # the entry point works
    activate = os.path.relpath(os.path.join(session.bin, "activate"), ROOT)
    session.log(f"sglforge is installed (editable) in {os.path.relpath(session.bin, ROOT)}; "
                f"activate with:  source {activate}")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (synthetic upstream repos; no network needed)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmark builds, rebuilds, the dev loop and verify (~25 min).

    Cold build, no-op rebuild, one-file change, memory budget, patch check, verify ->
    bench/results.json + a table (-- --quick, --runs N, --n 4 8 16). Not part of the tests;
    about 25 minutes on 2 cores (bench/README.md).
    """
    session.install("-e", ".[test]")
    session.run("python", "-m", "bench", *session.posargs)


def _toolchain_python() -> str:
    """The interpreter wheels are built with: `python` in lockfiles/toolchain.toml."""
    import re

    with open(os.path.join(ROOT, "lockfiles", "toolchain.toml"), encoding="utf-8") as handle:
        match = re.search(r'^python\s*=\s*"([0-9.]+)"', handle.read(), re.MULTILINE)
    return match.group(1) if match else "3"


def _probe_python(candidate: str, version: str) -> bool:
    import subprocess

    try:
        code = "import sys; print('%d.%d' % sys.version_info[:2])"
        proc = subprocess.run([candidate, "-c", code],
                              capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return False
    return proc.returncode == 0 and proc.stdout.strip() == version


def _find_toolchain_python(version: str) -> str | None:
    """$SGLFORGE_TOOLCHAIN_PYTHON, pythonX.Y on PATH, or uv's managed interpreter; each is
    run once (a pyenv shim without that version fails the probe)."""
    import shutil
    import subprocess

    candidates = [os.environ.get("SGLFORGE_TOOLCHAIN_PYTHON"), shutil.which(f"python{version}")]
    uv = shutil.which("uv")
    if uv:
        found = subprocess.run([uv, "python", "find", version], capture_output=True, text=True,
                               check=False)
        candidates.append(found.stdout.strip() if found.returncode == 0 else None)
    return next((c for c in candidates if c and _probe_python(c, version)), None)


def _require_toolchain_python(session: nox.Session) -> str:
    """The toolchain interpreter, or a non-zero exit that says how to get it."""
    version = _toolchain_python()
    python = _find_toolchain_python(version)
    if python is None:
        session.error(
            f"Python {version} (lockfiles/toolchain.toml `python`) was not found: wheels are "
            f"built with exactly that interpreter.\n"
            f"  get it:  uv python install {version}   (https://docs.astral.sh/uv/)\n"
            f"      or:  sudo apt install python{version} python{version}-venv   "
            f"(Debian/Ubuntu; deadsnakes PPA on older releases)\n"
            f"  or point at one: SGLFORGE_TOOLCHAIN_PYTHON=/path/to/python{version} nox -s "
            f"{session.name}")
    return python


OPTIONS_WITH_VALUE = {"--jobs", "--mem-per-job", "--wheelhouse", "--compiler-cache", "--out",
                      "--compiler-cache-remote",
                      "--wave", "--max-waves", "--output",  # plan --matrix
                      # global options, accepted after the verb too
                      "--project", "--config", "--cache-dir", "--build-root", "--mirror"}


def _recipe_names(args: list[str]) -> list[str]:
    names, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            names.append(arg)
    return names


def _selection(names: list[str]) -> tuple[list[str], bool]:
    """(upstreams to fetch, whether torch is needed) for the selected recipes (src/, stdlib)."""
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from sglforge.inputs.pins import parse_lockfile
    from sglforge.inputs.recipes import load_recipes, select
    from sglforge.inputs.toolchain import load_toolchain

    lock = parse_lockfile(Path(ROOT, "lockfiles", "upstreams.toml"))
    toolchain = load_toolchain(Path(ROOT, "lockfiles", "toolchain.toml"))
    recipes = load_recipes(Path(ROOT, "recipes"), lock, toolchain)
    chosen = select(recipes, names)
    torch = any(recipes[n].requires_torch_abi or "torch" in recipes[n].build_requires
                for n in chosen)
    return sorted({recipes[n].upstream for n in chosen}), torch


def _bootstrap(session: nox.Session, *, fetch: bool = True) -> str:
    """Fail fast, then install: toolchain Python present, sources fetched and checked (seconds,
    stdlib only; not with fetch=False), then a venv with sglforge and lockfiles/toolchain.lock
    (hash-pinned, pip.conf off, torch only when a selected recipe needs it), with pip's
    progress bars. Returns the venv's python."""
    python = _require_toolchain_python(session)
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from sglforge.base.errors import SglforgeError
    from sglforge.build import toolchain_lock

    try:  # bad input is a message, not a traceback from nox
        upstreams, torch = _selection(_recipe_names(list(session.posargs)))
        lock = toolchain_lock.parse_lock(Path(ROOT, "lockfiles", "toolchain.lock"))
    except (SglforgeError, toolchain_lock.LockError) as exc:
        session.error(str(exc))
    if fetch:
        session.log(f"fetching and checking sources first: {', '.join(upstreams)}")
        session.run(sys.executable, "-m", "sglforge", "fetch", *upstreams, env=SRC_ENV,
                    external=True)
    venv = os.path.join(ROOT, ".nox", f"{session.name}-toolchain")
    venv_python = os.path.join(venv, "bin", "python")
    if not _probe_python(venv_python, _toolchain_python()):
        session.run(python, "-m", "venv", "--clear", venv, external=True)
    from sglforge.inputs.toolchain import load_toolchain

    toolchain = load_toolchain(Path(ROOT, "lockfiles", "toolchain.toml"))
    pins = dict(toolchain.build_requires, **({"torch": toolchain.torch} if torch else {}))
    problems = toolchain_lock.check_against_pins(lock, pins)
    if problems:
        session.error("lockfiles/toolchain.lock does not match toolchain.toml:\n  "
                      + "\n  ".join(problems))
    try:
        commands = toolchain_lock.install_commands(
            venv_python, lock, torch, toolchain.index, toolchain.torch_index,
            Path(session.create_tmp()))
    except toolchain_lock.LockError as error:
        session.error(str(error))
    env = toolchain_lock.pip_env()
    session.log("installing sglforge into " + venv)
    session.run(venv_python, "-m", "pip", "install", "--quiet", ROOT, external=True)
    size = ("~100 MB build tools + ~3 GB torch and CUDA libraries (~5 GB installed)" if torch
            else "~100 MB download, no torch")
    session.log(f"installing lockfiles/toolchain.lock ({size}; README: what the first run "
                "downloads)")
    for command in commands:  # env: not merged with ours, so no PIP_* from outside gets in
        session.run(*command, env=env, include_outer_env=False, external=True)
    return venv_python


@nox.session(python=False, default=False)
def build(session: nox.Session) -> None:
    """Build wheels into wheels/ (build host: CUDA 13, the pinned Python).

    -- [RECIPE...] [--jobs N] [--mem-per-job SIZE] [--compiler-cache ccache|sccache|none]
       [--compiler-cache-remote URL] [--compiler-cache-read-only]
       [--no-remote-cache] [--remote-cache-read-only] [--no-check]
    Order: toolchain Python check, source fetch, toolchain install (.nox/build-toolchain), build.
    """
    python = _bootstrap(session)
    session.run(python, "-m", "sglforge", "build", *session.posargs, external=True)


@nox.session(python=False, default=False)
def matrix(session: nox.Session) -> None:
    """Print the CI build jobs missing from the wheel cache as JSON.

    `sglforge plan --matrix` in the build toolchain's venv (content keys need its
    fingerprint): -- [--wave N] [--max-waves N] [--output FILE] [--no-remote-cache].
    Sources are not fetched. README "Many hosts"; ci/github-actions.yml uses it.
    """
    python = _bootstrap(session, fetch=False)
    session.run(python, "-m", "sglforge", "plan", "--matrix", *session.posargs, external=True)


@nox.session(python=False, default=False)
def verify(session: nox.Session) -> None:
    """Rebuild from scratch and compare sha256 with wheels/manifest.json.

    -- [RECIPE...] [--out DIR] [--from-lock]
    --from-lock: expected digests from lockfiles/wheels.lock, wheels/ not needed (a fresh
    checkout on another machine: the guard against a poisoned shared wheel cache).
    """
    if "--from-lock" in session.posargs:
        reference = os.path.join(ROOT, "lockfiles", "wheels.lock")
    else:
        reference = os.path.join(ROOT, "wheels", "manifest.json")
    if not os.path.isfile(reference):
        session.error(f"{reference} does not exist: nothing to verify (run `nox -s build` "
                      "first); nothing was installed")
    python = _bootstrap(session)
    session.run(python, "-m", "sglforge", "verify", *session.posargs, external=True)


@nox.session(python=False, default=False)
def realcheck(session: nox.Session) -> None:
    """Prove the real recipes reproducible -> bench/realcheck.json.

    Builds each reachable recipe twice (two caller venvs), compares sha256, audits,
    leak-scans, installs and imports (-- --help). Not part of the tests."""
    session.run(sys.executable, "-m", "bench.realcheck", *session.posargs,
                env={"PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])},
                external=True)


@nox.session(name="lock-runtime", default=False)
def lock_runtime(session: nox.Session) -> None:
    """Regenerate lockfiles/runtime.lock (needs PyPI; edits the repo).

    Rewrites lockfiles/runtime.in from wheels/ (or -- --metadata FILE...) and resolves it
    with uv into the hash-pinned lockfiles/runtime.lock."""
    session.install(UV, ".")
    session.run("sglforge", "lock-runtime", *session.posargs,
                env={"SGLFORGE_UV": os.path.join(session.bin, "uv")})


@nox.session(python=False)
def bundle(session: nox.Session) -> None:
    """Write an offline release bundle for serving hosts into dist/.

    dist/<name>-<stack-version>.tar.gz: wheels/ + the runtime wheels of -- --wheelhouse DIR,
    requirements.lock, SHA256SUMS, sglforge-stack.json, install.sh."""
    _sglforge(session, "bundle")


@nox.session(python=False)
def publish(session: nox.Session) -> None:
    """Add the wheels to a static PEP 503 index for serving hosts.

    -- DEST [--wheelhouse DIR] [--ours-only]: DEST/simple/ + DEST/files/ for wheels/ and the
    runtime wheels of --wheelhouse (append-only; same bytes again change nothing)."""
    _sglforge(session, "publish")
