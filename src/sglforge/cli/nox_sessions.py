"""What noxfile.py calls: the logic of its sessions, so the noxfile stays a list of thin calls.

Runs inside nox's own process, with sglforge imported from src/ (standard library only):

- `run_sglforge`: run `python -m sglforge VERB …` so that nox's exit takes it down and its
  exit status comes back out of nox. SIGTERM/SIGHUP to nox (a CI system cancelling the job,
  `timeout … nox -s build`) are forwarded to sglforge, which stops everything it started and
  releases the build-root lock before nox exits; a status other than 0 or 1 (2: bad input or
  a failed check, 128+N: a signal) is nox's exit status too (nox itself only knows 1).
- `terminate_as_interrupt`: SIGTERM/SIGHUP while nox runs anything else (pip installing the
  toolchain) act like Ctrl-C, which nox already forwards to its child.
- `toolchain_venv`: the one build-toolchain venv `build`, `verify` and `matrix` share
  (`.nox/toolchain-<digest>`, keyed by lockfiles/toolchain.lock and the Python version),
  prepared only after `sglforge preflight` accepted the arguments, settings, host and sources.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError

HELP = ("-h", "--help")
# Per-session toolchain venvs of older noxfiles (~5 GB each), replaced by the shared one.
OLD_TOOLCHAIN_VENVS = ("build-toolchain", "verify-toolchain", "matrix-toolchain")
# the checkout this module is in (noxfile.py imports it from its src/): what is installed
# into the toolchain venv, with its pyproject.toml and lockfiles/sglforge.lock
SGLFORGE_CHECKOUT = Path(__file__).resolve().parents[3]


def _forwarded(signum: int) -> bool:
    """Whether nox should pass `signum` on to its child. SIGINT from a terminal (Ctrl-C)
    already reaches the whole foreground process group, the child included; a second copy
    would only race its teardown. Sent to nox alone (kill -INT), it is forwarded."""
    if signum != signal.SIGINT:
        return True
    try:
        with open("/dev/tty", "rb") as tty:
            return os.tcgetpgrp(tty.fileno()) != os.getpgrp()
    except OSError:
        return True  # no controlling terminal: nobody else sent it to the child


def exit_with(session: Any, code: int, message: str) -> None:
    """End the session: status 1 the nox way (session.error); any other status by raising
    SystemExit(code), which nox lets through, so `nox -s VERB` exits as `sglforge VERB` did."""
    if code == 1:
        session.error(message)
    session.log(f"{message}; nox exits with the same status ({code})")
    raise SystemExit(code)


def run_sglforge(session: Any, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
    """Run `argv` (an sglforge command) as nox's child; forward termination; pass its exit
    status through (see the module docstring)."""
    argv = [str(a) for a in argv]
    full_env = dict(os.environ)
    venv_bin = _venv_bin(session)
    if venv_bin:  # like session.run in a venv session: its bin/ first on PATH
        full_env["PATH"] = venv_bin + os.pathsep + full_env.get("PATH", "")
        full_env["VIRTUAL_ENV"] = os.path.dirname(venv_bin)
        if os.path.exists(os.path.join(venv_bin, argv[0])):
            argv[0] = os.path.join(venv_bin, argv[0])
    for key, value in {**(getattr(session, "env", None) or {}), **(env or {})}.items():
        if value is None:  # nox's way of saying "unset"
            full_env.pop(key, None)
        else:
            full_env[key] = value
    session.log(" ".join(argv))
    child = subprocess.Popen(argv, env=full_env)
    sent: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if not sent and _forwarded(signum):  # once: sglforge ignores repeats while it tears down
            sent.append(signum)
            child.send_signal(signum)

    previous = {
        s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    }
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if code < 0:  # killed by a signal it did not handle
        code = 128 - code
    if code:
        exit_with(session, code, f"{_label(argv)} exited with status {code}")


def _label(argv: Sequence[str]) -> str:
    """`sglforge build` for `.../python -m sglforge build --jobs 4`."""
    words = [Path(argv[0]).name, *argv[1:]]
    if "sglforge" in words:
        words = words[words.index("sglforge") :]
    return " ".join(words[:2])


def _venv_bin(session: Any) -> str | None:
    """The session's venv bin/ (None for python=False sessions, which have none)."""
    try:
        return str(session.bin)
    except (ValueError, AttributeError):
        return None


