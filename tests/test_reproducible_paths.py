"""Issue 11 item 1: a wheel's bytes do not depend on where sglforge runs.

Fixture: `leakyext`, a setuptools C extension whose header lives in the *caller venv's*
include dir (`<sys.prefix>/include/leaky/leaky.h`) and returns its own `__FILE__`, the way
torch's headers put `.nox/build/...` into `_C.so` through TORCH_CHECK. Built from two caller
venvs at the same build root, the wheels must be bit-identical (prefix maps reach the
compiler through the cc/c++ wrappers); a wheel that still contains such a path fails the
build (wheel/leaks.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.builder import prefixmap
from sglforge.wheel import leaks
from tests.fixtures import upstreams
from tests.fixtures.project import SRC, make_project

LEAKY_H = "static inline const char *leaky_where(void) { return __FILE__; }\n"
LEAKYEXT = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "leakyext"
version = "0.1.0"

[tool.setuptools]
packages = ["leakyext"]
""",
    "leakyext/__init__.py": "",
    "src/where.c": """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "leaky.h"

static PyObject *where(PyObject *self, PyObject *args) {
    return PyUnicode_FromString(leaky_where());
}
static PyMethodDef methods[] = {{"where", where, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_where", NULL, -1, methods};
PyMODINIT_FUNC PyInit__where(void) { return PyModule_Create(&module); }
""",
    "setup.py": """\
import os
import sys

from setuptools import Extension, setup

# a header from the build interpreter's venv, like torch's include dir under site-packages
include = os.path.join(sys.prefix, "include", "leaky")
setup(ext_modules=[Extension("leakyext._where", ["src/where.c"], include_dirs=[include])])
""",
}
RECIPE = """\
upstream = "leakyext"
build-requires = ["setuptools"]
version-label = "retag"
local-version = "cpu.{patchset8}"
"""

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def caller_venv(path: Path) -> Path:
    """A venv at `path` that sees this test interpreter's packages (a .pth file), with the
    leaky header in its own include dir: a different sys.prefix, the same everything else."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "parent-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (path / "include" / "leaky").mkdir(parents=True)
    (path / "include" / "leaky" / "leaky.h").write_text(LEAKY_H)
    return python


@pytest.fixture
def leaky(tmp_path):
    project = make_project(tmp_path, ("purepy",))
    commit = upstreams.make_repo(project.mirror / "org" / "leakyext", LEAKYEXT)
    with open(project.root / "lockfiles" / "upstreams.toml", "a") as handle:
        handle.write(
            f'\n[[source]]\nname = "leakyext"\nurl = "{upstreams.MIRROR_PREFIX}'
            f'org/leakyext"\ncommit = "{commit}"\n'
        )
    (project.root / "recipes" / "leakyext.toml").write_text(RECIPE)
    return project


def build_with(project, python: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("SGLFORGE_PROJECT", None)
    proc = subprocess.run(
        [str(python), "-m", "sglforge", *project.args(), "build", "leakyext", "--no-wheel-cache"],
        capture_output=True,
        text=True,
        env=env,
        cwd=project.root,
        check=False,
    )
    if proc.returncode == 0:
        out.mkdir(parents=True)
        for wheel in (project.root / "wheels").glob("leakyext-*.whl"):
            shutil.copyfile(wheel, out / wheel.name)
    return proc


@needs_cc
def test_fixture_leaks_the_venv_path_without_prefix_maps(tmp_path):
    """The control: compiled plainly, the extension holds the venv's include path."""
    python = caller_venv(tmp_path / "plain-venv")
    src = tmp_path / "src"
    for name, text in LEAKYEXT.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    proc = subprocess.run(
        [str(python), "setup.py", "-q", "build_ext", "--inplace"],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    [so] = src.glob("leakyext/_where*.so")
    assert str(tmp_path / "plain-venv" / "include" / "leaky").encode() in so.read_bytes()


@needs_cc
def test_two_caller_venvs_give_bit_identical_wheels(leaky, tmp_path):
    a = build_with(leaky, caller_venv(tmp_path / "venv-a"), tmp_path / "out-a")
    assert a.returncode == 0, a.stdout + a.stderr
    b = build_with(
        leaky, caller_venv(tmp_path / "somewhere" / "else" / "venv-b"), tmp_path / "out-b"
    )
    assert b.returncode == 0, b.stdout + b.stderr
    [wheel_a], [wheel_b] = (sorted((tmp_path / d).glob("*.whl")) for d in ("out-a", "out-b"))
    assert wheel_a.name == wheel_b.name
    assert _sha256(wheel_a) == _sha256(wheel_b)
    with zipfile.ZipFile(wheel_a) as archive:
        [so] = [n for n in archive.namelist() if n.endswith(".so")]
        data = archive.read(so)
    assert b"/sglforge-python/prefix/include/leaky/leaky.h" in data
    assert str(tmp_path).encode() not in data


@needs_cc
def test_a_build_whose_wheel_contains_the_venv_path_fails_naming_the_member(leaky, tmp_path):
    """A leak the prefix maps cannot fix (a string literal with sys.prefix) fails the build."""
    setup = LEAKYEXT["setup.py"].replace(
        "include_dirs=[include])",
        "include_dirs=[include], define_macros=[('WHERE', '\"' + sys.prefix + '\"')])",
    )
    files = dict(
        LEAKYEXT,
        **{
            "setup.py": setup,
            "src/where.c": LEAKYEXT["src/where.c"].replace("leaky_where()", "WHERE"),
        },
    )
    commit = upstreams.make_repo(leaky.mirror / "org" / "leakyext2", files)
    lock = leaky.root / "lockfiles" / "upstreams.toml"
    lock.write_text(
        lock.read_text()
        .replace('org/leakyext"\ncommit = ', 'org/leakyext2"\ncommit = ')
        .rsplit("commit = ", 1)[0]
        + f'commit = "{commit}"\n'
    )
    venv = tmp_path / "venv-leak"
    proc = build_with(leaky, caller_venv(venv), tmp_path / "out")
    assert proc.returncode != 0
    assert "contain build-machine paths" in proc.stderr + proc.stdout
    assert "leakyext/_where" in proc.stderr + proc.stdout
    assert not list((leaky.root / "wheels").glob("leakyext-*.whl"))


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_leak_scan_names_elf_and_text_members_and_skips_provenance(tmp_path):
    root = "/tmp/some-build-root"
    venv = "/home/u/project/.nox/build"
    wheel = _wheel(
        tmp_path / "x-1-py3-none-any.whl",
        {
            "x/_C.so": b"\x7fELF\x02\x01\x00" + f"\0assert at {venv}/include/t.h\0".encode(),
            "x/config.py": f"ROOT = '{root}/src/x'\n".encode(),
            "x/clean.py": b"print('fine')\n",
            "x/logo.png": b"\x89PNG\0\0" + root.encode(),  # binary, not ELF: not scanned
            "x-1.dist-info/sglforge-build.json": f'{{"build_root": "{root}"}}'.encode(),
            # ours copies the provenance's build root; another tool's SBOM is searched
            "x-1.dist-info/sboms/sglforge.cdx.json": f'{{"value": "{root}"}}'.encode(),
            "x-1.dist-info/sboms/other.cdx.json": f'{{"value": "{root}"}}'.encode(),
        },
    )
    found = leaks.scan_wheel(wheel, [root, venv])
    assert {(f.member, f.kind, f.needle) for f in found} == {
        ("x/_C.so", "ELF", venv),
        ("x/config.py", "text", root),
        ("x-1.dist-info/sboms/other.cdx.json", "text", root),
    }
    with pytest.raises(SglforgeError) as error:
        leaks.check_wheel(wheel, [root, venv])
    assert "x/_C.so (ELF)" in str(error.value) and "x/config.py (text)" in str(error.value)
    leaks.check_wheel(wheel, ["/nowhere/else"])  # clean: no error


def test_prefix_maps_cover_root_and_interpreter_most_specific_last(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "root" / "venv"))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    maps = prefixmap.prefix_maps(tmp_path / "root")
    assert maps[-1] == (str(tmp_path / "root" / "venv"), prefixmap.PREFIX_TARGET)
    assert (str(tmp_path / "root"), prefixmap.BUILD_TARGET) in maps
    assert all(path != "/usr" for path, _ in maps)  # a system prefix is neither mapped
    assert "/usr" not in prefixmap.leak_needles(tmp_path / "root")  # nor scanned for


