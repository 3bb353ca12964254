"""Checks run through the router, modelled on SGLang's own PD tests (upstreams.md §8):
a temperature-0 `/generate` returns text; output logprob count equals completion tokens;
streaming gives TTFT and tokens/s; N concurrent requests all succeed; and a needle-recall
probe at several context lengths, because DeepSeek-V4 on sm_120 has answered short prompts
fine while losing recall past ~4k tokens (target-deployment.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sglforge.base import http
from sglforge.qualification.equivalence import check_equivalence
from sglforge.qualification.needle import needle_prompt, passphrase_for
from sglforge.qualification.qualprofile import EquivalenceSpec
from sglforge.qualification.results import CheckResult
from sglforge.smoke.profile import ChecksSpec


@dataclass(frozen=True)
class CheckContext:
    router_url: str
    spec: ChecksSpec
    timeout: float  # per request
    # Qualification (issue 24): the colocated server `equivalence` compares the pair with.
    colocated_url: str | None = None
    equivalence: EquivalenceSpec | None = None


def _generate_payload(text: str, max_new_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "text": text,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens},
        **extra,
    }


def _text(response: http.Response) -> str:
    body = response.body
    return (
        body.get("text", "") if isinstance(body, dict) and isinstance(body.get("text"), str) else ""
    )


def _meta(response: http.Response) -> dict[str, Any]:
    body = response.body
    meta = body.get("meta_info") if isinstance(body, dict) else None
    return meta if isinstance(meta, dict) else {}


def check_generate(ctx: CheckContext) -> CheckResult:
    answer = http.post(
        f"{ctx.router_url}/generate",
        _generate_payload(ctx.spec.prompt, ctx.spec.max_new_tokens),
        ctx.timeout,
    )
    if not answer.ok:
        return CheckResult("generate", False, f"/generate failed: {answer.error}")
    text = _text(answer)
    meta = _meta(answer)
    metrics = {
        "latency_s": round(answer.seconds, 4),
        "text": text[:200],
        "completion_tokens": meta.get("completion_tokens"),
    }
    if not text.strip():
        return CheckResult(
            "generate", False, "temperature-0 /generate returned empty text", metrics=metrics
        )
    return CheckResult("generate", True, f"{ctx.spec.prompt!r} -> {text[:80]!r}", metrics=metrics)


def check_logprobs(ctx: CheckContext) -> CheckResult:
    answer = http.post(
        f"{ctx.router_url}/generate",
        _generate_payload(ctx.spec.prompt, ctx.spec.max_new_tokens, return_logprob=True),
        ctx.timeout,
    )
    if not answer.ok:
        return CheckResult(
            "logprobs", False, f"/generate with return_logprob failed: {answer.error}"
        )
    meta = _meta(answer)
    logprobs = meta.get("output_token_logprobs")
    completion = meta.get("completion_tokens")
    metrics = {
        "completion_tokens": completion,
        "output_token_logprobs": len(logprobs) if isinstance(logprobs, list) else None,
    }
    if not isinstance(logprobs, list) or not isinstance(completion, int) or completion < 1:
        return CheckResult(
            "logprobs",
            False,
            f"meta_info lacks output_token_logprobs or completion_tokens (got keys {sorted(meta)})",
            metrics=metrics,
        )
    if len(logprobs) != completion:
        return CheckResult(
            "logprobs",
            False,
            f"{len(logprobs)} output logprobs for {completion} completion tokens",
            metrics=metrics,
        )
    values = [
        entry[0] if isinstance(entry, (list, tuple)) and entry else entry for entry in logprobs
    ]
    bad = [v for v in values if not isinstance(v, (int, float)) or math.isnan(v) or v > 1e-3]
    if bad:
        return CheckResult(
            "logprobs", False, f"logprobs must be numbers <= 0, got {bad[:5]}", metrics=metrics
        )
    return CheckResult(
        "logprobs",
        True,
        f"{completion} completion tokens, {len(logprobs)} logprobs",
        metrics=metrics,
    )


def check_stream(ctx: CheckContext) -> CheckResult:
    payload = _generate_payload(ctx.spec.prompt, ctx.spec.max_new_tokens, stream=True)
    events: list[http.StreamEvent] = []
    try:
        for event in http.stream(f"{ctx.router_url}/generate", payload, ctx.timeout):
            events.append(event)
    except (OSError, ValueError) as exc:
        return CheckResult("stream", False, f"streaming /generate failed: {exc}")
    if not events:
        return CheckResult("stream", False, "streaming /generate sent no events")
    last = events[-1].data
    text = last.get("text", "") if isinstance(last, dict) else ""
    tokens = (last.get("meta_info") or {}).get("completion_tokens") or len(events)
    ttft = events[0].seconds
    decode_span = events[-1].seconds - ttft
    metrics = {
        "ttft_s": round(ttft, 4),
        "completion_tokens": tokens,
        "total_s": round(events[-1].seconds, 4),
        "decode_tokens_per_s": round((tokens - 1) / decode_span, 2)
        if tokens > 1 and decode_span > 0
        else None,
    }
    if not text.strip():
        return CheckResult("stream", False, "stream ended with empty text", metrics=metrics)
    return CheckResult(
        "stream", True, f"TTFT {ttft * 1000:.0f} ms, {tokens} tokens", metrics=metrics
    )


def check_concurrent(ctx: CheckContext) -> CheckResult:
    n = ctx.spec.concurrency

    def one(i: int) -> http.Response:
        prompt = f"Request {i}: list three facts about the number {i + 7}."
        return http.post(
            f"{ctx.router_url}/generate",
            _generate_payload(prompt, ctx.spec.max_new_tokens),
            ctx.timeout,
        )

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(one, range(n)))
    wall = time.monotonic() - start
    failed = [
        (i, a.error or "empty text")
        for i, a in enumerate(answers)
        if not a.ok or not _text(a).strip()
    ]
    tokens = sum(_meta(a).get("completion_tokens") or 0 for a in answers if a.ok)
    metrics = {
        "requests": n,
        "failed": len(failed),
        "wall_s": round(wall, 4),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "max_latency_s": round(max(a.seconds for a in answers), 4),
    }
    if failed:
        sample = "; ".join(f"#{i}: {why[:120]}" for i, why in failed[:3])
        return CheckResult(
            "concurrent",
            False,
            f"{len(failed)} of {n} concurrent requests failed ({sample})",
            metrics=metrics,
        )
    return CheckResult(
        "concurrent",
        True,
        f"{n} concurrent requests succeeded, {metrics['tokens_per_s']} tokens/s aggregate",
        metrics=metrics,
    )


def check_needle(ctx: CheckContext) -> CheckResult:
    per_length: list[dict[str, Any]] = []
    for length in ctx.spec.needle_lengths:
        secret = passphrase_for(length)
        prompt = needle_prompt(length, ctx.spec.words_per_token, secret)
        answer = http.post(
            f"{ctx.router_url}/generate",
            _generate_payload(prompt, max(32, ctx.spec.max_new_tokens)),
            ctx.timeout,
        )
        text = _text(answer)
        per_length.append(
            {
                "target_tokens": length,
                "prompt_tokens": _meta(answer).get("prompt_tokens"),
                "ok": answer.ok,
                "recalled": answer.ok and secret in text,
                "latency_s": round(answer.seconds, 4),
                "answer": text[:120] if answer.ok else answer.error[:200],
            }
        )
    recalled = [p["target_tokens"] for p in per_length if p["recalled"]]
    lost = [p["target_tokens"] for p in per_length if not p["recalled"]]
    errors = [p for p in per_length if not p["ok"]]
    must_lost = [n for n in ctx.spec.needle_must_recall if n in lost]
    metrics = {
        "lengths": per_length,
        "recalled": recalled,
        "lost": lost,
        "must_recall": list(ctx.spec.needle_must_recall),
    }
    detail = f"recalled at {recalled or 'no length'}; lost at {lost or 'no length'}"
    if errors:
        return CheckResult(
            "needle",
            False,
            f"{len(errors)} needle request(s) failed ({errors[0]['answer']}); {detail}",
            metrics=metrics,
        )
    if must_lost:
        return CheckResult(
            "needle",
            False,
            f"needle lost at required length(s) {must_lost}; {detail}",
            metrics=metrics,
        )
    return CheckResult("needle", True, detail, metrics=metrics)


CHECK_FUNCTIONS: dict[str, Callable[[CheckContext], CheckResult]] = {
    "generate": check_generate,
    "logprobs": check_logprobs,
    "stream": check_stream,
    "concurrent": check_concurrent,
    "needle": check_needle,
}


def run_check(name: str, ctx: CheckContext) -> CheckResult:
    start = time.monotonic()
    try:
        if name == "equivalence":
            result = check_equivalence(
                ctx.router_url, ctx.colocated_url, ctx.equivalence, ctx.timeout
            )
        else:
            result = CHECK_FUNCTIONS[name](ctx)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        result = CheckResult(name, False, f"check raised {type(exc).__name__}: {exc}")
    result.seconds = round(time.monotonic() - start, 4)
    return result
