"""The benchmark's pure logic (bench/stats.py): summaries, paired ratios, fits, the table.
The benchmark itself runs with `nox -s bench`, not in the test suite."""

from __future__ import annotations

import pytest

from bench.stats import (
    Summary,
    Target,
    format_bytes,
    linear_fit,
    paired_ratios,
    render_table,
    summarize,
)


def test_summary_is_median_with_range():
    s = summarize([3.0, 1.0, 10.0])
    assert s == Summary(median=3.0, min=1.0, max=10.0, n=3)
    assert s.render() == "3.0s (1.0–10.0)"
    assert summarize([2.0, 4.0]).median == 3.0
    assert summarize([0.25]).render("x", 2) == "0.25x"
    with pytest.raises(ValueError):
        summarize([])


def test_paired_ratios_fit_and_targets():
    assert paired_ratios([1.0, 3.0], [2.0, 4.0]) == [0.5, 0.75]
    with pytest.raises(ValueError, match="2 vs 1"):
        paired_ratios([1.0, 2.0], [1.0])
    a, b = linear_fit([4, 8, 16, 4], [6.0, 8.0, 12.0, 6.0])
    assert (round(a, 6), round(b, 6)) == (4.0, 0.5)
    assert Target("no-op", 0.02, 0.015).verdict() == "met"
    assert Target("one-file", 0.125, 0.3).met is False
    assert Target("x", 1.0, None).to_json()["met"] is None
    assert format_bytes(512 << 20) == "512 MiB"
    assert format_bytes(3 << 30) == "3.00 GiB"


def test_table_pads_columns_to_the_widest_cell():
    text = render_table(
        ["figure", "wall"], [["1 cold", "10.0s (9.0–11.0)"], ["2 no-op", "0.3s"]], title="bench"
    )
    assert text.splitlines() == [
        "bench",
        "figure   wall",
        "-------  ----------------",
        "1 cold   10.0s (9.0–11.0)",
        "2 no-op  0.3s",
    ]


def test_analysis_of_a_full_run_shape_renders_every_figure(tmp_path):
    """bench/run.py's analysis on fabricated runs shaped like the full bench (light cases 2
    runs, heavy ones 1, N = 4, 8, 16), so a 25-minute run cannot die in its last second."""
    from bench.measure import Measurement
    from bench.run import Bench, Case, Config, analyse

    def m(wall: float, cpu: float) -> Measurement:
        return Measurement(0, wall, cpu, cpu, 0.0, 1 << 20, 1 << 20, 2, 10, 0.0, 0.1, 0.5)

    bench = Bench(Config(runs=2, heavy_runs=1, ns=(4, 8, 16)), tmp_path)

    def add(figure: str, name: str, runs: list[Measurement], extra=None, **params) -> None:
        bench.cases[f"{figure}/{name}"] = Case(figure, name, params, runs, extra or [])

    for n in (4, 8, 16):
        cold = 6 + 5.5 * n
        add("cold", f"N={n} sm_120a", [m(cold, 8 + 11 * n)] * 2, [{"planned_jobs": 2}] * 2, n=n)
        add("cold", f"N={n} 3 archs", [m(2.7 * cold, 8 + 30 * n)], [{"planned_jobs": 2}], n=n)
        add("noop", f"N={n} sm_120a", [m(0.3, 0.3)] * 2, n=n)
        add(
            "one-file-ccache",
            f"N={n} sm_120a",
            [m(17, 14)] * 2,
            [{"ccache": {"hits": n - 1, "misses": 2}, "cmake_configure_s": 3.0}] * 2,
            n=n,
        )
        add("ccache-populate", f"N={n} sm_120a", [m(cold * 1.1, 9 + 11 * n)], n=n)
        add("dev-seed", f"N={n} sm_120a", [m(cold * 1.05, 8 + 11 * n)], n=n)
        add(
            "dev-one-tu",
            f"N={n} sm_120a",
            [m(14, 13)] * 2,
            [{"compiled": ["tu_000.cu"], "cmake_configure_s": 0.0}] * 2,
            n=n,
        )
    add("one-file-nocache", "N=4 sm_120a", [m(28, 52)], n=4)
    add("verify", "N=4 sm_120a", [m(29, 52)], n=4)
    add(
        "memory",
        "N=4 sm_120a, budget 768 MiB",
        [m(50, 52)],
        [{"planned_jobs": 1, "utilisation_of_cores": 0.5, "utilisation_of_slots": 1.0}],
        n=4,
        cores=2,
        k_fit=1,
        mem_per_job_bytes=1 << 29,
        budget_bytes=768 << 20,
    )
    _derived, targets, rows = analyse(bench)
    names = [t.name for t in targets]
    assert "dev one-TU change N=8 <= 2/N of cold wall" in names
    assert "dev one-TU change N=4 <= 2/N of cold wall" not in names  # target at N >= 8
    assert "sm_120a-only CPU <= 0.40 of 3 archs, N=16" in names
    dev16 = next(t for t in targets if t.name == "dev one-TU change N=16 <= 2/N of cold wall")
    assert dev16.value == pytest.approx(14 / 94) and "one TU alone" in dev16.note
    arch16 = next(t for t in targets if t.name.startswith("sm_120a-only CPU") and "16" in t.name)
    assert arch16.value == pytest.approx((8 + 11 * 16) / (8 + 30 * 16)) and arch16.met
    assert any(r[0] == "3 dev" and "one-TU change" in r[1] for r in rows)
    assert render_table(["a"] * 8, rows)
