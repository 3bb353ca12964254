"""One model per input, one reader: did-you-mean for unknown keys, settings precedence with
origins (`sglforge config`), arch placeholders from `cuda-archs`, shared recipe defaults and
the literal-arch hint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.recipes import load_recipes, parse_recipe, recipe_hints
from sglforge.inputs.settings import load_settings
from sglforge.inputs.toolchain import load_toolchain
from sglforge.smoke.profile import load_profile

REPO = Path(__file__).resolve().parent.parent
GOOD = "0123456789abcdef0123456789abcdef01234567"
LOCK = f"""\
[[source]]
name = "purepy"
url = "https://example.invalid/org/purepy"
commit = "{GOOD}"
"""
TOOLCHAIN = """\
cuda = "13.0"
python = "3.12"
torch = "2.13.0"

[build-requires]
setuptools = "80.9.0"
"""


@pytest.fixture()
def inputs(tmp_path: Path):
    (tmp_path / "upstreams.toml").write_text(LOCK)
    (tmp_path / "toolchain.toml").write_text(TOOLCHAIN)
    (tmp_path / "recipes").mkdir()
    return parse_lockfile(tmp_path / "upstreams.toml"), load_toolchain(tmp_path / "toolchain.toml")


def recipe(tmp_path: Path, text: str, name: str = "purepy") -> Path:
    path = tmp_path / "recipes" / f"{name}.toml"
    path.write_text('upstream = "purepy"\nbuild-requires = ["setuptools"]\n' + text)
    return path


def render(r, **extra) -> dict[str, str]:
    values = {
        "version": "",
        "local": "",
        "patchset8": "abcdef12",
        "cuda": "130",
        "jobs": "1",
        "nvcc_threads": "1",
        "source": "/s",
        "build_dir": "/b",
        "build_root": "/r",
        "cuda_gap_lib": "/g",
        **r.arch_values,
        **extra,
    }
    out = {k: v.format(**values) for k, v in r.env.items()}
    out.update({f"-D{k}": v.format(**values) for k, v in r.cmake_defines.items()})
    out.update(
        {f"-C{k}": " ".join(v.format(**values) for v in vs) for k, vs in r.config_settings.items()}
    )
    return out


# --------------------------------------------------------------------------------------------
# did you mean


def test_recipe_unknown_key_suggests_the_nearest(tmp_path, inputs):
    path = recipe(tmp_path, 'cuda-arch = ["sm_120a"]\n')
    with pytest.raises(ConfigErrors) as info:
        parse_recipe(path, *inputs)
    assert "key 'cuda-arch' (line 3): unknown key — did you mean 'cuda-archs'?" in str(info.value)


def test_unknown_key_far_from_every_key_gets_no_suggestion(tmp_path, inputs):
    path = recipe(tmp_path, 'colour = "blue"\n')
    with pytest.raises(ConfigErrors) as info:
        parse_recipe(path, *inputs)
    assert "key 'colour' (line 3): unknown key" in str(info.value)
    assert "did you mean" not in str(info.value)


def test_settings_unknown_key_suggests_the_nearest(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('build_root = "/tmp/x"\n')
    with pytest.raises(ConfigErrors) as info:
        load_settings(config, environ={})
    assert "key 'build_root' (line 1): unknown key — did you mean 'build-root'?" in str(info.value)


def test_profile_unknown_key_suggests_the_nearest(tmp_path):
    text = (REPO / "profiles" / "dsv4-flash-pd.toml").read_text()
    assert "numa-node = 1" in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace("numa-node = 1", "numa-node = 1\nnuma_nod = 1", 1))
    with pytest.raises(ConfigErrors) as info:
        load_profile(path, tmp_path)
    assert "key 'numa_nod'" in str(info.value)
    assert "unknown key — did you mean 'numa-node'?" in str(info.value)


def test_lockfile_unknown_key_suggests_the_nearest(tmp_path):
    path = tmp_path / "upstreams.toml"
    path.write_text(LOCK.replace("commit =", "comit =") + "")
    with pytest.raises(ConfigErrors) as info:
        parse_lockfile(path)
    assert "key 'comit' (line 4): unknown key — did you mean 'commit'?" in str(info.value)


def test_toolchain_unknown_key_suggests_the_nearest(tmp_path):
    path = tmp_path / "toolchain.toml"
    path.write_text(TOOLCHAIN.replace("torch =", "torhc ="))
    with pytest.raises(ConfigErrors) as info:
        load_toolchain(path)
    assert "key 'torhc' (line 3): unknown key — did you mean 'torch'?" in str(info.value)


# --------------------------------------------------------------------------------------------
# settings: defaults < config file < SGLFORGE_* < CLI, with origins


def sglforge_config(tmp_path: Path, *args: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLFORGE_")}
    environ.update(
        PYTHONPATH=str(REPO / "src"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
        **env,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(REPO), *args, "config"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def line_of(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(name))


def test_config_prints_defaults_with_their_origin(tmp_path):
    out = sglforge_config(tmp_path)
    assert line_of(out, "build-root").split() == [
        "build-root",
        "=",
        "/tmp/sglforge-build",
        "(default)",
    ]
    assert line_of(out, "cache-dir").split()[2:] == [
        str(tmp_path / "xdg-cache" / "sglforge"),
        "(default)",
    ]
    assert "(not present)" in line_of(out, "config-file")
    assert "mirrors: (none)" in out
    assert line_of(out, "project").split()[2:] == [str(REPO), "(cli:", "--project)"]


def test_config_file_then_env_then_cli_each_win_and_say_so(tmp_path):
    config = tmp_path / "xdg" / "sglforge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        'cache-dir = "/file/cache"\nbuild-root = "/file/root"\n'
        'mem-available = "8GiB"\n'
        '[mirrors]\n"https://github.com/" = "/file/mirror/"\n'
        '"https://gitlab.com/" = "/file/gitlab/"\n'
    )
    out = sglforge_config(tmp_path)
    origin = f"(config: {config})"
    assert line_of(out, "cache-dir").split()[2:] == ["/file/cache", *origin.split()]
    assert line_of(out, "build-root").split()[2:] == ["/file/root", *origin.split()]
    assert line_of(out, "mem-available").split()[2:] == ["8GiB", *origin.split()]
    assert line_of(out, "config-file").split()[2:] == [str(config), "(default)"]

    out = sglforge_config(
        tmp_path, SGLFORGE_BUILD_ROOT="/env/root", SGLFORGE_MEM_AVAILABLE="1536MiB"
    )
    assert line_of(out, "cache-dir").split()[2:] == ["/file/cache", *origin.split()]
    assert line_of(out, "build-root").split()[2:] == ["/env/root", "(env:", "SGLFORGE_BUILD_ROOT)"]
    assert line_of(out, "mem-available").split()[2:] == [
        "1536MiB",
        "(env:",
        "SGLFORGE_MEM_AVAILABLE)",
    ]

    out = sglforge_config(
        tmp_path,
        "--build-root",
        "/cli/root",
        "--cache-dir",
        "/cli/cache",
        "--mirror",
        "https://github.com/=/cli/mirror/",
        SGLFORGE_BUILD_ROOT="/env/root",
        SGLFORGE_CACHE_DIR="/env/cache",
    )
    assert line_of(out, "build-root").split()[2:] == ["/cli/root", "(cli:", "--build-root)"]
    assert line_of(out, "cache-dir").split()[2:] == ["/cli/cache", "(cli:", "--cache-dir)"]
    assert "  https://github.com/ -> /cli/mirror/   (cli: --mirror)" in out
    assert f"  https://gitlab.com/ -> /file/gitlab/   {origin}" in out
    assert "/file/mirror/" not in out


def test_config_file_named_by_env_and_bad_env_values_are_errors(tmp_path):
    config = tmp_path / "elsewhere.toml"
    config.write_text('cache-dir = "/named/cache"\n')
    out = sglforge_config(tmp_path, SGLFORGE_CONFIG=str(config))
    assert line_of(out, "config-file").split()[2:] == [str(config), "(env:", "SGLFORGE_CONFIG)"]
    assert line_of(out, "cache-dir").split()[2] == "/named/cache"
    with pytest.raises(
        SglforgeError, match="SGLFORGE_BUILD_ROOT='rel/root': must be an absolute path"
    ):
        load_settings(environ={"SGLFORGE_BUILD_ROOT": "rel/root", "XDG_CONFIG_HOME": str(tmp_path)})
    with pytest.raises(SglforgeError, match="SGLFORGE_MEM_AVAILABLE='lots': expected a size"):
        load_settings(environ={"SGLFORGE_MEM_AVAILABLE": "lots", "XDG_CONFIG_HOME": str(tmp_path)})
    config.write_text('mem-available = "plenty"\n')
    with pytest.raises(ConfigErrors, match="key 'mem-available' .*'plenty' expected a size"):
        load_settings(config, environ={})


# --------------------------------------------------------------------------------------------
# cuda-archs -> placeholders


ARCH_RECIPE = """\
[env]
TORCH_CUDA_ARCH_LIST = "{torch_cuda_arch_list}"
FLASHINFER_CUDA_ARCH_LIST = "{flashinfer_cuda_arch_list}"
[cmake-defines]
CMAKE_CUDA_ARCHITECTURES = "{cmake_cuda_architectures}"
SGL_KERNEL_CUDA_ARCHS = "{sgl_kernel_cuda_archs}"
[config-settings]
"setup-args" = ["-Dnixl_cuda_arch_list={nixl_cuda_arch_list}"]
"""


@pytest.mark.parametrize(
    "archs, torch, cmake, nixl",
    [
        (["sm_120a"], "12.0a", "120a", "120"),
        (["sm_120f"], "12.0f", "120f", "120"),
        (["sm_120a", "sm_90a", "sm_100f"], "12.0a 9.0a 10.0f", "120a;90a;100f", "120,90,100"),
    ],
)
def test_arch_placeholders_render_from_cuda_archs(tmp_path, inputs, archs, torch, cmake, nixl):
    quoted = ", ".join(f'"{a}"' for a in archs)
    r = parse_recipe(recipe(tmp_path, f"cuda-archs = [{quoted}]\n" + ARCH_RECIPE), *inputs)
    assert render(r) == {
        "TORCH_CUDA_ARCH_LIST": torch,
        "FLASHINFER_CUDA_ARCH_LIST": torch,
        "-DCMAKE_CUDA_ARCHITECTURES": cmake,
        "-DSGL_KERNEL_CUDA_ARCHS": cmake,
        "-Csetup-args": f"-Dnixl_cuda_arch_list={nixl}",
    }
    assert r.hints == ()


def test_shipped_recipes_tell_the_compiler_through_cuda_archs():
    lock = parse_lockfile(REPO / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(REPO / "lockfiles" / "toolchain.toml")
    recipes = load_recipes(REPO / "recipes", lock, toolchain)
    jit = recipes["flashinfer-jit-cache"]
    assert jit.cuda_archs == ("sm_120f",)
    assert render(jit)["FLASHINFER_CUDA_ARCH_LIST"] == "12.0f"
    kernel = recipes["sglang-kernel"]
    # the sm_12x family target (issue 36): one sglang-kernel wheel for CC 12.0 and 12.1
    assert kernel.cuda_archs == ("sm_120f",)
    assert render(kernel)["-DSGL_KERNEL_CUDA_ARCHS"] == "120f"
    labels = {n: r.local_label("abcdef12", "130") for n, r in recipes.items()}
    assert labels == {
        "flashinfer-jit-cache": "sm120.cu130.abcdef12",
        "sglang-kernel": "sm120.cu130.abcdef12",
        "nixl-cu13": "sm120.cu130.abcdef12",
        **{
            n: "cu130.abcdef12"
            for n in ("flashinfer-python", "nixl", "sgl-deep-gemm", "sglang", "tilelang")
        },
    }
    # nixl-cu13 carries device code since it builds NIXL-EP: meson's arch option comes from
    # cuda-archs (numbers only), so no shipped recipe names an arch literally any more.
    nixl = recipes["nixl-cu13"]
    assert nixl.cuda_archs == ("sm_120",)
    setup_args = render(nixl, site_packages="/sp")["-Csetup-args"].split(" ")
    assert "-Dnixl_cuda_arch_list=120" in setup_args
    hints = {n: r.hints for n, r in recipes.items() if r.hints}
    assert hints == {}
    from_lint = {(p.stem, h) for p, _, h in recipe_hints(REPO / "recipes")}
    assert from_lint == {(n, h) for n, hs in hints.items() for h in hs}


@pytest.mark.parametrize(
    "table, entry, literals",
    [
        ("env", 'TORCH_CUDA_ARCH_LIST = "12.0a 9.0"', "12.0a, 9.0"),
        ("env", 'FLASHINFER_CUDA_ARCH_LIST = "12.0f"', "12.0f"),
        (
            "env",
            'NVCC_APPEND_FLAGS = "-gencode=arch=compute_120a,code=sm_120a"',
            "compute_120a, sm_120a",
        ),
        ("cmake-defines", 'SGL_KERNEL_CUDA_ARCHS = "120a"', "120a"),
        ("cmake-defines", 'CMAKE_CUDA_ARCHITECTURES = "{cmake_cuda_architectures};90a"', "90a"),
        ("config-settings", '"setup-args" = ["-Dnixl_cuda_arch_list=120,90"]', "120, 90"),
    ],
)
def test_a_literal_arch_is_a_hint_not_an_error(tmp_path, inputs, table, entry, literals):
    r = parse_recipe(recipe(tmp_path, f'cuda-archs = ["sm_120a"]\n[{table}]\n{entry}\n'), *inputs)
    assert len(r.hints) == 1, r.hints
    assert f"[{table}] " in r.hints[0] and "(line 5)" in r.hints[0]
    assert f"literal arch {literals};" in r.hints[0]
    assert "{cmake_cuda_architectures}" in r.hints[0]


def test_arch_free_values_are_not_hinted(tmp_path, inputs):
    r = parse_recipe(
        recipe(
            tmp_path,
            """\
