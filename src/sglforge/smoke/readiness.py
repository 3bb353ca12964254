"""Wait until a server answers 200 on an endpoint, with a deadline, watching its process.

A server that dies while loading fails at once (with its log), not at the deadline.
"""

from __future__ import annotations

import time

from sglforge.smoke import http
from sglforge.smoke.processes import ManagedProcess, ProcessSet


class NotReady(Exception):
    def __init__(self, process: ManagedProcess, path: str, seconds: float, last: str) -> None:
        self.process = process
        super().__init__(f"{process.role} did not answer 200 on {path} within {seconds:g} s "
                         f"(last answer: {last})")


def wait_ready(processes: ProcessSet, process: ManagedProcess, path: str, seconds: float,
               poll: float = 0.25, deadline: float | None = None) -> float:
    """Poll `process`'s `path` until 200; return the seconds it took.

    `deadline` (time.monotonic) lets servers that load in parallel share one budget of
    `seconds` instead of getting it one after the other.
    """
    start = time.monotonic()
    deadline = start + seconds if deadline is None else deadline
    last = "no answer yet"
    while True:
        processes.check_alive(f"waiting for {process.role} {path}")
        remaining = deadline - time.monotonic()
        answer = http.get(process.command.url + path, timeout=max(0.5, min(remaining, 30.0)))
        if answer.ok:
            return time.monotonic() - start
        last = answer.error or f"HTTP {answer.status}"
        if time.monotonic() >= deadline:
            raise NotReady(process, path, seconds, last)
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
