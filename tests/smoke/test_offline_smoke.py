"""Issue 33 item 2, the smoke's half: in a network namespace of its own, `nox -s smoke` with
no wheelhouse or index named anywhere takes the third-party pins of the lock from
$SGLFORGE_INDEX (a local directory of wheels, the offline route's one setting) and passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import host_view

from .conftest import SmokeProject

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_installs_from_sglforge_index_in_a_network_namespace(
    smoke_project: SmokeProject,
) -> None:
    prefix = host_view(offline=True)
    if prefix is None:
        pytest.skip("needs bubblewrap able to make a network namespace here")
    if subprocess.run([sys.executable, "-c", "import nox"], check=False).returncode != 0:
        pytest.skip("needs nox")
    smoke_project.write_profile(top_extra={"install": {}})  # no wheelhouse, no index
    env = {k: v for k, v in smoke_project.env().items() if not k.startswith(("PIP_", "SGLFORGE_"))}
    env["SGLFORGE_INDEX"] = str(smoke_project.root / "wheelhouse")
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "smoke"]
        + ["--", "--project", str(smoke_project.root), "--profile", "standin"]
        + ["--out", str(smoke_project.run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert smoke_project.report()["result"] == "pass"
    install_log = (smoke_project.run_dir / "logs" / "install.log").read_text()
    assert f"--find-links {smoke_project.root / 'wheelhouse'} --no-index" in install_log
    assert "Successfully installed" in install_log and "tinydep-1.0" in install_log, install_log
