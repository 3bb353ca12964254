"""Qualification (issue 24) end to end with stand-ins: the `equivalence` check (PD through the
REAL sglang-router vs a colocated stand-in), `--record-reference` / `--reference`, the
acceptance gates, and the receipt every run writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from .conftest import SmokeProject, free_ports

ARITH = "".join(
    json.dumps({"question": f"What is {a} + {b}?", "answer": f"#### {a + b}"}) + "\n"
    for a, b in ((17, 25), (3, 4), (120, 7), (9, 91))
)


def _qual_profile(
    project: SmokeProject,
    *,
    checks: dict | None = None,
    decode_env: dict | None = None,
    gates: dict | None = None,
    colocated_env: dict | None = None,
    server_env: dict | None = None,
) -> None:
    port = next(
        p for p in iter(lambda: free_ports(1)[0], None) if p not in project.ports.values()
    )  # not one of the pair's
    model = project.root / "model"  # a local model directory: its identity is digested
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"architectures": ["StandinForCausalLM"]}')
    (model / "model.safetensors").write_bytes(b"stand-in weights")
    top = {
        "colocated": {"gpus": [4], "port": port, "env": colocated_env or {}},
        "limitations": ["stand-in servers: no model computes anything"],
        "model": str(model),
    }
    if gates is not None:
        top["gates"] = gates
    project.write_profile(
        decode_env=decode_env,
        top_extra=top,
        checks={
            "run": ["generate", "equivalence"],
            "equivalence-prompts": ["one two", "x"],
            "equivalence-long-prompt-tokens": [300],
            "equivalence-max-new-tokens": 12,
            **(checks or {}),
        },
    )
    if server_env:
        path = project.root / "profiles" / "standin.toml"
        import tomli_w
        import tomllib

        data = tomllib.loads(path.read_text())
        data["server"]["env"].update(server_env)
        path.write_text(tomli_w.dumps(data))


def _run(project: SmokeProject, venv: Path, *args: str):
    return project.smoke(
        "--profile", "standin", "--out", str(project.run_dir), "--venv", str(venv), *args
    )


def _check(report: dict, name: str) -> dict:
    """The named check of a report; when the run never got to it, say where it stopped."""
    found = [c for c in report["checks"] if c["name"] == name]
    assert found, f"no {name!r} check: run stopped at {report.get('failure')}"
    return found[0]


def _receipt(project: SmokeProject) -> dict:
    return json.loads((project.run_dir / "receipt.json").read_text())


def test_equivalence_passes_and_the_receipt_binds_the_wheel_set(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _qual_profile(smoke_project)
    key = tmp_path / "id"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "q", "-f", str(key)], check=True
    )
    result = _run(smoke_project, installed_venv, "--sign-key", str(key))
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in smoke_project.report()["checks"]}
    eq = checks["equivalence"]
    assert eq["passed"], eq
    assert eq["metrics"]["prompts"] == 3 and eq["metrics"]["identical"] == 3
    assert eq["metrics"]["rows"][2]["prompt_tokens"] > 200  # the long one, as counted
    # The colocated server really answered (its own log), not the router twice.
    assert "mode=null" in (smoke_project.run_dir / "logs" / "colocated.log").read_text()
    receipt = _receipt(smoke_project)
    lock = (smoke_project.root / "lockfiles" / "wheels.lock").read_bytes()
    assert receipt["wheel_set"]["digest"] == hashlib.sha256(lock).hexdigest()
    wheels = {w["name"]: w for w in receipt["wheel_set"]["wheels"]}
    assert set(wheels) == {"sglang", "sglang-kernel", "tinydep"}
    assert wheels["sglang"]["sha256"] == [
        hashlib.sha256(smoke_project.wheels[0].read_bytes()).hexdigest()
    ]
    assert receipt["result"] == "pass" and receipt["gates_passed"] is True
    profile = (smoke_project.root / "profiles" / "standin.toml").read_bytes()
    assert receipt["profile"]["sha256"] == hashlib.sha256(profile).hexdigest()
    assert receipt["host"]["numa"]["roles"]["colocated"]["gpus"] == [4]
    assert {c["name"] for c in receipt["checks"]} == {"generate", "equivalence"}
    assert "stand-in servers: no model computes anything" in receipt["limitations"]
    assert any("no --reference" in x for x in receipt["limitations"])
    # The receipt belongs to exactly these wheels, signed; a tampered copy fails.
    signers = tmp_path / "allowed_signers"
    signers.write_text("q " + key.with_suffix(".pub").read_text())
    receipt_path = smoke_project.run_dir / "receipt.json"
    verify = [
        "receipt",
        "verify",
        str(receipt_path),
        "--wheels",
        str(smoke_project.root / "wheelhouse"),
        "--allowed-signers",
        str(signers),
        "--identity",
        "q",
    ]
    out = subprocess.run(
        smoke_project.command(*verify, "--wheels", str(smoke_project.root / "wheels")),
        capture_output=True,
        text=True,
        env=smoke_project.env(),
        check=False,
    )
    assert out.returncode == 0 and "signature by 'q' verified" in out.stdout, out.stderr
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    for wheel in smoke_project.wheels:
        (tampered / wheel.name).write_bytes(wheel.read_bytes())
    (tampered / smoke_project.wheels[1].name).write_bytes(
        smoke_project.wheels[1].read_bytes()[:-1] + b"!"
    )
    out = subprocess.run(
        smoke_project.command(*verify, "--wheels", str(tampered)),
        capture_output=True,
        text=True,
        env=smoke_project.env(),
        check=False,
    )
    assert out.returncode == 2 and "not the qualified bytes" in out.stderr


def test_colocated_after_pair_starts_once_the_pair_is_stopped(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    # The colocated stand-in refuses to start while decode still listens: only the
    # after-pair order passes (with-pair, the same profile fails at launch).
    free = {"STANDIN_REQUIRE_FREE_PORT": str(smoke_project.ports["decode"])}
    _qual_profile(smoke_project, colocated_env=free)
    assert _run(smoke_project, installed_venv).returncode == 1
    assert "started too early" in (smoke_project.run_dir / "logs" / "colocated.log").read_text()
    path = smoke_project.root / "profiles" / "standin.toml"
    path.write_text(path.read_text().replace("[colocated]", '[colocated]\nstart = "after-pair"'))
    result = _run(smoke_project, installed_venv)
    assert result.returncode == 0, result.stdout + result.stderr
    report = smoke_project.report()
    assert [s["name"] for s in report["stages"]][-2:] == ["checks", "colocated"]
    eq = _check(report, "equivalence")
    assert eq["passed"] and eq["metrics"]["identical"] == 3
    assert report["teardown"]["before_colocated"]["survivors"] == {}
    assert set(report["teardown"]["before_colocated"]["signalled"]) == {
        "router",
        "prefill",
        "decode",
    }
    assert report["teardown"]["signalled"] == {"colocated": "SIGTERM"}
    from sglforge.smoke.processes import group_members

    assert all(group_members(p["pgid"]) == [] for p in report["processes"])


def test_a_diverging_decode_fails_equivalence_naming_prompt_position_and_tokens(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    _qual_profile(smoke_project, decode_env={"STANDIN_DIVERGE_AT": "5"})
    result = _run(smoke_project, installed_venv)
    assert result.returncode == 1, result.stdout + result.stderr
    eq = _check(smoke_project.report(), "equivalence")
    assert not eq["passed"]
    assert "'one two' diverges at position 5: PD 10" in eq["detail"]
    assert "colocated 10" in eq["detail"]
    row = eq["metrics"]["rows"][0]
    assert row["first_divergence"] == 5 and row["pd_token"] != row["colocated_token"]
    receipt = _receipt(smoke_project)
    assert receipt["result"] == "fail" and receipt["gates_passed"] is False


def test_record_then_compare_reference_passes_and_a_perturbed_one_fails(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _qual_profile(smoke_project, checks={"run": ["generate"], "reference-top-k": 3})
    ref = tmp_path / "ref.json"
    result = _run(smoke_project, installed_venv, "--record-reference", str(ref))
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(ref.read_text())
    assert data["kind"] == "sglforge-reference" and data["top_k"] == 3
    assert len(data["prompts"]) == 3 and len(data["prompts"][0]["ids"]) == 12
    assert len(data["prompts"][0]["top"][0]) == 3  # top-k through the real router
    assert data["stack"]["wheel_set_digest"] == _receipt(smoke_project)["wheel_set"]["digest"]

    result = _run(smoke_project, installed_venv, "--reference", str(ref))
    assert result.returncode == 0, result.stdout + result.stderr
    check = _check(smoke_project.report(), "reference")
    assert check["passed"] and check["value"]["top1"] == 1.0
    assert check["value"]["topk_overlap"] == 1.0 and check["value"]["max_logprob_diff"] == 0.0

    perturbed = tmp_path / "perturbed.json"
    data["prompts"][1]["ids"][4] += 1
    perturbed.write_text(json.dumps(data))
    result = _run(smoke_project, installed_venv, "--reference", str(perturbed))
    assert result.returncode == 1
    check = _check(smoke_project.report(), "reference")
    assert not check["passed"]
    assert "top-1 match" in check["detail"] and "'x' at position 4" in check["detail"]
    # The same judgement offline, against what that run observed.
    observed = smoke_project.run_dir / "reference-observed.json"
    out = subprocess.run(
        smoke_project.command(
            "reference", "compare", "--reference", str(ref), "--observed", str(observed)
        ),
        capture_output=True,
        text=True,
        env=smoke_project.env(),
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run(
        smoke_project.command(
            "reference", "compare", "--reference", str(perturbed), "--observed", str(observed)
        ),
        capture_output=True,
        text=True,
        env=smoke_project.env(),
        check=False,
    )
    assert out.returncode == 1 and "top-1 match" in out.stdout


def test_reference_shifted_logprobs_and_other_model_fail(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _qual_profile(smoke_project, checks={"run": ["generate"]})
    ref = tmp_path / "ref.json"
    assert _run(smoke_project, installed_venv, "--record-reference", str(ref)).returncode == 0
    _qual_profile(
        smoke_project, checks={"run": ["generate"]}, server_env={"STANDIN_LOGPROB_SHIFT": "-0.5"}
    )
    result = _run(smoke_project, installed_venv, "--reference", str(ref))
    assert result.returncode == 1
    check = _check(smoke_project.report(), "reference")
    assert "max |logprob diff| 0.5 > 0.02" in check["detail"]
    data = json.loads(ref.read_text())
    data["model"]["digest"] = "0" * 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    _qual_profile(smoke_project, checks={"run": ["generate"]})
    assert _run(smoke_project, installed_venv, "--reference", str(other)).returncode == 1
    check = _check(smoke_project.report(), "reference")
    assert "only speaks for the same weights" in check["detail"]


def test_bad_reference_file_fails_before_anything_starts(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _qual_profile(smoke_project)
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "kind": "sglforge-reference",
                "schema": 1,
                "model": {},
                "stack": {},
                "top_k": 2,
                "max_new_tokens": 4,
                "prompts": [{"prompt": "a", "ids": [1, 2], "logprobs": [0.1]}],
            }
        )
    )
    result = _run(smoke_project, installed_venv, "--reference", str(bad))
    assert result.returncode == 1
    assert "prompts[0].logprobs: expected 2 finite numbers" in result.stderr
    assert not (smoke_project.run_dir / "processes.json").exists()  # nothing was launched
    assert "Traceback" not in result.stderr


def test_gates_are_reported_with_thresholds_and_enforced_only_where_asked(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    questions = smoke_project.root / "gates" / "q.jsonl"
    questions.parent.mkdir(parents=True)
    questions.write_text(ARITH)
    digest = hashlib.sha256(ARITH.encode()).hexdigest()
    gates = {
        "accuracy": {
            "questions": "gates/q.jsonl",
            "sha256": digest,
            "min-exact-match": 0.75,
            "max-new-tokens": 8,
        },
        "long-output": {"tokens": 300},
        "needle": {"trials": 2, "min-recall": {"256": 1.0, "2048": 0.5}, "enforce": False},
    }
    _qual_profile(
        smoke_project,
        gates=gates,
        checks={"run": ["generate"]},
        server_env={"STANDIN_ARITHMETIC": "1"},
        decode_env={"STANDIN_FORGET_BEYOND": "1000"},
    )
    # Forgetting lives in prefill's view; put it there too.
    path = smoke_project.root / "profiles" / "standin.toml"
    path.write_text(
        path.read_text().replace("[prefill.env]", '[prefill.env]\nSTANDIN_FORGET_BEYOND = "1000"')
    )
    result = _run(smoke_project, installed_venv)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in _receipt(smoke_project)["checks"]}
    assert checks["accuracy"]["passed"] and checks["accuracy"]["value"] == 1.0
    assert checks["accuracy"]["threshold"] == {"min_exact_match": 0.75}
    assert checks["long-output"]["passed"] and checks["long-output"]["value"] == 300
    needle = checks["needle-recall"]
    assert needle["value"] == {"256": 1.0, "2048": 0.0} and not needle["passed"]
    assert needle["enforced"] is False  # reported, not failing the smoke
    assert any(
        "gate needle-recall failed and is not enforced" in x
        for x in _receipt(smoke_project)["limitations"]
    )

    # Without the stand-in's arithmetic the enforced accuracy gate fails the smoke.
    _qual_profile(smoke_project, gates=gates, checks={"run": ["generate"]})
    result = _run(smoke_project, installed_venv)
    assert result.returncode == 1
    receipt = _receipt(smoke_project)
    accuracy = _check(receipt, "accuracy")
    assert not accuracy["passed"] and accuracy["value"] == 0.0 and accuracy["enforced"]
    assert receipt["gates_passed"] is False

    # A question set that is not the one the profile pins is refused before launch.
    questions.write_text(ARITH + ARITH)
    result = _run(smoke_project, installed_venv)
    assert result.returncode == 1
    assert "the question set changed" in result.stderr
    assert not (smoke_project.run_dir / "processes.json").exists()
