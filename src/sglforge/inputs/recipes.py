"""Recipes: `recipes/<wheel>.toml`, how one wheel is built from one upstream.

    upstream = "sglang"                      # a top-level source in lockfiles/upstreams.toml
    subdir = "python/sglang/kernels/aot"     # where the PEP 517 project is (default ".")
    frontend = "pip"                         # "pip" (pip wheel) or "build" (python -m build)
    isolation = false                        # PEP 517 build isolation (needs --wheelhouse)
    build-requires = ["scikit-build-core", "torch"]   # names; versions from toolchain.toml
    depends = []                             # recipes whose wheels must be importable
    base-version = "0.4.10"                  # upstream version; {version} = base+local
    local-version = "sm120.cu{cuda}.{patchset8}"
    requires-torch-abi = true                # wheel gets Requires-Dist: torch==<toolchain>
    cuda-archs = ["sm_120a"]                 # SASS every device-code ELF must hold (audit)
    mem-per-job = "6GiB"                     # memory one compile job needs (scheduler)
    nvcc-threads = 1
    exclude = ["*.a"]                        # more build litter to drop (wheelpost defaults:
                                             # ninja files, *.o, CMakeFiles/, *_build/)
    exclude-defaults = true                  # false: only this recipe's `exclude`
    elf-deps = "error"                       # unresolvable DT_NEEDED: "error" or "warn"
    host-requires = ["ucx >= 1.22"]          # system libraries (pkg-config modules), checked
                                             # before anything is fetched or installed
    cuda-from-toolchain = true               # headers and link names the CUDA toolkit lacks
                                             # (cuBLAS, NVRTC, ...) from the toolchain's
                                             # nvidia-* wheels (builder/environment.py)
    opt-in = "hours of nvcc; runtime JIT"    # built only when named (`build -- NAME`); the
                                             # reason is printed when a build skips it
    [env]                                    # environment of the build, placeholders allowed
    SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SGLANG = "{version}"
    [cmake-defines]                          # -D options, passed through CMAKE_ARGS
    SGL_KERNEL_ENABLE_SM100A = "OFF"
    [config-settings]                        # PEP 517 config settings (-C key=value)
    "build-dir" = "{build_dir}"              # a list value repeats the setting

`local-version` may use {cuda}, {patchset8} (the series digest) and {key8}: the first 8 hex
digits of the wheel's content key (builder/key.py: pins, series, recipe, toolchain, build root,
dependencies' keys), so a rebuild after any change of those, a recipe edit included, gets a
new label and file name instead of different bytes under the old name.

The local label names SASS archs (`sm120`, `sm120a`, …) only when the wheel carries device
code for them: each `sm…` part must match an entry of `cuda-archs` (which the arch audit then
requires in every device-code ELF). JIT / arch-free wheels use `cu{cuda}.{patchset8}`.

`opt-in = "why"` leaves a recipe out of a build that names no recipes (`nox -s build`
prints that it skipped it, and why); `nox -s build -- NAME` builds it (and `verify` rebuilds
it once it is in the manifest). Only an optional wheel may be opt-in: a recipe that is not
opt-in may not depend on one, and nothing checks that its wheel exists (`check` says it is
opt-in where it is not built). Per recipe, never in the shared defaults.

`version-label = "retag"` is for upstreams without a version variable: sglforge appends
`+<local>` to the version the upstream built (METADATA, .dist-info name, file name).

Placeholders: {version} {local} {patchset8} {cuda} {jobs} {nvcc_threads} {source} {build_dir}
{build_root} {site_packages} (the toolchain venv's, where build-input wheels such as
libucx-cu13 live), {cuda_gap_lib} (with cuda-from-toolchain: the directory of link names such
as libnvrtc.so that the build gets from the toolchain's nvidia-* wheels), and the arch list in the form each consumer wants, all derived from `cuda-archs`
(the one place a recipe names archs; `ARCH_FORMS`), e.g. for ["sm_120a", "sm_90a"]:
    {cmake_cuda_architectures}   "120a;90a"    CMAKE_CUDA_ARCHITECTURES
    {torch_cuda_arch_list}       "12.0a 9.0a"  TORCH_CUDA_ARCH_LIST
    {flashinfer_cuda_arch_list}  "12.0a 9.0a"  FLASHINFER_CUDA_ARCH_LIST (sm_120f: "12.0f")
    {sgl_kernel_cuda_archs}      "120a;90a"    SGL_KERNEL_CUDA_ARCHS (patches/sglang/0001)
    {nixl_cuda_arch_list}        "120,90"      meson -Dnixl_cuda_arch_list (numbers only)
A literal arch in [env], [cmake-defines] or [config-settings] (sm_NN, compute_NN, or values
like 12.0f / 120a under an arch-ish name) is a hint (`Recipe.hints`, `patches lint`).

Shared defaults: `recipes/_defaults.toml` (validated like a recipe; not itself a recipe) is
read before each recipe; a recipe's top-level keys replace the defaults', and its [env],
[cmake-defines] and [config-settings] entries are added to (or replace) the defaults' ones.
A recipe's `sha256` covers the defaults file too.
FetchContent sources pinned for the upstream are always injected
(`-DFETCHCONTENT_SOURCE_DIR_<NAME>=…`, `-DFETCHCONTENT_FULLY_DISCONNECTED=ON`).
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import TOML_INPUT_CAP, read_capped
from sglforge.base.requirements import canonical_name
from sglforge.base.tomlfile import Problems, TableReader, key_line, load_toml
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.targets import Target, check_recipe_names
from sglforge.inputs.toolchain import Toolchain
from sglforge.wheel.normalize import DEFAULT_EXCLUDE


def _arch_parts(arch: str) -> tuple[str, str]:
    """("120", "a") for "sm_120a"."""
    digits, suffix = re.fullmatch(r"sm_([0-9]+)([af]?)", arch).groups()
    return digits, suffix


def _dotted(archs: tuple[str, ...]) -> str:
    return " ".join(f"{d[:-1]}.{d[-1]}{s}" for d, s in map(_arch_parts, archs))


def _cmake(archs: tuple[str, ...]) -> str:
    return ";".join(a.removeprefix("sm_") for a in archs)


# Placeholder -> the recipe's `cuda-archs` in the form one consumer expects.
ARCH_FORMS: dict[str, Callable[[tuple[str, ...]], str]] = {
    "cmake_cuda_architectures": _cmake,
    "torch_cuda_arch_list": _dotted,
    "flashinfer_cuda_arch_list": _dotted,  # space-separated, "12.0f" = the sm_120 family
    "sgl_kernel_cuda_archs": _cmake,  # a CMake list, patches/sglang/0001
    "nixl_cuda_arch_list": lambda archs: ",".join(_arch_parts(a)[0] for a in archs),
}
PLACEHOLDERS = (
    "version",
    "local",
    "patchset8",
    "cuda",
    "jobs",
    "nvcc_threads",
    "source",
    "build_dir",
    "build_root",
    "site_packages",
    "cuda_gap_lib",
    *ARCH_FORMS,
)
DEFAULTS_FILE = "_defaults.toml"
MERGED_TABLES = ("env", "cmake-defines", "config-settings")
# never in the defaults
PER_RECIPE_KEYS = ("upstream", "subdir", "depends", "base-version", "opt-in")
LOCAL_PLACEHOLDERS = ("patchset8", "cuda", "key8")
RECIPE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
SASS_ARCH = re.compile(r"sm_[0-9]{2,3}[af]?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PEP440_BASE = re.compile(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")
MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(GiB|MiB|G|M)")
FRONTENDS = ("pip", "build")
ELF_DEPS = ("error", "warn")
LABEL_ARCH = re.compile(r"sm([0-9]{2,3})([af]?)")
OPT_IN_MAX = 300
OPT_IN_REASON = re.compile(rf"[^\x00-\x1f\x7f-\x9f]{{1,{OPT_IN_MAX}}}")  # printed as is


@dataclass(frozen=True)
class Recipe:
    name: str  # file stem: the wheel's distribution name
    path: Path
    sha256: str  # of the recipe file's bytes
    upstream: str
    subdir: str
    frontend: str
    isolation: bool
    build_requires: tuple[str, ...]
    depends: tuple[str, ...]
    base_version: str | None
    local_version: str | None  # template
    version_label: str  # "env": the upstream applies it; "retag": sglforge rewrites the wheel
    requires_torch_abi: bool
    cuda_archs: tuple[str, ...]
    mem_per_job: int  # bytes
    nvcc_threads: int
    env: dict[str, str]
    cmake_defines: dict[str, str]
    config_settings: dict[str, tuple[str, ...]]  # a list value repeats the setting
    exclude: tuple[str, ...] = ()  # build-litter patterns (defaults included unless opted out)
    elf_deps: str = "error"  # what an unresolvable DT_NEEDED is: "error" | "warn"
    host_requires: tuple[str, ...] = ()  # system libraries, as pkg-config modules ("ucx >= 1.22")
    cuda_from_toolchain: bool = False  # fill the CUDA toolkit's gaps from nvidia-* wheels
    hints: tuple[str, ...] = ()  # advice, not errors (e.g. a literal arch; `patches lint`)
    opt_in: str | None = None  # why a build that names no recipes leaves this one out

    def local_label(self, patchset8: str, cuda_tag: str, key8: str | None = None) -> str | None:
        """The label for this series, CUDA and content key (`key8`: its first 8 hex digits;
        only a template with {key8} needs it)."""
        if self.local_version is None:
            return None
        if key8 is None and "{key8}" in self.local_version:
            raise ValueError(f"{self.name}: local-version uses {{key8}}: pass the content key")
        return self.local_version.format(patchset8=patchset8, cuda=cuda_tag, key8=key8)

    def version(self, local: str | None) -> str | None:
        if self.base_version is None:
            return None
        return self.base_version + (f"+{local}" if local else "")

    @property
    def arch_values(self) -> dict[str, str]:
        """The arch placeholders ({cmake_cuda_architectures}, ...) filled from `cuda_archs`."""
        return {name: form(self.cuda_archs) for name, form in ARCH_FORMS.items()}

    @property
    def cmake_cuda_architectures(self) -> str:
        return ARCH_FORMS["cmake_cuda_architectures"](self.cuda_archs)

    @property
    def torch_cuda_arch_list(self) -> str:
        return ARCH_FORMS["torch_cuda_arch_list"](self.cuda_archs)


def parse_memory(text: str) -> int | None:
    match = MEMORY.fullmatch(text.strip())
    if not match:
        return None
    scale = 1 << 30 if match.group(2).startswith("G") else 1 << 20
    number = float(match.group(1)) * scale
    return int(number) if math.isfinite(number) else None  # 400 nines: inf, not a size


def _placeholders(template: str) -> list[str] | None:
    """Field names used in `template`; None if it is not a valid format string.

    Conversions and format specs (`{cuda!x}`, `{version:>999999999}`) are refused: they fail
    or blow up when the template is filled in."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    if any(f is not None and (conversion or spec) for _, f, spec, conversion in parsed):
        return None
    return [f for _, f, _, _ in parsed if f is not None]


