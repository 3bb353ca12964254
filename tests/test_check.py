"""`sglforge check`: fixture stacks (small wheels built here) that exercise each failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import ConfigErrors
from sglforge.check.api import collect_uses, resolve
from sglforge.check.modules import WheelModules
from sglforge.check.run import CheckOptions, render, run_check
from sglforge.inputs.project import Project
from sglforge.wheel.provenance import Provenance

SRC = Path(__file__).resolve().parents[1] / "src"
SGLANG_COMMIT = "e00930c5489053f26d86b179cee0d087f846acbb"
DG_COMMIT = "2176dff556d6fb8f0184516dc224a3b31a094b98"
HASH = "--hash=sha256:" + "0" * 64

LOCK = f"""\
[[source]]
name = "sglang"
url = "https://github.com/sgl-project/sglang"
commit = "{SGLANG_COMMIT}"
ref = "v0.5.21"

[[source]]
name = "deepgemm"
url = "https://github.com/sgl-project/DeepGEMM"
commit = "{DG_COMMIT}"
ref = "dev"
"""
TOOLCHAIN = """\
cuda = "13.0"
python = "3.12"
torch = "2.13.0"
[build-requires]
setuptools = "80.9.0"
wheel = "0.45.1"
"""
SGLANG_RECIPE = """\
upstream = "sglang"
subdir = "python"
build-requires = ["setuptools"]
base-version = "0.5.21"
local-version = "cu{cuda}.{patchset8}"
"""
DG_RECIPE = """\
upstream = "deepgemm"
build-requires = ["setuptools", "torch"]
version-label = "retag"
local-version = "cu{cuda}.{patchset8}"
requires-torch-abi = true
"""
SGLANG_USES = """\
import deep_gemm
import deep_gemm as dg
from deep_gemm import get_num_sms
from deep_gemm.utils import ceil_div


def run(x):
    deep_gemm.fp8_gemm_nt(x)
    dg.utils.math.ceil_div(1, 2)
    return deep_gemm.__file__, get_num_sms(), ceil_div
"""
DG_INIT = """\
import torch
from . import _C_stub as _C
from .gemm import *
from .utils import *

get_num_sms = _C.get_num_sms
try:
    use_deterministic_algorithms = _C.use_deterministic_algorithms
except AttributeError:
    pass
"""
DG_GEMM = """\
__all__ = ["fp8_gemm_nt"]


def fp8_gemm_nt(*args):
    pass


def _private():
    pass
