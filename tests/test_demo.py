"""Issue 23 item 7: `nox -s demo` runs the whole flow on the example project in demo/, offline:
generated upstreams at pinned commits -> fetch -> strict patch check -> build (sm_120a CUDA
extension + pure-Python wheel, arch audit, stack check) -> verify -> check -> bundle.

The demo runs once per module (`demo_run`); after its good build, verify's bad path: a wheel
in wheels/ that its rebuild does not reproduce is named, with the member that differs.
"""

from __future__ import annotations

import hashlib
import json
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
    if (
        subprocess.run(
            [sys.executable, "-c", "import nox"], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("needs nox")
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert "- demo -> Run the whole flow on the example project" in listed.stdout, listed


OFFLINE = {
    "https_proxy": "http://127.0.0.1:9",  # no network needed
    "http_proxy": "http://127.0.0.1:9",
    "PIP_NO_INDEX": "1",
}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`python -m demo` once (about a minute on two cores): its work directory and result."""
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file():
        pytest.skip("needs nvcc (the demo builds for sm_120a)")
    env = {k: v for k, v in os.environ.items() if k not in ("SGLFORGE_PROJECT", "SGLFORGE_CONFIG")}
    env.update(PYTHONPATH=str(ROOT), **OFFLINE)
    work = tmp_path_factory.mktemp("demo-run") / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "demo", "--workdir", str(work)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    return work, result


@pytest.mark.cuda
def test_python_m_demo_runs_the_whole_flow_offline(demo_run):
    work, result = demo_run
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    for step in (
        "$ sglforge fetch",
        "$ sglforge patches check",
        "$ sglforge build",
        "$ sglforge verify",
        "$ sglforge check",
        "$ sglforge bundle",
    ):
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


def _tamper(wheel: Path, member: str) -> str:
    """Rewrite one member of `wheel` in place (the rest, RECORD included, as it was); its new
    sha256."""
    tampered = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        assert member in src.namelist(), src.namelist()
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data + b"TAMPERED = True\n" if info.filename == member else data)
    tampered.replace(wheel)
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.mark.cuda
def test_verify_after_the_demo_names_a_wheel_its_rebuild_does_not_reproduce(
    demo_run, tmp_path, capsys, monkeypatch
):
    """The demo's own verify step (`demo.__main__.sglforge`), on a copy of the demo project
    whose purepy wheel was changed after the build and its manifest digest updated to match:
    the rebuild from source is the original wheel, so verify must fail and say which wheel
    and which member differ, without a traceback."""
    from demo.__main__ import DemoError, sglforge

    work, result = demo_run
    assert result.returncode == 0, "the demo itself failed (the test above says why)"
    project = tmp_path / "project"  # a copy: the demo's own wheels/ stay as built
    shutil.copytree(work / "project", project)
    wheel = next((project / "wheels").glob("purepy-*.whl"))
    built = hashlib.sha256(wheel.read_bytes()).hexdigest()
    tampered = _tamper(wheel, "purepy/__init__.py")
    manifest_path = project / "wheels" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    (entry,) = [e for e in manifest["wheels"] if e["file"] == wheel.name]
    assert entry["sha256"] == built
    entry["sha256"] = tampered
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    paths = {
        "project": project,
        "config": work / "config.toml",
        "cache": work / "cache",
        "build_root": work / "build-root",
    }
    with pytest.raises(DemoError) as error:
        sglforge(paths, "verify", "purepy", "--out", str(tmp_path / "verify"))
    out = capsys.readouterr().out
    assert str(error.value) == (
        f"`sglforge verify purepy --out {tmp_path / 'verify'}` exited with status 1"
    ), out[-4000:]
    assert (
        f"  DIFFERS    {wheel.name}: expected sha256:{tampered[:16]}, rebuilt sha256:{built[:16]}\n"
        "      member: purepy/__init__.py\n"
    ) in out, out[-4000:]
    assert [line for line in out.splitlines() if "member:" in line] == [
        "      member: purepy/__init__.py"
    ], out[-4000:]
    assert "verify: 1 of 1 wheel(s) are not reproducible" in out, out[-4000:]
    assert "identical" not in out and "Traceback" not in out, out[-4000:]
    rebuilt = tmp_path / "verify" / wheel.name  # the rebuild is the wheel the demo built
    assert hashlib.sha256(rebuilt.read_bytes()).hexdigest() == built


@pytest.mark.cuda
def test_the_laptop_profile_doctor_names_runs_on_the_demo_wheels(demo_run, tmp_path):
    """Issue 33 item 14: the profile doctor's GPU hint names ships with the demo project and
    passes through the real `nox -s smoke` on a host without GPUs (stand-in servers and
    router, the demo's wheels installed into a fresh venv from its lock)."""
    from sglforge.smoke.doctor import LAPTOP

    work, result = demo_run
    assert result.returncode == 0, "the demo itself failed (the test above says why)"
    assert "demo/project/profiles/laptop.toml" in LAPTOP
    assert (ROOT / "demo" / "project" / "profiles" / "laptop.toml").is_file()
    project = work / "project"
    assert f"nox -s smoke -- --project {project} --profile laptop" in result.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("SGLFORGE_PROJECT", "SGLFORGE_CONFIG")}
    smoke = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "smoke", "--"]
        + ["--project", str(project), "--profile", "laptop", "--out", str(tmp_path / "run")],
        cwd=ROOT,
        env={**env, **OFFLINE},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    out = smoke.stdout + smoke.stderr
    assert smoke.returncode == 0, out[-4000:]
    assert "sglforge smoke: PASS — profile laptop" in out, out[-4000:]
    receipt = json.loads((tmp_path / "run" / "receipt.json").read_text())
    assert any("stand-in servers" in line for line in receipt["limitations"]), receipt
    report = json.loads((tmp_path / "run" / "smoke-report.json").read_text())
    assert not report["teardown"]["survivors"], report["teardown"]
