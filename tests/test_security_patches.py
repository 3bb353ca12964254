"""Hostile patches: symlinks left pointing outside the tree, bad quoted paths, CRLF patches.

Every refusal is checked for its message and for the tree being left as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.project import Project
from sglforge.patching.apply import PatchFailed, apply_series
from sglforge.patching.diff import DiffParseError, parse_diff, unquote
from sglforge.patching.series import load_series
from sglforge.sources.export import export_source
from sglforge.sources.fetch import fetch_sources
from tests.fixtures.gitrepos import local_patch, run_git, source_entry
from tests.test_apply import edit_core, mbox

SRC = Path(__file__).resolve().parents[1] / "src"


def run_cli(world, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `python -m sglforge` from src/, as the nox sessions run it."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "sglforge", *world.cli_args(), *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        check=False,
        timeout=300,
    )


@pytest.fixture
def links(world):
    """Upstream `links` at its pin: a tree with symlinks inside it, exported; `apply()` applies
    the project's series for it."""
    repo = world.repo("org/links")
    repo.write(
        {
            "README": "hi\n",
            "docs/guide.txt": "guide\n",
            "plain.txt": "docs\n",
            "outward.txt": "../../outside",
        }
    )
    os.symlink("docs", repo.path / "lnk")
    os.symlink(str(world.root / "outside"), repo.path / "ext")  # upstream's own link out
    (world.root / "outside").mkdir()
    (world.root / "outside/secret.txt").write_text("/SECRET-TOKEN")
    (repo.path / "sub/deep").mkdir(parents=True)
    os.symlink("../../docs/guide.txt", repo.path / "sub/deep/rel")
    os.symlink("sub/deep/../../docs", repo.path / "via")  # inside while sub/deep is a directory
    pinned = repo.commit("tree with links")
    world.write_lockfile(source_entry("links", world.url("org/links"), pinned, ref="main"))
    lock = parse_lockfile(world.project / "lockfiles/upstreams.toml")
    fetch_sources(lock, [], world.settings(), offline=False)
    exported = export_source(lock, "links", world.build_root / "src/links", world.settings())

    def apply():
        return apply_series(
            exported.path, load_series(Project(world.project), "links"), world.settings()
        )

    return SimpleNamespace(path=exported.path, pinned=pinned, apply=apply)


def refused(world, links, patches: dict[str, bytes], error: type[Exception] = PatchFailed) -> str:
    """Apply `patches` as the series; assert it is refused and nothing changed."""
    world.write_series("links", list(patches), patches)
    before = {p: os.readlink(links.path / p) for p in ("lnk", "sub/deep/rel")}
    with pytest.raises(error) as err:
        links.apply()
    assert run_git(links.path, "rev-parse", "HEAD") == links.pinned
    assert run_git(links.path, "status", "--porcelain", "--ignored") == ""
    assert {p: os.readlink(links.path / p) for p in before} == before
    assert not (links.path / "rel").exists() and not (links.path / "rel").is_symlink()
    return str(err.value)


RETARGET = (
    "diff --git a/lnk b/lnk\n{index}--- a/lnk\n+++ b/lnk\n@@ -1 +1 @@\n-docs\n"
    "\\ No newline at end of file\n+{target}\n\\ No newline at end of file\n"
)


@pytest.mark.parametrize(
    ("target", "index", "reason"),
    [
        ("/etc", "index 1111111..2222222 120000\n", "is absolute"),
        ("../../../etc", "", "climbs above the tree root"),  # the mode is not even stated
    ],
)
def test_retargeting_an_existing_symlink_outside_is_refused(world, links, target, index, reason):
    patch = mbox("retarget lnk", RETARGET.format(index=index, target=target))
    message = refused(world, links, {"0001-retarget.patch": patch})
    assert message.startswith("refused before anything was written")
    assert (
        f"(0001-retarget.patch): symlink 'lnk' -> '{target}' points outside the tree "
        f"(target changed; {reason})"
    ) in message


