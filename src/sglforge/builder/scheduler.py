"""Build order and compile parallelism.

Wheels are built one at a time in dependency order (a wheel's build may import the wheels it
depends on), and each build gets the whole machine: `jobs = min(cores, MemAvailable /
mem_per_job)` compile slots. nvcc's own `--threads` (NVCC_THREADS) count against the same
slots, so `MAX_JOBS = CMAKE_BUILD_PARALLEL_LEVEL = slots // nvcc_threads`. One scheduler sizes
every job; the numbers are printed before each build.

The `mem-available` setting (`SGLFORGE_MEM_AVAILABLE`, a size such as 24GiB; read with the
other settings in inputs/settings.py) replaces /proc/meminfo's MemAvailable as the memory
budget: for hosts where a container limit is lower than what the kernel reports, and for the
benchmark that checks a build stays within a budget (bench/).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sglforge.base.errors import SglforgeError


@dataclass(frozen=True)
class Machine:
    cores: int
    mem_available: int  # bytes
    mem_source: str = "MemAvailable"

    @classmethod
    def detect(cls, budget: int | None = None, budget_source: str = "mem-available") -> Machine:
        """This host's cores; memory from `budget` (the `mem-available` setting) when given,
        else /proc/meminfo's MemAvailable."""
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - non-Linux
            cores = os.cpu_count() or 1
        if budget is not None:
            return cls(cores=cores, mem_available=budget, mem_source=budget_source)
        return cls(cores=cores, mem_available=_mem_available())


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


@dataclass(frozen=True)
class JobPlan:
    jobs: int  # MAX_JOBS = CMAKE_BUILD_PARALLEL_LEVEL
    nvcc_threads: int
    slots: int
    reason: str

    def env(self) -> dict[str, str]:
        return {
            "MAX_JOBS": str(self.jobs),
            "CMAKE_BUILD_PARALLEL_LEVEL": str(self.jobs),
            "NVCC_THREADS": str(self.nvcc_threads),
        }

    def describe(self) -> str:
        return (
            f"MAX_JOBS={self.jobs} NVCC_THREADS={self.nvcc_threads} "
            f"CMAKE_BUILD_PARALLEL_LEVEL={self.jobs} ({self.reason})"
        )


def plan_jobs(
    machine: Machine, mem_per_job: int, nvcc_threads: int = 1, jobs_override: int | None = None
) -> JobPlan:
    if mem_per_job <= 0 or (jobs_override is not None and jobs_override < 1):
        raise SglforgeError(
            f"compile slots: mem-per-job {mem_per_job} bytes, jobs "
            f"{jobs_override}: both must be positive"
        )
    gib = 1 << 30
    by_memory = max(1, machine.mem_available // max(1, mem_per_job))
    slots = min(machine.cores, by_memory)
    source = "" if machine.mem_source == "MemAvailable" else f" ({machine.mem_source})"
    reason = (
        f"{machine.cores} cores, {machine.mem_available / gib:.1f} GiB available{source} / "
        f"{mem_per_job / gib:.1f} GiB per job -> {slots} slots"
    )
    if jobs_override is not None:
        slots = jobs_override
        reason = f"--jobs {jobs_override}"
    threads = max(1, min(nvcc_threads, slots))
    return JobPlan(jobs=max(1, slots // threads), nvcc_threads=threads, slots=slots, reason=reason)


def build_order(depends: dict[str, tuple[str, ...]]) -> list[str]:
    """Topological order (dependencies first; ties by name). A cycle is an error naming it."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "active":
            cycle = path[path.index(name) :] + [name]
            raise SglforgeError(f"recipes depend on each other in a cycle: {' -> '.join(cycle)}")
        state[name] = "active"
        for dep in sorted(depends.get(name, ())):
            visit(dep, path + [name])
        state[name] = "done"
        order.append(name)

    for name in sorted(depends):
        visit(name, [])
    return order
