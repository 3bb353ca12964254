"""What a build's process can read of sglforge (issue 21, item 3c), measured with real
processes: /proc/<pid>/environ of a non-dumpable parent, as the same uid and as the build
user; root's files as the build user and as root without capabilities."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).parents[1] / "src")

# A parent that holds a secret in its environment, optionally makes itself non-dumpable,
# then lets a child (run through PREFIX, a JSON list) try to read its /proc/<pid>/environ.
PARENT = r"""
import json, os, subprocess, sys
from sglforge.base.credentials import scrub_environment
if sys.argv[1] == "scrub":
    taken = scrub_environment()
    assert taken == {"SGLFORGE_WHEEL_CACHE_REMOTE": "http://u:tok-Hq7Kx@h/"}, taken
    assert "SGLFORGE_WHEEL_CACHE_REMOTE" not in os.environ
prefix = json.loads(sys.argv[2])
child = subprocess.run([*prefix, "cat", f"/proc/{os.getpid()}/environ"], capture_output=True)
inherited = subprocess.run([*prefix, "env"], capture_output=True).stdout
print(json.dumps({"rc": child.returncode, "leak": b"tok-Hq7Kx" in child.stdout,
                  "inherited": b"tok-Hq7Kx" in inherited}))
"""


def _parent(mode: str, prefix: list[str], outer: list[str], python: str = sys.executable
            ) -> dict:
    import json

    env = dict(os.environ, PYTHONPATH=SRC,
               SGLFORGE_WHEEL_CACHE_REMOTE="http://u:tok-Hq7Kx@h/")
    result = subprocess.run([*outer, python, "-c", PARENT, mode, json.dumps(prefix)],
                            capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _as_unprivileged() -> tuple[list[str], str]:
    """Run the parent itself as a plain user: as root, uid 64999 (the same-uid case), with
    an interpreter that uid can reach (base/credentials.py needs only the stdlib)."""
    if os.geteuid() != 0:
        return [], sys.executable
    from sglforge.build.builduser import BuildUser, unreachable

    for python in (sys.executable, "/usr/bin/python3"):
        real = Path(os.path.realpath(python))
        if real.exists() and unreachable(64999, [real, Path(SRC) / "sglforge"]) is None:
            return BuildUser(64999, 64999, "test").prefix(), python
    pytest.skip("no interpreter reachable by another uid")


def test_non_dumpable_hides_the_environment_from_the_same_uid():
    """Measured: a same-uid child reads /proc/<parent>/environ (secret included, even after
    os.environ lost it) unless the parent is non-dumpable; no child inherits the secret."""
    outer, python = _as_unprivileged()
    plain = _parent("keep", [], outer, python)
    assert plain["rc"] == 0 and plain["leak"] and plain["inherited"]
    scrubbed = _parent("scrub", [], outer, python)
    assert scrubbed["rc"] != 0 and not scrubbed["leak"] and not scrubbed["inherited"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the build user is used only as root")
def test_build_user_and_root_without_capabilities(tmp_path):
    from sglforge.build.builduser import BuildUser

    secret_file = tmp_path / "config.toml"
    secret_file.write_text("token")
    secret_file.chmod(0o600)
    os.chmod(tmp_path, 0o755)
    user = BuildUser(64999, 64999, "test")
    caps = BuildUser(0, 0, "root without capabilities", caps_only=True)
    # a dumpable root parent: the build user cannot read it; nor can capability-less root
    for who in (user, caps):
        seen = _parent("keep", who.prefix(), [])
        assert seen["rc"] != 0 and not seen["leak"], who
        uid = subprocess.run([*who.prefix(), "id", "-u"], capture_output=True, text=True,
                             check=True).stdout.strip()
        assert uid == str(who.uid)
    denied = subprocess.run([*user.prefix(), "cat", str(secret_file)], capture_output=True,
                            check=False)
    assert denied.returncode != 0 and b"token" not in denied.stdout
    # the documented limit of the fallback: root's own files stay readable
    readable = subprocess.run([*caps.prefix(), "cat", str(secret_file)], capture_output=True,
                              check=False)
    assert readable.stdout == b"token"
    # no_new_privs: a setuid program does not give root back
    nnp = subprocess.run([*user.prefix(), "grep", "NoNewPrivs", "/proc/self/status"],
                         capture_output=True, text=True, check=True).stdout
    assert nnp.split() == ["NoNewPrivs:", "1"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the build user is used only as root")
def test_drop_without_setpriv(monkeypatch):
    from sglforge.build import builduser

    monkeypatch.setattr(builduser.shutil, "which", lambda name: None)
    prefix = builduser.BuildUser(64999, 64999, "test").prefix()
    assert "setpriv" not in " ".join(prefix)
    out = subprocess.run([*prefix, "sh", "-c", "id -u; id -G; grep NoNewPrivs /proc/self/status"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["64999", "64999", "NoNewPrivs:", "1"]


def test_build_user_is_chosen_only_as_root_and_reachability_decides(tmp_path):
    from sglforge.build import builduser

    user = builduser.build_user([tmp_path / "root" / "work"])
    if os.geteuid() != 0:
        assert user is None
        return
    assert user is not None
    hidden = tmp_path / "hidden"
    (hidden / "root").mkdir(parents=True)
    hidden.chmod(0o700)
    fallback = builduser.build_user([hidden / "root" / "work"])
    assert fallback is not None and fallback.caps_only and fallback.uid == 0
    assert str(hidden) in fallback.name


@pytest.mark.skipif(os.geteuid() != 0, reason="the build user is used only as root")
def test_capability_less_root_gets_back_a_cache_dir_the_build_user_filled(tmp_path):
    """Root without CAP_DAC_OVERRIDE cannot write into a directory uid 64999 owns."""
    from sglforge.build.builduser import BuildUser

    cache = tmp_path / "ccache"
    (cache / "a").mkdir(parents=True)
    user, caps = BuildUser(64999, 64999, "test"), BuildUser(0, 0, "caps", caps_only=True)
    user.hand_over([cache])
    assert (cache / "a").stat().st_uid == 64999
    blocked = subprocess.run([*caps.prefix(), "touch", str(cache / "a" / "x")],
                             capture_output=True, check=False)
    assert blocked.returncode != 0  # why the hand-over below is needed
    caps.hand_over([cache])
    assert (cache / "a").stat().st_uid == 0
    subprocess.run([*caps.prefix(), "touch", str(cache / "a" / "x")], check=True)