def test_renaming_or_copying_a_symlink_outward_is_refused(world, links):
    # sub/deep/rel -> ../../docs/guide.txt is inside; at the top it climbs out of the tree.
    rename = mbox(
        "move link",
        "diff --git a/sub/deep/rel b/rel\nsimilarity index 100%\n"
        "rename from sub/deep/rel\nrename to rel\n",
    )
    copy = mbox(
        "copy link",
        "diff --git a/sub/deep/rel b/rel2\nsimilarity index 100%\n"
        "copy from sub/deep/rel\ncopy to rel2\n",
    )
    message = refused(world, links, {"0001-rename.patch": rename, "0002-copy.patch": copy})
    assert (
        "(0001-rename.patch): symlink 'rel' -> '../../docs/guide.txt' points outside the "
        "tree (renamed from sub/deep/rel; climbs above the tree root)"
    ) in message
    # The copy's source is gone after the rename earlier in the series: nothing to copy from.
    assert "(0002-copy.patch): symlink 'rel2'" not in message
    only_copy = refused(world, links, {"0001-copy.patch": copy})
    assert (
        "(0001-copy.patch): symlink 'rel2' -> '../../docs/guide.txt' points outside the "
        "tree (copied from sub/deep/rel; climbs above the tree root)"
    ) in only_copy


def test_type_change_from_file_to_outward_symlink_is_refused(world, links):
    # git's own form of a type change: delete the file, create the link, one section each.
    typechange = mbox(
        "file becomes link",
        (
            "diff --git a/plain.txt b/plain.txt\ndeleted file mode 100644\nindex 1111111..0000000\n"
            "--- a/plain.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-docs\n"
            "diff --git a/plain.txt b/plain.txt\nnew file mode 120000\nindex 0000000..2222222\n"
            "--- /dev/null\n+++ b/plain.txt\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
        ),
    )
    # A bare mode change: the file's content (../../outside) becomes the link target.
    mode_only = mbox(
        "mode to link", "diff --git a/outward.txt b/outward.txt\nold mode 100644\nnew mode 120000\n"
    )
    message = refused(
        world, links, {"0001-typechange.patch": typechange, "0002-mode.patch": mode_only}
    )
    assert (
        "(0001-typechange.patch): symlink 'plain.txt' -> '/etc' points outside the tree "
        "(created; is absolute)"
    ) in message
    assert (
        "(0002-mode.patch): symlink 'outward.txt' -> '../../outside' points outside the "
        "tree (type changed from mode 100644 to 120000; climbs above the tree root)"
    ) in message
    assert (links.path / "plain.txt").read_text() == "docs\n"


def test_link_escaping_only_through_another_link_is_refused(world, links):
    # 'here/..' is the tree root read lexically, but here -> . makes it the root's parent.
    here = mbox(
        "links",
        "diff --git a/here b/here\nnew file mode 120000\nindex 0..1\n"
        "--- /dev/null\n+++ b/here\n@@ -0,0 +1 @@\n+.\n"
        "\\ No newline at end of file\n"
        "diff --git a/up b/up\nnew file mode 120000\nindex 0..1\n"
        "--- /dev/null\n+++ b/up\n@@ -0,0 +1 @@\n+here/..\n"
        "\\ No newline at end of file\n",
    )
    message = refused(world, links, {"0001-here.patch": here})
    assert "symlink 'up' -> 'here/..' points outside the tree (created; climbs above" in message
    assert "symlink 'here'" not in message


def test_nothing_behind_an_outward_link_is_read_or_shown(world, links):
    # A mode change would make the file's content a link target; that file lies outside.
    peek = mbox(
        "peek", "diff --git a/ext/secret.txt b/ext/secret.txt\nold mode 100644\nnew mode 120000\n"
    )
    message = refused(world, links, {"0001-peek.patch": peek})
    assert (
        f"(0001-peek.patch): file 'ext/secret.txt' goes through the symlink ext -> "
        f"{world.root / 'outside'}"
    ) in message
    assert "SECRET" not in message and "symlink 'ext/secret.txt'" not in message


def test_symlinks_that_stay_inside_are_accepted(world, links):
    retarget = mbox(
        "retarget lnk",
        RETARGET.format(index="index 1111111..2222222 120000\n", target="docs/guide.txt"),
    )
    move = mbox(
        "move link",
        "diff --git a/sub/deep/rel b/sub/deep/rel2\nsimilarity index 100%\n"
        "rename from sub/deep/rel\nrename to sub/deep/rel2\n",
    )
    world.write_series(
        "links",
        ["0001-retarget.patch", "0002-move.patch"],
        {"0001-retarget.patch": retarget, "0002-move.patch": move},
    )
    applied = links.apply()
    assert len(applied) == 2
    assert os.readlink(links.path / "lnk") == "docs/guide.txt"
    assert os.readlink(links.path / "sub/deep/rel2") == "../../docs/guide.txt"
    assert (links.path / "sub/deep/rel2").read_text() == "guide\n"


