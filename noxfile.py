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
    """Benchmark builds, rebuilds, patch checks and verify (~15 min).

    Cold build, no-op rebuild, one-file change, memory budget, patch check, verify ->
    bench/results.json + a table (-- --quick, --runs N, --n 4 8 16). Not part of the tests;
    about 15 minutes on 2 cores (bench/README.md).
    """
    session.install("-e", ".[test]")
    session.run("python", "-m", "bench", *session.posargs)


def _toolchain_python() -> str:
    """The interpreter wheels are built with: `python` in lockfiles/toolchain.toml."""
    import re

    with open(os.path.join(ROOT, "lockfiles", "toolchain.toml"), encoding="utf-8") as handle:
        match = re.search(r'^python\s*=\s*"([0-9.]+)"', handle.read(), re.MULTILINE)
    return match.group(1) if match else "3"


def _install_build_requirements(session: nox.Session) -> None:
    session.install(".")
    requirements = os.path.join(session.create_tmp(), "build-requirements.txt")
    text = session.run("sglforge", "build-requirements", silent=True)
    with open(requirements, "w", encoding="utf-8") as handle:
        handle.write(text or "")
    session.install("-r", requirements)


@nox.session(python=_toolchain_python(), default=False)
def build(session: nox.Session) -> None:
    """Build wheels into wheels/ (build host: CUDA 13, the pinned Python).

    -- [RECIPE...] [--jobs N] [--mem-per-job SIZE] [--compiler-cache ccache|sccache]
    """
    _install_build_requirements(session)
    session.run("sglforge", "build", *session.posargs)


@nox.session(python=_toolchain_python(), default=False)
def verify(session: nox.Session) -> None:
    """Rebuild from scratch and compare sha256 with wheels/manifest.json.

    -- [RECIPE...] [--out DIR]
    """
    _install_build_requirements(session)
    session.run("sglforge", "verify", *session.posargs)


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
