"""`lockfiles/toolchain.toml`: the compilers and build dependencies every wheel is built with.

    cuda = "13.0"        # nvcc release (major.minor) a build must find
    python = "3.12"      # interpreter (major.minor) wheels are built with
    torch = "2.13.0+cu130"   # the torch build (CUDA variant included) kernels are built against;
                             # wheels then require torch==2.13.0 (the public version)
    torch-index = "https://pypi.org/simple"   # where the lock's torch comes from (default PyPI,
                                              # whose Linux x86_64 torch is the cu130 build)
    index = "https://pypi.org/simple"   # optional: everything else in lockfiles/toolchain.lock
    [build-requires]     # exact versions of the build dependencies recipes name
    setuptools = "80.9.0"

Builds run without build isolation in an interpreter that already has these installed
(`nox -s build` installs them from the hash-pinned lockfiles/toolchain.lock, see
builder/toolchain_lock.py; `sglforge build-requirements` prints the list). Before a build the
installed versions are checked against the pins, exactly; torch also by its CUDA variant, read
from the installed torch/version.py (`installed_torch`), since PyPI's cu130 torch has the
distribution version `2.13.0` without the `+cu130`. What was found (plus `nvcc --version`, the
host compiler, cmake) forms the `ToolchainFingerprint` that goes into every wheel's content key
and provenance.

The `--version` outputs are cached (`VersionCache`, `<cache-dir>/toolchain-versions.json`)
per tool, keyed by the resolved path, size, mtime_ns, inode and ctime_ns of the binary (and of
the link that names it) plus the arguments and the search PATH: a no-op build then starts no
compiler, and replacing, upgrading or touching a tool runs it again.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import canonical_name, installed_version
from sglforge.base.tomlfile import Problems, TableReader, key_line, load_toml

VERSION = re.compile(r"[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)")
MAJOR_MINOR = re.compile(r"[0-9]+\.[0-9]+")


@dataclass(frozen=True)
class Toolchain:
    path: Path
    cuda: str  # "13.0"
    python: str  # "3.12"
    torch: str | None  # "2.13.0+cu130"
    torch_index: str | None
    build_requires: dict[str, str]  # normalized name -> exact version
    index: str | None = None  # the index of the lock's non-torch sections

    @property
    def torch_public(self) -> str | None:
        """`2.13.0` for `2.13.0+cu130`: what built wheels require (Requires-Dist)."""
        return self.torch.split("+")[0] if self.torch else None

    @property
    def cuda_tag(self) -> str:
        """`130` for CUDA 13.0 (for local version labels like `cu130`)."""
        return self.cuda.replace(".", "")

    def pinned_version(self, name: str) -> str | None:
        key = canonical_name(name)
        if key == "torch":
            return self.torch
        return self.build_requires.get(key)

    def requirements(self, names: list[str]) -> list[str]:
        """`name==version` lines for `names` (all pins when empty)."""
        wanted = [canonical_name(n) for n in names] or sorted(
            set(self.build_requires) | ({"torch"} if self.torch else set())
        )
        return [
            f"{n}=={self.pinned_version(n)}" for n in sorted(set(wanted)) if self.pinned_version(n)
        ]


def load_toolchain(path: Path) -> Toolchain:
    data, text = load_toml(path)
    problems = Problems(path)
    reader = TableReader(data, problems, "toolchain", locate=lambda key: key_line(text, 1, key))
    cuda = reader.str(
        "cuda", required=True, pattern=MAJOR_MINOR.pattern, describe='a CUDA release like "13.0"'
    )
    python = reader.str(
        "python",
        required=True,
        pattern=MAJOR_MINOR.pattern,
        describe='a Python version like "3.12"',
    )
    torch = reader.str("torch", pattern=VERSION.pattern, describe="an exact version like 2.13.0")
    torch_index = reader.str("torch-index")
    index = reader.str("index")
    raw = reader.table("build-requires") or {}
    reader.finish()
    build_requires: dict[str, str] = {}
    header = next(
        (
            i
            for i, line in enumerate(text.splitlines(), 1)
            if re.match(r"\s*\[\s*build-requires\s*\]", line)
        ),
        None,
    )
    for name, version in raw.items():
        sub = TableReader(
            {name: version},
            problems,
            "toolchain [build-requires]",
            locate=lambda key: key_line(text, header, key) if header else None,
        )
        value = sub.str(
            name, pattern=VERSION.pattern, describe='an exact version (like "80.9.0"; no ranges)'
        )
        if canonical_name(name) == "torch":
            sub.error(name, "torch is pinned by the top-level 'torch' key")
        elif value:
            build_requires[canonical_name(name)] = value
    problems.raise_if_any()
    assert cuda is not None and python is not None
    return Toolchain(path, cuda, python, torch, torch_index, build_requires, index)


# ---------------------------------------------------------------------------------------------
# what is actually installed


@dataclass(frozen=True)
class InstalledTorch:
    """torch as installed, read from files (importing torch takes seconds)."""

    dist_version: str  # METADATA Version: `2.13.0` (PyPI) or `2.13.0+cu130` (its own index)
    version_file: Path  # torch/version.py, which may be missing
    version: str | None  # its `__version__`: `2.13.0+cu130`, `2.13.0+cpu`
    cuda: str | None  # its `cuda`: `13.0`; None for a CPU build


def _literals(path: Path) -> dict[str, object]:
    """Top-level `name = <literal>` / `name: T = <literal>` assignments of a Python file."""
    out: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value
            else []
        )
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return out


def installed_torch(path: list[str] | None = None) -> InstalledTorch | None:
    """The torch distribution on `path` (default sys.path) and its torch/version.py."""
    where = {} if path is None else {"path": path}
    dist = next(iter(importlib.metadata.distributions(name="torch", **where)), None)
    if dist is None:
        return None
    version_file = Path(dist.locate_file("torch/version.py"))
    version, cuda = torch_version_file(version_file)
    return InstalledTorch(dist.version, version_file, version, cuda)


def torch_version_file(version_file: Path) -> tuple[str | None, str | None]:
    """`__version__` and `cuda` of a torch/version.py (None where missing or not a string).

    The one reader of that file: the build's torch check and the smoke's environment probe."""
    try:
        values = _literals(version_file) if version_file.is_file() else {}
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        values = {}
    version, cuda = values.get("__version__"), values.get("cuda")
    return (version if isinstance(version, str) else None, cuda if isinstance(cuda, str) else None)


def torch_problem(want: str, have: InstalledTorch) -> str | None:
    """How the installed torch differs from the pin `want` (`2.13.0+cu130`), or None: public
    version from metadata; the variant from torch/version.py (`__version__` exactly, and for a
    cuXYZ pin `cuda` = X.YZ); a `+label` in the metadata must be the pinned one."""
    public, _, label = want.partition("+")
    dist_public, _, dist_label = have.dist_version.partition("+")
    if dist_public != public or (dist_label and dist_label != label):
        return f"torch: pinned {want}, installed {have.dist_version} (its metadata Version)"
    if not have.version_file.is_file():
        return (
            f"torch: pinned {want}, installed {have.dist_version} has no "
            f"{have.version_file}, so its CUDA variant is unknown (reinstall torch)"
        )
    found = f"{have.version_file}: __version__ = {have.version!r}, cuda = {have.cuda!r}"
    if have.version != want:
        return f"torch: pinned {want}, installed {have.version or have.dist_version} ({found})"
    if label.startswith("cu") and (have.cuda or "").replace(".", "") != label[2:]:
        return (
            f"torch: pinned {want} (CUDA {label[2:-1]}.{label[-1]}), but the installed "
            f"build says otherwise ({found})"
        )
    return None


class VersionCache:
    """`--version` outputs of tools, valid while the binary's stat stamp is unchanged."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, dict] = {}
        self.changed = False
        self.runs = 0  # subprocesses started (tests count them)
        if path is not None:
            try:
                data = json.loads(path.read_text())
                if isinstance(data, dict) and isinstance(data.get("entries"), dict):
                    self.entries = data["entries"]
            except (OSError, ValueError):
                pass  # absent or damaged: every tool runs once and the file is rewritten

    @staticmethod
    def stamp(binary: Path) -> list | None:
        """(path, size, mtime_ns, ctime_ns, inode) of the link as named and of its target."""
        out = []
        try:
            for path in (binary, binary.resolve()):
                st = os.stat(path, follow_symlinks=False)
                out.append([str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
        except OSError:
            return None
        return out

    def output(self, binary: Path, args: list[str], search_path: str | None) -> str:
        """stdout (or stderr when stdout is empty) of `binary args`, from the cache when the
        binary's stamp, the arguments and the search PATH are those it was recorded with."""
        key = json.dumps([str(binary), args, search_path])
        stamp = self.stamp(binary)
        entry = self.entries.get(key)
        if (
            stamp is not None
            and isinstance(entry, dict)
            and entry.get("stamp") == stamp
            and isinstance(entry.get("output"), str)
        ):
            return entry["output"]
        self.runs += 1
        proc = subprocess.run([str(binary), *args], capture_output=True, text=True, check=False)
        text = proc.stdout if proc.stdout.strip() else proc.stderr
        if stamp is not None and proc.returncode == 0:
            self.entries[key] = {"stamp": stamp, "output": text}
            self.changed = True
        return text

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        from sglforge.base.fs import atomic_write_text

        try:
            atomic_write_text(
                self.path,
                json.dumps({"format": 1, "entries": self.entries}, indent=1, sort_keys=True) + "\n",
            )
        except OSError:
            pass  # a read-only cache dir costs the next build a few `--version` runs
        self.changed = False


def _version_output(
    binary: Path, args: list[str], search_path: str | None, versions: VersionCache | None
) -> str:
    if versions is None:
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, check=False
        ).stdout
    return versions.output(binary, args, search_path)


@dataclass(frozen=True)
class CudaToolkit:
    home: Path
    nvcc: Path
    release: str  # "13.0"
    version_text: str  # full `nvcc --version` output


def find_cuda(
    toolchain: Toolchain, required: bool = True, versions: VersionCache | None = None
) -> CudaToolkit | None:
    """The CUDA toolkit from $CUDA_HOME, /usr/local/cuda or nvcc on PATH; checked vs the pin.

    A toolkit that is found must be the pinned release. None is returned only when no nvcc
    exists and no selected recipe declares device code (`cuda-archs`): a pure-Python set can
    build on a host without CUDA (the key then says cuda "none").
    """
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            # the user's choice: used or refused, never passed over for /usr/local/cuda
            chosen = Path(os.environ[var]) / "bin" / "nvcc"
            if not chosen.is_file():
                raise SglforgeError(
                    f"{var}={os.environ[var]}: no {chosen} (the CUDA toolkit to build with)",
                    hint=f"point {var} at the CUDA {toolchain.cuda} toolkit, or unset it to use "
                    "/usr/local/cuda or the nvcc on PATH",
                )
            candidates.append(chosen)
            break
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path))
    nvcc = next((c for c in candidates if c.is_file()), None)
    if nvcc is None and not required:
        return None
    if nvcc is None:
        raise SglforgeError(
            "nvcc not found (looked at $CUDA_HOME/bin, /usr/local/cuda/bin, PATH)",
            hint=f"install the CUDA {toolchain.cuda} toolkit or set CUDA_HOME",
        )
    nvcc = nvcc.resolve()
    text = _version_output(nvcc, ["--version"], None, versions)
    match = re.search(r"release ([0-9]+\.[0-9]+)", text)
    if match is None:  # a broken nvcc or wrapper: say what it printed, not "release unknown"
        raise SglforgeError(
            f"{nvcc} --version does not say its release: "
            + (repr(text.strip()[-300:]) if text.strip() else "it printed nothing on stdout"),
            hint="check that nvcc runs (a broken wrapper or a partial toolkit install?), or "
            "set CUDA_HOME to a working toolkit",
        )
    release = match.group(1)
    if release != toolchain.cuda:
        raise SglforgeError(
            f"{toolchain.path}: pins CUDA {toolchain.cuda}, but {nvcc} is release {release}",
            hint="set CUDA_HOME to the pinned toolkit",
        )
    return CudaToolkit(
        home=nvcc.parent.parent, nvcc=nvcc, release=release, version_text=text.strip()
    )


