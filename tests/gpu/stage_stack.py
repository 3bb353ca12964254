"""Assemble the H200 smoke stack (issue 13): PyPI wheels, some replaced by sglforge-built ones,
installed into one site directory, trimmed to what an H200 (sm_90) PD pair over NIXL/UCX needs,
and packed as site.tar.xz small enough for the device's 64 MiB transfer limit.

Not part of the tests (pytest does not collect tests/gpu). Run here, where pip reaches PyPI:

    sglforge build --target h200-verify flashinfer-python      # targets/h200-verify.toml
    python tests/gpu/stage_stack.py OUT --wheels CACHE \\
        --sglforge-wheel wheels/targets/h200-verify/flashinfer_python-0.6.12+...whl

OUT/site.tar.xz holds site/ (use it as PYTHONPATH=<dir>/site on top of the host's torch venv)
and OUT/stack-manifest.json says, per distribution, its version and origin: "pypi" (wheel file
and sha256 as downloaded) or "sglforge" (wheel file, sha256, sglforge-build.json provenance),
plus what was trimmed. OUT/wheels.lock (also site/wheels.lock) pins every staged wheel by
sha256, a comment naming its origin: the wheel set a smoke receipt binds
(`sglforge smoke --python ... --lock site/wheels.lock`); OUT/wheels/ holds exactly those
wheels (hard links), for `sglforge receipt verify RECEIPT --wheels OUT/wheels`.
The stack is built at run time and never committed.
Recipe and sizes: shared/reference/h200-pd/RECIPE.md.

Issue 37 (every distribution ours but the kernel, which the GPU host builds):

    python tests/gpu/stage_stack.py OUT --wheels CACHE --extra-pin libucx-cu13==1.22.0 \
        --without sglang-kernel --sglforge-wheel W1 ... --sglforge-wheel W5
    # on the GPU host, after `sglforge build --target h200-verify sglang-kernel` there:
    python tests/gpu/stage_stack.py OUT --add-to --sglforge-wheel sglang_kernel-...whl

libucx-cu13 is what sglforge's nixl-cu13 loads UCX from (RUNPATH $ORIGIN/../../libucx/lib);
its static libraries, perftest programs and headers are dropped and its triple copies of each
library become one file and two links (`trim_libucx`), or the staged site would not fit.
`--add-to` installs into the unpacked OUT/site with pip alone (no network) and pins the added
wheels in its wheels.lock and manifest, so the receipt binds them like every other wheel.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

# sglang 0.5.15 is the torch 2.11 generation (the H200 hosts run torch 2.11.0+cu130); the
# rest is what its launch path imports (RECIPE.md), pinned where sglang pins.
PINS = [
    "sglang==0.5.15",
    "sglang-kernel==0.4.4",
    "flashinfer-python==0.6.12",
    "nixl-cu13==1.5.1",
    "nixl==1.5.1",
    "sglang-router==0.3.2",
    "transformers==5.12.1",
    "tokenizers==0.22.2",
    "apache-tvm-ffi==0.1.11",
    "fastapi==0.120.4",
    "starlette==0.49.3",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "annotated-doc==0.0.7",
    "typing-extensions==4.16.0",
    "uvicorn==0.54.0",
    "orjson==3.13.0",
    "pyzmq==27.3.0",
    "msgspec==0.23.0",
    "setproctitle==1.3.8",
    "python-multipart==0.0.34",
    "pybase64==1.5.1",
    "partial-json-parser==0.2.1.1.post7",
    "interegular==0.3.3",
    "distro==1.9.0",
    "easydict==1.14",
    "zstandard==0.25.0",
    "ipython==9.18.1",
    "traitlets==5.16.1",
    "dill==0.4.1",
    "openai==2.6.1",
    "jiter==0.19.0",
    "sniffio==1.3.1",
    "jsonschema==4.26.0",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "jsonschema-specifications==2025.9.1",
    "soundfile==0.13.1",
    "cffi==2.1.1",
    "pycparser==3.12",
    "compressed-tensors==0.20.1",
    "gguf==0.19.0",
    "loguru==0.7.3",
]
PLATFORMS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    # sglforge's own native builds (sgl-deep-gemm) are tagged for this host's
    # platform, not manylinux: they run where they were built against the same glibc
    "linux_x86_64",
]
TARGET = [
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--only-binary=:all:",
    *[a for p in PLATFORMS for a in ("--platform", p)],
]
# What an H200 PD pair does not load (RECIPE.md "Slimming"), relative to site/.
DROP = [
    "sgl_kernel/flash_ops.abi3.so",  # FA3, 1.76 GB; the profiles use triton attention
    "sgl_kernel/flashmla_ops.abi3.so",  # MLA models only
    "sgl_kernel/sm100",  # Blackwell build; an H200 loads sm90/common_ops
    "flashinfer/data/cutlass",  # JIT headers the norm/rope kernels do not include
    "flashinfer/data/spdlog",
    "nixl_ep_cu13",  # NIXL-EP for torch 2.12-2.14, not used by SGLang PD
    "sglang/multimodal_gen",
]
STRIP = ["sglang_router", "zstandard", "tokenizers", "libucx"]  # extension modules and
# libraries, --strip-unneeded
# libucx-cu13 (beside sglforge's nixl-cu13, which links UCX from it): what a PD pair over UCX
# never reads (static libraries, libtool files, headers, CMake/pkg-config files, the perftest
# programs and their CUDA module), relative to site/; the wheel also ships each library three
# times (libucp.so, .so.0, .so.0.0.0: a zip has no links), which `dedupe_libraries` turns back
# into one file and two links. 150 MB unpacked -> 17 MB.
LIBUCX_DROP = ["libucx/bin", "libucx/include", "libucx/lib/cmake", "libucx/lib/pkgconfig"]
LIBUCX_DROP_GLOBS = [
    "libucx/lib/**/*.a",
    "libucx/lib/**/*.la",
    "libucx/lib/ucx/libucx_perftest_cuda.*",
]
LIBUCX_DIRS = ["libucx/lib", "libucx/lib/ucx"]
NIXL_LIB_DIRS = [".nixl_cu13.mesonpy.libs", "nixl_cu13.libs"]
NIXL_ROOTS = [
    "nixl_cu13/_bindings",
    "nixl_cu13/_utils",
    "libplugin_UCX",
    "ucx/libuct_cuda",
    "ucx/libuct_cma",
    "ucx/libucm_cuda",
]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> str:
    return canonical(path.name.split("-")[0])


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(wheels: Path, pins: list[str] = PINS) -> None:
    have = {wheel_name(p) + "==" + p.name.split("-")[1] for p in wheels.glob("*.whl")}
    todo = [p for p in pins if canonical(p.split("==")[0]) + "==" + p.split("==")[1] not in have]
    if todo:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                *TARGET,
                "-d",
                str(wheels),
                *todo,
            ],
            check=True,
        )


def provenance_of(wheel: Path) -> dict | None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.count("/") == 1 and member.endswith(".dist-info/sglforge-build.json"):
                return json.loads(archive.read(member))
    return None


def closure(site: Path) -> set[Path]:
    """NIXL's Python bindings, its UCX plugin and the UCX CUDA/CMA modules, with every
    library they need (readelf NEEDED) from NIXL's own library directories."""
    files = [p for d in NIXL_LIB_DIRS for p in (site / d).rglob("*") if p.is_file()]
    files += [p for p in (site / "nixl_cu13").glob("*.so")]
    index: dict[str, Path] = {}
    for path in files:
        index.setdefault(path.name, path)
    todo = [
        p
        for p in files
        if any(r in str(p.relative_to(site)) for r in NIXL_ROOTS) and ".so" in p.name
    ]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        out = subprocess.run(
            ["readelf", "-d", str(path)], capture_output=True, text=True, check=False
        ).stdout
        for needed in re.findall(r"\(NEEDED\).*\[(.+?)\]", out):
            if needed in index:
                todo.append(index[needed])
    return seen


