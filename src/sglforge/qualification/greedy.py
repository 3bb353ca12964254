"""Greedy generations with their token ids and logprobs, as `equivalence` and `reference`
compare them: one temperature-0 `/generate` per prompt, `return_logprob` (and top-k when
asked), the answer reduced to a `Generation`. A malformed answer is an error string, never an
exception (the server is the thing under test)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sglforge.base import http


@dataclass(frozen=True)
class Generation:
    prompt: str
    ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    texts: tuple[str, ...] = ()  # each token's text where the server returned it
    # Per position the top-k alternatives as (token id, logprob); empty where not returned.
    top: tuple[tuple[tuple[int, float], ...], ...] = ()
    error: str = ""
    seconds: float = 0.0
    prompt_tokens: int | None = None  # as the server counted them (long prompts: many pages)

    @property
    def ok(self) -> bool:
        return not self.error

    def token(self, position: int) -> str:
        """`id 'text'` of one position, `<end>` past the last (for divergence messages)."""
        if position >= len(self.ids):
            return "<end of output>"
        text = self.texts[position] if position < len(self.texts) else ""
        return f"{self.ids[position]} {text!r}" if text else str(self.ids[position])


def _entry(value: Any) -> tuple[float, int, str] | None:
    """SGLang's logprob entry `[logprob, token_id, text-or-null]`."""
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        return None
    logprob, token = value[0], value[1]
    if isinstance(token, bool) or not isinstance(token, int):
        return None
    if (
        isinstance(logprob, bool)
        or not isinstance(logprob, (int, float))
        or not math.isfinite(logprob)
    ):
        return None
    text = value[2] if len(value) > 2 and isinstance(value[2], str) else ""
    return float(logprob), token, text


def parse_generation(prompt: str, body: Any, seconds: float = 0.0) -> Generation:
    meta = body.get("meta_info") if isinstance(body, dict) else None
    if not isinstance(meta, dict):
        return Generation(prompt, error="answer has no meta_info", seconds=seconds)
    raw = meta.get("output_token_logprobs")
    if not isinstance(raw, list) or not raw:
        return Generation(prompt, error="meta_info has no output_token_logprobs", seconds=seconds)
    entries = [_entry(e) for e in raw]
    if any(e is None for e in entries):
        bad = next(i for i, e in enumerate(entries) if e is None)
        return Generation(
            prompt,
            error=f"output_token_logprobs[{bad}] is not [logprob, id, text]: {raw[bad]!r:.80}",
            seconds=seconds,
        )
    top: list[tuple[tuple[int, float], ...]] = []
    raw_top = meta.get("output_top_logprobs")
    if isinstance(raw_top, list):
        for position in raw_top:
            alternatives = [_entry(e) for e in position] if isinstance(position, list) else []
            top.append(tuple((e[1], e[0]) for e in alternatives if e is not None))
    counted = meta.get("prompt_tokens")
    return Generation(
        prompt=prompt,
        ids=tuple(e[1] for e in entries),
        logprobs=tuple(e[0] for e in entries),
        texts=tuple(e[2] for e in entries),
        top=tuple(top),
        seconds=seconds,
        prompt_tokens=counted
        if isinstance(counted, int) and not isinstance(counted, bool)
        else None,
    )


def generate(
    url: str, prompt: str, max_new_tokens: int, timeout: float, top_k: int = 0
) -> Generation:
    payload: dict[str, Any] = {
        "text": prompt,
        "return_logprob": True,
        "return_text_in_logprobs": True,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens},
    }
    if top_k:
        payload["top_logprobs_num"] = top_k
    answer = http.post(f"{url}/generate", payload, timeout)
    if not answer.ok:
        return Generation(
            prompt, error=f"/generate failed: {answer.error[:300]}", seconds=answer.seconds
        )
    return parse_generation(prompt, answer.body, answer.seconds)


def first_difference(a: Generation, b: Generation) -> int | None:
    """The first position whose token ids differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a.ids, b.ids)):
        if x != y:
            return i
    return None if len(a.ids) == len(b.ids) else min(len(a.ids), len(b.ids))


def short(prompt: str, limit: int = 40) -> str:
    """A prompt as messages name it: its start, and its length when cut."""
    return prompt if len(prompt) <= limit else f"{prompt[:limit]}… ({len(prompt)} chars)"
