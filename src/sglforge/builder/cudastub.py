"""A link-time stub of the CUDA driver library, for a build host without a GPU driver.

A torch extension that calls the driver API (sgl-kernel's common_ops links `cuda`) needs a
`libcuda.so` at link time. The toolkit normally ships one in `lib64/stubs/` (NVIDIA's stub: every
driver API function, SONAME libcuda.so.1), and a host with a driver has the real one. A toolkit
installed without it, on a host without a driver (this project's build hosts), cannot link such
an extension at all ("cannot find -lcuda"), and no pip wheel carries the driver.

So, as a gap of `cuda-from-toolchain` (builder/environment.py cuda_gap_env), sglforge builds the
same kind of stub: a shared object with SONAME `libcuda.so.1` defining every function the
toolkit's driver headers declare. The linker then records `NEEDED libcuda.so.1`, exactly as
with NVIDIA's stub, and leaves the symbols undefined for the real driver at run time. The stub
is a build tool: it is never packaged or loaded (its functions are empty).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from sglforge.base.errors import SglforgeError

SONAME = "libcuda.so.1"
# the driver API headers of the toolkit (cudaProfiler.h: cuProfilerStart/Stop, also libcuda's)
DRIVER_HEADERS = ("cuda.h", "cudaProfiler.h")
# cuda.h maps names by macro (cuMemAlloc -> cuMemAlloc_v2; with per-thread default stream,
# cuMemcpy -> cuMemcpy_ptds): the preprocessed declarations are the names code can reference.
# __CUDA_API_VERSION_INTERNAL (the driver's own view) also declares the legacy unversioned
# names, which the driver still exports, as NVIDIA's stub does.
VARIANTS = ((), ("-DCUDA_API_PER_THREAD_DEFAULT_STREAM",), ("-D__CUDA_API_VERSION_INTERNAL",))
# a function declaration in the preprocessed header: `cuName(` (types are `CUname`)
_FUNCTION = re.compile(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(")
# where a toolkit (or a host with a driver) keeps a libcuda.so the linker can use
_LIBCUDA_DIRS = (
    "lib64/stubs",
    "lib/stubs",
    "targets/x86_64-linux/lib/stubs",
    "targets/sbsa-linux/lib/stubs",
    "lib64",
    "lib",
)


def toolkit_has_libcuda(cuda_home: Path) -> bool:
    """Whether the toolkit already provides a link name `libcuda.so` (stub or driver)."""
    return any((cuda_home / d / "libcuda.so").exists() for d in _LIBCUDA_DIRS)


def driver_symbols(cuda_home: Path, compiler: str) -> list[str]:
    """The driver API functions the toolkit's headers declare, in every name variant."""
    include = cuda_home / "include"
    headers = [h for h in DRIVER_HEADERS if (include / h).is_file()]
    if "cuda.h" not in headers:
        raise SglforgeError(f"{include}: no cuda.h, so no libcuda link stub can be made")
    source = "".join(f"#include <{h}>\n" for h in headers)
    names: set[str] = set()
    for flags in VARIANTS:
        run = subprocess.run(
            [compiler, "-E", "-P", "-x", "c", *flags, f"-I{include}", "-"],
            input=source,
            check=False,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise SglforgeError(
                f"preprocessing {include}/cuda.h with {compiler} failed: "
                f"{run.stderr.strip()[-500:]}"
            )
        names.update(_FUNCTION.findall(run.stdout))
    return sorted(names)


def write_stub(target: Path, cuda_home: Path, compiler: str | None = None) -> int:
    """Build the stub as `target` (e.g. <gaps>/lib/libcuda.so); returns how many functions it
    defines. Written under a temporary name and renamed, so no half-written library remains."""
    compiler = compiler or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SglforgeError("no C compiler (cc) on PATH to build the libcuda link stub")
    names = driver_symbols(cuda_home, compiler)
    with tempfile.TemporaryDirectory(prefix=".libcuda-stub-", dir=target.parent) as scratch:
        source = Path(scratch) / "libcuda_stub.c"
        source.write_text(
            "/* link stub written by sglforge (builder/cudastub.py) */\n"
            + "".join(f"void {name}(void) {{}}\n" for name in names)
        )
        built = Path(scratch) / target.name
        # no libc, no build id, no debug info: the same bytes for the same compiler and headers
        run = subprocess.run(
            [
                compiler,
                "-shared",
                "-fPIC",
                "-O0",
                "-nostdlib",
                f"-Wl,-soname,{SONAME}",
                "-Wl,--build-id=none",
                "-o",
                str(built),
                str(source),
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise SglforgeError(
                f"building the libcuda link stub with {compiler} failed: "
                f"{run.stderr.strip()[-500:]}"
            )
        os.replace(built, target)
    return len(names)
