"""Strict series application on fixture repos: one commit per entry, explained refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.cli.main import main
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.project import Project
from sglforge.patching.apply import PatchFailed, apply_series
from sglforge.patching.backport import digest_of
from sglforge.patching.series import load_series
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import export_source
from sglforge.sources.fetch import GitWant, fetch_commit, fetch_sources
from tests.fixtures.gitrepos import local_patch, run_git


def edit_core(index: int, value: str) -> dict[str, str]:
    text = "".join(f"def f{i}():\n    return {value if i == index else i}\n\n" for i in range(30))
    return {"src/alpha/core.py": text}


@pytest.fixture
def tree(world, upstreams):
    """A fresh export of alpha at its pin, and a function applying the project's series."""
    lock = parse_lockfile(world.project / "lockfiles/upstreams.toml")
    fetch_sources(lock, [], world.settings(), offline=False)
    exported = export_source(lock, "alpha", world.build_root / "src/alpha", world.settings())

    def apply():
        series = load_series(Project(world.project), "alpha")
        return apply_series(exported.path, series, world.settings())

    return SimpleNamespace(path=exported.path, apply=apply)


def head(path):
    return run_git(path, "rev-parse", "HEAD")


def mbox(subject: str, diff: str) -> bytes:
    return (
        f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: Someone <someone@example.invalid>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
        f"Subject: [PATCH] {subject}\n\nDescription: {subject}\n---\n{diff}-- \n2.39.5\n"
    ).encode()


def test_series_applies_as_one_commit_per_patch(world, upstreams, tree):
    first = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    second = local_patch(upstreams.alpha, upstreams.pinned, "Fix f20", edit_core(20, "2020"))
    world.write_series(
        "alpha",
        ["# ours", "0001-fix-f3.patch", "0002-fix-f20.patch"],
        {"0001-fix-f3.patch": first, "0002-fix-f20.patch": second},
    )
    applied = tree.apply()
    assert [a.label for a in applied] == ["0001-fix-f3.patch", "0002-fix-f20.patch"]
    log = run_git(tree.path, "log", "--format=%s", f"{upstreams.pinned}..HEAD").splitlines()
    assert log == ["Fix f20", "Fix f3"]
    core = (tree.path / "src/alpha/core.py").read_text()
    assert "return 33" in core and "return 2020" in core
    assert run_git(tree.path, "status", "--porcelain") == ""
    # Same series on the same pin gives the same commits (fixed committer and dates).
    again = export_source(
        parse_lockfile(world.project / "lockfiles/upstreams.toml"),
        "alpha",
        world.root / "again",
        world.settings(),
    )
    second_run = apply_series(
        again.path, load_series(Project(world.project), "alpha"), world.settings()
    )
    assert [a.commit for a in second_run] == [a.commit for a in applied]


def test_patch_that_no_longer_applies_names_patch_file_hunk_and_restores_tree(
    world, upstreams, tree
):
    good = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    stale = local_patch(upstreams.alpha, upstreams.pinned, "Fix f10", edit_core(10, "1010"))
    # Upstream changed the very line this hunk replaces: no amount of fuzz helps.
    stale = stale.replace(b"\n-    return 10\n", b"\n-    return 100\n")
    world.write_series(
        "alpha",
        ["0001-fix-f3.patch", "0002-fix-f10.patch"],
        {"0001-fix-f3.patch": good, "0002-fix-f10.patch": stale},
    )
    start = head(tree.path)
    with pytest.raises(PatchFailed) as err:
        tree.apply()
    message = str(err.value)
    assert "series:2 (0002-fix-f10.patch) does not apply" in message
    assert "file: src/alpha/core.py" in message
    assert "hunk: @@ -" in message
    assert "expected (from the patch):" in message and "actual (in the tree):" in message
    assert "-     32 |     return 100" in message and "+     32 |     return 10" in message
    assert "first difference at line 32" in message
    assert "1 of 2 entries had applied" in message
    assert head(tree.path) == start
    assert run_git(tree.path, "status", "--porcelain") == ""
    assert "return 33" not in (tree.path / "src/alpha/core.py").read_text()


