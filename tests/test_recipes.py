"""Recipe and toolchain validation: every problem names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.recipes import left_out, load_recipes, parse_recipe, select, skip_lines
from sglforge.inputs.toolchain import load_toolchain

LOCK = """\
[[source]]
name = "purepy"
url = "https://example.invalid/org/purepy"
commit = "0123456789abcdef0123456789abcdef01234567"
"""
TOOLCHAIN = """\
cuda = "13.0"
python = "3.12"
torch = "2.13.0"

[build-requires]
setuptools = "80.9.0"
scikit-build-core = "0.11.6"
"""


@pytest.fixture()
def inputs(tmp_path: Path):
    (tmp_path / "upstreams.toml").write_text(LOCK)
    (tmp_path / "toolchain.toml").write_text(TOOLCHAIN)
    (tmp_path / "recipes").mkdir()
    return parse_lockfile(tmp_path / "upstreams.toml"), load_toolchain(tmp_path / "toolchain.toml")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "recipes" / f"{name}.toml"
    path.write_text(text)
    return path


def test_valid_recipe_parses_into_typed_model(tmp_path, inputs):
    lock, toolchain = inputs
    path = write(
        tmp_path,
        "purepy",
        """\
upstream = "purepy"
build-requires = ["setuptools", "torch"]
base-version = "1.2.3"
local-version = "sm120.cu{cuda}.{patchset8}"
requires-torch-abi = true
cuda-archs = ["sm_120a", "sm_90a"]
mem-per-job = "6GiB"
[env]
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PUREPY = "{version}"
[cmake-defines]
FETCHCONTENT_QUIET = "OFF"
""",
    )
    recipe = parse_recipe(path, lock, toolchain)
    assert recipe.name == "purepy" and recipe.upstream == "purepy"
    assert recipe.mem_per_job == 6 << 30
    assert recipe.local_label("abcdef12", toolchain.cuda_tag) == "sm120.cu130.abcdef12"
    assert recipe.version("x") == "1.2.3+x"
    assert recipe.cmake_cuda_architectures == "120a;90a"
    assert recipe.torch_cuda_arch_list == "12.0a 9.0a"


def test_unknown_keys_and_bad_values_are_all_reported_with_file_key_and_line(tmp_path, inputs):
    lock, toolchain = inputs
    path = write(
        tmp_path,
        "purepy",
        """\