def test_crlf_symlink_mode_line_is_still_seen(world, links):
    # git accepts 'new file mode 120000\r' and creates the link; sglforge must see it too.
    patch = mbox(
        "crlf link",
        "diff --git a/l b/l\nnew file mode 120000\nindex 0..1\n"
        "--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n"
        "\\ No newline at end of file\n",
    ).replace(b"\n", b"\r\n")
    message = refused(world, links, {"0001-crlf-link.patch": patch})
    assert "symlink 'l' -> '/etc\\r' points outside the tree (created; is absolute)" in message


# ---------------------------------------------------------------------------------------------
# quoted paths


def test_git_quoted_paths_with_octal_utf8_escapes_decode(tmp_path):
    repo = tmp_path / "q"
    run_git(tmp_path, "init", "--quiet", str(repo))
    name = 'sp ace/caf\u00e9 \\ "q"\t.txt'
    (repo / "sp ace").mkdir()
    (repo / name).write_text("x\n")
    run_git(repo, "add", "-A")
    diff = subprocess.run(
        ["git", "-c", "core.quotePath=true", "diff", "--cached"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    assert b'"a/sp ace/caf\\303\\251 \\\\ \\"q\\"\\t.txt"' in diff  # git's C-style quoting
    (file,) = parse_diff(diff)
    assert file.new_path == name and file.old_path is None
    assert unquote('"\\342\\202\\254\\a\\"x\\\\"') == '\u20ac\a"x\\'
    assert unquote('"\\377"') == "\udcff"  # not UTF-8: kept as a surrogate, not a crash


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        ('"b/y\\"', "ends in a backslash"),
        ('"b/caf\\u00e9"', "unknown escape '\\u'"),
        ('"b/x\\38"', "bad octal escape '\\38'"),
        ('"b/x\\400"', "bad octal escape '\\400'"),
        ('"b/x', "unterminated quoted path"),
        ('"b/x\\000y"', "contains a NUL byte"),
    ],
)
def test_bad_quoted_paths_are_diff_errors_with_a_line(token, problem):
    diff = (
        f'From: x\n\ndiff --git "a/x" {token}\nnew file mode 100644\n--- /dev/null\n'
        f"+++ {token}\n@@ -0,0 +1 @@\n+a\n"
    ).encode()
    with pytest.raises(DiffParseError) as err:
        parse_diff(diff)
    assert err.value.line == 3
    assert problem in str(err.value)


def test_cli_bad_quoted_path_is_a_clear_error_without_traceback(world, upstreams):
    patch = mbox(
        "odd name",
        'diff --git "a/src/x" "b/src/y\\"\nnew file mode 100644\n'
        'index 0000000..1111111\n--- /dev/null\n+++ "b/src/y\\"\n'
        "@@ -0,0 +1 @@\n+a\n",
    )
    world.write_series("alpha", ["0001-odd.patch"], {"0001-odd.patch": patch})
    proc = run_cli(world, "patches", "check", "alpha")
    assert proc.returncode == 1  # patches check reports every series, then fails (1)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert (
        "series:1 (0001-odd.patch): malformed diff at line 8 of 0001-odd.patch: quoted "
        "path '\"b/src/y\\\\\"' ends in a backslash"
    ) in proc.stdout


# ---------------------------------------------------------------------------------------------
# CRLF


def test_crlf_converted_patch_gets_a_line_ending_explanation(world, upstreams):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series(
        "alpha", ["0001-fix-f3.patch"], {"0001-fix-f3.patch": patch.replace(b"\n", b"\r\n")}
    )
    proc = run_cli(world, "patches", "check", "alpha")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert "Traceback" not in out
    assert "series:1 (0001-fix-f3.patch) does not apply:" in out
    assert "file: src/alpha/core.py" in out and "hunk: @@ -" in out
    assert "line endings differ: the patch has CRLF, the file has LF" in out
    assert "patch does not apply" not in out  # not git's bare message


