"""`sglforge tiny-model DIR`: a small random-weight Llama for a weight-free smoke.

The smoke proves that the stack serves (launch, KV transfer between prefill and decode,
routing, streaming, long prompts), not what a model knows, so random weights do: no download,
about 2 MB, loads in seconds on any GPU. Random weights recall nothing: profiles that use it set
`needle-must-recall = []` (the needle check still runs long prompts through the pair and
reports what came back).

Reproducible by construction (issue 37): the same arguments write the same bytes on any host,
from any checkout, with any library versions, because nothing here depends on them.
- The tokenizer is a byte-level BPE trained by the pure-Python trainer below on a fixed,
  committed corpus (`tinycorpus.py`: never sglforge's own changing sources), ties broken by
  the pair's text, and written as `tokenizer.json` directly.
- The weights are uniform in ±0.02·√3 (standard deviation 0.02, Llama's initializer range),
  drawn per tensor from SHAKE-256 of (generation, seed, tensor name), rounded to bfloat16
  (round to nearest even) with integer arithmetic, and written as safetensors directly.
- No torch, transformers, tokenizers or safetensors is imported: CI (no torch) writes the very
  bytes the GPU host serves, and a reference recorded on one host can be re-checked on another
  from the digest alone (qualification/identity.py).
`GENERATION` names this procedure; tests pin the digest it produces.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import math
import re
import shutil
import struct
import sys
from array import array
from collections import Counter, defaultdict
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.qualification.identity import TINY_MARKER

MARKER = TINY_MARKER  # qualification/identity.py reads it to name the model
GENERATION = 2  # 1: tokenizer trained by `tokenizers` on sglforge's sources, torch init
VOCAB_SIZE = 4096
INIT_STD = 0.02
# Shapes from the H200 reference run (RECIPE.md): head_dim 64 keeps every attention backend
# happy, 32k positions cover the needle check's longest prompts.
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 32768,
}
DEFAULT_HEADS = SHAPE["num_attention_heads"]
MAX_HEADS = 64
SPECIAL = ("<s>", "</s>", "<pad>")
# GPT-2's pre-tokenizer split (words with their leading space, numbers, punctuation runs,
# whitespace), in `re` terms: used for training only; the served tokenizer applies its own
# ByteLevel split, and every merge learned here is valid there.
_PRETOKEN = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def shape(heads: int = DEFAULT_HEADS) -> dict[str, int]:
    """SHAPE with `heads` attention heads (and half as many KV heads, at least one): tensor
    parallelism splits heads, so a TP-N server needs heads divisible by N (TP4: heads = 4).
    The default is the shape of the H200 reference runs; head_dim stays 64."""
    if not 1 <= heads <= MAX_HEADS:
        raise SglforgeError(f"tiny-model --heads {heads}: must be between 1 and {MAX_HEADS}")
    return {**SHAPE, "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2)}


def missing_requirements() -> list[str]:
    """Nothing: the model is written with the standard library alone (kept for callers that
    asked before generation 2 needed torch, transformers, tokenizers and safetensors)."""
    return []


def training_text() -> list[str]:
    """The fixed corpus the tokenizer learns from: the smoke's prompt texts (four times, so
    they tokenize compactly) and a frozen README (tinycorpus.py)."""
    from sglforge.smoke import tinycorpus

    return list(tinycorpus.PROMPTS) * 4 + ["\n".join(tinycorpus.README_0395699)]


def corpus_sha256() -> str:
    return hashlib.sha256("\x00".join(training_text()).encode()).hexdigest()


# -- tokenizer ---------------------------------------------------------------------------------


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what a ByteLevel pre-tokenizer emits)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = dict(zip(printable, printable, strict=True))
    extra = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = 256 + extra
            extra += 1
    return {byte: chr(code) for byte, code in sorted(chars.items())}


def train_bpe(texts: list[str], vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE: the special tokens, the 256 byte symbols, then merges of the most frequent
    adjacent pair (ties: the smaller pair, compared as text) until `vocab_size` tokens."""
    alphabet = byte_alphabet()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_PRETOKEN.findall(text))
    pieces = sorted(counts)
    words = [[alphabet[b] for b in piece.encode("utf-8")] for piece in pieces]
    freq = [counts[piece] for piece in pieces]
    pairs: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for index, symbols in enumerate(words):
        for pair in itertools.pairwise(symbols):
            pairs[pair] += freq[index]
            where[pair].add(index)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    vocab = {token: i for i, token in enumerate(SPECIAL)}
    for char in alphabet.values():
        vocab[char] = len(vocab)
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -negative:
            continue  # a stale entry: the pair's count changed since it was pushed
        first, second = pair
        joined = first + second
        merges.append(pair)
        vocab.setdefault(joined, len(vocab))
        changed: set[tuple[str, str]] = set()
        for index in sorted(where.pop(pair, ())):
            symbols = words[index]
            merged: list[str] = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
                    merged.append(joined)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            if len(merged) == len(symbols):
                continue
            for old in itertools.pairwise(symbols):
                pairs[old] -= freq[index]
                changed.add(old)
            for new in itertools.pairwise(merged):
                pairs[new] += freq[index]
                changed.add(new)
                where[new].add(index)
            words[index] = merged
        for other in sorted(changed):
            n = pairs.get(other, 0)
            if n > 0:
                heapq.heappush(heap, (-n, other))
            else:
                pairs.pop(other, None)
    if len(vocab) < vocab_size:
        raise SglforgeError(
            f"tiny-model: the corpus yields only {len(vocab)} tokens, not {vocab_size}"
        )
    return vocab, merges