def _check_template(
    reader: TableReader,
    key: str,
    template: str,
    allowed: tuple[str, ...],
    has_version: bool,
    cuda_from_toolchain: bool = False,
) -> None:
    fields = _placeholders(template)
    if fields is None:
        reader.error(
            key,
            f"{template!r} is not a valid template (unbalanced braces, "
            "or a !conversion or :format spec)",
        )
        return
    for name in fields:
        if name not in allowed:
            reader.error(
                key,
                f"unknown placeholder {{{name}}} in {template!r} "
                f"(known: {', '.join('{' + a + '}' for a in allowed)})",
            )
        elif name == "version" and not has_version:
            reader.error(key, "{version} needs 'base-version' in the recipe")
        elif name == "cuda_gap_lib" and not cuda_from_toolchain:
            reader.error(key, "{cuda_gap_lib} needs 'cuda-from-toolchain = true' in the recipe")


# key -> (TableReader getter, its checks, value when absent): the one declaration of a
# recipe's keys, used for recipes and for recipes/_defaults.toml.
RECIPE_KEYS: dict[str, tuple[str, dict[str, Any], Any]] = {
    "upstream": ("str", {}, None),
    "subdir": ("str", {}, "."),
    "frontend": ("str", {}, "pip"),
    "isolation": ("bool", {}, False),
    "build-requires": ("str_list", {}, []),
    "depends": ("str_list", {}, []),
    "base-version": (
        "str",
        {"pattern": PEP440_BASE.pattern, "describe": "a PEP 440 public version like 0.4.10"},
        None,
    ),
    "local-version": ("str", {}, None),
    "version-label": ("str", {}, "env"),
    "requires-torch-abi": ("bool", {}, False),
    "cuda-archs": ("str_list", {}, []),
    "mem-per-job": ("str", {}, "2GiB"),
    "nvcc-threads": ("int", {"minimum": 1}, 1),
    "env": ("str_table", {}, {}),
    "cmake-defines": ("str_table", {}, {}),
    "config-settings": ("table", {}, {}),
    "exclude": ("str_list", {}, []),
    "exclude-defaults": ("bool", {}, True),
    "elf-deps": ("str", {}, "error"),
    "host-requires": ("str_list", {}, []),
    "cuda-from-toolchain": ("bool", {}, False),
    "opt-in": ("str", {}, None),
}
# `host-requires` entries: a pkg-config module, optionally with one version bound.
HOST_REQUIRE = re.compile(r"([A-Za-z0-9_.+-]+)(?:\s*(>=|<=|=|>|<)\s*([0-9][0-9.]*))?")


