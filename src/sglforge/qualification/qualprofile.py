"""The qualification part of a smoke profile (issue 24), read by `profile.load_profile`:

- `[colocated]`: one ordinary (non-PD) server of the same model and stack, for the
  `equivalence` check. Keys like a role: `gpus`, `tp`, `port`, `numa-node`, `args`, `env`
  (on top of `[server]`'s). Its GPUs may be the pair's only with `share-gpus = true`.
- `[checks]` keys `equivalence-*` (the greedy prompts sent to both paths) and `reference-*`
  (the thresholds `--reference FILE` is judged by).
- `[gates.accuracy]`, `[gates.long-output]`, `[gates.needle]`: acceptance gates for a real
  model, each with `enforce = true|false` (a gate not enforced is run and reported only).
- top-level `limitations = [...]`: what a receipt of this profile must say it does not prove.

Kept apart from profile.py so the deployment keys and the qualification keys evolve apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.tomlfile import Problems, TableReader

MAX_PROMPTS = 256
MAX_PROMPT_TOKENS = 1 << 20
MAX_NEW_TOKENS = 1 << 20
MAX_TOP_K = 64
MAX_TRIALS = 64
_HEX64 = re.compile(r"[0-9a-f]{64}")
# Words of the long equivalence prompts: distinct, so that the prompt is not one repeated
# token and its KV spans many pages with varied content.
LONG_WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "stone",
    "market",
    "winter",
    "bridge",
    "lantern",
    "orchard",
    "harbour",
)
DEFAULT_EQUIVALENCE_PROMPTS = (
    "The capital of France is",
    "Once upon a time, in a land far away,",
    "def fibonacci(n):",
    "1, 2, 3, 4, 5,",
    "The quick brown fox",
    "In 1969, the first humans",
    "Hello",
)


@dataclass(frozen=True)
class ColocatedSpec:
    """The colocated server the PD pair is compared with."""

    gpus: tuple[int, ...]
    tp: int
    port: int
    numa_node: int | None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # "with-pair": started with the pair (its own GPU, or a shared one with room for three);
    # "after-pair": started once the pair and router are stopped, on the GPU they freed (a
    # model too large for two copies on one GPU), the pair's answers kept for the comparison.
    start: str = "with-pair"

    @property
    def after_pair(self) -> bool:
        return self.start == "after-pair"


COLOCATED_STARTS = ("with-pair", "after-pair")


@dataclass(frozen=True)
class EquivalenceSpec:
    prompts: tuple[str, ...]
    long_prompt_tokens: tuple[int, ...]  # each adds a filler prompt of about that many tokens
    max_new_tokens: int
    max_logprob_diff: float | None  # None: logprob differences are reported, not judged
    words_per_token: float

    def all_prompts(self) -> tuple[str, ...]:
        return self.prompts + tuple(
            long_prompt(n, self.words_per_token) for n in self.long_prompt_tokens
        )


@dataclass(frozen=True)
class ReferenceSpec:
    top_k: int
    min_top1: float  # share of reference positions whose greedy token matches
    min_topk_overlap: float  # mean |top-k(ref) ∩ top-k(run)| / k over compared positions
    max_logprob_diff: float  # largest |logprob(ref) - logprob(run)| of the chosen tokens


@dataclass(frozen=True)
class AccuracyGate:
    questions: Path
    sha256: str
    min_exact_match: float
    max_new_tokens: int
    template: str  # "{question}" is replaced by each question
    enforce: bool


@dataclass(frozen=True)
class LongOutputGate:
    tokens: int  # completion must reach exactly this many tokens
    prompt: str
    enforce: bool


@dataclass(frozen=True)
class NeedleGate:
    min_recall: tuple[tuple[int, float], ...]  # (prompt tokens, share of trials recalled)
    trials: int
    enforce: bool


@dataclass(frozen=True)
class GatesSpec:
    accuracy: AccuracyGate | None = None
    long_output: LongOutputGate | None = None
    needle: NeedleGate | None = None

    def names(self) -> list[str]:
        return [
            name
            for name, gate in (
                ("accuracy", self.accuracy),
                ("long-output", self.long_output),
                ("needle-recall", self.needle),
            )
            if gate is not None
        ]


def long_prompt(tokens: int, words_per_token: float) -> str:
    words = max(8, int(tokens * words_per_token))
    body = " ".join(LONG_WORDS[(i * 7) % len(LONG_WORDS)] for i in range(words))
    return body + ". The end is"


def read_colocated(reader: TableReader) -> ColocatedSpec:
    gpus = tuple(reader.int_list("gpus", required=True, minimum=0, maximum=1023) or [])
    tp = reader.int("tp", minimum=1, maximum=1024) or max(1, len(gpus))
    if gpus and len(gpus) != tp:
        reader.error("gpus", f"{len(gpus)} GPUs listed but tp = {tp}; list exactly tp GPUs")
    spec = ColocatedSpec(
        gpus=gpus,
        tp=tp,
        port=reader.int("port", required=True, minimum=1, maximum=65535) or 0,
        numa_node=reader.int("numa-node", minimum=0, maximum=1023),
        args=tuple(reader.str_list("args") or []),
        env=tuple(sorted(reader.str_table("env").items())),
        start=reader.str("start") or "with-pair",
    )
    if spec.start not in COLOCATED_STARTS:
        reader.error("start", f"{spec.start!r} is not one of {', '.join(COLOCATED_STARTS)}")
    for arg in spec.args:
        if arg.startswith("--disaggregation"):
            reader.error(
                "args",
                f"{arg!r}: the colocated server is the non-PD reference; it "
                "takes no --disaggregation-* arguments",
            )
    reader.finish()
    return spec


def read_equivalence(reader: TableReader, words_per_token: float) -> EquivalenceSpec:
    """`[checks]` keys equivalence-prompts, equivalence-long-prompt-tokens,
    equivalence-max-new-tokens, equivalence-max-logprob-diff."""
    prompts = reader.str_list("equivalence-prompts")
    if prompts is not None and not prompts:
        reader.error("equivalence-prompts", "must list at least one prompt")
    if prompts and len(prompts) > MAX_PROMPTS:
        reader.error("equivalence-prompts", f"{len(prompts)} prompts; at most {MAX_PROMPTS}")
    if prompts and any(not p.strip() for p in prompts):
        reader.error("equivalence-prompts", "a prompt is empty")
    long = reader.int_list("equivalence-long-prompt-tokens", minimum=16, maximum=MAX_PROMPT_TOKENS)
    diff = reader._get("equivalence-max-logprob-diff", False)
    if diff is not None:
        diff = reader.number("equivalence-max-logprob-diff", default=0.0, maximum=100.0)
    return EquivalenceSpec(
        prompts=tuple(prompts or DEFAULT_EQUIVALENCE_PROMPTS),
        long_prompt_tokens=tuple([700, 1200] if long is None else long),
        max_new_tokens=reader.int("equivalence-max-new-tokens", minimum=1, maximum=MAX_NEW_TOKENS)
        or 48,
        max_logprob_diff=diff,
        words_per_token=words_per_token,
    )


def read_reference(reader: TableReader) -> ReferenceSpec:
    """`[checks]` keys reference-top-k, reference-min-top1, reference-min-topk-overlap,
    reference-max-logprob-diff (defaults: the same host and stack, where equality holds)."""
    return ReferenceSpec(
        top_k=reader.int("reference-top-k", minimum=1, maximum=MAX_TOP_K) or 5,
        min_top1=_share(reader, "reference-min-top1", 1.0),
        min_topk_overlap=_share(reader, "reference-min-topk-overlap", 1.0),
        max_logprob_diff=reader.number("reference-max-logprob-diff", default=0.02, maximum=100.0),
    )


def read_gates(reader: TableReader, problems: Problems, project_root: Path, locate) -> GatesSpec:
    """`[gates.*]`: each sub-table one gate; unknown gates and keys are errors."""

    def sub(name: str) -> TableReader | None:
        table = reader.table(name)
        return (
            None
            if table is None
            else TableReader(table, problems, f"[gates.{name}]", locate(f"gates.{name}"))
        )

    accuracy = long_output = needle = None
    if (r := sub("accuracy")) is not None:
        questions = r.str("questions", required=True) or ""
        digest = (
            r.str(
                "sha256", required=True, pattern=_HEX64.pattern, describe="64 lowercase hex digits"
            )
            or ""
        )
        template = r.str("template") or "Question: {question}\nAnswer:"
        if "{question}" not in template:
            r.error("template", "must contain {question}")
        accuracy = AccuracyGate(
            questions=project_root / questions,
            sha256=digest,
            min_exact_match=_share(r, "min-exact-match", 1.0),
            max_new_tokens=r.int("max-new-tokens", minimum=1, maximum=MAX_NEW_TOKENS) or 256,
            template=template,
            enforce=r.bool("enforce", default=True),
        )
        r.finish()
    if (r := sub("long-output")) is not None:
        long_output = LongOutputGate(
            tokens=r.int("tokens", required=True, minimum=1, maximum=MAX_NEW_TOKENS) or 1,
            prompt=r.str("prompt") or "Write a long story about a lighthouse keeper.",
            enforce=r.bool("enforce", default=True),
        )
        r.finish()
    if (r := sub("needle")) is not None:
        table = r.table("min-recall", required=True) or {}
        thresholds = []
        for key, value in table.items():
            if not re.fullmatch(r"[1-9][0-9]{0,6}", str(key)):
                r.error("min-recall", f"key {key!r} is not a prompt length in tokens")
            elif (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                r.error("min-recall", f"{key} = {value!r}: a share between 0 and 1")
            else:
                thresholds.append((int(key), float(value)))
        if not table:
            r.error("min-recall", "must name at least one length")
        needle = NeedleGate(
            min_recall=tuple(sorted(thresholds)),
            trials=r.int("trials", minimum=1, maximum=MAX_TRIALS) or 3,
            enforce=r.bool("enforce", default=True),
        )
        r.finish()
    reader.finish()
    return GatesSpec(accuracy=accuracy, long_output=long_output, needle=needle)


def _share(reader: TableReader, key: str, default: float) -> float:
    """A number in [0, 1] (0 allowed: `number` insists on > 0)."""
    value = reader._get(key, False)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        reader.error(key, f"expected a share between 0 and 1, got {value!r}")
        return default
    return float(value)
