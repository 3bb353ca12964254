"""Hostile wheels and METADATA (issue 21, items 7 and 11): a marker packaging parses but
cannot evaluate, and members far larger than their kind allows, are clear errors naming the
wheel and the requirement or member — never a traceback, never gigabytes of memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.wheel import runtime
from tests.test_check import Stack, errors

SRC = Path(__file__).resolve().parents[1] / "src"
BAD_MARKER = 'foo; python_version ~= "3"'


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    env["PYTHONPATH"] = str(SRC)
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_an_unevaluable_marker_is_a_check_finding_naming_wheel_and_requirement(tmp_path):
    stack = Stack(tmp_path / "project")
    stack.sglang_requires.append(BAD_MARKER)
    found = errors(stack.check())
    assert any(
        e.startswith(
            "resolution: sglang 0.5.21+cu130.abcdef12 (sglang-0.5.21+cu130"
            ".abcdef12-py3-none-any.whl): Requires-Dist 'foo; python_version "
            '~= "3"\': the marker cannot be evaluated (UndefinedComparison'
        )
        for e in found
    ), found
    result = _cli(stack.root, "check")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "the marker cannot be evaluated" in result.stdout


def test_an_unevaluable_marker_in_lock_runtime_names_the_wheel(tmp_path):
    meta = runtime.Metadata(
        source="sglang.whl sha256=0", name="sglang", version="1", requires=("numpy", BAD_MARKER)
    )
    with pytest.raises(SglforgeError) as error:
        runtime.derive_requirements([meta], {"sglang"}, "3.12")
    assert str(error.value).startswith(
        "sglang.whl sha256=0: Requires-Dist 'foo; "
        'python_version ~= "3"\': the marker cannot be evaluated'
    )
    stack = Stack(tmp_path / "project")
    stack.write()
    metadata = tmp_path / "sglang.METADATA"
    metadata.write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: 1\nRequires-Dist: {BAD_MARKER}\n"
    )
    result = _cli(stack.root, "lock-runtime", "--input-only", "--metadata", str(metadata))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "sglang.METADATA sha256=" in result.stderr and '~= "3"' in result.stderr


def _wheel_with(path: Path, member: str, size: int, *, lie: int | None = None) -> Path:
    """A small wheel (deflated) holding `member` of `size` bytes; `lie`: the size its zip
    headers declare instead."""
    dist = "sglang-0.5.21"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
        if member != f"{dist}.dist-info/METADATA":
            archive.writestr(
                f"{dist}.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n",
            )
        head = b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n\n"
        archive.writestr(member, head + b"x" * (size - len(head)))
    if lie is not None:  # patch the declared uncompressed size (central directory + local)
        data = bytearray(path.read_bytes())
        name = member.encode()
        for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
            at = 0
            while (at := data.find(signature, at)) != -1:
                name_at = at + (46 if signature == b"PK\x01\x02" else 30)
                if data[name_at : name_at + len(name)] == name:
                    data[at + offset : at + offset + 4] = lie.to_bytes(4, "little")
                at += 4
        path.write_bytes(bytes(data))
    return path


def _inflate(wheel: Path, suffix: str, size: int) -> None:
    """Pad the member of `wheel` ending in `suffix` to `size` bytes (deflated: stays small)."""
    members = {}
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            members[info.filename] = archive.read(info)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            if name.endswith(suffix):
                data = data + b"\n" + b"x" * (size - len(data) - 1)
            archive.writestr(name, data)


def test_huge_metadata_in_a_small_wheel_is_refused_before_decompressing(tmp_path):
    size = 200 << 20  # the 200 MB of METADATA, ~200 KB deflated
    wheel = _wheel_with(
        tmp_path / "sglang-0.5.21-py3-none-any.whl", "sglang-0.5.21.dist-info/METADATA", size
    )
    assert wheel.stat().st_size < 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SglforgeError) as error:
        runtime.read_metadata(wheel)
    assert str(error.value).startswith(
        f"{wheel}: member sglang-0.5.21.dist-info/METADATA declares {size} bytes, more than the"
    )
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
    assert grown < 64 << 10, f"{grown} KiB"
    # the stack check reads it through the same reader: one line, exit 2
    stack = Stack(tmp_path / "project")
    stack.write()
    [sglang] = (stack.root / "wheels").glob("sglang-*.whl")
    _inflate(sglang, ".dist-info/METADATA", size)
    result = _cli(stack.root, "check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "METADATA declares" in result.stderr


@pytest.mark.parametrize(
    "member",
    [
        "sglang-0.5.21.dist-info/METADATA",
        "sglang-0.5.21.dist-info/sglforge-build.json",
        "sglang-0.5.21.dist-info/RECORD",
        "sglang-0.5.21.dist-info/entry_points.txt",
        "sglang/srt/uses.py",
    ],
)
def test_a_declared_size_that_lies_is_caught_after_cap_plus_one_bytes(tmp_path, member):
    from sglforge.wheel.members import CAPS, MemberTooLarge, read_member

    kind = member.rsplit("/", 1)[-1] if ".dist-info/" in member else "source"
    cap = CAPS[kind]
    wheel = _wheel_with(tmp_path / "x.whl", member, cap + 4096, lie=100)
    with zipfile.ZipFile(wheel) as archive:
        assert archive.getinfo(member).file_size == 100
        with pytest.raises(SglforgeError) as error:
            read_member(archive, member, wheel)
    # zipfile stops at the declared size and fails the CRC, or the cap stops it: either way
    # one line naming wheel and member, and at most cap + 1 bytes decompressed
    assert str(error.value).startswith(f"{wheel}: member {member} ")
    with (
        zipfile.ZipFile(_wheel_with(tmp_path / "y.whl", member, cap + 4096)) as archive,
        pytest.raises(MemberTooLarge, match=f"member {member} declares {cap + 4096} bytes"),
    ):
        read_member(archive, member, tmp_path / "y.whl")
    with zipfile.ZipFile(_wheel_with(tmp_path / "z.whl", member, 1000)) as archive:
        assert len(read_member(archive, member, tmp_path / "z.whl")) == 1000


def test_provenance_and_module_sources_are_capped_too(tmp_path):
    from sglforge.wheel.members import CAPS, MemberTooLarge
    from sglforge.wheel.provenance import read_json

    wheel = _wheel_with(
        tmp_path / "p.whl",
        "sglang-0.5.21.dist-info/sglforge-build.json",
        CAPS["sglforge-build.json"] + 1,
    )
    with pytest.raises(MemberTooLarge, match="sglforge-build.json declares"):
        read_json(wheel)
    stack = Stack(tmp_path / "project")
    stack.sglang_files["sglang/srt/uses.py"] = "x = 1\n" * (CAPS["source"] // 6 + 1)
    with pytest.raises(MemberTooLarge, match="member sglang/srt/uses.py declares"):
        stack.check()