def _read_keys(reader: TableReader) -> dict[str, Any]:
    """Every recipe key present in the table, type-checked (absent or invalid: left out)."""
    out: dict[str, Any] = {}
    for name, (getter, options, _default) in RECIPE_KEYS.items():
        if name not in reader.data:
            reader.seen.add(name)
            continue
        extra = {"default": None} if getter == "bool" else {}
        value = getattr(reader, getter)(name, **options, **extra)
        if value is not None:
            out[name] = value
    reader.finish()
    return out


def recipe_files(recipes_dir: Path) -> list[Path]:
    """The recipe files of `recipes_dir`, sorted: every `*.toml` except the shared defaults
    (`_defaults.toml`) and any other name starting with `_` (not a recipe name). The one
    listing: load, did-you-mean, the names lock-runtime and verify treat as ours."""
    if not recipes_dir.is_dir():
        return []
    return sorted(p for p in recipes_dir.glob("*.toml") if not p.name.startswith("_"))


def recipe_names(recipes_dir: Path) -> list[str]:
    """The recipe names (file stems) of `recipes_dir`, sorted."""
    return [p.stem for p in recipe_files(recipes_dir)]


def load_defaults(recipes_dir: Path) -> tuple[dict[str, Any], bytes]:
    """`recipes/_defaults.toml` (checked like a recipe; may not set per-recipe keys), with its
    bytes; ({}, b"") when there is none."""
    path = recipes_dir / DEFAULTS_FILE
    if not path.is_file():
        return {}, b""
    data, text = load_toml(path)
    problems = Problems(path)
    reader = TableReader(
        data, problems, "recipe defaults", locate=lambda key: key_line(text, 1, key)
    )
    values = _read_keys(reader)
    for name in PER_RECIPE_KEYS:
        if name in values:
            reader.error(name, "belongs in each recipe, not in the shared defaults")
    problems.raise_if_any()
    return data, text.encode("utf-8")  # the bytes load_toml read (strict UTF-8 round-trips)


