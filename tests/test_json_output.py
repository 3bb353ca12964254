"""`--json` for `plan`, `doctor`, `check` and `build` (issue 33 item 12): through the real
`python -m sglforge`, stdout is exactly one document of the schema docs/reference.md
documents ("Machine-readable output"), and what a person reads goes to stderr."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.fixtures import upstreams
from tests.fixtures.gitrepos import DEP3
from tests.fixtures.project import SRC, make_project
from tests.helpers import sha256
from tests.test_check import Stack

REPO = Path(__file__).resolve().parents[1]


def _document(result: subprocess.CompletedProcess, schema: str) -> dict:
    """The whole of stdout is one JSON object of `schema`, version 1."""
    document = json.loads(result.stdout)
    assert document["schema"] == f"sglforge-{schema}" and document["version"] == 1, document
    assert "Traceback" not in result.stderr
    return document


def test_plan_json_has_the_pins_series_and_steps_plan_prints(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    patches = project.root / "patches" / "purepy"
    upstreams.make_patch(
        project.mirror / "org" / "purepy",
        "0001-greeting.patch",
        {"src/purepy/__init__.py": 'GREETING = "patched"\n'},
        "Change the greeting\n\n" + DEP3.format(description="A test."),
        patches,
    )
    (patches / "series").write_text("0001-greeting.patch\n")
    result = project.run("plan", "--json")
    assert result.returncode == 0, result.stderr
    plan = _document(result, "plan")
    [pin] = plan["pins"]
    assert pin["name"] == "purepy" and pin["commit"] == project.commits["purepy"]
    assert pin["sha256"] is None and pin["substituted_by"] is None
    [entry] = plan["series"]["purepy"]["entries"]
    assert entry == {
        "kind": "patch",
        "name": "0001-greeting.patch",
        "sha256": sha256(patches / "0001-greeting.patch"),
    }
    assert plan["build_root"] == str(project.build_root) and plan["target"] is None
    text = project.run("plan").stdout
    assert f"patchset {plan['series']['purepy']['patchset8']}" in text
    printed = [
        line.split(". ", 1)[1] for line in text.splitlines() if line[:4].strip()[:1].isdigit()
    ]
    assert plan["steps"] == printed and len(printed) == 5
    # --matrix has its own JSON: asking for both is refused, clearly
    both = project.run("plan", "--matrix", "--json")
    assert both.returncode == 2 and "--matrix prints JSON already" in both.stderr
    assert both.stdout == "" and "Traceback" not in both.stderr


def _check(stack: Stack, *args: str) -> subprocess.CompletedProcess:
    stack.write()
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(stack.root), "check", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_check_json_reports_parts_and_findings(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "project")
    ok = _check(stack, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    document = _document(ok, "check")
    assert document["ok"] is True
    assert document["parts"] == {
        p: {"errors": 0} for p in ("resolution", "api", "labels", "abi", "sbom")
    }
    assert document["target"] == {"python": "3.12", "torch": "2.13.0", "machine": "x86_64"}
    assert sorted(document["wheels"]) == sorted(p.name for p in stack.root.glob("wheels/*.whl"))
    assert "check: ok" in ok.stderr  # the person's report, on stderr

    bad = _check(stack, "--json", "--python", "3.9")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    document = _document(bad, "check")
    assert document["ok"] is False and document["parts"]["abi"]["errors"] >= 1
    errors = [f for f in document["findings"] if f["level"] == "error"]
    assert "abi" in {f["part"] for f in errors}
    for part, counted in document["parts"].items():
        assert counted["errors"] == sum(f["part"] == part for f in errors), part
    assert all(f["message"] for f in errors) and "check: FAILED" in bad.stderr


def test_doctor_json_lists_every_finding(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    shutil.copytree(REPO / "profiles", project.root / "profiles")
    result = project.run("doctor", "--json")
    assert result.returncode in (0, 1), result.stderr  # 1 on this GPU-less host
    document = _document(result, "doctor")
    findings = document["findings"]
    assert document["profile"] == "dsv4-flash-pd" and findings
    errors = [f for f in findings if f["level"] == "error"]
    assert document["errors"] == len(errors) and document["ok"] is (result.returncode == 0)
    assert document["warnings"] == sum(f["level"] == "warning" for f in findings)
    assert {"check", "level", "message", "fix"} == set(findings[0])
    # no wheels built: the doctor says it skipped the wheel checks, as a finding
    assert any(f["check"] == "wheels" and f["level"] == "warning" for f in findings)
    assert f"doctor: {len(errors)} error(s)" in result.stderr


def test_build_json_summary_then_a_cache_hit(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    first = project.run("build", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    document = _document(first, "build")
    [wheel] = document["wheels"]
    built = project.root / "wheels" / wheel["file"]
    assert wheel["recipe"] == "purepy" and wheel["source"] == "built"
    assert wheel["sha256"] == sha256(built) and wheel["version"] == "1.2.3+cpu.e3b0c442"
    assert len(wheel["content_key"]) == 64 and wheel["uploaded"] is False
    assert document["wheel_cache"] == {"local": 0, "remote": 0, "built": 1, "uploaded": 0}
    assert document["outputs"] == {
        "manifest": str(project.root / "wheels" / "manifest.json"),
        "lock": str(project.root / "lockfiles" / "wheels.lock"),
    }
    assert document["ok"] is True and document["check"]["reused"] is False
    assert document["check"]["ok"] is True and "stack check" in document["check"]["report"]
    assert [s["name"] for s in document["steps"]] and all(
        s["seconds"] >= 0 for s in document["steps"]
    )
    assert "summary:" in first.stderr and "MAX_JOBS=" in first.stderr  # progress on stderr

    again = project.run("build", "--json", "--no-check")
    assert again.returncode == 0, again.stderr[-3000:]
    document = _document(again, "build")
    assert [w["source"] for w in document["wheels"]] == ["local"]
    assert document["wheels"][0]["sha256"] == wheel["sha256"] and document["check"] is None


def test_bad_input_with_json_leaves_stdout_empty(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.run("build", "--json", "no-such-recipe")
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert "no-such-recipe" in result.stderr and "Traceback" not in result.stderr
    env = dict(os.environ, PYTHONPATH=str(SRC))
    missing = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(tmp_path / "nope"), "plan", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert missing.returncode == 2 and missing.stdout == "", missing.stdout
    assert "Traceback" not in missing.stderr
