"""Names given on the command line (upstreams, recipes) checked before any work starts.

An unknown name is an error for every verb, with a "did you mean" from difflib, so a typo
(`patches lint sglan`) never passes silently as "nothing to do".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from sglforge.base.errors import SglforgeError


def check_names(given: Iterable[str], known: Iterable[str], kind: str, where: object) -> None:
    """Raise one SglforgeError naming every unknown name, each with its close matches."""
    known = sorted(set(known))
    unknown = [name for name in dict.fromkeys(given) if name not in known]
    if not unknown:
        return
    lines = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        lines.append(f"unknown {kind} {name!r} (not in {where}){guess}")
    raise SglforgeError("\n".join(lines),
                        hint=f"{kind}s: {', '.join(known) if known else '(none)'}")


def check_upstreams(names: Iterable[str], lock) -> None:
    """Every name must be a source in the lockfile."""
    check_names(names, (pin.name for pin in lock.pins), "upstream", _rel(lock.path))


def recipe_names(recipes_dir: Path) -> list[str]:
    return sorted(p.stem for p in recipes_dir.glob("*.toml"))


def check_recipes(names: Iterable[str], recipes_dir: Path) -> None:
    check_names(names, recipe_names(recipes_dir), "recipe", f"{recipes_dir.name}/")


def _rel(path: Path) -> str:
    """`lockfiles/upstreams.toml` rather than an absolute path: short and still findable."""
    path = Path(path)
    return "/".join(path.parts[-2:]) if len(path.parts) >= 2 else str(path)
