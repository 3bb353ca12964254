"""Where a server's start-up time goes (issue 34): phases read from its own log.

SGLang stamps its log lines `[YYYY-MM-DD HH:MM:SS(.mmm)( TPn)?] message` (milliseconds with
SGLANG_LOG_MS=1, which the smoke sets); uvicorn's lines carry the same stamp. The first line
holding each marker below ends one phase and starts the next; times are seconds after the
process's launch (its wall-clock start, so a log's one-second stamps round down).

  imports          launch -> `server_args=`                  the HTTP server's own imports
  scheduler_init   -> `Init torch distributed begin`         the scheduler process's spawn and
                                                             its second import, torch's init
  model_init       -> `Load weight begin`
  weight_load      -> `Load weight end`
  kv_cache         -> `Memory pool end` / `KV Cache is allocated`
  http_start       -> `Start of pd disaggregation warmup` / `Uvicorn running`
  warmup_jit       -> `fired up and ready to roll`           the first batch: JIT builds
A marker that never appears leaves its phase out (the next phase then starts from the last
marker found).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d{1,6})?[^\]]*\]")
MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("imports", ("server_args=",)),
    ("scheduler_init", ("Init torch distributed begin",)),
    ("model_init", ("Load weight begin",)),
    ("weight_load", ("Load weight end",)),
    ("kv_cache", ("Memory pool end", "KV Cache is allocated")),
    ("http_start", ("Start of pd disaggregation warmup", "Uvicorn running")),
    ("warmup_jit", ("fired up and ready to roll",)),
)
MAX_LOG_BYTES = 64 << 20


def _stamp(line: str) -> float | None:
    match = STAMP.match(line)
    if not match:
        return None
    try:
        seconds = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    return seconds + (float(match.group(2)) if match.group(2) else 0.0)


def marker_times(lines: Iterable[str], launched_at: float) -> dict[str, float]:
    """Seconds after `launched_at` (wall clock, local time as the log writes it) at which each
    phase's end marker first appears."""
    found: dict[str, float] = {}
    for line in lines:
        stamp = _stamp(line)
        if stamp is None:
            continue
        for phase, needles in MARKERS:
            if phase not in found and any(n in line for n in needles):
                found[phase] = round(max(0.0, stamp - launched_at), 3)
    return found


def phases(lines: Iterable[str], launched_at: float, ready_s: float | None = None) -> dict:
    """{"markers": seconds after launch per marker, "phases": seconds spent in each phase,
    in order; "after_last_marker": from the last marker to `ready_s` (readiness as the smoke
    saw it)}."""
    found = marker_times(lines, launched_at)
    spent: dict[str, float] = {}
    previous = 0.0
    for phase, _ in MARKERS:
        if phase in found:
            at = max(found[phase], previous)
            spent[phase] = round(at - previous, 3)
            previous = at
    result: dict = {"markers": found, "phases": spent}
    if ready_s is not None:
        result["after_last_marker"] = round(max(0.0, ready_s - previous), 3)
    return result


def log_phases(log: Path, launched_at: float, ready_s: float | None = None) -> dict:
    """`phases` of a log file (at most its first MAX_LOG_BYTES); {"error": ...} if unreadable."""
    try:
        with open(log, "rb") as handle:
            text = handle.read(MAX_LOG_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        return {"error": f"{log}: {exc.strerror or exc}"}
    return phases(text.splitlines(), launched_at, ready_s)
