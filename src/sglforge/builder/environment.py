"""The environment a wheel build runs in: fixed paths, no network, deterministic compilers.

- Fixed absolute build root; HOME and TMPDIR inside it; LANG/TZ fixed; PYTHONHASHSEED=0.
- SOURCE_DATE_EPOCH = the pinned commit's time.
- No network: the build runs in the sandbox's network namespace (builder/sandbox.py; with
  --unsafe-no-sandbox, `unshare -n`/`unshare -rn` where available), and always with proxies
  pointing at a closed port, PIP_NO_INDEX=1 and FETCHCONTENT_FULLY_DISCONNECTED=ON, so a
  download attempt fails loudly.
- An `nvcc` wrapper first on PATH (also CUDACXX, PYTORCH_NVCC, FLASHINFER_NVCC) adds, per
  compiled file, `-objtemp` and `-frandom-seed=<hash of source and output paths relative to
  the build root>`, plus `-Xcompiler -ffile-prefix-map=...` for the build root and the build
  interpreter (builder/prefixmap.py; cc/gcc/c++/g++ wrappers add the same maps to every host
  compile, CC/CXX point at them); nvcc output depends on absolute paths even so, which is
  why the root is fixed (see reference/reproducibility.md). The optional compiler cache hooks
  in here too: the wrapper launches nvcc through `$SGLFORGE_COMPILER_CACHE` when set (ccache
  only; builder/compiler_cache.py says why sccache never wraps nvcc).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.base.fs import remove_tree
from sglforge.builder import cudastub, prefixmap

CLOSED_PROXY = "http://127.0.0.1:9"

NVCC_WRAPPER = '''#!{python}
"""nvcc wrapper written by sglforge (builder/environment.py): stable seeds and temp names per file."""
import hashlib, os, sys

real = os.environ["SGLFORGE_REAL_NVCC"]
root = os.environ["SGLFORGE_BUILD_ROOT"]
args = sys.argv[1:]
if {{"--version", "-V", "--help", "-h"}}.intersection(args):
    os.execv(real, [real] + args)
compile_flags = {{"-c", "-dc", "-dw", "--compile", "--device-c", "--device-w"}}
sources = [a for a in args if not a.startswith("-")
           and a.endswith((".cu", ".cpp", ".cc", ".cxx", ".c"))]
extra = []
for flag in os.environ.get("SGLFORGE_PREFIX_MAP_FLAGS", "").splitlines():
    extra += ["-Xcompiler", flag]
if compile_flags.intersection(args) and len(sources) == 1:
    output = ""
    for i, a in enumerate(args):
        if a in ("-o", "--output-file") and i + 1 < len(args):
            output = args[i + 1]
        elif a.startswith("--output-file="):
            output = a.split("=", 1)[1]
    rel = [os.path.relpath(os.path.abspath(p), root) for p in (sources[0], output) if p]
    seed = hashlib.sha256("\\0".join(rel).encode()).hexdigest()[:8]
    extra += ["-objtemp", "-frandom-seed=0x" + seed]
hidden = [p.rstrip("/") for p in os.environ.get("SGLFORGE_HOST_LINK_PREFIXES", "").splitlines() if p]
if hidden and not compile_flags.intersection(args):
    # a link: nvcc records the device link's options, -L directories included, in every
    # cubin it links (.note.nv.tkinfo). A directory in the build interpreter's prefix goes
    # to the host linker only (-Xlinker), so the wheel does not carry that path.
    def host_only(d):
        return "," not in d and any(d == p or d.startswith(p + "/") for p in hidden)
    passthrough = {{"-Xlinker", "--linker-options", "-Xcompiler", "--compiler-options",
                   "-Xnvlink", "--nvlink-options", "-Xptxas", "--ptxas-options", "-Xarchive",
                   "--archive-options"}}
    out, i = [], 0
    while i < len(args):
        a, value = args[i], None
        if a in passthrough and i + 1 < len(args):  # its value belongs to that tool
            out += [a, args[i + 1]]
            i += 2
            continue
        given = [a]
        if a in ("-L", "--library-path") and i + 1 < len(args):
            value, i, given = args[i + 1], i + 1, [a, args[i + 1]]
        elif a.startswith("--library-path="):
            value = a.split("=", 1)[1]
        elif a.startswith("-L"):
            value = a[2:]
        dirs = value.split(",") if value is not None else []
        if not any(host_only(d) for d in dirs):
            out += given  # as given: nothing to move
        else:
            kept = [d for d in dirs if not host_only(d)]
            out += ["--library-path=" + ",".join(kept)] if kept else []
            for d in dirs:
                out += ["-Xlinker", "-L" + d] if host_only(d) else []
        i += 1
    args = out
launcher = os.environ.get("SGLFORGE_COMPILER_CACHE")
cmd = ([launcher] if launcher else []) + [real] + args + extra
os.execvp(cmd[0], cmd)
'''


def host_link_prefixes() -> str:
    """The nvcc wrapper's SGLFORGE_HOST_LINK_PREFIXES: the build interpreter's prefixes (as
    given and resolved), whose library directories (torch/lib, libucx/lib, ...) an nvcc link
    hands to the host linker only. nvlink writes its -L directories into each cubin it links,
    and these paths differ per checkout, so they would leak into the wheel (wheel/leaks.py).
    nvlink searches -L only for device-code archives, which none of these wheels ship; one
    that did would fail the link loudly (undefined device symbol), never silently."""
    return "\n".join(path for path, _ in prefixmap.interpreter_paths())


def write_nvcc_wrapper(tools_bin: Path) -> Path:
    tools_bin.mkdir(parents=True, exist_ok=True)
    wrapper = tools_bin / "nvcc"
    wrapper.write_text(NVCC_WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    return wrapper


@functools.lru_cache(maxsize=1)
def network_isolation() -> list[str]:
    """Command prefix that runs a command without network, or [] where not possible (only
    for --unsafe-no-sandbox builds; the sandbox has a network namespace of its own)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    for prefix in ([unshare, "-n"], [unshare, "-rn"]):
        probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return prefix
    return []