def tokenizer_files(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, str]:
    """tokenizer.json (a Hugging Face `tokenizers` BPE with ByteLevel pre-tokenizer and
    decoder, as `tokenizers` 0.22 saves one) and tokenizer_config.json."""
    added = [
        {
            "id": i,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, token in enumerate(SPECIAL)
    ]
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level, "add_prefix_space": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }
    config = {
        "bos_token": SPECIAL[0],
        "eos_token": SPECIAL[1],
        "pad_token": SPECIAL[2],
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return {
        "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False) + "\n",
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
    }


# -- weights -----------------------------------------------------------------------------------

BF16_ONE = 0x3F80


def tensor_shapes(dims: dict[str, int], vocab: int) -> dict[str, tuple[int, ...]]:
    """Hugging Face Llama names and shapes; lm_head is tied to the embedding (not stored)."""
    hidden, inter, head = dims["hidden_size"], dims["intermediate_size"], dims["head_dim"]
    q, kv = dims["num_attention_heads"] * head, dims["num_key_value_heads"] * head
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.norm.weight": (hidden,),
    }
    for layer in range(dims["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (q, hidden),
                p + "self_attn.k_proj.weight": (kv, hidden),
                p + "self_attn.v_proj.weight": (kv, hidden),
                p + "self_attn.o_proj.weight": (hidden, q),
                p + "mlp.gate_proj.weight": (inter, hidden),
                p + "mlp.up_proj.weight": (inter, hidden),
                p + "mlp.down_proj.weight": (hidden, inter),
                p + "input_layernorm.weight": (hidden,),
                p + "post_attention_layernorm.weight": (hidden,),
            }
        )
    return shapes


def _count(dims: tuple[int, ...]) -> int:
    return math.prod(dims)


def uniform_bf16(label: str, count: int, std: float = INIT_STD) -> array:
    """`count` bfloat16 bit patterns, uniform in ±std·√3, from SHAKE-256 of `label`: IEEE double
    arithmetic to a float32 (array('f') rounds to nearest even), then to bfloat16 by integer
    round-to-nearest-even. The same on every IEEE-754 host."""
    ints = array("I")
    ints.frombytes(hashlib.shake_256(label.encode()).digest(4 * count))
    if sys.byteorder == "big":
        ints.byteswap()
    half_range = std * math.sqrt(3.0)
    step = 2.0 * half_range / 4294967296.0
    floats = array("f", [(n + 0.5) * step - half_range for n in ints])
    bits = array("I")
    bits.frombytes(floats.tobytes())
    return array("H", [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in bits])


Tensors = dict[str, tuple[tuple[int, ...], bytes]]  # name -> (shape, little-endian bf16 bytes)


