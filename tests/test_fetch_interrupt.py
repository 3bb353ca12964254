"""Interrupting `sglforge fetch` (issue 21 item 9): SIGTERM/SIGINT stop the git it started,
upload-pack and pack-objects included, and a partial pack in the source cache is removed
(at once, or by the next fetch when sglforge itself was SIGKILLed).

A real `git fetch` over file:// from a synthetic repository, slowed deterministically by an
`uploadpack.packObjectsHook` that lets the first 64 KiB of the pack through and then stalls:
index-pack has written a tmp_pack_* by then, and pack-objects is blocked mid-pack. Every
process is found by a marker in its environment (/proc/<pid>/environ), whatever session or
parent it has.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.gitrepos import source_entry

REPO = Path(__file__).resolve().parents[1]


def _marked(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds `marker`."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() not in Path(f"/proc/{entry.name}/environ").read_bytes():
                continue
            stat = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[-1].split()
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if stat[0] != "Z":
            found[int(entry.name)] = cmd.decode(errors="replace").strip()
    return found


def _wait_for(what, predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _default_signals() -> None:
    # `nohup … &` and some CI runners start us with SIGINT ignored; the child must not be.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture
def slow_fetch(world, tmp_path):
    repo = world.repo("org/big")
    rng = random.Random(21)
    # over fetch.unpackLimit (100) objects, so the client runs index-pack (a tmp_pack_*)
    commit = repo.commit("big", {f"blob{i}.bin": rng.randbytes(8 << 10) for i in range(200)})
    world.write_lockfile(source_entry("big", world.url("org/big"), commit))
    hook = tmp_path / "slow-pack-objects"
    hook.write_text('#!/bin/sh\n"$@" | (head -c 65536; sleep 600; cat)\n')
    hook.chmod(0o755)
    config = tmp_path / "gitconfig"  # global scope: the local transport drops GIT_CONFIG_COUNT
    config.write_text(f"[uploadpack]\n\tpackObjectsHook = {hook}\n")
    marker = f"SGLFORGE_TEST_MARK={uuid.uuid4().hex}"

    def start(*, slow: bool = True) -> subprocess.Popen:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GIT_CONFIG", "SGLFORGE_PROJECT"))
        }
        env.update({"PYTHONPATH": str(REPO / "src"), marker.split("=")[0]: marker.split("=")[1]})
        if slow:  # upload-pack honours the hook only from protected (e.g. global) config
            env["GIT_CONFIG_GLOBAL"] = str(config)
        return subprocess.Popen(
            [sys.executable, "-m", "sglforge", *world.cli_args(), "fetch", "--no-export"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_default_signals,  # noqa: PLW1509 - no threads
        )

    def pack_dir() -> Path:
        (git_dir,) = (world.cache / "git").glob("big-*.git")
        return git_dir / "objects" / "pack"

    def litter() -> list[str]:
        try:
            return sorted(p.name for p in pack_dir().iterdir() if p.name.startswith("tmp_"))
        except (ValueError, FileNotFoundError):
            return []

    def started(proc: subprocess.Popen) -> None:
        _wait_for(
            "a partial pack and a running pack-objects",
            lambda: litter() and any("pack-objects" in cmd for cmd in _marked(marker).values()),
        )

    class Slow:
        pass

    s = Slow()
    s.start, s.started, s.litter, s.marker, s.commit = start, started, litter, marker, commit
    yield s
    for pid in _marked(marker):  # whatever a failing run left: do not leak it into the suite
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_fetch_leaves_no_git_process_and_no_partial_pack(slow_fetch, signum):
    proc = slow_fetch.start()
    slow_fetch.started(proc)
    before = _marked(slow_fetch.marker)
    assert any("upload-pack" in cmd for cmd in before.values()), before
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    survivors = _marked(slow_fetch.marker)
    assert survivors == {}, f"still running after sglforge exited: {survivors}"
    assert slow_fetch.litter() == []


def test_next_fetch_removes_the_partial_pack_a_killed_fetch_left(slow_fetch):
    proc = slow_fetch.start()
    slow_fetch.started(proc)
    proc.kill()  # SIGKILL: sglforge cannot clean up; the next run must
    proc.communicate(timeout=60)
    for pid in _marked(slow_fetch.marker):
        os.kill(pid, signal.SIGKILL)
    _wait_for("the killed git processes to go", lambda: not _marked(slow_fetch.marker))
    left = slow_fetch.litter()
    assert left and any(name.startswith("tmp_pack_") for name in left)
    again = slow_fetch.start(slow=False)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert "big" in out
    assert slow_fetch.litter() == []


def test_next_fetch_removes_a_partial_archive_download(world, upstreams):
    """An archive download a SIGKILL cut short (fetch_tarball's `.download-*`) goes with the
    next fetch; the archives themselves stay."""
    from sglforge.cli.main import main

    assert main(world.cli_args() + ["fetch", "--no-export"]) == 0
    tarballs = world.cache / "tarballs"
    partial = tarballs / ".download-abc123"
    partial.write_bytes(b"x" * 4096)
    assert main(world.cli_args() + ["fetch", "--no-export"]) == 0
    assert sorted(p.name for p in tarballs.iterdir()) == [upstreams.gamma_sha]