def search_path(cuda_home: Path | None) -> str:
    """PATH of a build (after the tools dir): CUDA, the build interpreter's bin, the system."""
    parts = [str(cuda_home / "bin")] if cuda_home else []
    parts += [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return os.pathsep.join(parts)


def base_env(
    root: BuildRoot, cuda_home: Path | None, real_nvcc: Path | None, source_date_epoch: int
) -> dict[str, str]:
    """The environment every build starts from (the caller's environment is not inherited).

    Writes the host compiler wrappers into the tools dir (builder/prefixmap.py)."""
    path = os.pathsep.join([str(root.tools_bin), search_path(cuda_home)])
    wrapper = str(root.tools_bin / "nvcc")
    prefix_map = " ".join(prefixmap.map_flags(root.path))
    env = {
        "PATH": path,
        "HOME": str(root.home),
        "TMPDIR": str(root.tmp),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        "SOURCE_DATE_EPOCH": str(source_date_epoch),
        "SGLFORGE_BUILD_ROOT": str(root.path),
        "CFLAGS": prefix_map,
        "CXXFLAGS": prefix_map,
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    env.update(prefixmap.write_compiler_wrappers(root.tools_bin, root.path, search_path(cuda_home)))
    if cuda_home is not None and real_nvcc is not None:
        env.update(
            {
                "CUDA_HOME": str(cuda_home),
                "CUDA_PATH": str(cuda_home),
                "CUDACXX": wrapper,
                "PYTORCH_NVCC": wrapper,
                "FLASHINFER_NVCC": wrapper,
                "SGLFORGE_REAL_NVCC": str(real_nvcc),
                "SGLFORGE_HOST_LINK_PREFIXES": host_link_prefixes(),
            }
        )
    for var in ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy"):
        env[var] = env[var.upper()] = CLOSED_PROXY
    env["no_proxy"] = env["NO_PROXY"] = ""
    return env


CUDA_GAPS = "cuda-gaps"  # <build-root>/tools/cuda-gaps/{include,lib}


def nvidia_wheel_dir(site_packages: Path, cuda_major: str) -> Path | None:
    """`nvidia/cu<major>` of the toolchain's nvidia-* wheels: in the toolchain's site-packages,
    else on this interpreter's path (a toolchain venv layered over a host's torch venv)."""
    for base in [site_packages, *(Path(p) for p in sys.path if p)]:
        candidate = base / "nvidia" / f"cu{cuda_major}"
        if candidate.is_dir():
            return candidate
    return None


def cuda_gap_env(
    root: BuildRoot, site_packages: Path, cuda_home: Path | None, cuda_major: str
) -> tuple[dict[str, str], Path, list[str]]:
    """Fill what the CUDA toolkit lacks from the toolchain's hash-locked nvidia-* wheels
    (recipe `cuda-from-toolchain`): a toolkit installed without cuBLAS/NVRTC development files
    still builds, against the exact libraries torch runs with.

    Only gaps are filled: a header the toolkit has is never shadowed (the wheels' cuda_runtime.h
    may be a newer patch release than nvcc's). Headers are linked into `include/` (on CPATH,
    after every -I). `lib/` (on LIBRARY_PATH, and `{cuda_gap_lib}`) holds a link name `libX.so`
    for every library the wheels ship as `libX.so.N`: to the toolkit's own `libX.so` where it
    has one, else to the wheel's file (the linker resolves `-lcublas` there; the ELF still
    records the SONAME libcublas.so.N). A toolkit without any `libcuda.so` (no driver, no
    `lib64/stubs`) gets a link stub of the driver library there (builder/cudastub.py), so
    `-lcuda` links and records libcuda.so.1. Returns (env, lib dir, the gaps filled)."""
    wheels = nvidia_wheel_dir(site_packages, cuda_major)
    gaps = root.path / "tools" / CUDA_GAPS
    remove_tree(gaps)
    include, lib = gaps / "include", gaps / "lib"
    include.mkdir(parents=True)
    lib.mkdir()
    linked: list[str] = []
    if (
        cuda_home is not None
        and (cuda_home / "include" / "cuda.h").is_file()
        and not cudastub.toolkit_has_libcuda(cuda_home)
    ):
        count = cudastub.write_stub(lib / "libcuda.so", cuda_home)
        linked.append(
            f"lib/libcuda.so -> a link stub ({cudastub.SONAME}, {count} driver API "
            "functions of cuda.h)"
        )
    if wheels is None:
        return ({"LIBRARY_PATH": str(lib)} if linked else {}), lib, linked
    toolkit_include = cuda_home / "include" if cuda_home else None
    toolkit_libs = [cuda_home / d for d in ("lib64", "lib")] if cuda_home else []
    for header in sorted((wheels / "include").iterdir()) if (wheels / "include").is_dir() else []:
        if toolkit_include is not None and (toolkit_include / header.name).exists():
            continue
        (include / header.name).symlink_to(header)
        linked.append(f"include/{header.name}")
    for library in sorted((wheels / "lib").glob("lib*.so.*")):
        name = library.name.split(".so.")[0] + ".so"
        if (lib / name).exists() or (lib / name).is_symlink():
            continue
        own = next((d / name for d in toolkit_libs if (d / name).exists()), None)
        (lib / name).symlink_to(own if own is not None else library)
        if own is None:
            linked.append(f"lib/{name} -> {library.name}")
    return {"CPATH": str(include), "LIBRARY_PATH": str(lib)}, lib, linked
