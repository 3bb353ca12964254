"""`lockfiles/runtime.lock`: the third-party wheels a serving host needs, hash-pinned.

Two files, both committed:

- `lockfiles/runtime.in`, the resolver's input. Above the marker line it is written by hand
  (what no wheel declares, e.g. the PD router the smoke launches). Below it, `sglforge
  lock-runtime` writes the requirements derived from wheel metadata: every `Requires-Dist`
  of the wheels sglforge builds, evaluated for the toolchain Python on manylinux x86_64
  (with the extras our own wheels request from each other), minus the names sglforge builds,
  plus `torch==<toolchain torch>`. The metadata comes from `wheels/` once built, or from
  METADATA files given with `--metadata` (the pinned upstreams' released wheels standing in).
- `lockfiles/runtime.lock`, the output of `uv pip compile --generate-hashes` for that input,
  with a header saying how to regenerate it and the digest of the input it was made from.

`runtime_lock_is_stale` compares that digest (and the target Python) with the input as it is
now: `nox -s check` calls it.
"""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_text, sha256_file
from sglforge.base.requirements import canonical_name, logical_lines
from sglforge.base.tomlfile import read_input_text
from sglforge.wheel.members import read_member

GENERATED_MARKER = (
    "# ---- generated below by `sglforge lock-runtime` from wheel metadata; "
    "edit above this line ----"
)
# The serving hosts: CPython on glibc x86_64. manylinux_2_28 is the newest tag our wheels and
# torch 2.13 use; a host with glibc >= 2.28 installs the whole set.
PLATFORM = "x86_64-manylinux_2_28"
UV_VERSION = "0.13.9"  # the uv `nox -s lock-runtime` installs (noxfile.py); recorded, not enforced
_INPUT_DIGEST = re.compile(r"^# input-sha256: (?P<hex>[0-9a-f]{64})$", re.MULTILINE)
_PYTHON = re.compile(r"^# python: (?P<version>[0-9.]+)$", re.MULTILINE)


def marker_environment(python: str, machine: str = "x86_64") -> dict[str, str]:
    """PEP 508 marker variables of a serving host: CPython `python` on Linux `machine` (the
    one definition; the stack check's Target uses it too)."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": machine,
        "platform_release": "",
        "platform_version": "",
    }


class UnevaluableMarker(SglforgeError):
    """A requirement's marker packaging parses but cannot evaluate (the message names it)."""


def marker_applies(requirement, environments) -> bool:
    """Whether `requirement`'s marker holds in any of `environments` (True without one).

    A marker can parse and still not evaluate: `python_version ~= "3"` (`~=` needs two
    release segments) raises packaging's UndefinedComparison, a ValueError, only when
    evaluated; that is an `UnevaluableMarker` naming the requirement, never a traceback."""
    if requirement.marker is None:
        return True
    try:
        return any(requirement.marker.evaluate(env) for env in environments)
    except (ValueError, TypeError) as exc:  # UndefinedComparison, UndefinedEnvironmentName
        raise UnevaluableMarker(
            f"Requires-Dist {str(requirement)!r}: the marker cannot be "
            f"evaluated ({type(exc).__name__}: {exc})"
        ) from None


@dataclass(frozen=True)
class Metadata:
    """One wheel's core metadata: where it came from, its name, its Requires-Dist (and its
    Requires-Python, which `publish` copies into the index as `data-requires-python`)."""

    source: str  # a line for the input's header: file name and sha256
    name: str  # canonical
    version: str
    requires: tuple[str, ...]
    requires_python: str | None = None  # as written in METADATA, whitespace collapsed


def metadata_headers(path: Path) -> email.message.Message:
    """The METADATA of a wheel (`*.whl`) or a METADATA file extracted from one, as email
    headers (compat32): the one reader of wheel metadata (publish, lock-runtime, check)."""
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as archive:
                names = [
                    n
                    for n in archive.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
                ]
                if len(names) != 1:
                    raise SglforgeError(
                        f"{path}: expected one <name>.dist-info/METADATA, found {len(names)}"
                    )
                text = read_member(archive, names[0], path, "METADATA").decode("utf-8")
        else:
            text = read_input_text(path)
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError, EOFError) as exc:
        raise SglforgeError(f"{path}: cannot read wheel metadata ({exc})") from None
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text)
    if not message["Name"] or not message["Version"]:
        raise SglforgeError(f"{path}: METADATA lacks Name or Version")
    return message


def read_metadata(path: Path) -> Metadata:
    """Name, version, Requires-Dist and Requires-Python of a wheel (or METADATA file)."""
    message = metadata_headers(path)
    return Metadata(
        source=f"{path.name} sha256={sha256_file(path)}",
        name=canonical_name(message["Name"].strip()),
        version=message["Version"].strip(),
        requires=tuple(r.strip() for r in message.get_all("Requires-Dist") or ()),
        requires_python=" ".join((message["Requires-Python"] or "").split()) or None,
    )


