"""What a build leaves behind: `wheels/*.whl`, `wheels/manifest.json`, `lockfiles/wheels.lock`.

Wheels are copied in (each atomically) only after every wheel of the run succeeded; the
manifest and the lock are then replaced atomically. Entries of wheels not rebuilt in this
run (a partial `build -- NAME`) are kept when their files are still there.

Every value that becomes a file name in wheels/ or a line of wheels.lock is checked first
(`entry_problem`), whatever produced it (a build, a remote cache entry, an old manifest): a
file name is a wheel file name, a name a PEP 508 distribution name, a version a PEP 440
version, a hash 64 hex digits, none with spaces or control characters. A newline in a
version would otherwise be an extra requirement in the lock, and a file name `README.md` a
tracked file overwritten with wheel bytes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import atomic_write_bytes, write_if_changed
from sglforge.base.requirements import canonical_name, parse_pinned
from sglforge.base.tomlfile import read_input_text
from sglforge.inputs.project import Project
from sglforge.inputs.toolchain import Toolchain

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
RUNTIME_MARKER = "# third-party runtime pins"  # in wheels.lock: where our own wheels end


_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508
_VERSION_CHARS = re.compile(r"[A-Za-z0-9.+!_-]+")
_WHEEL_FILE = re.compile(r"[A-Za-z0-9._+!-]+\.whl")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def entry_problem(file: str | None, name: str, version: str, sha256: str) -> str | None:
    """Why these values cannot be a wheel in wheels/ and a line of wheels.lock (None: they
    can; `file` None: not checked, only the lock line); the message shows them with repr,
    so a hidden newline is visible."""
    if file is not None:
        if not isinstance(file, str) or not _WHEEL_FILE.fullmatch(file):
            return f"file {file!r} is not a wheel file name"
        try:
            parse_wheel_filename(file)
        except (InvalidWheelFilename, InvalidVersion):
            return f"file {file!r} is not a valid wheel file name (PEP 427)"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"name {name!r} is not a distribution name"
    if not isinstance(version, str) or not _VERSION_CHARS.fullmatch(version):
        return f"version {version!r} is not a version (characters)"
    try:
        Version(version)
    except InvalidVersion:
        return f"version {version!r} is not a PEP 440 version"
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        return f"sha256 {sha256!r} is not 64 lowercase hex digits"
    return None


def _check_entries(entries: list[dict], where: str, *, files: bool = True) -> None:
    problems = [
        f"{e.get('file', e.get('name'))!r}: {problem}"
        for e in entries
        if (
            problem := entry_problem(
                e["file"] if files else None, e["name"], e["version"], e["sha256"]
            )
        )
    ]
    if problems:
        raise SglforgeError(
            f"{where}: refusing to write wheels/ and wheels.lock:\n  " + "\n  ".join(problems)
        )


def _entry(wheel) -> dict:
    return {
        "file": wheel.path.name,
        "sha256": wheel.sha256,
        "name": wheel.name,
        "version": wheel.version,
        "recipe": wheel.recipe,
        "provenance": wheel.provenance.to_json(),
    }


def write_wheels(out_dir: Path, wheels: list, written: list[Path] | None = None) -> list[dict]:
    """Copy wheels into `out_dir` (atomically each) and write its manifest.json; what was
    actually written (a wheel copied, the manifest changed) is appended to `written`."""
    written = [] if written is None else written
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / MANIFEST
    old = load_manifest(manifest_path)
    new_names = {canonical_name(w.name) for w in wheels}
    kept = [
        e
        for e in old
        if canonical_name(e["name"]) not in new_names and (out_dir / e["file"]).is_file()
    ]
    entries = sorted(kept + [_entry(w) for w in wheels], key=lambda e: canonical_name(e["name"]))
    _check_entries(entries, str(manifest_path))  # before a file in out_dir changes
    for entry in old:
        if canonical_name(entry["name"]) in new_names and entry["file"] not in {
            w.path.name for w in wheels
        }:
            stale = out_dir / entry["file"]
            if stale.is_file():
                os.unlink(stale)
    recorded = {e["file"]: e["sha256"] for e in old}
    for wheel in wheels:
        dest = out_dir / wheel.path.name
        # Already there (a no-op build): the manifest recorded this file with this sha256 and
        # the size agrees; it is not read or copied again. `nox -s smoke` hashes every file.
        if (
            recorded.get(dest.name) == wheel.sha256
            and dest.is_file()
            and dest.stat().st_size == wheel.path.stat().st_size
        ):
            continue
        atomic_write_bytes(dest, wheel.path.read_bytes())
        written.append(dest)
    manifest = {
        "format": MANIFEST_FORMAT,
        "generated_by": "sglforge build (nox -s build); do not edit",
        "wheels": entries,
    }
    if write_if_changed(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n"):
        written.append(manifest_path)
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
        raise SglforgeError(f'{path}: expected {{"wheels": [...]}}', hint=hint)
    problems = [
        f"wheels[{i}]: needs string keys file, sha256, name, version (and recipe)"
        for i, e in enumerate(entries)
        if not isinstance(e, dict)
        or not all(isinstance(e.get(k), str) for k in ("file", "sha256", "name", "version"))
        or not isinstance(e.get("recipe", ""), str)
    ]
    # The build unlinks stale files named here: a path must not reach outside wheels/.
    problems += [
        f"wheels[{i}]: file {e['file']!r} must be a file name, no directories"
        for i, e in enumerate(entries)
        if not problems and (e["file"] in ("", ".", "..") or "/" in e["file"] or "\0" in e["file"])
    ]
    if problems:
        raise ConfigErrors(path, problems)
    return list(entries)


def read_runtime_lock(path: Path, our_names: set[str]) -> list[str]:
    """The requirements of `lockfiles/runtime.lock`, checked: exact `==` pins with a sha256
    hash, and none naming a wheel sglforge builds (that one would be shadowed)."""
    if not path.exists():
        return []
    pins, problems = parse_pinned(read_input_text(path))
    problems += [
        f"line {pin.line}: {pin.name} is built by sglforge (recipes/); remove it here"
        for pin in pins
        if pin.name in our_names
    ]
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
    _check_entries(entries, "lockfiles/wheels.lock", files=False)  # lines: checked here too
    for entry in entries:
        lines.append(
            f"{canonical_name(entry['name'])}=={entry['version']} --hash=sha256:{entry['sha256']}"
        )
    bad = [line for line in runtime if re.search(r"[\x00-\x1f\x7f]", line)]
    if bad:
        raise SglforgeError(f"runtime.lock: a requirement has a control character: {bad[0]!r}")
    if runtime:
        lines.append(f"{RUNTIME_MARKER}, copied from lockfiles/runtime.lock:")
        lines += runtime
    return "\n".join(lines) + "\n"


def publish(
    project: Project, wheels: list, toolchain: Toolchain, written: list[Path] | None = None
) -> list[dict]:
    # Checked before anything is written: a bad runtime.lock must not leave wheels/ half-new.
    runtime = read_runtime_lock(
        project.runtime_lock,
        {canonical_name(e["name"]) for e in load_manifest(project.wheels_dir / MANIFEST)}
        | {canonical_name(w.name) for w in wheels},
    )
    written = [] if written is None else written
    entries = write_wheels(project.wheels_dir, wheels, written)
    if write_if_changed(project.wheels_lock, render_lock(entries, toolchain, runtime)):
        written.append(project.wheels_lock)
    return entries
