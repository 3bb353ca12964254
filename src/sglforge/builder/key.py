"""Content keys: a wheel is rebuilt only when something that goes into it changed.

key = sha256 of (pins of the upstream's closure, patch series bytes, recipe bytes, toolchain
fingerprint: nvcc/compiler/cmake/python/installed build requirements, the build root as the
build sees it (`key_root`: the sandbox's fixed /sglforge-build, whatever the host path; nvcc
output depends on it), and the keys of the wheels it depends on). Not in the key: job counts,
compiler cache, mirrors, where sglforge itself is checked out.

Where the build interpreter lives (its prefix and base prefix: `.nox/build`, `.nox/verify`)
is not in the content key stamped into the wheel, because the bytes do not depend on it: it
is prefix-mapped in every compile and a wheel containing it fails the build
(builder/prefixmap.py, wheel/leaks.py). It is in the local wheel *cache* key (`cache_value`),
so a local cache entry is only ever served to the interpreter location it was built from.

The remote (shared) tier is keyed by `remote_value`: the content key plus the interpreter's
ABI (`SOABI`, e.g. `cpython-312-x86_64-linux-gnu`, which also tells a free-threaded build
apart; the version and platform are already in the toolchain fingerprint), and NOT its
location. The location cannot be in it: every runner has its own checkout and therefore its
own `.nox/build-toolchain`, so a location-keyed entry would never be hit by another host.
Leaving it out is sound because a wheel's bytes do not depend on it (the prefix maps and the
leak scan above; `nox -s realcheck` and tests/test_reproducible_paths.py build from two
interpreter locations and compare bytes), and because the remote tier never trusts an entry
by its address alone: the downloaded wheel must match `entry.json`'s sha256 and its stamped
`content_key` must be the key looked up (builder/wheelcache.py). What the content key does
hold still has to match across hosts: the pins, series, recipe, toolchain fingerprint
(nvcc, compiler, cmake, Python, build requirements, torch) — CI runners therefore use the
same toolchain image; their build roots may differ (a sandboxed build sees its root at a
fixed path). `nox -s verify --
--from-lock` is the guard against a poisoned entry: it rebuilds with no cache at all and
compares with `lockfiles/wheels.lock`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.buildroot import SANDBOX_PATH
from sglforge.base.requirements import canonical_name
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.recipes import Recipe
from sglforge.inputs.toolchain import ToolchainFingerprint
from sglforge.patching.series import PatchSeries

# Bump when sglforge changes how it builds or post-processes (changes outputs for same inputs).
# That includes lockfiles/sglforge.lock: the SBOM in every wheel names the cyclonedx-python-lib
# that wrote it, so another version of it changes every wheel (tests/test_records.py holds the
# lock's digest of the wheels of record).
BUILD_FORMAT = 3  # 2: the build root at a fixed path (builder/sandbox.py PathView); 3: an SBOM
# in every wheel (wheel/sbom.py)


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

    @property
    def remote_value(self) -> str:
        """The remote tier's key: the content key plus the interpreter's ABI, not its
        location (module docstring)."""
        return remote_key(self.value)


def interpreter_abi() -> str:
    return str(sysconfig.get_config_var("SOABI") or sys.implementation.cache_tag)


def remote_key(content_key: str, abi: str | None = None) -> str:
    where = {"key": content_key, "abi": abi or interpreter_abi(), "tier": "remote"}
    return hashlib.sha256(json.dumps(where, sort_keys=True).encode()).hexdigest()


def key_root(build_root: Path, unsandboxed: bool = False) -> Path:
    """The build root as the build sees it, which is what its bytes can depend on: the
    sandbox's fixed path (base/buildroot.py SANDBOX_PATH) wherever the host keeps it; the
    host path only for an --unsafe-no-sandbox build."""
    return build_root if unsandboxed else SANDBOX_PATH


def compute_key(
    recipe: Recipe,
    lock: Lockfile,
    series: PatchSeries,
    tool: ToolchainFingerprint,
    build_root: Path,
    dep_keys: dict[str, str],
    target: str | None = None,
    substituted: dict[str, str] | None = None,
    unsandboxed: bool = False,
) -> BuildKey:
    requires = {canonical_name(r) for r in recipe.build_requires}
    toolchain = tool.as_dict()
    toolchain["build_requires"] = {
        k: v for k, v in toolchain["build_requires"].items() if k in requires
    }
    toolchain["torch"] = tool.torch if "torch" in requires else None
    inputs = {
        "format": BUILD_FORMAT,
        "recipe": {"name": recipe.name, "sha256": recipe.sha256},
        "sources": [
            {
                "name": p.name,
                "url": p.url,
                "commit": p.commit,
                "sha256": p.sha256,
                "path": p.path,
                "fetchcontent": p.fetchcontent,
                # [substitutes]: the local directory's tree stands in for the pin
                **(
                    {"substitute": substituted[p.name]}
                    if substituted and p.name in substituted
                    else {}
                ),
            }
            for p in lock.closure(recipe.upstream)
        ],
        "series": series.digest,
        "toolchain": toolchain,
        "build_root": str(key_root(build_root, unsandboxed)),
        "depends": dict(sorted(dep_keys.items())),
    }
    if target is not None:  # the product's keys stay as they were; a target's differ
        inputs["target"] = target
    if unsandboxed:  # --unsafe-no-sandbox (builder/sandbox.py): never a sandboxed build's key
        inputs["unsandboxed"] = True
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return BuildKey(hashlib.sha256(blob).hexdigest())
