"""Issue 37, item 4: `sglforge tiny-model` writes the same bytes on any host, from any checkout.

The corpus is fixed and committed (sglforge/smoke/tinycorpus.py), the trainer and the weights
are the standard library's arithmetic, so these tests run on CI (no torch) and prove what the
GPU host serves. The pinned digests below change only with a new GENERATION: a model (and the
references recorded on it) never changes because sglforge's code or docs did.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.smoke import tinymodel

# GENERATION 2, seed 0, heads 2: the H200 profiles' model (bench/smoke-h200.json serves it).
PINNED = {
    "config.json": "a41c6e3f506d61d4371ba33132543f3f43ccedd088d11235cdb7c15e37c2f22e",
    "generation_config.json": "407e309076e3a2b1ebbfc51a2e3388ba44c4dad59bf906b7b23b6b4791f5489e",
    "model.safetensors": "ba1649fd4d304629380729ac9923c1e1d08afd91d339fd11a9d15c99ebac0f95",
    "tokenizer.json": "6ff1b6c5143c1f019fd9180fc5b6c1fc785e14ff1ca4d4c05ed6bdb928ffe23e",
    "tokenizer_config.json": "ac1b753aa4412b77c5dd8c05d44cdff565c6e38b9cfdb330ceb6bd94cfa5730b",
}
CORPUS_SHA256 = "95e97d317797b660fd6766ce40f2e12cd3248839fb605cbf404a55b2b4d25a2d"
SRC = Path(tinymodel.__file__).resolve().parents[2]


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_two_generations_in_different_directories_are_identical(tmp_path: Path) -> None:
    """Two separate processes, other working directories and paths: the same files."""
    outs = []
    for name in ("a/model", "b/deeper/other-name"):
        out = tmp_path / name
        cwd = tmp_path / name.split("/")[0]
        cwd.mkdir(parents=True, exist_ok=True)
        run = subprocess.run(
            [sys.executable, "-m", "sglforge", "tiny-model", str(out)],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(SRC), "PYTHONHASHSEED": str(len(name))},
        )
        assert run.returncode == 0, run.stderr
        outs.append(_digests(out))
    assert outs[0] == outs[1]
    assert set(outs[0]) == {*PINNED, tinymodel.MARKER}


def test_the_bytes_are_the_pinned_ones() -> None:
    files = tinymodel.model_files(seed=0, heads=2)
    got = {
        name: hashlib.sha256(data).hexdigest()
        for name, data in files.items()
        if name != tinymodel.MARKER
    }
    assert got == PINNED, (
        "the tiny model's bytes changed: a new corpus or procedure is a new "
        "model; bump tinymodel.GENERATION and re-pin"
    )
    info = json.loads(files[tinymodel.MARKER])
    assert info["generation"] == tinymodel.GENERATION == 2
    assert info["corpus_sha256"] == CORPUS_SHA256 == tinymodel.corpus_sha256()
    assert info["parameters"] == 819840 and info["vocab"] == tinymodel.VOCAB_SIZE
    assert "torch" not in info and "transformers" not in info  # no host library in the bytes


def test_seed_and_heads_give_other_weights_same_tokenizer() -> None:
    base = tinymodel.model_files(seed=0, heads=2)
    other_seed = tinymodel.model_files(seed=1, heads=2)
    four = tinymodel.model_files(seed=0, heads=4)
    assert other_seed["model.safetensors"] != base["model.safetensors"]
    assert four["model.safetensors"] != base["model.safetensors"]
    assert other_seed["tokenizer.json"] == four["tokenizer.json"] == base["tokenizer.json"]
    assert json.loads(four["config.json"])["num_attention_heads"] == 4


def test_the_corpus_is_fixed_not_sglforges_sources() -> None:
    text = "\n".join(tinymodel.training_text())
    assert "The capital of France is" in text and "secret passphrase" in text
    assert "def write_tiny_model" not in text  # generation 1 learned from the live sources


def test_safetensors_layout_is_what_loaders_read() -> None:
    data = tinymodel.model_files()["model.safetensors"]
    (size,) = struct.unpack("<Q", data[:8])
    assert size % 8 == 0
    header = json.loads(data[8 : 8 + size])
    assert header.pop("__metadata__") == {"format": "pt"}
    spans = sorted(tuple(t["data_offsets"]) for t in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(data) - 8 - size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # back to back, no holes
    embed = header["model.embed_tokens.weight"]
    assert embed["dtype"] == "BF16" and embed["shape"] == [4096, 128]
    assert "lm_head.weight" not in header  # tied
    start = 8 + size + embed["data_offsets"][0]
    assert data[start : start + 3 * 128 * 2] == bytes(3 * 128 * 2)  # <s>, </s>, <pad> rows zero
    norm = header["model.norm.weight"]
    start = 8 + size + norm["data_offsets"][0]
    assert set(struct.unpack("<128H", data[start : start + 256])) == {tinymodel.BF16_ONE}


def test_uniform_bf16_rounds_to_nearest_even() -> None:
    values = tinymodel.uniform_bf16("x", 4096)
    floats = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in values]
    bound = tinymodel.INIT_STD * 3**0.5
    assert all(-bound * 1.01 < f < bound * 1.01 for f in floats)
    assert abs(sum(f * f for f in floats) / len(floats) - tinymodel.INIT_STD**2) < 4e-5
    assert tinymodel.uniform_bf16("x", 16) == values[:16]  # a prefix of the same stream


def test_bpe_merges_are_consistent() -> None:
    vocab, merges = tinymodel.train_bpe(tinymodel.training_text(), tinymodel.VOCAB_SIZE)
    assert len(vocab) == tinymodel.VOCAB_SIZE
    assert [vocab[t] for t in tinymodel.SPECIAL] == [0, 1, 2]
    assert sorted(vocab.values()) == list(range(len(vocab)))
    assert all(a in vocab and b in vocab and a + b in vocab for a, b in merges)
    assert all(" " not in a + b for a, b in merges)  # "a b" is how tokenizer.json lists them


@pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None,
    reason="needs the `tokenizers` library (the serving stack has it)",
)
def test_tokenizer_loads_and_round_trips(tmp_path: Path) -> None:  # pragma: no cover
    from tokenizers import Tokenizer

    tinymodel.write_tiny_model(tmp_path / "m")
    tok = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    for text in ("The capital of France is", "def fibonacci(n):", "Hello wörld ✓ 漢字"):
        ids = tok.encode(text).ids
        assert tok.decode(ids) == text
    assert len(tok.encode("The capital of France is").ids) == 5
