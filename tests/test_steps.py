"""The one step timer the build and the smoke share (base/steps.py), and the build-root layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.base.buildroot import BuildRoot
from sglforge.base.steps import Steps


def test_steps_run_in_order_record_failures_and_stop():
    ran, ended = [], []
    steps = Steps(on_end=ended.append)

    def fail() -> None:
        ran.append("b")
        raise RuntimeError("b broke")

    with pytest.raises(RuntimeError, match="b broke"):
        steps.execute([("a", lambda: ran.append("a")), ("b", fail), ("c", lambda: ran.append("c"))])
    assert ran == ["a", "b"]
    assert [(r.name, r.ok) for r in steps.records] == [("a", True), ("b", False)]
    assert ended == steps.records
    assert [name for name, _ in steps.timings()] == ["a"]  # the summary shows what passed


def test_step_detail_lines_are_kept():
    steps = Steps()
    with steps.step("wheels") as detail:
        detail.append("2 wheels match wheels.lock")
    [record] = steps.records
    assert record.detail == ("2 wheels match wheels.lock",) and record.seconds >= 0


def test_build_root_layout():
    root = BuildRoot(Path("/b"))
    assert root.src("flashinfer") == Path("/b/src/flashinfer")
    assert root.dep("cutlass") == Path("/b/deps/cutlass")
    assert root.work("sglang-kernel") == Path("/b/work/sglang-kernel")
    assert root.tools_bin == Path("/b/tools/bin")
    assert root.log("sglang") == Path("/b/logs/sglang.log")
    assert root.refresh("alpha") == Path("/b/refresh/alpha")
    assert root.refresh("alpha", "check") == Path("/b/refresh/alpha-check")
    assert (root.home, root.tmp, root.staging) == (Path("/b/home"), Path("/b/tmp"), Path("/b/out"))
    assert root.lock == Path("/b/.sglforge-build.lock")