def merge_defaults(defaults: dict[str, Any], recipe: dict[str, Any]) -> dict[str, Any]:
    """The recipe's keys over the defaults'; [env], [cmake-defines] and [config-settings] are
    merged entry by entry (the recipe's entry wins)."""
    merged = dict(defaults)
    for name, value in recipe.items():
        base = merged.get(name)
        if name in MERGED_TABLES and isinstance(value, dict) and isinstance(base, dict):
            merged[name] = {**base, **value}
        else:
            merged[name] = value
    return merged


@dataclass(frozen=True)
class _RecipeSource:
    """A recipe file as read: its own table and text, and the table a build uses (the shared
    defaults, the recipe's keys over them, a target's overrides over those)."""

    path: Path
    own: dict[str, Any]
    text: str
    data: dict[str, Any]
    defaults_bytes: bytes  # of recipes/_defaults.toml; b"" when there is none

    def locate(self, key: str) -> int | None:
        """The line of a key the recipe file itself sets (None: from the defaults or a target)."""
        return key_line(self.text, 1, key) if key in self.own else None


def _read_recipe_source(path: Path, target: Target | None) -> _RecipeSource:
    own, text = load_toml(path)
    defaults, defaults_bytes = load_defaults(path.parent)
    data = merge_defaults(defaults, own)
    if target is not None and path.stem in target.overrides:  # inputs/targets.py
        data = merge_defaults(data, target.overrides[path.stem])
    return _RecipeSource(path, own, text, data, defaults_bytes)


def _check_recipe_name(problems: Problems, path: Path) -> str:
    """The recipe's name (its file stem), which must be a wheel's name."""
    name = path.stem
    if not RECIPE_NAME.fullmatch(name):
        problems.add(
            f"file name {path.name!r}: a recipe is named after its wheel "
            "(lowercase letters, digits, '.', '_', '-')"
        )
    return name


@dataclass(frozen=True)
class _RecipeValues:
    """A recipe's keys as read: type-checked, absent (or mistyped) ones at their defaults."""

    upstream: str | None
    subdir: str
    frontend: str
    isolation: bool
    build_requires: list[str]
    depends: list[str]
    base_version: str | None
    local_version: str | None
    version_label: str
    requires_torch_abi: bool
    cuda_archs: list[str]
    mem_text: str
    nvcc_threads: int
    env: dict[str, str]
    cmake_defines: dict[str, str]
    config_settings: dict[str, tuple[str, ...]]
    extra_exclude: list[str]
    exclude_defaults: bool
    elf_deps: str
    host_requires: list[str]
    cuda_from_toolchain: bool
    opt_in: str | None


