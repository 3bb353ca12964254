"""Acceptance gates for a real model (issue 24), configured in `[gates.*]` of the profile:

- `accuracy`: a question set with known answers (GSM8K style: the reference answer's last
  number, after `####` where present), exact match of the last number in the greedy answer;
  the set is a file the profile names together with its sha256, so a changed set is refused.
- `long-output`: one greedy generation of exactly `tokens` new tokens (EOS ignored) must
  complete: a decode that dies or truncates a long output fails.
- `needle-recall`: `trials` needles per context length, each length with its own threshold
  (the share recalled), because recall decays with length and one bar for all is wrong.

Each gate is a `CheckResult` with its threshold and value; `enforce = false` runs and reports
it without failing the smoke (the tiny random model recalls and answers nothing).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglforge.base import http
from sglforge.base.errors import SglforgeError
from sglforge.qualification.needle import needle_prompt
from sglforge.qualification.qualprofile import AccuracyGate, GatesSpec, LongOutputGate, NeedleGate
from sglforge.qualification.results import CheckResult

MAX_QUESTIONS = 10_000
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Question:
    question: str
    answer: str  # the normalized number


def normalize_number(text: str) -> str | None:
    """The last number in `text` (GSM8K: after `####` when present), commas dropped, a
    trailing `.0` dropped: '1,234.0' -> '1234'."""
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    found = _NUMBER.findall(text)
    if not found:
        return None
    number = found[-1].replace(",", "")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return number


def load_questions(gate: AccuracyGate) -> list[Question]:
    """The question set, checked against the profile's sha256 before a line is read."""
    path = gate.questions
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SglforgeError(f"[gates.accuracy] questions {path}: {exc.strerror or exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != gate.sha256:
        raise SglforgeError(
            f"[gates.accuracy] questions {path}: sha256 is {digest}, the "
            f"profile pins {gate.sha256}; the question set changed"
        )
    questions = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        answer = (
            normalize_number(entry.get("answer", ""))
            if isinstance(entry, dict) and isinstance(entry.get("answer"), str)
            else None
        )
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("question"), str)
            or answer is None
        ):
            raise SglforgeError(
                f"{path}, line {number}: expected a JSON object with "
                "'question' and 'answer' strings, the answer holding a number"
            )
        questions.append(Question(entry["question"], answer))
        if len(questions) > MAX_QUESTIONS:
            raise SglforgeError(f"{path}: more than {MAX_QUESTIONS} questions")
    if not questions:
        raise SglforgeError(f"{path}: no questions")
    return questions


def _greedy(
    url: str, text: str, max_new_tokens: int, timeout: float, **params: Any
) -> http.Response:
    return http.post(
        f"{url}/generate",
        {
            "text": text,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, **params},
        },
        timeout,
    )


def _text(answer: http.Response) -> str:
    body = answer.body
    return (
        body.get("text", "") if isinstance(body, dict) and isinstance(body.get("text"), str) else ""
    )


def gate_accuracy(url: str, gate: AccuracyGate, timeout: float) -> CheckResult:
    questions = load_questions(gate)
    rows, correct, failed = [], 0, 0
    for q in questions:
        answer = _greedy(
            url, gate.template.replace("{question}", q.question), gate.max_new_tokens, timeout
        )
        got = normalize_number(_text(answer)) if answer.ok else None
        failed += not answer.ok
        correct += got == q.answer
        rows.append({"expected": q.answer, "got": got, "ok": answer.ok})
    share = correct / len(questions)
    metrics = {
        "questions": len(questions),
        "correct": correct,
        "failed_requests": failed,
        "file": str(gate.questions),
        "sha256": gate.sha256,
        "rows": rows[:50],
    }
    passed = share >= gate.min_exact_match and not failed
    detail = (
        f"exact match {correct}/{len(questions)} = {share:.3f} (needs "
        f">= {gate.min_exact_match:g})" + (f"; {failed} request(s) failed" if failed else "")
    )
    return CheckResult(
        "accuracy",
        passed,
        detail,
        metrics=metrics,
        threshold={"min_exact_match": gate.min_exact_match},
        value=share,
        enforced=gate.enforce,
    )