def terminate_as_interrupt() -> None:
    """SIGTERM/SIGHUP raise KeyboardInterrupt in nox (main thread): nox then interrupts and
    reaps its running child (pip) instead of dying and leaving it behind."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)


def src_env(root: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(root / "src")}


def audit_tools_env() -> dict[str, str]:
    """For a build or verify in the toolchain venv: the cuobjdump the preflight found with
    nox's interpreter (the toolchain lock carries none), so the arch audit, hours later, uses
    the one the preflight checked instead of failing to find any."""
    from sglforge.wheel.audit import CUOBJDUMP_VAR, find_cuobjdump

    if os.environ.get(CUOBJDUMP_VAR):
        return {}  # the user's choice reaches the build as it is (and is checked there)
    found = find_cuobjdump()
    return {CUOBJDUMP_VAR: str(found)} if found is not None else {}


def wants_help(posargs: Sequence[str]) -> bool:
    return any(a in HELP for a in posargs)


def preflight(
    session: Any, root: Path, verb: str, posargs: Sequence[str], *, fetch: bool = True
) -> bool:
    """`sglforge preflight VERB ARGS` with nox's interpreter (seconds, nothing installed).
    False: ARGS asked for help, which was shown instead (the session has nothing to do)."""
    if wants_help(posargs):
        run_sglforge(session, [sys.executable, "-m", "sglforge", verb, "--help"], src_env(root))
        return False
    argv = [
        sys.executable,
        "-m",
        "sglforge",
        "preflight",
        *([] if fetch else ["--no-fetch"]),
        verb,
        *posargs,
    ]
    run_sglforge(session, argv, src_env(root))
    return True


def install_missing(session: Any, requirement: str, module: str) -> None:
    """`session.install(requirement)` unless the session's venv already satisfies it (a
    reused venv: no pip run, so no index needed on the second run)."""
    probe = (
        "import importlib.metadata as m, sys\n"
        "try:\n    from packaging.requirements import Requirement\n"
        "except ImportError:\n"
        "    try:\n        from pip._vendor.packaging.requirements import Requirement\n"
        "    except ImportError:\n        Requirement = None\n"
        f"spec = {requirement!r}\n"
        "if Requirement is None:\n"
        f"    __import__({module!r}); sys.exit(0)\n"
        "r = Requirement(spec)\n"
        "if r.marker is not None and not r.marker.evaluate(): sys.exit(0)\n"
        "sys.exit(0 if r.specifier.contains(m.version(r.name), prereleases=True) else 1)\n"
    )
    python = os.path.join(session.bin, "python")
    try:
        ok = (
            subprocess.run(
                [python, "-c", probe], capture_output=True, check=False, timeout=60
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if ok:
        session.log(f"{requirement}: satisfied in {session.bin}, not reinstalled")
    else:
        session.install(*offline_index_args(), requirement)


def offline_index_args() -> list[str]:
    """pip's index options for a session's own small installs: $SGLFORGE_INDEX when set (a
    local directory of wheels: --no-index --find-links DIR; docs/air-gapped.md), else none
    (pip as configured)."""
    from sglforge.builder import toolchain_lock

    chosen = os.environ.get("SGLFORGE_INDEX")
    return toolchain_lock.index_args(chosen) if chosen else []


def toolchain_python(session: Any, root: Path) -> str:
    """The toolchain's Python (`sglforge.base.python`: the smoke's discovery too)."""
    from sglforge.base.python import find_python
    from sglforge.inputs.toolchain import load_toolchain

    try:
        version = load_toolchain(root / "lockfiles" / "toolchain.toml").python
        python = str(find_python(version, f"`nox -s {session.name}` (its build venv)"))
        session.log(f"toolchain Python {version}: {python}")
        return python
    except SglforgeError as exc:
        exit_with(session, 2, f"error: {exc}")
    raise AssertionError  # exit_with does not return


def needs_torch(root: Path, verb: str, posargs: Sequence[str]) -> bool:
    """Whether the recipes `sglforge VERB ARGS` builds need torch (ARGS already accepted by
    the preflight; `plan --matrix` computes every recipe's key)."""
    from sglforge.cli.main import parse_verb_args
    from sglforge.cli.names import select_recipes
    from sglforge.inputs.project import Project

    args = parse_verb_args([verb, *posargs])
    project = Project(Path(args.project).resolve()) if args.project else Project(root)
    return select_recipes(project, list(getattr(args, "names", []))).needs_torch


def toolchain_venv(root: Path) -> Path:
    """`.nox/toolchain-<12 hex>`: one venv per (toolchain.lock bytes, Python pin), shared by
    build, verify and matrix; a new lock gets a new venv and the old ones are removed."""
    lock = (root / "lockfiles" / "toolchain.lock").read_bytes()
    toolchain = (root / "lockfiles" / "toolchain.toml").read_bytes()
    key = hashlib.sha256(lock + b"\0" + toolchain).hexdigest()[:12]
    return root / ".nox" / f"toolchain-{key}"


def stale_toolchain_venvs(root: Path, keep: Path) -> list[Path]:
    nox_dir = root / ".nox"
    if not nox_dir.is_dir():
        return []
    return sorted(
        p
        for p in nox_dir.iterdir()
        if p != keep
        and p.is_dir()
        and (p.name.startswith("toolchain-") or p.name in OLD_TOOLCHAIN_VENVS)
    )


def prepare_toolchain(
    session: Any, root: Path, verb: str, posargs: Sequence[str], *, fetch: bool = True
) -> str | None:
    """Fail fast, then install. Order: the toolchain Python, VERB's arguments, settings, inputs
    and host facts (`sglforge preflight`; with fetch, the selected sources fetched and checked
    with the same options), then the shared venv with sglforge and
    lockfiles/toolchain.lock (hash-pinned, pip.conf off, torch only when a selected recipe
    needs it). Returns the venv's python; None when only help was asked for (shown)."""
    from sglforge.builder import toolchain_lock
    from sglforge.inputs.toolchain import load_toolchain

    if wants_help(posargs):
        preflight(session, root, verb, posargs)  # shows VERB's help
        return None
    python = toolchain_python(session, root)  # instant; then arguments, inputs, host, sources
    preflight(session, root, verb, posargs, fetch=fetch)
    try:
        torch = needs_torch(root, verb, posargs)
        lock = toolchain_lock.parse_lock(root / "lockfiles" / "toolchain.lock")
        toolchain = load_toolchain(root / "lockfiles" / "toolchain.toml")
    except (SglforgeError, toolchain_lock.LockError) as exc:
        exit_with(session, 2, f"error: {exc}")
    return install_toolchain(session, root, python, torch, lock, toolchain)


def install_toolchain(
    session: Any, root: Path, python: str, torch: bool, lock: Any = None, toolchain: Any = None
) -> str:
    """The shared toolchain venv with sglforge and lockfiles/toolchain.lock (torch sections
    only when `torch`); returns its python."""
    from sglforge.builder import toolchain_lock
    from sglforge.inputs.toolchain import load_toolchain

    try:
        lock = lock or toolchain_lock.parse_lock(root / "lockfiles" / "toolchain.lock")
        toolchain = toolchain or load_toolchain(root / "lockfiles" / "toolchain.toml")
    except (SglforgeError, toolchain_lock.LockError) as exc:
        exit_with(session, 2, f"error: {exc}")
    pins = dict(toolchain.build_requires, **({"torch": toolchain.torch} if torch else {}))
    problems = toolchain_lock.check_index_settings()
    if problems:
        exit_with(session, 2, "error: " + "\n  ".join(problems) + "\nhint: docs/air-gapped.md")
    problems = toolchain_lock.check_against_pins(lock, pins)
    if problems:
        exit_with(
            session,
            2,
            "error: lockfiles/toolchain.lock does not match toolchain.toml:"
            "\n  " + "\n  ".join(problems),
        )
    self_lock_fits(session, root, lock, toolchain)
    venv = toolchain_venv(root)
    for old in stale_toolchain_venvs(root, venv):
        session.log(f"removing {old} (a toolchain venv of another toolchain.lock)")
        shutil.rmtree(old, ignore_errors=True)
    venv_python = venv / "bin" / "python"
    from sglforge.base.python import major_minor

    if major_minor(str(venv_python)) != toolchain.python:
        session.run(python, "-m", "venv", "--clear", str(venv), external=True)
    try:
        commands = toolchain_lock.install_commands(
            str(venv_python),
            lock,
            torch,
            toolchain.index,
            toolchain.torch_index,
            Path(session.create_tmp()),
        )
    except toolchain_lock.LockError as exc:
        exit_with(session, 2, f"error: {exc}")
    from sglforge.builder import selflock

    index = toolchain_lock.index_args(toolchain_lock.index_for("build", toolchain.index, None))
    stamp = InstallStamp(venv, _install_key(root, index), torch)
    if stamp.current():  # a warm run: the same locks, index and sglforge source as last time
        session.log(
            f"toolchain venv {venv} is up to date (sglforge and the locks): not reinstalled"
        )
        return str(venv_python)
    # sglforge first: its dependencies and build backend hash-pinned (lockfiles/sglforge.lock),
    # itself from this checkout without deps or an index (builder/selflock.py)
    env = toolchain_lock.pip_env()  # not merged with ours: no PIP_* from outside gets in
    session.log(f"installing sglforge into {venv} (shared by build, verify and matrix)")
    tmp = Path(session.create_tmp())
    for command in selflock.install_commands(str(venv_python), SGLFORGE_CHECKOUT, index, tmp):
        session.run(*command, env=env, include_outer_env=False, external=True)
    size = (
        "~130 MB build tools + ~3 GB torch and CUDA libraries (~5 GB installed)"
        if torch
        else "~130 MB download, no torch"
    )
    session.log(
        f"installing lockfiles/toolchain.lock ({size}; docs/build-host.md: what the first run downloads)"
    )
    for command in commands:
        session.run(*command, env=env, include_outer_env=False, external=True)
    stamp.write()
    return str(venv_python)


def _install_key(root: Path, index: list[str]) -> str:
    """What the toolchain venv's installs depend on, torch aside: both locks' bytes, the
    index options and sglforge's own source (pyproject.toml and every file under src/)."""
    digest = hashlib.sha256()
    for path in (
        root / "lockfiles" / "toolchain.lock",
        SGLFORGE_CHECKOUT / "lockfiles" / "sglforge.lock",
    ):
        digest.update(path.read_bytes() if path.is_file() else b"-")
    digest.update("\0".join(index).encode())
    sources = [SGLFORGE_CHECKOUT / "pyproject.toml"]
    sources += sorted(p for p in (SGLFORGE_CHECKOUT / "src" / "sglforge").rglob("*") if p.is_file())
    for path in sources:
        if "__pycache__" not in path.parts:
            digest.update(
                str(path.relative_to(SGLFORGE_CHECKOUT)).encode() + b"\0" + path.read_bytes()
            )
    return digest.hexdigest()


class InstallStamp:
    """`<venv>/.sglforge-installed`: the install key of the last complete install, and
    whether torch was in it; a warm run with the same key (and no torch it lacks) installs
    nothing. The build still checks every installed version against toolchain.toml."""

    def __init__(self, venv: Path, key: str, torch: bool) -> None:
        self.path, self.key, self.torch = venv / ".sglforge-installed", key, torch

    def current(self) -> bool:
        try:
            key, torch = self.path.read_text().split()
        except (OSError, ValueError):
            return False
        return key == self.key and (torch == "torch" or not self.torch)

    def write(self) -> None:
        self.path.write_text(f"{self.key} {'torch' if self.torch else 'no-torch'}\n")


def self_lock_fits(session: Any, root: Path, lock: Any, toolchain: Any) -> None:
    """lockfiles/sglforge.lock covers pyproject.toml's requirements on the toolchain Python
    and, when the project is this checkout, agrees with its toolchain.lock (another project
    brings its own build tools); else exit 2 naming each gap, before any install."""
    from sglforge.builder import selflock

    same = root.resolve() == SGLFORGE_CHECKOUT
    try:
        toolchain_pins = {
            entry.name: entry.version
            for entries in (lock.sections.values() if same else ())
            for entry in entries
        }
        problems = selflock.lock_problems(SGLFORGE_CHECKOUT, toolchain.python, toolchain_pins)
    except SglforgeError as exc:
        exit_with(session, 2, f"error: {exc}")
    if problems:
        exit_with(
            session,
            2,
            f"error: lockfiles/{selflock.LOCK} does not fit pyproject.toml / toolchain.lock:"
            "\n  " + "\n  ".join(problems) + "\nhint: regenerate it as its header says",
        )


def demo(session: Any, root: Path) -> None:
    """`nox -s demo`: the toolchain Python; `python -m demo --preflight` with nox's
    interpreter (the work directory, its lock, nvcc, cuobjdump, bubblewrap: seconds, nothing
    installed); the shared toolchain venv without torch (the hash-pinned build tools, ~130 MB
    the first time); then `python -m demo` in it."""
    demo_env = {"PYTHONPATH": os.pathsep.join([str(root), str(root / "src")])}
    if wants_help(session.posargs):
        run_sglforge(session, [sys.executable, "-m", "demo", "--help"], demo_env)
        return
    python = toolchain_python(session, root)
    run_sglforge(session, [sys.executable, "-m", "demo", "--preflight", *session.posargs], demo_env)
    python = install_toolchain(session, root, python, torch=False)
    run_sglforge(
        session,
        [python, "-m", "demo", *session.posargs],
        {"PYTHONPATH": str(root), **audit_tools_env()},
    )
