"""lockfiles/runtime.in -> runtime.lock: deriving the input from wheel metadata, the lock's
header, and the staleness check `nox -s check` calls. uv is replaced by a fake (no network)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import parse_pinned
from sglforge.wheel import runtime
from sglforge.wheel.outputs import read_runtime_lock
from tests.smoke.conftest import build_wheelset, make_wheel

REPO = Path(__file__).resolve().parent.parent
OURS = {"sglang", "sglang-kernel", "flashinfer-python", "tilelang"}


def _meta(name: str, *requires: str) -> runtime.Metadata:
    return runtime.Metadata(
        source=f"{name}.whl sha256=0", name=name, version="1", requires=requires
    )


def test_derive_evaluates_markers_extras_and_drops_our_names() -> None:
    metadata = [
        _meta(
            "sglang",
            "flashinfer_python[cu13]==0.6.18",
            "torch==2.13.0",
            "aiohttp",
            "tomli; python_version < '3.11'",
            "av==16.1.0; platform_machine == 'aarch64'",
            "sglang-router>=0.3; extra == 'router'",
            "Sglang_Kernel==0.4.7",
        ),
        _meta(
            "flashinfer-python",
            "numpy",
            "nvidia-cutlass-dsl[cu13]>=4.6; extra == 'cu13'",
            "nvidia-cutlass-dsl>=4.6; extra == 'cu12'",
            "torch",
        ),
        _meta(
            "tilelang",
            "numpy>=1.23.5",
            "z3-solver<4.15.5,>=4.13.0",
            "setuptools; platform_system == 'Darwin'",
        ),
    ]
    lines = runtime.derive_requirements(metadata, OURS, "3.12", "2.13.0")
    assert lines == [
        "aiohttp  # <- sglang",
        "numpy  # <- flashinfer-python",
        "numpy>=1.23.5  # <- tilelang",
        "nvidia-cutlass-dsl[cu13]>=4.6  # <- flashinfer-python",  # the extra sglang asks for
        "torch  # <- flashinfer-python",
        "torch==2.13.0  # <- sglang, toolchain.toml",
        "z3-solver<4.15.5,>=4.13.0  # <- tilelang",
    ]
    # Python 3.10 gets tomli; our own names never appear.
    older = runtime.derive_requirements(metadata, OURS, "3.10")
    assert "tomli  # <- sglang" in older
    assert not [line for line in older if line.split("[")[0].split("=")[0] in OURS]


def test_derive_refuses_the_same_wheel_twice_and_bad_requirements() -> None:
    with pytest.raises(SglforgeError, match="sglang given more than once"):
        runtime.derive_requirements([_meta("sglang"), _meta("sglang")], OURS, "3.12")
    with pytest.raises(SglforgeError, match="unreadable requirements"):
        runtime.derive_requirements([_meta("sglang", "not a requirement ===")], OURS, "3.12")


def test_read_metadata_from_a_wheel_and_a_metadata_file(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "sglang", "0.5.21", None, requires=["torch==2.13.0"])
    meta = runtime.read_metadata(wheel)
    assert (meta.name, meta.version, meta.requires) == ("sglang", "0.5.21", ("torch==2.13.0",))
    assert meta.source.startswith(f"{wheel.name} sha256=")
    text = tmp_path / "x.METADATA"
    text.write_text("Metadata-Version: 2.1\nName: Tile_Lang\nVersion: 1\nRequires-Dist: numpy\n")
    assert runtime.read_metadata(text).name == "tile-lang"


def test_render_input_keeps_the_hand_written_part() -> None:
    hand = "# mine\nsglang-router==0.3.2  # the router\n"
    first = runtime.render_input(hand, [_meta("sglang")], ["aiohttp  # <- sglang"], "3.12")
    assert first.startswith(hand.rstrip("\n"))
    assert runtime.GENERATED_MARKER in first and "aiohttp  # <- sglang" in first
    second = runtime.render_input(
        first, [_meta("sglang")], ["numpy  # <- sglang"], "3.12", note="stand-ins"
    )
    assert "aiohttp" not in second and "numpy  # <- sglang" in second
    assert second.count(runtime.GENERATED_MARKER) == 1 and "# stand-ins" in second
    assert "sglang-router==0.3.2" in second


FAKE_UV = """#!{python}
import sys
argv = sys.argv[1:]
if argv == ["--version"]:
    print("uv 0.0.0-fake"); sys.exit(0)
