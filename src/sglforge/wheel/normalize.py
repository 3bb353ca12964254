"""Wheel post-processing: check the version, pin torch, drop build litter, tag the platform,
stamp provenance, normalize the zip.

METADATA and WHEEL are edited as RFC 822 header blocks (`email` with the compat32 policy,
the format wheels use), never as text: a field sglforge writes is always a header, whether or
not the file has a description body.

Normalized form (independent of the backend that wrote the wheel): members in sorted order
with the `.dist-info` directory last and RECORD rebuilt as the very last member; every
timestamp = SOURCE_DATE_EPOCH (clamped to 1980, the ZIP minimum); modes 0644, or 0755 where
any execute bit was set; deflate at a fixed level. Same input members -> same bytes.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import fnmatch
import hashlib
import io
import re
import struct
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from email.generator import BytesGenerator
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.wheel.provenance import Provenance

ZIP_EPOCH_MIN = 315532800  # 1980-01-01
# Build litter upstream build scripts leave in package directories (ninja / CMake trees, object
# files). A pattern ending in "/" names a directory (any path component); one without "/"
# matches a file's base name; one with an inner "/" matches the whole member path.
DEFAULT_EXCLUDE = (
    ".ninja_log",
    ".ninja_deps",
    ".ninja_lock",
    "build.ninja",
    "*.o",
    "*.o.d",
    "*.obj",
    "CMakeCache.txt",
    "cmake_install.cmake",
    "CMakeFiles/",
    "*_build/",
)
# ELF e_machine -> the platform tag's machine part (linux_<machine>)
ELF_MACHINES = {62: "x86_64", 183: "aarch64", 3: "i686", 21: "ppc64le"}


@dataclass(frozen=True)
class WheelInfo:
    name: str  # as in METADATA
    version: str
    dist_info: str  # "name-1.0.dist-info"
    removed: tuple[str, ...] = ()  # build litter dropped by postprocess


def _metadata(members: dict[str, bytes]) -> tuple[str, bytes]:
    candidates = [n for n in members if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
    if len(candidates) != 1:
        raise SglforgeError(f"wheel has {len(candidates)} .dist-info/METADATA files, expected 1")
    return candidates[0], members[candidates[0]]


def parse_headers(data: bytes) -> Message:
    """METADATA / WHEEL as a header block plus body (compat32: the wheel spec's format)."""
    return BytesParser(policy=compat32).parsebytes(data)


def serialize_headers(message: Message) -> bytes:
    """Write headers back unchanged (no refolding, no "From " mangling), then the body."""
    out = io.BytesIO()
    BytesGenerator(
        out, mangle_from_=False, maxheaderlen=0, policy=compat32.clone(linesep="\n")
    ).flatten(message)
    return out.getvalue()


def edit_headers(data: bytes, edit: Callable[[Message], None]) -> bytes:
    message = parse_headers(data)
    edit(message)
    return serialize_headers(message)


def read_info(members: dict[str, bytes]) -> WheelInfo:
    path, data = _metadata(members)
    message = parse_headers(data)
    return WheelInfo(name=message["Name"], version=message["Version"], dist_info=path.split("/")[0])


def read_wheel(path: Path) -> tuple[dict[str, bytes], dict[str, int]]:
    """Members (name -> bytes) and their unix modes; directories are dropped."""
    members: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            members[info.filename] = archive.read(info)
            modes[info.filename] = (info.external_attr >> 16) & 0o777
    return members, modes


TORCH_REQUIREMENT = re.compile(r"\s*torch\s*(?![-_.\w])")


def pin_torch(metadata: bytes, torch_version: str) -> bytes:
    """Replace any `Requires-Dist: torch…` with `torch==<exact>` (the ABI the wheel links)."""

    def edit(message: Message) -> None:
        kept = [r for r in message.get_all("Requires-Dist") or [] if not TORCH_REQUIREMENT.match(r)]
        del message["Requires-Dist"]
        for requirement in [*kept, f"torch=={torch_version}"]:
            message["Requires-Dist"] = requirement

    return edit_headers(metadata, edit)


def set_version(metadata: bytes, version: str) -> bytes:
    def edit(message: Message) -> None:
        if message["Version"] is None:
            raise SglforgeError("METADATA has no Version header")
        message.replace_header("Version", version)

    return edit_headers(metadata, edit)


# ---------------------------------------------------------------------------------------------
# build litter


def _excluded(name: str, patterns: tuple[str, ...]) -> bool:
    parts = name.split("/")
    for pattern in patterns:
        if pattern.endswith("/"):
            if any(fnmatch.fnmatchcase(p, pattern[:-1]) for p in parts[:-1]):
                return True
        elif "/" in pattern:
            if fnmatch.fnmatchcase(name, pattern):
                return True
        elif fnmatch.fnmatchcase(parts[-1], pattern):
            return True
    return False


def drop_litter(members: dict[str, bytes], patterns: tuple[str, ...]) -> list[str]:
    """Remove (in place) members matching `patterns`, never from .dist-info; sorted names."""
    removed = sorted(
        n for n in members if not n.split("/")[0].endswith(".dist-info") and _excluded(n, patterns)
    )
    for name in removed:
        del members[name]
    return removed


# ---------------------------------------------------------------------------------------------
# platform tag


def elf_machine(data: bytes) -> str | None:
    """`x86_64` etc. for an ELF member, None for anything else."""
    if data[:4] != b"\x7fELF" or len(data) < 20:
        return None
    (machine,) = struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)
    return ELF_MACHINES.get(machine, f"em{machine}")


