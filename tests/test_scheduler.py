"""Job sizing by cores and memory; dependency order."""

from __future__ import annotations

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.builder.scheduler import Machine, build_order, plan_jobs

GIB = 1 << 30


def test_jobs_limited_by_memory_then_cores():
    plan = plan_jobs(Machine(cores=64, mem_available=48 * GIB), mem_per_job=6 * GIB)
    assert (plan.jobs, plan.nvcc_threads) == (8, 1)
    assert plan.env() == {"MAX_JOBS": "8", "CMAKE_BUILD_PARALLEL_LEVEL": "8", "NVCC_THREADS": "1"}
    assert plan_jobs(Machine(cores=2, mem_available=48 * GIB), mem_per_job=GIB).jobs == 2
    assert plan_jobs(Machine(cores=8, mem_available=GIB), mem_per_job=6 * GIB).jobs == 1


def test_nvcc_threads_share_the_slots_and_override():
    plan = plan_jobs(
        Machine(cores=32, mem_available=256 * GIB), mem_per_job=4 * GIB, nvcc_threads=4
    )
    assert (plan.slots, plan.jobs, plan.nvcc_threads) == (32, 8, 4)
    assert "MAX_JOBS=8 NVCC_THREADS=4 CMAKE_BUILD_PARALLEL_LEVEL=8" in plan.describe()
    assert plan_jobs(Machine(cores=32, mem_available=256 * GIB), GIB, jobs_override=3).jobs == 3


def test_build_order_dependencies_first_and_cycles_named():
    order = build_order(
        {"jit-cache": ("flashinfer",), "flashinfer": (), "sglang": ("kernel",), "kernel": ()}
    )
    assert order.index("flashinfer") < order.index("jit-cache")
    assert order.index("kernel") < order.index("sglang")
    with pytest.raises(SglforgeError, match="a -> b -> a"):
        build_order({"a": ("b",), "b": ("a",)})


def test_mem_available_override_is_the_budget(tmp_path):
    from sglforge.inputs.settings import load_settings

    settings = load_settings(
        environ={"SGLFORGE_MEM_AVAILABLE": "1536MiB", "XDG_CONFIG_HOME": str(tmp_path)}
    )
    machine = Machine.detect(settings.mem_available, settings.origin("mem-available"))
    assert machine.mem_available == 1536 << 20
    plan = plan_jobs(
        Machine(cores=8, mem_available=machine.mem_available, mem_source=machine.mem_source),
        mem_per_job=512 << 20,
    )
    assert plan.jobs == 3
    assert "1.5 GiB available (env: SGLFORGE_MEM_AVAILABLE)" in plan.reason
    with pytest.raises(SglforgeError, match="SGLFORGE_MEM_AVAILABLE='lots'"):
        load_settings(environ={"SGLFORGE_MEM_AVAILABLE": "lots", "XDG_CONFIG_HOME": str(tmp_path)})
