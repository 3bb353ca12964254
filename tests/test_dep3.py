"""Plain DEP-3 patches (quilt/Debian form) next to format-patch mboxes; unknown forms refused."""

from __future__ import annotations

import datetime as dt

import pytest

from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.project import Project
from sglforge.patching.apply import PatchFailed
from sglforge.patching.lint import lint_project
from sglforge.patching.patchformat import PatchFormatError, patch_format
from tests.fixtures.gitrepos import local_patch, run_git
from tests.test_apply import edit_core, tree  # noqa: F401 - the `tree` fixture
from tests.test_security_patches import run_cli


def git_diff_of(upstreams, subject: str, files: dict[str, str]) -> bytes:
    """The `diff --git` part of a format-patch of `files` on the pin (no mail around it)."""
    patch = local_patch(upstreams.alpha, upstreams.pinned, subject, files, dep3=False)
    body = patch[patch.index(b"diff --git ") :]
    return body[: body.rindex(b"-- \n")]


DEP3_GIT = b"""\
Description: Make f3 return 33
 f3 must return 33 on sm_120 because the kernel table is indexed from 30.
 .
 Drop when upstream takes the fix.
Author: Jane Doe <jane@example.invalid>
Origin: vendor, https://example.invalid/sglforge
Bug: https://example.invalid/org/alpha/issues/3
Forwarded: not-needed
Last-Update: 2026-10-02

Free text after the header block is allowed.
---
"""

DEP3_QUILT = b"""\
From: Max Mustermann <max@example.invalid>
Subject: Make f20 return 2020
Origin: upstream, https://example.invalid/org/alpha/pull/20
Bug: https://example.invalid/org/alpha/issues/20
Forwarded: https://example.invalid/org/alpha/pull/20
Last-Update: 2026-09-30

Index: alpha/src/alpha/core.py
===================================================================
"""


def quilt_form(git_diff: bytes) -> bytes:
    """The same change as a plain `diff -u` (quilt): no git header, -p1 names."""
    hunks = git_diff[git_diff.index(b"@@ ") :]
    return (
        b"--- alpha.orig/src/alpha/core.py\t2026-09-30 10:00:00.000000000 +0000\n"
        b"+++ alpha/src/alpha/core.py\t2026-09-30 10:00:00.000000000 +0000\n" + hunks
    )


def test_plain_dep3_patches_apply_with_their_author_and_message(world, upstreams, tree):  # noqa: F811
    first = DEP3_GIT + git_diff_of(upstreams, "f3", edit_core(3, "33"))
    second = DEP3_QUILT + quilt_form(git_diff_of(upstreams, "f20", edit_core(20, "2020")))
    assert patch_format(first) == patch_format(second) == "dep3"
    world.write_series(
        "alpha",
        ["0001-f3.patch", "0002-f20.patch"],
        {"0001-f3.patch": first, "0002-f20.patch": second},
    )
    applied = tree.apply()
    assert [a.label for a in applied] == ["0001-f3.patch", "0002-f20.patch"]
    log = run_git(
        tree.path, "log", "--format=%an <%ae>|%ad|%s", "--date=short", f"{upstreams.pinned}..HEAD"
    ).splitlines()
    assert log == [
        "Max Mustermann <max@example.invalid>|2026-09-30|Make f20 return 2020",
        "Jane Doe <jane@example.invalid>|2026-10-02|Make f3 return 33",
    ]
    body = run_git(tree.path, "log", "-1", "--format=%b", "HEAD~1")
    assert body.startswith(
        "f3 must return 33 on sm_120 because the kernel table is indexed "
        "from 30.\n\nDrop when upstream takes the fix."
    )
    assert "Origin: vendor, https://example.invalid/sglforge" in body  # survives a refresh
    core = (tree.path / "src/alpha/core.py").read_text()
    assert "return 33" in core and "return 2020" in core
    assert run_git(tree.path, "status", "--porcelain") == ""
    # lint reads the DEP-3 fields of the plain form as it does the mbox's.
    lock = parse_lockfile(world.project / "lockfiles/upstreams.toml")
    findings = lint_project(Project(world.project), lock, ["alpha"], today=dt.date(2026, 11, 1))
    assert [f for f in findings if f.level == "error"] == []


