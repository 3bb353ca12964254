"""nixl-cu13 takes UCX from the libucx-cu13 wheel at run time (patches/nixl/0004 and the recipe).

Three committed files have to agree for the wheel's UCX plugin to load on a serving host:
the toolchain's libucx-cu13 version (what the plugin is compiled against), the dependency
patch 0004 adds to the wheel (what pip installs next to it), and the RPATH entry the recipe
gives the plugin (where the loader looks). These tests read the committed files; the ELF and
its resolution use the same audit the build runs (wheel/audit.py), no network.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.recipes import parse_recipe
from sglforge.inputs.toolchain import load_toolchain
from sglforge.wheel import audit
from tests.test_wheel_meta import compile_so

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ".nixl_cu13.mesonpy.libs/plugins/libplugin_UCX.so"  # where meson-python installs it
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


def recipe_setup_arg(option: str) -> str:
    lock = parse_lockfile(ROOT / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    recipe = parse_recipe(ROOT / "recipes" / "nixl-cu13.toml", lock, toolchain)
    values = [
        a.split("=", 1)[1]
        for a in recipe.config_settings["setup-args"]
        if a.startswith(f"-D{option}=")
    ]
    assert len(values) == 1, f"recipes/nixl-cu13.toml sets -D{option} {len(values)} times"
    return values[0].format(site_packages="/SITE")  # the only placeholder the recipe uses


def patched_dependencies() -> list[str]:
    patch = (ROOT / "patches" / "nixl" / "0004-ucx-rpath-libucx-wheel.patch").read_text()
    added = [line for line in patch.splitlines() if line.startswith("+dependencies = ")]
    assert len(added) == 1, "patch 0004 no longer sets the wheel's dependencies"
    return re.findall(r'"([^"]+)"', added[0])


def test_the_wheel_requires_the_libucx_it_was_built_against():
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    built_against = toolchain.build_requires["libucx-cu13"]
    assert f"libucx-cu13=={built_against}" in patched_dependencies()
    series = (ROOT / "patches" / "nixl" / "series").read_text().split()
    assert "0004-ucx-rpath-libucx-wheel.patch" in series


def test_the_recipe_builds_static_what_meson_python_cannot_install():
    """liburing (a meson subproject) static; subprojects not installed: nothing of theirs
    can be missing from the wheel at run time (patch 0003 makes prometheus-cpp static)."""
    assert recipe_setup_arg("liburing:default_library") == "static"
    lock = parse_lockfile(ROOT / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    recipe = parse_recipe(ROOT / "recipes" / "nixl-cu13.toml", lock, toolchain)
    assert recipe.config_settings["install-args"] == ("--skip-subprojects",)
    patch = (ROOT / "patches" / "nixl" / "0003-prometheus-cpp-static.patch").read_text()
    assert "+    'BUILD_SHARED_LIBS': 'OFF'," in patch


@needs_cc
def test_the_plugin_rpath_reaches_libucp_of_the_required_wheel(tmp_path):
    """The RPATH entry from the recipe, on an ELF installed where the UCX plugin is, resolves
    libucp.so.0 in libucx-cu13's libucx/lib, and only because the wheel requires it."""
    entry = recipe_setup_arg("ucx_install_rpath")
    # meson-python rewrites every entry starting with "$ORIGIN/" to its own libs directory;
    # the braced spelling is what survives (mesonpy._rpath), and ld.so reads both alike.
    assert entry.startswith("${ORIGIN}/")
    compile_so(tmp_path, "ucp", soname="libucp.so.0")
    shutil.copy(tmp_path / "libucp.so", tmp_path / "libucp.so.0")
    plugin = compile_so(tmp_path, "plugin", links=(":libucp.so.0",), rpath=f"$ORIGIN/..:{entry}")
    world = audit.LibraryWorld(
        site_dirs={"libucx/lib": {"libucp.so.0": "libucx-cu13"}}, system=frozenset({"libc.so.6"})
    )
    deps = audit.resolve_dependencies(
        {PLUGIN: plugin}, world, torch_bound=False, requires=patched_dependencies()
    )
    ucp = next(d for d in deps if d.library == "libucp.so.0")
    assert (ucp.source, ucp.detail) == ("libucx-cu13", "libucx/lib")
    deps = audit.resolve_dependencies(
        {PLUGIN: plugin}, world, torch_bound=False, requires=["torch", "numpy"]
    )
    ucp = next(d for d in deps if d.library == "libucp.so.0")
    assert ucp.source is None and "which the wheel does not require" in ucp.detail