def _read_recipe_values(reader: TableReader) -> _RecipeValues:
    values = _read_keys(reader)
    if "upstream" not in reader.data:
        reader.error(None, "missing required key 'upstream'")

    def get(key: str) -> Any:
        return values.get(key, RECIPE_KEYS[key][2])

    return _RecipeValues(
        upstream=get("upstream"),
        subdir=get("subdir"),
        frontend=get("frontend"),
        isolation=get("isolation"),
        build_requires=get("build-requires"),
        depends=get("depends"),
        base_version=get("base-version"),
        local_version=get("local-version"),
        version_label=get("version-label"),
        requires_torch_abi=get("requires-torch-abi"),
        cuda_archs=get("cuda-archs"),
        mem_text=get("mem-per-job"),
        nvcc_threads=get("nvcc-threads"),
        env=get("env"),
        cmake_defines=get("cmake-defines"),
        config_settings=_config_settings(reader, get("config-settings")),
        extra_exclude=get("exclude"),
        exclude_defaults=get("exclude-defaults"),
        elf_deps=get("elf-deps"),
        host_requires=get("host-requires"),
        cuda_from_toolchain=bool(get("cuda-from-toolchain")),
        opt_in=get("opt-in"),
    )


def _check_opt_in(reader: TableReader, opt_in: str | None) -> None:
    if opt_in is not None and not OPT_IN_REASON.fullmatch(opt_in.strip()):
        reader.error(
            "opt-in",
            "give the reason the recipe is left out of a default build: "
            f"one line of 1 to {OPT_IN_MAX} printable characters (it is "
            "printed when a build skips it)",
        )


def _check_host_requires(reader: TableReader, host_requires: list[str]) -> None:
    for spec in host_requires:
        if not HOST_REQUIRE.fullmatch(spec.strip()):
            reader.error(
                "host-requires",
                f'{spec!r} is not a pkg-config module with an optional bound, like "ucx >= 1.22"',
            )


def _check_upstream(reader: TableReader, upstream: str | None, lock: Lockfile) -> None:
    if upstream is not None:
        names = [p.name for p in lock.upstreams()]
        if upstream not in names:
            reader.error(
                "upstream",
                f"no upstream named '{upstream}' in {lock.path.name} "
                f"(upstreams: {', '.join(names)})",
            )


def _checked_subdir(reader: TableReader, subdir: str) -> str:
    """`subdir`, normalized (a relative POSIX path inside the upstream's tree)."""
    posix = PurePosixPath(subdir)
    if posix.is_absolute() or ".." in posix.parts:
        reader.error("subdir", f"{subdir!r} must be a relative path inside the upstream's tree")
    return str(posix)


def _check_frontend(reader: TableReader, frontend: str) -> None:
    if frontend not in FRONTENDS:
        reader.error("frontend", f"{frontend!r} is not one of {', '.join(FRONTENDS)}")


def _check_build_requires(reader: TableReader, values: _RecipeValues, toolchain: Toolchain) -> None:
    """Bare names the toolchain pins; an ABI-bound wheel needs torch among them."""
    for req in values.build_requires:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", req):
            reader.error(
                "build-requires",
                f"{req!r}: give a bare name; the exact version comes from {toolchain.path.name}",
            )
        elif toolchain.pinned_version(req) is None:
            reader.error("build-requires", f"{req!r} is not pinned in {toolchain.path.name}")
    if values.requires_torch_abi and toolchain.torch is None:
        reader.error("requires-torch-abi", f"{toolchain.path.name} pins no torch")
    if values.requires_torch_abi and "torch" not in {
        canonical_name(r) for r in values.build_requires
    }:
        reader.error("requires-torch-abi", "an ABI-bound wheel must list torch in build-requires")


def _check_depends(reader: TableReader, depends: list[str], name: str) -> None:
    for dep in depends:
        if not RECIPE_NAME.fullmatch(dep) or dep == name:
            reader.error("depends", f"{dep!r} is not another recipe's name")


def _check_cuda_archs(reader: TableReader, cuda_archs: list[str]) -> None:
    for arch in cuda_archs:
        if not SASS_ARCH.fullmatch(arch):
            reader.error("cuda-archs", f"{arch!r} is not a SASS target like 'sm_120a'")


