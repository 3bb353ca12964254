"""Named, timed steps: one timer for the build and the smoke (in the manner of nox's
`workflow.execute`: a list of named functions run in order, each one timed).

A step is recorded whether it passes or fails (`ok`), with the detail lines it collected;
`on_end` sees each record as it ends (the smoke prints and reports it there, the build keeps
the timings for its summary).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepRecord:
    name: str
    ok: bool
    seconds: float
    detail: tuple[str, ...] = ()


class Steps:
    def __init__(self, on_end: Callable[[StepRecord], None] | None = None) -> None:
        self.records: list[StepRecord] = []
        self.on_end = on_end

    @contextmanager
    def step(self, name: str) -> Iterator[list[str]]:
        """Time the block as step `name`; what it appends to the yielded list is its detail."""
        start = time.monotonic()
        detail: list[str] = []
        ok = False
        try:
            yield detail
            ok = True
        finally:
            record = StepRecord(name, ok, time.monotonic() - start, tuple(detail))
            self.records.append(record)
            if self.on_end is not None:
                self.on_end(record)

    def execute(self, steps: Iterable[tuple[str, Callable[[], Any]]]) -> None:
        """Run named step functions in order; the first that raises stops the rest."""
        for name, function in steps:
            with self.step(name):
                function()

    def timings(self) -> list[tuple[str, float]]:
        """(name, seconds) of the steps that passed, in order: a summary's "steps:" table."""
        return [(r.name, r.seconds) for r in self.records if r.ok]