# ---------------------------------------------------------------------------------------------
# where unidiff alone falls short (why diffparse keeps its thin layer)


def test_unidiff_alone_misreads_crlf_headers_and_leaves_paths_quoted():
    from unidiff import PatchSet
    from unidiff.errors import UnidiffParseError

    crlf_link = (
        "diff --git a/l b/l\r\nnew file mode 120000\r\nindex 0..1\r\n"
        "--- /dev/null\r\n+++ b/l\r\n@@ -0,0 +1 @@\r\n+/etc\r\n"
    )
    (patched,) = PatchSet(crlf_link.splitlines(keepends=True))
    assert patched.target_mode is None and not patched.is_symlink  # git would make a link
    (ours,) = parse_diff(crlf_link.encode())
    assert ours.new_mode == "120000" and ours.is_new

    crlf_delete = (
        "diff --git a/x b/x\r\ndeleted file mode 100644\r\nindex 1..0\r\n"
        "--- a/x\r\n+++ /dev/null\r\n@@ -1 +0,0 @@\r\n-a\r\n"
    )
    with pytest.raises(UnidiffParseError, match="Target without source"):
        PatchSet(crlf_delete.splitlines(keepends=True))
    (ours,) = parse_diff(crlf_delete.encode())
    assert ours.is_deleted and ours.hunks[0].lines == [b"-a\r"]  # the CR is kept for the check

    quoted = (
        'diff --git "a/caf\\303\\251" "b/caf\\303\\251"\nnew file mode 100644\n'
        'index 0..1\n--- /dev/null\n+++ "b/caf\\303\\251"\n@@ -0,0 +1 @@\n+x\n'
    )
    (patched,) = PatchSet(quoted.splitlines(keepends=True))
    assert patched.path == '"caf\\303\\251"'  # still quoted, escapes undecoded
    (ours,) = parse_diff(quoted.encode())
    assert ours.new_path == "caf\u00e9"


# ---------------------------------------------------------------------------------------------
# Series and patch files are read as regular files only


def test_patch_file_that_is_a_symlink_is_refused_without_reading_it(world, upstreams, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    series = world.write_series("alpha", ["0001-innocent.patch"])
    (series.parent / "0001-innocent.patch").symlink_to(secret)
    proc = run_cli(world, "patches", "lint", "alpha")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert "0001-innocent.patch is a symbolic link" in out
    assert "TOP-SECRET-CONTENT" not in out


def test_series_file_that_is_a_symlink_is_refused(world, upstreams, tmp_path):
    outside = tmp_path / "elsewhere-series"
    outside.write_text("0001-x.patch\n")
    series = world.write_series("alpha", [])
    series.unlink()
    series.symlink_to(outside)
    with pytest.raises(ConfigErrors) as err:
        load_series(Project(world.project), "alpha")
    assert "the series file is a symbolic link" in str(err.value)


# ---------------------------------------------------------------------------------------------
# Paths are checked exactly where git writes them (absolute-form names, `//`, the p1 strip)


def _new_link(header: str, plus: str, target: str) -> str:
    return (
        f"diff --git {header}\nnew file mode 120000\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ {plus}\n@@ -0,0 +1 @@\n+{target}\n"
        "\\ No newline at end of file\n"
    )


# git strips `+++ /sub/e` to `sub/e` (the leading '/' is the first component's end); the old
# parser checked `e`. From `e`, y/../…/etc stays inside (y -> a/b/…/j is ten levels deep); from
# `sub/e`, y is sub/y -> .., the tree root, and ten `..` climb from there to the host's /etc.
ESCAPE_ONE_LEVEL_AWAY = (
    _new_link("a/y b/y", "b/y", "a/b/c/d/e/f/g/h/i/j")
    + _new_link("a/sub/y b/sub/y", "b/sub/y", "..")
    + _new_link("/sub/e /sub/e", "/sub/e", "y/" + "../" * 10 + "etc")
)


def test_absolute_form_diff_path_is_refused_not_checked_one_level_away(world, links):
    message = refused(
        world, links, {"0001-away.patch": mbox("away", ESCAPE_ONE_LEVEL_AWAY)}, SglforgeError
    )
    assert (
        "(0001-away.patch): malformed diff at line 24 of 0001-away.patch: file name "
        "'/sub/e' is an absolute path — refused"
    ) in message
    assert not (links.path / "sub/e").is_symlink() and not (links.path / "e").is_symlink()


def test_cli_check_and_apply_refuse_the_absolute_form_escape(world, links):
    world.write_series(
        "links", ["0001-away.patch"], {"0001-away.patch": mbox("away", ESCAPE_ONE_LEVEL_AWAY)}
    )
    for verb in (("patches", "check", "links"), ("patches", "apply", "links")):
        proc = run_cli(world, *verb)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, (verb, out)
        assert "Traceback" not in out
        assert "file name '/sub/e' is an absolute path — refused" in out, out
    assert not [p for p in world.build_root.rglob("*") if p.is_symlink() and p.name == "e"]


DEP3_HEAD = "Description: x\nAuthor: A <a@example.invalid>\n\n"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/sub/e", "file name '/sub/e' is an absolute path — refused"),  # a plain (quilt) diff
        ('"/sub/\\145"', "file name '/sub/e' is an absolute path — refused"),  # quoted, \145 = e
        (
            "b//etc/x",
            (
                "file name 'b//etc/x' is the absolute path '/etc/x' once its leading "
                "directory is stripped — refused"
            ),
        ),
    ],
)
def test_every_absolute_form_of_a_name_is_refused(world, links, name, problem):
    patch = f"{DEP3_HEAD}--- /dev/null\n+++ {name}\n@@ -0,0 +1 @@\n+x\n".encode()
    message = refused(world, links, {"0001-abs.patch": patch}, SglforgeError)
    assert f"malformed diff at line 5 of 0001-abs.patch: {problem}" in message