def _checked_mem_per_job(reader: TableReader, mem_text: str) -> int:
    """`mem-per-job` in bytes (1 GiB in place of a size that is not one)."""
    mem_per_job = parse_memory(mem_text)
    if mem_per_job is None or mem_per_job <= 0:
        reader.error("mem-per-job", f'{mem_text!r} is not a size like "4GiB" or "512MiB"')
        mem_per_job = 1 << 30
    return mem_per_job


def _check_version_label(reader: TableReader, values: _RecipeValues) -> None:
    if values.version_label not in ("env", "retag"):
        reader.error(
            "version-label",
            f"{values.version_label!r} is not 'env' (the upstream's version "
            "variable) or 'retag' (sglforge rewrites the wheel)",
        )
    elif values.version_label == "retag" and (
        values.local_version is None or values.base_version is not None
    ):
        reader.error(
            "version-label",
            "'retag' appends local-version to the version the "
            "upstream builds: needs local-version, no base-version",
        )


def _check_local_version(reader: TableReader, values: _RecipeValues) -> None:
    """A valid template giving a PEP 440 local label that names only carried archs."""
    local_version = values.local_version
    if local_version is None:
        return
    has_version = values.base_version is not None
    _check_template(reader, "local-version", local_version, LOCAL_PLACEHOLDERS, has_version)
    fields = _placeholders(local_version)
    usable = fields is not None and set(fields) <= set(LOCAL_PLACEHOLDERS)
    probe = local_version.format(patchset8="0" * 8, cuda="130", key8="0" * 8) if usable else None
    if probe is not None and not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", probe):
        reader.error(
            "local-version",
            f"{local_version!r} does not give a PEP 440 local "
            "label (lowercase alphanumerics separated by '.')",
        )
    elif probe is not None:
        _check_label_archs(reader, probe, values.cuda_archs)


def _check_elf_deps(reader: TableReader, elf_deps: str) -> None:
    if elf_deps not in ELF_DEPS:
        reader.error("elf-deps", f"{elf_deps!r} is not one of {', '.join(ELF_DEPS)}")


def _check_exclude(reader: TableReader, extra_exclude: list[str]) -> None:
    for pattern in extra_exclude:
        if not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
            reader.error("exclude", f"{pattern!r} is not a member pattern like '*.a' or 'build/'")


def _check_merged_tables(reader: TableReader, values: _RecipeValues) -> None:
    """[env] and [cmake-defines] names, and the templates of all three tables."""
    has_version = values.base_version is not None
    for table, entries in (
        ("env", values.env),
        ("cmake-defines", values.cmake_defines),
        ("config-settings", values.config_settings),
    ):
        for key, value in entries.items():
            if (
                table != "config-settings"
                and not ENV_NAME.fullmatch(key)
                and not (table == "cmake-defines" and re.fullmatch(r"[A-Za-z0-9_.+-]+", key))
            ):
                reader.error(table, f"{key!r} is not a valid name")
            for item in value if isinstance(value, tuple) else (value,):
                _check_template(
                    reader, table, item, PLACEHOLDERS, has_version, values.cuda_from_toolchain
                )


def _recipe_digest(source: _RecipeSource, target: Target | None) -> str:
    """The recipe's sha256: of the file's bytes, with the shared defaults and the target."""
    raw = read_capped(source.path, TOML_INPUT_CAP, "recipe")
    digest = hashlib.sha256(raw)
    if source.defaults_bytes:  # the defaults are part of the recipe: changing them changes the key
        digest = hashlib.sha256(
            DEFAULTS_FILE.encode()
            + b"\0"
            + source.defaults_bytes
            + b"\0"
            + source.path.name.encode()
            + b"\0"
            + raw
        )
    if target is not None:  # so is the target: another target, another recipe digest
        digest = hashlib.sha256(
            f"target {target.name} {target.sha256}\0".encode() + digest.hexdigest().encode()
        )
    return digest.hexdigest()


