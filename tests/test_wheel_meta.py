"""Wheel metadata, litter, platform tags and DT_NEEDED resolution (issue 17, issue 11 item 2).

Metadata is checked the way pip and Python see it: the post-processed wheels are installed
(--no-deps) into a fresh venv and read back through `importlib.metadata` there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.wheel import audit
from sglforge.wheel.normalize import DEFAULT_EXCLUDE, parse_headers, pin_torch, postprocess
from tests.helpers import fresh_venv, pip_env, provenance_stub

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


def write_wheel(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def wheel_files(
    name: str,
    version: str,
    metadata: bytes,
    extra: dict[str, bytes],
    tag: str = "py3-none-any",
    purelib: str = "true",
) -> dict[str, bytes]:
    dist = f"{name}-{version}.dist-info"
    return {
        f"{name}/__init__.py": b"",
        **extra,
        f"{dist}/METADATA": metadata,
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\n"
        f"Tag: {tag}\n".encode(),
        f"{dist}/RECORD": b"",
    }


def compile_so(
    tmp: Path,
    name: str,
    *,
    links: tuple[str, ...] = (),
    rpath: str | None = None,
    soname: str | None = None,
) -> bytes:
    src = tmp / f"{name}.c"
    src.write_text(f"int {name.replace('.', '_')}_f(void) {{ return 1; }}\n")
    out = tmp / f"lib{name}.so"
    cmd = [
        "cc",
        "-shared",
        "-fPIC",
        "-o",
        str(out),
        str(src),
        "-L",
        str(tmp),
        "-Wl,--no-as-needed",
        *[f"-l{lib}" for lib in links],
    ]
    if rpath:
        cmd.append(f"-Wl,-rpath,{rpath}")
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


def installed(python: Path, wheel: Path, dist: str) -> dict:
    """Install `wheel` --no-deps into the venv; its version and requires via importlib."""
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        env=pip_env(),
    )
    code = (
        "import importlib.metadata as m, json, sys; d = sys.argv[1]; "
        "print(json.dumps({'version': m.version(d), 'requires': m.requires(d)}))"
    )
    out = subprocess.run(
        [str(python), "-c", code, dist], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    return fresh_venv(tmp_path_factory.mktemp("venv") / "v")


# -- 17.1 metadata --------------------------------------------------------------------------


def test_pin_torch_without_a_description_body_writes_a_header():
    """The issue's reproduction: METADATA with no body used to get the pin after a blank line."""
    out = pin_torch(b"Metadata-Version: 2.4\nName: x\nVersion: 1\n", "2.13.0")
    message = parse_headers(out)
    assert message.get_all("Requires-Dist") == ["torch==2.13.0"]
    assert message.get_payload() == ""


def test_pin_torch_keeps_every_other_header_and_the_body_byte_for_byte():
    meta = (
        "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nAuthor: Jürgen\n"
        "License: line one\n        line two\nRequires-Dist: torch>=2.0\n"
        "Requires-Dist: torchvision\nRequires-Dist: numpy; extra == 'x'\n"
        "Description-Content-Type: text/markdown\n\nFrom the body\n\n# Title\n"
    ).encode()
    out = pin_torch(meta, "2.13.0")
    message = parse_headers(out)
    assert message.get_all("Requires-Dist") == [
        "torchvision",
        "numpy; extra == 'x'",
        "torch==2.13.0",
    ]
    assert message["License"] == "line one\n        line two"
    assert "\nAuthor: Jürgen\n".encode() in out
    assert message.get_payload() == "From the body\n\n# Title\n"


