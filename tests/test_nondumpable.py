"""What a process of the same uid can read of sglforge (issue 21, item 3c), measured with
real processes: /proc/<pid>/environ of a non-dumpable parent. Defence in depth: a build runs
in the sandbox's pid namespace (builder/sandbox.py) and does not see sglforge at all; this is
what holds for anything else running as the same uid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).parents[1] / "src")

# A parent that holds a secret in its environment, optionally makes itself non-dumpable,
# then lets a child try to read its /proc/<pid>/environ.
PARENT = r"""
import json, os, subprocess, sys
from sglforge.base.credentials import scrub_environment
if sys.argv[1] == "scrub":
    taken = scrub_environment()
    assert taken == {"SGLFORGE_WHEEL_CACHE_REMOTE": "http://u:tok-Hq7Kx@h/"}, taken
    assert "SGLFORGE_WHEEL_CACHE_REMOTE" not in os.environ
child = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], capture_output=True)
inherited = subprocess.run(["env"], capture_output=True).stdout
print(json.dumps({"rc": child.returncode, "leak": b"tok-Hq7Kx" in child.stdout,
                  "inherited": b"tok-Hq7Kx" in inherited}))
"""

# Not root (as root the child's CAP_SYS_PTRACE would read anything): a user namespace whose
# uid 1000 is this uid, without capabilities outside it; the interpreter stays reachable.
OUTER = [] if os.geteuid() != 0 else ["unshare", "--user", "--map-user=1000", "--map-group=1000"]


def _parent(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=SRC, SGLFORGE_WHEEL_CACHE_REMOTE="http://u:tok-Hq7Kx@h/")
    result = subprocess.run(
        [*OUTER, sys.executable, "-c", PARENT, mode],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_non_dumpable_hides_the_environment_from_the_same_uid():
    """Measured: a same-uid child reads /proc/<parent>/environ (secret included, even after
    os.environ lost it) unless the parent is non-dumpable; no child inherits the secret."""
    plain = _parent("keep")
    assert plain["rc"] == 0 and plain["leak"] and plain["inherited"]
    scrubbed = _parent("scrub")
    assert scrubbed["rc"] != 0 and not scrubbed["leak"] and not scrubbed["inherited"]
