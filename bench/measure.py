"""Run one command as a child process and measure it the way a user's build is felt.

- wall time: time.monotonic() around the child.
- CPU time: user + system of the child and every descendant it reaped, from the rusage that
  `os.wait4` returns for the child (the kernel's own accounting).
- ru_maxrss: the largest single process among them (Linux reports KiB).
- peak summed RSS of the job set: a thread reads /proc/<pid>/stat of every process every
  ~50 ms, keeps those descending from the child, sums their RSS and records the maximum.
  RSS counts shared pages (libraries, page cache of mapped files) once per process, so the
  sum is an upper bound on what the job set occupies; short spikes between samples are missed.
- concurrent compile jobs: the most processes named `nvcc` alive at one sample (sglforge's
  nvcc wrapper execs the real nvcc, possibly under ccache, so each compile job is one `nvcc`;
  a child of nvcc caught between fork and exec still carries the name and is not counted).
- other load: CPU time the machine's CPUs (those this process may run on) spent busy during
  the run minus the job set's own CPU time: work of other users of a shared machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Measurement:
    returncode: int
    wall_s: float
    cpu_s: float  # user + system of the child and its reaped descendants
    user_s: float
    sys_s: float
    max_rss_one_process: int  # bytes, ru_maxrss
    peak_rss_sum: int  # bytes, sampled
    max_nvcc: int  # most concurrent `nvcc` processes seen
    samples: int
    sampler_cpu_s: float  # the sampler thread's own CPU time (not part of cpu_s)
    other_cpu_s: float | None  # busy CPU time of others during the run (shared machine)
    loadavg_before: float

    def to_json(self) -> dict:
        return asdict(self)


def _read_stat(pid: str) -> tuple[int, str, int] | None:
    """(ppid, comm, rss pages) from /proc/<pid>/stat; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    left, right = data.find(b"("), data.rfind(b")")
    fields = data[right + 2 :].split()
    try:  # fields[0] is field 3 (state): ppid is field 4, rss field 24
        return int(fields[1]), data[left + 1 : right].decode(errors="replace"), int(fields[21])
    except (IndexError, ValueError):
        return None


class TreeSampler(threading.Thread):
    """Samples the summed RSS and the `nvcc` count of the process tree under `root`."""

    def __init__(self, root: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.peak_rss = 0
        self.max_nvcc = 0
        self.samples = 0
        self.cpu_s = 0.0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        children: dict[int, list[tuple[int, str, int]]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            info = _read_stat(name)
            if info is not None:
                ppid, comm, rss = info
                children.setdefault(ppid, []).append((int(name), comm, rss))
        total, nvcc = 0, 0
        stack: list[tuple[int, str]] = [(self.root, "")]
        root_info = _read_stat(str(self.root))
        if root_info is not None:
            total += root_info[2]
        while stack:
            parent, parent_comm = stack.pop()
            for pid, comm, rss in children.get(parent, ()):
                total += rss
                # a child of nvcc still named nvcc was forked and has not exec'd yet
                nvcc += comm == "nvcc" and parent_comm != "nvcc"
                stack.append((pid, comm))
        self.peak_rss = max(self.peak_rss, total * PAGE)
        self.max_nvcc = max(self.max_nvcc, nvcc)
        self.samples += 1

    def run(self) -> None:
        started = time.thread_time()
        while not self._stop_event.wait(self.interval):
            self.sample()
        self.cpu_s = time.thread_time() - started

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _busy_cpu_seconds() -> float | None:
    """Busy time (all but idle and iowait) of the CPUs this process may run on."""
    try:
        allowed = os.sched_getaffinity(0)
        with open("/proc/stat") as handle:
            lines = handle.read().splitlines()
    except (OSError, AttributeError):
        return None
    busy = 0
    for line in lines:
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        if int(name[3:]) not in allowed:
            continue
        ticks = [int(v) for v in values]
        busy += sum(ticks) - ticks[3] - ticks[4] - sum(ticks[8:])  # minus idle, iowait, guest
    return busy / CLK_TCK


def loadavg() -> float:
    try:
        with open("/proc/loadavg") as handle:
            return float(handle.read().split()[0])
    except OSError:
        return float("nan")


def run_measured(
    cmd: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    log: Path,
    timeout: float = 1800,
    cpus: set[int] | None = None,
) -> Measurement:
    """Run `cmd` (output appended to `log`) and measure it; `cpus` pins it to those CPUs."""
    log.parent.mkdir(parents=True, exist_ok=True)
    load = loadavg()
    busy_before = _busy_cpu_seconds()
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        allowed = os.sched_getaffinity(0)
        if cpus:  # the child inherits the affinity; ours is restored right after the spawn
            os.sched_setaffinity(0, cpus)
        try:
            started = time.monotonic()
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            if cpus:
                os.sched_setaffinity(0, allowed)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C: the child runs in its own session, end it too
            os.killpg(proc.pid, signal.SIGKILL)
            os.waitpid(proc.pid, 0)
            raise
        finally:
            timer.cancel()
            sampler.stop()
        wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    busy_after = _busy_cpu_seconds()
    cpu = usage.ru_utime + usage.ru_stime
    other = None
    if busy_before is not None and busy_after is not None:
        other = max(0.0, busy_after - busy_before - cpu - sampler.cpu_s)
    return Measurement(
        returncode=proc.returncode,
        wall_s=wall,
        cpu_s=cpu,
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        max_rss_one_process=usage.ru_maxrss * 1024,
        peak_rss_sum=sampler.peak_rss,
        max_nvcc=sampler.max_nvcc,
        samples=sampler.samples,
        sampler_cpu_s=sampler.cpu_s,
        other_cpu_s=other,
        loadavg_before=load,
    )
