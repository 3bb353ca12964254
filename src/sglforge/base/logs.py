"""Reading the logs sglforge writes (build logs, server logs) back for an error message."""

from __future__ import annotations

from pathlib import Path


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log, or a placeholder saying why there are none."""
    try:
        text = path.read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"