def test_installed_wheels_show_the_torch_pin_and_label_through_importlib(tmp_path, venv):
    """Every field sglforge writes (Version with the local label, Requires-Dist torch==) is
    what importlib.metadata reads in a venv where the wheel is installed, body or no body."""
    bodyless = b"Metadata-Version: 2.4\nName: nobody\nVersion: 1.0\nRequires-Dist: tvm-ffi\n"
    with_body = (
        b"Metadata-Version: 2.1\nName: withbody\nVersion: 2.0\n"
        b"Requires-Dist: torch>=2.0\n\nFrom here on, a description.\n"
    )
    results = {}
    for name, version, meta in (("nobody", "1.0", bodyless), ("withbody", "2.0", with_body)):
        src = write_wheel(
            tmp_path / f"{name}-{version}-py3-none-any.whl", wheel_files(name, version, meta, {})
        )
        out, _ = postprocess(
            src,
            tmp_path / "out",
            expected_version=None,
            expected_local=None,
            torch_version="2.13.0",
            provenance=provenance_stub(),
            epoch=0,
            retag_local="cu130.abcdef12",
        )
        assert out.name == f"{name}-{version}+cu130.abcdef12-py3-none-any.whl"
        results[name] = installed(venv, out, name)
    assert results["nobody"] == {
        "version": "1.0+cu130.abcdef12",
        "requires": ["tvm-ffi", "torch==2.13.0"],
    }
    assert results["withbody"] == {"version": "2.0+cu130.abcdef12", "requires": ["torch==2.13.0"]}


# -- 11.2 litter, platform tag ----------------------------------------------------------------


def test_build_litter_is_dropped_reported_and_left_out_of_record(tmp_path):
    litter = {
        "deep_gemm/_C_build/.ninja_log": b"x",
        "deep_gemm/_C_build/.ninja_deps": b"x",
        "deep_gemm/_C_build/build.ninja": b"x",
        "deep_gemm/_C_build/cpp_0.o": b"x",
        "pkg/CMakeFiles/foo.dir/a.o": b"x",
        "pkg/kernel.o": b"x",
    }
    keep = {"deep_gemm/include/cute/atom.hpp": b"// header\n", "deep_gemm/build_utils.py": b""}
    src = write_wheel(
        tmp_path / "deep_gemm-1.0-py3-none-any.whl",
        wheel_files(
            "deep_gemm",
            "1.0",
            b"Metadata-Version: 2.1\nName: deep_gemm\nVersion: 1.0\n",
            {**litter, **keep},
        ),
    )
    out, info = postprocess(
        src,
        tmp_path / "out",
        expected_version=None,
        expected_local=None,
        torch_version=None,
        provenance=provenance_stub(),
        epoch=0,
    )
    assert list(info.removed) == sorted(litter)
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        record = archive.read("deep_gemm-1.0.dist-info/RECORD").decode()
        provenance = json.loads(archive.read("deep_gemm-1.0.dist-info/sglforge-build.json"))
    assert not names & set(litter) and set(keep) <= names
    assert {line.split(",")[0] for line in record.splitlines()} == names
    assert provenance["removed"] == sorted(litter)
    # a recipe can opt out of a default (here: keep *.o) by listing its own set
    out, info = postprocess(
        src,
        tmp_path / "out2",
        expected_version=None,
        expected_local=None,
        torch_version=None,
        provenance=provenance_stub(),
        epoch=0,
        exclude=tuple(p for p in DEFAULT_EXCLUDE if p != "*.o"),
    )
    assert "pkg/kernel.o" not in info.removed


@needs_cc
def test_a_wheel_with_an_elf_gets_a_platform_tag_and_a_pure_one_fails_the_audit(tmp_path, venv):
    lib = compile_so(tmp_path, "native")
    meta = b"Metadata-Version: 2.1\nName: native\nVersion: 1.0\n"
    src = write_wheel(
        tmp_path / "native-1.0-py3-none-any.whl",
        wheel_files("native", "1.0", meta, {"native/_C.so": lib}),
    )
    with pytest.raises(
        SglforgeError,
        match="holds ELF files \\(native/_C.so\\) but is tagged "
        "pure \\(Root-Is-Purelib: true, Tag: py3-none-any",
    ):
        audit.audit_purity(src)
    out, _ = postprocess(
        src,
        tmp_path / "out",
        expected_version=None,
        expected_local=None,
        torch_version=None,
        provenance=provenance_stub(),
        epoch=0,
    )
    assert out.name == "native-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(out) as archive:
        wheel = parse_headers(archive.read("native-1.0.dist-info/WHEEL"))
    assert wheel["Root-Is-Purelib"] == "false" and wheel.get_all("Tag") == ["py3-none-linux_x86_64"]
    audit.audit_purity(out)  # no error
    # pip accepts it as a platform wheel for this host
    assert installed(venv, out, "native")["version"] == "1.0"