def gate_long_output(url: str, gate: LongOutputGate, timeout: float) -> CheckResult:
    answer = _greedy(url, gate.prompt, gate.tokens, timeout, ignore_eos=True)
    meta = answer.body.get("meta_info") if isinstance(answer.body, dict) else None
    tokens = meta.get("completion_tokens") if isinstance(meta, dict) else None
    metrics = {
        "requested": gate.tokens,
        "completion_tokens": tokens,
        "seconds": round(answer.seconds, 3),
        "tokens_per_s": round(tokens / answer.seconds, 2)
        if isinstance(tokens, int) and answer.seconds > 0
        else None,
    }
    threshold = {"completion_tokens": gate.tokens}
    if not answer.ok:
        return CheckResult(
            "long-output",
            False,
            f"/generate of {gate.tokens} tokens failed: {answer.error[:200]}",
            metrics=metrics,
            threshold=threshold,
            enforced=gate.enforce,
        )
    passed = tokens == gate.tokens
    return CheckResult(
        "long-output",
        passed,
        f"{tokens} of {gate.tokens} tokens completed in {answer.seconds:.1f} s",
        metrics=metrics,
        threshold=threshold,
        value=tokens,
        enforced=gate.enforce,
    )


def _trial_passphrase(length: int, trial: int) -> str:
    words = ("amber", "cobalt", "juniper", "saffron", "violet", "indigo", "russet", "teal")
    number = (length * 7919 + trial * 104729) % 9000 + 1000
    return f"{words[(length + trial) % len(words)]}-{number}"


def gate_needle(url: str, gate: NeedleGate, timeout: float, words_per_token: float) -> CheckResult:
    per_length, failures, lost_requests = [], [], 0
    for length, need in gate.min_recall:
        recalled = 0
        for trial in range(gate.trials):
            secret = _trial_passphrase(length, trial)
            answer = _greedy(url, needle_prompt(length, words_per_token, secret), 32, timeout)
            lost_requests += not answer.ok
            recalled += answer.ok and secret in _text(answer)
        share = recalled / gate.trials
        per_length.append(
            {
                "tokens": length,
                "recalled": recalled,
                "trials": gate.trials,
                "share": share,
                "min_share": need,
            }
        )
        if share < need:
            failures.append(f"{length} tokens: {recalled}/{gate.trials} < {need:g}")
    metrics = {"lengths": per_length, "failed_requests": lost_requests}
    shares = ", ".join(f"{p['tokens']}: {p['recalled']}/{p['trials']}" for p in per_length)
    passed = not failures and not lost_requests
    detail = (
        f"recall {shares}"
        + (f"; below threshold at {'; '.join(failures)}" if failures else "")
        + (f"; {lost_requests} request(s) failed" if lost_requests else "")
    )
    return CheckResult(
        "needle-recall",
        passed,
        detail,
        metrics=metrics,
        threshold={str(n): s for n, s in gate.min_recall},
        value={str(p["tokens"]): p["share"] for p in per_length},
        enforced=gate.enforce,
    )


def run_gates(
    url: str, gates: GatesSpec, timeout: float, words_per_token: float
) -> list[CheckResult]:
    import time

    runs: list[tuple[str, Callable[[], CheckResult]]] = []
    if gates.accuracy:
        runs.append(("accuracy", lambda: gate_accuracy(url, gates.accuracy, timeout)))
    if gates.long_output:
        runs.append(("long-output", lambda: gate_long_output(url, gates.long_output, timeout)))
    if gates.needle:
        runs.append(
            ("needle-recall", lambda: gate_needle(url, gates.needle, timeout, words_per_token))
        )
    results = []
    for name, run in runs:
        start = time.monotonic()
        try:
            result = run()
        except SglforgeError as exc:
            enforced = {
                "accuracy": gates.accuracy,
                "long-output": gates.long_output,
                "needle-recall": gates.needle,
            }[name].enforce
            result = CheckResult(name, False, str(exc).splitlines()[0], enforced=enforced)
        result.seconds = round(time.monotonic() - start, 4)
        results.append(result)
    return results
