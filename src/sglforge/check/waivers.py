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


@dataclass(frozen=True)
class Alias:
    """`module` is a meta package that re-exports `provider` at run time (e.g. NIXL's `nixl`
    selects `nixl_cu13` by the CUDA major and aliases its submodules in sys.modules): a name
    missing from `module` is looked up in `provider`."""

    module: str
    provider: str
    reason: str
    line: int | None


@dataclass(frozen=True)
class ApiPolicy:
    waivers: tuple[Waiver, ...] = ()
    aliases: tuple[Alias, ...] = ()


TABLES = ("waiver", "alias")


def load_policy(path: Path) -> ApiPolicy:
    """Both tables of the file; every problem of both reported together."""
    if not path.is_file():
        return ApiPolicy()
    data, text = load_toml(path)
    problems = Problems(path)
    top = TableReader(data, problems, "waivers", locate=lambda key: key_line(text, 1, key))
    tables = {}
    for table in TABLES:
        entries = data.get(table, [])
        if not isinstance(entries, list):
            top.error(table, f"must be an array of tables ([[{table}]])")
            entries = []
        tables[table] = entries
    rest = {k: v for k, v in data.items() if k not in TABLES}
    TableReader(rest, problems, "waivers", locate=lambda key: key_line(text, 1, key)).finish()
    waivers, aliases = [], []
    for table, entries in tables.items():
        headers = array_table_lines(text, table)
        for index, entry in enumerate(entries):
            start = headers[index] if index < len(headers) else 1
            if not isinstance(entry, dict):
                problems.add(f"{table} #{index + 1}: must be a table")
                continue
            reader = TableReader(
                entry,
                problems,
                f"{table} #{index + 1}",
                locate=lambda key, s=start: key_line(text, s, key),
            )
            if table == "waiver":
                name = reader.str(
                    "name",
                    required=True,
                    pattern=DOTTED.pattern,
                    describe="a dotted name like deep_gemm.fp8_mega_moe",
                )
                files = reader.str_list("files") or []
            else:
                module = reader.str(
                    "module",
                    required=True,
                    pattern=DOTTED.pattern,
                    describe="a module name like nixl",
                )
                provider = reader.str(
                    "provider",
                    required=True,
                    pattern=DOTTED.pattern,
                    describe="a module name like nixl_cu13",
                )
            reason = reader.str("reason", required=True)
            reader.finish()
            if reason is not None and not reason.strip():
                reader.error(
                    "reason",
                    "must say why the target never reaches this name"
                    if table == "waiver"
                    else "must say why the module is an alias",
                )
                continue
            if not reason:
                continue
            reason = " ".join(reason.split())
            if table == "waiver" and name:
                waivers.append(Waiver(name, tuple(files), reason, start))
            elif table == "alias" and module and provider:
                aliases.append(Alias(module, provider, reason, start))
    problems.raise_if_any()
    return ApiPolicy(tuple(waivers), tuple(aliases))
