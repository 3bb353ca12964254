"""System libraries a recipe builds against (`host-requires`), checked before any work.

A recipe names them as pkg-config modules with an optional bound (`"ucx >= 1.22"`): the
build finds them the same way (meson and CMake ask pkg-config), so `pkg-config --exists`
answers the question the build would ask hours later. Checked by `sglforge preflight` (before
`nox -s build` installs the toolchain) and by `sglforge build` before fetching.
"""

from __future__ import annotations

import shutil
import subprocess

from sglforge.base.errors import SglforgeError


def missing(specs: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per unmet requirement: `recipe: spec (found: version | not found)`."""
    wanted = [(recipe, spec) for recipe, entries in sorted(specs.items()) for spec in entries]
    if not wanted:
        return []
    pkg_config = shutil.which("pkg-config")
    if pkg_config is None:
        return [
            f"{recipe}: {spec} (pkg-config is not installed, so it cannot be found)"
            for recipe, spec in wanted
        ]
    out = []
    for recipe, spec in wanted:
        # `pkg-config --exists "ucx >= 1.22"` evaluates the bound itself
        if (
            subprocess.run(
                [pkg_config, "--exists", "--", spec], capture_output=True, check=False
            ).returncode
            == 0
        ):
            continue
        module = spec.split()[0].rstrip("<>=")
        found = subprocess.run(
            [pkg_config, "--modversion", "--", module], capture_output=True, text=True, check=False
        )
        have = f"found {found.stdout.strip()}" if found.returncode == 0 else "not found"
        out.append(f"{recipe}: {spec} ({have})")
    return out


def check(specs: dict[str, tuple[str, ...]]) -> None:
    problems = missing(specs)
    if problems:
        raise SglforgeError(
            "system libraries the selected recipes build against are missing (recipes' "
            "host-requires, checked with pkg-config):\n" + "\n".join(f"  - {p}" for p in problems),
            hint="install them (e.g. UCX 1.22 with its .pc file; PKG_CONFIG_PATH for a prefix "
            "install), or build without those recipes",
        )