"""


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    files: dict[str, str] | None = None,
    provenance: dict | None = None,
    tag: str = "py3-none-any",
    requires_python: str | None = ">=3.10",
) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-{tag}.whl"
    headers = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}"]
    headers += [f"Requires-Python: {requires_python}"] if requires_python else []
    headers += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in (files or {}).items():
            archive.writestr(member, text)
        archive.writestr(f"{dist}.dist-info/METADATA", "\n".join(headers) + "\n")
        archive.writestr(f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
        if provenance is not None:
            archive.writestr(f"{dist}.dist-info/sglforge-build.json", json.dumps(provenance))
    return path


def provenance(upstream: str, commit: str, torch: str | None = None) -> dict:
    return Provenance(
        upstream=upstream,
        commit=commit,
        version="",
        cuda_archs=(),
        requires_torch=torch,
        toolchain={"python": "3.12.8"},
    ).to_json()


class Stack:
    """A fixture project plus a wheels/ directory that fits together; tests break one thing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "lockfiles").mkdir(parents=True)
        (root / "recipes").mkdir()
        (root / "wheels").mkdir()
        (root / "lockfiles" / "upstreams.toml").write_text(LOCK)
        (root / "lockfiles" / "toolchain.toml").write_text(TOOLCHAIN)
        (root / "recipes" / "sglang.toml").write_text(SGLANG_RECIPE)
        (root / "recipes" / "sgl-deep-gemm.toml").write_text(DG_RECIPE)
        self.sglang_requires = [
            "sgl-deep-gemm==0.2.0",
            "torch==2.13.0",
            "requests",
            'tomli; python_version < "3.11"',
            'pytest; extra == "test"',
        ]
        self.sglang_version = "0.5.21+cu130.abcdef12"
        self.sglang_tag = "py3-none-any"
        self.sglang_files = {"sglang/__init__.py": "", "sglang/srt/uses.py": SGLANG_USES}
        self.sglang_commit = SGLANG_COMMIT
        self.dg_files = {
            "deep_gemm/__init__.py": DG_INIT,
            "deep_gemm/gemm.py": DG_GEMM,
            "deep_gemm/_C_stub.cpython-312-x86_64-linux-gnu.so": "\x7fELF",
            "deep_gemm/utils/__init__.py": "from .math import ceil_div\n",
            "deep_gemm/utils/math.py": "def ceil_div(a, b):\n    pass\n",
        }
        self.runtime = ["torch==2.13.0", "requests==2.32.5", "apache-tvm-ffi==0.1.11"]

    @property
    def project(self) -> Project:
        return Project(self.root)

    def write(self) -> None:
        wheels = self.root / "wheels"
        for old in wheels.glob("*.whl"):
            old.unlink()
        built = [
            (
                make_wheel(
                    wheels,
                    "sglang",
                    self.sglang_version,
                    requires=tuple(self.sglang_requires),
                    files=self.sglang_files,
                    tag=self.sglang_tag,
                    provenance=provenance("sglang", self.sglang_commit),
                ),
                "sglang",
            ),
            (
                make_wheel(
                    wheels,
                    "sgl-deep-gemm",
                    "0.2.0+cu130.12345678",
                    requires=("apache-tvm-ffi==0.1.11", "torch==2.13.0"),
                    files=self.dg_files,
                    tag="py3-none-linux_x86_64",
                    provenance=provenance("deepgemm", DG_COMMIT, "2.13.0"),
                ),
                "sgl-deep-gemm",
            ),
        ]
        entries = [
            {
                "file": p.name,
                "sha256": "0" * 64,
                "name": recipe,
                "version": p.name.split("-")[1],
                "recipe": recipe,
            }
            for p, recipe in built
        ]
        (wheels / "manifest.json").write_text(json.dumps({"format": 1, "wheels": entries}))
        (self.root / "lockfiles" / "runtime.lock").write_text(
            "# fixture\n" + "".join(f"{r} {HASH}\n" for r in self.runtime)
        )

    def check(self, **options):
        self.write()
        return run_check(self.project, CheckOptions(**options))


def errors(result) -> list[str]:
    return [f"{f.check}: {f.message}" for f in result.findings.errors]


@pytest.fixture
def stack(tmp_path: Path) -> Stack:
    return Stack(tmp_path / "project")


def test_coherent_stack_passes(stack: Stack) -> None:
    result = stack.check()
    assert errors(result) == [], render(result)
    assert result.ok
    assert "check: ok" in render(result)


def test_missing_requirement(stack: Stack) -> None:
    stack.sglang_requires.append("xgrammar==0.2.7")
    result = stack.check()
    assert errors(result) == [
        (
            "resolution: sglang 0.5.21+cu130.abcdef12 requires "
            "xgrammar==0.2.7 — not built, not in runtime.lock"
        )
    ]


def test_missing_requirement_of_requested_extra(stack: Stack) -> None:
    stack.sglang_requires[0] = "sgl-deep-gemm[cu13]==0.2.0"
    stack.dg_files = dict(stack.dg_files)
    stack.write()
    # The extra's requirement is declared by the deep-gemm wheel, so rebuild it with one.
    wheels = stack.root / "wheels"
    dg = next(wheels.glob("sgl_deep_gemm-*.whl"))
    dg.unlink()
    make_wheel(
        wheels,
        "sgl-deep-gemm",
        "0.2.0+cu130.12345678",
        requires=("apache-tvm-ffi==0.1.11", 'nvidia-foo; extra == "cu13"'),
        files=stack.dg_files,
        tag="py3-none-linux_x86_64",
        provenance=provenance("deepgemm", DG_COMMIT, "2.13.0"),
    )
    result = run_check(stack.project)
    assert any(
        "sgl-deep-gemm 0.2.0+cu130.12345678[cu13] requires nvidia-foo" in e for e in errors(result)
    ), render(result)