upstream = "nope"
frontend = "make"
build-requires = ["setuptools>=70", "numpy"]
cuda-archs = ["120a"]
mem-per-job = "lots"
local-version = "Fork_{patchset8}"
colour = "blue"
[env]
X = "{verison}"
""",
    )
    with pytest.raises(SglforgeError) as info:
        parse_recipe(path, lock, toolchain)
    text = str(info.value)
    assert str(path) in text
    for expected in (
        "key 'upstream' (line 1): no upstream named 'nope'",
        "key 'frontend' (line 2)",
        "give a bare name",
        "'numpy' is not pinned in toolchain.toml",
        "key 'cuda-archs' (line 4): '120a' is not a SASS target",
        "key 'mem-per-job' (line 5)",
        "key 'local-version' (line 6)",
        "key 'colour' (line 7): unknown key",
        "unknown placeholder {verison}",
    ):
        assert expected in text, expected


def test_torch_abi_needs_torch_build_requirement(tmp_path, inputs):
    lock, toolchain = inputs
    path = write(tmp_path, "k", 'upstream = "purepy"\nrequires-torch-abi = true\n')
    with pytest.raises(SglforgeError, match="must list torch in build-requires"):
        parse_recipe(path, lock, toolchain)


def test_version_placeholder_needs_base_version(tmp_path, inputs):
    lock, toolchain = inputs
    path = write(tmp_path, "k", 'upstream = "purepy"\n[env]\nV = "{version}"\n')
    with pytest.raises(SglforgeError, match=r"\{version\} needs 'base-version'"):
        parse_recipe(path, lock, toolchain)


def test_unknown_dependency_and_selection(tmp_path, inputs):
    lock, toolchain = inputs
    write(tmp_path, "a", 'upstream = "purepy"\ndepends = ["b"]\n')
    write(tmp_path, "b", 'upstream = "purepy"\n')
    recipes = load_recipes(tmp_path / "recipes", lock, toolchain)
    assert select(recipes, ["a"]) == ["a", "b"]
    with pytest.raises(SglforgeError, match="no recipe named 'zzz'"):
        select(recipes, ["zzz"])
    write(tmp_path, "c", 'upstream = "purepy"\ndepends = ["missing"]\n')
    with pytest.raises(SglforgeError, match="no recipe named 'missing'"):
        load_recipes(tmp_path / "recipes", lock, toolchain)


def test_opt_in_recipe_is_left_out_of_a_default_selection_and_built_by_name(tmp_path, inputs):
    lock, toolchain = inputs
    write(tmp_path, "a", 'upstream = "purepy"\n')
    write(
        tmp_path,
        "slow",
        'upstream = "purepy"\ndepends = ["a"]\nopt-in = "2,723 nvcc TUs; runtime JIT instead"\n',
    )
    recipes = load_recipes(tmp_path / "recipes", lock, toolchain)
    assert recipes["slow"].opt_in == "2,723 nvcc TUs; runtime JIT instead"
    assert recipes["a"].opt_in is None
    assert select(recipes, []) == ["a"]
    assert select(recipes, ["slow"]) == ["a", "slow"]
    assert [r.name for r in left_out(recipes, ["a"])] == ["slow"]
    assert skip_lines(recipes, ["a"]) == [
        (
            "skipped slow (opt-in: 2,723 nvcc TUs; runtime JIT instead); build it by name: "
            "nox -s build -- slow"
        )
    ]
    assert skip_lines(recipes, ["a", "slow"]) == []


def test_opt_in_needs_a_printable_reason_and_no_default_recipe_may_depend_on_it(tmp_path, inputs):
    lock, toolchain = inputs
    for bad in ('""', '"   "', '"two\\nlines"', '"\\u001b[31mred"', f'"{"x" * 301}"'):
        path = write(tmp_path, "slow", f'upstream = "purepy"\nopt-in = {bad}\n')
        with pytest.raises(SglforgeError, match=r"(?s)slow.toml.*'opt-in' \(line 2\).*reason"):
            parse_recipe(path, lock, toolchain)
    write(tmp_path, "slow", 'upstream = "purepy"\nopt-in = "hours"\n')
    write(tmp_path, "a", 'upstream = "purepy"\ndepends = ["slow"]\n')
    with pytest.raises(
        SglforgeError,
        match=r"a.toml: recipe, key 'depends': 'slow' is opt-in "
        r"\(hours\); a default build would leave it out",
    ):
        load_recipes(tmp_path / "recipes", lock, toolchain)
    (tmp_path / "recipes" / "a.toml").unlink()
    (tmp_path / "recipes" / "_defaults.toml").write_text('opt-in = "everything"\n')
    with pytest.raises(SglforgeError, match="(?s)'opt-in'.*belongs in each recipe"):
        load_recipes(tmp_path / "recipes", lock, toolchain)


def test_key8_placeholder_fills_from_the_content_key(tmp_path, inputs):
    lock, toolchain = inputs
    path = write(
        tmp_path, "k", 'upstream = "purepy"\nlocal-version = "cu{cuda}.{patchset8}.{key8}"\n'
    )
    recipe = parse_recipe(path, lock, toolchain)
    assert recipe.local_label("abcdef12", "130", "0123abcd") == "cu130.abcdef12.0123abcd"
    with pytest.raises(ValueError, match="uses \\{key8\\}: pass the content key"):
        recipe.local_label("abcdef12", "130")  # never a label ending in '.'
    path.write_text('upstream = "purepy"\nlocal-version = "cu{cuda}.{key8x}"\n')
    with pytest.raises(SglforgeError, match="unknown placeholder \\{key8x\\}.*\\{key8\\}"):
        parse_recipe(path, lock, toolchain)


def test_toolchain_rejects_ranges_unknown_keys_and_torch_in_table(tmp_path):
    path = tmp_path / "toolchain.toml"
    path.write_text(
        'cuda = "13"\npython = "3.12"\ngcc = "12"\n[build-requires]\n'
        'setuptools = ">=70"\ntorch = "2.13.0"\n'
    )
    with pytest.raises(SglforgeError) as info:
        load_toolchain(path)
    text = str(info.value)
    assert "key 'cuda' (line 1)" in text and "key 'gcc' (line 3): unknown key" in text
    assert "key 'setuptools' (line 5)" in text and "top-level 'torch' key" in text


def test_shipped_recipes_and_toolchain_are_valid(tmp_path):
    root = Path(__file__).resolve().parents[1]
    text = (root / "lockfiles" / "upstreams.toml").read_text()
    if 'name = "sglang"' not in text:  # the sglang pin is chosen in the "real pins" issue
        text += (
            '\n[[source]]\nname = "sglang"\nurl = "https://github.com/sgl-project/sglang"'
            '\ncommit = "0000000000000000000000000000000000000000"\n'
        )
    (tmp_path / "upstreams.toml").write_text(text)
    lock = parse_lockfile(tmp_path / "upstreams.toml")
    toolchain = load_toolchain(root / "lockfiles" / "toolchain.toml")
    recipes = load_recipes(root / "recipes", lock, toolchain)
    assert {
        "sglang",
        "sglang-kernel",
        "flashinfer-python",
        "flashinfer-jit-cache",
        "sgl-deep-gemm",
        "tilelang",
        "nixl-cu13",
    } <= set(recipes)
    assert recipes["sglang-kernel"].requires_torch_abi
    # the sm_12x family target (issue 36): one set for CC 12.0 and 12.1, one flag for 0001
    assert recipes["sglang-kernel"].cuda_archs == ("sm_120f",)
    assert recipes["sglang-kernel"].arch_values["sgl_kernel_cuda_archs"] == "120f"
    assert recipes["flashinfer-jit-cache"].depends == ("flashinfer-python",)
    # opt-in with its measured reason: a default build leaves it out, a build by name not
    assert "2,723 nvcc TUs" in recipes["flashinfer-jit-cache"].opt_in
    assert "flashinfer-jit-cache" not in select(recipes, [])
    assert select(recipes, ["flashinfer-jit-cache"]) == [
        "flashinfer-jit-cache",
        "flashinfer-python",
    ]
    assert not [n for n, r in recipes.items() if r.opt_in and n != "flashinfer-jit-cache"]
    assert recipes["sgl-deep-gemm"].elf_deps == "error"  # patch 0003 links $ORIGIN RPATHs
