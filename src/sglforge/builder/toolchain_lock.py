"""`lockfiles/toolchain.lock`: the build requirements, hash-pinned, installed so that nothing
can come from anywhere else.

The file is pip's requirements format (`name==version --hash=sha256:...`, one entry per
requirement incl. every transitive dependency) split into sections by comment lines:

    # [build]        toolchain.toml [build-requires] and their dependencies   -> index
    # [torch-deps]   torch's dependencies not already in [build]              -> index
                     (nvidia-*, cuda-toolkit, triton, sympy, ...), resolved
                     with [build]'s versions as constraints
    # [torch]        torch itself, the CUDA variant toolchain.toml pins        -> torch-index

Each section is installed with its own index and nothing else:
`pip install --require-hashes --no-deps --index-url URL -r SECTION` (a local directory of
wheels as the index: `--no-index --find-links DIR`), with pip's configuration files switched
off (PIP_CONFIG_FILE=/dev/null), so an `extra-index-url` in a pip.conf cannot bring in a
different torch. The `torch*` sections are installed only when a selected recipe needs torch
(`requires-torch-abi`, or torch in its build-requires).

Indexes: `index` in toolchain.toml (default https://pypi.org/simple) and `torch-index`
(default PyPI too: PyPI's Linux x86_64 torch 2.13.0 is the CUDA 13.0 build; the option
https://download.pytorch.org/whl/cu130 serves a wheel with other bytes, so switching means
regenerating [torch]); the environment variables SGLFORGE_INDEX and SGLFORGE_TORCH_INDEX
override them (a mirror, a proxy, a local wheel directory), the hashes still decide what is
accepted.

torch's version in the lock: PyPI cannot host local versions, so its cu130 torch is
`torch==2.13.0` (distribution version without `+cu130`); the cu130 index's is
`torch==2.13.0+cu130`. Both match the toolchain.toml pin `2.13.0+cu130` here
(`check_against_pins`); the variant itself is checked on the installed files before a build
(inputs/toolchain.py reads torch/version.py).

Regenerate (docs/reference.md, "Toolchain lock"): `python -m sglforge.builder.toolchain_lock` prints the
commands (uv pip compile --generate-hashes, then `... assemble` writes the file) for the pins
in toolchain.toml; `... constraints` prints the [build] pins the torch resolution must keep.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import TEXT_INPUT_CAP
from sglforge.base.requirements import (
    PinnedRequirement,
    canonical_name,
    logical_lines,
    parse_pinned,
)
from sglforge.base.tomlfile import read_input_text

SECTIONS = ("build", "torch-deps", "torch")
DEFAULT_INDEX = "https://pypi.org/simple"
SECTION_LINE = re.compile(r"^#\s*\[([a-z-]+)\]\s*$")
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


class LockError(ValueError):
    pass


@dataclass
class ToolchainLock:
    path: Path
    sections: dict[str, list[PinnedRequirement]] = field(default_factory=dict)

    def get(self, name: str) -> PinnedRequirement | None:
        key = canonical_name(name)
        for entries in self.sections.values():
            for entry in entries:
                if entry.name == key:
                    return entry
        return None


def parse_lock(path: Path) -> ToolchainLock:
    """Parse the lock; every entry needs an exact version and at least one sha256. The
    entries of each section are read by the one parser of hash-pinned requirement files
    (base/requirements.py), line numbers kept."""
    lock = ToolchainLock(path)
    lines = read_input_text(path, TEXT_INPUT_CAP, "toolchain lock").splitlines()
    problems: list[str] = []
    section_of: list[str | None] = []
    section: str | None = None
    for number, raw in enumerate(lines, 1):
        match = SECTION_LINE.match(raw.strip())
        if match:
            section = match.group(1)
            if section not in SECTIONS:
                problems.append(
                    f"line {number}: unknown section [{section}] "
                    f"(expected one of {', '.join(SECTIONS)})"
                )
            lock.sections.setdefault(section, [])
        section_of.append(section)
    for name in dict.fromkeys(section_of):
        text = "\n".join(raw if of == name else "" for raw, of in zip(lines, section_of))
        pins, found = parse_pinned(text)
        if name is None:
            problems += [
                f"line {number}: entry before the first '# [section]' line"
                for number, _ in logical_lines(text)
            ]
            continue
        problems += found
        lock.sections[name] = pins
    if problems:
        problems.sort(key=lambda p: int(p.split(":", 1)[0].split()[1]))
        raise LockError(f"{path}:\n" + "\n".join(f"  {p}" for p in problems))
    return lock


def public(version: str) -> str:
    """`2.13.0` for `2.13.0+cu130`."""
    return version.split("+", 1)[0]


def check_against_pins(lock: ToolchainLock, pins: dict[str, str]) -> list[str]:
    """Pins (toolchain.toml: name -> exact version, torch included) the lock disagrees with.

    torch pinned `2.13.0+cu130` may be locked as `2.13.0`: PyPI's distribution version of its
    cu130 build (PyPI hosts no local versions); the installed variant is checked before the
    build (inputs/toolchain.py)."""
    problems = []
    for name, version in sorted(pins.items()):
        entry = lock.get(name)
        if entry is None:
            problems.append(f"{name}=={version}: not in {lock.path.name}")
        elif canonical_name(name) == "torch" and entry.version == public(version):
            continue
        elif entry.version != version:
            problems.append(
                f"{name}: toolchain.toml pins {version}, {lock.path.name} "
                f"has {entry.version} (line {entry.line})"
            )
    return problems


def index_for(section: str, index: str | None, torch_index: str | None) -> str:
    if section == "torch":
        # the offline route's one setting: a local directory in SGLFORGE_INDEX holds torch too
        local = _local_index(os.environ.get("SGLFORGE_INDEX", ""))
        chosen = os.environ.get("SGLFORGE_TORCH_INDEX") or local or torch_index or DEFAULT_INDEX
    else:
        chosen = os.environ.get("SGLFORGE_INDEX") or index or DEFAULT_INDEX
    return chosen


def check_index_settings() -> list[str]:
    """SGLFORGE_INDEX / SGLFORGE_TORCH_INDEX that name a local path must name a directory
    (of wheels: the offline route); otherwise pip would be handed a path it reads as a URL."""
    problems = []
    for var in ("SGLFORGE_INDEX", "SGLFORGE_TORCH_INDEX"):
        chosen = os.environ.get(var, "")
        local = chosen.removeprefix("file://")
        if not chosen or "://" in local:
            continue
        if not os.path.isdir(local):
            problems.append(f"{var}={chosen}: not a directory (`nox -s wheelhouse -- DIR`)")
    return problems


def _local_index(url: str) -> str | None:
    """`url` when it names a local directory (a path or file://), else None."""
    local = url.removeprefix("file://")
    return url if local and "://" not in local and os.path.isdir(local) else None


def index_args(url: str) -> list[str]:
    """--index-url URL; a local directory of wheels: --no-index --find-links DIR."""
    local = url.removeprefix("file://")
    if (
        "://" not in local
        and os.path.isdir(local)
        and not os.path.isdir(os.path.join(local, "simple"))
        and any(n.endswith(".whl") for n in os.listdir(local))
    ):
        return ["--no-index", "--find-links", local]
    return ["--index-url", url]


def install_plan(
    lock: ToolchainLock, with_torch: bool, index: str | None, torch_index: str | None
) -> list[tuple[str, list[str], list[str]]]:
    """(section, pip options, requirement lines) per section to install, in order."""
    plan = []
    for section in SECTIONS:
        if section.startswith("torch") and not with_torch:
            continue
        entries = lock.sections.get(section, [])
        if not entries:
            if section == "torch":
                raise LockError(
                    f"{lock.path}: no [torch] section, but a selected recipe "
                    "needs torch (python -m sglforge.builder.toolchain_lock prints "
                    "how to generate it)"
                )
            continue
        url = index_for(section, index, torch_index)
        options = ["--require-hashes", "--no-deps", "--only-binary", ":all:", *index_args(url)]
        plan.append((section, options, [e.render() for e in entries]))
    return plan


def pip_env() -> dict[str, str]:
    """Environment for the installs: no pip.conf (no extra index can sneak in)."""
    env = dict(os.environ)
    for var in list(env):
        if var.startswith("PIP_"):
            del env[var]
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


def install_commands(
    python: str,
    lock: ToolchainLock,
    with_torch: bool,
    index: str | None,
    torch_index: str | None,
    workdir: Path,
) -> list[list[str]]:
    """pip command lines that install the lock's sections into `python`'s environment."""
    commands = []
    workdir.mkdir(parents=True, exist_ok=True)
    for section, options, lines in install_plan(lock, with_torch, index, torch_index):
        requirements = workdir / f"toolchain-{section}.txt"
        requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
        commands.append(
            [
                python,
                "-m",
                "pip",
                "install",
                "--progress-bar",
                "on",
                *options,
                "-r",
                str(requirements),
            ]
        )
    return commands


GENERATE = """\
# regenerate lockfiles/toolchain.lock (uv 0.13.9; python {python}, x86_64 manylinux_2_28):
COMPILE="uv pip compile --no-config --generate-hashes --no-header --no-annotate
    --python-version {python} --python-platform x86_64-manylinux_2_28"
$COMPILE --index-url {index} build.in -o build.lock    # build.in: [build-requires] pins
python -m sglforge.builder.toolchain_lock constraints build.lock > build-constraints.txt
echo 'torch=={torch_public}' > torch.in      # torch and its dependencies, [build] kept as is:
$COMPILE --index-url {index} --constraint build-constraints.txt torch.in -o torch.lock
{variant}python -m sglforge.builder.toolchain_lock assemble build.lock torch.lock{variant_arg} \\
    > toolchain.lock && mv toolchain.lock lockfiles/toolchain.lock
# to keep the committed [build] section: skip the first compile and pass
# lockfiles/toolchain.lock where build.lock stands (both subcommands read its [build])
"""

VARIANT = """\
echo 'torch=={torch}' > torch-variant.in   # torch-index differs: torch itself from there
$COMPILE --index-url {torch_index} --no-deps torch-variant.in -o torch-variant.lock
"""


def _blocks(text: str) -> list[tuple[str, str]]:
    """(normalized name, entry text with its continuation lines) of a uv/pip lock output;
    '# [section]' lines and other comments are dropped."""
    blocks: list[tuple[str, str]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[0].isspace() and blocks:
            name, body = blocks[-1]
            blocks[-1] = (name, body + "\n" + raw.rstrip())
            continue
        match = ENTRY.match(raw)
        if match is None:
            raise LockError(f"not an exact `name==version` entry: {raw[:60]!r}")
        blocks.append((canonical_name(match.group(1)), raw.rstrip()))
    return blocks


def _build_blocks(text: str) -> list[tuple[str, str]]:
    """The [build] section of a toolchain.lock, or all of a plain uv output."""
    if not any(SECTION_LINE.match(line.strip()) for line in text.splitlines()):
        return _blocks(text)
    kept, section = [], None
    for line in text.splitlines():
        match = SECTION_LINE.match(line.strip())
        if match:
            section = match.group(1)
        elif section == "build":
            kept.append(line)
    return _blocks("\n".join(kept))


def constraints(build_text: str) -> str:
    """`name==version` per [build] entry: what the torch resolution must not move."""
    return "".join(ENTRY.match(body).group(0) + "\n" for _, body in _build_blocks(build_text))


HEADER = """\
# lockfiles/toolchain.lock: every build requirement, hash-pinned (format and install rules:
# src/sglforge/builder/toolchain_lock.py). Installed section by section with
# `pip install --require-hashes --no-deps --only-binary :all: --index-url <index>` and no
# pip.conf. Generated with uv {uv} for python {python}, x86_64-manylinux_2_28:
# `python -m sglforge.builder.toolchain_lock` prints the commands (uv pip compile
# --generate-hashes; [torch-deps] resolved with [build]'s versions as constraints), then
# `python -m sglforge.builder.toolchain_lock assemble` writes this file.
# Sections build and torch-deps: {index}
# Section torch: torch=={torch_locked} from {torch_index}
# (toolchain.toml pins {torch}{variant_note}).
"""

VARIANT_NOTE = (
    "; PyPI hosts no local labels: the build checks the variant\n"
    "# in the installed torch/version.py"
)


def assemble(
    build_text: str, torch_text: str, variant_text: str | None, toolchain: dict, uv: str = "0.13.9"
) -> str:
    """The lock file from uv outputs: [build], torch's dependencies minus [build] as
    [torch-deps], torch (from `variant_text` when given: another torch index) as [torch]."""
    build = _build_blocks(build_text)
    names = {name for name, _ in build}
    resolved = _blocks(torch_text)
    torch = [body for name, body in _blocks(variant_text or torch_text) if name == "torch"]
    if len(torch) != 1:
        raise LockError("expected exactly one torch entry in the torch resolution")
    deps = [body for name, body in resolved if name != "torch" and name not in names]
    locked = ENTRY.match(torch[0]).group(2)
    pin = toolchain.get("torch", "")
    note = VARIANT_NOTE if locked != pin else ""
    header = HEADER.format(
        uv=uv,
        python=toolchain["python"],
        index=toolchain.get("index", DEFAULT_INDEX),
        torch_index=toolchain.get("torch-index", DEFAULT_INDEX),
        torch=pin,
        torch_locked=locked,
        variant_note=note,
    )
    sections = [("build", [b for _, b in build]), ("torch-deps", deps), ("torch", torch)]
    return header + "".join(
        f"# [{name}]\n" + "".join(b + "\n" for b in bodies) for name, bodies in sections
    )


def main(argv: list[str] | None = None) -> None:
    try:
        _main(sys.argv[1:] if argv is None else argv)
    except (LockError, OSError, SglforgeError) as exc:  # maintenance: a message, no traceback
        sys.exit(f"error: {exc}")


def _main(args: list[str]) -> None:
    from sglforge.base.tomlfile import load_toml

    root = Path(__file__).resolve().parents[3]
    data, _ = load_toml(root / "lockfiles" / "toolchain.toml")
    if args[:1] == ["constraints"] and len(args) == 2:
        sys.stdout.write(constraints(Path(args[1]).read_text(encoding="utf-8")))
        return
    if args[:1] == ["assemble"] and len(args) in (3, 4):
        texts = [Path(a).read_text(encoding="utf-8") for a in args[1:]]
        sys.stdout.write(assemble(texts[0], texts[1], texts[2] if len(texts) == 3 else None, data))
        return
    if args:
        sys.exit(
            "usage: python -m sglforge.builder.toolchain_lock "
            "[constraints BUILD.lock | assemble BUILD.lock TORCH.lock [TORCH-VARIANT.lock]]"
        )
    index = data.get("index", DEFAULT_INDEX)
    torch_index = data.get("torch-index", DEFAULT_INDEX)
    torch = data.get("torch", "<torch>")
    other = torch_index.rstrip("/") != index.rstrip("/")
    print(
        GENERATE.format(
            python=data["python"],
            index=index,
            torch_public=public(torch),
            variant=VARIANT.format(torch=torch, torch_index=torch_index) if other else "",
            variant_arg=" torch-variant.lock" if other else "",
        )
    )


if __name__ == "__main__":
    main()