def test_conflicting_and_duplicate_requirements(stack: Stack) -> None:
    stack.runtime = [
        "torch==2.12.0",
        "requests==2.32.5",
        "apache-tvm-ffi==0.1.11",
        "sgl-deep-gemm==0.2.0",
    ]
    found = errors(stack.check())
    assert (
        "resolution: sglang 0.5.21+cu130.abcdef12 requires torch==2.13.0 — runtime.lock "
        "line 2 has torch 2.12.0" in found
    )
    assert any(
        e.startswith("resolution: sgl-deep-gemm is provided 2 times: 0.2.0+cu130.12345678 (wheels/")
        and "0.2.0 (runtime.lock line 5)" in e
        for e in found
    )


def test_api_name_missing(stack: Stack) -> None:
    stack.sglang_files["sglang/srt/dsv4.py"] = (
        "import deep_gemm\n\n\ndef moe(x):\n    return deep_gemm.fp8_mega_moe(x)\n"
    )
    assert errors(stack.check()) == [
        (
            "api: sglang/srt/dsv4.py:5 uses deep_gemm.fp8_mega_moe — "
            "not in sgl-deep-gemm 0.2.0+cu130.12345678"
        )
    ]


def test_api_from_import_and_submodule_missing(stack: Stack) -> None:
    stack.sglang_files["sglang/srt/more.py"] = (
        "from deep_gemm import _private\nfrom deep_gemm.utils.math import floor_div\n"
        "import deep_gemm.layout\n"
    )
    assert errors(stack.check()) == [
        (
            "api: sglang/srt/more.py:1 uses deep_gemm._private — not in sgl-deep-gemm "
            "0.2.0+cu130.12345678"
        ),
        (
            "api: sglang/srt/more.py:2 uses deep_gemm.utils.math.floor_div — not in sgl-deep-gemm "
            "0.2.0+cu130.12345678"
        ),
        (
            "api: sglang/srt/more.py:3 uses deep_gemm.layout — not in sgl-deep-gemm "
            "0.2.0+cu130.12345678"
        ),
    ]


def test_api_module_nobody_builds(stack: Stack) -> None:
    stack.sglang_files["sglang/srt/pd.py"] = "from nixl._api import nixl_agent\n"
    assert errors(stack.check()) == [
        ("api: sglang/srt/pd.py:1 uses nixl (1 use(s)) — no built wheel provides module nixl")
    ]


def test_api_waiver(stack: Stack) -> None:
    stack.sglang_files["sglang/srt/dsv4.py"] = "import deep_gemm\ndeep_gemm.set_compile_mode(1)\n"
    waivers = stack.root / "lockfiles" / "api-waivers.toml"
    waivers.write_text(
        '# why\n[[waiver]]\nname = "deep_gemm.set_compile_mode"\n'
        'reason = "behind hasattr()"\n\n[[waiver]]\nname = "deep_gemm.gone"\n'
        'files = ["sglang/x.py"]\nreason = "stale"\n'
    )
    result = stack.check()
    assert errors(result) == []
    waived = [f.message for f in result.findings.of("waived")]
    assert waived == [
        (
            "sglang/srt/dsv4.py:2 uses deep_gemm.set_compile_mode — not in "
            "sgl-deep-gemm 0.2.0+cu130.12345678 (waived: behind hasattr())"
        )
    ]
    assert any(
        "deep_gemm.gone (line 6) matched nothing" in f.message for f in result.findings.of("hint")
    )


def test_waiver_needs_a_reason(stack: Stack) -> None:
    (stack.root / "lockfiles" / "api-waivers.toml").write_text(
        '[[waiver]]\nname = "deep_gemm.x"\nreason = " "\n\n[[waiver]]\nname = "deep_gemm.y"\n'
        'colour = "red"\n'
    )
    with pytest.raises(ConfigErrors) as info:
        stack.check()
    text = str(info.value)
    assert "waiver #1, key 'reason' (line 3): must say why" in text
    assert "waiver #2: missing required key 'reason'" in text
    assert "key 'colour' (line 7): unknown key" in text


def test_wrong_label(stack: Stack) -> None:
    (stack.root / "recipes" / "sglang.toml").write_text(
        SGLANG_RECIPE.replace('"0.5.21"', '"0.5.23"')
    )
    stack.sglang_version = "0.5.23+cu130.abcdef12"
    assert errors(stack.check()) == [
        (
            "labels: recipes/sglang.toml: base-version 0.5.23 but the pin sglang is v0.5.21 "
            '(e00930c54890): set base-version = "0.5.21"'
        ),
        (
            "labels: sglang 0.5.23+cu130.abcdef12: labelled 0.5.23 but sglang v0.5.21 "
            "(e00930c54890) is 0.5.21"
        ),
    ]


