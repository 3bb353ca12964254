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
    lock.write_text(f"# header\nuvicorn==0.54.0 --hash=sha256:{H}\n"
                    f"orjson==3.13.0 \\\n    --hash=sha256:{H}  # a comment\n")
    pins = read_runtime_lock(lock, {"sglang"})
    assert pins == [f"uvicorn==0.54.0 --hash=sha256:{H}", f"orjson==3.13.0 --hash=sha256:{H}"]
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    text = render_lock([{"name": "sglang", "version": "0.5.21+sm120", "sha256": "b" * 64}],
                       toolchain, pins)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [f"sglang==0.5.21+sm120 --hash=sha256:{'b' * 64}", *pins]


def test_bad_runtime_pins_name_file_and_line(tmp_path):
    lock = tmp_path / "runtime.lock"
    lock.write_text(f"torch>=2.13 --hash=sha256:{H}\nuvicorn==0.54.0\n"
                    f"sglang-kernel==0.4.7 --hash=sha256:{H}\n")
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
