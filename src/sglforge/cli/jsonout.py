"""`--json` for `plan`, `doctor`, `check` and `build` (docs/reference.md, "Machine-readable
output"): stdout is then exactly one JSON document, and everything a person reads (progress,
findings, the summary) goes to stderr.

Every document is an object with `schema` ("sglforge-<verb>") and `version` (SCHEMA_VERSION:
raised only when a key changes meaning or goes away; new keys may be added within a version).
The document is printed only when the verb reached its verdict (exit status 0 or 1); bad
input (exit 2) and interrupts leave stdout empty and say why on stderr, as without --json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

SCHEMA_VERSION = 1


def add_json_option(p: argparse.ArgumentParser, verb: str, what: str) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as one JSON document on stdout (schema sglforge-{verb}, "
        "docs/reference.md); what a person reads goes to stderr",
    )


@contextlib.contextmanager
def human_output_to_stderr(enabled: bool) -> Iterator[None]:
    """While the verb runs, fd 1 and sys.stdout point at stderr (a child process that writes
    to fd 1 lands there too), so only the JSON document reaches the real stdout."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
        sys.stderr.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def emit(verb: str, body: dict[str, Any]) -> None:
    """The document for `verb` on stdout (keys sorted, two-space indent)."""
    document = {"schema": f"sglforge-{verb}", "version": SCHEMA_VERSION, **body}
    print(json.dumps(document, indent=2, sort_keys=True, default=str), flush=True)