def test_stale_wheel_from_another_commit(stack: Stack) -> None:
    stack.sglang_commit = "1" * 40
    assert errors(stack.check()) == [
        (
            "labels: sglang 0.5.21+cu130.abcdef12: built from sglang 111111111111, but the pin is "
            "sglang e00930c54890: rebuild it"
        )
    ]


def test_python_mismatch(stack: Stack) -> None:
    stack.sglang_tag = "cp311-cp311-manylinux_2_34_x86_64"
    found = errors(stack.check())
    assert found == [
        (
            "abi: sglang-0.5.21+cu130.abcdef12-cp311-cp311-manylinux_2_34_x86_64.whl: "
            "no tag installs on CPython 3.12 x86_64 (tags: "
            "cp311-cp311-manylinux_2_34_x86_64)"
        )
    ]
    # Built with 3.12.8 (provenance) but served on 3.11: a CPython-specific wheel must match.
    found = errors(stack.check(python="3.11"))
    assert (
        "abi: sglang 0.5.21+cu130.abcdef12: built with Python 3.12.8, serving Python is "
        "3.11" in found
    )


def test_serving_python_and_torch_mismatch(stack: Stack) -> None:
    found = errors(stack.check(python="3.9", torch="2.12.0"))
    assert "abi: sglang 0.5.21+cu130.abcdef12: Requires-Python >=3.10 excludes 3.9" in found
    assert (
        "abi: sglang 0.5.21+cu130.abcdef12: requires torch==2.13.0, serving torch is "
        "2.12.0" in found
    )
    assert (
        "abi: sgl-deep-gemm 0.2.0+cu130.12345678: built against torch 2.13.0, serving "
        "torch is 2.12.0" in found
    )


def test_reexports_and_open_modules(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path,
        "kern",
        "1.0",
        files={
            "kern/__init__.py": "from .a import *\nfrom .b import y as why\nfrom torch import *\n",
            "kern/a.py": "__all__ = ['x']\nx = 1\nz = 2\n",
            "kern/b.py": "y = 1\n",
            "kern/strict/__init__.py": "from .a import *\nif True:\n    q, (r, s) = 1, (2, 3)\n",
            "kern/strict/a.py": "p = 1\n_hidden = 2\n",
            "kern/lazy.py": "def __getattr__(name):\n    return name\n",
            "kern/ext.abi3.so": "",
            "kern/ns/leaf.py": "t = 1\n",
            "kern/typed.py": (
                "import typing\nfrom typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .b import y\nelse:\n    w = 1\n"
                "if typing.TYPE_CHECKING:\n    v = 1\n"
            ),
        },
    )
    with zipfile.ZipFile(wheel) as archive:
        modules = WheelModules(wheel, tuple(archive.namelist()))
    assert resolve(modules, "kern.why") is None
    assert resolve(modules, "kern.anything") is None  # `from torch import *`: open
    assert resolve(modules, "kern.strict.p") is None
    assert resolve(modules, "kern.strict.s") is None
    assert resolve(modules, "kern.strict._hidden") == "kern.strict._hidden"
    assert resolve(modules, "kern.strict.missing") == "kern.strict.missing"
    assert resolve(modules, "kern.lazy.whatever") is None
    assert resolve(modules, "kern.ext.fn") is None
    assert resolve(modules, "kern.ns.leaf.t.real") is None
    assert resolve(modules, "kern.ns.other") == "kern.ns.other"
    assert resolve(modules, "kern.strict.__file__") is None
    # names bound only for a type checker do not exist at run time; the else branch does
    assert resolve(modules, "kern.typed.y") == "kern.typed.y"
    assert resolve(modules, "kern.typed.v") == "kern.typed.v"
    assert resolve(modules, "kern.typed.w") is None


def test_collect_uses_aliases() -> None:
    uses = collect_uses(SGLANG_USES + "import os\nos.path.join\n", "f.py", ("deep_gemm",))
    names = sorted({u.name for u in uses})
    assert names == [
        "deep_gemm",
        "deep_gemm.__file__",
        "deep_gemm.fp8_gemm_nt",
        "deep_gemm.get_num_sms",
        "deep_gemm.utils",
        "deep_gemm.utils.ceil_div",
        "deep_gemm.utils.math",
        "deep_gemm.utils.math.ceil_div",
    ]


