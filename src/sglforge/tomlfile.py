"""Reading TOML input files into typed values, with errors that name the file, key and line.

`TableReader` wraps one table: typed getters record problems instead of raising, and
`finish()` reports keys nobody asked for. A `Problems` collector gathers every problem in a
file so the user sees all of them at once (scikit-build-core style).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from sglforge.errors import ConfigErrors, SglforgeError


def load_toml(path: Path) -> tuple[dict[str, Any], str]:
    """Parse `path`; return (data, text). Syntax errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SglforgeError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise SglforgeError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise SglforgeError(f"{path}: invalid TOML: {exc}") from None


class Problems:
    """Collects problems for one file; `raise_if_any()` raises them together."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigErrors(self.path, self.items)


def array_table_lines(text: str, table: str) -> list[int]:
    """1-based line numbers of each `[[table]]` header, in order (for error locations)."""
    pattern = re.compile(r"^\s*\[\[\s*" + re.escape(table) + r"\s*\]\]\s*(#.*)?$")
    return [i for i, line in enumerate(text.splitlines(), 1) if pattern.match(line)]


def key_line(text: str, start_line: int, key: str) -> int | None:
    """Line of `key = ...` at or after `start_line`, before the next table header."""
    lines = text.splitlines()
    pattern = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*=")
    for number in range(start_line, len(lines) + 1):
        line = lines[number - 1]
        if number > start_line and line.lstrip().startswith("["):
            return None
        if pattern.match(line):
            return number
    return None


class TableReader:
    """Typed, checked access to one TOML table.

    `where` is a human label ("source #3 'flashinfer'"); `locate(key)` returns a line number
    or None so messages can say `line N`.
    """

    def __init__(
        self,
        data: dict[str, Any],
        problems: Problems,
        where: str,
        locate: Callable[[str], int | None] = lambda key: None,
    ) -> None:
        self.data = data
        self.problems = problems
        self.where = where
        self.locate = locate
        self.seen: set[str] = set()

    def error(self, key: str | None, message: str) -> None:
        line = self.locate(key) if key else None
        at = f" (line {line})" if line else ""
        prefix = f"{self.where}, key '{key}'" if key else self.where
        self.problems.add(f"{prefix}{at}: {message}")

    def _get(self, key: str, required: bool) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                self.error(None, f"missing required key '{key}'")
            return None
        return self.data[key]

    def str(self, key: str, *, required: bool = False, pattern: str | None = None,
            describe: str | None = None) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            self.error(key, f"expected a string, got {type(value).__name__} {value!r}")
            return None
        if pattern and not re.fullmatch(pattern, value):
            self.error(key, f"{value!r} is not {describe or 'valid'}")
            return None
        return value

    def bool(self, key: str, *, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"expected true or false, got {value!r}")
            return default
        return value

    def int(self, key: str, *, required: bool = False, minimum: int | None = None) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"expected an integer, got {value!r}")
            return None
        if minimum is not None and value < minimum:
            self.error(key, f"must be >= {minimum}, got {value}")
            return None
        return value

    def str_list(self, key: str, *, required: bool = False) -> list[str] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.error(key, f"expected a list of strings, got {value!r}")
            return None
        return list(value)

    def int_list(self, key: str, *, required: bool = False) -> list[int] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            self.error(key, f"expected a list of integers, got {value!r}")
            return None
        return list(value)

    def str_table(self, key: str) -> dict[str, str]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.error(key, f"expected a table of strings, got {value!r}")
            return {}
        return dict(value)

    def table(self, key: str, *, required: bool = False) -> dict[str, Any] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.error(key, f"expected a table, got {value!r}")
            return None
        return value

    def date(self, key: str) -> dt.date | None:
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, dt.datetime):
            return value.date()
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        self.error(key, f"expected a date like 2026-08-22, got {value!r}")
        return None

    def finish(self) -> None:
        """Report keys present in the table that no getter asked for."""
        for key in self.data:
            if key not in self.seen:
                self.error(key, "unknown key")
