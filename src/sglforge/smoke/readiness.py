"""Wait until servers answer 200 on an endpoint, with a deadline, watching their processes.

A server that dies while loading fails at once (with its log), not at the deadline. Servers
that load at the same time are polled at the same time (`wait_all_ready`, one thread each), so
each one's readiness is the moment it first answered, counted from its own launch: a wait
that polls decode only once prefill is ready would report decode ready "at 1.0 s" after
prefill's 90 s, a figure that says nothing about decode (issue 37).
"""

from __future__ import annotations

import threading
import time

from sglforge.base import http
from sglforge.smoke.processes import ManagedProcess, ProcessSet


class NotReady(Exception):
    def __init__(self, process: ManagedProcess, path: str, seconds: float, last: str) -> None:
        self.process = process
        super().__init__(
            f"{process.role} did not answer 200 on {path} within {seconds:g} s "
            f"(last answer: {last})"
        )


class _Stopped(Exception):
    """Another server's wait failed: this one gives up quietly."""


def wait_ready(
    processes: ProcessSet,
    process: ManagedProcess,
    path: str,
    seconds: float,
    poll: float = 0.25,
    deadline: float | None = None,
    stop: threading.Event | None = None,
) -> float:
    """Poll `process`'s `path` until 200; return the seconds it took.

    `deadline` (time.monotonic) lets servers that load in parallel share one budget of
    `seconds` instead of getting it one after the other; `stop` ends the wait early.
    """
    start = time.monotonic()
    deadline = start + seconds if deadline is None else deadline
    last = "no answer yet"
    while True:
        if stop is not None and stop.is_set():
            raise _Stopped
        processes.check_alive(f"waiting for {process.role} {path}")
        remaining = deadline - time.monotonic()
        answer = http.get(process.command.url + path, timeout=max(0.5, min(remaining, 30.0)))
        if answer.ok:
            return time.monotonic() - start
        last = answer.error or f"HTTP {answer.status}"
        if time.monotonic() >= deadline:
            raise NotReady(process, path, seconds, last)
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def wait_all_ready(
    processes: ProcessSet,
    targets: list[ManagedProcess],
    path: str,
    seconds: float,
    poll: float = 0.25,
) -> dict[str, float]:
    """Poll every target's `path` at once until each answers 200, within one shared budget of
    `seconds`; role -> seconds from that process's launch to its first 200.

    The first failure (a dead process, the deadline) stops the other waits and is raised
    here, in the caller's thread, so Ctrl-C and the smoke's teardown work as before.
    """
    deadline = time.monotonic() + seconds
    stop = threading.Event()
    ready: dict[str, float] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def wait(process: ManagedProcess) -> None:
        try:
            wait_ready(processes, process, path, seconds, poll, deadline, stop)
            since = process.since_launch()
            with lock:
                ready[process.role] = since
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            with lock:
                errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=wait, args=(p,), name=f"ready-{p.role}", daemon=True)
        for p in targets
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.2)  # short joins: a signal reaches this thread
                if errors:
                    break
            if errors:
                break
    finally:
        stop.set()
    if errors:
        raise errors[0]
    return {p.role: ready[p.role] for p in targets}
