"""What a build leaves behind: `wheels/*.whl`, `wheels/manifest.json`, `lockfiles/wheels.lock`.

Wheels are copied in (each atomically) only after every wheel of the run succeeded; the
manifest and the lock are then replaced atomically. Entries of wheels not rebuilt in this
run (a partial `build -- NAME`) are kept when their files are still there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import atomic_write_bytes, write_if_changed
from sglforge.base.requirements import canonical_name, parse_pinned
from sglforge.base.tomlfile import read_input_text
from sglforge.inputs.project import Project
from sglforge.inputs.toolchain import Toolchain

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
RUNTIME_MARKER = "# third-party runtime pins"  # in wheels.lock: where our own wheels end


def _entry(wheel) -> dict:  # noqa: ANN001 - build.BuiltWheel (avoid an import cycle)
    return {"file": wheel.path.name, "sha256": wheel.sha256, "name": wheel.name,
            "version": wheel.version, "recipe": wheel.recipe,
            "provenance": wheel.provenance.to_json()}


def write_wheels(out_dir: Path, wheels: list) -> list[dict]:
    """Copy wheels into `out_dir` (atomically each) and write its manifest.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / MANIFEST
    old = load_manifest(manifest_path)
    new_names = {canonical_name(w.name) for w in wheels}
    kept = [e for e in old if canonical_name(e["name"]) not in new_names
            and (out_dir / e["file"]).is_file()]
    for entry in old:
        if canonical_name(entry["name"]) in new_names and entry["file"] not in {
                w.path.name for w in wheels}:
            stale = out_dir / entry["file"]
            if stale.is_file():
                os.unlink(stale)
    recorded = {e["file"]: e["sha256"] for e in old}
    for wheel in wheels:
        dest = out_dir / wheel.path.name
        # Already there (a no-op build): the manifest recorded this file with this sha256 and
        # the size agrees; it is not read or copied again. `nox -s smoke` hashes every file.
        if recorded.get(dest.name) == wheel.sha256 and dest.is_file() \
                and dest.stat().st_size == wheel.path.stat().st_size:
            continue
        atomic_write_bytes(dest, wheel.path.read_bytes())
    entries = sorted(kept + [_entry(w) for w in wheels], key=lambda e: canonical_name(e["name"]))
    manifest = {"format": MANIFEST_FORMAT,
                "generated_by": "sglforge build (nox -s build); do not edit",
                "wheels": entries}
    write_if_changed(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return entries


def load_manifest(path: Path) -> list[dict]:
    """The entries of a manifest (none when there is no file); a corrupt one is an error."""
    if not path.exists():
        return []
    hint = "the build writes this file; restore it from git or delete it and rebuild"
    try:
        data = json.loads(read_input_text(path))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
        raise SglforgeError(f"{path}: invalid JSON: {str(exc).split(';')[0]}", hint=hint) from None
    entries = data.get("wheels") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise SglforgeError(f"{path}: expected {{\"wheels\": [...]}}", hint=hint)
    problems = [f"wheels[{i}]: needs string keys file, sha256, name, version (and recipe)"
                for i, e in enumerate(entries)
                if not isinstance(e, dict)
                or not all(isinstance(e.get(k), str) for k in ("file", "sha256", "name", "version"))
                or not isinstance(e.get("recipe", ""), str)]
    # The build unlinks stale files named here: a path must not reach outside wheels/.
    problems += [f"wheels[{i}]: file {e['file']!r} must be a file name, no directories"
                 for i, e in enumerate(entries) if not problems
                 and (e["file"] in ("", ".", "..") or "/" in e["file"] or "\0" in e["file"])]
    if problems:
        raise ConfigErrors(path, problems)
    return list(entries)


def read_runtime_lock(path: Path, our_names: set[str]) -> list[str]:
    """The requirements of `lockfiles/runtime.lock`, checked: exact `==` pins with a sha256
    hash, and none naming a wheel sglforge builds (that one would be shadowed)."""
    if not path.exists():
        return []
    pins, problems = parse_pinned(read_input_text(path))
    problems += [f"line {pin.line}: {pin.name} is built by sglforge (recipes/); remove it here"
                 for pin in pins if pin.name in our_names]
    if problems:
        raise ConfigErrors(path, problems)
    return [pin.text for pin in pins]


def render_lock(entries: list[dict], toolchain: Toolchain, runtime: list[str] = ()) -> str:
    torch = f", torch {toolchain.torch}" if toolchain.torch else ""
    lines = [
        "# lockfiles/wheels.lock: GENERATED by `nox -s build` (sglforge build) from",
        "# wheels/manifest.json; do not edit. Regenerate with `nox -s build` (rebuilds only",
        "# wheels whose content key changed). Install on a serving host, offline, every file",
        "# hash-checked:",
        "#   pip install --require-hashes --no-index --find-links wheels/ -r lockfiles/wheels.lock",
        f"# toolchain: CUDA {toolchain.cuda}, python {toolchain.python}{torch}",
    ]
    for entry in entries:
        lines.append(f"{canonical_name(entry['name'])}=={entry['version']} "
                     f"--hash=sha256:{entry['sha256']}")
    if runtime:
        lines.append(f"{RUNTIME_MARKER}, copied from lockfiles/runtime.lock:")
        lines += runtime
    return "\n".join(lines) + "\n"


def publish(project: Project, wheels: list, toolchain: Toolchain) -> list[dict]:
    # Checked before anything is written: a bad runtime.lock must not leave wheels/ half-new.
    runtime = read_runtime_lock(project.runtime_lock,
                                {canonical_name(e["name"]) for e in load_manifest(
                                    project.wheels_dir / MANIFEST)} | {canonical_name(w.name)
                                                                       for w in wheels})
    entries = write_wheels(project.wheels_dir, wheels)
    write_if_changed(project.wheels_lock, render_lock(entries, toolchain, runtime))
    return entries
