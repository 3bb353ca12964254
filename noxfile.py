"""sglforge's sessions: `nox -s demo` first on a fresh machine; `nox` alone runs `plan`.

`nox -s VERB -- ARGS` runs `sglforge VERB ARGS`; docs/build-host.md has the details."""

# Thin sessions: each checks first, installs what it needs and calls `sglforge <verb>`. The
# logic lives in the package (`sglforge.cli.nox_sessions`, imported from src/ with the
# interpreter nox runs under, standard library only): every session that installs something
# first runs `sglforge preflight VERB ARGS` (the verb's own parser, settings, recipes, host),
# so a mistake costs seconds, not an install; sglforge's exit status is nox's (2 stays 2), and
# SIGTERM/SIGHUP to nox reach sglforge, which stops what it started before nox exits.
#
# `plan` and `fetch` run sglforge from src/ with nox's interpreter, so they work on an
# air-gapped host that has nox and git. `patches` also runs from src/, in a venv holding only
# `unidiff` (the diff parser; pure Python, no dependencies; installed once, not on every run):
# on an air-gapped host SGLFORGE_INDEX=DIR (`nox -s wheelhouse -- DIR` writes it) is where it
# comes from, as for every session. sglforge imports unidiff only where it parses a diff.

from __future__ import annotations

import os
import sys
from pathlib import Path

if sys.version_info < (3, 10):  # noqa: UP036 - sglforge's own code needs 3.10: say so, not a TypeError
    print(
        f"error: this noxfile needs nox on Python 3.10 or newer (nox runs on "
        f"{sys.version_info[0]}.{sys.version_info[1]}: {sys.executable}); "
        "e.g. `python3.12 -m pip install nox && python3.12 -m nox …`",
        file=sys.stderr,
    )
    sys.exit(2)  # a refused host (README "Exit status")
import nox  # after the version check

# `nox` alone: seconds, offline, nothing installed (the test suite is `nox -s tests`, ~15 min)
nox.options.sessions = ["plan"]
nox.options.reuse_existing_virtualenvs = True

ROOT = os.path.dirname(os.path.abspath(__file__))
SRC_ENV = {"PYTHONPATH": os.path.join(ROOT, "src")}
sys.path.insert(0, SRC_ENV["PYTHONPATH"])
from sglforge.cli import nox_sessions  # noqa: E402  (the sessions' logic; stdlib only)

nox_sessions.terminate_as_interrupt()  # SIGTERM to nox reaps what it runs (pip included)
UNIDIFF = "unidiff>=1.0,<2"  # as in pyproject.toml
UV = "uv==0.13.9"  # the resolver of lockfiles/runtime.lock (sglforge.wheel.runtime.UV_VERSION)
PACKAGING = "packaging>=24"  # as in pyproject.toml; `check` needs only this (+ tomli < 3.11)
TOMLI = "tomli>=2.0; python_version < '3.11'"


def _sglforge(session: nox.Session, verb: str) -> None:
    nox_sessions.run_sglforge(
        session, [sys.executable, "-m", "sglforge", verb, *session.posargs], SRC_ENV
    )


@nox.session(python=False)
def plan(session: nox.Session) -> None:
    """Print pins, patch series with digests and build steps (offline)."""
    _sglforge(session, "plan")


@nox.session(python=False)
def fetch(session: nox.Session) -> None:
    """Fetch pinned sources into the cache and export clean work trees.

    -- [UPSTREAM...] [--offline] [--bundle FILE [--depth N] | --from-bundle FILE]
       [--mirror U=M]
    """
    _sglforge(session, "fetch")


@nox.session(default=False)
def patches(session: nox.Session) -> None:
    """Check, apply, refresh or lint the patch series.

    -- check|apply|refresh|lint [UPSTREAM...] [--offline] [--onto COMMIT]
    """
    if nox_sessions.preflight(session, Path(ROOT), "patches", session.posargs, fetch=False):
        nox_sessions.install_missing(session, UNIDIFF, "unidiff")
        nox_sessions.run_sglforge(
            session, ["python", "-m", "sglforge", "patches", *session.posargs], SRC_ENV
        )


