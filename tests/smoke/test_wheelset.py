"""The smoke refuses wheels whose manifest does not match the lock (or the files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.wheel.wheelset import load_wheelset, parse_lock

from .conftest import SmokeProject, make_wheel, provenance, sha256


def _load(project: SmokeProject):
    return load_wheelset(project.root / "wheels", project.root / "lockfiles" / "wheels.lock")


def test_consistent_set_loads_with_provenance(smoke_project: SmokeProject) -> None:
    wheelset = _load(smoke_project)
    assert {w.name for w in wheelset.wheels} == {"sglang", "sglang-kernel"}
    assert [e.name for e in wheelset.third_party] == ["tinydep"]
    assert wheelset.archs() == {"sm_120a"}


def test_lock_pinning_another_version_is_refused(smoke_project: SmokeProject) -> None:
    lock = smoke_project.root / "lockfiles" / "wheels.lock"
    lock.write_text(lock.read_text().replace("sglang-kernel==0.4.7+", "sglang-kernel==0.4.8+"))
    with pytest.raises(ConfigErrors) as info:
        _load(smoke_project)
    assert "manifest has sglang-kernel 0.4.7+sm120.cu130.abcd1234" in str(info.value)
    assert "pins 0.4.8+sm120.cu130.abcd1234" in str(info.value)


def test_lock_hash_not_matching_wheel_is_refused(smoke_project: SmokeProject) -> None:
    lock = smoke_project.root / "lockfiles" / "wheels.lock"
    kernel = next(w for w in smoke_project.wheels if "kernel" in w.name)
    lock.write_text(lock.read_text().replace(sha256(kernel), "0" * 64))
    with pytest.raises(ConfigErrors, match="is not among the hashes"):
        _load(smoke_project)


def test_wheel_replaced_after_build_is_refused(smoke_project: SmokeProject) -> None:
    kernel = next(w for w in smoke_project.wheels if "kernel" in w.name)
    make_wheel(
        kernel.parent,
        "sglang-kernel",
        "0.4.7+sm120.cu130.abcd1234",
        provenance("sglang-kernel", "0.4.7+sm120.cu130.abcd1234", ["sm_90a"]),
    )
    with pytest.raises(ConfigErrors, match="wheel changed after the build"):
        _load(smoke_project)


def test_manifest_provenance_must_equal_the_wheels(smoke_project: SmokeProject) -> None:
    manifest_path = smoke_project.root / "wheels" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["wheels"][1]["provenance"]["cuda_archs"] = ["sm_100a"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ConfigErrors, match="manifest provenance differs"):
        _load(smoke_project)


def test_lock_syntax_errors_name_the_line(tmp_path: Path) -> None:
    lock = tmp_path / "wheels.lock"
    lock.write_text("# header\nfoo==1.0\nbar>=2 --hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(ConfigErrors) as info:
        parse_lock(lock)
    assert "line 2: foo has no --hash" in str(info.value)
    assert "line 3: 'bar>=2" in str(info.value) and "is not an exact" in str(info.value)
    with pytest.raises(SglforgeError, match="file not found"):
        parse_lock(tmp_path / "missing.lock")


def test_smoke_refuses_mismatched_set_before_starting(smoke_project: SmokeProject) -> None:
    lock = smoke_project.root / "lockfiles" / "wheels.lock"
    lock.write_text(lock.read_text().replace("sglang==0.5.99+", "sglang==0.5.98+"))
    result = smoke_project.smoke("--profile", "standin", "--out", str(smoke_project.run_dir))
    assert result.returncode == 2
    assert "manifest has sglang 0.5.99" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (smoke_project.run_dir / "venv").exists()
    assert not (smoke_project.run_dir / "processes.json").exists()
