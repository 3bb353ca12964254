"""Architecture audit: every ELF in a wheel that holds device code must carry the SASS the
recipe requires (e.g. `sm_120a`). Uses `cuobjdump --list-elf` (CUDA toolkit, or the PyPI
package `nvidia-cuda-cuobjdump`), which prints one line per embedded cubin:

    ELF file    1: common_ops.1.sm_120a.cubin

except that a family-specific cubin (`code=sm_120f`) is listed as `….sm_120.cubin` (cuobjdump
12.8 and 13.5 alike). Where the recipe requires an `f` arch, the fatbin headers of
`cuobjdump -elf` (`arch = sm_120f`, one per cubin) are read for the ELFs that list the bare
arch, so an sm_120f build passes and a plain sm_120 one does not.

Which GPUs an ELF runs on follows from what it carries, by CUDA's compatibility rules
(`runs_on`): SASS `sm_XY` runs on compute capability X.Z for Z >= Y (same major); `sm_XYa` on
X.Y alone; `sm_XYf` on the family's members from X.Y up (sm_120f: 12.0 and 12.1, RTX PRO 6000
and DGX Spark / GB10); PTX `compute_XY` JIT-compiles on every capability from X.Y up,
`compute_XYa` on X.Y alone, `compute_XYf` on the family. `--list-elf` names an sm_120f cubin
`sm_120`, and a plain sm_120 cubin runs on the same known GPUs, so the listing suffices here;
`cuobjdump --list-ptx` names PTX with its suffix (`….sm_120f.ptx`).

Carrying the SASS is not enough: CUTLASS (and code written like it) guards arch-conditional
instructions with macros, and where a guard does not accept the target the kernel compiles to
a stub that prints an error at run time instead of computing (`stubs`): "ERROR : Arch
conditional MMA instruction used without targeting appropriate compute capability", "Attempting
to use SM120_16x8x32_TN without CUTE_ARCH_F8F6F4_MMA_ENABLED". An `sm_120f` build where a guard
accepts only `sm_120a` gives exactly that, silently. The audit extracts each cubin
(`cuobjdump -xelf all`), finds those messages in its data and the kernels that reach `vprintf`
(its `.nv.callgraph`), and fails the build on a stub meant for the cubin's own arch: one whose
message or kernel names that arch's major (SM120, Sm121, …) or no arch at all. A stub that
names only other archs (an SM90 GMMA atom instantiated in the sm_120 cubin of a TU that also
serves Hopper) is never launched there, since the host dispatches by compute capability; it is
reported, not fatal.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError

CUBIN_LINE = re.compile(r"ELF file\s+[0-9]+:\s*\S*?\.(sm_[0-9]+[af]?)\.cubin")
FATBIN_ARCH = re.compile(r"arch = (sm_[0-9]+[af]?)")  # a fatbin entry's header in `-elf`
PTX_LINE = re.compile(r"PTX file\s+[0-9]+:\s*\S*?\.(sm_[0-9]+[af]?)\.ptx")
ARCH = re.compile(r"sm_([0-9]+)([0-9])([af]?)")
COMPUTE_CAPABILITY = re.compile(r"([0-9]{1,2})\.([0-9])")

# The compute capabilities CUDA 13 compiles for (Turing and later; 11.0 is Thor, 10.1 before
# CUDA 13): the GPUs a loadability answer is given for.
KNOWN_DEVICES = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")


def _cc(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def runs_on(arch: str, *, ptx: bool = False) -> tuple[str, ...]:
    """The known compute capabilities that code for `arch` (`sm_120a`, or for PTX the same
    spelling of `compute_120a`) runs on, by CUDA's rules (module docstring)."""
    match = ARCH.fullmatch(arch)
    if match is None:
        raise ValueError(f"{arch!r} is not an arch like sm_120a")
    major, minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
    devices = [_cc(d) for d in KNOWN_DEVICES]
    if suffix == "a":
        chosen = [d for d in devices if d == (major, minor)]
    elif suffix == "f" or not ptx:  # a family, or plain SASS: the same major, this minor up
        chosen = [d for d in devices if d[0] == major and d[1] >= minor]
    else:  # plain PTX: JIT on anything from here up
        chosen = [d for d in devices if d >= (major, minor)]
    return tuple(f"{a}.{b}" for a, b in chosen)


