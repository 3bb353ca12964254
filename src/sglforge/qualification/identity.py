"""Which model a run served, as a digest (issue 24): a reference recorded for one model says
nothing about another, and a receipt must name the weights it qualified.

The identity of a local model directory is the sha256 of its config, of its tokenizer files
and of its weight files, each listed, and two digests over those lists: `weights_digest` (the
weight files alone) and `digest` (everything). Hashing reads every weight byte once; for the
tiny model that is 2 MB, for a 284B checkpoint minutes of disk reads, which is what binding a
result to the weights costs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sglforge.base.fs import sha256_file

# the file that marks a directory as a tiny model sglforge wrote (smoke/tinymodel.py)
TINY_MARKER = "sglforge-tiny-model.json"

CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def _list_digest(entries: dict[str, str]) -> str:
    text = "".join(f"{name} {digest}\n" for name, digest in sorted(entries.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def model_identity(model: str) -> dict[str, Any]:
    path = Path(model)
    if not path.is_dir():
        return {
            "model": model,
            "local": False,
            "digest": None,
            "note": "not a local directory (a hub name?): the weights are not digested",
        }
    config = {n: sha256_file(path / n) for n in CONFIG_FILES if (path / n).is_file()}
    tokenizer = {n: sha256_file(path / n) for n in TOKENIZER_FILES if (path / n).is_file()}
    weights = {
        p.name: sha256_file(p)
        for p in sorted(path.iterdir())
        if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)
    }
    identity: dict[str, Any] = {
        "model": str(path),
        "local": True,
        "config": config,
        "tokenizer": tokenizer,
        "weights": weights,
        "weights_digest": _list_digest(weights),
        "digest": _list_digest({**config, **tokenizer, **weights}),
    }
    marker = path / TINY_MARKER
    if marker.is_file():
        try:
            identity["tiny_model"] = json.loads(marker.read_text())
        except (OSError, ValueError):
            identity["tiny_model"] = {"error": f"{TINY_MARKER} unreadable"}
    try:
        architecture = json.loads((path / "config.json").read_text()).get("architectures")
        identity["architectures"] = architecture if isinstance(architecture, list) else None
    except (OSError, ValueError, AttributeError):
        identity["architectures"] = None
    return identity
