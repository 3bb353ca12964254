"""Where a build may not leave its paths: prefix maps for every compiler, via wrappers.

Issue 11 item 1, choice "every path that can leak is prefix-mapped and the key includes it":
the build interpreter (the caller's venv: `.nox/build`, `.nox/verify`, any venv sglforge runs
from) and the build root are rewritten to fixed names in everything a compiler emits
(`__FILE__`, debug info, assert strings):

    <build root>              -> /sglforge-build
    <interpreter sys.prefix>  -> /sglforge-python/prefix
    <its base prefix>         -> /sglforge-python/base   (unless a system prefix like /usr)

Flags in CFLAGS/CXXFLAGS reach only the build systems that read them: torch's and tvm-ffi's
ninja builds and CMake projects that set CMAKE_<LANG>_FLAGS do not. So the maps are added
by wrappers: `cc`, `gcc`, `c++`, `g++` in the build's tools dir (first on PATH, and CC/CXX
point at them; setuptools, torch cpp_extension, tvm_ffi.cpp and CMake all honour CC/CXX),
and the nvcc wrapper passes them to the host compiler (`-Xcompiler`). The interpreter
location still goes into the content key (builder/key.py), and the wheel's members are scanned
for all of these paths afterwards (wheel/leaks.py), so a path that slips through fails the
build instead of making it irreproducible.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from sglforge.base.buildroot import SANDBOX_PATH

BUILD_TARGET = str(SANDBOX_PATH)  # where the sandbox shows the build root too
PREFIX_TARGET = "/sglforge-python/prefix"
BASE_TARGET = "/sglforge-python/base"
SYSTEM_PREFIXES = {"/", "/usr", "/usr/local", "/opt", "/bin"}
COMPILERS = ("cc", "gcc", "c++", "g++")
ENV_FLAGS = "SGLFORGE_PREFIX_MAP_FLAGS"  # read by the nvcc wrapper: one flag per line


def _variants(path: str) -> list[str]:
    """A path as given and resolved (symlinks), both can end up in compiler output."""
    out = [os.path.normpath(path)]
    real = os.path.realpath(path)
    if real not in out:
        out.append(real)
    return out


def interpreter_paths() -> list[tuple[str, str]]:
    """(path, target) for the running interpreter's prefix and (non-system) base prefix."""
    pairs = [(p, PREFIX_TARGET) for p in _variants(sys.prefix)]
    for base in _variants(sys.base_prefix):
        if base not in SYSTEM_PREFIXES and base not in {p for p, _ in pairs}:
            pairs.append((base, BASE_TARGET))
    return pairs


def prefix_maps(build_root: Path) -> list[tuple[str, str]]:
    """All maps, shortest path first: GCC tries the last given map first, so a more specific
    path (a venv inside the build root, say) wins over the one containing it."""
    pairs = [(p, BUILD_TARGET) for p in _variants(str(build_root))] + interpreter_paths()
    seen: dict[str, str] = {}
    for path, target in pairs:
        seen.setdefault(path, target)
    return sorted(seen.items(), key=lambda pair: (len(pair[0]), pair[0]))


def map_flags(build_root: Path) -> list[str]:
    return [f"-ffile-prefix-map={path}={target}" for path, target in prefix_maps(build_root)]


WRAPPER = """#!/bin/sh
# compiler wrapper written by sglforge (builder/prefixmap.py): drops RPATHs into the build
# interpreter's installation (pyenv-style Pythons put them in LDSHARED), appends prefix maps
# real compiler: {identity}
for arg do
    shift
    case "$arg" in
        {rpath_patterns}) continue ;;
    esac
    set -- "$@" "$arg"
done
exec {real} "$@" {flags}
"""


def _identity(real: str) -> str:
    """The real compiler's resolved path, size and mtime, written into the wrapper: a compiler
    cache that checks the wrapper's content (CCACHE_COMPILERCHECK=content; the wrapper is
    rewritten, with a new mtime, by every build) then still sees an upgraded compiler."""
    resolved = os.path.realpath(real)
    try:
        info = os.stat(resolved)
    except OSError:
        return resolved
    return f"{resolved} size={info.st_size} mtime_ns={info.st_mtime_ns}"


def _rpath_patterns() -> str:
    """sh `case` patterns for -Wl,-rpath options that point into the interpreter's prefixes
    (an RPATH into the build machine's Python is wrong in a wheel and makes it irreproducible)."""
    patterns = []
    for path, _ in interpreter_paths():
        quoted = shlex.quote(path)
        patterns += [f"-Wl,-rpath,{quoted}*", f"-Wl,-rpath={quoted}*", f"-Wl,-R,{quoted}*"]
    return "|".join(patterns) or "-Wl,-rpath,/nonexistent-sglforge"


def write_compiler_wrappers(tools_bin: Path, build_root: Path, search_path: str) -> dict[str, str]:
    """Write cc/gcc/c++/g++ wrappers that append the prefix maps; return the env to use them
    (CC, CXX, the flags for the nvcc wrapper). Compilers not found on `search_path` are left
    out (their wrapper would have nothing to run)."""
    tools_bin.mkdir(parents=True, exist_ok=True)
    flags = map_flags(build_root)
    env = {ENV_FLAGS: "\n".join(flags)}
    for name in COMPILERS:
        real = shutil.which(name, path=search_path)
        wrapper = tools_bin / name
        if real is None:
            wrapper.unlink(missing_ok=True)
            continue
        wrapper.write_text(
            WRAPPER.format(
                rpath_patterns=_rpath_patterns(),
                identity=_identity(real),
                real=shlex.quote(real),
                flags=shlex.join(flags),
            )
        )
        wrapper.chmod(0o755)
    if (tools_bin / "cc").exists():
        env["CC"] = str(tools_bin / "cc")
    if (tools_bin / "c++").exists():
        env["CXX"] = str(tools_bin / "c++")
    return env


def leak_needles(build_root: Path) -> list[str]:
    """The paths a wheel must not contain (wheel/leaks.py): the build root and the build
    interpreter's prefixes, as given and resolved."""
    needles = {p for p, _ in prefix_maps(build_root)}
    return sorted(n for n in needles if n not in SYSTEM_PREFIXES and len(n) > 4)