def test_fuzzy_only_match_is_refused(world, upstreams, tree):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f10", edit_core(10, "1010"))
    # Change only the outermost context line: GNU patch would apply this with fuzz 1.
    hunk_start = patch.index(b"@@ -")
    body = patch[hunk_start:]
    first_context = body.split(b"\n")[1]
    assert first_context.startswith(b" ")
    patch = patch[:hunk_start] + body.replace(first_context, b" # drifted", 1)
    world.write_series("alpha", ["0001-fix-f10.patch"], {"0001-fix-f10.patch": patch})
    start = head(tree.path)
    with pytest.raises(PatchFailed, match="would apply only with fuzz 1"):
        tree.apply()
    assert head(tree.path) == start


def test_already_applied_patch_is_refused_not_reversed(world, upstreams, tree):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series(
        "alpha",
        ["0001-fix-f3.patch", "0002-fix-f3-again.patch"],
        {"0001-fix-f3.patch": patch, "0002-fix-f3-again.patch": patch},
    )
    with pytest.raises(
        PatchFailed, match="already in the file .* only\napply reversed|only apply reversed"
    ):
        tree.apply()


def test_path_escapes_are_refused_before_anything_is_written(world, upstreams, tree):
    fine = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    dotdot = mbox(
        "evil",
        "diff --git a/../evil.txt b/../evil.txt\nnew file mode 100644\n"
        "index 0000000..1111111\n--- /dev/null\n+++ b/../evil.txt\n"
        "@@ -0,0 +1 @@\n+boom\n",
    )
    link = mbox(
        "add link",
        "diff --git a/inner b/inner\nnew file mode 120000\n"
        "index 0000000..2222222\n--- /dev/null\n+++ b/inner\n"
        "@@ -0,0 +1 @@\n+src\n\\ No newline at end of file\n",
    )
    through = mbox(
        "write via link",
        "diff --git a/inner/alpha/x.py b/inner/alpha/x.py\n"
        "new file mode 100644\nindex 0000000..3333333\n"
        "--- /dev/null\n+++ b/inner/alpha/x.py\n"
        "@@ -0,0 +1 @@\n+x = 1\n",
    )
    outside = mbox(
        "link out",
        "diff --git a/out b/out\nnew file mode 120000\n"
        "index 0000000..4444444\n--- /dev/null\n+++ b/out\n"
        "@@ -0,0 +1 @@\n+../../..\n\\ No newline at end of file\n",
    )
    world.write_series(
        "alpha",
        [
            "0001-fine.patch",
            "0002-dotdot.patch",
            "0003-link.patch",
            "0004-through.patch",
            "0005-out.patch",
        ],
        {
            "0001-fine.patch": fine,
            "0002-dotdot.patch": dotdot,
            "0003-link.patch": link,
            "0004-through.patch": through,
            "0005-out.patch": outside,
        },
    )
    start = head(tree.path)
    with pytest.raises(PatchFailed) as err:
        tree.apply()
    message = str(err.value)
    assert message.startswith("refused before anything was written")
    assert "(0002-dotdot.patch): file '../evil.txt' contains '..'" in message
    assert (
        "(0004-through.patch): file 'inner/alpha/x.py' goes through the symlink inner -> src"
        in message
    )
    assert "(0005-out.patch): symlink 'out' -> '../../..' points outside the tree" in message
    assert "0001-fine.patch" not in message and "0003-link.patch" not in message
    assert head(tree.path) == start
    assert "return 33" not in (tree.path / "src/alpha/core.py").read_text()
    assert not (world.build_root / "src/evil.txt").exists()


def upstream_fix(world, upstreams, message: str, files: dict[str, str]) -> tuple[str, str]:
    """An upstream commit on a side branch of alpha (what a backport refers to), fetched into
    the cache; returns (commit, sha256 of its normalized diff)."""
    alpha = upstreams.alpha
    run_git(alpha.path, "checkout", "--quiet", "-B", "fix-branch", upstreams.pinned)
    fix = alpha.commit(message, files)
    run_git(alpha.path, "checkout", "--quiet", "main")
    cache = SourceCache(world.cache)
    with cache.locked():
        fetch_commit(cache, GitWant(world.url("org/alpha"), fix, "t"), world.settings(), False)
    return fix, digest_of(cache.git_dir(world.url("org/alpha")), fix)


