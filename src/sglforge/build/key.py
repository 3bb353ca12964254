"""Content keys: a wheel is rebuilt only when something that goes into it changed.

key = sha256 of (pins of the upstream's closure, patch series bytes, recipe bytes, toolchain
fingerprint: nvcc/compiler/cmake/python/installed build requirements, the build root (nvcc
output depends on it), and the keys of the wheels it depends on). Not in the key: job counts,
compiler cache, mirrors, where sglforge itself is checked out.

Where the build interpreter lives (its prefix and base prefix: `.nox/build`, `.nox/verify`)
is not in the content key stamped into the wheel, because the bytes do not depend on it: it
is prefix-mapped in every compile and a wheel containing it fails the build
(build/prefixmap.py, wheel/leaks.py). It is in the wheel *cache* key (`cache_value`), so a
cache entry is only ever served to the interpreter location it was built from.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.requirements import canonical_name
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.recipes import Recipe
from sglforge.inputs.toolchain import ToolchainFingerprint
from sglforge.patching.series import PatchSeries

# Bump when sglforge changes how it builds or post-processes (changes outputs for same inputs).
BUILD_FORMAT = 1


@dataclass(frozen=True)
class BuildKey:
    value: str

    @property
    def short(self) -> str:
        return self.value[:12]

    @property
    def cache_value(self) -> str:
        """The wheel cache's key: the content key plus where the build interpreter lives."""
        where = {"key": self.value, "prefix": sys.prefix, "base_prefix": sys.base_prefix}
        return hashlib.sha256(json.dumps(where, sort_keys=True).encode()).hexdigest()


def compute_key(recipe: Recipe, lock: Lockfile, series: PatchSeries,
                tool: ToolchainFingerprint, build_root: Path,
                dep_keys: dict[str, str]) -> BuildKey:
    requires = {canonical_name(r) for r in recipe.build_requires}
    toolchain = tool.as_dict()
    toolchain["build_requires"] = {k: v for k, v in toolchain["build_requires"].items()
                                   if k in requires}
    toolchain["torch"] = tool.torch if "torch" in requires else None
    inputs = {
        "format": BUILD_FORMAT,
        "recipe": {"name": recipe.name, "sha256": recipe.sha256},
        "sources": [{"name": p.name, "url": p.url, "commit": p.commit, "sha256": p.sha256,
                     "path": p.path, "fetchcontent": p.fetchcontent}
                    for p in lock.closure(recipe.upstream)],
        "series": series.digest,
        "toolchain": toolchain,
        "build_root": str(build_root),
        "depends": dict(sorted(dep_keys.items())),
    }
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return BuildKey(hashlib.sha256(blob).hexdigest())