def weights(dims: dict[str, int], vocab: int, seed: int) -> Tensors:
    out = {}
    for name, dims_ in tensor_shapes(dims, vocab).items():
        n = _count(dims_)
        if name.endswith("norm.weight"):
            values = array("H", [BF16_ONE]) * n  # RMSNorm weights start at 1
        else:
            values = uniform_bf16(f"sglforge-tiny-model/{GENERATION}/{seed}/{name}", n)
        if name == "model.embed_tokens.weight":
            # Tied embeddings: zero rows give <s>, </s>, <pad> logit 0, so greedy decoding
            # with random weights does not stop at once and every check sees generated text.
            for i in range(len(SPECIAL) * dims_[1]):
                values[i] = 0
        if sys.byteorder == "big":
            values.byteswap()
        out[name] = (dims_, values.tobytes())
    return out


def safetensors_bytes(tensors: Tensors) -> bytes:
    """The safetensors format: u64 little-endian header length, the JSON header (padded with
    spaces to 8 bytes), then the tensors' bytes back to back in the header's order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        dims, data = tensors[name]
        header[name] = {
            "dtype": "BF16",
            "shape": list(dims),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return (
        struct.pack("<Q", len(text)) + text + b"".join(tensors[name][1] for name in sorted(tensors))
    )


def model_config(dims: dict[str, int], vocab: int) -> dict[str, object]:
    """config.json as transformers 5.12 writes it for this LlamaConfig (without its version)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "dtype": "bfloat16",
        "eos_token_id": 1,
        "head_dim": dims["head_dim"],
        "hidden_act": "silu",
        "hidden_size": dims["hidden_size"],
        "initializer_range": INIT_STD,
        "intermediate_size": dims["intermediate_size"],
        "max_position_embeddings": dims["max_position_embeddings"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": dims["num_attention_heads"],
        "num_hidden_layers": dims["num_hidden_layers"],
        "num_key_value_heads": dims["num_key_value_heads"],
        "pad_token_id": 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": vocab,
    }


# -- writing -----------------------------------------------------------------------------------


def _prepare(directory: Path, force: bool) -> None:
    if directory.exists() and any(directory.iterdir()):
        if not force:
            raise SglforgeError(
                f"{directory} is not empty",
                hint="pass --force to replace a tiny model written there before",
            )
        if not (directory / MARKER).exists():
            raise SglforgeError(
                f"{directory} is not empty and holds no {MARKER}; refusing to "
                "delete something that is not a tiny model"
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)


def model_files(seed: int = 0, heads: int = DEFAULT_HEADS) -> dict[str, bytes]:
    """Every file of the model, by name: a pure function of (GENERATION, seed, heads)."""
    dims = shape(heads)
    vocab, merges = train_bpe(training_text(), VOCAB_SIZE)
    files = {name: text.encode() for name, text in tokenizer_files(vocab, merges).items()}
    tensors = weights(dims, len(vocab), seed)
    files["model.safetensors"] = safetensors_bytes(tensors)
    files["config.json"] = (json.dumps(model_config(dims, len(vocab)), indent=2) + "\n").encode()
    files["generation_config.json"] = (
        json.dumps({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}, indent=2) + "\n"
    ).encode()
    params = sum(_count(dims_) for dims_, _ in tensors.values())
    info = {
        "kind": "random-weight Llama (sglforge tiny-model)",
        "generation": GENERATION,
        "seed": seed,
        "vocab": len(vocab),
        "parameters": params,
        **dims,
        "corpus_sha256": corpus_sha256(),
        "procedure": "standard library only: byte-level BPE trained on the fixed corpus "
        "sglforge/smoke/tinycorpus.py; weights uniform(+-0.02*sqrt(3)) from "
        "SHAKE-256 per tensor, bfloat16 round-to-nearest-even",
        "note": "random weights: generates noise and recalls nothing; use needle-must-recall = []",
    }
    files[MARKER] = (json.dumps(info, indent=2) + "\n").encode()
    return files


def write_tiny_model(
    directory: Path, seed: int = 0, force: bool = False, heads: int = DEFAULT_HEADS
) -> str:
    files = model_files(seed, heads)  # before touching the directory: a bad --heads fails here
    _prepare(directory, force)
    for name, data in sorted(files.items()):
        (directory / name).write_bytes(data)
    info = json.loads(files[MARKER])
    digest = hashlib.sha256(files["model.safetensors"]).hexdigest()
    return (
        f"tiny model in {directory}: vocab {info['vocab']}, {info['parameters']} parameters "
        f"(bf16, seed {seed}, generation {GENERATION}, weights sha256 {digest[:16]}); files: "
        f"{', '.join(sorted(files))}"
    )