def test_compiler_wrappers_append_the_maps_and_cc_cxx_point_at_them(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("cc", "c++"):
        fake = bin_dir / name
        fake.write_text('#!/bin/sh\necho "$@"\n')
        fake.chmod(0o755)
    tools = tmp_path / "tools"
    env = prefixmap.write_compiler_wrappers(tools, tmp_path / "root", str(bin_dir))
    assert env["CC"] == str(tools / "cc") and env["CXX"] == str(tools / "c++")
    assert not (tools / "gcc").exists()  # no gcc on that PATH: no wrapper
    out = subprocess.run(
        [env["CXX"], "-c", "x.cc"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[:2] == ["-c", "x.cc"]
    assert f"-ffile-prefix-map={tmp_path / 'root'}={prefixmap.BUILD_TARGET}" in out
    assert f"-ffile-prefix-map={sys.prefix}={prefixmap.PREFIX_TARGET}" in out


def test_compiler_wrappers_drop_rpaths_into_the_interpreter(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "pyenv" / "3.12"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cc").write_text('#!/bin/sh\nfor a do echo "$a"; done\n')
    (bin_dir / "cc").chmod(0o755)
    env = prefixmap.write_compiler_wrappers(tmp_path / "tools", tmp_path / "root", str(bin_dir))
    rpath = f"-Wl,-rpath,{tmp_path / 'pyenv' / '3.12'}/lib"
    out = subprocess.run(
        [env["CC"], "-shared", rpath, "-Wl,-rpath,$ORIGIN/lib", "a b.o"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert rpath not in out
    assert out[:3] == ["-shared", "-Wl,-rpath,$ORIGIN/lib", "a b.o"]