def parse_recipe(
    path: Path, lock: Lockfile, toolchain: Toolchain, target: Target | None = None
) -> Recipe:
    """One recipe, validated; every problem of the file is reported together, in the order
    of the steps below."""
    source = _read_recipe_source(path, target)
    problems = Problems(path)
    reader = TableReader(source.data, problems, "recipe", locate=source.locate)
    name = _check_recipe_name(problems, path)
    values = _read_recipe_values(reader)
    _check_opt_in(reader, values.opt_in)
    _check_host_requires(reader, values.host_requires)
    _check_upstream(reader, values.upstream, lock)
    subdir = _checked_subdir(reader, values.subdir)
    _check_frontend(reader, values.frontend)
    _check_build_requires(reader, values, toolchain)
    _check_depends(reader, values.depends, name)
    _check_cuda_archs(reader, values.cuda_archs)
    mem_per_job = _checked_mem_per_job(reader, values.mem_text)
    _check_version_label(reader, values)
    _check_local_version(reader, values)
    _check_elf_deps(reader, values.elf_deps)
    _check_exclude(reader, values.extra_exclude)
    _check_merged_tables(reader, values)
    problems.raise_if_any()
    return Recipe(
        name=name,
        path=path,
        sha256=_recipe_digest(source, target),
        upstream=values.upstream,
        subdir=subdir,
        frontend=values.frontend,
        isolation=values.isolation,
        build_requires=tuple(values.build_requires),
        depends=tuple(values.depends),
        base_version=values.base_version,
        local_version=values.local_version,
        version_label=values.version_label,
        requires_torch_abi=values.requires_torch_abi,
        cuda_archs=tuple(values.cuda_archs),
        mem_per_job=mem_per_job,
        nvcc_threads=values.nvcc_threads,
        env=values.env,
        cmake_defines=values.cmake_defines,
        config_settings=values.config_settings,
        exclude=(DEFAULT_EXCLUDE if values.exclude_defaults else ()) + tuple(values.extra_exclude),
        elf_deps=values.elf_deps,
        host_requires=tuple(s.strip() for s in values.host_requires),
        cuda_from_toolchain=values.cuda_from_toolchain,
        hints=tuple(literal_arch_hints(source.data, source.text if source.own else "")),
        opt_in=values.opt_in.strip() if values.opt_in else None,
    )


ARCH_LITERAL = re.compile(r"(?<![A-Za-z0-9])(?:sm|compute)_[0-9]{2,3}[af]?(?![A-Za-z0-9])")
ARCH_VALUE = re.compile(r"[0-9]{1,2}\.[0-9][af]?(?:\+PTX)?|[0-9]{2,3}[af]?")
ARCHISH = re.compile(r"arch", re.IGNORECASE)
ASSIGNMENT = re.compile(r"(?:-D)?([A-Za-z0-9_.-]+)=(\S*)")


def _arch_literals(key: str, value: str) -> list[str]:
    text = re.sub(r"\{[^{}]*\}", "", value)  # placeholders are the cure, not the problem
    found = ARCH_LITERAL.findall(text)
    pairs = [(key, text)] + ASSIGNMENT.findall(text)  # "-Dnixl_cuda_arch_list=120" in a list
    for name, part in pairs:
        if ARCHISH.search(name):
            found += [t for t in re.split(r"[\s;,=]+", part) if ARCH_VALUE.fullmatch(t)]
    return list(dict.fromkeys(found))


