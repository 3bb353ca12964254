"""One check's result: what the smoke's checks, the qualification gates, the reference
comparison and the receipt all speak (smoke/checks.py runs the checks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    # Qualification (issue 24): what the result is judged against and the measured value (for
    # the receipt), and whether a failure fails the smoke (a gate may be reported only).
    threshold: Any = None
    value: Any = None
    enforced: bool = True