# NIXL-EP (patches/nixl/0005, 0006; recipes/nixl-cu13.toml): the module nixl_ep_cu13/ that the
# nixl meta wheel's `nixl_ep` dispatcher re-exports, and whose Buffer SGLang imports.
EP_MODULE = "nixl_ep_cu13/nixl_ep_cpp_torch211.cpython-312-x86_64-linux-gnu.so"


def nixl_recipe(target: str | None = None):
    from sglforge.inputs.targets import load_target

    lock = parse_lockfile(ROOT / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    return parse_recipe(
        ROOT / "recipes" / "nixl-cu13.toml",
        lock,
        toolchain,
        load_target(ROOT, target) if target else None,
    )


def test_nixl_ep_is_built_for_the_archs_of_each_target():
    """meson takes arch numbers only: the product's sm_120 and the H200's sm_90 reach
    -Dnixl_cuda_arch_list through the placeholder, never a literal the audit cannot see."""
    from sglforge.inputs.recipes import ARCH_FORMS

    setup_args = nixl_recipe().config_settings["setup-args"]
    assert "-Dbuild_nixl_ep=true" in setup_args
    assert "-Dnixl_cuda_arch_list={nixl_cuda_arch_list}" in setup_args
    form = ARCH_FORMS["nixl_cuda_arch_list"]
    assert form(nixl_recipe().cuda_archs) == "120"
    assert form(nixl_recipe("h200-verify").cuda_archs) == "90"
    series = (ROOT / "patches" / "nixl" / "series").read_text().split()
    assert {
        "0005-nixl-ep-wheel-relative-rpath.patch",
        "0006-nixl-ep-without-rdma-core-headers.patch",
    } <= set(series)


@needs_cc
def test_the_nixl_ep_rpath_reaches_torch_cudart_and_ucx_of_required_wheels(tmp_path):
    """The recipe's -Dnixl_ep_rpath on an ELF installed where the module is resolves libtorch
    (torch), libcudart.so.13 (nvidia-cuda-runtime, through torch) and libucp.so.0
    (libucx-cu13); libtorch counts only because the recipe pins torch (requires-torch-abi)."""
    entry = recipe_setup_arg("nixl_ep_rpath")
    parts = entry.split(":")
    assert parts and all(p.startswith("${ORIGIN}/") for p in parts), parts  # braced: kept
    assert nixl_recipe().requires_torch_abi
    compile_so(tmp_path, "torch")
    compile_so(tmp_path, "cudart", soname="libcudart.so.13")
    shutil.copy(tmp_path / "libcudart.so", tmp_path / "libcudart.so.13")
    compile_so(tmp_path, "ucp", soname="libucp.so.0")
    shutil.copy(tmp_path / "libucp.so", tmp_path / "libucp.so.0")
    module = compile_so(
        tmp_path, "ep", links=("torch", ":libcudart.so.13", ":libucp.so.0"), rpath=entry
    )
    world = audit.LibraryWorld(
        site_dirs={
            "torch/lib": {"libtorch.so": "torch"},
            "nvidia/cu13/lib": {"libcudart.so.13": "nvidia-cuda-runtime"},
            "libucx/lib": {"libucp.so.0": "libucx-cu13"},
        },
        system=frozenset({"libc.so.6"}),
        requires={"torch": ("nvidia-cuda-runtime==13.0.96",)},
    )
    requires = [r for r in patched_dependencies() if r != "torch"] + ["torch==2.11.0"]
    deps = audit.resolve_dependencies(
        {EP_MODULE: module}, world, torch_bound=True, requires=requires
    )
    found = {d.library: (d.source, d.detail) for d in deps}
    assert found["libtorch.so"] == ("torch", "torch/lib")
    assert found["libcudart.so.13"] == ("nvidia-cuda-runtime", "nvidia/cu13/lib")
    assert found["libucp.so.0"] == ("libucx-cu13", "libucx/lib")
    unpinned = audit.resolve_dependencies(
        {EP_MODULE: module}, world, torch_bound=False, requires=patched_dependencies()
    )
    torch_lib = next(d for d in unpinned if d.library == "libtorch.so")
    assert torch_lib.source is None and "requires-torch-abi" in torch_lib.detail