@pytest.mark.parametrize("mode", ["120777", "0120000"])
def test_a_symlink_mode_git_accepts_in_any_spelling_is_seen_before_writing(world, links, mode):
    # git reads modes with strtoul(…, 8) and keeps only the file type: both make a link.
    patch = mbox(
        "odd mode",
        f"diff --git a/l b/l\nnew file mode {mode}\nindex 0..1\n"
        "--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n"
        "\\ No newline at end of file\n",
    )
    message = refused(world, links, {"0001-mode.patch": patch})
    assert message.startswith("refused before anything was written")
    assert "symlink 'l' -> '/etc' points outside the tree (created; is absolute)" in message


def test_names_git_reads_differently_are_refused(world, links):
    # A space before the timestamp: git recognises the date and writes `plain.txt`; a reader
    # that splits at a tab (unidiff) sees a file called `plain.txt 2026-01-01 …`.
    stamp = " 2026-01-01 00:00:00.000000000 +0000"
    patch = (
        f"{DEP3_HEAD}--- a/plain.txt{stamp}\n+++ b/plain.txt{stamp}\n@@ -1 +1 @@\n-docs\n+changed\n"
    ).encode()
    message = refused(world, links, {"0001-stamp.patch": patch})
    assert (
        "(0001-stamp.patch): file section 1 (line 4): git writes 'plain.txt' and reads "
        f"'plain.txt', sglforge read 'plain.txt{stamp}'"
    ) in message
    assert "refused (paths are checked only where git writes them)" in message


def test_an_mbox_is_checked_as_git_am_extracts_it(world, links):
    # Quoted-printable: the file says `sub/=65`, git am decodes and applies `sub/e`.
    qp = mbox("qp", ESCAPE_ONE_LEVEL_AWAY.replace("/sub/e", "a/sub/=65")).replace(
        b"Subject: [PATCH] qp\n",
        b"Subject: [PATCH] qp\nMIME-Version: 1.0\nContent-Type: "
        b"text/plain; charset=UTF-8\nContent-Transfer-Encoding: quoted-printable\n",
    )
    message = refused(world, links, {"0001-qp.patch": qp})
    assert (
        "(0001-qp.patch): the patch git am would apply is not the text of the file (a "
        "transfer-encoded or multipart mail)"
    ) in message
    # A second 'From ' line makes git am apply two mails; the series names one patch a file.
    two = mbox("one", RETARGET.format(index="", target="docs/guide.txt")) + mbox(
        "two", _new_link("a/q b/q", "b/q", "docs")
    )
    message = refused(world, links, {"0001-two.patch": two})
    assert "(0001-two.patch): git am would read 2 messages from it, not one" in message


