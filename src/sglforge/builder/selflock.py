"""`lockfiles/sglforge.lock`: sglforge's own runtime dependencies, hash-pinned, for the
toolchain venv (issue 32, item 4).

The toolchain venv runs sglforge itself (`build`, `verify`, `plan --matrix`, the demo), so
what sglforge imports there is as much a build input as the build tools. It comes in the
same way as lockfiles/toolchain.lock: `pip install --require-hashes --no-deps --only-binary
:all:` from the toolchain index with pip's configuration off (`toolchain_lock.pip_env`);
then sglforge itself from the checkout with `--no-deps --no-build-isolation --no-index`, so
its build backend is the hash-pinned setuptools of toolchain.lock [build] and nothing is
fetched for it. Before anything is installed, every `[project] dependencies` entry of
pyproject.toml that applies on the toolchain Python must be pinned here at a version it
accepts, and a name both locks pin must have one version.

cyclonedx-python-lib writes the SBOM in every wheel and names itself there, so changing its
pin changes every wheel's bytes: bump BUILD_FORMAT (builder/key.py) with it and rebuild the
wheels of record (tests/test_records.py holds this lock's digest).

Regenerate (the header of the file says the same): for each dependency,
`pip download NAME==VERSION --no-deps --only-binary :all: -d DIR && pip hash DIR/*.whl`.
"""

from __future__ import annotations

import re
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import TEXT_INPUT_CAP
from sglforge.base.requirements import PinnedRequirement, canonical_name, parse_pinned
from sglforge.base.tomlfile import load_toml, read_input_text

LOCK = "sglforge.lock"


def parse_self_lock(path: Path) -> list[PinnedRequirement]:
    """The pins of `path`; a missing file or an entry without an exact version and a sha256
    is an error naming the file and line."""
    if not path.is_file():
        raise SglforgeError(
            f"{path} does not exist: sglforge's own dependencies are installed only from it",
            hint="restore it from git (`git checkout -- lockfiles/sglforge.lock`)",
        )
    pins, problems = parse_pinned(read_input_text(path, TEXT_INPUT_CAP, "sglforge lock"))
    if problems:
        raise SglforgeError(f"{path}:\n" + "\n".join(f"  {p}" for p in problems))
    return pins


def _requirements(pyproject: Path) -> list[str]:
    """[project] dependencies and [build-system] requires: what installing sglforge from the
    checkout without build isolation needs in the venv."""
    data, _ = load_toml(pyproject)
    found = []
    for table, key in (("project", "dependencies"), ("build-system", "requires")):
        entries = data.get(table, {}).get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise SglforgeError(f"{pyproject}: [{table}] {key} must be a list of strings")
        found += entries
    return found


def lock_problems(root: Path, python: str, toolchain_pins: dict[str, str]) -> list[str]:
    """What is wrong with `root`/lockfiles/sglforge.lock (`root`: the sglforge checkout) for
    the toolchain Python `python` (X.Y): a requirement of pyproject.toml unpinned or pinned
    outside its specifier, a pin nothing requires, a version that differs from
    toolchain.lock's (`toolchain_pins`: name -> version). Empty: it fits."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import Version

    lock = root / "lockfiles" / LOCK
    pins = {p.name: p for p in parse_self_lock(lock)}
    env = {"python_version": python, "python_full_version": f"{python}.0"}
    problems, wanted = [], set()
    for text in _requirements(root / "pyproject.toml"):
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            problems.append(f"pyproject.toml: dependency {text!r}: {exc}")
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonical_name(req.name)
        wanted.add(name)
        pin = pins.get(name)
        if pin is None:
            problems.append(f"{name}: a dependency of sglforge ({text!r}), not in {LOCK}")
        elif not req.specifier.contains(Version(pin.version), prereleases=True):
            problems.append(f"{name}: {LOCK} line {pin.line} pins {pin.version}, outside {text!r}")
    via = via_comments(read_input_text(lock, TEXT_INPUT_CAP, "sglforge lock"), pins)
    needed = set(wanted)
    while True:  # a `# via` pin is needed when what it is there for is
        more = {name for name, parents in via.items() if parents & needed} - needed
        if not more:
            break
        needed |= more
    for name in sorted(set(pins) - needed):
        why = (
            f"its `# via {', '.join(sorted(via[name]))}` names nothing sglforge needs"
            if via.get(name)
            else "no dependency of pyproject.toml names it and it has no `# via NAME` line"
        )
        problems.append(
            f"{name}: {LOCK} line {pins[name].line} pins what sglforge does not need ({why})"
        )
    for name, pin in sorted(pins.items()):
        other = toolchain_pins.get(name)
        if other is not None and other != pin.version:
            problems.append(
                f"{name}: {LOCK} pins {pin.version}, toolchain.lock {other} (one venv, one version)"
            )
    return problems


def via_comments(text: str, pins: dict[str, PinnedRequirement]) -> dict[str, set[str]]:
    """Pin name -> the names its `# via A, B` comment lines (after its hashes, before the next
    pin) say it is a dependency of, as pip-compile writes them; "(marker)" tails ignored."""
    by_line = {p.line: name for name, p in pins.items()}
    out: dict[str, set[str]] = {}
    current = None
    for number, raw in enumerate(text.splitlines(), 1):
        if number in by_line:
            current = by_line[number]
            continue
        match = re.match(r"\s*#\s*via\s+(.+)$", raw)
        if match and current is not None:
            names = re.sub(r"\(.*?\)", "", match.group(1))
            out.setdefault(current, set()).update(
                canonical_name(n) for n in re.split(r"[,\s]+", names) if n
            )
        elif raw.strip() and not raw.lstrip().startswith(("#", "--")):
            current = None
    return out


def install_commands(
    python: str, root: Path, index_args: list[str], workdir: Path
) -> list[list[str]]:
    """The pip command lines: the lock's pins (hash-checked), then sglforge from `root` (the
    checkout) with what they installed."""
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [p.render() for p in parse_self_lock(root / "lockfiles" / LOCK)]
    requirements = workdir / "sglforge-deps.txt"
    requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pip = [python, "-m", "pip", "install", "--quiet"]
    return [
        [*pip, "--require-hashes", "--no-deps", "--only-binary", ":all:", *index_args]
        + ["-r", str(requirements)],
        [*pip, "--no-deps", "--no-build-isolation", "--no-index", str(root)],
    ]