def derive_requirements(
    metadata: list[Metadata], ours: set[str], python: str, torch: str | None = None
) -> list[str]:
    """Third-party requirements of `metadata` for a serving host running CPython `python`.

    Markers are evaluated here (the lock is for one platform); the extras one of our wheels
    requests from another (`flashinfer-python[cu13]`) switch on that wheel's `extra ==`
    requirements. Our own names are left out: the built set provides them. One line per
    distinct requirement, `# <- wheel, ...` naming the wheels that declare it, sorted."""
    from packaging.requirements import InvalidRequirement, Requirement

    env = marker_environment(python)
    names = [m.name for m in metadata]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SglforgeError(f"metadata for {', '.join(twice)} given more than once")
    parsed: dict[str, list[Requirement]] = {}
    problems: list[str] = []
    for meta in metadata:
        parsed[meta.name] = []
        for text in meta.requires:
            try:
                parsed[meta.name].append(Requirement(text))
            except InvalidRequirement as exc:
                problems.append(f"{meta.source}: Requires-Dist {text!r}: {exc}")
    if problems:
        raise SglforgeError("unreadable requirements:\n  " + "\n  ".join(problems))

    source = {meta.name: meta.source for meta in metadata}

    def applies(req: Requirement, extras: set[str], wheel: str) -> bool:
        try:
            return marker_applies(req, [{**env, "extra": e} for e in ("", *sorted(extras))])
        except UnevaluableMarker as exc:
            raise SglforgeError(f"{source[wheel]}: {exc}") from None

    # Extras our wheels request from our wheels, to a fixed point (an extra may request more).
    extras: dict[str, set[str]] = {name: set() for name in parsed}
    changed = True
    while changed:
        changed = False
        for name, reqs in parsed.items():
            for req in reqs:
                target = canonical_name(req.name)
                if (
                    target in extras
                    and applies(req, extras[name], name)
                    and not set(req.extras) <= extras[target]
                ):
                    extras[target] |= set(req.extras)
                    changed = True
    wanted: dict[str, set[str]] = {}
    for name, reqs in parsed.items():
        for req in reqs:
            if canonical_name(req.name) in ours or not applies(req, extras[name], name):
                continue
            req.marker = None
            wanted.setdefault(str(req), set()).add(name)
    if torch:
        wanted.setdefault(f"torch=={torch}", set()).add("toolchain.toml")
    return [
        f"{text}  # <- {', '.join(sorted(by))}"
        for text, by in sorted(
            wanted.items(),
            key=lambda kv: (canonical_name(re.split(r"[\[<>=!~; ]", kv[0], maxsplit=1)[0]), kv[0]),
        )
    ]


def render_input(
    current: str,
    metadata: list[Metadata],
    requirements: list[str],
    python: str,
    note: str | None = None,
) -> str:
    """`current` (the input file's text, or "") with everything below the marker replaced."""
    hand = current.split(GENERATED_MARKER, 1)[0].rstrip("\n") if current else _HAND_DEFAULT
    lines = [
        hand,
        "",
        GENERATED_MARKER,
        f"# Requires-Dist of these wheels for CPython {python} on {PLATFORM}, minus the names",
        "# sglforge builds (recipes/), plus torch from lockfiles/toolchain.toml:",
    ]
    lines += [
        f"#   {m.name} {m.version}: {m.source}" for m in sorted(metadata, key=lambda m: m.name)
    ]
    if note:
        lines += [f"# {line}" for line in note.splitlines()]
    lines += requirements
    return "\n".join(lines) + "\n"


_HAND_DEFAULT = """\
# lockfiles/runtime.in: the input of lockfiles/runtime.lock (uv pip compile).
# Above the marker line: written by hand, requirements no wheel declares.
# Regenerate both files with `nox -s lock-runtime` (docs/serving-host.md, "Runtime lock")."""


def input_digest(text: str) -> str:
    """sha256 of the input's requirements (comments and spacing do not count)."""
    body = "\n".join(line for _, line in logical_lines(text))
    return hashlib.sha256(body.encode()).hexdigest()


def uv_compile_argv(
    uv: str, input_path: Path, output: Path, python: str, ours: set[str]
) -> list[str]:
    """The resolver call; relative paths so the recorded command is the same everywhere."""
    argv = [
        uv,
        "pip",
        "compile",
        str(input_path),
        "--output-file",
        str(output),
        "--generate-hashes",
        "--python-version",
        python,
        "--python-platform",
        PLATFORM,
        "--no-python-downloads",
        "--no-header",
        "--quiet",
    ]
    for name in sorted(ours):
        argv += ["--no-emit-package", name]
    return argv


