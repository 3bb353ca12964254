"""Pure logic of the benchmark: summaries of repeated runs, paired ratios, targets, the table.

No I/O here, so the unit test (tests/test_bench_stats.py) covers it in CI.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    """Median of repeated runs with the range; `n` runs."""

    median: float
    min: float
    max: float
    n: int

    def to_json(self) -> dict:
        return asdict(self)

    def render(self, unit: str = "s", digits: int = 1) -> str:
        fmt = f"{{:.{digits}f}}"
        if self.n == 1:
            return fmt.format(self.median) + unit
        return (
            fmt.format(self.median)
            + unit
            + " ("
            + fmt.format(self.min)
            + "–"
            + fmt.format(self.max)
            + ")"
        )


def summarize(values: list[float]) -> Summary:
    if not values:
        raise ValueError("summarize: no values")
    return Summary(
        median=statistics.median(values), min=min(values), max=max(values), n=len(values)
    )


def paired_ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Run i over run i: a ratio taken pair by pair holds when the machine's speed drifts."""
    if len(numerators) != len(denominators):
        raise ValueError(f"paired_ratios: {len(numerators)} vs {len(denominators)} runs")
    return [a / b for a, b in zip(numerators, denominators) if b > 0]


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x; returns (a, b). Used for fixed cost + cost per TU."""
    if len(xs) < 2 or len(set(xs)) < 2:
        raise ValueError("linear_fit: needs two distinct x values")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


@dataclass(frozen=True)
class Target:
    """A goal from the issue: `value <= limit` (None value: not measured)."""

    name: str
    limit: float
    value: float | None
    unit: str = ""
    note: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.value is None else self.value <= self.limit

    def verdict(self) -> str:
        return {True: "met", False: "NOT met", None: "not measured"}[self.met]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "limit": self.limit,
            "value": self.value,
            "unit": self.unit,
            "met": self.met,
            "note": self.note,
        }


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GiB" else f"{n / scale:.0f} {unit}"
    return f"{n:.0f} B"


def render_table(header: list[str], rows: list[list[str]], title: str = "") -> str:
    """A plain-text table: columns padded to their widest cell; the first column left-aligned,
    the others too (cells carry units and ranges, so right-alignment buys nothing)."""
    cells = [header, *rows]
    widths = [max(len(row[i]) if i < len(row) else 0 for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        padded = [(row[i] if i < len(row) else "").ljust(widths[i]) for i in range(len(header))]
        return "  ".join(padded).rstrip()

    out = [title] if title else []
    out += [line(header), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in rows]
    return "\n".join(out)
