"""Hash-pinned requirement files (`name==version --hash=sha256:<hex>`), as pip reads them.

One parser for the two such files sglforge handles: `lockfiles/runtime.lock` (hand-reviewed
third-party pins) and the generated `lockfiles/wheels.lock`. Comments and `\\` line
continuations follow pip's rules; problems name the logical line where a requirement starts.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)(?P<rest>.*)$")
_HASH = re.compile(r"--hash=sha256:(?P<hex>[0-9a-f]{64})(?=\s|$)")


def installed_version(name: str, python: Path | None = None) -> str | None:
    """Version of distribution `name` installed for this interpreter, or for `python`.

    Read from metadata, never imported (torch takes seconds); None when it is not installed
    (or `python` does not exist)."""
    if python is None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    if not python.exists():
        return None
    code = (
        "import importlib.metadata as m, sys\n"
        "try: print(m.version(sys.argv[1]))\n"
        "except m.PackageNotFoundError: print('')"
    )
    result = subprocess.run(
        [str(python), "-c", code, name], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or None


def canonical_name(name: str) -> str:
    """PEP 503 normalization (`Sglang_Kernel` == `sglang-kernel`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class PinnedRequirement:
    name: str  # canonical
    version: str
    hashes: tuple[str, ...]
    line: int  # where the logical line starts
    text: str  # the requirement on one line, whitespace collapsed

    def render(self) -> str:
        return self.text


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, content) of each requirement: comments dropped, `\\` joined."""
    logical, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = "" if raw.lstrip().startswith("#") else raw.split(" #", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            logical.append((start, " ".join(pending.split())))
        pending = ""
    return logical


def parse_pinned(text: str) -> tuple[list[PinnedRequirement], list[str]]:
    """Every requirement must be an exact `==` pin with at least one sha256 hash; a name may
    appear once. Returns (requirements, problems)."""
    pins: list[PinnedRequirement] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in logical_lines(text):
        match = _PIN.match(line)
        if not match:
            problems.append(
                f"line {number}: {line[:60]!r} is not an exact "
                "`name==version --hash=sha256:<hex>` pin"
            )
            continue
        hashes = tuple(h.group("hex") for h in _HASH.finditer(match.group("rest")))
        if not hashes:
            problems.append(
                f"line {number}: {match.group('name')} has no --hash=sha256:<64 hex> "
                "(pip --require-hashes needs one)"
            )
            continue
        name = canonical_name(match.group("name"))
        if name in seen:
            problems.append(f"line {number}: {name} is pinned twice (also line {seen[name]})")
            continue
        seen[name] = number
        pins.append(PinnedRequirement(name, match.group("version"), hashes, number, line))
    return pins, problems
