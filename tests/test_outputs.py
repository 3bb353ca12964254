"""lockfiles/runtime.lock: checked third-party pins copied into the generated wheels.lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.base.errors import ConfigErrors
from sglforge.inputs.toolchain import load_toolchain
from sglforge.wheel.outputs import read_runtime_lock, render_lock

ROOT = Path(__file__).resolve().parents[1]
H = "a" * 64


def test_runtime_pins_are_checked_and_copied_after_our_wheels(tmp_path):
    lock = tmp_path / "runtime.lock"
    lock.write_text(
        f"# header\nuvicorn==0.54.0 --hash=sha256:{H}\n"
        f"orjson==3.13.0 \\\n    --hash=sha256:{H}  # a comment\n"
    )
    pins = read_runtime_lock(lock, {"sglang"})
    assert pins == [f"uvicorn==0.54.0 --hash=sha256:{H}", f"orjson==3.13.0 --hash=sha256:{H}"]
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    text = render_lock(
        [{"name": "sglang", "version": "0.5.21+sm120", "sha256": "b" * 64}], toolchain, pins
    )
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [f"sglang==0.5.21+sm120 --hash=sha256:{'b' * 64}", *pins]


def test_bad_runtime_pins_name_file_and_line(tmp_path):
    lock = tmp_path / "runtime.lock"
    lock.write_text(
        f"torch>=2.13 --hash=sha256:{H}\nuvicorn==0.54.0\nsglang-kernel==0.4.7 --hash=sha256:{H}\n"
    )
    with pytest.raises(ConfigErrors) as err:
        read_runtime_lock(lock, {"sglang-kernel"})
    problems = err.value.problems
    assert problems[0].startswith("line 1: 'torch>=2.13")
    assert "not an exact `name==version" in problems[0]
    assert problems[1].startswith("line 2: uvicorn has no --hash=sha256:<64 hex>")
    assert "line 3: sglang-kernel is built by sglforge" in problems[2]
    assert str(lock) in str(err.value)


def test_the_repository_runtime_lock_is_valid_and_pins_the_router():
    pins = read_runtime_lock(ROOT / "lockfiles" / "runtime.lock", set())
    assert any(p.startswith("sglang-router==0.3.2 --hash=sha256:") for p in pins)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("name", "sglang\nevil==6.6.6", "name 'sglang\\nevil==6.6.6' is not a distribution name"),
        ("name", "sglang evil", "is not a distribution name"),
        ("version", "1.0 --hash=sha256:" + H + "\ntorch==9.9.9", "is not a version (characters)"),
        ("version", "1.0+x\x0b", "is not a version (characters)"),
        ("version", "one", "is not a PEP 440 version"),
        ("sha256", H + "\nx==1", "is not 64 lowercase hex digits"),
        ("file", "README.md", "file 'README.md' is not a wheel file name"),
        ("file", "x.whl", "is not a valid wheel file name (PEP 427)"),
    ],
)
def test_lock_lines_and_file_names_are_checked_before_anything_is_written(
    tmp_path, field, value, problem
):
    """Issue 21 item 5, defence in depth: whatever produced a wheel's values (a build, a
    remote entry, an old manifest), a value that is not a plain name, version, hash or wheel
    file name never becomes a lock line or a file in wheels/."""
    from types import SimpleNamespace

    from sglforge.base.errors import SglforgeError
    from sglforge.wheel.outputs import write_wheels

    values = {
        "name": "x",
        "version": "1.0",
        "sha256": H,
        "file": "x-1.0-py3-none-any.whl",
        field: value,
    }
    source = tmp_path / "src" / values["file"]  # the built (or fetched) wheel
    source.parent.mkdir()
    source.write_bytes(b"wheel bytes")
    wheel = SimpleNamespace(
        path=source,
        sha256=values["sha256"],
        name=values["name"],
        version=values["version"],
        recipe="x",
        provenance=SimpleNamespace(to_json=dict),
    )
    out = tmp_path / "wheels"
    out.mkdir()
    (out / "README.md").write_text("tracked\n")
    with pytest.raises(SglforgeError) as error:
        write_wheels(out, [wheel])
    assert problem in str(error.value)
    assert sorted(p.name for p in out.iterdir()) == ["README.md"]
    assert (out / "README.md").read_text() == "tracked\n"
    if field != "file":
        toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
        with pytest.raises(SglforgeError, match="lockfiles/wheels.lock: refusing"):
            render_lock([values], toolchain)
