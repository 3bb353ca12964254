"""User-facing errors.

Every failure a user can cause (bad input, missing cache entry, patch that does not apply)
is raised as `SglforgeError`; the CLI prints its message without a traceback and exits with
its `exit_status`: 2 (bad input, a refused host: README "Exit status") unless it is a
`BuildFailed` (1: the build ran and what it made failed: a compile, an audit).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SglforgeError(Exception):
    """An error whose message is complete enough to act on; printed without a traceback."""

    exit_status = 2  # bad input or a refused host

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        text = self.args[0]
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text


class ConfigErrors(SglforgeError):
    """Several problems found while validating one input file; all are reported together."""

    def __init__(self, path: object, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = [f"{path}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:"]
        lines += [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))


class BuildFailed(SglforgeError):
    """A build (or a verify rebuild) ran and failed: the compile exited non-zero, or what it
    produced failed post-processing or an audit. Exit status 1, like a failed check."""

    exit_status = 1


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for the close matches of `name` among `known` ("" for none)."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
