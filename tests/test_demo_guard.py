"""Issue 33 items 1, 4 and 11: `nox -s demo` deletes nothing it did not make, checks the host
before it installs anything, and two demos never share a work directory.

Each test runs the real `nox -s demo` (the repository's noxfile); a refusal must come from the
preflight, before the toolchain install ("installing sglforge into" never appears)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import host_view

ROOT = Path(__file__).resolve().parents[1]
INSTALLING = "installing sglforge into"
pytestmark = pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import nox"], capture_output=True, check=False
    ).returncode
    != 0,
    reason="needs nox (pip install nox)",
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLFORGE_", "PIP_"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _demo(*args: str, prefix: list[str] | None = None, env=None, timeout: float = 300):
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
        + ["-s", "demo", "--", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env or _env(),
        check=False,
        timeout=timeout,
    )


@pytest.mark.parametrize("where", ["a directory of yours", "the checkout", "a file"])
def test_demo_refuses_a_workdir_it_did_not_make_and_deletes_nothing(tmp_path, where):
    if where == "a directory of yours":
        workdir = tmp_path / "mine"
        workdir.mkdir()
        (workdir / "thesis.tex").write_text("three years of work\n")
    elif where == "the checkout":
        workdir = ROOT
    else:
        workdir = tmp_path / "notes.txt"
        workdir.write_text("keep\n")
    before = sorted(p.name for p in workdir.iterdir()) if workdir.is_dir() else None
    started = time.monotonic()
    result = _demo("--workdir", str(workdir))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert f"demo: error: --workdir {workdir}: " in out, out
    assert INSTALLING not in out and "Traceback" not in out, out
    assert time.monotonic() - started < 60, "refused after an install, not before"
    if before is None:
        assert workdir.read_text() == "keep\n"
    else:
        assert sorted(p.name for p in workdir.iterdir()) == before
    if where == "a directory of yours":
        assert "no .sglforge-demo marker" in out
        assert (workdir / "thesis.tex").read_text() == "three years of work\n"


def test_demo_reuses_an_empty_dir_and_its_own_workdir_only(tmp_path):
    """An empty directory and one with the demo's marker pass the preflight (then the
    toolchain install starts, which fails here: no index); a marker it wrote is honoured."""
    from demo.__main__ import MARKER, check_workdir, prepare

    empty = tmp_path / "empty"
    empty.mkdir()
    result = _demo("--workdir", str(empty))
    out = result.stdout + result.stderr
    assert f"demo preflight: work directory {empty} ok" in out, out
    # past the preflight: the toolchain install starts, or, where an earlier run of the suite
    # in this checkout left the shared toolchain venv warm, it is found up to date
    assert INSTALLING in out or "is up to date (sglforge and the locks)" in out, out
    made = tmp_path / "made"
    sys.path.insert(0, str(ROOT / "src"))
    prepare(made)  # what a demo run leaves: its marker, then everything else
    assert (made / MARKER).is_file() and (made / "project").is_dir()
    check_workdir(made)  # no error: the demo may wipe what it made


def _without_cuobjdump() -> tuple[Path, ...]:
    """Every place this host's lookup (sglforge.wheel.audit.find_cuobjdump) would find one,
    for nox's interpreter: the toolkit's bin/ and nvidia-cuda-cuobjdump wheels' bin/."""
    import sysconfig

    hidden = []
    for base in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            if (Path(base) / "nvidia" / sub / "bin").is_dir():
                hidden.append(Path(base) / "nvidia" / sub / "bin")
    return tuple(hidden)


def test_demo_without_cuobjdump_stops_before_installing_and_says_what_works(tmp_path):
    hidden = _without_cuobjdump()
    cuda_bin = Path("/usr/local/cuda/bin")
    if (cuda_bin / "cuobjdump").exists():
        pytest.skip("this toolkit has cuobjdump in bin/ (cannot hide it without nvcc)")
    prefix = host_view(hide=hidden)
    if prefix is None:
        pytest.skip("needs bubblewrap able to remount here (root or user namespaces)")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p)
    result = _demo("--workdir", str(tmp_path / "demo"), prefix=prefix, env=_env(PATH=path))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "cuobjdump not found" in out, out
    assert 'pip install "nvidia-cuda-cuobjdump>=13.2,<14"' in out, out
    assert INSTALLING not in out and "Traceback" not in out, out
    assert not (tmp_path / "demo").exists()


def test_demo_without_cuda_stops_before_installing(tmp_path):
    prefix = host_view(hide=(Path("/usr/local/cuda").resolve(),))
    if prefix is None:
        pytest.skip("needs bubblewrap able to remount here (root or user namespaces)")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "cuda" not in p)
    result = _demo("--workdir", str(tmp_path / "demo"), prefix=prefix, env=_env(PATH=path))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "demo: error: nvcc not found" in out, out
    assert INSTALLING not in out and "Traceback" not in out, out


@pytest.mark.cuda
def test_a_second_demo_on_the_same_workdir_is_refused_and_the_first_finishes(tmp_path):
    """Item 11: the first demo (`python -m demo`, as `nox -s demo` runs it) holds the work
    directory's lock; `nox -s demo` on the same directory fails at once naming it, and the
    first run still ends with its bundle (nothing of its was wiped)."""
    workdir = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if k not in ("SGLFORGE_PROJECT", "SGLFORGE_CONFIG")}
    env.update(PYTHONPATH=str(ROOT), https_proxy="http://127.0.0.1:9", PIP_NO_INDEX="1")
    first = subprocess.Popen(
        [sys.executable, "-m", "demo", "--workdir", str(workdir)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (workdir / "project").is_dir() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (workdir / "project").is_dir(), "the first demo never started"
        second = _demo("--workdir", str(workdir))
        out = second.stdout + second.stderr
        assert second.returncode == 2, out
        assert f"demo work directory {workdir} is in use by pid {first.pid}" in out, out
        assert INSTALLING not in out, out
        output, _ = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, output[-4000:]
    assert "verify: all 2 wheel(s) rebuilt bit-identical" in output
    assert list((workdir / "dist").glob("sglforge-stack-*.tar.gz"))