@nox.session(default=False)
def canary(session: nox.Session) -> None:
    """Try each patch series on its upstream's newest release and head.

    Per entry: applies, conflicts (files, hunks) or upstream (a candidate to drop); exit 1
    when anything needs attention. -- [UPSTREAM...] [--offline] [--branch UPSTREAM=BRANCH]
    [--output FILE] [--json]
    """
    if nox_sessions.preflight(session, Path(ROOT), "canary", session.posargs, fetch=False):
        nox_sessions.install_missing(session, UNIDIFF, "unidiff")
        nox_sessions.run_sglforge(
            session, ["python", "-m", "sglforge", "canary", *session.posargs], SRC_ENV
        )


@nox.session
def check(session: nox.Session) -> None:
    """Check that the built wheels and runtime.lock fit together.

    Requirements resolve, SGLang's kernel API names exist, labels match pins, one
    Python/torch ABI (offline, CPU only; -- --wheels DIR ...)."""
    if nox_sessions.preflight(session, Path(ROOT), "check", session.posargs, fetch=False):
        nox_sessions.install_missing(session, PACKAGING, "packaging")
        nox_sessions.install_missing(session, TOMLI, "tomli")
        nox_sessions.run_sglforge(
            session, ["python", "-m", "sglforge", "check", *session.posargs], SRC_ENV
        )


@nox.session(python=False)
def smoke(session: nox.Session) -> None:
    """GPU host: smoke-test the wheels with a prefill/decode pair.

    Installs wheels/ into a fresh venv, launches the PD pair + router, runs checks
    (-- --model PATH|tiny, --profile NAME, --dry-run, --python PATH). It builds its own venv
    from the lock, unless --python/--venv names an existing environment.
    """
    _sglforge(session, "smoke")


@nox.session(python=False, default=False)
def warm(session: nox.Session) -> None:
    """GPU host: capture the servers' JIT caches into one artifact.

    Runs the smoke once with empty caches (issue 34) and writes
    build/jitcache/jitcache-<key16>.tar.gz; use it with `nox -s smoke -- --jit-cache FILE`.
    Takes smoke's options (--profile, --model, --python, --lock, --out) and --artifact-dir,
    --jit-root.
    """
    _sglforge(session, "warm")


@nox.session(python=False)
def doctor(session: nox.Session) -> None:
    """Check this host against a smoke profile and the built wheels.

    -- [--profile NAME] [--python PATH]
    """
    _sglforge(session, "doctor")


@nox.session(python=False, default=False)
def profile(session: nox.Session) -> None:
    """GPU host: propose a PD profile from the GPU/NUMA/NIC topology.

    -- --from-host|--facts CAPTURE [--save-facts PATH] [--out FILE [--force]] [--model M]
    """
    _sglforge(session, "profile")


@nox.session(default=False)
def dev(session: nox.Session) -> None:
    """Make a venv with sglforge installed editable (the `sglforge` CLI).

    Then `source .nox/dev/bin/activate` (printed) and run `sglforge --help`, or call
    `.nox/dev/bin/sglforge …` directly. Every documented command also works as `nox -s VERB`.
    """
    session.install("-e", ".")
    session.run("sglforge", "--help", silent=True)  # the entry point works
    activate = os.path.relpath(os.path.join(session.bin, "activate"), ROOT)
    session.log(
        f"sglforge is installed (editable) in {os.path.relpath(session.bin, ROOT)}; "
        f"activate with:  source {activate}"
    )


@nox.session
def lint(session: nox.Session) -> None:
    """Lint and format check with the pinned ruff (CI runs it first).

    ruff check and ruff format --check over the repository. The rules and why each family is
    on: pyproject.toml [tool.ruff.lint]; the ruff version: lockfiles/lint.lock (hash-pinned)."""
    session.install("--require-hashes", "--no-deps", "-r", "lockfiles/lint.lock")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


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


@nox.session(python=False, default=False)
def build(session: nox.Session) -> None:
    """Build wheels into wheels/ (build host: CUDA 13, the pinned Python).

    -- [RECIPE...] [--jobs N] [--mem-per-job SIZE] [--compiler-cache ccache|sccache|none]
       [--compiler-cache-remote URL] [--compiler-cache-read-only]
       [--no-remote-cache] [--remote-cache-read-only] [--no-check]
    Order: arguments, settings, CUDA and recipes checked; sources fetched; toolchain Python
    found; toolchain installed (.nox/toolchain-*, shared with verify and matrix); build.
    """
    python = nox_sessions.prepare_toolchain(session, Path(ROOT), "build", session.posargs)
    if python:
        nox_sessions.run_sglforge(
            session,
            [python, "-m", "sglforge", "build", *session.posargs],
            nox_sessions.audit_tools_env(),
        )


