"""noxfile.py as `nox -l` shows it (issue 16): each session's first docstring line is the
description nox lists, so it must be short and a complete sentence; `nox -s dev` gives the
`sglforge` command."""

from __future__ import annotations

import ast
from pathlib import Path

NOXFILE = Path(__file__).resolve().parents[1] / "noxfile.py"
MAX_DESCRIPTION = 70


def _is_session(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "session"


def sessions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(NOXFILE.read_text(encoding="utf-8"))
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(_is_session(d) for d in node.decorator_list)
    }


def test_every_session_has_a_short_complete_description() -> None:
    found = sessions()
    assert {"plan", "fetch", "patches", "smoke", "doctor", "tests", "dev"} <= set(found)
    problems = []
    for name, node in found.items():
        doc = ast.get_docstring(node)
        if not doc:
            problems.append(f"{name}: no docstring")
            continue
        first = doc.splitlines()[0].strip()
        if len(first) > MAX_DESCRIPTION:
            problems.append(f"{name}: first line has {len(first)} chars (> {MAX_DESCRIPTION})")
        if not first.endswith("."):
            problems.append(f"{name}: first line is not a full sentence: {first!r}")
        if first.count("(") != first.count(")"):
            problems.append(f"{name}: first line leaves a parenthesis open: {first!r}")
    assert not problems, "\n".join(problems)


def test_dev_session_installs_sglforge_editable_and_is_not_a_default() -> None:
    node = sessions()["dev"]
    source = ast.unparse(node)
    assert "session.install('-e', '.')" in source
    assert "activate" in source
    [decorator] = node.decorator_list
    assert isinstance(decorator, ast.Call)
    assert any(
        k.arg == "default" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in decorator.keywords
    )


def _default(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "default" and isinstance(keyword.value, ast.Constant):
                    return bool(keyword.value.value)
    return True


def test_sessions_that_write_are_not_defaults() -> None:
    """Issue 23 item 15: docs/architecture.md says so; patches/bundle/publish were not."""
    found = sessions()
    writing = ("patches", "build", "verify", "lock_runtime", "bundle", "publish", "dev", "bench")
    assert [name for name in writing if _default(found[name])] == []


def test_the_noxfile_stays_thin() -> None:
    """The sessions' logic lives in the package (argument checks, Python discovery, the
    recipe listing): no session body is more than a few statements."""
    long = [name for name, node in sessions().items() if len(node.body) > 6]
    assert not long, long
    source = NOXFILE.read_text(encoding="utf-8")
    for marker in ("import subprocess", "glob(", "OPTIONS_WITH_VALUE", "def _probe_python"):
        assert marker not in source, marker