def _first_line(
    cmd: list[str], search_path: str | None = None, versions: VersionCache | None = None
) -> str | None:
    binary = shutil.which(cmd[0], path=search_path)
    if not binary:
        return None
    if versions is not None:
        text = versions.output(Path(binary), cmd[1:], search_path)
    else:
        proc = subprocess.run([binary, *cmd[1:]], capture_output=True, text=True, check=False)
        text = proc.stdout or proc.stderr
    lines = text.strip().splitlines()
    return lines[0] if lines else None


@dataclass(frozen=True)
class ToolchainFingerprint:
    """What the build actually ran with; hashed into content keys and written to provenance."""

    cuda: str  # release, e.g. "13.0"
    nvcc: str  # full `nvcc --version`
    compiler: str  # host C++ compiler `--version` first line
    cmake: str | None
    python: str  # full version of the build interpreter
    platform: str
    build_requires: dict[str, str] = field(default_factory=dict)  # name -> installed version
    torch: str | None = None  # installed torch, when a selected recipe needs it
    # `ld --version` first line: binutils changes symbol-table order and layout of the same
    # objects (bench/toolchain-bytes.json), so two hosts differing only there differ in key
    linker: str | None = None

    def as_dict(self) -> dict:
        return {
            "cuda": self.cuda,
            "nvcc": self.nvcc,
            "compiler": self.compiler,
            "cmake": self.cmake,
            "python": self.python,
            "platform": self.platform,
            "build_requires": dict(sorted(self.build_requires.items())),
            "torch": self.torch,
            "linker": self.linker,
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()

    def summary(self, with_torch: bool) -> dict:
        """The short form stamped into a wheel's provenance."""
        nvcc = re.search(r"V[0-9][0-9.]+", self.nvcc)
        out = {
            "cuda": self.cuda,
            "nvcc": nvcc.group(0) if nvcc else self.nvcc,
            "compiler": self.compiler,
            "cmake": self.cmake,
            "linker": self.linker,
            "python": self.python,
            "platform": self.platform,
        }
        if with_torch:
            out["torch"] = self.torch
        return out


def fingerprint(
    toolchain: Toolchain,
    cuda: CudaToolkit | None,
    requires: list[str],
    search_path: str | None = None,
    versions: VersionCache | None = None,
) -> ToolchainFingerprint:
    """Check the build interpreter against the pins for `requires`; fail naming every gap."""
    problems = []
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != toolchain.python:
        problems.append(f"python: pinned {toolchain.python}, running {running} ({sys.executable})")
    found: dict[str, str] = {}
    torch = None
    for name in sorted({canonical_name(n) for n in requires}):
        want = toolchain.pinned_version(name)
        if want is None:
            problems.append(f"{name}: not pinned in {toolchain.path}")
        elif name == "torch":  # exactly, CUDA variant included: 2.13.0+cpu is not +cu130
            build = installed_torch()
            if build is None:
                problems.append(f"torch: pinned {want}, not installed in {sys.executable}")
            elif wrong := torch_problem(want, build):
                problems.append(wrong)
            else:
                torch = build.version
            continue
        elif (have := installed_version(name)) is None:
            problems.append(f"{name}: pinned {want}, not installed in {sys.executable}")
        elif have != want:
            problems.append(f"{name}: pinned {want}, installed {have}")
        else:
            found[name] = have
    if problems:
        raise SglforgeError(
            "the build interpreter does not match lockfiles/toolchain.toml:\n"
            + "\n".join(f"  - {p}" for p in problems),
            hint="`nox -s build` installs the pinned build requirements; by hand: "
            "pip install -r <(sglforge build-requirements)",
        )
    return ToolchainFingerprint(
        cuda=cuda.release if cuda else "none",
        nvcc=cuda.version_text if cuda else "none",
        # builds do not inherit CC/CXX: CMake and nvcc find these on the build PATH
        compiler=_first_line(["c++", "--version"], search_path, versions) or "unknown",
        cmake=_first_line(["cmake", "--version"], search_path, versions),
        linker=_first_line(["ld", "--version"], search_path, versions),
        python=platform.python_version(),
        platform=f"{platform.system().lower()}-{platform.machine()}",
        build_requires=found,
        torch=torch,
    )
