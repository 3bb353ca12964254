"""`sglforge tiny-model DIR`: a small random-weight Llama for a weight-free smoke.

The smoke proves that the stack serves (launch, KV transfer between prefill and decode,
routing, streaming, long prompts), not what a model knows, so random weights do: no download,
about 2 MB, loads in seconds on any GPU. The tokenizer is a byte-level BPE trained here, offline,
on text that ships with sglforge (its own sources) plus the smoke's prompts, so any prompt
tokenizes. Random weights recall nothing: profiles that use it set `needle-must-recall = []`
(the needle check still runs long prompts through the pair and reports what came back).

Needs torch, transformers, tokenizers and safetensors: the serving stack has them, and the
smoke runs this verb with the stack's interpreter (`model = "tiny"`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from sglforge.base.errors import SglforgeError

NEEDS = ("torch", "transformers", "tokenizers", "safetensors")
MARKER = "sglforge-tiny-model.json"
VOCAB_SIZE = 4096
# Shapes from the H200 reference run (RECIPE.md): head_dim 64 keeps every attention backend
# happy, 32k positions cover the needle check's longest prompts.
SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
         "max_position_embeddings": 32768}
DEFAULT_HEADS = SHAPE["num_attention_heads"]
MAX_HEADS = 64


def shape(heads: int = DEFAULT_HEADS) -> dict[str, int]:
    """SHAPE with `heads` attention heads (and half as many KV heads, at least one): tensor
    parallelism splits heads, so a TP-N server needs heads divisible by N (TP4: heads = 4).
    The default is the shape of the H200 reference runs; head_dim stays 64."""
    if not 1 <= heads <= MAX_HEADS:
        raise SglforgeError(f"tiny-model --heads {heads}: must be between 1 and {MAX_HEADS}")
    return {**SHAPE, "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2)}
SPECIAL = ("<s>", "</s>", "<pad>")


def missing_requirements() -> list[str]:
    return [name for name in NEEDS if importlib.util.find_spec(name) is None]


def training_text() -> list[str]:
    """Text the tokenizer learns from: sglforge's own sources and the smoke's prompts."""
    from sglforge.smoke.checks import FILLER

    package = Path(__file__).resolve().parent.parent
    texts = [path.read_text(encoding="utf-8", errors="replace")
             for path in sorted(package.rglob("*.py"))]
    texts += list(FILLER) * 4
    texts += ["The capital of France is Paris.",
              "Remember this: the secret passphrase is amber-1234.",
              ("Question: what is the secret passphrase mentioned in the text above?\n"
               "Answer: the passphrase is")]
    return texts


def _prepare(directory: Path, force: bool) -> None:
    if directory.exists() and any(directory.iterdir()):
        if not force:
            raise SglforgeError(f"{directory} is not empty", hint="pass --force to replace a "
                                "tiny model written there before")
        if not (directory / MARKER).exists():
            raise SglforgeError(f"{directory} is not empty and holds no {MARKER}; refusing to "
                                "delete something that is not a tiny model")
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)


def write_tiny_model(directory: Path, seed: int = 0, force: bool = False,
                     heads: int = DEFAULT_HEADS) -> str:
    dims = shape(heads)
    missing = missing_requirements()
    if missing:
        raise SglforgeError(
            f"tiny-model needs {', '.join(NEEDS)}; not importable here: {', '.join(missing)}",
            hint="run it with the serving stack's interpreter (the smoke does, for model = "
                 "\"tiny\"), or `pip install torch transformers tokenizers safetensors`")
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    _prepare(directory, force)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(training_text(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=SPECIAL[0],
                                   eos_token=SPECIAL[1], pad_token=SPECIAL[2])
    fast.save_pretrained(str(directory))
    vocab = tokenizer.get_vocab_size()
    config = LlamaConfig(vocab_size=vocab, rope_theta=10000.0, tie_word_embeddings=True,
                         bos_token_id=0, eos_token_id=1, pad_token_id=2,
                         torch_dtype="bfloat16", **dims)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        # Tied embeddings: zero rows give <s>, </s>, <pad> logit 0, so greedy decoding with
        # random weights does not stop at once and every check sees generated text.
        model.model.embed_tokens.weight[:len(SPECIAL)].zero_()
    model.save_pretrained(str(directory), safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    info = {"kind": "random-weight Llama (sglforge tiny-model)", "seed": seed, "vocab": vocab,
            "parameters": params, **dims, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "note": "random weights: generates noise and recalls nothing; use "
                    "needle-must-recall = []"}
    (directory / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    files = sorted(p.name for p in directory.iterdir())
    return (f"tiny model in {directory}: vocab {vocab}, {params} parameters (bf16, seed {seed}); "
            f"files: {', '.join(files)}")