def test_after_commit_check_reads_what_git_wrote(world, links):
    from sglforge.patching.apply import ResolvedEntry, check_links_in_tree
    from sglforge.patching.series import LocalPatch

    # A commit that leaves sub/e -> outside, described by a reading that named only `e` (the
    # old parser's view of `+++ /sub/e`): what git did is checked, not what was predicted.
    os.symlink("../../..", links.path / "sub/e")
    run_git(links.path, "add", "sub/e")
    run_git(links.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    (file,) = parse_diff(_new_link("a/e b/e", "b/e", "../../..").encode())
    item = ResolvedEntry(
        LocalPatch("0001-x.patch", links.path / "x", b"", 1), "series:1", b"", [file]
    )
    with pytest.raises(PatchFailed, match="git changed 'sub/e', a path sglforge did not read"):
        check_links_in_tree(links.path, item, links.pinned)
    (file,) = parse_diff(_new_link("a/sub/e b/sub/e", "b/sub/e", "../../..").encode())
    item = ResolvedEntry(item.entry, "series:1", b"", [file])
    with pytest.raises(
        PatchFailed,
        match="symlink 'sub/e' -> '../../..' points outside the tree: climbs above the tree root",
    ):
        check_links_in_tree(links.path, item, links.pinned)


def test_after_commit_check_sees_untouched_links_moved_outside(world, links):
    from sglforge.patching.apply import (
        ResolvedEntry,
        check_links_in_tree,
        upstream_escapes,
    )
    from sglforge.patching.series import LocalPatch

    allowed = upstream_escapes(links.path)
    assert allowed == {"ext": os.fsencode(world.root / "outside")}  # upstream's own link out
    run_git(links.path, "rm", "-q", "sub/deep/rel")  # (git removes the emptied sub/ too)
    (links.path / "sub").mkdir(exist_ok=True)
    os.symlink("..", links.path / "sub/deep")
    run_git(links.path, "add", "sub/deep")
    run_git(links.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    files = parse_diff(
        (
            "diff --git a/sub/deep/rel b/sub/deep/rel\ndeleted file mode 120000\n"
            "--- a/sub/deep/rel\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
            + _new_link("a/sub/deep b/sub/deep", "b/sub/deep", "..")
        ).encode()
    )
    item = ResolvedEntry(
        LocalPatch("0001-x.patch", links.path / "x", b"", 1), "series:1", b"", files
    )
    check_links_in_tree(links.path, item, links.pinned)  # without `allowed`: touched links only
    with pytest.raises(
        PatchFailed,
        match=r"series:1: symlink 'via' -> 'sub/deep/../../docs' "
        r"points outside the tree now that it is applied",
    ):
        check_links_in_tree(links.path, item, links.pinned, allowed)


def test_untouched_link_sent_outside_through_a_changed_directory_is_refused(world, links):
    # No section names `via` (-> sub/deep/../../docs), but once sub/deep is a link to `..`
    # (itself inside: sub/.. is the root) `via` climbs two levels above the root.
    patch = mbox(
        "dir becomes link",
        (
            "diff --git a/sub/deep/rel b/sub/deep/rel\ndeleted file mode 120000\n"
            "index 1111111..0000000\n--- a/sub/deep/rel\n+++ /dev/null\n@@ -1 +0,0 @@\n"
            "-../../docs/guide.txt\n\\ No newline at end of file\n"
            + _new_link("a/sub/deep b/sub/deep", "b/sub/deep", "..")
        ),
    )
    world.write_series("links", ["0001-dir.patch"], {"0001-dir.patch": patch})
    with pytest.raises(PatchFailed) as err:
        links.apply()
    message = str(err.value)
    assert message.startswith("refused before anything was written")
    assert (
        "(0001-dir.patch): symlink 'via' -> 'sub/deep/../../docs' points outside the tree "
        "once the whole series is applied (climbs above the tree root)"
    ) in message
    assert run_git(links.path, "rev-parse", "HEAD") == links.pinned
    assert (links.path / "sub/deep").is_dir() and not (links.path / "sub/deep").is_symlink()
