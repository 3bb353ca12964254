"""Which toolchain differences change the bytes (issue 32, item 5): the demo's CUDA extension
(demo/upstreams.py: vecadd.cu, scale.cu, reduce.cu) compiled the way a build compiles it
(`-objtemp`, `-frandom-seed=<source path>`, `-ffile-prefix-map`, one fixed directory and one
fixed toolkit path) and linked into `libcudaext.so`, once per toolchain variant; every object
and the library compared by sha256 and, where they differ, ELF section by section and by
symbol names. Prints JSON (committed figures: bench/toolchain-bytes.json).

    python -m bench.toolchain_bytes --cuda /usr/local/cuda-13.0 --work /tmp/tcb \\
        --variant base,-,g++-12,- --variant again,-,g++-12,- \\
        --variant nvcc-13.0.48,-,g++-12,DIR [--variant LABEL,ROOT,GCC,NVCC_WHEELS ...]

Each variant is compared with the first, or with the one named after its label
(`LABEL:OTHER`). NVCC_WHEELS is a directory with the
nvidia-cuda-nvcc, nvidia-nvvm and nvidia-cuda-crt wheels of one release (`pip download
--no-deps nvidia-cuda-nvcc==V nvidia-nvvm==V nvidia-cuda-crt==V`): the variant swaps only the
compiler parts of a copy of --cuda kept at one path (bin/, nvvm/, include/crt; the cudart
and CCCL headers stay), so the toolkit path never differs. ROOT is another root filesystem
(e.g. `debootstrap --variant=minbase --include=g++-12 trixie ROOT`) the compiles run in,
through bubblewrap, with the work directory at the same path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

from demo.upstreams import CUDAEXT_CU

GENCODE = "arch=compute_120a,code=sm_120a"


def sections(path: Path) -> dict[str, str]:
    """ELF64 little-endian section name -> sha256 of its bytes (NOBITS: of its size)."""
    data = path.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]
    found = {}
    for name, kind, _flags, _addr, offset, size, *_ in headers[1:]:
        start = names[4] + name
        label = data[start : data.index(b"\0", start)].decode()
        body = b"%d" % size if kind == 8 else data[offset : offset + size]
        found[label if label not in found else f"{label}#{len(found)}"] = hashlib.sha256(
            body
        ).hexdigest()[:16]
    return found


def comment(path: Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-p", ".comment", str(path)], capture_output=True, text=True, check=False
    ).stdout
    return [line.split("]", 1)[1].strip() for line in out.splitlines() if "]" in line]


def symbols(path: Path) -> set[str]:
    out = subprocess.run(["nm", "-a", str(path)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.split()}


def inside(root: Path | None, work: Path) -> list[str]:
    """The command prefix running a tool on another root filesystem (another Debian, for
    its glibc or its gcc) with `work` at the same path: bubblewrap, as the build sandbox."""
    if root is None:
        return []
    return ["bwrap", "--bind", str(root), "/", "--bind", str(work), str(work)] + [
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/run",
        "--",
    ]


def build(work: Path, cuda: Path, gcc: str, root: Path | None = None) -> dict[str, Path]:
    """Compile the three TUs and link the library in `work` (always the same path)."""
    run = inside(root, work)
    obj = work / "obj"
    shutil.rmtree(obj, ignore_errors=True)
    obj.mkdir(parents=True)
    for rel, text in CUDAEXT_CU.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    nvcc = str(cuda / "bin" / "nvcc")
    common = ["-ccbin", gcc, "-O2", "-Xcompiler", "-fPIC", "-gencode", GENCODE, "-objtemp"]
    outputs = {}
    for rel in sorted(CUDAEXT_CU):
        out = obj / (Path(rel).stem + ".o")
        subprocess.run(
            [*run, nvcc, "-c", *common, f"-frandom-seed={rel}"]
            + ["-Xcompiler", f"-ffile-prefix-map={work}=/sglforge-build", rel, "-o", str(out)],
            cwd=work,
            check=True,
        )
        outputs[out.name] = out
    lib = obj / "libcudaext.so"
    subprocess.run(
        [*run, nvcc, "-shared", "-ccbin", gcc, "-frandom-seed=libcudaext.so"]
        + ["-o", str(lib), *(str(outputs[n]) for n in sorted(outputs))],
        cwd=work,
        check=True,
    )
    outputs[lib.name] = lib
    return outputs


def snapshot(outputs: dict[str, Path], keep: Path) -> dict[str, Path]:
    keep.mkdir(parents=True, exist_ok=True)
    kept = {}
    for name, path in outputs.items():
        kept[name] = keep / name
        shutil.copyfile(path, kept[name])
    return kept


def toolkit(work: Path, cuda: Path, wheels: Path | None) -> Path:
    """A copy of `cuda` at work/cuda; with `wheels`, its compiler parts from those wheels."""
    dest = work / "cuda"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(cuda, dest, symlinks=True)
    if wheels is None:
        return dest
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                rel = member.removeprefix("nvidia/cu13/")
                if rel == member or member.endswith("/"):
                    continue
                if rel.startswith("bin/") and Path(rel).name in ("cicc",):
                    rel = "nvvm/bin/cicc"  # the wheel's layout; the toolkit's profile looks here
                if rel.startswith(("bin/", "nvvm/", "include/crt/")) and rel != "bin/nvcc.profile":
                    target = dest / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.unlink(missing_ok=True)
                    target.write_bytes(archive.read(member))
                    target.chmod(0o755 if rel.startswith(("bin/", "nvvm/bin/")) else 0o644)
    return dest


def compare(base: dict[str, Path], other: dict[str, Path]) -> dict[str, dict]:
    found = {}
    for name in sorted(base):
        a, b = base[name], other[name]
        sa, sb = sections(a), sections(b)
        differing = sorted(k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k))
        ya, yb = symbols(a), symbols(b)
        found[name] = {
            "identical": a.read_bytes() == b.read_bytes(),
            "size": [a.stat().st_size, b.stat().st_size],
            "sections_differing": differing,
            "symbols_only_in_base": sorted(ya - yb)[:8],
            "symbols_only_in_variant": sorted(yb - ya)[:8],
            "comment": [comment(a), comment(b)] if ".comment" in differing else None,
        }
    return found


def sha256s(outputs: dict[str, Path]) -> dict[str, str]:
    return {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in sorted(outputs.items())}


def versions(run: list[str], cuda: Path, gcc: str) -> dict[str, object]:
    def first(cmd: list[str], lines: slice) -> list[str]:
        out = subprocess.run([*run, *cmd], capture_output=True, text=True, check=True).stdout
        return out.strip().splitlines()[lines]

    return {
        "nvcc": first([str(cuda / "bin" / "nvcc"), "--version"], slice(-2, None)),
        "gcc": first([gcc, "--version"], slice(0, 1))[0],
        "as": first(["as", "--version"], slice(0, 1))[0],
        "glibc": first(["ldd", "--version"], slice(0, 1))[0],
        # read from the headers themselves: an overlaid root's dpkg database may not know
        "linux-headers": _kernel_version(
            first(["cat", "/usr/include/linux/version.h"], slice(None))
        ),
    }


def _kernel_version(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("#define LINUX_VERSION_CODE "):
            code = int(line.split()[-1])
            return f"{code >> 16}.{(code >> 8) & 255}.{code & 255}"
    return "unknown"


def parse_variant(spec: str) -> tuple[str, Path | None, str, Path | None]:
    """LABEL[:AGAINST],ROOT,GCC,NVCC_WHEELS: compared with variant AGAINST (default: the
    first); ROOT and NVCC_WHEELS '-' for none (this host, --cuda's compiler)."""
    label, root, gcc, wheels = spec.split(",")
    return label, None if root == "-" else Path(root), gcc, None if wheels == "-" else Path(wheels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", type=Path, default=Path("/usr/local/cuda-13.0"))
    parser.add_argument(
        "--variant", action="append", required=True, metavar="LABEL[:AGAINST],ROOT,GCC,WHEELS"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/tcb"))
    args = parser.parse_args()
    results, built = {}, {}
    for spec, root, gcc, wheels in map(parse_variant, args.variant):
        label, _, against = spec.partition(":")
        cuda = toolkit(args.work, args.cuda, wheels)
        entry = versions(inside(root, args.work), cuda, gcc)
        built[label] = snapshot(build(args.work, cuda, gcc, root), args.work / "kept" / label)
        entry["sha256"] = sha256s(built[label])
        reference = against or next(iter(built))
        if reference != label:
            entry["against"] = reference
            entry["differences"] = compare(built[reference], built[label])
        results[label] = entry
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
