"""Wheel normalization: same members in any order/mode/time -> same bytes; RECORD last."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.wheel.normalize import postprocess
from sglforge.wheel.provenance import read as read_provenance
from tests.helpers import provenance_stub

META = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0+abc\nRequires-Dist: torch>=2.0\n\nbody\n"


def make_wheel(path: Path, order: list[str], mode: int, when: tuple) -> Path:
    files = {
        "demo/__init__.py": b"x = 1\n",
        "demo/run.sh": b"#!/bin/sh\n",
        "demo-1.0+abc.dist-info/METADATA": META,
        "demo-1.0+abc.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
        "demo-1.0+abc.dist-info/RECORD": b"junk\n",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name in order:
            info = zipfile.ZipInfo(name, date_time=when)
            info.external_attr = (0o100775 if name.endswith(".sh") else mode) << 16
            archive.writestr(info, files[name])
    return path


def test_normalized_wheels_are_identical_and_well_formed(tmp_path):
    names = [
        "demo/__init__.py",
        "demo/run.sh",
        "demo-1.0+abc.dist-info/METADATA",
        "demo-1.0+abc.dist-info/WHEEL",
        "demo-1.0+abc.dist-info/RECORD",
    ]
    a = make_wheel(
        tmp_path / "a" / "demo-1.0+abc-py3-none-any.whl", names, 0o100664, (2024, 1, 1, 0, 0, 0)
    )
    b = make_wheel(
        tmp_path / "b" / "demo-1.0+abc-py3-none-any.whl",
        names[::-1],
        0o100600,
        (2025, 5, 5, 5, 5, 5),
    )
    outs = []
    for i, src in enumerate((a, b)):
        out, _ = postprocess(
            src,
            tmp_path / f"out{i}",
            expected_version="1.0+abc",
            expected_local=None,
            torch_version="2.13.0",
            provenance=provenance_stub(content_key="k"),
            epoch=1754049600,
        )
        outs.append(out)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    with zipfile.ZipFile(outs[0]) as archive:
        infos = archive.infolist()
        assert infos[-1].filename.endswith("dist-info/RECORD")
        assert [i.filename for i in infos[:2]] == ["demo/__init__.py", "demo/run.sh"]
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
        assert modes["demo/run.sh"] == 0o755 and modes["demo/__init__.py"] == 0o644
        assert {i.date_time for i in infos} == {(2025, 8, 1, 12, 0, 0)}
        meta = archive.read("demo-1.0+abc.dist-info/METADATA").decode()
        assert "Requires-Dist: torch==2.13.0" in meta and "torch>=2.0" not in meta
        record = archive.read("demo-1.0+abc.dist-info/RECORD").decode()
        assert "demo-1.0+abc.dist-info/sglforge-build.json,sha256=" in record
    assert read_provenance(outs[0]) == provenance_stub(content_key="k", version="1.0+abc")


def test_version_mismatch_is_an_error(tmp_path):
    src = make_wheel(
        tmp_path / "demo-1.0+abc-py3-none-any.whl",
        ["demo/__init__.py", "demo-1.0+abc.dist-info/METADATA"],
        0o100644,
        (2024, 1, 1, 0, 0, 0),
    )
    with pytest.raises(SglforgeError, match="built version 1.0\\+abc, expected 1.0\\+zzz"):
        postprocess(
            src,
            tmp_path / "o",
            expected_version="1.0+zzz",
            expected_local=None,
            torch_version=None,
            provenance=provenance_stub(),
            epoch=0,
        )
    with pytest.raises(SglforgeError, match="lacks the local label \\+zzz"):
        postprocess(
            src,
            tmp_path / "o",
            expected_version=None,
            expected_local="zzz",
            torch_version=None,
            provenance=provenance_stub(),
            epoch=0,
        )


def test_retag_appends_local_label_everywhere(tmp_path):
    src = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(src, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        archive.writestr(
            "demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
        )
        archive.writestr("demo-1.0.data/scripts/x", "#!/bin/sh\n")
    out, info = postprocess(
        src,
        tmp_path / "o",
        expected_version=None,
        expected_local=None,
        torch_version=None,
        provenance=provenance_stub(),
        epoch=0,
        retag_local="sm120.ab",
    )
    assert out.name == "demo-1.0+sm120.ab-py3-none-any.whl" and info.version == "1.0+sm120.ab"
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        assert "demo-1.0+sm120.ab.data/scripts/x" in names
        assert (
            "Version: 1.0+sm120.ab" in archive.read("demo-1.0+sm120.ab.dist-info/METADATA").decode()
        )
