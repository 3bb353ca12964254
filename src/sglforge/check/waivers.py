"""`lockfiles/api-waivers.toml`: names SGLang uses that the built kernel wheels may lack,
because the code path is behind a feature flag the target never reaches. Each needs a reason.

    [[waiver]]
    name = "deep_gemm.set_compile_mode"      # the dotted name as the check reports it
                                             # (a bare module name: the whole module)
    files = ["sglang/srt/layers/deep_gemm_wrapper/compile_utils.py"]   # optional: only there
    reason = "only with SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1; never set on sm_120"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.tomlfile import (
    Problems,
    TableReader,
    array_table_lines,
    key_line,
    load_toml,
)

DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Waiver:
    name: str
    files: tuple[str, ...]  # empty: everywhere
    reason: str
    line: int | None

    def covers(self, name: str, file: str) -> bool:
        return name == self.name and (not self.files or file in self.files)


def load_waivers(path: Path) -> list[Waiver]:
    if not path.is_file():
        return []
    data, text = load_toml(path)
    problems = Problems(path)
    top = TableReader(data, problems, "waivers", locate=lambda key: key_line(text, 1, key))
    entries = data.get("waiver", [])
    if not isinstance(entries, list):
        top.error("waiver", "must be an array of tables ([[waiver]])")
        entries = []
    data = {k: v for k, v in data.items() if k != "waiver"}
    TableReader(data, problems, "waivers", locate=lambda key: key_line(text, 1, key)).finish()
    headers = array_table_lines(text, "waiver")
    waivers = []
    for index, entry in enumerate(entries):
        start = headers[index] if index < len(headers) else 1
        if not isinstance(entry, dict):
            problems.add(f"waiver #{index + 1}: must be a table")
            continue
        reader = TableReader(entry, problems, f"waiver #{index + 1}",
                             locate=lambda key, s=start: key_line(text, s, key))
        name = reader.str("name", required=True, pattern=DOTTED.pattern,
                          describe="a dotted name like deep_gemm.fp8_mega_moe")
        reason = reader.str("reason", required=True)
        files = reader.str_list("files") or []
        reader.finish()
        if reason is not None and not reason.strip():
            reader.error("reason", "must say why the target never reaches this name")
        if name and reason:
            waivers.append(Waiver(name, tuple(files), " ".join(reason.split()), start))
    problems.raise_if_any()
    return waivers