def elf_members(members: dict[str, bytes]) -> dict[str, str]:
    """member -> machine of every ELF in the wheel."""
    out = {}
    for name, data in members.items():
        machine = elf_machine(data)
        if machine is not None:
            out[name] = machine
    return out


def _wheel_file(members: dict[str, bytes], dist_info: str) -> str:
    path = f"{dist_info}/WHEEL"
    if path not in members:
        raise SglforgeError(f"wheel has no {path}")
    return path


def platform_tag(members: dict[str, bytes], dist_info: str) -> list[str] | None:
    """A wheel holding an ELF is platform-specific: `Root-Is-Purelib: false` and every `-any`
    tag becomes `-linux_<machine>` (tags that already name a platform are kept). Edits WHEEL
    in place; returns the new tags, or None when the wheel holds no ELF."""
    machines = set(
        elf_members(
            {n: d for n, d in members.items() if not n.split("/")[0].endswith(".dist-info")}
        ).values()
    )
    if not machines:
        return None
    if len(machines) != 1:
        raise SglforgeError(f"wheel holds ELF files for several machines: {sorted(machines)}")
    platform = f"linux_{machines.pop()}"
    path = _wheel_file(members, dist_info)
    tags: list[str] = []

    def edit(message: Message) -> None:
        for tag in message.get_all("Tag") or []:
            python, abi, plat = tag.split("-")
            new = f"{python}-{abi}-{platform if plat == 'any' else plat}"
            if new not in tags:
                tags.append(new)
        del message["Tag"]
        for tag in tags:
            message["Tag"] = tag
        if message["Root-Is-Purelib"] is None:
            message["Root-Is-Purelib"] = "false"
        else:
            message.replace_header("Root-Is-Purelib", "false")

    members[path] = edit_headers(members[path], edit)
    return tags


def compressed_tags(tags: list[str]) -> str:
    """PEP 425 compressed tag set for a file name (`py3-none-linux_x86_64`)."""
    parts = [
        sorted({t.split("-")[i] for t in tags}, key=[t.split("-")[i] for t in tags].index)
        for i in range(3)
    ]
    return "-".join(".".join(p) for p in parts)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_normalized(
    members: dict[str, bytes], modes: dict[str, int], dist_info: str, out: Path, epoch: int
) -> None:
    record_name = f"{dist_info}/RECORD"
    files = {
        n: d
        for n, d in members.items()
        if n != record_name and not n.endswith((".dist-info/RECORD.jws", ".dist-info/RECORD.p7s"))
    }
    body = sorted(n for n in files if not n.startswith(dist_info + "/"))
    meta = sorted(n for n in files if n.startswith(dist_info + "/"))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name in body + meta:
        writer.writerow([name, _record_hash(files[name]), len(files[name])])
    writer.writerow([record_name, "", ""])
    stamp = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        for name in body + meta + [record_name]:
            data = files[name] if name != record_name else record.getvalue().encode()
            info = zipfile.ZipInfo(name, date_time=stamp)
            executable = modes.get(name, 0) & 0o111
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.create_system = 3
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=6)


def wheel_filename(original: str, info: WheelInfo, tags: list[str] | None = None) -> str:
    """The backend's tags (or `tags`, from WHEEL after retagging); the name part from METADATA
    (PEP 427 escaping)."""
    tag_part = compressed_tags(tags) if tags else "-".join(original[:-4].split("-")[-3:])
    name = re.sub(r"[-_.]+", "_", info.name).lower()
    return f"{name}-{info.version}-{tag_part}.whl"


def relabel(
    members: dict[str, bytes], modes: dict[str, int], info: WheelInfo, version: str
) -> tuple[dict[str, bytes], dict[str, int], WheelInfo]:
    """Give the wheel the version `version`: METADATA and the .dist-info/.data directory names."""
    stem = info.dist_info[: -len(".dist-info")]
    new_stem = f"{stem.rsplit('-', 1)[0]}-{version}"
    renamed, new_modes = {}, {}
    for name, data in members.items():
        top, sep, rest = name.partition("/")
        new = (
            new_stem + top[len(stem) :] + "/" + rest
            if sep and top in (f"{stem}.dist-info", f"{stem}.data")
            else name
        )
        renamed[new] = data
        new_modes[new] = modes.get(name, 0)
    meta_path, data = _metadata(renamed)
    renamed[meta_path] = set_version(data, version)
    return renamed, new_modes, WheelInfo(info.name, version, f"{new_stem}.dist-info")