def render_lock(
    uv_output: str, input_text: str, python: str, command: list[str], uv_version: str
) -> str:
    shown = " ".join(["uv", *command[1:]])
    header = [
        "# lockfiles/runtime.lock: GENERATED by `nox -s lock-runtime` (sglforge lock-runtime);",
        "# do not edit. Change lockfiles/runtime.in (above its marker line) or rebuild the",
        "# wheels, then regenerate with `nox -s lock-runtime` (needs PyPI). `nox -s check` fails",
        "# while this file does not match runtime.in (input-sha256 below).",
        "# Third-party runtime requirements of the serving host, hash-pinned; `nox -s build`",
        "# copies them into lockfiles/wheels.lock after our own wheels.",
        f"# python: {python}",
        f"# platform: {PLATFORM}",
        f"# input-sha256: {input_digest(input_text)}",
        f"# resolver: {uv_version}",
        f"#   {shown}",
        "",
    ]
    return "\n".join(header) + uv_output.lstrip("\n")


def runtime_lock_is_stale(
    lock_path: Path, input_path: Path, python: str | None = None
) -> str | None:
    """Why `lock_path` no longer matches `input_path` (None: it matches).

    Stale when the lock is missing, has no `# input-sha256:` header (hand-written), records a
    different input digest, or was resolved for another Python than `python` (the toolchain's;
    not compared when None). Only requirements count: comment edits in the input do not."""
    if not input_path.exists():
        return f"{input_path} is missing (the input of {lock_path.name})"
    if not lock_path.exists():
        return f"{lock_path} is missing; generate it with `nox -s lock-runtime`"
    lock_text = read_input_text(lock_path)
    recorded = _INPUT_DIGEST.search(lock_text)
    if recorded is None:
        return (
            f"{lock_path} has no '# input-sha256:' header (not made by `sglforge "
            "lock-runtime`); regenerate it with `nox -s lock-runtime`"
        )
    actual = input_digest(read_input_text(input_path))
    if recorded.group("hex") != actual:
        return (
            f"{lock_path} was resolved from another {input_path.name} (input-sha256 "
            f"{recorded.group('hex')[:12]}…, now {actual[:12]}…); regenerate it with "
            "`nox -s lock-runtime`"
        )
    if python is not None:
        found = _PYTHON.search(lock_text)
        if found is None or found.group("version") != python:
            return (
                f"{lock_path} was resolved for Python "
                f"{found.group('version') if found else '(not recorded)'}, the toolchain "
                f"says {python}; regenerate it with `nox -s lock-runtime`"
            )
    return None


def find_uv(explicit: str | None = None) -> str:
    uv = explicit or os.environ.get("SGLFORGE_UV") or shutil.which("uv")
    if not uv:
        raise SglforgeError(
            "uv not found (the resolver runtime.lock is generated with)",
            hint=f"`nox -s lock-runtime` installs it; or `pip install "
            f"uv=={UV_VERSION}`, or pass --uv PATH",
        )
    found = shutil.which(uv)  # a path or a name on PATH; must be runnable
    if found is None:
        raise SglforgeError(
            f"uv: {uv!r} is not an executable file or a command on PATH",
            hint="pass --uv PATH to a uv binary, or put uv on PATH",
        )
    return found


def compile_lock(
    uv: str, input_path: Path, lock_path: Path, python: str, ours: set[str], cwd: Path
) -> str:
    """Run uv, then write `lock_path` (atomically) with the header. Returns the uv version."""
    version = (
        subprocess.run(
            [uv, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        or "uv (version unknown)"
    )
    with tempfile.TemporaryDirectory(prefix="sglforge-lock-") as tmp:
        out = Path(tmp) / "runtime.lock"
        rel_input = os.path.relpath(input_path, cwd)
        argv = uv_compile_argv(uv, Path(rel_input), out, python, ours)
        result = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
            raise SglforgeError(f"uv pip compile failed (exit {result.returncode}):\n{tail}")
        shown = [*argv[:5], os.path.relpath(lock_path, cwd), *argv[6:]]
        text = render_lock(out.read_text(), read_input_text(input_path), python, shown, version)
    atomic_write_text(lock_path, text)
    return version


def input_path(project) -> Path:
    """`lockfiles/runtime.in`, beside the lock it generates."""
    return project.runtime_lock.with_name("runtime.in")


def runtime_input_is_stale(
    input_file: Path,
    metadata: list[Metadata],
    ours: set[str],
    python: str,
    torch: str | None = None,
) -> str | None:
    """Why the generated part of `input_file` differs from what `metadata` (the built wheels)
    derives (None: it matches). With `runtime_lock_is_stale`: wheels -> runtime.in -> lock."""
    text = read_input_text(input_file) if input_file.exists() else ""
    if GENERATED_MARKER not in text:
        return f"{input_file} has no generated part; run `nox -s lock-runtime`"
    have = [line for _, line in logical_lines(text.split(GENERATED_MARKER, 1)[1])]
    want = [
        line.split("  # <- ", 1)[0] for line in derive_requirements(metadata, ours, python, torch)
    ]
    if have == want:
        return None
    added, gone = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    return (
        f"{input_file.name} does not match the wheels' metadata (new: "
        f"{', '.join(added) or '-'}; gone: {', '.join(gone) or '-'}); run "
        "`nox -s lock-runtime`"
    )
