"""The `equivalence` check (issue 24): the PD pair must compute what one colocated server of
the same model and stack computes. The same greedy prompts (short ones, and long ones whose KV
spans many pages, so a KV transfer that arrives wrong shows) go through the router and to the
colocated server; token ids must be identical. Logprob differences are reported per prompt
(measured on an H200: <= 1e-15 on nine prompts of ten, 0.008 on the first request), and
judged only where the profile sets `equivalence-max-logprob-diff`.

A divergence names the prompt, the first differing position and both tokens.
"""

from __future__ import annotations

from typing import Any

from sglforge.qualification.greedy import Generation, first_difference, generate, short
from sglforge.qualification.qualprofile import EquivalenceSpec
from sglforge.qualification.results import CheckResult


def compare(
    pd: list[Generation], colocated: list[Generation], spec: EquivalenceSpec
) -> CheckResult:
    rows: list[dict[str, Any]] = []
    divergences: list[str] = []
    errors: list[str] = []
    for a, b in zip(pd, colocated, strict=True):
        row: dict[str, Any] = {
            "prompt": short(a.prompt),
            "prompt_chars": len(a.prompt),
            "prompt_tokens": a.prompt_tokens,
            "tokens_pd": len(a.ids),
            "tokens_colocated": len(b.ids),
        }
        if not a.ok or not b.ok:
            row["error"] = a.error or b.error
            errors.append(
                f"{short(a.prompt)!r}: {'PD' if not a.ok else 'colocated'}: {a.error or b.error}"
            )
            rows.append(row)
            continue
        first = first_difference(a, b)
        same = min(len(a.ids), len(b.ids)) if first is None else first
        diffs = [abs(x - y) for x, y in zip(a.logprobs[:same], b.logprobs[:same])]
        row.update(
            identical_ids=first is None,
            first_divergence=first,
            max_abs_logprob_diff=max(diffs, default=0.0),
        )
        if first is not None:
            row.update(pd_token=a.token(first), colocated_token=b.token(first))
            divergences.append(
                f"{short(a.prompt)!r} diverges at position {first}: PD "
                f"{a.token(first)}, colocated {b.token(first)}"
            )
        rows.append(row)
    compared = [r for r in rows if "error" not in r]
    max_diff = max((r["max_abs_logprob_diff"] for r in compared), default=0.0)
    metrics = {
        "prompts": len(rows),
        "identical": sum(r.get("identical_ids", False) for r in rows),
        "max_abs_logprob_diff": max_diff,
        "max_abs_logprob_diff_allowed": spec.max_logprob_diff,
        "max_new_tokens": spec.max_new_tokens,
        "rows": rows,
    }
    threshold = {
        "identical_token_ids": "all prompts",
        "max_abs_logprob_diff": spec.max_logprob_diff,
    }
    if errors:
        return CheckResult(
            "equivalence",
            False,
            f"{len(errors)} request(s) failed: {errors[0]}",
            metrics=metrics,
            threshold=threshold,
            value=metrics["identical"],
        )
    if divergences:
        return CheckResult(
            "equivalence",
            False,
            f"{len(divergences)} of {len(rows)} prompts "
            f"differ between PD and colocated; {divergences[0]}",
            metrics=metrics,
            threshold=threshold,
            value=metrics["identical"],
        )
    if spec.max_logprob_diff is not None and max_diff > spec.max_logprob_diff:
        worst = max(compared, key=lambda r: r["max_abs_logprob_diff"])
        return CheckResult(
            "equivalence",
            False,
            f"token ids identical, but the logprob "
            f"difference {max_diff:.3g} on {worst['prompt']!r} exceeds "
            f"{spec.max_logprob_diff:g}",
            metrics=metrics,
            threshold=threshold,
            value=metrics["identical"],
        )
    return CheckResult(
        "equivalence",
        True,
        f"{len(rows)} prompts, identical token ids "
        f"through PD and colocated; max |logprob diff| {max_diff:.3g}",
        metrics=metrics,
        threshold=threshold,
        value=metrics["identical"],
    )


def collect(url: str, spec: EquivalenceSpec, timeout: float) -> list[Generation]:
    return [generate(url, p, spec.max_new_tokens, timeout) for p in spec.all_prompts()]


def check_equivalence(
    router_url: str, colocated_url: str | None, spec: EquivalenceSpec | None, timeout: float
) -> CheckResult:
    """Both sides now (the colocated server runs beside the pair)."""
    if spec is None or colocated_url is None:
        return CheckResult("equivalence", False, "no colocated server in this run")
    return compare(collect(router_url, spec, timeout), collect(colocated_url, spec, timeout), spec)
