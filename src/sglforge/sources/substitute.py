"""Substitutes: a local directory built in place of a pinned FetchContent input that cannot be
fetched or checked here (a snapshot over the fetch limit, a commit no mirror holds).

A substitute is the builder's own local decision, so only the user config names one
(`[substitutes."<pin>"]`: `path`, `reason`; inputs/settings.py); the project's files, which
come from other people's pull requests, cannot. It breaks a pin, and everything downstream says
so instead of hiding it:

- `fetch` does not fetch the pin and lists it as substituted;
- the build copies the directory in (regular files, and links that stay inside it), and the
  copy's git tree id goes into the build key, the wheel's provenance (`substitutes`) and its
  local version (`.sub<8 hex>`), so a substituted wheel never carries the name of the wheel the
  pins describe, and a changed directory is a different wheel;
- the archive tree records (sources/trees.py) never learn a substitute's tree under the pin;
- publish, promote, bundle and the remote wheel cache refuse a substituted wheel
  (`substitute_problem`); `verify` rebuilds it with the same substitutes and says so; the smoke
  runs it and its receipt lists the substitution among its limitations.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import copy_tree_inside, replace_dir, staging_dir
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.settings import Settings, Substitute
from sglforge.sources.trees import directory_tree

LABEL = "sub"  # the local-version segment: `.sub<8 hex>`


def substitutes_for(
    lock: Lockfile, settings: Settings, upstream: str | None = None
) -> dict[str, Substitute]:
    """The configured substitutes (of `upstream`'s closure, or all), each checked to name a
    FetchContent input of the lockfile; pin name -> substitute."""
    if not settings.substitutes:
        return {}
    inputs = {p.name: p for p in lock.pins if p.fetchcontent}
    found: dict[str, Substitute] = {}
    for sub in settings.substitutes:
        if sub.name not in inputs:
            known = ", ".join(sorted(inputs)) or "none"
            raise SglforgeError(
                f"{sub.origin}: '{sub.name}' is not a FetchContent input in "
                f"{lock.path} (FetchContent inputs: {known})",
                hint="a substitute stands in only for a downloaded "
                "dependency, never for an upstream or a submodule",
            )
        found[sub.name] = sub
    if upstream is None:
        return found
    closure = {p.name for p in lock.closure(upstream)}
    return {name: sub for name, sub in found.items() if name in closure}


def _check_directory(sub: Substitute) -> None:
    """Regular files, directories, and links that resolve inside the directory; nothing else
    (a device, a fifo, a link out of it)."""
    root = sub.path
    if not root.is_dir():
        raise SglforgeError(f"{sub.origin}: path {root} is not a directory")
    real_root = root.resolve()
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                target = Path(os.readlink(path))
                resolved = (path.parent / target).resolve()
                if target.is_absolute() or not resolved.is_relative_to(real_root):
                    raise SglforgeError(
                        f"{sub.origin}: {path} links outside {root} "
                        f"({target}); copy the file in instead"
                    )
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise SglforgeError(f"{sub.origin}: {path} is not a regular file or directory")


def substitute_tree(sub: Substitute) -> str:
    """The git tree id of the substitute directory as it is now."""
    _check_directory(sub)
    return directory_tree(sub.path)


def substitute_trees(lock: Lockfile, settings: Settings, upstream: str) -> dict[str, str]:
    """Pin name -> tree id of each substitute in `upstream`'s closure (for the build key)."""
    return {
        name: substitute_tree(sub)
        for name, sub in sorted(substitutes_for(lock, settings, upstream).items())
    }


def place_substitute(sub: Substitute, dest: Path, expected_tree: str | None = None) -> str:
    """Copy the substitute to `dest` (replaced only on success); its tree id, which must be
    `expected_tree` when given (the directory changed while the build ran otherwise)."""
    _check_directory(sub)
    with staging_dir(dest) as staged:
        shutil.rmtree(staged)
        # checked again while copying (a link out of the directory made since the check is
        # refused, never followed); the configured path itself may be a link to the directory
        copy_tree_inside(sub.path.resolve(), staged, f"{sub.origin}: substitute {sub.name}")
        tree = directory_tree(staged)
        if expected_tree is not None and tree != expected_tree:
            raise SglforgeError(
                f"{sub.origin}: {sub.path} changed during the build (tree "
                f"{expected_tree} when the build key was computed, now {tree})"
            )
        staged.chmod(0o755)  # readable by the build, whatever the directory's mode
        replace_dir(staged, dest)
    return tree


def label_segment(trees: Mapping[str, str]) -> str | None:
    """`sub<8 hex>` over the (pin, tree) pairs, or None when nothing is substituted."""
    if not trees:
        return None
    blob = "\n".join(f"{name} {tree}" for name, tree in sorted(trees.items()))
    return LABEL + hashlib.sha256(blob.encode()).hexdigest()[:8]


def provenance_records(
    lock: Lockfile, settings: Settings, trees: Mapping[str, str]
) -> tuple[dict[str, Any], ...] | None:
    """What provenance says of each substitution: the pin not used and what stood in for it."""
    if not trees:
        return None
    subs = substitutes_for(lock, settings)
    records = []
    for name, tree in sorted(trees.items()):
        pin = lock.get(name)
        records.append(
            {
                "name": name,
                "pinned": pin.identity,
                "url": pin.url,
                "tree": tree,
                "path": str(subs[name].path),
                "reason": subs[name].reason,
            }
        )
    return tuple(records)


def substitute_problem(substitutes: Any, where: str) -> str | None:
    """Why a wheel whose provenance lists `substitutes` may not leave this host, or None."""
    if not substitutes:
        return None
    names = (
        ", ".join(str(s.get("name")) if isinstance(s, dict) else "?" for s in substitutes)
        if isinstance(substitutes, (list, tuple))
        else "?"
    )
    return (
        f"{where} was built with substituted inputs ({names}: local directories in place "
        "of their pins, [substitutes] in the user config); it is for local use only: "
        "rebuild it from the pinned sources"
    )