@nox.session(python=False, default=False)
def matrix(session: nox.Session) -> None:
    """Print the CI build jobs missing from the wheel cache as JSON.

    `sglforge plan --matrix` in the build toolchain's venv (content keys need its
    fingerprint): -- [--wave N] [--max-waves N] [--output FILE] [--no-remote-cache].
    Sources are not fetched. docs/many-hosts.md; ci/github-actions.yml uses it.
    """
    args = ["--matrix", *session.posargs]
    python = nox_sessions.prepare_toolchain(session, Path(ROOT), "plan", args, fetch=False)
    if python:
        nox_sessions.run_sglforge(session, [python, "-m", "sglforge", "plan", *args])


@nox.session(python=False, default=False)
def verify(session: nox.Session) -> None:
    """Rebuild from scratch and compare sha256 with wheels/manifest.json.

    -- [RECIPE...] [--out DIR] [--from-lock]
    --from-lock: expected digests from lockfiles/wheels.lock, wheels/ not needed (a fresh
    checkout on another machine: the guard against a poisoned shared wheel cache).
    """
    python = nox_sessions.prepare_toolchain(session, Path(ROOT), "verify", session.posargs)
    if python:
        nox_sessions.run_sglforge(
            session,
            [python, "-m", "sglforge", "verify", *session.posargs],
            nox_sessions.audit_tools_env(),
        )


@nox.session(python=False, default=False)
def demo(session: nox.Session) -> None:
    """Run the whole flow on the example project in demo/ (offline, minutes).

    Generated upstreams served from a local mirror -> fetch -> strict patch check -> build (a
    CUDA extension for sm_120a + a pure-Python wheel; arch audit; stack check) -> verify ->
    check -> bundle, into build/demo/; prints where each artifact is. Needs nvcc and the
    toolchain Python; installs the hash-pinned build tools (no torch) into the shared
    toolchain venv. -- [--workdir DIR]
    """
    nox_sessions.demo(session, Path(ROOT))


@nox.session(python=False, default=False)
def realcheck(session: nox.Session) -> None:
    """Prove the real recipes reproducible -> bench/realcheck.json.

    Builds each reachable recipe twice (two caller venvs), compares sha256, audits,
    leak-scans, installs and imports (-- --help). Not part of the tests."""
    session.run(
        sys.executable,
        "-m",
        "bench.realcheck",
        *session.posargs,
        env={"PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])},
        external=True,
    )


@nox.session(name="lock-runtime", default=False)
def lock_runtime(session: nox.Session) -> None:
    """Regenerate lockfiles/runtime.lock (needs PyPI; edits the repo).

    Rewrites lockfiles/runtime.in from wheels/ (or -- --metadata FILE...) and resolves it
    with uv into the hash-pinned lockfiles/runtime.lock. `-- --check` (is the lock stale?)
    runs offline and installs nothing."""
    if not nox_sessions.preflight(
        session, Path(ROOT), "lock-runtime", session.posargs, fetch=False
    ):
        return
    if "--check" in session.posargs:
        _sglforge(session, "lock-runtime")
        return
    session.install(UV, ".")
    nox_sessions.run_sglforge(
        session,
        ["sglforge", "lock-runtime", *session.posargs],
        {"SGLFORGE_UV": os.path.join(session.bin, "uv")},
    )


@nox.session(python=False, default=False)
def wheelhouse(session: nox.Session) -> None:
    """Download the wheels the offline sessions install (DIR).

    -- DIR [--torch] [--runtime]; then SGLFORGE_INDEX=DIR nox -s demo|build|smoke on the
    host without an index (docs/air-gapped.md)."""
    _sglforge(session, "wheelhouse")


@nox.session(python=False, default=False)
def bundle(session: nox.Session) -> None:
    """Write an offline release bundle for serving hosts into dist/.

    dist/<name>-<stack-version>.tar.gz: wheels/ + the runtime wheels of -- --wheelhouse DIR,
    requirements.lock, SHA256SUMS, sglforge-stack.json, install.sh."""
    _sglforge(session, "bundle")


@nox.session(python=False, default=False)
def publish(session: nox.Session) -> None:
    """Add the wheels to a static PEP 503 index for serving hosts.

    -- DEST [--wheelhouse DIR] [--ours-only]: DEST/simple/ + DEST/files/ for wheels/ and the
    runtime wheels of --wheelhouse (append-only; same bytes again change nothing)."""
    _sglforge(session, "publish")
