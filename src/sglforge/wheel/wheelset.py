"""The wheel set the smoke installs: `wheels/manifest.json` checked against
`lockfiles/wheels.lock` and against the files themselves.

The build writes both (see DESIGN "Wheel post-process"); this module only reads them. The
smoke refuses to run when they disagree: a smoke result must describe exactly the wheels
that would ship. Provenance (`<dist-info>/sglforge-build.json`, `wheel.provenance`) is read
from inside each wheel, the authority, and must equal the manifest's copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import sha256_file
from sglforge.base.requirements import PinnedRequirement, canonical_name, parse_pinned
from sglforge.base.tomlfile import read_input_text
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance, dev_build_problem, read_json


@dataclass(frozen=True)
class Wheel:
    file: Path
    name: str  # normalized
    version: str
    sha256: str
    provenance: Provenance


@dataclass(frozen=True)
class WheelSet:
    wheels: tuple[Wheel, ...]  # ours, built by sglforge
    lock: tuple[PinnedRequirement, ...]  # ours + third-party pins
    lock_path: Path
    wheels_dir: Path

    @property
    def third_party(self) -> tuple[PinnedRequirement, ...]:
        ours = {w.name for w in self.wheels}
        return tuple(e for e in self.lock if e.name not in ours)

    def archs(self) -> set[str]:
        return {a for w in self.wheels for a in w.provenance.cuda_archs}

    def torch_requirements(self) -> dict[str, str]:
        """Wheel name → exact torch version it is ABI-bound to."""
        return {
            w.name: w.provenance.requires_torch for w in self.wheels if w.provenance.requires_torch
        }

    def versions(self) -> dict[str, dict[str, Any]]:
        """For the report: what exactly was smoke-tested."""
        return {
            w.name: {
                "version": w.version,
                "file": w.file.name,
                "sha256": w.sha256,
                "upstream": w.provenance.upstream,
                "commit": w.provenance.commit,
                "cuda_archs": list(w.provenance.cuda_archs),
                "requires_torch": w.provenance.requires_torch,
                "toolchain": w.provenance.toolchain,
            }
            for w in self.wheels
        }


def parse_lock(path: Path) -> tuple[PinnedRequirement, ...]:
    """Parse a hash-pinned requirements file (`name==version --hash=sha256:...`, `\\` joins)."""
    if not path.exists():
        raise SglforgeError(
            f"{path}: file not found", hint="build the wheels first (`nox -s build`) or pass --lock"
        )
    text = read_input_text(path)
    pins, problems = parse_pinned(text)
    if problems:
        raise ConfigErrors(path, problems)
    return tuple(pins)


def load_wheelset(wheels_dir: Path, lock_path: Path) -> WheelSet:
    """Read and cross-check manifest, lock and wheel files; any disagreement is an error."""
    manifest_path = wheels_dir / "manifest.json"
    if not manifest_path.exists():
        raise SglforgeError(
            f"{manifest_path}: file not found", hint="build the wheels first (`nox -s build`)"
        )
    try:
        manifest = json.loads(read_input_text(manifest_path))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
        raise SglforgeError(f"{manifest_path}: invalid JSON: {str(exc).split(';')[0]}") from None
    lock = parse_lock(lock_path)
    by_name = {e.name: e for e in lock}
    problems: list[str] = []
    entries = manifest.get("wheels") if isinstance(manifest, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SglforgeError(
            f'{manifest_path}: expected {{"wheels": [...]}} with at least one wheel'
        )
    wheels: list[Wheel] = []
    for index, entry in enumerate(entries):
        where = f"wheels[{index}]"
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) for k in ("file", "sha256", "name", "version")
        ):
            problems.append(f"{where}: needs string keys file, sha256, name, version")
            continue
        where = f"wheels[{index}] ({entry['file']})"
        if entry["file"] in ("", ".", "..") or "/" in entry["file"] or "\0" in entry["file"]:
            problems.append(f"{where}: 'file' must be a file name in {wheels_dir}, no directories")
            continue
        name, version = canonical_name(entry["name"]), entry["version"]
        path = wheels_dir / entry["file"]
        if not path.is_file():
            problems.append(f"{where}: file {path} is missing")
            continue
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            problems.append(
                f"{where}: sha256 of the file is {actual}, manifest says "
                f"{entry['sha256']} (wheel changed after the build)"
            )
            continue
        pinned = by_name.get(name)
        if pinned is None:
            problems.append(f"{where}: {name} is not in {lock_path}")
        elif pinned.version != version:
            problems.append(
                f"{where}: manifest has {name} {version}, {lock_path.name} line "
                f"{pinned.line} pins {pinned.version}"
            )
        elif actual not in pinned.hashes:
            problems.append(
                f"{where}: sha256 {actual} is not among the hashes "
                f"{lock_path.name} line {pinned.line} allows for {name}"
            )
        try:
            inside = read_json(path)
        except SglforgeError as exc:
            problems.append(f"{where}: {exc.args[0]}")
            continue
        if "provenance" in entry and entry["provenance"] != inside:
            problems.append(
                f"{where}: manifest provenance differs from the wheel's {PROVENANCE_FILE}"
            )
        try:
            stamped = Provenance.from_json(inside, where)
        except SglforgeError as exc:
            problems.append(exc.args[0])
            continue
        if dev := dev_build_problem(stamped, where):
            problems.append(dev)
            continue
        wheels.append(
            Wheel(file=path, name=name, version=version, sha256=actual, provenance=stamped)
        )
    if problems:
        raise ConfigErrors(
            manifest_path,
            problems
            + [
                (
                    f"the manifest and {lock_path} must describe the same wheels; rebuild with "
                    "`nox -s build` (it writes both)"
                )
            ],
        )
    return WheelSet(wheels=tuple(wheels), lock=lock, lock_path=lock_path, wheels_dir=wheels_dir)


def refuse_local_only(wheels: Any, verb: str) -> None:
    """A wheel built with [substitutes] never leaves the host (sources/substitute.py)."""
    from sglforge.sources.substitute import substitute_problem

    problems = [
        p for w in wheels if (p := substitute_problem(w.provenance.substitutes, str(w.file)))
    ]
    if problems:
        raise SglforgeError(
            f"{verb}: refused: " + "; ".join(problems),
            hint="remove the [substitutes] from the user config once the "
            "pinned sources can be fetched, and rebuild",
        )
