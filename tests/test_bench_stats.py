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
    text = render_table(["figure", "wall"], [["1 cold", "10.0s (9.0–11.0)"], ["2 no-op", "0.3s"]],
                        title="bench")
    assert text.splitlines() == [
        "bench",
        "figure   wall",
        "-------  ----------------",
        "1 cold   10.0s (9.0–11.0)",
        "2 no-op  0.3s",
    ]
