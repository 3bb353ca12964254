"""Reading TOML input files into typed values, with errors that name the file, key and line.

`TableReader` wraps one table: typed getters record problems instead of raising, and
`finish()` reports keys nobody asked for, with the nearest known key ("did you mean"). A
`Problems` collector gathers every problem in a file so the user sees all of them at once
(scikit-build-core style).

A model can be declared once: dataclass fields made with `key(...)` carry the TOML key, the
getter and its checks in their metadata, and `read_keys(reader, cls)` reads them all.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import math
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import TEXT_INPUT_CAP, TOML_INPUT_CAP, read_capped


def read_input_text(path: Path, limit: int = TEXT_INPUT_CAP, what: str = "text input") -> str:
    """The UTF-8 text of an input file; a missing file, a directory, an unreadable file, one
    over `limit` bytes or bytes that are not UTF-8 are `SglforgeError`s naming the file (and
    line), never tracebacks."""
    raw = read_capped(path, limit, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SglforgeError(
            f"{path}: line {line}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def load_toml(path: Path) -> tuple[dict[str, Any], str]:
    """Parse `path`; return (data, text). Syntax errors name the file and line; a file over
    TOML_INPUT_CAP or nested too deeply for the parser is an error naming the file."""
    text = read_input_text(path, TOML_INPUT_CAP, "TOML input")
    try:
        return tomllib.loads(text), text
    except RecursionError:  # tomllib recurses per nested array/inline table
        raise SglforgeError(
            f"{path}: invalid TOML: arrays or inline tables nested too deeply for the parser"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise SglforgeError(f"{path}: invalid TOML: {exc}") from None
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise SglforgeError(f"{path}: invalid TOML: {str(exc).split(';')[0]}") from None


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


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` — did you mean 'x'?` for the nearest of `known` (difflib), or ''."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    return f" — did you mean '{close[0]}'?" if close else ""


def _show(value: Any, limit: int = 80) -> str:
    """`repr` for messages, shortened (a hostile file may hold a megabyte in one value)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _out_of_range(value: int, minimum: int | None, maximum: int | None) -> str | None:
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if minimum is not None and maximum is not None:
            return f"must be between {minimum} and {maximum}, got {_show(value)}"
        if minimum is not None:
            return f"must be >= {minimum}, got {_show(value)}"
        return f"must be <= {maximum}, got {_show(value)}"
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

    def str(
        self,
        key: str,
        *,
        required: bool = False,
        pattern: str | None = None,
        describe: str | None = None,
    ) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            self.error(key, f"expected a string, got {type(value).__name__} {_show(value)}")
            return None
        if "\0" in value:
            self.error(key, "contains a NUL character")
            return None
        if pattern and not re.fullmatch(pattern, value):
            self.error(key, f"{_show(value)} is not {describe or 'valid'}")
            return None
        return value

    def bool(self, key: str, *, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"expected true or false, got {_show(value)}")
            return default
        return value

    def int(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"expected an integer, got {_show(value)}")
            return None
        problem = _out_of_range(value, minimum, maximum)
        if problem:
            self.error(key, problem)
            return None
        return value

    def number(self, key: str, *, default: float, maximum: float) -> float:
        """A finite number > 0 and <= `maximum` (seconds, ratios); NaN/inf are errors."""
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(key, f"expected a positive number, got {_show(value)}")
            return default
        if not math.isfinite(value) or not 0 < value <= maximum:
            self.error(key, f"must be a finite number > 0 and <= {maximum:g}, got {_show(value)}")
            return default
        return float(value)

    def str_list(self, key: str, *, required: bool = False) -> list[str] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.error(key, f"expected a list of strings, got {_show(value)}")
            return None
        if any("\0" in v for v in value):
            self.error(key, "contains a NUL character")
            return None
        return list(value)

    def int_list(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> list[int] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            self.error(key, f"expected a list of integers, got {_show(value)}")
            return None
        for item in value:
            problem = _out_of_range(item, minimum, maximum)
            if problem:
                self.error(key, f"each value {problem}")
                return None
        return list(value)

    def str_table(self, key: str) -> dict[str, str]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.error(key, f"expected a table of strings, got {_show(value)}")
            return {}
        if any("\0" in k or "\0" in v for k, v in value.items()):
            self.error(key, "contains a NUL character")
            return {}
        return dict(value)

    def table(self, key: str, *, required: bool = False) -> dict[str, Any] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.error(key, f"expected a table, got {_show(value)}")
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
        self.error(key, f"expected a date like 2026-08-22, got {_show(value)}")
        return None

    def finish(self, known: Iterable[str] = ()) -> None:
        """Report keys present in the table that no getter asked for, suggesting the nearest
        key that was asked for (or is in `known`)."""
        candidates = self.seen | set(known)
        for key in self.data:
            if key not in self.seen:
                self.error(key, "unknown key" + did_you_mean(str(key), candidates))


# ---------------------------------------------------------------------------------------------
# declarative models: one dataclass field per key


@dataclasses.dataclass(frozen=True)
class KeySpec:
    """How one TOML key is read: `getter` is a `TableReader` method name, `options` its checks."""

    name: str
    getter: str
    options: tuple[tuple[str, Any], ...] = ()
    env: str | None = None  # an environment variable that may override the value
    doc: str = ""


def key(
    name: str,
    getter: str = "str",
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    env: str | None = None,
    doc: str = "",
    **options: Any,
) -> Any:
    """A dataclass field read from TOML key `name` with `TableReader.<getter>(name, **options)`."""
    spec = KeySpec(name, getter, tuple(sorted(options.items())), env, doc)
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"toml": spec}
    )


def key_specs(cls: type) -> dict[str, KeySpec]:
    """Field name -> `KeySpec` for every field of `cls` declared with `key(...)`."""
    return {f.name: f.metadata["toml"] for f in dataclasses.fields(cls) if "toml" in f.metadata}


def read_keys(reader: TableReader, cls: type) -> dict[str, Any]:
    """Field name -> value for every `key(...)` field of `cls` present in the table (checked by
    its getter; absent or invalid keys are left out, problems go to the reader)."""
    out: dict[str, Any] = {}
    for field_name, spec in key_specs(cls).items():
        if spec.name not in reader.data:
            reader.seen.add(spec.name)
            continue
        options = dict(spec.options)
        if spec.getter in ("bool", "number"):
            options.setdefault("default", None)
        value = getattr(reader, spec.getter)(spec.name, **options)
        if value is not None:
            out[field_name] = value
    return out
