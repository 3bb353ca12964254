"""Start each server in its own process group, logs to files; tear every group down.

SGLang forks scheduler/detokenizer subprocesses that hold GPU memory; killing only the
launcher leaves them running. So each role is started as a session leader
(`start_new_session`) and teardown signals the whole group: SIGTERM, a grace period, SIGKILL,
then a scan of /proc proves that no member of any group survives (sglforge.base.procgroup, shared
with the wheel builds).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

from sglforge.base.procgroup import group_members, terminate_sessions
from sglforge.smoke.commands import LaunchCommand

__all__ = ["group_members"]  # re-exported for the tests


@dataclass
class ManagedProcess:
    command: LaunchCommand
    popen: subprocess.Popen
    started: float = 0.0  # time.monotonic() just before the launch: readiness counts from it

    def since_launch(self) -> float:
        return time.monotonic() - self.started

    @property
    def role(self) -> str:
        return self.command.role

    @property
    def pgid(self) -> int:
        return self.popen.pid  # session leader: its pid is the group id

    def exit_status(self) -> int | None:
        return self.popen.poll()

    def describe_exit(self) -> str:
        code = self.popen.returncode
        if code is None:
            return "running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


class LaunchError(Exception):
    """A process could not be started at all (missing program, bad permissions)."""

    def __init__(self, role: str, message: str) -> None:
        self.role = role
        super().__init__(message)


class ProcessExited(Exception):
    """A launched process ended while it should be serving."""

    def __init__(self, process: ManagedProcess, during: str) -> None:
        self.process = process
        self.during = during
        super().__init__(
            f"{process.role} (pid {process.popen.pid}) ended during {during}: "
            f"{process.describe_exit()}"
        )


@dataclass(frozen=True)
class TeardownResult:
    signalled: dict[str, str]  # role -> how it ended ("SIGTERM", "SIGKILL", "already exited")
    survivors: dict[str, list[int]]  # role -> pids still alive after SIGKILL (should be empty)
    seconds: float


class ProcessSet:
    """The processes of one smoke run. Use as a context manager: exit always tears down."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.processes: list[ManagedProcess] = []
        self.teardown_result: TeardownResult | None = None

    def __enter__(self) -> ProcessSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def start(self, command: LaunchCommand) -> ManagedProcess:
        command.log.parent.mkdir(parents=True, exist_ok=True)
        with open(command.log, "ab") as log:
            log.write(f"$ {command.shell()}\n".encode())
            log.flush()
            started = time.monotonic()
            try:
                popen = subprocess.Popen(
                    command.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **command.env},
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(
                    command.role,
                    f"cannot start {command.role}: {command.argv[0]}: {exc.strerror or exc}",
                ) from None
        process = ManagedProcess(command, popen, started)
        self.processes.append(process)
        return process

    def check_alive(self, during: str) -> None:
        for process in self.processes:
            if process.exit_status() is not None:
                raise ProcessExited(process, during)

    def wait_for_any_exit(self, seconds: float) -> None:
        """Return as soon as one process has exited, or after `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.dead():
            time.sleep(0.05)

    def dead(self) -> list[ManagedProcess]:
        return [p for p in self.processes if p.exit_status() is not None]

    def stop_current(self) -> TeardownResult:
        """Tear down what runs now and start afresh (the colocated server of `equivalence`
        follows the pair on its GPU); a later `teardown` covers what is started after."""
        result = self.teardown()
        self.processes, self.teardown_result = [], None
        return result

    def teardown(self) -> TeardownResult:
        """SIGTERM every session, wait `grace`, SIGKILL what is left, verify nothing survives.

        Idempotent, and safe to call from a `finally` after Ctrl-C: further SIGINTs and
        SIGTERMs are ignored while it runs so a second Ctrl-C cannot leave GPUs held.
        """
        if self.teardown_result is None:
            # Router first so it stops sending work, then the servers.
            ordered = sorted(self.processes, key=lambda p: p.role != "router")
            results = terminate_sessions([p.popen for p in ordered], self.grace)
            pairs = list(zip(ordered, results, strict=True))
            self.teardown_result = TeardownResult(
                signalled={p.role: r.how for p, r in pairs},
                survivors={p.role: r.survivors for p, r in pairs if r.survivors},
                seconds=results[0].seconds if results else 0.0,
            )
        return self.teardown_result
