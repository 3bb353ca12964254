"""A logprob oracle (issue 24): `smoke --record-reference FILE` writes, for the profile's
prompts, the greedy token ids and top-k logprobs a run produced, with the model's identity and
the stack that produced them; `smoke --reference FILE` sends the reference's own prompts
through the router and compares: top-1 match rate, top-k overlap, largest logprob difference,
each against the profile's threshold (`[checks] reference-*`). This is how a run on one host
(an RTX PRO 6000) is compared with a run on another (an H200) or with another stack.

How positions are compared: greedy decoding conditions every token on the earlier ones, so
positions after the first differing token are not comparable. A reference position counts as
matched if it and all positions before it match; the top-k overlap and logprob difference are
taken over the matched positions (and the overlap also at the first differing one, where the
alternatives say how close the call was).

Reference files are input (a user brings one from another host): every field is checked and a
bad file is an error naming the file and the field.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import atomic_write_text
from sglforge.qualification.greedy import Generation, first_difference, generate, short
from sglforge.qualification.qualprofile import ReferenceSpec
from sglforge.qualification.results import CheckResult

KIND = "sglforge-reference"
SCHEMA = 1
MAX_REFERENCE_BYTES = 64 << 20


@dataclass(frozen=True)
class Reference:
    path: Path | None
    model: dict[str, Any]
    stack: dict[str, Any]
    top_k: int
    max_new_tokens: int
    generations: tuple[Generation, ...]
    profile: str = ""
    created: str = ""


def collect(
    url: str, prompts: tuple[str, ...], max_new_tokens: int, top_k: int, timeout: float
) -> tuple[Generation, ...]:
    return tuple(generate(url, p, max_new_tokens, timeout, top_k=top_k) for p in prompts)


def to_json(ref: Reference) -> dict[str, Any]:
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "created": ref.created,
        "profile": ref.profile,
        "model": ref.model,
        "stack": ref.stack,
        "top_k": ref.top_k,
        "max_new_tokens": ref.max_new_tokens,
        "prompts": [
            {
                "prompt": g.prompt,
                "ids": list(g.ids),
                "logprobs": list(g.logprobs),
                "texts": list(g.texts),
                "top": [[[t, lp] for t, lp in pos] for pos in g.top],
            }
            for g in ref.generations
        ],
    }


def write_reference(path: Path, ref: Reference) -> None:
    failed = [g for g in ref.generations if not g.ok]
    if failed:
        raise SglforgeError(
            f"not recording {path}: {len(failed)} generation(s) failed "
            f"(first: {short(failed[0].prompt)!r}: {failed[0].error})"
        )
    atomic_write_text(path, json.dumps(to_json(ref), indent=1) + "\n")


def new_reference(
    generations: tuple[Generation, ...],
    *,
    model: dict,
    stack: dict,
    top_k: int,
    max_new_tokens: int,
    profile: str,
) -> Reference:
    return Reference(
        path=None,
        model=model,
        stack=stack,
        top_k=top_k,
        max_new_tokens=max_new_tokens,
        generations=generations,
        profile=profile,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def load_reference(path: Path) -> Reference:
    def bad(where: str, what: str) -> SglforgeError:
        return SglforgeError(
            f"{path}: {where}: {what}",
            hint="record one with `sglforge smoke --record-reference FILE`",
        )

    try:
        if path.stat().st_size > MAX_REFERENCE_BYTES:
            raise bad("file", f"larger than {MAX_REFERENCE_BYTES >> 20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SglforgeError(f"{path}: cannot read the reference ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise bad("file", f"invalid JSON ({str(exc).split(';')[0]})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise bad("kind", f"not a {KIND} file")
    if data.get("schema") != SCHEMA:
        raise bad("schema", f"{data.get('schema')!r}; this sglforge reads {SCHEMA}")
    for key, kind in (("model", dict), ("stack", dict), ("prompts", list)):
        if not isinstance(data.get(key), kind):
            raise bad(key, f"expected a JSON {kind.__name__}")
    top_k, new = data.get("top_k"), data.get("max_new_tokens")
    for key, value in (("top_k", top_k), ("max_new_tokens", new)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 20:
            raise bad(key, f"expected a small non-negative integer, got {value!r:.40}")
    if not data["prompts"]:
        raise bad("prompts", "empty")
    generations = []
    for i, entry in enumerate(data["prompts"]):
        where = f"prompts[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str):
            raise bad(where, "needs a 'prompt' string")
        ids, lps = entry.get("ids"), entry.get("logprobs")
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids)
        ):
            raise bad(f"{where}.ids", "expected a non-empty list of token ids")
        if not isinstance(lps, list) or len(lps) != len(ids) or not all(_finite(v) for v in lps):
            raise bad(f"{where}.logprobs", f"expected {len(ids)} finite numbers")
        texts = entry.get("texts") or []
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise bad(f"{where}.texts", "expected a list of strings")
        top_raw = entry.get("top") or []
        if not isinstance(top_raw, list) or len(top_raw) > len(ids):
            raise bad(f"{where}.top", f"expected at most {len(ids)} positions")
        top = []
        for j, position in enumerate(top_raw):
            if not isinstance(position, list) or not all(
                isinstance(p, list)
                and len(p) == 2
                and isinstance(p[0], int)
                and not isinstance(p[0], bool)
                and _finite(p[1])
                for p in position
            ):
                raise bad(f"{where}.top[{j}]", "expected a list of [token id, logprob]")
            top.append(tuple((int(t), float(lp)) for t, lp in position))
        generations.append(
            Generation(
                prompt=entry["prompt"],
                ids=tuple(ids),
                logprobs=tuple(float(v) for v in lps),
                texts=tuple(texts),
                top=tuple(top),
            )
        )
    return Reference(
        path=path,
        model=data["model"],
        stack=data["stack"],
        top_k=top_k,
        max_new_tokens=new,
        generations=tuple(generations),
        profile=str(data.get("profile", "")),
        created=str(data.get("created", "")),
    )


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class _Agreement:
    """How far a run's generations agree with the reference's, summed over its prompts."""

    positions: int = 0  # the reference's, failed requests' included
    matched: int = 0  # positions that match, and all before them in their prompt
    overlaps: list[float] = field(default_factory=list)  # per compared position
    max_diff: float = 0.0  # largest |logprob difference| over the matched positions
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per prompt, for the report

    @property
    def top1(self) -> float:
        return self.matched / self.positions if self.positions else 0.0

    @property
    def overlap(self) -> float | None:
        return sum(self.overlaps) / len(self.overlaps) if self.overlaps else None


def compare(
    ref: Reference, run: tuple[Generation, ...], spec: ReferenceSpec, model: dict[str, Any]
) -> CheckResult:
    """Judge a run's generations (for the reference's prompts) against the reference."""
    threshold = {
        "min_top1": spec.min_top1,
        "min_topk_overlap": spec.min_topk_overlap,
        "max_logprob_diff": spec.max_logprob_diff,
    }
    where = str(ref.path) if ref.path else "the reference"
    if ref.model.get("digest") is None or ref.model.get("digest") != model.get("digest"):
        return CheckResult(
            "reference",
            False,
            f"{where} was recorded for model digest "
            f"{ref.model.get('digest')}, this run serves {model.get('digest')}: "
            "a reference only speaks for the same weights",
            threshold=threshold,
        )
    agreement = _agreement(ref, run)
    top1, overlap, max_diff = agreement.top1, agreement.overlap, agreement.max_diff
    value = {"top1": top1, "topk_overlap": overlap, "max_logprob_diff": max_diff}
    metrics = {
        "reference": where,
        "reference_stack": ref.stack,
        "top_k": ref.top_k,
        "positions": agreement.positions,
        "matched": agreement.matched,
        **value,
        "rows": agreement.rows,
    }
    failures = _failures(agreement, ref.top_k, spec)
    detail = (
        f"top-1 {top1:.4f} over {agreement.positions} positions, top-{ref.top_k} overlap "
        f"{'n/a' if overlap is None else f'{overlap:.4f}'}, max |logprob diff| "
        f"{max_diff:.3g}"
    )
    if failures:
        return CheckResult(
            "reference",
            False,
            "; ".join(failures) + f" ({detail})",
            metrics=metrics,
            threshold=threshold,
            value=value,
        )
    return CheckResult("reference", True, detail, metrics=metrics, threshold=threshold, value=value)


def _agreement(ref: Reference, run: tuple[Generation, ...]) -> _Agreement:
    """Compare each of the reference's generations with the run's for the same prompt."""
    agreement = _Agreement()
    for expected, got in zip(ref.generations, run, strict=True):
        agreement.positions += len(expected.ids)
        if not got.ok:
            agreement.rows.append({"prompt": short(expected.prompt), "error": got.error})
            continue
        _add_prompt(agreement, expected, got, ref.top_k)
    return agreement


def _add_prompt(agreement: _Agreement, expected: Generation, got: Generation, top_k: int) -> None:
    """One prompt's matched positions, logprob differences and top-k overlaps, added to
    `agreement` with the prompt's row."""
    first = first_difference(expected, got)
    same = len(expected.ids) if first is None else min(first, len(expected.ids))
    agreement.matched += same
    diffs = [abs(x - y) for x, y in zip(expected.logprobs[:same], got.logprobs[:same])]
    agreement.max_diff = max([agreement.max_diff, *diffs])
    compared_top = range(min(len(expected.ids), same + 1))
    prompt_overlaps = [
        _overlap(expected.top[i], got.top[i], top_k)
        for i in compared_top
        if i < len(expected.top) and i < len(got.top) and expected.top[i]
    ]
    agreement.overlaps += prompt_overlaps
    row = {
        "prompt": short(expected.prompt),
        "positions": len(expected.ids),
        "matched": same,
        "first_divergence": first,
        "max_abs_logprob_diff": max(diffs, default=0.0),
        "topk_overlap": (sum(prompt_overlaps) / len(prompt_overlaps) if prompt_overlaps else None),
    }
    if first is not None:
        row.update(reference_token=expected.token(first), run_token=got.token(first))
    agreement.rows.append(row)