def dedupe_libraries(directory: Path) -> int:
    """Same-content files of one library (`libX.so`, `libX.so.0`, `libX.so.0.0.0`) become one
    file (the longest name, the real soname's target) and relative links to it; bytes saved."""
    groups: dict[tuple[str, str], list[Path]] = {}
    for path in sorted(directory.glob("*.so*")):
        if path.is_file() and not path.is_symlink():
            stem = path.name.split(".so", 1)[0]
            groups.setdefault((stem, sha256(path)), []).append(path)
    saved = 0
    for paths in groups.values():
        keep = max(paths, key=lambda p: (len(p.name), p.name))
        for path in paths:
            if path != keep:
                saved += path.stat().st_size
                path.unlink()
                path.symlink_to(keep.name)
    return saved


def trim_libucx(site: Path) -> dict[str, int]:
    removed: dict[str, int] = {}
    if not (site / "libucx").is_dir():
        return removed

    def size(path: Path) -> int:
        return sum(
            p.lstat().st_size
            for p in ([path] if path.is_file() else path.rglob("*"))
            if p.is_file()
        )

    for relative in LIBUCX_DROP:
        path = site / relative
        if path.exists():
            removed[relative] = size(path)
            shutil.rmtree(path)
    dropped = 0
    for pattern in LIBUCX_DROP_GLOBS:
        for path in site.glob(pattern):
            if path.is_file():
                dropped += path.stat().st_size
                path.unlink()
    removed["libucx static/libtool/perftest files"] = dropped
    removed["libucx duplicate library copies (now links)"] = sum(
        dedupe_libraries(site / d) for d in LIBUCX_DIRS if (site / d).is_dir()
    )
    return removed


