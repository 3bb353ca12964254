"""`lockfiles/toolchain.lock`: the build requirements, hash-pinned, installed so that nothing
can come from anywhere else.

The file is pip's requirements format (`name==version --hash=sha256:...`, one entry per
requirement incl. every transitive dependency) split into sections by comment lines:

    # [build]        toolchain.toml [build-requires] and their dependencies   -> index
    # [torch-deps]   torch's runtime dependencies (nvidia-*, sympy, ...)       -> index
    # [torch]        torch itself, the CUDA variant toolchain.toml pins        -> torch-index

Each section is installed with its own index and nothing else:
`pip install --require-hashes --no-deps --index-url URL -r SECTION` (a local directory of
wheels as the index: `--no-index --find-links DIR`), with pip's configuration files switched
off (PIP_CONFIG_FILE=/dev/null), so an `extra-index-url` in a pip.conf cannot bring in a
different torch. The `torch*` sections are installed only when a selected recipe needs torch
(`requires-torch-abi`, or torch in its build-requires).

Indexes: `index` in toolchain.toml (default https://pypi.org/simple) and `torch-index`;
the environment variables SGLFORGE_INDEX and SGLFORGE_TORCH_INDEX override them (a mirror,
a proxy, a local wheel directory), the hashes still decide what is accepted.

Regenerate (README "Toolchain lock"): `python -m sglforge.build.toolchain_lock` prints the
commands (uv pip compile --generate-hashes per section) for the pins in toolchain.toml.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SECTIONS = ("build", "torch-deps", "torch")
DEFAULT_INDEX = "https://pypi.org/simple"
SECTION_LINE = re.compile(r"^#\s*\[([a-z-]+)\]\s*$")
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


class LockError(ValueError):
    pass


@dataclass(frozen=True)
class LockEntry:
    name: str  # normalized
    version: str
    hashes: tuple[str, ...]
    line: int

    def requirement(self) -> str:
        return f"{self.name}=={self.version} " + " ".join(f"--hash=sha256:{h}"
                                                           for h in self.hashes)


@dataclass
class ToolchainLock:
    path: Path
    sections: dict[str, list[LockEntry]] = field(default_factory=dict)

    def get(self, name: str) -> LockEntry | None:
        key = normalize(name)
        for entries in self.sections.values():
            for entry in entries:
                if entry.name == key:
                    return entry
        return None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(path: Path) -> ToolchainLock:
    """Parse the lock; every entry needs an exact version and at least one sha256."""
    lock = ToolchainLock(path)
    section = None
    problems = []
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = SECTION_LINE.match(raw.strip())
        if match and not pending:
            logical.append((number, raw.strip()))
            continue
        text = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        pending += text
        if pending.strip():
            logical.append((start, pending.strip()))
        pending = ""
    for number, text in logical:
        match = SECTION_LINE.match(text)
        if match:
            section = match.group(1)
            if section not in SECTIONS:
                problems.append(f"line {number}: unknown section [{section}] "
                                f"(expected one of {', '.join(SECTIONS)})")
            lock.sections.setdefault(section, [])
            continue
        entry = ENTRY.match(text)
        hashes = tuple(HASH.findall(text))
        if section is None:
            problems.append(f"line {number}: entry before the first '# [section]' line")
        elif entry is None:
            problems.append(f"line {number}: not an exact `name==version` entry: {text[:60]!r}")
        elif not hashes:
            problems.append(f"line {number}: {entry.group(1)} has no --hash=sha256:...")
        else:
            lock.sections[section].append(LockEntry(normalize(entry.group(1)), entry.group(2),
                                                    hashes, number))
    if problems:
        raise LockError(f"{path}:\n" + "\n".join(f"  {p}" for p in problems))
    return lock


def check_against_pins(lock: ToolchainLock, pins: dict[str, str]) -> list[str]:
    """Pins (toolchain.toml: name -> exact version, torch included) the lock disagrees with."""
    problems = []
    for name, version in sorted(pins.items()):
        entry = lock.get(name)
        if entry is None:
            problems.append(f"{name}=={version}: not in {lock.path.name}")
        elif entry.version != version:
            problems.append(f"{name}: toolchain.toml pins {version}, {lock.path.name} "
                            f"has {entry.version} (line {entry.line})")
    return problems


def index_for(section: str, index: str | None, torch_index: str | None) -> str:
    if section == "torch":
        chosen = os.environ.get("SGLFORGE_TORCH_INDEX") or torch_index
    else:
        chosen = os.environ.get("SGLFORGE_INDEX") or index or DEFAULT_INDEX
    if not chosen:
        raise LockError(f"no index for the [{section}] section: set torch-index in "
                        "lockfiles/toolchain.toml or SGLFORGE_TORCH_INDEX")
    return chosen


def index_args(url: str) -> list[str]:
    """--index-url URL; a local directory of wheels: --no-index --find-links DIR."""
    local = url.removeprefix("file://")
    if "://" not in local and os.path.isdir(local) and not os.path.isdir(
            os.path.join(local, "simple")) and any(n.endswith(".whl") for n in os.listdir(local)):
        return ["--no-index", "--find-links", local]
    return ["--index-url", url]


def install_plan(lock: ToolchainLock, with_torch: bool, index: str | None,
                 torch_index: str | None) -> list[tuple[str, list[str], list[str]]]:
    """(section, pip options, requirement lines) per section to install, in order."""
    plan = []
    for section in SECTIONS:
        if section.startswith("torch") and not with_torch:
            continue
        entries = lock.sections.get(section, [])
        if not entries:
            if section == "torch":
                raise LockError(f"{lock.path}: no [torch] section, but a selected recipe "
                                "needs torch (python -m sglforge.build.toolchain_lock prints "
                                "how to generate it)")
            continue
        url = index_for(section, index, torch_index)
        options = ["--require-hashes", "--no-deps", "--only-binary", ":all:", *index_args(url)]
        plan.append((section, options, [e.requirement() for e in entries]))
    return plan


def pip_env() -> dict[str, str]:
    """Environment for the installs: no pip.conf (no extra index can sneak in)."""
    env = dict(os.environ)
    for var in list(env):
        if var.startswith("PIP_"):
            del env[var]
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


def install_commands(python: str, lock: ToolchainLock, with_torch: bool, index: str | None,
                     torch_index: str | None, workdir: Path) -> list[list[str]]:
    """pip command lines that install the lock's sections into `python`'s environment."""
    commands = []
    workdir.mkdir(parents=True, exist_ok=True)
    for section, options, lines in install_plan(lock, with_torch, index, torch_index):
        requirements = workdir / f"toolchain-{section}.txt"
        requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
        commands.append([python, "-m", "pip", "install", "--progress-bar", "on", *options,
                         "-r", str(requirements)])
    return commands


GENERATE = """\
# regenerate lockfiles/toolchain.lock (uv >= 0.5; python {python}, x86_64 manylinux_2_28):
uv pip compile --no-config --generate-hashes --no-header --no-annotate \\
    --python-version {python} --python-platform x86_64-manylinux_2_28 \\
    --index-url {index} build.in -o build.lock          # build.in: [build-requires] pins
uv pip compile --no-config --generate-hashes --no-header --no-annotate --no-deps \\
    --python-version {python} --python-platform x86_64-manylinux_2_28 \\
    --index-url {torch_index} torch.in -o torch.lock     # torch.in: torch=={torch}
uv pip compile --no-config --generate-hashes --no-header --no-annotate \\
    --python-version {python} --python-platform x86_64-manylinux_2_28 \\
    --index-url {index} torch-deps.in -o torch-deps.lock # torch.in's Requires-Dist (linux)
( echo '# [build]'; cat build.lock; echo '# [torch-deps]'; cat torch-deps.lock
  echo '# [torch]'; cat torch.lock ) > lockfiles/toolchain.lock
"""


def main() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[3]
    data = tomllib.loads((root / "lockfiles" / "toolchain.toml").read_text(encoding="utf-8"))
    print(GENERATE.format(python=data["python"], index=data.get("index", DEFAULT_INDEX),
                          torch_index=data.get("torch-index", "<torch-index>"),
                          torch=data.get("torch", "<torch>")))


if __name__ == "__main__":
    main()