[env]
SGL_KERNEL_ENABLE_SM100A = "OFF"
NVCC_THREADS = "{nvcc_threads}"
SETUPTOOLS_SCM_PRETEND_VERSION = "0.5.23"
[cmake-defines]
SGL_KERNEL_COMMON_OPS_VARIANTS = "sm100"
""",
        ),
        *inputs,
    )
    assert r.hints == ()


# --------------------------------------------------------------------------------------------
# recipes/_defaults.toml


def test_defaults_apply_and_recipes_override_only_what_differs(tmp_path, inputs):
    (tmp_path / "recipes" / "_defaults.toml").write_text("""\
local-version = "cu{cuda}.{patchset8}"
mem-per-job = "3GiB"
[env]
COMMON = "1"
SHARED = "default"
""")
    plain = recipe(tmp_path, "", name="plain")
    device = recipe(
        tmp_path,
        """\
local-version = "sm120.cu{cuda}.{patchset8}"
cuda-archs = ["sm_120a"]
[env]
SHARED = "mine"
""",
        name="device",
    )
    recipes = load_recipes(tmp_path / "recipes", *inputs)
    assert sorted(recipes) == ["device", "plain"]  # _defaults.toml is not a recipe
    assert recipes["plain"].local_label("ab", "130") == "cu130.ab"
    assert recipes["device"].local_label("ab", "130") == "sm120.cu130.ab"
    assert recipes["plain"].mem_per_job == recipes["device"].mem_per_job == 3 << 30
    assert recipes["plain"].env == {"COMMON": "1", "SHARED": "default"}
    assert recipes["device"].env == {"COMMON": "1", "SHARED": "mine"}
    # the defaults are part of each recipe's identity (content key, provenance)
    before = parse_recipe(plain, *inputs).sha256
    (tmp_path / "recipes" / "_defaults.toml").write_text('local-version = "cu{cuda}"\n')
    assert parse_recipe(plain, *inputs).sha256 != before
    assert parse_recipe(device, *inputs).local_label("ab", "130") == "sm120.cu130.ab"


def test_defaults_file_is_validated_like_a_recipe(tmp_path, inputs):
    recipe(tmp_path, "")
    defaults = tmp_path / "recipes" / "_defaults.toml"
    defaults.write_text('upstream = "purepy"\nnvcc-thread = 2\nmem-per-job = 4\n')
    with pytest.raises(SglforgeError) as info:
        load_recipes(tmp_path / "recipes", *inputs)
    text = str(info.value)
    assert str(defaults) in text
    assert "key 'upstream' (line 1): belongs in each recipe" in text
    assert "key 'nvcc-thread' (line 2): unknown key — did you mean 'nvcc-threads'?" in text
    assert "key 'mem-per-job' (line 3): expected a string" in text


def test_a_label_from_the_defaults_is_still_checked_against_cuda_archs(tmp_path, inputs):
    (tmp_path / "recipes" / "_defaults.toml").write_text(
        'local-version = "sm120.cu{cuda}.{patchset8}"\n'
    )
    with pytest.raises(ConfigErrors, match="the label names sm120 but cuda-archs"):
        parse_recipe(recipe(tmp_path, ""), *inputs)