def retag(
    members: dict[str, bytes], modes: dict[str, int], info: WheelInfo, local: str
) -> tuple[dict[str, bytes], dict[str, int], WheelInfo]:
    """Append `+local` to the version: METADATA, the .dist-info/.data directory names."""
    if "+" in info.version:
        raise SglforgeError(
            f"{info.name} {info.version} already has a local label; set the "
            "upstream's version variable instead of version-label = 'retag'"
        )
    return relabel(members, modes, info, f"{info.version}+{local}")


DEV_LABEL = "dev"


def with_local_segment(version: str, segment: str) -> str:
    """`1.0+cu130.ab12cd34` -> `1.0+cu130.ab12cd34.<segment>`, `1.0` -> `1.0+<segment>`."""
    return f"{version}.{segment}" if "+" in version else f"{version}+{segment}"


def dev_version(version: str) -> str:
    """The label of a `build --dev` wheel: `1.0+cu130.ab12cd34` -> `1.0+cu130.ab12cd34.dev`,
    `1.0` -> `1.0+dev` (PEP 440 local segments), so it never passes for a release build."""
    return with_local_segment(version, DEV_LABEL)


def write_sbom(members: dict[str, bytes], info: WheelInfo, provenance: Provenance) -> None:
    """The wheel's CycloneDX SBOM (wheel/sbom.py) from its stamped provenance and METADATA,
    at `<dist-info>/sboms/sglforge.cdx.json` (PEP 770); an SBOM another tool put in
    `sboms/` (auditwheel's) stays and is referenced from ours."""
    from sglforge.wheel import sbom

    _path, metadata = _metadata(members)
    target = sbom.member(info.dist_info)
    others = [
        n.removeprefix(f"{info.dist_info}/")
        for n in members
        if n.startswith(f"{info.dist_info}/{sbom.SBOM_DIR}/") and n != target
    ]
    members[target] = sbom.wheel_sbom(
        provenance,
        info.name,
        info.version,
        parse_headers(metadata).get_all("Requires-Dist") or [],
        members[Provenance.member(info.dist_info)],
        others,
    )


def postprocess(
    built: Path,
    out_dir: Path,
    *,
    expected_version: str | None,
    expected_local: str | None,
    torch_version: str | None,
    provenance: Provenance,
    epoch: int,
    retag_local: str | None = None,
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE,
    dev: bool = False,
    substituted: str | None = None,
) -> tuple[Path, WheelInfo]:
    """Write the normalized, stamped wheel into `out_dir`; return its path and metadata.

    `dev`: a `build --dev` wheel, checked like a release build and then relabelled
    (`dev_version`); its provenance says `dev: true`. `substituted`: a local-version segment
    (`sub<8 hex>`, sources/substitute.py) appended after the checks, like the dev label.

    Members matching `exclude` are dropped (listed in `info.removed` and in the provenance);
    a wheel that holds an ELF gets a platform tag and `Root-Is-Purelib: false`."""
    members, modes = read_wheel(built)
    removed = drop_litter(members, exclude)
    info = read_info(members)
    if retag_local is not None:
        members, modes, info = retag(members, modes, info, retag_local)
    if expected_version is not None and info.version != expected_version:
        raise SglforgeError(
            f"{built.name}: built version {info.version}, expected {expected_version}",
            hint="the recipe's env must set the upstream's own version variable to {version}",
        )
    if expected_local is not None and not info.version.endswith(f"+{expected_local}"):
        raise SglforgeError(
            f"{built.name}: built version {info.version} lacks the local label +{expected_local}",
            hint="the recipe's env must pass {local} to the upstream's version variable",
        )
    if torch_version is not None:
        meta_path, data = _metadata(members)
        members[meta_path] = pin_torch(data, torch_version)
    if substituted is not None:
        members, modes, info = relabel(
            members, modes, info, with_local_segment(info.version, substituted)
        )
    if dev:
        members, modes, info = relabel(members, modes, info, dev_version(info.version))
        provenance = dataclasses.replace(provenance, dev=True)
    tags = platform_tag(members, info.dist_info)
    stamped = dataclasses.replace(
        provenance, version=info.version, removed=tuple(removed) if removed else provenance.removed
    )
    stamped.write(members, info.dist_info)
    write_sbom(members, info, stamped)
    out = out_dir / wheel_filename(built.name, info, tags)
    write_normalized(members, modes, info.dist_info, out, epoch)
    return out, WheelInfo(info.name, info.version, info.dist_info, tuple(removed))