def implied_devices(required: tuple[str, ...]) -> tuple[str, ...]:
    """The GPUs a recipe's `cuda-archs` promise (each required SASS arch's `runs_on`)."""
    found = {d for arch in required for d in runs_on(arch)}
    return tuple(d for d in KNOWN_DEVICES if d in found)


def family_devices(required: tuple[str, ...]) -> tuple[str, ...]:
    """The known GPUs of the majors `required` names (sm_120a: 12.0 and 12.1): what the
    audit reports loadability for, so an arch-specific build says where it does not run."""
    majors = {int(ARCH.fullmatch(a).group(1)) for a in required if ARCH.fullmatch(a)}
    return tuple(d for d in KNOWN_DEVICES if _cc(d)[0] in majors)


def parse_devices(text: str) -> tuple[str, ...]:
    """ "12.0,12.1" -> ("12.0", "12.1"); an unknown capability is an error naming it."""
    devices = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [d for d in devices if d not in KNOWN_DEVICES]
    if not devices or bad:
        raise SglforgeError(
            f"--gpu {text!r}: {', '.join(map(repr, bad)) or 'no compute capability'} is not a "
            f"known compute capability (known: {', '.join(KNOWN_DEVICES)})"
        )
    return devices


@dataclass(frozen=True)
class Stub:
    """Arch-conditional stub code found in one cubin (module docstring)."""

    cubin: str  # "cubin 2": its number in the ELF, as `cuobjdump -xelf` counts them
    arch: str  # its SASS arch (sm_120f once device_code resolved the family listing)
    messages: tuple[str, ...]  # the stub messages, sorted
    kernels: tuple[str, ...]  # entry kernels that reach vprintf (mangled), sorted
    fatal: bool  # meant for this cubin's arch (or for no named arch)

    def describe(self) -> str:
        kernels = ", ".join(k[:120] + ("…" if len(k) > 120 else "") for k in self.kernels[:3])
        more = f" (+{len(self.kernels) - 3} more)" if len(self.kernels) > 3 else ""
        return (
            f"{self.cubin} ({self.arch}): {'; '.join(repr(m) for m in self.messages[:3])}"
            + (f" (+{len(self.messages) - 3} more)" if len(self.messages) > 3 else "")
            + (f"; kernels: {kernels}{more}" if self.kernels else "")
        )


@dataclass(frozen=True)
class ElfArchs:
    member: str  # path inside the wheel
    archs: tuple[str, ...]  # SASS targets found, sorted
    ptx: tuple[str, ...] = ()  # PTX targets found (sm_ spelling of compute_), sorted
    stubs: tuple[Stub, ...] = ()  # arch-conditional stubs in its cubins (`stubs`)

    def runs_with(self, device: str) -> str | None:
        """What a GPU of compute capability `device` runs from this ELF: its SASS if some
        cubin fits, else PTX it JIT-compiles at load, else None (no kernel image)."""
        for arch in self.archs:
            if device in runs_on(arch):
                return f"SASS {arch}"
        for arch in self.ptx:
            if device in runs_on(arch, ptx=True):
                return f"PTX {arch.replace('sm_', 'compute_')} (JIT)"
        return None

    def describe(self, devices: tuple[str, ...]) -> str:
        """ "sm_120a; runs on 12.0 (SASS sm_120a); not on 12.1" for the audit's log line."""
        parts = [", ".join(self.archs) or "no SASS"]
        if self.ptx:
            parts.append("PTX " + ", ".join(a.replace("sm_", "compute_") for a in self.ptx))
        runs = {d: self.runs_with(d) for d in devices}
        if any(runs.values()):
            parts.append("runs on " + ", ".join(f"{d} ({w})" for d, w in runs.items() if w))
        missing = [d for d, w in runs.items() if w is None]
        if missing:
            parts.append("not on " + ", ".join(missing))
        return "; ".join(parts)


CUOBJDUMP_VAR = "SGLFORGE_CUOBJDUMP"


