"""sglforge-build.json has one owner (wheel/provenance.py): the build writes it, the smoke
reads it, and bad input is an error naming the wheel and the key."""

from __future__ import annotations

import json
import zipfile

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.wheel import provenance
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance
from sglforge.wheel.wheelset import load_wheelset
from tests.fixtures.project import make_project
from tests.helpers import provenance_stub


def test_a_real_build_loads_with_the_smokes_wheelset_loader(tmp_path):
    """The contract: what `sglforge build` writes is what the smoke reads."""
    project = make_project(tmp_path, ("purepy",))
    result = project.run("build")
    assert result.returncode == 0, result.stderr
    wheels = project.root / "wheels"
    wheelset = load_wheelset(wheels, project.root / "lockfiles" / "wheels.lock")
    [wheel] = wheelset.wheels
    [entry] = project.manifest()["wheels"]
    stamped = wheel.provenance
    assert stamped == provenance.read(wheel.file)
    assert stamped.to_json() == entry["provenance"]  # the manifest's copy, key for key
    assert stamped.upstream == "purepy" and stamped.commit == project.commits["purepy"]
    assert stamped.version == wheel.version == "1.2.3+cpu.e3b0c442"
    assert stamped.wheel == "purepy" and stamped.generated_by == "sglforge build"
    assert stamped.cuda_archs == () and stamped.requires_torch is None
    assert len(stamped.content_key) == 64 and stamped.extra == {}
    assert wheelset.versions()["purepy"]["commit"] == project.commits["purepy"]


def _full() -> dict:  # every key a build writes, with values of each type
    return provenance_stub(
        version="1.0",
        cuda_archs=("sm_120a",),
        requires_torch="2.13.0",
        toolchain={"cuda": "13.0", "cmake": None},
        format=1,
        sources=({"name": "x.y", "commit": "1" * 40, "sha256": None},),
        patches=({"name": "0001-a.patch", "sha256": "2" * 64},),
        build_requires={"torch": "2.13.0"},
        source_date_epoch=7,
        removed=("a/x.o",),
        dev=True,
    ).to_json()


def test_json_round_trip_keeps_every_key_and_unknown_ones():
    data = {**_full(), "future_key": {"nested": [1]}}
    loaded = Provenance.from_json(data, "w.whl")
    assert loaded.extra == {"future_key": {"nested": [1]}}
    assert loaded.to_json() == data
    assert json.loads(loaded.dumps()) == data


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("commit", 12, "provenance key 'commit' must be a string"),
        ("cuda_archs", "sm_120a", "'cuda_archs' must be a list of strings"),
        ("requires_torch", 2.13, "'requires_torch' must be a string or null"),
        ("toolchain", ["13.0"], "'toolchain' must be an object of strings"),
        ("source_date_epoch", "yesterday", "'source_date_epoch' must be an integer"),
        ("patches", ["0001-a.patch"], "'patches' must be a list of objects"),
        ("removed", [1], "'removed' must be a list of strings"),
        ("dev", "yes", "'dev' must be true or false"),
    ],
)
def test_bad_values_name_the_wheel_and_the_key(key, value, message):
    with pytest.raises(SglforgeError, match="^w.whl: .*" + message):
        Provenance.from_json({**_full(), key: value}, "w.whl")


def test_missing_keys_and_non_objects_are_errors():
    data = _full()
    del data["toolchain"], data["commit"]
    with pytest.raises(SglforgeError, match="w.whl: provenance lacks commit, toolchain"):
        Provenance.from_json(data, "w.whl")
    with pytest.raises(SglforgeError, match="must be a JSON object, got list"):
        Provenance.from_json([], "w.whl")


def _wheel_with(tmp_path, member: str, text: bytes):
    path = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, text)
    return path


def test_reading_a_wheel_fails_cleanly(tmp_path):
    good = _wheel_with(
        tmp_path, Provenance.member("demo-1.0.dist-info"), provenance_stub(version="1.0").dumps()
    )
    assert provenance.read(good).version == "1.0"
    bad_json = _wheel_with(tmp_path, f"demo-1.0.dist-info/{PROVENANCE_FILE}", b"{")
    with pytest.raises(SglforgeError, match=f"{bad_json}: {PROVENANCE_FILE} is not valid JSON"):
        provenance.read(bad_json)
    bad_key = _wheel_with(
        tmp_path,
        f"demo-1.0.dist-info/{PROVENANCE_FILE}",
        json.dumps({**_full(), "version": None}).encode(),
    )
    with pytest.raises(SglforgeError, match=f"{bad_key}: provenance key 'version'"):
        provenance.read(bad_key)
    none = _wheel_with(tmp_path, "demo/__init__.py", b"")
    with pytest.raises(SglforgeError, match="not a wheel built by sglforge"):
        provenance.read(none)
    (tmp_path / "junk.whl").write_bytes(b"not a zip")
    with pytest.raises(SglforgeError, match="not a valid wheel"):
        provenance.read(tmp_path / "junk.whl")


def test_dev_wheels_are_refused_by_the_smokes_wheelset_loader(tmp_path):
    """A `build --dev --publish-dev` wheel set: the smoke stops before installing anything."""
    project = make_project(tmp_path, ("purepy",))
    result = project.run("build", "--dev", "--publish-dev", "purepy")
    assert result.returncode == 0, result.stderr
    [entry] = project.manifest()["wheels"]
    assert entry["version"] == "1.2.3+cpu.e3b0c442.dev" and entry["provenance"]["dev"] is True
    with pytest.raises(SglforgeError) as err:
        load_wheelset(project.root / "wheels", project.root / "lockfiles" / "wheels.lock")
    assert "is a dev build" in str(err.value) + " ".join(getattr(err.value, "problems", []))
    assert provenance.dev_build_problem(_full(), "w.whl").startswith("w.whl is a dev build")
    assert provenance.dev_build_problem({**_full(), "dev": False}, "w.whl") is None


def test_dev_option_errors_are_one_line(tmp_path):
    project = make_project(tmp_path, ("purepy", "slowpy"))
    for args, message in (
        (["--dev"], "build --dev takes exactly one recipe"),
        (["--dev", "purepy", "slowpy"], "build --dev takes exactly one recipe"),
        (["--publish-dev", "purepy"], "--publish-dev is for dev builds"),
    ):
        result = project.run("build", *args)
        assert result.returncode != 0 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
