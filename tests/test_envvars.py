"""One documented list of every SGLFORGE_* variable (issue 33 item 12): `sglforge config
--env` prints it, docs/reference.md carries it, and both are checked against what the code
reads, so neither can go stale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sglforge.base.tomlfile import key_specs
from sglforge.inputs.envvars import VARIABLES
from sglforge.inputs.settings import (
    COMPILER_CACHE,
    CONFIG_ENV,
    WHEEL_CACHE,
    Settings,
)

REPO = Path(__file__).resolve().parents[1]
# An environment variable is read by its name as a string ("SGLFORGE_X", 'SGLFORGE_X') or,
# in the shell scripts sglforge writes, as $SGLFORGE_X / ${SGLFORGE_X}; a bare identifier is a
# Python name (nox_sessions.SGLFORGE_CHECKOUT), not a variable.
NAME = re.compile(r"""(?:["'$]|\$\{)(SGLFORGE_[A-Z0-9]+(?:_[A-Z0-9]+)*)\b""")
# frozen text (a copy of the README at 0395699, the tiny model's corpus), and the list itself
NOT_CODE = {
    REPO / "src" / "sglforge" / "smoke" / "tinycorpus.py",
    REPO / "src" / "sglforge" / "inputs" / "envvars.py",
}


def names_in(paths: list[Path]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in paths:
        if path in NOT_CODE:
            continue
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


def code_files() -> list[Path]:
    return [
        *sorted((REPO / "src" / "sglforge").rglob("*.py")),
        REPO / "noxfile.py",
        *sorted((REPO / "demo").glob("*.py")),
    ]


def test_the_list_is_exactly_what_the_code_reads() -> None:
    read = names_in(code_files())
    listed = {v.name for v in VARIABLES if v.kind in ("setting", "internal")}
    unlisted = sorted(set(read) - listed)
    assert not unlisted, (
        "read by the code but not in src/sglforge/inputs/envvars.py (add them, with what they "
        f"do): { {n: read[n] for n in unlisted} }"
    )
    gone = sorted(listed - set(read))
    assert not gone, f"listed in envvars.py but nothing reads them any more: {gone}"


def test_every_entry_names_the_files_that_read_it() -> None:
    for var in VARIABLES:
        assert var.kind in ("setting", "internal", "tests"), var
        for where in var.read_in:
            text = (REPO / where).read_text(encoding="utf-8")
            assert var.name in text, f"{var.name}: not in {where}"
    assert len({v.name for v in VARIABLES}) == len(VARIABLES)


def test_the_test_suites_switches_are_listed() -> None:
    read = names_in([*sorted((REPO / "tests").rglob("*.py")), REPO / ".ci" / "run"])
    switches = {
        name
        for name, files in read.items()
        if any(
            re.search(rf"environ(?:\.get\(|\[)\"{name}\"", (REPO / f).read_text())
            for f in files
            if f.startswith("tests/")
        )
    } - {v.name for v in VARIABLES if v.kind != "tests"}
    assert switches == {v.name for v in VARIABLES if v.kind == "tests"}


def test_every_setting_of_the_settings_model_is_listed() -> None:
    declared = {CONFIG_ENV} | {
        spec.env
        for model in (Settings, COMPILER_CACHE.fields, WHEEL_CACHE.fields)
        for spec in key_specs(model).values()
        if spec.env
    }
    settings = {v.name for v in VARIABLES if v.kind == "setting"}
    assert declared <= settings, sorted(declared - settings)


def test_config_env_prints_every_variable_with_its_value_masked(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SGLFORGE_BUILD_ROOT": "/opt/sglforge-build",
        "SGLFORGE_WHEEL_CACHE_REMOTE": "https://ci:s3cret@cache.example/sglforge/",
    }
    env.pop("SGLFORGE_INDEX", None)
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", "config", "--env"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    printed = re.findall(r"^  (SGLFORGE_\w+) = ", out, re.M)
    assert printed == [v.name for v in sorted(VARIABLES, key=lambda v: _kind_order(v.kind))]
    assert "  SGLFORGE_BUILD_ROOT = '/opt/sglforge-build'" in out
    assert "  SGLFORGE_INDEX = (unset)" in out
    assert "s3cret" not in out and "https://ci:***@cache.example/sglforge/" in out
    for var in VARIABLES:
        assert var.doc in out


def _kind_order(kind: str) -> int:
    return ("setting", "internal", "tests").index(kind)


def test_docs_reference_lists_the_same_variables() -> None:
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text[text.index("## Environment variables") :]
    section = section[: section.index("\n## ", 1)]
    documented = re.findall(r"^- `(SGLFORGE_\w+)` — (.+)$", section, re.M)
    assert [n for n, _ in documented] == [
        v.name for v in sorted(VARIABLES, key=lambda v: _kind_order(v.kind))
    ]
    docs = dict(documented)
    for var in VARIABLES:
        assert docs[var.name] == var.doc, var.name
