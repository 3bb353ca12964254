"""Interrupting a build stops the build: SIGINT/SIGTERM reap every process it started before
the locks are released; nothing partial is published.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglforge.base.procgroup import (
    Terminated,
    interrupts_deferred,
    run_in_session,
    session_members,
)
from tests.fixtures.project import FixtureProject, make_project
from tests.helpers import snapshot


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (session id, command line) of every live descendant of `root`."""
    return {pid: (sid, cmd) for pid, (sid, _, cmd) in _tree(root).items()}


def _tree(root: int) -> dict[int, tuple[int, int, str]]:
    """pid -> (session id, process group, command line) of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        fields = _stat(pid)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if fields:
            out[pid] = (int(fields[3]), int(fields[2]), cmdline)
        todo += children.get(pid, [])
    return out


def _host_pids(root: int, inner: list[int]) -> list[int]:
    """The host pids of processes that wrote their pids inside the build sandbox's pid
    namespace (builder/sandbox.py): the last NSpid of a descendant of `root` is its pid there."""
    by_inner: dict[int, int] = {}
    for pid in _tree(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("NSpid:")), "")
        ids = [int(x) for x in line.split()[1:]]
        if len(ids) > 1:
            by_inner[ids[-1]] = pid
    assert set(inner) <= set(by_inner), (inner, by_inner)
    return [by_inner[p] for p in inner]


def _started(project: FixtureProject) -> Path:
    """Where the slowpy fixture writes its pids: its own tree (tests/fixtures/upstreams.py)."""
    return project.build_root / "src" / "slowpy" / "slowpy-started"


def _assert_unlocked(path: Path) -> None:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
        fcntl.flock(handle, fcntl.LOCK_UN)


def _wait_exit(proc: subprocess.Popen[str], limit: float) -> tuple[float, str, str]:
    started = time.monotonic()
    out, err = proc.communicate(timeout=limit)
    return time.monotonic() - started, out, err


def _assert_clean_stop(
    project: FixtureProject, err: str, sessions: set[int], pids: list[int]
) -> None:
    assert "Traceback" not in err
    assert not [p for p in pids if _alive(p)], "a build process survived"
    assert not [s for s in sessions if session_members(s)], "a build session survived"
    _assert_unlocked(project.build_root / ".sglforge-build.lock")
    _assert_unlocked(project.root / ".wheels.sglforge-lock")
    assert snapshot(project.root / "wheels") == {}
    assert not (project.cache / "wheels").exists()
    assert not (project.root / "lockfiles" / "wheels.lock").exists()


# ---------------------------------------------------------------------------------------------
# the shared module


def test_run_in_session_reaps_the_whole_tree_on_an_exception(tmp_path):
    """A child in another process group of the same session (ninja's compile jobs) and one
    that ignores SIGTERM are both gone when the exception propagates."""
    script = (
        "import os, signal, subprocess, sys, time\n"
        "s = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        "a = subprocess.Popen(s, preexec_fn=os.setpgrp)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(tmp_path / 'pids')!r}, 'w').write(f'{{os.getpid()}} {{a.pid}}')\n"
        "time.sleep(60)\n"
    )
    pids_file = tmp_path / "pids"

    def boom() -> None:
        if pids_file.is_file() and len(pids_file.read_text().split()) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        run_in_session([sys.executable, "-c", script], grace=0.5, poll=0.05, on_poll=boom)
    leader, child = map(int, pids_file.read_text().split())
    assert info.value.sglforge_teardown.how == "SIGKILL"  # the leader ignored SIGTERM
    assert info.value.sglforge_teardown.survivors == []
    assert not _alive(leader) and not _alive(child)
    assert session_members(leader) == []


def test_a_signal_while_publishing_waits_until_publishing_is_done():
    done = []
    with pytest.raises(Terminated):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            done.append(True)  # still running: the signal was held back
    assert done == [True]


# ---------------------------------------------------------------------------------------------
# real builds


def test_sigint_stops_a_slow_build_and_releases_the_lock(tmp_path):
    project = make_project(tmp_path, ("slowpy",))
    proc = project.start("build")
    started = _started(project)
    deadline = time.monotonic() + 180
    while not started.is_file() or len(started.read_text().split()) != 4:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow build never started"
        time.sleep(0.1)
    pids = _host_pids(proc.pid, [int(p) for p in started.read_text().split()])
    sessions = {s for s, _ in _descendants(proc.pid).values()}
    # the sandbox's session (run_in_session) and the new one bubblewrap makes inside it
    assert len(sessions) == 2 and os.getsid(0) not in sessions

    proc.send_signal(signal.SIGINT)
    seconds, _, err = _wait_exit(proc, 60)
    assert proc.returncode == 130, err
    # one line, naming the signal and how the processes were stopped: one ignores SIGTERM,
    # but SIGTERM ends bubblewrap, and with it the sandbox's pid namespace (SIGKILL to all)
    assert err.strip().splitlines() == [err.strip()]
    assert re.fullmatch(
        r"sglforge build: interrupted by SIGINT; stopped its processes "
        r"\((SIGTERM|SIGKILL), \d+\.\ds\)",
        err.strip(),
    ), err
    assert seconds < 30
    _assert_clean_stop(project, err, sessions, pids)


@pytest.mark.cuda
def test_sigterm_mid_compile_stops_nvcc_and_the_next_build_is_clean(tmp_path):
    project = make_project(tmp_path, ("cudaext",))
    proc = project.start("build")
    compiling = re.compile(r"/src/cudaext/src/\w+\.cu\b")
    compilers = ("nvcc", "cicc", "ptxas", "cudafe++", "cc1plus", "fatbinary")
    deadline = time.monotonic() + 600
    while True:  # until the real nvcc (or what it runs) works on one of the fixture's .cu files
        tree = _tree(proc.pid)
        commands = [cmd for _, _, cmd in tree.values()]
        if any(compiling.search(c) for c in commands) and any(
            c.split(" ", 1)[0].rsplit("/", 1)[-1] in compilers for c in commands
        ):
            break
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "nvcc never started"
        time.sleep(0.05)
    seen = {pid: (sid, cmd) for pid, (sid, _, cmd) in tree.items()}
    sessions = {s for s, _ in seen.values()}
    assert os.getsid(0) not in sessions
    groups = {g for _, g, _ in tree.values()}
    assert len(groups) > 1  # ninja's jobs run in process groups of their own

    proc.send_signal(signal.SIGTERM)
    seconds, _, err = _wait_exit(proc, 60)
    assert proc.returncode == 143, err
    assert err.strip().startswith(
        "sglforge build: interrupted by SIGTERM; stopped its processes"
    ), err
    assert len(err.strip().splitlines()) == 1
    assert seconds < 20
    _assert_clean_stop(project, err, sessions, list(seen))
    print(
        f"\nSIGTERM -> exit 143 in {seconds:.1f}s: {err.strip()}; had {len(seen)} "
        f"processes in {len(sessions)} session(s), {len(groups)} process groups: "
        f"{sorted({(c.split() or ['?'])[0].rsplit('/', 1)[-1] for _, c in seen.values()})}"
    )

    # the next build in the same root and cache (nothing cached from the interrupted one)
    after = project.run("build")
    assert after.returncode == 0, after.stderr
    assert "cudaext: building" in after.stdout
    resumed = project.manifest()["wheels"][0]["sha256"]

    # a clean build: empty build root, fresh cache
    import shutil

    shutil.rmtree(project.build_root)
    clean = project.run("build", cache=tmp_path / "clean-cache")
    assert clean.returncode == 0, clean.stderr
    assert "cudaext: building" in clean.stdout
    assert project.manifest()["wheels"][0]["sha256"] == resumed


def test_sigint_mid_dev_build_parks_the_dev_tree_for_the_next_one(tmp_path):
    """`build --dev`: an interrupted compile leaves the synced tree and build directory parked
    under <root>/dev/<recipe> with state.json, so the next dev build resumes, not restarts."""
    import json

    from sglforge.base.buildroot import BuildRoot
    from sglforge.builder.devtree import DevWorkspace

    project = make_project(tmp_path, ("slowpy",))
    proc = project.start("build", "--dev", "slowpy")
    started = _started(project)
    deadline = time.monotonic() + 180
    while not started.is_file() or len(started.read_text().split()) != 4:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow build never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, _, err = _wait_exit(proc, 60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    root = BuildRoot(project.build_root)
    assert (root.dev("slowpy") / "tree" / "setup.py").is_file()  # parked again
    assert (root.dev("slowpy") / "build").is_dir()
    assert not root.src("slowpy").exists()
    state = json.loads((root.dev("slowpy") / "state.json").read_text())
    workspace = DevWorkspace(root, "slowpy", "slowpy", [], state["config"])
    workspace.checkout()
    assert not workspace.fresh and (root.src("slowpy") / "setup.py").is_file()
    _assert_unlocked(project.build_root / ".sglforge-build.lock")
    assert snapshot(project.root / "wheels") == {}