def trim(site: Path) -> dict[str, int]:
    removed: dict[str, int] = trim_libucx(site)

    def size(path: Path) -> int:
        if path.is_file() or path.is_symlink():
            return path.lstat().st_size
        return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file())

    for relative in DROP:
        path = site / relative
        if path.exists():
            removed[relative] = size(path)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    keep = closure(site)
    nixl_removed = 0
    for directory in NIXL_LIB_DIRS:
        for path in sorted((site / directory).rglob("*")):
            if path.is_file() and ".so" in path.name and path not in keep:
                nixl_removed += path.stat().st_size
                path.unlink()
    removed["nixl libraries outside the UCX plugin closure"] = nixl_removed
    for package in STRIP:
        for path in (site / package).rglob("*.so*"):
            if path.is_symlink() or not path.is_file():
                continue
            before = path.stat().st_size
            subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
            removed[f"strip {path.relative_to(site)}"] = before - path.stat().st_size
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache)
    return removed


def write_lock(out: Path, chosen: dict[str, tuple[Path, str]]) -> None:
    """wheels.lock: one hash pin per staged wheel, its origin in a comment above it; and
    wheels/: exactly those wheel files (hard links where the file system allows)."""
    lines = [
        "# The H200 smoke stack staged by tests/gpu/stage_stack.py: every wheel installed",
        "# into site/, by sha256. Origin per wheel: built by sglforge, or from PyPI.",
        "",
    ]
    wheels = out / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir()
    for name, (wheel, origin) in sorted(chosen.items()):
        version = wheel.name.split("-")[1]
        note = origin
        if origin == "sglforge":
            prov = provenance_of(wheel) or {}
            note = f"built by sglforge ({prov.get('upstream')}@{str(prov.get('commit'))[:12]})"
        else:
            note = "from PyPI"
        lines += [
            f"# {name}: {note}",
            f"{name}=={version} \\",
            f"    --hash=sha256:{sha256(wheel)}",
        ]
        try:
            os.link(wheel, wheels / wheel.name)
        except OSError:
            shutil.copy(wheel, wheels / wheel.name)
    (out / "wheels.lock").write_text("\n".join(lines) + "\n")


def manifest_entry(wheel: Path, origin: str, name: str) -> dict:
    entry = {
        "version": wheel.name.split("-")[1],
        "origin": origin,
        "wheel": wheel.name,
        "sha256": sha256(wheel),
    }
    if origin == "pypi":
        entry["index"] = f"https://pypi.org/project/{name}/{entry['version']}/"
    else:
        entry["provenance"] = provenance_of(wheel)
    return entry


def pip_install(site: Path, wheels: list[Path]) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--no-index",
            *TARGET,
            "--target",
            str(site),
            *map(str, wheels),
        ],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


def pack(out: Path) -> Path:
    archive = out / "site.tar.xz"
    if shutil.which("xz"):  # multi-threaded: minutes instead of a quarter hour
        with open(archive, "wb") as sink:
            tar = subprocess.Popen(
                ["tar", "-C", str(out), "-cf", "-", "site"], stdout=subprocess.PIPE
            )
            subprocess.run(
                ["xz", "-9", f"-T{os.cpu_count() or 1}", "-c"],
                stdin=tar.stdout,
                stdout=sink,
                check=True,
            )
            if tar.wait() != 0:
                raise SystemExit("tar failed")
    else:
        with tarfile.open(archive, "w:xz", preset=9) as tar:
            tar.add(out / "site", arcname="site")
    return archive


