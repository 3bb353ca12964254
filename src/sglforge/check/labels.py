"""Labels: a wheel is never labelled with a version it does not implement.

- A recipe's `base-version` must be the release its pin's `ref` names when that ref is a
  release tag (`v0.5.21` → 0.5.21): the upstream's version comes from that tag.
- A built wheel's public version must be the recipe's `base-version`, or, for a wheel named
  after its upstream whose ref is a release tag, that release.
- A built wheel's provenance must name the recipe's upstream at the pinned commit (a wheel
  from an older pin is stale).
- An opt-in recipe (`opt-in = "why"`) without a wheel in the stack is an info line, not an
  error: nothing requires its wheel (flashinfer JIT-compiles what flashinfer-jit-cache holds).
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from sglforge.base.requirements import canonical_name
from sglforge.check.findings import Findings
from sglforge.check.stack import Stack
from sglforge.inputs.pins import Lockfile, Pin
from sglforge.inputs.recipes import Recipe

PART = "labels"
RELEASE_TAG = re.compile(r"v?(?P<version>[0-9]+(\.[0-9]+)+((a|b|rc)[0-9]+)?(\.post[0-9]+)?)")


def release_of(pin: Pin) -> Version | None:
    """The release a pin's ref names (`v0.5.21`, `0.1.12`), or None (a branch, no ref)."""
    match = RELEASE_TAG.fullmatch(pin.ref or "")
    if match is None:
        return None
    try:
        return Version(match.group("version"))
    except InvalidVersion:
        return None


def expected_version(recipe: Recipe, pin: Pin) -> Version | None:
    """The release the pin names, where the wheel's version comes from it (a `base-version`
    recipe, or a wheel named after its upstream); else the recipe's base-version, if any."""
    release = release_of(pin)
    if release is not None and (
        recipe.base_version is not None or canonical_name(recipe.name) == canonical_name(pin.name)
    ):
        return release
    return Version(recipe.base_version) if recipe.base_version is not None else None


def check_recipes(recipes: dict[str, Recipe], lock: Lockfile, findings: Findings) -> None:
    for recipe in recipes.values():
        pin = lock.get(recipe.upstream)
        release = release_of(pin)
        if recipe.base_version is None or release is None:
            continue
        if Version(recipe.base_version) != release:
            findings.error(
                PART,
                f"recipes/{recipe.path.name}: base-version "
                f"{recipe.base_version} but the pin {pin.name} is {pin.ref} "
                f"({(pin.commit or '')[:12]}): set base-version = "
                f'"{release}"',
            )


def check_wheels(
    stack: Stack, recipes: dict[str, Recipe], lock: Lockfile, findings: Findings
) -> None:
    for wheel in stack.wheels:
        recipe = recipes.get(wheel.recipe or "")
        if recipe is None:
            findings.hint(
                PART,
                f"{wheel.label}: no recipe named {wheel.recipe!r}: label not checked against a pin",
            )
            continue
        pin = lock.get(recipe.upstream)
        expected = expected_version(recipe, pin)
        try:
            public = Version(wheel.version).public
        except InvalidVersion:
            findings.error(PART, f"{wheel.label}: not a PEP 440 version")
            continue
        if expected is not None and Version(public) != expected:
            findings.error(
                PART,
                f"{wheel.label}: labelled {public} but {pin.name} "
                f"{pin.ref or ''} ({(pin.commit or '')[:12]}) is {expected}",
            )
        prov = wheel.provenance
        if prov is None:
            findings.hint(
                PART,
                f"{wheel.label}: no sglforge-build.json (not built by "
                "sglforge): pinned commit not checked",
            )
            continue
        if prov.upstream != recipe.upstream or prov.commit != pin.identity:
            findings.error(
                PART,
                f"{wheel.label}: built from {prov.upstream} "
                f"{prov.commit[:12]}, but the pin is "
                f"{recipe.upstream} {pin.identity[:12]}: rebuild it",
            )
    built = {canonical_name(w.recipe or w.name) for w in stack.wheels}
    for recipe in recipes.values():  # an opt-in wheel is optional: absent is no error
        if recipe.opt_in and canonical_name(recipe.name) not in built:
            findings.info(
                PART,
                f"{recipe.name}: not in the stack; opt-in ({recipe.opt_in}), built only by name",
            )