def test_backport_by_reference_is_produced_verified_and_committed(world, upstreams, tree):
    fix, digest = upstream_fix(
        world, upstreams, "Upstream: fix f7\n\nLong explanation.", edit_core(7, "77")
    )
    world.write_series("alpha", [f"backport {world.url('org/alpha')} {fix} sha256={digest}"])
    applied = tree.apply()
    assert applied[0].label == f"backport {fix[:12]}"
    message = run_git(tree.path, "log", "-1", "--format=%an|%s|%b")
    assert message.startswith("Upstream Dev|Upstream: fix f7|Long explanation.")
    assert f"Backport: {world.url('org/alpha')} {fix}" in message
    assert "return 77" in (tree.path / "src/alpha/core.py").read_text()


def test_backport_with_wrong_digest_fails_closed(world, upstreams, tree):
    alpha = upstreams.alpha
    run_git(alpha.path, "checkout", "--quiet", "-b", "fix-branch", upstreams.pinned)
    fix = alpha.commit("Upstream: fix f7", edit_core(7, "77"))
    run_git(alpha.path, "checkout", "--quiet", "main")
    wrong = "e" * 64
    world.write_series("alpha", [f"backport {world.url('org/alpha')} {fix} sha256={wrong}"])
    # `patches check` fetches the backport commit itself, then refuses the digest.
    code = main(world.cli_args() + ["patches", "check", "alpha"])
    assert code == 1  # every series checked, failing at the end
    start = head(tree.path)
    with pytest.raises(SglforgeError, match=f"expected sha256 {wrong}, got [0-9a-f]{{64}}"):
        tree.apply()
    assert head(tree.path) == start


def test_backport_exclude_drops_files_and_unknown_exclude_is_an_error(world, upstreams, tree):
    fix, digest = upstream_fix(
        world,
        upstreams,
        "Upstream: two files",
        {**edit_core(7, "77"), "src/alpha/__init__.py": "VALUE = 7\n"},
    )
    url = world.url("org/alpha")
    world.write_series(
        "alpha", [f"backport {url} {fix} sha256={digest} exclude=src/alpha/__init__.py"]
    )
    tree.apply()
    assert "return 77" in (tree.path / "src/alpha/core.py").read_text()
    assert (tree.path / "src/alpha/__init__.py").read_text() == "VALUE = 1\n"
    world.write_series("alpha", [f"backport {url} {fix} sha256={digest} exclude=nothing/*"])
    with pytest.raises(SglforgeError, match="exclude pattern.* nothing/\\* match no file"):
        tree.apply()


def test_cli_check_reports_ok_and_apply_leaves_series_in_git_log(world, upstreams, capsys):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series("alpha", ["0001-fix-f3.patch"], {"0001-fix-f3.patch": patch})
    assert main(world.cli_args() + ["patches", "check"]) == 0
    assert "ok        alpha: 1 entry apply strictly" in capsys.readouterr().out
    assert main(world.cli_args() + ["patches", "apply", "alpha"]) == 0
    out = capsys.readouterr().out
    assert "applied   alpha: 1 entry" in out
    assert run_git(world.build_root / "src/alpha", "log", "-1", "--format=%s") == "Fix f3"


def test_series_file_problems_are_reported_with_lines(world, upstreams, capsys):
    world.write_series(
        "alpha", ["0001-missing.patch", "backport https://x abc sha256=1", "../evil.patch"]
    )
    assert main(world.cli_args() + ["patches", "check"]) == 2
    err = capsys.readouterr().err
    assert "series: 4 problems" in err
    assert "line 2: sha256='1' must be 64 lowercase hex digits" in err
    assert "line 1: patch file" in err and "does not exist" in err
    assert "line 2: backport commit 'abc' must be a full 40-hex commit id" in err
    assert "line 3: '../evil.patch' is not a patch file name" in err


def test_check_against_a_directory_snapshot(world, upstreams, capsys, tmp_path):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series("alpha", ["0001-fix-f3.patch"], {"0001-fix-f3.patch": patch})
    # A release artefact holding only the package directory, as a wheel would.
    unpacked = tmp_path / "wheel-tree"
    (unpacked / "alpha").mkdir(parents=True)
    (unpacked / "alpha/core.py").write_text(
        (upstreams.alpha.path / "src/alpha/core.py").read_text()
    )
    (unpacked / "alpha/__init__.py").write_text("VALUE = 1\n")
    args = world.cli_args() + ["patches", "check", "alpha", "--against", str(unpacked)]
    assert main(args + ["--against-prefix", "src"]) == 0
    assert "1 entry apply strictly to" in capsys.readouterr().out
    assert main(args) == 2  # without the prefix the paths do not exist
    assert "the patch changes it, but it does not exist" in capsys.readouterr().err
