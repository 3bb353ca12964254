"""Before anything reads TOML: is a TOML parser importable? (standard library only).

sglforge reads TOML with `tomllib` (Python ≥ 3.11) or `tomli` (the backport, a dependency on
3.10). `plan`, `fetch` and `patches` run straight from src/ with the interpreter nox runs
under, so on 3.10 without `tomli` the user gets one line and exit status 2, not a traceback.
"""

from __future__ import annotations

import importlib
import sys

MESSAGE = (
    "sglforge: needs Python ≥ 3.11 (for tomllib) or `pip install tomli`; "
    "this is Python {version} and neither can be imported"
)


def toml_module_name() -> str:
    """The module sglforge.base.tomlfile imports on this Python."""
    return "tomllib" if sys.version_info >= (3, 11) else "tomli"


def require_toml() -> None:
    """Exit 2 with one line when the TOML parser is missing."""
    try:
        importlib.import_module(toml_module_name())
    except ImportError:
        version = ".".join(map(str, sys.version_info[:3]))
        print(MESSAGE.format(version=version), file=sys.stderr)
        raise SystemExit(2) from None
