"""What the check looks at: the built wheels (wheels/ + manifest.json) and runtime.lock.

Everything is read from the wheel files themselves (METADATA, file name tags, members,
provenance); nothing is installed or imported.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.requirements import PinnedRequirement, canonical_name, parse_pinned
from sglforge.base.tomlfile import read_input_text
from sglforge.wheel.outputs import MANIFEST, load_manifest
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance
from sglforge.wheel.provenance import read as read_provenance
from sglforge.wheel.runtime import metadata_headers


@dataclass(frozen=True)
class StackWheel:
    file: Path
    name: str  # canonical
    version: str
    recipe: str | None  # from the manifest
    requires_dist: tuple[str, ...]
    requires_python: str | None
    tags: frozenset[str]  # "cp312-cp312-manylinux_2_28_x86_64", …
    members: tuple[str, ...]  # names inside the zip
    provenance: Provenance | None  # None: not built by sglforge (a reference wheel)

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class Stack:
    wheels: tuple[StackWheel, ...]
    runtime: tuple[PinnedRequirement, ...]
    wheels_dir: Path
    runtime_lock: Path


def read_wheel(path: Path, recipe: str | None = None) -> StackWheel:
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise SglforgeError(f"{path}: {exc}") from None
    try:
        with zipfile.ZipFile(path) as archive:
            members = tuple(archive.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise SglforgeError(f"{path}: not a readable wheel: {exc}") from None
    headers = metadata_headers(path)
    built_by_us = any(
        m.count("/") == 1 and m.endswith(f".dist-info/{PROVENANCE_FILE}") for m in members
    )
    provenance = read_provenance(path) if built_by_us else None
    meta_name = headers.get("Name")
    if meta_name is None or canonical_name(meta_name) != canonical_name(str(name)):
        raise SglforgeError(
            f"{path.name}: METADATA Name {meta_name!r} does not match the file name"
        )
    return StackWheel(
        file=path,
        name=canonical_name(str(name)),
        version=headers.get("Version", str(version)),
        recipe=recipe,
        requires_dist=tuple(headers.get_all("Requires-Dist") or ()),
        requires_python=headers.get("Requires-Python"),
        tags=frozenset(str(t) for t in tags),
        members=members,
        provenance=provenance,
    )


def load_stack(wheels_dir: Path, runtime_lock: Path) -> Stack:
    """The wheels listed in `wheels_dir/manifest.json` (each must exist) plus runtime.lock."""
    manifest = wheels_dir / MANIFEST
    if not manifest.is_file():
        raise SglforgeError(
            f"{manifest}: no manifest: nothing to check",
            hint="build first (nox -s build) or pass --wheels DIR",
        )
    entries = load_manifest(manifest)
    missing = [e["file"] for e in entries if not (wheels_dir / e["file"]).is_file()]
    if missing:
        raise ConfigErrors(manifest, [f"{f}: listed but not in {wheels_dir}" for f in missing])
    wheels = tuple(read_wheel(wheels_dir / e["file"], e.get("recipe")) for e in entries)
    runtime: list[PinnedRequirement] = []
    if runtime_lock.is_file():
        runtime, problems = parse_pinned(read_input_text(runtime_lock))
        if problems:
            raise ConfigErrors(runtime_lock, problems)
    # A generated wheels.lock lists our wheels too: those entries are the wheels themselves
    # (a different version there is a stale lock, reported as a duplicate).
    ours = {(w.name, w.version) for w in wheels}
    runtime = [pin for pin in runtime if (pin.name, pin.version) not in ours]
    return Stack(wheels, tuple(runtime), wheels_dir, runtime_lock)