def add_to(out: Path, wheels: list[Path]) -> int:
    """`--add-to OUT`: install sglforge-built wheels made on the GPU host itself (the sm_90a
    sglang-kernel) into OUT/site, an unpacked stack staged without them (`--without`), trim
    them like the rest, and pin them in OUT/wheels.lock, site/wheels.lock and the manifests.
    Needs only pip (no network) and readelf/strip where the trims use them."""
    site = out / "site"
    manifest_path = site / "sglforge-stack-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for wheel in wheels:
        if provenance_of(wheel) is None:
            raise SystemExit(f"{wheel}: no sglforge-build.json; not built by sglforge")
        name = wheel_name(wheel)
        if name in manifest["packages"]:
            raise SystemExit(f"{name} is already in {site}; stage it --without {name}")
    pip_install(site, wheels)
    removed = trim(site)
    lock = (site / "wheels.lock").read_text().rstrip("\n").split("\n")
    for wheel in wheels:
        name = wheel_name(wheel)
        entry = manifest_entry(wheel, "sglforge", name)
        entry["added_on_gpu_host"] = True
        manifest["packages"][name] = entry
        prov = entry["provenance"] or {}
        lock += [
            (
                f"# {name}: built by sglforge ({prov.get('upstream')}@"
                f"{str(prov.get('commit'))[:12]}) on this host, added by --add-to"
            ),
            f"{name}=={entry['version']} \\",
            f"    --hash=sha256:{entry['sha256']}",
        ]
    manifest["trimmed_bytes_added"] = removed
    manifest["unpacked_bytes"] = sum(p.lstat().st_size for p in site.rglob("*") if p.is_file())
    manifest["packages"] = dict(sorted(manifest["packages"].items()))
    manifest.pop("to_add", None)
    text = json.dumps(manifest, indent=2) + "\n"
    for path in (manifest_path, out / "stack-manifest.json"):
        path.write_text(text)
    for path in (site / "wheels.lock", out / "wheels.lock"):
        path.write_text("\n".join(lock) + "\n")
    print(
        f"{site}: added {', '.join(w.name for w in wheels)}; "
        f"{manifest['unpacked_bytes'] / 1e6:.0f} MB unpacked"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--wheels", type=Path, help="PyPI wheel cache (staging)")
    parser.add_argument(
        "--sglforge-wheel",
        type=Path,
        action="append",
        default=[],
        help="a wheel sglforge built; replaces the PyPI wheel of that name",
    )
    parser.add_argument(
        "--extra-pin",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="one more PyPI wheel (e.g. libucx-cu13==1.22.0, which sglforge's "
        "nixl-cu13 loads UCX from)",
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="NAME",
        help="stage no wheel of NAME: it is built on the GPU host and added there with --add-to",
    )
    parser.add_argument(
        "--add-to",
        action="store_true",
        help="OUT holds a staged, unpacked site/: add the --sglforge-wheel "
        "wheels to it (on the GPU host)",
    )
    parser.add_argument("--no-download", action="store_true")
    args = parser.parse_args()
    if args.add_to:
        return add_to(args.out.resolve(), [w.resolve() for w in args.sglforge_wheel])
    if args.wheels is None:
        parser.error("--wheels is required when staging")
    pins = PINS + args.extra_pin
    without = {canonical(n) for n in args.without}
    args.wheels.mkdir(parents=True, exist_ok=True)
    if not args.no_download:
        download(args.wheels, pins)
    pinned = {canonical(p.split("==")[0]): p.split("==")[1] for p in pins}
    chosen: dict[str, tuple[Path, str]] = {}
    for wheel in sorted(args.wheels.glob("*.whl")):
        name = wheel_name(wheel)
        if name in pinned and wheel.name.split("-")[1] == pinned[name]:
            chosen[name] = (wheel, "pypi")
    for wheel in args.sglforge_wheel:
        if provenance_of(wheel) is None:
            raise SystemExit(f"{wheel}: no sglforge-build.json; not built by sglforge")
        chosen[wheel_name(wheel)] = (wheel.resolve(), "sglforge")
    missing = sorted(set(pinned) - set(chosen) - without)
    if missing:
        raise SystemExit(f"missing wheels in {args.wheels}: {', '.join(missing)}")
    for name in without:
        chosen.pop(name, None)
    out = args.out.resolve()
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    pip_install(site, [w for w, _ in chosen.values()])
    unpacked = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    removed = trim(site)
    manifest = {
        "python": "cp312",
        "platform": "manylinux x86_64",
        "purpose": "H200 PD smoke stack on top of the host's torch 2.11.0+cu130 venv",
        "packages": {},
        "trimmed_bytes": removed,
        "unpacked_bytes_before_trim": unpacked,
    }
    if without:
        manifest["to_add"] = sorted(without)  # built and added on the GPU host (--add-to)
    for name, (wheel, origin) in sorted(chosen.items()):
        manifest["packages"][name] = manifest_entry(wheel, origin, name)
    manifest["unpacked_bytes"] = sum(p.lstat().st_size for p in site.rglob("*") if p.is_file())
    (out / "stack-manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.copy(out / "stack-manifest.json", site / "sglforge-stack-manifest.json")
    write_lock(out, chosen)
    shutil.copy(out / "wheels.lock", site / "wheels.lock")
    archive = pack(out)
    print(
        f"{archive}: {archive.stat().st_size / 1e6:.1f} MB "
        f"({manifest['unpacked_bytes'] / 1e6:.0f} MB unpacked); "
        f"sglforge-built: {[n for n, (_, o) in chosen.items() if o == 'sglforge']}"
        + (f"; to add on the GPU host: {sorted(without)}" if without else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
