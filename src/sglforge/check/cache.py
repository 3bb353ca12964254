"""The stack check's result, reused by a build that changed nothing the check reads.

`sglforge build` ends with the stack check (tens of seconds on the real stack: it parses
SGLang's ~2,000 Python files). A no-op build publishes the same wheel set, so the check would
repeat itself; its last result is kept in `<build-root>/check-result.json`, keyed by a digest
of everything the check reads: the files under `lockfiles/` (pins, toolchain, runtime lock and
its input, waivers) and `recipes/`, `wheels/manifest.json` (each wheel's sha256), each listed
wheel's stat stamp (size, mtime_ns, ctime_ns, inode: a rewritten file is a new stamp), and
sglforge's own source. Any difference runs the check again. `sglforge check` never uses it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sglforge
from sglforge.base.fs import atomic_write_text

FORMAT = 1


def _files(directory: Path, pattern: str) -> list[Path]:
    return sorted(p for p in directory.rglob(pattern) if p.is_file()) if directory.is_dir() else []


def inputs_digest(project) -> str:
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label} {len(data)}\n".encode())
        digest.update(data)

    for path in _files(project.root / "lockfiles", "*") + _files(project.recipes_dir, "*"):
        if path.resolve() != project.wheels_lock.resolve():  # written by the build itself
            add(str(path.relative_to(project.root)), path.read_bytes())
    manifest = project.wheels_dir / "manifest.json"
    data = manifest.read_bytes() if manifest.is_file() else b""
    add("manifest", data)
    for wheel in sorted(project.wheels_dir.glob("*.whl")):
        st = wheel.stat()
        add(
            f"wheel {wheel.name}",
            f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}".encode(),
        )
    package = Path(sglforge.__file__).parent
    for path in _files(package, "*.py"):
        add(f"sglforge {path.relative_to(package)}", path.read_bytes())
    return digest.hexdigest()


def lookup(path: Path, key: str) -> tuple[bool, str] | None:
    """(ok, rendered report) of the last check with these inputs, or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("key") != key
        or not isinstance(data.get("ok"), bool)
        or not isinstance(data.get("report"), str)
    ):
        return None
    return data["ok"], data["report"]


def store(path: Path, key: str, ok: bool, report: str) -> None:
    try:
        atomic_write_text(
            path,
            json.dumps({"format": FORMAT, "key": key, "ok": ok, "report": report}, indent=1) + "\n",
        )
    except OSError:
        pass  # a read-only build root costs the next build one check