def find_cuobjdump(cuda_home: Path | None = None) -> Path | None:
    """$SGLFORGE_CUOBJDUMP (an explicit choice; `nox -s build` passes on the one its preflight
    found, since the toolchain venv the build runs in carries none), else the toolkit's, PATH's,
    or a `nvidia-cuda-cuobjdump` wheel's on this interpreter's path."""
    chosen = os.environ.get(CUOBJDUMP_VAR)
    if chosen:
        path = Path(chosen)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SglforgeError(f"{CUOBJDUMP_VAR}={chosen}: not an executable file")
        return path
    candidates = []
    if cuda_home is not None:
        candidates.append(cuda_home / "bin" / "cuobjdump")
    on_path = shutil.which("cuobjdump")
    if on_path:
        candidates.append(Path(on_path))
    for base in {
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        *[p for p in sys.path if p.endswith("site-packages")],
    }:
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            candidates.append(Path(base) / "nvidia" / sub / "bin" / "cuobjdump")
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def list_archs(
    cuobjdump: Path, elf: Path, families: bool = False, label: str | None = None
) -> tuple[str, ...]:
    """The SASS targets of the cubins in `elf` (`label`: its name in errors); with
    `families`, a bare `sm_N` as listed is replaced by what the fatbin headers say (`sm_Nf`
    for a family-specific cubin)."""
    proc = subprocess.run(
        [str(cuobjdump), "--list-elf", str(elf)], capture_output=True, text=True, check=False
    )
    text = proc.stdout + proc.stderr
    archs = set(CUBIN_LINE.findall(text))
    if proc.returncode != 0 and not archs and "does not contain device code" not in text:
        raise SglforgeError(f"cuobjdump failed on {label or elf.name}: {text.strip()[-500:]}")
    bare = {a for a in archs if a[-1].isdigit()}
    if families and bare:
        headers = fatbin_archs(cuobjdump, elf, label)
        archs = (archs - bare) | {a for a in headers if a.rstrip("af") in bare}
    return tuple(sorted(archs))


def list_ptx(cuobjdump: Path, elf: Path) -> tuple[str, ...]:
    """The PTX targets embedded in `elf` (`sm_120f` for compute_120f), sorted."""
    proc = subprocess.run(
        [str(cuobjdump), "--list-ptx", str(elf)], capture_output=True, text=True, check=False
    )
    return tuple(sorted(set(PTX_LINE.findall(proc.stdout + proc.stderr))))


