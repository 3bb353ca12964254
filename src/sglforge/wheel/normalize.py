"""Wheel post-processing: check the version, pin torch, stamp provenance, normalize the zip.

Normalized form (independent of the backend that wrote the wheel): members in sorted order
with the `.dist-info` directory last and RECORD rebuilt as the very last member; every
timestamp = SOURCE_DATE_EPOCH (clamped to 1980, the ZIP minimum); modes 0644, or 0755 where
any execute bit was set; deflate at a fixed level. Same input members -> same bytes.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import time
import zipfile
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path

from sglforge.base.errors import SglforgeError

PROVENANCE_NAME = "sglforge-build.json"
ZIP_EPOCH_MIN = 315532800  # 1980-01-01


@dataclass(frozen=True)
class WheelInfo:
    name: str  # as in METADATA
    version: str
    dist_info: str  # "name-1.0.dist-info"


def _metadata(members: dict[str, bytes]) -> tuple[str, bytes]:
    candidates = [n for n in members if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
    if len(candidates) != 1:
        raise SglforgeError(f"wheel has {len(candidates)} .dist-info/METADATA files, expected 1")
    return candidates[0], members[candidates[0]]


def read_info(members: dict[str, bytes]) -> WheelInfo:
    path, data = _metadata(members)
    message = BytesParser().parsebytes(data)
    return WheelInfo(name=message["Name"], version=message["Version"],
                     dist_info=path.split("/")[0])


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


def pin_torch(metadata: bytes, torch_version: str) -> bytes:
    """Replace any `Requires-Dist: torch…` with `torch==<exact>` (the ABI the wheel links)."""
    head, sep, body = metadata.partition(b"\n\n")
    lines = [line for line in head.split(b"\n")
             if not re.match(rb"Requires-Dist:\s*torch\b(?![-_.\w])", line)]
    lines.append(f"Requires-Dist: torch=={torch_version}".encode())
    return b"\n".join(lines) + (sep + body if sep else b"\n")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_normalized(members: dict[str, bytes], modes: dict[str, int], dist_info: str,
                     out: Path, epoch: int) -> None:
    record_name = f"{dist_info}/RECORD"
    files = {n: d for n, d in members.items() if n != record_name
             and not n.endswith((".dist-info/RECORD.jws", ".dist-info/RECORD.p7s"))}
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
            info.external_attr = ((0o100755 if executable else 0o100644) << 16)
            info.create_system = 3
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=6)


def wheel_filename(original: str, info: WheelInfo) -> str:
    """Keep the backend's tags; rebuild the name part from METADATA (PEP 427 escaping)."""
    tags = "-".join(original[:-4].split("-")[-3:])
    name = re.sub(r"[-_.]+", "_", info.name).lower()
    return f"{name}-{info.version}-{tags}.whl"


def retag(members: dict[str, bytes], modes: dict[str, int], info: WheelInfo, local: str
          ) -> tuple[dict[str, bytes], dict[str, int], WheelInfo]:
    """Append `+local` to the version: METADATA, the .dist-info/.data directory names."""
    if "+" in info.version:
        raise SglforgeError(f"{info.name} {info.version} already has a local label; set the "
                            "upstream's version variable instead of version-label = 'retag'")
    version = f"{info.version}+{local}"
    stem = info.dist_info[: -len(".dist-info")]
    new_stem = f"{stem.rsplit('-', 1)[0]}-{version}"
    renamed, new_modes = {}, {}
    for name, data in members.items():
        top, sep, rest = name.partition("/")
        new = new_stem + top[len(stem):] + "/" + rest if sep and top in (
            f"{stem}.dist-info", f"{stem}.data") else name
        renamed[new] = data
        new_modes[new] = modes.get(name, 0)
    meta_path, data = _metadata(renamed)
    renamed[meta_path] = re.sub(rb"(?m)^Version: .*$", f"Version: {version}".encode(), data,
                                count=1)
    return renamed, new_modes, WheelInfo(info.name, version, f"{new_stem}.dist-info")


def postprocess(built: Path, out_dir: Path, *, expected_version: str | None,
                expected_local: str | None, torch_version: str | None,
                provenance: dict, epoch: int, retag_local: str | None = None
                ) -> tuple[Path, WheelInfo]:
    """Write the normalized, stamped wheel into `out_dir`; return its path and metadata."""
    members, modes = read_wheel(built)
    info = read_info(members)
    if retag_local is not None:
        members, modes, info = retag(members, modes, info, retag_local)
    if expected_version is not None and info.version != expected_version:
        raise SglforgeError(
            f"{built.name}: built version {info.version}, expected {expected_version}",
            hint="the recipe's env must set the upstream's own version variable to {version}")
    if expected_local is not None and not info.version.endswith(f"+{expected_local}"):
        raise SglforgeError(
            f"{built.name}: built version {info.version} lacks the local label +{expected_local}",
            hint="the recipe's env must pass {local} to the upstream's version variable")
    if torch_version is not None:
        meta_path, data = _metadata(members)
        members[meta_path] = pin_torch(data, torch_version)
    stamped = dict(provenance, version=info.version)
    members[f"{info.dist_info}/{PROVENANCE_NAME}"] = (
        json.dumps(stamped, indent=2, sort_keys=True) + "\n").encode()
    out = out_dir / wheel_filename(built.name, info)
    write_normalized(members, modes, info.dist_info, out, epoch)
    return out, info


def read_provenance(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(f".dist-info/{PROVENANCE_NAME}"):
                return json.loads(archive.read(name))
    raise SglforgeError(f"{wheel.name}: no {PROVENANCE_NAME} in the wheel")
