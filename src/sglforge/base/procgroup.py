"""Children in a session of their own, always reaped: the one place that kills process trees.

Every long-running child (a wheel build's PEP 517 frontend, a smoke server) is started as a
session leader (`start_new_session`), so its session id is its pid. Teardown sends SIGTERM,
waits a grace period, sends SIGKILL to what remains and then scans /proc until no member is
left. Members are found by *session*, not only by process group: ninja puts every compile job
(nvcc, gcc) into a process group of its own, so signalling the leader's group alone would
orphan exactly the compilers. Only a process that calls setsid() itself leaves the session.

SIGTERM and SIGHUP become the `Terminated` exception (see `signals_as_exceptions`), like
SIGINT becomes KeyboardInterrupt, so `finally` blocks run: children are reaped before the
locks that guard a build root are released.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupt_exit(exc: BaseException) -> tuple[int, str]:
    """(exit status 128 + signal, signal name) for KeyboardInterrupt or Terminated."""
    signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
    return 128 + signum, signal.Signals(signum).name


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _handling(signums: tuple[int, ...], handler: Any) -> Iterator[None]:
    """Install `handler` for `signums` while the block runs, then restore the previous ones.

    Only the main thread can set signal handlers; elsewhere this does nothing."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """SIGTERM/SIGHUP raise `Terminated` in the main thread while the block runs."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated(signum)

    with _handling((signal.SIGTERM, signal.SIGHUP), handler):
        yield


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP during teardown: a second Ctrl-C must not cut it short."""
    with _handling((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), signal.SIG_IGN):
        yield


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back until the block is done, then act on the first one.

    For short steps that must not be cut in half (publishing wheels/ and its manifest)."""
    pending: list[int] = []
    with _handling(
        (signal.SIGINT, signal.SIGTERM, signal.SIGHUP), lambda signum, frame: pending.append(signum)
    ):
        yield
    if pending:
        if pending[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(pending[0])


def _stat_fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
    except OSError:
        return None
    # Fields after the parenthesised command name: state ppid pgrp session ...
    return stat.rsplit(")", 1)[-1].split()


def _members(index: int, ident: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        rest = _stat_fields(entry.name)
        if rest and len(rest) >= 4 and rest[0] != "Z" and int(rest[index]) == ident:
            members.append(int(entry.name))
    return members


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids in process group `pgid`, from /proc."""
    return _members(2, pgid)


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) pids in session `sid`, from /proc (all their process groups)."""
    return _members(3, sid)


def _signal_session(sid: int, sig: int) -> bool:
    """Send `sig` to every process group that has a member in session `sid`."""
    pgids = set()
    for pid in session_members(sid):
        rest = _stat_fields(str(pid))
        if rest:
            pgids.add(int(rest[2]))
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    return bool(pgids)


@dataclass(frozen=True)
class SessionTeardown:
    how: str  # "SIGTERM", "SIGKILL" or "already exited"
    survivors: list[int]  # pids alive after SIGKILL and the settle time (should be empty)
    seconds: float


def terminate_sessions(
    leaders: Sequence[subprocess.Popen], grace: float, settle: float = 5.0
) -> list[SessionTeardown]:
    """SIGTERM every leader's session, wait `grace`, SIGKILL what is left, verify nothing
    survives; one result per leader, in order. Leaders are signalled in the order given."""
    start = time.monotonic()
    with interrupts_ignored():
        how = []
        for leader in leaders:
            alive = leader.poll() is None
            alive = _signal_session(leader.pid, signal.SIGTERM) or alive
            how.append("SIGTERM" if alive else "already exited")
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            for leader in leaders:
                leader.poll()  # reap the leader so it stops counting as alive
            if not any(session_members(p.pid) for p in leaders):
                break
            time.sleep(0.05)
        for i, leader in enumerate(leaders):
            if _signal_session(leader.pid, signal.SIGKILL):
                how[i] = "SIGKILL"
        for leader in leaders:
            with contextlib.suppress(subprocess.TimeoutExpired):
                leader.wait(timeout=5)
        limit = time.monotonic() + settle  # SIGKILLed grandchildren take a moment to go
        while True:
            survivors = [session_members(p.pid) for p in leaders]
            if not any(survivors) or time.monotonic() > limit:
                break
            time.sleep(0.05)
    seconds = time.monotonic() - start
    return [SessionTeardown(h, s, seconds) for h, s in zip(how, survivors, strict=True)]


def run_in_session(
    cmd: list[str], *, grace: float, poll: float = 0.2, on_poll: object = None, **popen: object
) -> tuple[int, SessionTeardown]:
    """Run `cmd` as a session leader until it exits; whatever happens (normal exit, an
    exception, KeyboardInterrupt, `Terminated`), no member of its session outlives the call.

    `on_poll()` is called every `poll` seconds while the command runs (progress output).
    Returns the exit status and the teardown of leftovers. On an exception the teardown is
    attached to it as `exc.sglforge_teardown` before it propagates."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)  # type: ignore[arg-type]
    try:
        while proc.poll() is None:
            time.sleep(poll)
            if on_poll is not None:
                on_poll()  # type: ignore[operator]
    except BaseException as exc:
        [result] = terminate_sessions([proc], grace)
        with contextlib.suppress(AttributeError):
            exc.sglforge_teardown = result  # type: ignore[attr-defined]
        raise
    # The leader exited: reap anything it left behind in its session (daemons excepted).
    [result] = terminate_sessions([proc], grace)
    return proc.returncode, result