def fatbin_archs(cuobjdump: Path, elf: Path, label: str | None = None) -> set[str]:
    """The `arch = …` line of every fatbin entry `cuobjdump -elf` prints, read as a stream
    (it also dumps each cubin's sections and symbols: megabytes per cubin; `label`: the
    ELF's name in errors)."""
    found: set[str] = set()
    with subprocess.Popen(
        [str(cuobjdump), "-elf", str(elf)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = FATBIN_ARCH.fullmatch(line.strip())
            if match:
                found.add(match.group(1))
    if proc.returncode != 0:
        raise SglforgeError(
            f"cuobjdump -elf failed on {label or elf.name} (exit status {proc.returncode})"
        )
    return found


# Arch-conditional stubs (module docstring). The messages are CUTLASS's (cutlass/gemm/kernel/
# sm90_gemm_*.hpp: "ERROR : Arch conditional MMA instruction used without targeting …"; cute/
# arch/*.hpp through CUTE_INVALID_CONTROL_PATH: "Attempting to use SM120_16x8x32_TN without
# CUTE_ARCH_F8F6F4_MMA_ENABLED", "Trying to use tma without CUTE_ARCH_TMA_SM90_ENABLED.").
STUB_MESSAGE = re.compile(
    r"Arch conditional MMA instruction used without targeting|without (?:CUTE|CUTLASS)_ARCH_\w+"
)
PRINTABLE = re.compile(rb"[\x20-\x7e]{16,}")
NAMED_ARCH = re.compile(r"sm_?([0-9]{2,3})(?![0-9])", re.IGNORECASE)
# Features that exist on one family only, named in messages without an SM number.
FEATURE_MAJOR = {"TCGEN05": 10, "TMEM": 10, "UTCCP": 10}
SHT_SYMTAB, SHT_CUDA_CALLGRAPH, STO_CUDA_ENTRY = 2, 0x70000001, 0x10


def named_majors(text: str) -> set[int]:
    """The compute-capability majors `text` names: SM120_16x8x32 -> {12}, Sm90 -> {9},
    TCGEN05 -> {10}."""
    majors = {int(n) // 10 for n in NAMED_ARCH.findall(text)}
    return majors | {m for word, m in FEATURE_MAJOR.items() if word in text.upper()}


def _cubin_sections(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, link) of each section of a 64-bit little-endian cubin."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1 or len(data) < 64:
        return []
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = raw[shstrndx][4] if shstrndx < len(raw) else 0

    def name(offset: int) -> str:
        start = names_off + offset
        return data[start : data.index(b"\0", start)].decode(errors="replace")

    return [(name(r[0]), r[1], r[4], r[5], r[6]) for r in raw]


def printf_kernels(data: bytes) -> tuple[str, ...]:
    """The entry kernels of a cubin that reach `vprintf` by its call graph (or, where no
    entry does, the functions that call it), mangled and sorted."""
    sections = _cubin_sections(data)
    symtab = next((s for s in sections if s[1] == SHT_SYMTAB), None)
    graph = next((s for s in sections if s[1] == SHT_CUDA_CALLGRAPH), None)
    if symtab is None or graph is None:
        return ()
    strtab = sections[symtab[4]]
    symbols = []
    for off in range(symtab[2], symtab[2] + symtab[3] - 23, 24):
        st_name, _, st_other = struct.unpack_from("<IBB", data, off)
        start = strtab[2] + st_name
        symbols.append((data[start : data.index(b"\0", start)].decode(errors="replace"), st_other))
    callers: dict[int, set[int]] = {}
    for off in range(graph[2], graph[2] + graph[3] - 7, 8):
        caller, callee = struct.unpack_from("<ii", data, off)
        if caller > 0 and callee > 0:
            callers.setdefault(callee, set()).add(caller)
    targets = [i for i, (n, _) in enumerate(symbols) if n == "vprintf"]
    reach, todo = set(), list(targets)
    while todo:
        for caller in callers.get(todo.pop(), ()):
            if caller not in reach:
                reach.add(caller)
                todo.append(caller)
    entries = {symbols[i][0] for i in reach if i < len(symbols) and symbols[i][1] & STO_CUDA_ENTRY}
    return tuple(sorted(entries or {symbols[i][0] for i in reach if i < len(symbols)}))


def cubin_stub(name: str, arch: str, data: bytes) -> Stub | None:
    """The stub evidence in one cubin, or None. Fatal when a message or a kernel reaching
    vprintf names the cubin's own major, or a message names no arch and no kernel reaching
    vprintf names another arch alone (module docstring)."""
    messages = sorted(
        {
            text[start.start() :].strip()  # from the first letter: a string's neighbour bytes
            for run in PRINTABLE.findall(data)  # can be printable too ("~Trying to use tma…")
            for text in [run.decode("ascii")]
            if STUB_MESSAGE.search(text)
            for start in [re.search(r"[A-Za-z]", text)]
            if start
        }
    )
    if not messages:
        return None
    own = int(arch.removeprefix("sm_").rstrip("af")) // 10
    kernels = printf_kernels(data)
    kernel_majors = [named_majors(k) for k in kernels]
    unnamed = any(not named_majors(m) for m in messages)
    fatal = (
        any(own in named_majors(m) for m in messages)
        or any(own in majors for majors in kernel_majors)
        or (unnamed and (not kernels or any(not majors for majors in kernel_majors)))
    )
    return Stub(name, arch, tuple(messages), kernels, fatal)


def stubs(cuobjdump: Path, elf: Path, label: str | None = None) -> tuple[Stub, ...]:
    """Arch-conditional stub evidence in each cubin of `elf` (`cuobjdump -xelf all`)."""
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [str(cuobjdump), "-xelf", "all", str(elf)],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 and "does not contain device code" not in proc.stdout + proc.stderr:
            raise SglforgeError(
                f"cuobjdump -xelf failed on {label or elf.name}: "
                f"{(proc.stdout + proc.stderr).strip()[-500:]}"
            )
        for cubin in sorted(Path(tmp).glob("*.cubin")):
            match = re.search(r"\.([0-9]+)\.(sm_[0-9]+[af]?)\.cubin$", cubin.name)
            number, arch = match.groups() if match else ("?", "sm_0")
            stub = cubin_stub(f"cubin {number}", arch, cubin.read_bytes())
            if stub is not None:
                found.append(stub)
    return tuple(found)


def device_code(
    wheel: Path, cuobjdump: Path, *, families: bool = False, find_stubs: bool = False
) -> list[ElfArchs]:
    """Every ELF member of `wheel` that holds device code, with its SASS and PTX targets
    (`families`: bare `sm_N` cubins resolved to `sm_Nf` where the fatbin headers say so;
    `find_stubs`: with the arch-conditional stubs of its cubins)."""
    found: list[ElfArchs] = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for info in archive.infolist():
            if info.is_dir():
                continue
            with archive.open(info) as handle:
                if handle.read(4) != b"\x7fELF":
                    continue
            target = Path(tmp) / "member.elf"
            target.write_bytes(archive.read(info))
            archs = list_archs(cuobjdump, target, families=families, label=info.filename)
            ptx = list_ptx(cuobjdump, target)
            if archs or ptx:
                found_stubs = stubs(cuobjdump, target, info.filename) if find_stubs else ()
                # a family cubin is listed bare (sm_120): name it as the fatbin header does
                found_stubs = tuple(
                    dataclasses.replace(s, arch=s.arch + "f")
                    if s.arch + "f" in archs and s.arch not in archs
                    else s
                    for s in found_stubs
                )
                found.append(ElfArchs(info.filename, archs, ptx, found_stubs))
    return found


def audit_wheel(wheel: Path, required: tuple[str, ...], cuobjdump: Path) -> list[ElfArchs]:
    """Check every device-code ELF; raise naming each file that misses a required arch."""
    found = device_code(
        wheel, cuobjdump, families=any(a.endswith("f") for a in required), find_stubs=True
    )
    if required:
        if not found:
            raise SglforgeError(
                f"{wheel.name}: arch audit: no ELF in the wheel holds device "
                f"code, but the recipe requires {', '.join(required)}"
            )
        gaps = [
            f"  - {e.member}: missing {', '.join(sorted(set(required) - set(e.archs)))} "
            f"(has {', '.join(e.archs) or 'no SASS'})"
            for e in found
            if set(required) - set(e.archs)
        ]
        if gaps:
            raise SglforgeError(
                f"{wheel.name}: arch audit failed:\n" + "\n".join(gaps),
                hint="check the recipe's arch list (gencodes / arch env)",
            )
    fatal = [f"  - {e.member}: {s.describe()}" for e in found for s in e.stubs if s.fatal]
    if fatal:
        raise SglforgeError(
            f"{wheel.name}: arch audit failed: kernels compiled to arch-conditional stubs "
            "(they print an error at run time instead of computing):\n" + "\n".join(fatal),
            hint="a guard in the sources does not accept this target (e.g. sm_120f where only "
            "sm_120a enables the instruction): build those kernels for the arch-specific "
            "target, or fix the guard",
        )
    return found


def load_gaps(found: list[ElfArchs], devices: tuple[str, ...]) -> list[str]:
    """One line per ELF that a GPU of one of `devices` could not load ('no kernel image is
    available for execution on the device'), naming what the ELF carries instead."""
    return [
        f"{e.member}: nothing runs on {', '.join(missing)} (carries {e.describe(())})"
        for e in found
        for missing in [[d for d in devices if e.runs_with(d) is None]]
        if missing
    ]


# ---------------------------------------------------------------------------------------------
# Purity: a wheel holding an ELF must not claim to be pure.


def audit_purity(wheel: Path) -> None:
    """Error when a wheel holding an ELF keeps `Root-Is-Purelib: true` or an `-any` tag."""
    from sglforge.wheel.normalize import elf_machine, parse_headers

    with zipfile.ZipFile(wheel) as archive:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
        wheel_file = next((n for n in names if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n)), None)
        if wheel_file is None:
            raise SglforgeError(f"{wheel.name}: no .dist-info/WHEEL")
        elfs = []
        for name in names:
            if name.split("/")[0].endswith(".dist-info"):
                continue
            with archive.open(name) as handle:
                if elf_machine(handle.read(20)) is not None:
                    elfs.append(name)
        message = parse_headers(archive.read(wheel_file))
    if not elfs:
        return
    tags = message.get_all("Tag") or []
    pure = [t for t in tags if t.endswith("-any")] + [
        t for t in wheel.name[:-4].split("-")[-1:] if t == "any"
    ]
    if str(message["Root-Is-Purelib"]).strip().lower() == "true" or pure:
        raise SglforgeError(
            f"{wheel.name}: platform audit failed: the wheel holds ELF files "
            f"({', '.join(elfs[:3])}{', …' if len(elfs) > 3 else ''}) but is tagged pure "
            f"(Root-Is-Purelib: {message['Root-Is-Purelib']}, Tag: {', '.join(tags)})"
        )


# ---------------------------------------------------------------------------------------------
# Dynamic dependencies: every DT_NEEDED of every ELF must resolve on a serving host.
#
# Where a library may come from (what the loader finds in a venv where the wheel is installed):
#   wheel   a member of the same wheel, reached through an RPATH/RUNPATH entry; `$ORIGIN` is
#           the installed directory of the ELF (site-packages-relative)
#   <dist>  a library of an installed distribution the wheel declares, reached through an
#           `$ORIGIN`-relative RPATH entry: one it Requires-Dist (apache-tvm-ffi's tvm_ffi/lib,
#           …) or one those require in turn, with the extras asked for (torch ->
#           cuda-toolkit[cublas,cudart,nvrtc,…] -> nvidia-cublas, … in nvidia/cu13/lib): what
#           pip installs with the wheel. torch's lib/ counts only for a torch-ABI-bound wheel
#           (Requires-Dist torch==). Which files a distribution has, and what it requires
#           (markers evaluated for this host), come from the build interpreter's installed
#           copies.
#   system  the ld.so cache (`ldconfig -p`) and the standard directories (/lib, /usr/lib,
#           /lib64, /usr/lib64, /{usr/,}lib/<multiarch>), minus anything inside a CUDA toolkit
#           (/usr/local/cuda*, /opt/cuda*): serving hosts have the driver, not the toolkit
#   driver  libcuda.so.1 and the other driver libraries: every GPU host has them, no build
#           host needs them
# Anything else is unresolvable. Libraries that torch happens to have loaded already do not
# count: import order is not a dependency.

DRIVER_LIBS = frozenset(
    {"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libcudadebugger.so.1"}
)
STANDARD_DIRS = (
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)
TOOLKIT_DIR = re.compile(r"^/(usr/local|opt)/cuda[^/]*/")
DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 5, 14, 15, 29


@dataclass(frozen=True)
class ElfDynamic:
    needed: tuple[str, ...]
    rpath: tuple[str, ...]  # DT_RPATH entries, then DT_RUNPATH entries
    soname: str | None


def read_dynamic(data: bytes) -> ElfDynamic | None:
    """DT_NEEDED, RPATH/RUNPATH and SONAME of an ELF (no readelf needed); None for non-ELF.

    An ELF without a dynamic segment (an object file, a static binary) needs nothing."""
    if data[:4] != b"\x7fELF" or len(data) < 52:
        return None
    wide, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        phoff, phentsize, phnum = (
            struct.unpack_from(end + "Q", data, 32)[0],
            *struct.unpack_from(end + "HH", data, 54),
        )
        phdr, dyn = end + "IIQQQQ", end + "qQ"
    else:
        phoff, phentsize, phnum = (
            struct.unpack_from(end + "I", data, 28)[0],
            *struct.unpack_from(end + "HH", data, 42),
        )
        phdr, dyn = end + "IIIIII", end + "iI"
    loads, dynamic = [], None
    for i in range(phnum):
        fields = struct.unpack_from(phdr, data, phoff + i * phentsize)
        if wide:
            p_type, _, p_offset, p_vaddr, _, p_filesz = fields
        else:
            p_type, p_offset, p_vaddr, _, p_filesz, _ = fields
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return ElfDynamic((), (), None)
    entries = []
    size = struct.calcsize(dyn)
    for off in range(dynamic[0], dynamic[0] + dynamic[1] - size + 1, size):
        tag, value = struct.unpack_from(dyn, data, off)
        if tag == 0:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == DT_STRTAB), None)
    base = next((o + strtab - v for v, o, n in loads if v <= (strtab or -1) < v + n), None)
    if base is None:
        raise SglforgeError("ELF dynamic section has no string table in a loaded segment")

    def string(offset: int) -> str:
        start = base + offset
        return data[start : data.index(b"\0", start)].decode(errors="replace")

    rpath = [
        p
        for tag in (DT_RPATH, DT_RUNPATH)
        for t, v in entries
        if t == tag
        for p in string(v).split(":")
        if p
    ]
    soname = next((string(v) for t, v in entries if t == DT_SONAME), None)
    return ElfDynamic(tuple(string(v) for t, v in entries if t == DT_NEEDED), tuple(rpath), soname)