def _table_key_line(text: str, table: str, key: str) -> int | None:
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]\s*(#.*)?$")
    start = next((i for i, line in enumerate(text.splitlines(), 1) if header.match(line)), None)
    return key_line(text, start, key) if start else None


def literal_arch_hints(data: dict[str, Any], text: str = "") -> list[str]:
    """Advice for each literal arch in [env], [cmake-defines] or [config-settings]: archs
    come from `cuda-archs` through a placeholder (`ARCH_FORMS`), so the audit, the label and
    the compiler cannot disagree."""
    hints = []
    for table in MERGED_TABLES:
        entries = data.get(table)
        if not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            items = value if isinstance(value, list) else [value]
            literals = [
                lit
                for item in items
                if isinstance(item, str)
                for lit in _arch_literals(str(key), item)
            ]
            if literals:
                line = _table_key_line(text, table, str(key)) if text else None
                at = f" (line {line})" if line else ""
                forms = ", ".join("{" + name + "}" for name in ARCH_FORMS)
                hints.append(
                    f"[{table}] {key}{at}: literal arch {', '.join(literals)}; let "
                    f"cuda-archs tell the compiler through a placeholder ({forms})"
                )
    return hints


def recipe_hints(recipes_dir: Path) -> list[tuple[Path, str | None, str]]:
    """(recipe file, its upstream, hint) for every recipe, from the TOML alone (with the
    shared defaults), so `patches lint` can advise even when a recipe does not validate."""
    out: list[tuple[Path, str | None, str]] = []
    try:
        defaults, _ = load_defaults(recipes_dir)
    except SglforgeError:
        defaults = {}
    for path in recipe_files(recipes_dir):
        try:
            own, text = load_toml(path)
        except SglforgeError:
            continue  # reported by every verb that loads recipes
        upstream = own.get("upstream") if isinstance(own.get("upstream"), str) else None
        out += [
            (path, upstream, h) for h in literal_arch_hints(merge_defaults(defaults, own), text)
        ]
    return out


def _check_label_archs(reader: TableReader, label: str, cuda_archs: list[str]) -> None:
    """An `sm…` part of the label must name an arch the wheel carries device code for."""
    carried = {
        re.fullmatch(r"sm_([0-9]+)([af]?)", a).groups()
        for a in cuda_archs
        if SASS_ARCH.fullmatch(a)
    }
    for part in label.split("."):
        match = LABEL_ARCH.fullmatch(part)
        if match is None:
            continue
        digits, suffix = match.groups()
        if not any(d == digits and suffix in ("", s) for d, s in carried):
            reader.error(
                "local-version",
                f"the label names {part} but cuda-archs "
                f"({', '.join(cuda_archs) or 'empty: no device code'}) does not "
                "include it; name archs only for device code the wheel carries "
                '(JIT wheels: "cu{cuda}.{patchset8}")',
            )


def _config_settings(reader: TableReader, table: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for key, value in table.items():
        if isinstance(value, str):
            out[key] = (value,)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = tuple(value)
        else:
            reader.error(
                "config-settings", f"{key!r}: expected a string or a list of strings, got {value!r}"
            )
    return out


def load_recipes(
    recipes_dir: Path, lock: Lockfile, toolchain: Toolchain, target: Target | None = None
) -> dict[str, Recipe]:
    """Every `recipes/*.toml`, validated (with a target's overrides applied); problems in
    several files are reported together."""
    if not recipes_dir.is_dir():
        raise SglforgeError(f"{recipes_dir}: no recipes directory")
    recipes: dict[str, Recipe] = {}
    errors: list[str] = []
    load_defaults(recipes_dir)  # its problems once, not once per recipe
    for path in recipe_files(recipes_dir):
        try:
            recipe = parse_recipe(path, lock, toolchain, target)
        except SglforgeError as exc:
            errors.append(str(exc))
            continue
        recipes[recipe.name] = recipe
    for recipe in recipes.values():
        for dep in recipe.depends:
            if dep not in recipes and not any(dep in e for e in errors):
                errors.append(
                    f"{recipe.path}: recipe, key 'depends': no recipe named '{dep}' "
                    f"(recipes: {', '.join(sorted(recipes))})"
                )
            elif dep in recipes and recipes[dep].opt_in and not recipe.opt_in:
                errors.append(
                    f"{recipe.path}: recipe, key 'depends': '{dep}' is opt-in "
                    f"({recipes[dep].opt_in}); a default build would leave it out "
                    "(make this recipe opt-in too, or drop the dependency)"
                )
    if errors:
        raise SglforgeError("\n".join(errors))
    if not recipes:
        raise SglforgeError(f"{recipes_dir}: no recipes (*.toml)")
    if target is not None:
        check_recipe_names(target, list(recipes))
    return recipes


def select(recipes: dict[str, Recipe], names: list[str]) -> list[str]:
    """`names` plus everything they depend on (when `names` is empty: every recipe that is
    not opt-in; `left_out` says which are skipped then)."""
    for name in names:
        if name not in recipes:
            raise SglforgeError(f"no recipe named '{name}' (recipes: {', '.join(sorted(recipes))})")
    wanted: list[str] = []
    stack = list(names or sorted(n for n, r in recipes.items() if not r.opt_in))
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.append(name)
            stack.extend(recipes[name].depends)
    return sorted(wanted)


def left_out(recipes: dict[str, Recipe], chosen: list[str]) -> list[Recipe]:
    """The opt-in recipes a selection leaves out (sorted by name)."""
    return [recipes[n] for n in sorted(recipes) if recipes[n].opt_in and n not in chosen]


def skip_lines(recipes: dict[str, Recipe], chosen: list[str]) -> list[str]:
    """One line per opt-in recipe left out: what it is, why, and how to build it."""
    return [
        f"skipped {r.name} (opt-in: {r.opt_in}); build it by name: nox -s build -- {r.name}"
        for r in left_out(recipes, chosen)
    ]


__all__ = [
    "ConfigErrors",
    "Recipe",
    "left_out",
    "load_recipes",
    "parse_recipe",
    "recipe_files",
    "recipe_names",
    "select",
    "skip_lines",
]