def test_a_pure_wheel_stays_pure(tmp_path):
    src = write_wheel(
        tmp_path / "p-1.0-py3-none-any.whl",
        wheel_files("p", "1.0", b"Metadata-Version: 2.1\nName: p\nVersion: 1.0\n", {}),
    )
    out, _ = postprocess(
        src,
        tmp_path / "out",
        expected_version=None,
        expected_local=None,
        torch_version=None,
        provenance=provenance_stub(),
        epoch=0,
    )
    assert out.name == "p-1.0-py3-none-any.whl"
    audit.audit_purity(out)


# -- 17.2 DT_NEEDED -------------------------------------------------------------------------


@needs_cc
def test_read_dynamic_agrees_with_readelf(tmp_path):
    compile_so(tmp_path, "dep", soname="libdep.so")
    data = compile_so(tmp_path, "user", links=("dep", "m"), rpath="$ORIGIN/../torch/lib")
    info = audit.read_dynamic(data)
    assert info.needed[:2] == ("libdep.so", "libm.so.6")
    assert info.rpath == ("$ORIGIN/../torch/lib",)
    if shutil.which("readelf"):
        text = subprocess.run(
            ["readelf", "-d", str(tmp_path / "libuser.so")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert [
            line.split("[")[1].rstrip("]") for line in text.splitlines() if "(NEEDED)" in line
        ] == list(info.needed)


@needs_cc
def test_dt_needed_resolution_names_file_and_library(tmp_path):
    """wheel (via $ORIGIN), torch/lib (via $ORIGIN/.. for a torch-bound wheel), system, driver;
    a library in the wheel or in torch/lib that no RPATH reaches is unresolvable."""
    compile_so(tmp_path, "helper", soname="libhelper.so")
    compile_so(tmp_path, "torch_cuda", soname="libtorch_cuda.so")
    compile_so(tmp_path, "cuda", soname="libcuda.so.1")
    compile_so(tmp_path, "nowhere", soname="libnowhere.so")  # linkable here, nowhere at run
    compile_so(tmp_path, "tvm_ffi", soname="libtvm_ffi.so")
    shutil.copy(tmp_path / "libcuda.so", tmp_path / "libcuda.so.1")
    good = compile_so(
        tmp_path,
        "good",
        links=("helper", "torch_cuda", "m", ":libcuda.so.1", "tvm_ffi"),
        rpath="$ORIGIN:$ORIGIN/../torch/lib:$ORIGIN/../tvm_ffi/lib",
    )
    bare = compile_so(tmp_path, "bare", links=("helper", "torch_cuda", "nowhere"))
    members = {
        "pkg/_good.so": good,
        "pkg/_bare.so": bare,
        "pkg/libhelper.so": b"\x7fELF",
        "pkg/__init__.py": b"",
    }
    world = audit.LibraryWorld(
        site_dirs={
            "torch/lib": {"libtorch_cuda.so": "torch"},
            "tvm_ffi/lib": {"libtvm_ffi.so": "apache-tvm-ffi"},
        },
        system=frozenset({"libm.so.6", "libc.so.6"}),
    )
    deps = audit.resolve_dependencies(
        members, world, torch_bound=True, requires=["apache-tvm-ffi==0.1.11", "torch==2.13.0"]
    )
    found = {(d.member, d.library): d for d in deps}
    assert found[("pkg/_good.so", "libhelper.so")].source == "wheel"
    assert found[("pkg/_good.so", "libtorch_cuda.so")].source == "torch"
    assert found[("pkg/_good.so", "libm.so.6")].source == "system"
    assert found[("pkg/_good.so", "libcuda.so.1")].source == "driver"
    assert found[("pkg/_good.so", "libtvm_ffi.so")].source == "apache-tvm-ffi"
    unresolved = {(d.member, d.library): d.detail for d in deps if d.source is None}
    assert set(unresolved) == {
        ("pkg/_bare.so", "libhelper.so"),
        ("pkg/_bare.so", "libtorch_cuda.so"),
        ("pkg/_bare.so", "libnowhere.so"),
    }
    assert (
        "no RPATH entry reaches it (add $ORIGIN/.)" in unresolved[("pkg/_bare.so", "libhelper.so")]
    )
    assert "$ORIGIN/../torch/lib" in unresolved[("pkg/_bare.so", "libtorch_cuda.so")]
    # neither torch-bound nor requiring apache-tvm-ffi: their libs do not count, RPATH or not
    deps = audit.resolve_dependencies(
        {"pkg/_good.so": good}, world, torch_bound=False, requires=["torch>=2"]
    )
    unresolved = {d.library: d.detail for d in deps if d.source is None}
    assert set(unresolved) == {"libhelper.so", "libtorch_cuda.so", "libtvm_ffi.so"}
    assert "only with requires-torch-abi" in unresolved["libtorch_cuda.so"]
    assert "apache-tvm-ffi, which the wheel does not require" in unresolved["libtvm_ffi.so"]


@needs_cc
def test_dt_needed_counts_what_the_requirements_bring_along_and_nothing_else(tmp_path):
    """sgl-deep-gemm's _C.so: libcublas.so.13 in nvidia/cu13/lib resolves because the wheel
    requires torch, torch cuda-toolkit[cublas], and that extra nvidia-cublas; an nvidia-*
    wheel nothing declares (or one behind an extra nobody asks for) does not count, even for
    a torch-ABI-bound wheel."""
    for lib in ("cublas", "cusparse", "nvjpeg"):
        compile_so(tmp_path, lib, soname=f"lib{lib}.so.13")
    so = compile_so(
        tmp_path, "dg", links=("cublas", "cusparse", "nvjpeg"), rpath="$ORIGIN/../nvidia/cu13/lib"
    )
    world = audit.LibraryWorld(
        site_dirs={
            "nvidia/cu13/lib": {
                "libcublas.so.13": "nvidia-cublas",
                "libcusparse.so.13": "nvidia-cusparse",
                "libnvjpeg.so.13": "nvidia-nvjpeg",
            }
        },
        system=frozenset(),
        requires={
            "torch": (
                'cuda-toolkit[cublas]==13.0.2; platform_system == "Linux"',
                'triton==3.6.0; platform_system == "Windows"',
                "not a req [",
            ),
            "cuda-toolkit": (
                "nvidia-cublas==13.1.0.3.*; extra == 'cublas'",
                "nvidia-cusparse==12.6.3.3.*; extra == 'cusparse'",
            ),
            "triton": ("nvidia-nvjpeg",),
        },
    )
    deps = audit.resolve_dependencies(
        {"deep_gemm/_C.so": so},
        world,
        torch_bound=True,
        requires=["torch==2.11.0", "apache-tvm-ffi==0.1.11"],
    )
    found = {d.library: d for d in deps}
    assert found["libcublas.so.13"].source == "nvidia-cublas"
    assert found["libcublas.so.13"].detail == "nvidia/cu13/lib"
    for lib, dist in (
        ("libcusparse.so.13", "nvidia-cusparse"),
        ("libnvjpeg.so.13", "nvidia-nvjpeg"),
    ):
        assert found[lib].source is None
        assert (
            f"in nvidia/cu13/lib of {dist}, which the wheel does not require (neither "
            "directly nor through what it requires)"
        ) in found[lib].detail
    assert audit.declared_closure(["torch==2.11.0"], world) == {
        "torch",
        "cuda-toolkit",
        "nvidia-cublas",
    }


def test_system_libraries_exclude_the_cuda_toolkit():
    system = audit.system_libraries()
    assert "libc.so.6" in system
    if Path("/usr/local/cuda/lib64/libcudart.so.13").exists():
        assert "libcudart.so.13" not in system


def test_local_label_names_archs_only_with_device_code(tmp_path):
    from sglforge.inputs.pins import parse_lockfile
    from sglforge.inputs.recipes import parse_recipe
    from sglforge.inputs.toolchain import load_toolchain

    root = Path(__file__).resolve().parents[1]
    lock = parse_lockfile(root / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(root / "lockfiles" / "toolchain.toml")
    base = 'upstream = "deepgemm"\nversion-label = "retag"\nmem-per-job = "1GiB"\n'
    recipe = tmp_path / "jit.toml"
    recipe.write_text(base + 'local-version = "sm120.cu{cuda}.{patchset8}"\ncuda-archs = []\n')
    with pytest.raises(SglforgeError, match="the label names sm120 but cuda-archs \\(empty"):
        parse_recipe(recipe, lock, toolchain)
    recipe.write_text(
        base + 'local-version = "sm120.cu{cuda}.{patchset8}"\ncuda-archs = ["sm_90a"]\n'
    )
    with pytest.raises(SglforgeError, match="names sm120 but cuda-archs \\(sm_90a\\)"):
        parse_recipe(recipe, lock, toolchain)
    recipe.write_text(
        base + 'local-version = "sm120.cu{cuda}.{patchset8}"\ncuda-archs = ["sm_120f"]\n'
    )
    assert parse_recipe(recipe, lock, toolchain).local_label("ab", "130") == "sm120.cu130.ab"
    # the shipped recipes obey the rule (they all load)
    from sglforge.inputs.recipes import load_recipes

    recipes = load_recipes(root / "recipes", lock, toolchain)
    assert recipes["sgl-deep-gemm"].local_label("abcdef12", "130") == "cu130.abcdef12"
    assert sys.version_info >= (3, 10)


# -- through `sglforge build` ---------------------------------------------------------------


@needs_cc
def test_build_drops_litter_tags_the_platform_and_audits_dt_needed(tmp_path):
    """A DeepGEMM-like setuptools package (ninja dir in the package, _C.so as package data):
    the published wheel has no litter, a linux_x86_64 tag, installs, and an unresolvable
    DT_NEEDED fails the build naming file and library unless the recipe says warn."""
    from tests.fixtures.project import make_project
    from tests.helpers import install_lock, snapshot

    project = make_project(tmp_path, ("nativepy",))
    result = project.run("build")
    assert result.returncode == 0, result.stderr
    assert (
        "removed 4 build-litter member(s): nativepy/_C_build/.ninja_deps, "
        "nativepy/_C_build/.ninja_log, nativepy/_C_build/build.ninja, "
        "nativepy/_C_build/cpp_0.o"
    ) in result.stdout
    assert "libc.so.6 (system)" in result.stdout
    [entry] = project.manifest()["wheels"]
    version = entry["version"]
    assert version.startswith("0.1.0+cu") and "sm" not in version
    assert entry["file"] == f"nativepy-{version}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(project.root / "wheels" / entry["file"]) as archive:
        assert not [n for n in archive.namelist() if "_C_build" in n]
        assert "nativepy/_C.so" in archive.namelist()
    python = fresh_venv(tmp_path / "serving")
    install = install_lock(python, project.root)
    assert install.returncode == 0, install.stderr
    code = "import importlib.metadata as m; print(m.version('nativepy'))"
    assert (
        subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == version
    )

    recipe = project.recipe("nativepy")
    recipe.write_text(recipe.read_text() + '\n[env]\nNATIVEPY_GHOST = "1"\n')
    before = snapshot(project.root / "wheels")
    failed = project.run("build")
    assert failed.returncode == 1
    assert "DT_NEEDED audit: 1 unresolvable" in failed.stderr
    assert "nativepy/_C.so: libghost.so: not in the wheel, a required" in failed.stderr
    assert snapshot(project.root / "wheels") == before

    recipe.write_text(recipe.read_text().replace("mem-per-job", 'elf-deps = "warn"\nmem-per-job'))
    warned = project.run("build")
    assert warned.returncode == 0, warned.stderr
    assert "warning: " in warned.stdout and "nativepy/_C.so: libghost.so" in warned.stdout
