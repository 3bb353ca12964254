"""Names given on the command line (upstreams, recipes) checked before any work starts.

An unknown name is an error for every verb, with a "did you mean" from difflib, so a typo
(`patches lint sglan`) never passes silently as "nothing to do".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError


def check_names(
    given: Iterable[str],
    known: Iterable[str],
    kind: str,
    where: object,
    main: Iterable[str] | None = None,
) -> None:
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
    raise SglforgeError("\n".join(lines), hint=f"{kind}s: {', '.join(main) if main else '(none)'}")


def check_upstreams(names: Iterable[str], lock) -> None:
    """Every name must be a source in the lockfile (upstreams are listed and suggested)."""
    check_names(
        names,
        (pin.name for pin in lock.pins),
        "upstream",
        _rel(lock.path),
        main=(pin.name for pin in lock.upstreams()),
    )


def check_recipes(names: Iterable[str], recipes_dir: Path) -> None:
    from sglforge.inputs.recipes import recipe_names

    check_names(names, recipe_names(recipes_dir), "recipe", f"{recipes_dir.name}/")


def _rel(path: Path) -> str:
    """`lockfiles/upstreams.toml` rather than an absolute path: short and still findable."""
    path = Path(path)
    return "/".join(path.parts[-2:]) if len(path.parts) >= 2 else str(path)


@dataclass(frozen=True)
class Selection:
    """What a build or verify of `recipes` needs: the upstreams to fetch, whether torch must be
    in the toolchain venv, whether nvcc must be found."""

    recipes: tuple[str, ...]
    upstreams: tuple[str, ...]
    needs_torch: bool
    device_code: bool
    host_requires: dict[str, tuple[str, ...]]  # recipe -> pkg-config modules it needs
    skipped: tuple[str, ...] = ()  # opt-in recipes a build naming none leaves out


def select_recipes(project, names: list[str], target: str | None = None) -> Selection:
    """The recipes named (all but the opt-in ones when none) plus their dependencies,
    validated (lockfile, toolchain, every recipe, and `target`'s overrides of them: what the
    build of targets/TARGET.toml would load)."""
    from sglforge.inputs.pins import parse_lockfile
    from sglforge.inputs.recipes import left_out, load_recipes, select
    from sglforge.inputs.targets import load_target
    from sglforge.inputs.toolchain import load_toolchain

    check_recipes(names, project.recipes_dir)
    lock = parse_lockfile(project.lockfile)
    chosen_target = load_target(project.root, target) if target else None
    recipes = load_recipes(
        project.recipes_dir, lock, load_toolchain(project.toolchain), chosen_target
    )
    chosen = select(recipes, names)
    torch = any(
        recipes[n].requires_torch_abi or "torch" in recipes[n].build_requires for n in chosen
    )
    return Selection(
        recipes=tuple(chosen),
        upstreams=tuple(sorted({recipes[n].upstream for n in chosen})),
        needs_torch=torch,
        device_code=any(recipes[n].cuda_archs for n in chosen),
        host_requires={n: recipes[n].host_requires for n in chosen if recipes[n].host_requires},
        skipped=() if names else tuple(r.name for r in left_out(recipes, chosen)),
    )
