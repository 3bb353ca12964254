"""The nvcc wrapper's links: -L directories in the build interpreter's prefix reach the host
linker only, because nvlink writes its own -L list into every cubin it links
(.note.nv.tkinfo), so a relocatable-device-code module linked against torch/lib of the
toolchain venv carried that checkout's path (found by the leak scan on NIXL-EP, 2026-12-01).

Real nvcc 13 (CUDA at /usr/local/cuda on every host here), real cc, real device link.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sglforge.builder import environment

NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
needs_nvcc = pytest.mark.skipif(
    not Path(NVCC).exists() or shutil.which("cc") is None,
    reason="needs CUDA's nvcc and a C compiler",
)
RDC = ["-rdc=true", "-gencode", "arch=compute_120,code=sm_120", "-Xcompiler", "-fPIC"]


def _objects(tmp: Path) -> list[str]:
    (tmp / "k.cu").write_text(
        "__device__ int g(int x);\n"
        "__global__ void k(int* p) { p[0] = g(p[0]); }\n"
        'extern "C" int foo(void);\n'
        "int launch(int* p) { k<<<1, 1>>>(p); return foo(); }\n"
    )
    (tmp / "g.cu").write_text("__device__ int g(int x) { return x + 1; }\n")
    for name in ("k", "g"):
        subprocess.run(
            [NVCC, *RDC, "-c", f"{name}.cu", "-o", f"{name}.o"],
            cwd=tmp,
            check=True,
            capture_output=True,
        )
    return ["k.o", "g.o"]


def _library(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "foo.c").write_text("int foo(void) { return 1; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(directory / "libfoo.so"), str(directory / "foo.c")],
        check=True,
        capture_output=True,
    )


def _link(tmp: Path, wrapper: Path, prefixes: list[Path], args: list[str]) -> bytes:
    env = {
        **os.environ,
        "SGLFORGE_REAL_NVCC": NVCC,
        "SGLFORGE_BUILD_ROOT": str(tmp),
        "SGLFORGE_HOST_LINK_PREFIXES": "\n".join(map(str, prefixes)),
    }
    env.pop("SGLFORGE_COMPILER_CACHE", None)
    out = tmp / "m.so"
    out.unlink(missing_ok=True)
    subprocess.run(
        [str(wrapper), "-shared", *RDC, *_objects(tmp), *args, "-o", str(out)],
        cwd=tmp,
        env=env,
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


def _needed(data: bytes, tmp: Path) -> str:
    (tmp / "probe.so").write_bytes(data)
    return subprocess.run(
        ["readelf", "-d", str(tmp / "probe.so")], check=True, capture_output=True, text=True
    ).stdout


@needs_nvcc
@pytest.mark.parametrize(
    "form", ["-L{}", "-L {}", "--library-path={}", "--library-path {}", "-Xlinker -L{}"]
)
def test_a_library_dir_in_the_prefix_links_without_entering_the_cubin(tmp_path, form):
    prefix = tmp_path / "venv-of-this-checkout"
    _library(prefix / "lib")
    wrapper = environment.write_nvcc_wrapper(tmp_path / "bin")
    link_args = form.format(prefix / "lib").split(" ") + ["-lfoo"]
    module = _link(tmp_path, wrapper, [prefix], link_args)
    assert str(prefix).encode() not in module
    assert "[libfoo.so]" in _needed(module, tmp_path)  # the host linker still found it
    assert b"-arch sm_120 -m 64" in module  # the device link ran and recorded its options


@needs_nvcc
def test_other_library_dirs_are_passed_as_given(tmp_path):
    """Only the prefixes named are moved: any other -L stays nvlink's too (what nvcc does)."""
    elsewhere = tmp_path / "elsewhere"
    _library(elsewhere / "lib")
    wrapper = environment.write_nvcc_wrapper(tmp_path / "bin")
    module = _link(
        tmp_path, wrapper, [tmp_path / "venv-of-this-checkout"], [f"-L{elsewhere / 'lib'}", "-lfoo"]
    )
    assert str(elsewhere / "lib").encode() in module
    unwrapped = _link(tmp_path, wrapper, [], [f"-L{elsewhere / 'lib'}", "-lfoo"])
    assert str(elsewhere / "lib").encode() in unwrapped


def test_a_build_moves_the_toolchain_interpreters_own_library_dirs(tmp_path):
    """Wired up: the environment every build starts from (base_env) names the running
    interpreter's prefix, so its wrapper moves -L<sys.prefix>/lib and nothing else."""
    import json
    import sys

    from sglforge.base.buildroot import BuildRoot

    fake = tmp_path / "fake-nvcc"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    root = BuildRoot(tmp_path / "root")
    for d in (root.home, root.tmp):
        d.mkdir(parents=True, exist_ok=True)
    env = environment.base_env(root, tmp_path, fake, 0)
    environment.write_nvcc_wrapper(root.tools_bin)
    own = f"{sys.prefix}/lib"
    argv = json.loads(
        subprocess.run(
            [env["CUDACXX"], "-shared", "a.o", f"-L{own}", "-L/usr/lib", "-o", "m.so"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    # (then the prefix-map flags every invocation gets)
    assert argv[:7] == ["-shared", "a.o", "-Xlinker", f"-L{own}", "-L/usr/lib", "-o", "m.so"]


@pytest.mark.parametrize(
    "given, expected",
    [
        (["-L", "/other/lib"], ["-L", "/other/lib"]),  # untouched, as given
        (["-L/P/lib"], ["-Xlinker", "-L/P/lib"]),
        (["-L", "/P/lib"], ["-Xlinker", "-L/P/lib"]),
        (["--library-path=/P/lib,/other"], ["--library-path=/other", "-Xlinker", "-L/P/lib"]),
        (["-Xlinker", "-L/P/lib"], ["-Xlinker", "-L/P/lib"]),  # already host-only
        (["-Xcompiler", "-L/P/lib"], ["-Xcompiler", "-L/P/lib"]),  # that tool's value
        (["-L/Pother/lib"], ["-L/Pother/lib"]),  # a sibling, not inside
    ],
)
def test_the_link_arguments_the_wrapper_hands_to_nvcc(tmp_path, given, expected):
    """Exact argv, with a stand-in nvcc that prints it: moved only what lies in a prefix."""
    import json
    import sys

    fake = tmp_path / "fake-nvcc"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    wrapper = environment.write_nvcc_wrapper(tmp_path / "bin")
    env = {
        **os.environ,
        "SGLFORGE_REAL_NVCC": str(fake),
        "SGLFORGE_BUILD_ROOT": str(tmp_path),
        "SGLFORGE_HOST_LINK_PREFIXES": "/P/\n/elsewhere",
        "SGLFORGE_PREFIX_MAP_FLAGS": "",
    }
    env.pop("SGLFORGE_COMPILER_CACHE", None)
    run = lambda *extra: json.loads(  # noqa: E731
        subprocess.run(
            [str(wrapper), *extra], env=env, check=True, capture_output=True, text=True
        ).stdout
    )
    assert run("-shared", "a.o", *given, "-o", "m.so") == [
        "-shared",
        "a.o",
        *expected,
        "-o",
        "m.so",
    ]
    # a compile is not a device link: its -L (if any) is left to nvcc
    assert run("-c", "k.cu", "-o", "k.o", *given)[4 : 4 + len(given)] == given