@dataclass(frozen=True)
class LibraryWorld:
    """What a serving venv offers besides the wheel: site-packages-relative library dirs of
    installed distributions (dir -> {file name: distribution}), the system's libraries, and
    what each installed distribution requires (canonical name -> its Requires-Dist)."""

    site_dirs: dict[str, dict[str, str]]
    system: frozenset[str]
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def detect(cls) -> LibraryWorld:
        return cls(
            site_dirs=build_env_site_dirs(),
            system=system_libraries(),
            requires=build_env_requires(),
        )


def build_env_site_dirs() -> dict[str, dict[str, str]]:
    """Shared libraries of every distribution installed for the build interpreter."""
    import importlib.metadata

    from sglforge.base.requirements import canonical_name

    found: dict[str, dict[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = canonical_name(dist.metadata["Name"] or "")
        for file in dist.files or ():
            path = file.as_posix()
            base = posixpath.basename(path)
            if (
                ".so" in base
                and not path.startswith("..")
                and not path.split("/")[0].endswith((".dist-info", ".data"))
            ):
                directory = posixpath.dirname(path)
                found.setdefault(directory, {})[base] = name
    return dict(sorted(found.items()))


def build_env_requires() -> dict[str, tuple[str, ...]]:
    """Requires-Dist of every distribution installed for the build interpreter."""
    import importlib.metadata

    from sglforge.base.requirements import canonical_name

    return {
        canonical_name(dist.metadata["Name"] or ""): tuple(dist.requires or ())
        for dist in importlib.metadata.distributions()
    }


def declared_closure(requires: list[str], world: LibraryWorld) -> set[str]:
    """The distributions a wheel brings along: its Requires-Dist and, through the installed
    copies' metadata, theirs, with the extras each asks for, markers evaluated for this host
    (one that cannot be evaluated or parsed counts as absent: its libraries then do not
    resolve, and the audit names them)."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement

    from sglforge.base.requirements import canonical_name
    from sglforge.wheel.runtime import UnevaluableMarker, marker_applies

    host = default_environment()
    seen: set[tuple[str, str]] = set()
    found: set[str] = set()
    queue = [(text, "") for text in requires]
    while queue:
        text, extra = queue.pop()
        try:
            req = Requirement(text)
            if not marker_applies(req, [{**host, "extra": extra}]):
                continue
        except (InvalidRequirement, UnevaluableMarker):
            continue
        name = canonical_name(req.name)
        found.add(name)
        for wanted in ("", *sorted(canonical_name(e) for e in req.extras)):
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                queue += [(t, wanted) for t in world.requires.get(name, ())]
    return found


def system_libraries() -> frozenset[str]:
    names: set[str] = set()
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    proc = (
        subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False)
        if os.path.exists(ldconfig)
        else None
    )
    for line in proc.stdout.splitlines() if proc else []:
        name, sep, path = line.strip().partition(" => ")
        if sep and not TOOLKIT_DIR.match(path.strip()):
            names.add(name.split(" (")[0].strip())
    for directory in STANDARD_DIRS:
        if os.path.isdir(directory):
            names.update(n for n in os.listdir(directory) if ".so" in n)
    return frozenset(names)


@dataclass(frozen=True)
class Dependency:
    member: str
    library: str
    source: str | None  # wheel | torch | nvidia | system | driver; None: unresolvable
    detail: str = ""


def install_path(member: str) -> str:
    """Where a member lands, relative to site-packages (`x.data/platlib/y` -> `y`)."""
    parts = member.split("/")
    if parts[0].endswith(".data") and len(parts) > 2 and parts[1] in ("purelib", "platlib"):
        return "/".join(parts[2:])
    return member


def _expand(entry: str, origin: str) -> str | None:
    """An RPATH entry as a site-packages-relative directory; None if it leaves the venv's
    site-packages or is absolute (a build-host path)."""
    expanded = entry.replace("${ORIGIN}", "$ORIGIN")
    if not expanded.startswith("$ORIGIN"):
        return None
    path = posixpath.normpath(posixpath.join(origin, expanded[len("$ORIGIN") :].lstrip("/")))
    return None if path == ".." or path.startswith("../") else path.removeprefix("./")


def _allowed(dist: str, declared: set[str], torch_bound: bool) -> bool:
    if dist == "torch":
        return torch_bound
    return dist in declared


def resolve_dependencies(
    members: dict[str, bytes], world: LibraryWorld, *, torch_bound: bool, requires: list[str]
) -> list[Dependency]:
    """Classify every DT_NEEDED of every ELF member (see the table above)."""
    installed = {install_path(n) for n in members}
    required = declared_closure(requires, world)
    out = []
    for member in sorted(members):
        if member.split("/")[0].endswith(".dist-info"):
            continue
        info = read_dynamic(members[member])
        if info is None:
            continue
        origin = posixpath.dirname(install_path(member))
        dirs = [d for d in (_expand(e, origin) for e in info.rpath) if d is not None]
        for lib in info.needed:
            out.append(_resolve(member, lib, dirs, installed, world, required, torch_bound))
    return out


def _resolve(
    member: str,
    lib: str,
    dirs: list[str],
    installed: set[str],
    world: LibraryWorld,
    required: set[str],
    torch_bound: bool,
) -> Dependency:
    for directory in dirs:
        if f"{directory}/{lib}".removeprefix("/") in installed:
            return Dependency(member, lib, "wheel", directory)
        dist = world.site_dirs.get(directory, {}).get(lib)
        if dist is not None and _allowed(dist, required, torch_bound):
            return Dependency(member, lib, dist, directory)
    if lib in DRIVER_LIBS:
        return Dependency(member, lib, "driver")
    if lib in world.system:
        return Dependency(member, lib, "system")
    in_wheel = sorted(p for p in installed if posixpath.basename(p) == lib)
    providers = [(d, libs[lib]) for d, libs in sorted(world.site_dirs.items()) if lib in libs]
    here = posixpath.dirname(install_path(member))
    if in_wheel:
        rel = posixpath.relpath(posixpath.dirname(in_wheel[0]), here)
        why = f"the wheel has {in_wheel[0]} but no RPATH entry reaches it (add $ORIGIN/{rel})"
    elif providers:
        directory, dist = providers[0]
        if not _allowed(dist, required, torch_bound):
            why = f"in {directory} of {dist}, which the wheel does not require" + (
                " (torch counts only with requires-torch-abi)"
                if dist == "torch"
                else " (neither directly nor through what it requires)"
            )
        else:
            rel = posixpath.relpath(directory, here)
            why = (
                f"in {directory} of {dist}, but no RPATH entry reaches it (loads only if "
                f"something else loaded it first; link with -Wl,-rpath,'$ORIGIN/{rel}')"
            )
    else:
        why = (
            "not in the wheel, a required distribution, the system or the driver "
            "(a CUDA toolkit library does not count)"
        )
    return Dependency(member, lib, None, why)


def audit_dependencies(wheel: Path, world: LibraryWorld) -> list[Dependency]:
    """Resolve the DT_NEEDED of every ELF in a built wheel (METADATA says what it requires)."""
    from sglforge.wheel.normalize import parse_headers, read_wheel

    members, _ = read_wheel(wheel)
    meta = next(
        (d for n, d in members.items() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), b""
    )
    requires = parse_headers(meta).get_all("Requires-Dist") or []
    torch_bound = any(re.match(r"\s*torch\s*==", r) for r in requires)
    return resolve_dependencies(members, world, torch_bound=torch_bound, requires=requires)


def render_unresolved(wheel: Path, deps: list[Dependency]) -> str:
    lines = [f"  - {d.member}: {d.library}: {d.detail}" for d in deps if d.source is None]
    return f"{wheel.name}: DT_NEEDED audit: {len(lines)} unresolvable:\n" + "\n".join(lines)
