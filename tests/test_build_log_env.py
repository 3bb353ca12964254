"""The build log's `# env` header is one line per variable and reads back exactly.
SGLFORGE_PREFIX_MAP_FLAGS holds one flag per line; written raw, its later lines broke the
header, and bench/tu_recheck.py (which recompiles a build's TUs with the logged environment)
lost every variable after it (SGLFORGE_REAL_NVCC, SOURCE_DATE_EPOCH, TMPDIR, TZ, ...)."""

from __future__ import annotations

from pathlib import Path

from bench.tu_recheck import build_environment
from sglforge.builder.compiler_cache import mask_env_lines

ENV = {
    "PATH": "/opt/tools/bin:/usr/bin",
    "SGLFORGE_PREFIX_MAP_FLAGS": "-ffile-prefix-map=/a=/x\n-ffile-prefix-map=/b=/y",
    "ODD": "back\\slash and a literal \\n, then a real\nnewline",
    "TZ": "UTC",
    "CCACHE_REMOTE_STORAGE": "http://user:s3cret@cache.example:8080/",
}


def test_the_header_has_one_line_per_variable_and_reads_back(tmp_path: Path) -> None:
    header = mask_env_lines(ENV)
    lines = header.splitlines()
    assert len(lines) == len(ENV) and all(line.startswith("# env ") for line in lines)
    assert "s3cret" not in header
    log = tmp_path / "recipe.log"
    log.write_text("# sglforge build log: recipe\n" + header + "$ cd /src\nbuild output\n")
    read = build_environment(log)
    assert read.pop("CCACHE_DISABLE") == "1"
    assert read.pop("CCACHE_REMOTE_STORAGE") == "http://user:***@cache.example:8080/"
    assert read == {k: v for k, v in ENV.items() if k != "CCACHE_REMOTE_STORAGE"}


def test_a_log_from_before_the_escapes_still_reads(tmp_path: Path) -> None:
    log = tmp_path / "old.log"
    log.write_text(
        "# env PATH=/usr/bin\n# env SGLFORGE_PREFIX_MAP_FLAGS=-ffile-prefix-map=/a=/x\n"
        "-ffile-prefix-map=/b=/y\n# env TZ=UTC\n$ cd /src\n# env LATE=no\n"
    )
    read = build_environment(log)
    assert read["SGLFORGE_PREFIX_MAP_FLAGS"] == ENV["SGLFORGE_PREFIX_MAP_FLAGS"]
    assert read["TZ"] == "UTC" and "LATE" not in read