def _failures(agreement: _Agreement, top_k: int, spec: ReferenceSpec) -> list[str]:
    """What fails the comparison: failed requests, and each threshold not met."""
    top1, overlap, max_diff = agreement.top1, agreement.overlap, agreement.max_diff
    failures = []
    errors = [r for r in agreement.rows if "error" in r]
    if errors:
        failures.append(
            f"{len(errors)} request(s) failed ({errors[0]['prompt']!r}: {errors[0]['error']})"
        )
    if top1 < spec.min_top1:
        worst = next((r for r in agreement.rows if r.get("first_divergence") is not None), None)
        at = (
            (
                f"; first: {worst['prompt']!r} at position {worst['first_divergence']}, "
                f"reference {worst['reference_token']}, run {worst['run_token']}"
            )
            if worst
            else ""
        )
        failures.append(f"top-1 match {top1:.4f} < {spec.min_top1:g}{at}")
    if top_k and overlap is None:
        failures.append("no top-k logprobs to compare (the run returned none)")
    elif overlap is not None and overlap < spec.min_topk_overlap:
        failures.append(f"top-{top_k} overlap {overlap:.4f} < {spec.min_topk_overlap:g}")
    if max_diff > spec.max_logprob_diff:
        failures.append(f"max |logprob diff| {max_diff:.3g} > {spec.max_logprob_diff:g}")
    return failures


def _overlap(a: tuple[tuple[int, float], ...], b: tuple[tuple[int, float], ...], k: int) -> float:
    k = k or len(a)
    return len({t for t, _ in a[:k]} & {t for t, _ in b[:k]}) / max(1, min(k, len(a)))
