"""Issue 23 item 7: `nox -s demo` runs the whole flow on the example project in demo/, offline:
generated upstreams at pinned commits -> fetch -> strict patch check -> build (sm_120a CUDA
extension + pure-Python wheel, arch audit, stack check) -> verify -> check -> bundle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_upstreams_are_the_pinned_commits(tmp_path):
    from demo.__main__ import make_mirror, pinned_commits

    assert make_mirror(tmp_path / "mirror") == pinned_commits()


def test_nox_lists_the_demo_session():
    if subprocess.run([sys.executable, "-c", "import nox"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("needs nox")
    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    assert "- demo -> Run the whole flow on the example project" in listed.stdout, listed


@pytest.mark.cuda
def test_python_m_demo_runs_the_whole_flow_offline(tmp_path):
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file():
        pytest.skip("needs nvcc (the demo builds for sm_120a)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SGLFORGE_PROJECT", "SGLFORGE_CONFIG")}
    env.update(PYTHONPATH=str(ROOT), https_proxy="http://127.0.0.1:9",  # no network needed
               http_proxy="http://127.0.0.1:9", PIP_NO_INDEX="1")
    work = tmp_path / "demo"
    result = subprocess.run([sys.executable, "-m", "demo", "--workdir", str(work)], cwd=ROOT,
                            env=env, capture_output=True, text=True, check=False, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    for step in ("$ sglforge fetch", "$ sglforge patches check", "$ sglforge build",
                 "$ sglforge verify", "$ sglforge check", "$ sglforge bundle"):
        assert step in out, step
    assert "audit ok: cudaext/libcudaext.so: sm_120a" in out
    assert "verify: all 2 wheel(s) rebuilt bit-identical" in out
    wheels = sorted((work / "project" / "wheels").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["cudaext", "purepy"]
    for wheel in wheels:
        assert f"  wheel           {wheel}" in out  # where each artifact is
    with zipfile.ZipFile(next(w for w in wheels if w.name.startswith("purepy"))) as zf:
        assert "hello from the demo series" in zf.read("purepy/__init__.py").decode()
    bundle = next((work / "dist").glob("sglforge-stack-*.tar.gz"))
    assert f"  bundle          {bundle}" in out
