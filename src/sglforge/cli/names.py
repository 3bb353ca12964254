"""Names given on the command line (upstreams, recipes) checked before any work starts.

An unknown name is an error for every verb, with a "did you mean" from difflib, so a typo
(`patches lint sglan`) never passes silently as "nothing to do".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from sglforge.base.errors import SglforgeError


def check_names(given: Iterable[str], known: Iterable[str], kind: str, where: object,
                main: Iterable[str] | None = None) -> None:
    """Raise one SglforgeError naming every unknown name, each with its close matches.

    `main` (default: all of `known`) are the names worth listing, and suggesting after the
    best match: e.g. the upstreams of a lockfile whose submodule entries are valid too.
    """
    known = sorted(set(known))
    main = sorted(set(main)) if main is not None else known
    unknown = [name for name in dict.fromkeys(given) if name not in known]
    if not unknown:
        return
    lines = []
    for name in unknown:
        # The best match, then any other close match that is a main name.
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        close = close[:1] + [c for c in close[1:] if c in main]
        guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        lines.append(f"unknown {kind} {name!r} (not in {where}){guess}")
    raise SglforgeError("\n".join(lines),
                        hint=f"{kind}s: {', '.join(main) if main else '(none)'}")


def check_upstreams(names: Iterable[str], lock) -> None:
    """Every name must be a source in the lockfile (upstreams are listed and suggested)."""
    check_names(names, (pin.name for pin in lock.pins), "upstream", _rel(lock.path),
                main=(pin.name for pin in lock.upstreams()))


def check_recipes(names: Iterable[str], recipes_dir: Path) -> None:
    from sglforge.inputs.recipes import recipe_names

    check_names(names, recipe_names(recipes_dir), "recipe", f"{recipes_dir.name}/")


def _rel(path: Path) -> str:
    """`lockfiles/upstreams.toml` rather than an absolute path: short and still findable."""
    path = Path(path)
    return "/".join(path.parts[-2:]) if len(path.parts) >= 2 else str(path)