if "{fail}" == "1":
    print("error: No solution found when resolving dependencies", file=sys.stderr); sys.exit(1)
out = argv[argv.index("--output-file") + 1]
open(out, "w").write("aiohttp==3.14.5 \\\\\\n    --hash=sha256:" + "a" * 64 + "\\n"
                     "    # via -r lockfiles/runtime.in\\n")
open(out + ".argv", "w").write(" ".join(argv))
"""


def _fake_uv(tmp_path: Path, fail: bool = False) -> Path:
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV.format(python=sys.executable, fail="1" if fail else "0"))
    uv.chmod(0o755)
    return uv


def _lock_files(tmp_path: Path) -> tuple[Path, Path]:
    lockfiles = tmp_path / "lockfiles"
    lockfiles.mkdir(exist_ok=True)
    source = lockfiles / "runtime.in"
    source.write_text("# hand\nsglang-router==0.3.2\naiohttp  # <- sglang\n")
    return source, lockfiles / "runtime.lock"


def test_compile_lock_writes_header_with_input_digest_and_is_then_fresh(tmp_path: Path) -> None:
    source, lock = _lock_files(tmp_path)
    runtime.compile_lock(str(_fake_uv(tmp_path)), source, lock, "3.12", {"sglang"}, tmp_path)
    text = lock.read_text()
    assert "# input-sha256: " + runtime.input_digest(source.read_text()) in text
    assert "# python: 3.12" in text and "uv 0.0.0-fake" in text
    assert (
        "--generate-hashes --python-version 3.12 --python-platform x86_64-manylinux_2_28" in text
        and "--no-emit-package sglang" in text
    )
    pins, problems = parse_pinned(text)
    assert problems == [] and [p.name for p in pins] == ["aiohttp"]
    assert read_runtime_lock(lock, {"sglang"}) == [pins[0].text]
    assert runtime.runtime_lock_is_stale(lock, source, "3.12") is None


def test_staleness(tmp_path: Path) -> None:
    source, lock = _lock_files(tmp_path)
    assert "missing" in runtime.runtime_lock_is_stale(lock, source)
    lock.write_text("aiohttp==3.14.5 --hash=sha256:" + "a" * 64 + "\n")  # hand-written
    assert "no '# input-sha256:' header" in runtime.runtime_lock_is_stale(lock, source)
    runtime.compile_lock(str(_fake_uv(tmp_path)), source, lock, "3.12", set(), tmp_path)
    # Comments and spacing do not count ...
    source.write_text("# hand, reworded\n\nsglang-router==0.3.2   # router\naiohttp\n")
    assert runtime.runtime_lock_is_stale(lock, source, "3.12") is None
    # ... requirements and the target Python do.
    assert "resolved for Python 3.12, the toolchain says 3.13" in runtime.runtime_lock_is_stale(
        lock, source, "3.13"
    )
    source.write_text("sglang-router==0.3.3\naiohttp\n")
    assert "was resolved from another runtime.in" in runtime.runtime_lock_is_stale(lock, source)
    source.unlink()
    assert "runtime.in is missing" in runtime.runtime_lock_is_stale(lock, source)


def test_uv_failure_keeps_the_old_lock_and_shows_why(tmp_path: Path) -> None:
    source, lock = _lock_files(tmp_path)
    lock.write_text("old\n")
    with pytest.raises(SglforgeError, match="No solution found"):
        runtime.compile_lock(
            str(_fake_uv(tmp_path, fail=True)), source, lock, "3.12", set(), tmp_path
        )
    assert lock.read_text() == "old\n"


def test_cli_lock_runtime_derives_the_input_from_built_wheels(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "lockfiles").mkdir(parents=True)
    (root / "lockfiles" / "upstreams.toml").write_text("")
    (root / "lockfiles" / "toolchain.toml").write_text(
        'cuda = "13.0"\npython = "3.12"\ntorch = "2.13.0"\n'
    )
    (root / "recipes").mkdir()
    for name in ("sglang", "sglang-kernel"):
        (root / "recipes" / f"{name}.toml").write_text("")
    build_wheelset(root)  # sglang requires tinydep==1.0
    (root / "lockfiles" / "runtime.in").write_text("# hand\nsglang-router==0.3.2\n")
    env = {
        **{k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"},
        "SGLFORGE_UV": str(_fake_uv(tmp_path)),
    }
    base = [sys.executable, "-m", "sglforge", "--project", str(root), "lock-runtime"]
    check = subprocess.run([*base, "--check"], capture_output=True, text=True, env=env, check=False)
    assert check.returncode == 1 and "runtime.lock is missing" in check.stdout
    result = subprocess.run(base, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    text = (root / "lockfiles" / "runtime.in").read_text()
    assert text.startswith("# hand\nsglang-router==0.3.2\n")
    assert "tinydep==1.0  # <- sglang" in text and "torch==2.13.0  # <- toolchain.toml" in text
    assert "from wheels/ (built)" in text
    check = subprocess.run([*base, "--check"], capture_output=True, text=True, env=env, check=False)
    assert check.returncode == 0, check.stdout


def test_the_committed_runtime_lock_matches_its_input() -> None:
    """The repository's own lock: generated, fresh, for the toolchain Python, and complete
    enough to serve (torch, transformers, the router)."""
    lock, source = REPO / "lockfiles" / "runtime.lock", REPO / "lockfiles" / "runtime.in"
    assert runtime.runtime_lock_is_stale(lock, source, "3.12") is None
    ours = {p.stem for p in (REPO / "recipes").glob("*.toml")}
    pins, problems = parse_pinned(lock.read_text())
    assert problems == []
    names = {p.name: p.version for p in pins}
    assert not ours & set(names)
    from sglforge.inputs.toolchain import load_toolchain

    torch = load_toolchain(REPO / "lockfiles" / "toolchain.toml").torch_public
    assert names["torch"] == torch and names["sglang-router"] == "0.3.2"
    assert {"transformers", "triton", "nvidia-nccl-cu13"} <= set(names)
    assert textwrap.dedent(source.read_text()).count(runtime.GENERATED_MARKER) == 1


def test_input_staleness_against_the_wheels(tmp_path: Path) -> None:
    metadata = [_meta("sglang", "aiohttp", "numpy>=2; python_version >= '3.11'")]
    source = tmp_path / "runtime.in"
    source.write_text("sglang-router==0.3.2\n")
    assert "no generated part" in runtime.runtime_input_is_stale(source, metadata, OURS, "3.12")
    lines = runtime.derive_requirements(metadata, OURS, "3.12", "2.13.0")
    source.write_text(runtime.render_input("# hand\n", metadata, lines, "3.12"))
    assert runtime.runtime_input_is_stale(source, metadata, OURS, "3.12", "2.13.0") is None
    newer = [_meta("sglang", "aiohttp", "numpy>=2.1")]
    reason = runtime.runtime_input_is_stale(source, newer, OURS, "3.12", "2.13.0")
    assert "new: numpy>=2.1; gone: numpy>=2" in reason


def test_explicit_uv_that_does_not_exist_is_a_clear_error(tmp_path) -> None:
    from sglforge.base.errors import SglforgeError
    from sglforge.wheel.runtime import find_uv

    with pytest.raises(SglforgeError, match="is not an executable file or a command on PATH"):
        find_uv(str(tmp_path / "no-such-uv"))
