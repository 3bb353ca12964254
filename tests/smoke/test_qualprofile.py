"""Profile keys of the qualification (issue 24): validated like the other keys, each bad value
an error naming the table, key and line; no traceback, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.smoke.commands import build_launch_plan
from sglforge.smoke.profile import load_profile

from .conftest import SmokeProject


def _load(project: SmokeProject, **kwargs):
    path = project.write_profile(**kwargs)
    return load_profile(path, project.root)


def _error(project: SmokeProject, **kwargs) -> str:
    with pytest.raises(SglforgeError) as info:
        _load(project, **kwargs)
    return str(info.value)


def test_colocated_server_is_planned_without_disaggregation(smoke_project: SmokeProject) -> None:
    profile = _load(
        smoke_project,
        checks={"run": ["equivalence"], "equivalence-long-prompt-tokens": [64, 128]},
        top_extra={
            "colocated": {
                "gpus": [4],
                "port": 31999,
                "args": ["--mem-fraction-static", "0.3"],
                "env": {"X": "{run_dir}"},
            }
        },
    )
    plan = build_launch_plan(profile, Path("/py"), Path("/run"), smoke_project.root)
    assert plan.colocated is not None and plan.colocated in plan.servers
    argv = plan.colocated.argv
    assert not any(a.startswith("--disaggregation") for a in argv)
    assert argv[argv.index("--port") + 1] == "31999" and argv[-2:] == (
        "--mem-fraction-static",
        "0.3",
    )
    assert plan.colocated.env["CUDA_VISIBLE_DEVICES"] == "4"
    assert plan.colocated.env["X"] == "/run"
    prompts = profile.equivalence.all_prompts()
    assert len(prompts) == 7 + 2 and len(prompts[-1].split()) > len(prompts[-2].split()) > 40
    assert profile.ports()[31999] == "colocated HTTP port"
    after = _load(
        smoke_project,
        checks={"run": ["equivalence"]},
        top_extra={"colocated": {"gpus": [4], "port": 31999, "start": "after-pair"}},
    )
    plan = build_launch_plan(after, Path("/py"), Path("/run"), smoke_project.root)
    assert plan.colocated_after_pair and plan.colocated not in plan.servers
    assert plan.all[-1] is plan.colocated  # after the router


@pytest.mark.parametrize(
    ("extra", "checks", "message"),
    [
        (
            {},
            {"run": ["equivalence"]},
            "run lists 'equivalence' but the profile has no [colocated]",
        ),
        (
            {"colocated": {"gpus": [0], "port": 31999}},
            {},
            "[colocated] gpus [0] are also the PD pair's",
        ),
        (
            {
                "colocated": {
                    "gpus": [4],
                    "port": 31999,
                    "args": ["--disaggregation-mode", "prefill"],
                }
            },
            {},
            "[colocated], key 'args'",
        ),
        (
            {"colocated": {"gpus": [4], "port": 31999, "env": {"A=B": "1"}}},
            {},
            "[colocated] env, key 'A=B': not an environment variable name",
        ),
        (
            {"colocated": {"gpus": [4], "port": 31999, "start": "later"}},
            {},
            "'later' is not one of with-pair, after-pair",
        ),
        ({"colocated": {"gpus": [4], "port": 31999, "colour": 1}}, {}, "[colocated], key 'colour'"),
        (
            {"colocated": {"gpus": [4], "port": 31999, "env": {"A": "{nope}"}}},
            {},
            "[colocated] env A: unknown placeholder {nope}",
        ),
        ({}, {"reference-min-top1": 1.5}, "expected a share between 0 and 1, got 1.5"),
        ({}, {"equivalence-prompts": []}, "must list at least one prompt"),
        ({}, {"equivalence-long-prompt-tokens": [3]}, "each value must be between 16 and"),
        ({"gates": {"acuracy": {}}}, {}, "[gates], key 'acuracy'"),
        (
            {"gates": {"accuracy": {"questions": "q.jsonl", "sha256": "abc"}}},
            {},
            "[gates.accuracy], key 'sha256'",
        ),
        (
            {
                "gates": {
                    "accuracy": {"questions": "q.jsonl", "sha256": "a" * 64, "template": "no slot"}
                }
            },
            {},
            "must contain {question}",
        ),
        ({"gates": {"needle": {"min-recall": {"2k": 1.0}}}}, {}, "key '2k' is not a prompt length"),
        (
            {"gates": {"needle": {"min-recall": {"2048": 2}}}},
            {},
            "2048 = 2: a share between 0 and 1",
        ),
        ({"gates": {"long-output": {}}}, {}, "[gates.long-output]: missing required key 'tokens'"),
        ({"limitations": "tiny"}, {}, "expected a list of strings, got 'tiny'"),
    ],
)
def test_bad_qualification_keys_are_errors_naming_them(
    smoke_project: SmokeProject, extra: dict, checks: dict, message: str
) -> None:
    assert message in _error(smoke_project, top_extra=extra, checks=checks)


def test_colocated_port_must_differ(smoke_project: SmokeProject) -> None:
    port = smoke_project.ports["router"]
    assert f"[colocated] port = {port} is also [router] port" in _error(
        smoke_project, top_extra={"colocated": {"gpus": [4], "port": port}}
    )


def test_committed_h200_profile_qualifies(smoke_project: SmokeProject) -> None:
    repo = Path(__file__).resolve().parents[2]
    profile = load_profile(repo / "profiles" / "h200-pd-1gpu.toml", repo)
    assert "equivalence" in profile.checks.run and profile.colocated.gpus == (0,)
    assert profile.gates.long_output.enforce and not profile.gates.accuracy.enforce
    from sglforge.qualification.gates import load_questions

    assert len(load_questions(profile.gates.accuracy)) == 12  # the pinned sha256 holds


def test_gate_and_oracle_arithmetic() -> None:
    from sglforge.qualification.gates import normalize_number
    from sglforge.qualification.greedy import Generation
    from sglforge.qualification.qualprofile import ReferenceSpec
    from sglforge.qualification.reference import Reference, compare

    assert normalize_number("so 3 * 4 = 12\n#### 1,234.0") == "1234"
    assert normalize_number("The answer is 42.") == "42" and normalize_number("none") is None
    top = ((1, -0.1), (2, -1.0), (3, -2.0))
    ref = Reference(
        path=None,
        model={"digest": "d"},
        stack={},
        top_k=3,
        max_new_tokens=4,
        generations=(Generation("p", ids=(1, 1, 1, 1), logprobs=(-0.1,) * 4, top=(top,) * 4),),
    )
    run = (
        Generation(
            "p",
            ids=(1, 1, 9, 9),
            logprobs=(-0.1, -0.13, -5, -5),
            top=(top, top, ((9, -0.1), (1, -0.2), (4, -3.0)), top),
        ),
    )
    spec = ReferenceSpec(top_k=3, min_top1=0.5, min_topk_overlap=0.7, max_logprob_diff=0.05)
    result = compare(ref, run, spec, {"digest": "d"})
    # Positions 0-1 match, 2 differs (3 after it are not comparable): top-1 2/4; overlap over
    # positions 0, 1 and the first differing one (1 of 3 shared there): (1 + 1 + 1/3) / 3.
    assert result.value["top1"] == 0.5
    assert abs(result.value["topk_overlap"] - (7 / 9)) < 1e-9
    assert abs(result.value["max_logprob_diff"] - 0.03) < 1e-9 and result.passed
    strict = ReferenceSpec(top_k=3, min_top1=1.0, min_topk_overlap=0.95, max_logprob_diff=0.01)
    failed = compare(ref, run, strict, {"digest": "d"})
    assert not failed.passed
    assert "'p' at position 2, reference 1, run 9" in failed.detail
    assert "top-3 overlap 0.7778 < 0.95" in failed.detail and "0.03 > 0.01" in failed.detail