def test_cli_exit_status(stack: Stack) -> None:
    stack.write()
    run = [sys.executable, "-m", "sglforge", "--project", str(stack.root), "check"]
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(run, check=False, capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "check: ok" in ok.stdout
    bad = subprocess.run(
        run + ["--python", "3.9"], check=False, capture_output=True, text=True, env=env
    )
    assert bad.returncode == 1
    assert "ERROR  abi" in bad.stdout and "check: FAILED" in bad.stdout


def test_smoke_lock_lists_our_wheels_and_a_stale_one(stack: Stack) -> None:
    """The smoke checks against wheels.lock, which lists our wheels too: those are not
    duplicates; a different version of one of them there is (a stale lock)."""
    stack.runtime = [
        "torch==2.13.0",
        "requests==2.32.5",
        "apache-tvm-ffi==0.1.11",
        "sglang==0.5.21+cu130.abcdef12",
    ]
    assert errors(stack.check()) == []
    stack.runtime[-1] = "sglang==0.5.20+cu130.abcdef12"
    found = errors(stack.check())
    assert len(found) == 1 and found[0].startswith("resolution: sglang is provided 2 times")


def test_bare_wheel_set_without_toolchain(stack: Stack) -> None:
    stack.write()
    (stack.root / "lockfiles" / "toolchain.toml").unlink()
    result = run_check(stack.project)
    assert errors(result) == [], render(result)
    assert result.target.python == "{}.{}".format(*sys.version_info[:2])
    assert any("labels not checked" in f.message for f in result.findings.of("hint"))


def test_runtime_lock_must_match_its_input(stack: Stack) -> None:
    from sglforge.wheel import runtime

    result = stack.check()  # no runtime.in: a hand-written lock, nothing to compare
    assert errors(result) == []
    source = stack.root / "lockfiles" / "runtime.in"
    source.write_text("requests==2.32.5\n")
    found = errors(stack.check())
    assert found == [
        (
            f"resolution: stale lock: {stack.root / 'lockfiles' / 'runtime.lock'} has "
            "no '# input-sha256:' header (not made by `sglforge lock-runtime`); "
            "regenerate it with `nox -s lock-runtime`"
        )
    ]
    # A lock that records this input's digest and the toolchain Python is fresh ...
    lock = stack.root / "lockfiles" / "runtime.lock"
    stack.write()
    header = f"# input-sha256: {runtime.input_digest(source.read_text())}\n# python: 3.12\n"
    lock.write_text(header + lock.read_text())
    stack.write = lambda: None  # keep the lock written above
    assert errors(run_check(stack.project, CheckOptions())) == []
    # ... until the input changes.
    source.write_text("requests==2.32.5\nurllib3==2.5.0\n")
    assert [
        e.split(" (input-sha256")[0] for e in errors(run_check(stack.project, CheckOptions()))
    ] == [f"resolution: stale lock: {lock} was resolved from another runtime.in"]


def test_meta_package_alias_resolves_names_in_its_backend(stack: Stack) -> None:
    stack.sglang_files = dict(
        stack.sglang_files,
        **{
            "sglang/srt/nixl_user.py": "from nixl._api import nixl_agent\nimport nixl\n"
            "nixl._bindings.nixlBind\n"
        },
    )
    stack.write()
    wheels = stack.root / "wheels"
    make_wheel(
        wheels,
        "nixl",
        "1.4.0",
        files={"nixl/__init__.py": "import sys\n_pkg = sys.modules['nixl_cu13']\n"},
        provenance=None,
    )
    make_wheel(
        wheels,
        "nixl-cu13",
        "1.4.0",
        files={
            "nixl_cu13/__init__.py": "",
            "nixl_cu13/_api.py": "class nixl_agent:\n    pass\n",
            "nixl_cu13/_bindings.cpython-312-x86_64-linux-gnu.so": "\x7fELF",
        },
        provenance=None,
    )
    manifest = json.loads((wheels / "manifest.json").read_text())
    for name in ("nixl", "nixl-cu13"):
        [file] = wheels.glob(name.replace("-", "_") + "-*.whl")
        manifest["wheels"].append(
            {
                "file": file.name,
                "sha256": "0" * 64,
                "name": name,
                "version": "1.4.0",
                "recipe": name,
            }
        )
    (wheels / "manifest.json").write_text(json.dumps(manifest))
    stack.write = lambda: None
    found = [e for e in errors(run_check(stack.project, CheckOptions())) if e.startswith("api")]
    assert found == [
        "api: sglang/srt/nixl_user.py:1 uses nixl._api — not in nixl 1.4.0",
        "api: sglang/srt/nixl_user.py:3 uses nixl._bindings — not in nixl 1.4.0",
    ]
    (stack.root / "lockfiles" / "api-waivers.toml").write_text(
        '[[alias]]\nmodule = "nixl"\nprovider = "nixl_cu13"\nreason = "meta package"\n'
    )
    assert [
        e for e in errors(run_check(stack.project, CheckOptions())) if e.startswith("api")
    ] == []


def test_torch_variant_in_the_toolchain_matches_the_public_pin_in_provenance(stack: Stack) -> None:
    """toolchain.toml pins 2.13.0+cu130; wheels require (and record) torch==2.13.0."""
    toolchain = stack.root / "lockfiles" / "toolchain.toml"
    toolchain.write_text(
        toolchain.read_text().replace('torch = "2.13.0"', 'torch = "2.13.0+cu130"')
    )
    assert [e for e in errors(stack.check()) if e.startswith("abi")] == []
    toolchain.write_text(toolchain.read_text().replace('"2.13.0+cu130"', '"2.12.0+cu130"'))
    assert any(
        "built against torch 2.13.0, serving torch is 2.12.0+cu130" in e
        for e in errors(stack.check())
    )


@pytest.mark.parametrize("value", ["3", "3.x", "py3.12", "3.12.1"])
def test_check_python_must_be_major_minor(stack: Stack, value: str) -> None:
    stack.write()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglforge",
            "--project",
            str(stack.root),
            "check",
            "--python",
            value,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"expected MAJOR.MINOR like 3.12, got '{value}'" in proc.stderr


def _hints(result) -> list[str]:
    return [f"{f.check}: {f.message}" for f in result.findings.of("hint")]


def test_partial_set_names_the_missing_wheels_never_lock_runtime(stack: Stack) -> None:
    """Issue 32 item 4: with sgl-deep-gemm not built, `lock-runtime` would derive runtime.in
    from sglang alone (pinning sgl-deep-gemm as third-party, dropping what it needs); the
    check names the missing recipe and says to build it instead."""
    from sglforge.wheel import runtime

    source = stack.root / "lockfiles" / "runtime.in"
    source.write_text(
        runtime.GENERATED_MARKER + "\napache-tvm-ffi==0.1.11\nrequests\ntorch==2.13.0\n"
    )
    write = stack.write
    lock = stack.root / "lockfiles" / "runtime.lock"

    def with_lock_header() -> None:  # a runtime.lock lock-runtime made from this runtime.in
        write()
        header = f"# input-sha256: {runtime.input_digest(source.read_text())}\n# python: 3.12\n"
        lock.write_text(header + lock.read_text())

    stack.write = with_lock_header
    full = stack.check()
    assert errors(full) == [] and not any("lock-runtime" in h for h in _hints(full))

    def without_deep_gemm() -> None:
        with_lock_header()
        wheels = stack.root / "wheels"
        next(wheels.glob("sgl_deep_gemm-*.whl")).unlink()
        manifest = json.loads((wheels / "manifest.json").read_text())
        manifest["wheels"] = [w for w in manifest["wheels"] if w["name"] == "sglang"]
        (wheels / "manifest.json").write_text(json.dumps(manifest))

    stack.write = without_deep_gemm
    partial = stack.check()
    assert (
        "resolution: sglang 0.5.21+cu130.abcdef12 requires sgl-deep-gemm==0.2.0 — not built "
        "(no wheel of recipes/sgl-deep-gemm.toml)"
    ) in errors(partial)
    hints = _hints(partial)
    assert (
        "resolution: partial set: missing sgl-deep-gemm (recipes/sgl-deep-gemm.toml): build it "
        "(`nox -s build -- sgl-deep-gemm`); a recipe's wheel is never a pin in runtime.lock"
    ) in hints
    assert any(
        h.startswith("resolution: runtime.in not compared") and "sgl-deep-gemm" in h for h in hints
    ), hints
    assert not any("run `nox -s lock-runtime`" in h or "add the missing" in h for h in hints)