def test_dep3_patch_escaping_the_tree_is_refused(world, upstreams, tree):  # noqa: F811
    escape = DEP3_QUILT + (b"--- /dev/null\n+++ alpha/../../evil.txt\n@@ -0,0 +1 @@\n+boom\n")
    link = DEP3_GIT + (
        b"diff --git a/out b/out\nnew file mode 120000\nindex 0000000..1111111\n"
        b"--- /dev/null\n+++ b/out\n@@ -0,0 +1 @@\n+/etc\n"
        b"\\ No newline at end of file\n"
    )
    world.write_series(
        "alpha",
        ["0001-escape.patch", "0002-link.patch"],
        {"0001-escape.patch": escape, "0002-link.patch": link},
    )
    start = run_git(tree.path, "rev-parse", "HEAD")
    with pytest.raises(PatchFailed) as err:
        tree.apply()
    message = str(err.value)
    assert "(0001-escape.patch): file '../../evil.txt' contains '..'" in message
    assert (
        "(0002-link.patch): symlink 'out' -> '/etc' points outside the tree (created; is absolute)"
    ) in message
    assert run_git(tree.path, "rev-parse", "HEAD") == start
    assert not (world.build_root / "evil.txt").exists()


def test_dep3_patch_needing_fuzz_is_refused(world, upstreams, tree):  # noqa: F811
    diff = git_diff_of(upstreams, "f10", edit_core(10, "1010"))
    hunk = diff.index(b"@@ -")
    first_context = diff[hunk:].split(b"\n")[1]
    diff = diff[:hunk] + diff[hunk:].replace(first_context, b" # drifted", 1)
    world.write_series("alpha", ["0001-f10.patch"], {"0001-f10.patch": DEP3_GIT + diff})
    with pytest.raises(PatchFailed, match="would apply only with fuzz 1"):
        tree.apply()


@pytest.mark.parametrize(
    ("data", "first"),
    [
        (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "diff --git a/x b/x"),
        (b"hello, this is not a patch\n", "hello, this is not a patch"),
        (b"From someone@example.invalid Mon Sep 17 00:00:00 2001\n", "From someone@example"),
        (b"", ""),
    ],
)
def test_unknown_patch_formats_are_refused(data, first):
    with pytest.raises(PatchFormatError) as err:
        patch_format(data)
    assert f"unknown patch format (first line '{first}" in str(err.value)


def test_cli_unknown_format_names_the_patch(world, upstreams):
    bare = (
        b"--- a/src/alpha/__init__.py\n+++ b/src/alpha/__init__.py\n@@ -1 +1 @@\n"
        b"-VALUE = 1\n+VALUE = 3\n"
    )
    world.write_series("alpha", ["0001-bare.patch"], {"0001-bare.patch": bare})
    proc = run_cli(world, "patches", "check", "alpha")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out
    assert (
        "series:1 (0001-bare.patch): unknown patch format (first line "
        "'--- a/src/alpha/__init__.py'): expected a `git format-patch` mbox"
    ) in out
    lint = run_cli(world, "patches", "lint", "alpha")
    assert lint.returncode != 0 and "Traceback" not in lint.stdout + lint.stderr
    assert "0001-bare.patch: unknown patch format" in lint.stdout + lint.stderr


def test_dep3_patch_without_author_is_a_clear_error(world, upstreams, tree):  # noqa: F811
    nameless = DEP3_GIT.replace(b"Author: Jane Doe <jane@example.invalid>\n", b"")
    world.write_series(
        "alpha",
        ["0001-f3.patch"],
        {"0001-f3.patch": nameless + git_diff_of(upstreams, "f3", edit_core(3, "33"))},
    )
    with pytest.raises(
        PatchFormatError,
        match=r"\(0001-f3.patch\): DEP-3 patch without a "
        r"usable Author \(or From\) field",
    ):
        tree.apply()
    lock = parse_lockfile(world.project / "lockfiles/upstreams.toml")
    findings = lint_project(Project(world.project), lock, ["alpha"], today=dt.date(2026, 11, 1))
    assert any("without Author (or From)" in f.message for f in findings if f.level == "error")


def test_refresh_turns_a_dep3_patch_into_an_mbox_keeping_its_fields(world, upstreams):
    from sglforge.cli.main import main
    from tests.test_refresh_lint import core_text, upstream_moves

    patch = DEP3_GIT + git_diff_of(upstreams, "f20", edit_core(20, "2020"))
    world.write_series("alpha", ["0001-f20.patch"], {"0001-f20.patch": patch})
    new = upstream_moves(upstreams, {"src/alpha/core.py": core_text({}, "# new\n" * 5)})
    assert main(world.cli_args() + ["patches", "refresh", "alpha", "--onto", new]) == 0
    regenerated = (world.project / "patches/alpha/0001-f20.patch").read_bytes()
    assert patch_format(regenerated) == "mbox"
    assert b"From: Jane Doe <jane@example.invalid>" in regenerated
    assert b"Subject: [PATCH] Make f3 return 33" in regenerated
    assert b"Origin: vendor, https://example.invalid/sglforge" in regenerated
    lock = parse_lockfile(world.project / "lockfiles/upstreams.toml")
    findings = lint_project(Project(world.project), lock, ["alpha"], today=dt.date(2026, 11, 1))
    assert [f for f in findings if f.level == "error"] == []
