"""Build targets: `targets/<name>.toml`, the same pins and series built for other hardware.

The product is what the recipes say (sm_120a). A target overrides, per recipe, only what a
different GPU needs — never pins, series or toolchain, so a verification build is the same
stack, not a second lockfile:

    description = "H200 verification build (sm_90a)"
    [recipe.sglang-kernel]
    cuda-archs = ["sm_90a"]
    local-version = "sm90.cu{cuda}.{patchset8}"
    [recipe.sglang-kernel.cmake-defines]
    SGL_KERNEL_COMMON_OPS_VARIANTS = "sm90"

Allowed per recipe: `cuda-archs`, `local-version`, and entries of `[env]`,
`[cmake-defines]`, `[config-settings]` (merged over the recipe's, entry by entry). The result
is validated as a recipe (a label naming an arch the wheel does not carry is an error), the
target file's bytes go into every recipe's digest and the target's name into every content
key (the wheel caches never mix targets), and provenance records the target. Recipes the
target does not name are built as they are (their content key still differs).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError, did_you_mean
from sglforge.base.tomlfile import Problems, TableReader, key_line, load_toml

TARGET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
OVERRIDABLE = ("cuda-archs", "local-version", "env", "cmake-defines", "config-settings")


@dataclass(frozen=True)
class Target:
    name: str
    path: Path
    sha256: str  # of the file's bytes
    description: str = ""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # recipe -> keys


def targets_dir(project_root: Path) -> Path:
    return project_root / "targets"


def load_target(project_root: Path, name: str) -> Target:
    directory = targets_dir(project_root)
    if not TARGET_NAME.fullmatch(name):
        raise SglforgeError(
            f"--target {name!r}: a target name is lowercase letters, digits, '.', '_' or '-'"
        )
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.toml")) if directory.is_dir() else []
        raise SglforgeError(
            f"--target {name}: no {path}{did_you_mean(name, known)}",
            hint="targets: " + (", ".join(known) or "none (add targets/<name>.toml)"),
        )
    data, text = load_toml(path)
    problems = Problems(path)
    reader = TableReader(data, problems, "target", locate=lambda key: key_line(text, 1, key))
    description = reader.str("description") or ""
    recipes = reader.table("recipe") or {}
    reader.finish()
    overrides: dict[str, dict[str, Any]] = {}
    for recipe, table in recipes.items():
        where = f"[recipe.{recipe}]"
        if not isinstance(table, dict):
            problems.add(f"{where}: expected a table of recipe keys")
            continue
        sub = TableReader(
            table, problems, where, locate=lambda key, r=recipe: _table_line(text, str(r), key)
        )
        # types here, so a mistake names this file; values are checked as the recipe's
        checked = {
            "cuda-archs": sub.str_list("cuda-archs"),
            "local-version": sub.str("local-version"),
            "env": sub.str_table("env") or None,
            "cmake-defines": sub.str_table("cmake-defines") or None,
            "config-settings": sub.table("config-settings"),
        }
        for key in table:
            if key not in OVERRIDABLE:
                sub.seen.add(key)
                sub.error(
                    key,
                    f"a target may override only {', '.join(OVERRIDABLE)} (pins, "
                    "series and the toolchain are the stack's, not the target's)",
                )
        overrides[str(recipe)] = {k: v for k, v in checked.items() if v is not None}
    problems.raise_if_any()
    return Target(name, path, hashlib.sha256(path.read_bytes()).hexdigest(), description, overrides)


def _table_line(text: str, recipe: str, key: str) -> int | None:
    header = re.compile(r"^\s*\[\s*recipe\.\"?" + re.escape(recipe) + r"\"?\s*\]")
    start = next((i for i, line in enumerate(text.splitlines(), 1) if header.match(line)), None)
    return key_line(text, start, key) if start else None


def check_recipe_names(target: Target, recipes: list[str]) -> None:
    unknown = sorted(set(target.overrides) - set(recipes))
    if unknown:
        raise SglforgeError(
            f"{target.path}: [recipe.{unknown[0]}]: no recipe named "
            f"'{unknown[0]}' (recipes: {', '.join(sorted(recipes))})"
        )
