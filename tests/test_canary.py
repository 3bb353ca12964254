"""`sglforge canary` on a synthetic upstream with real git (issue 36 item 3).

The upstream `org/up` moves on after our pin: it reworks b.py around our 0002, takes our 0003
verbatim, and tags releases whose dates disagree with their version order. Our series: 0001
applies, 0002 conflicts (file and hunk named), 0003 is already upstream (a drop candidate),
0004 builds on 0002 (so it conflicts too, and says 0002 was skipped before it).
"""

from __future__ import annotations

import json
import tempfile

import pytest

from sglforge.cli.main import main
from sglforge.sources.upstream_refs import UpstreamRefs, parse_ls_remote, pick_targets, version_key
from tests.fixtures.gitrepos import local_patch, run_git, source_entry


def lines(prefix: str, changed: dict[int, str] | None = None) -> str:
    changed = changed or {}
    return "".join(f"{changed.get(i, f'{prefix}{i} = {i}')}\n" for i in range(20))


@pytest.fixture
def up(world):
    repo = world.repo("org/up")
    pin = repo.commit("v1.0", {"a.py": lines("a"), "b.py": lines("b"), "c.py": lines("c")})
    repo.tag("v1.0")
    patches = {
        "0001-a.patch": local_patch(repo, pin, "Fix a3", {"a.py": lines("a", {3: "a3 = 33"})}),
        "0002-b.patch": local_patch(repo, pin, "Fix b5", {"b.py": lines("b", {5: "b5 = 55"})}),
        "0003-c.patch": local_patch(repo, pin, "Fix c10", {"c.py": lines("c", {10: "c10 = 1"})}),
    }
    run_git(repo.path, "checkout", "--quiet", "-b", "ours", pin)
    with_0002 = repo.commit("0002 applied", {"b.py": lines("b", {5: "b5 = 55"})})
    run_git(repo.path, "checkout", "--quiet", "main")
    patches["0004-b-again.patch"] = local_patch(
        repo, with_0002, "Fix b5 again", {"b.py": lines("b", {5: "b5 = 555"})}
    )
    repo.commit("rework b", {"b.py": lines("b", {4: "B4 = 4", 5: "B5 = 5", 6: "B6 = 6"})})
    release = repo.commit("take c10", {"c.py": lines("c", {10: "c10 = 1"})})
    repo.tag("v1.10")
    repo.commit("later", {"e.txt": "e\n"})
    repo.tag("v1.9")  # newer by date, older by version
    repo.tag("nightly-20260101")  # not a version: never a release
    head = repo.commit("main moves on", {"e.txt": "e2\n"})
    world.write_lockfile(source_entry("up", world.url("org/up"), pin, ref="v1.0"))
    world.write_series("up", list(patches), patches)
    return type("Up", (), {"repo": repo, "pin": pin, "release": release, "head": head})


def run(world, capsys, *args: str) -> tuple[int, dict | None, str]:
    report = world.root / "canary.json"
    code = main([*world.cli_args(), "canary", *args, "--output", str(report)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    document = json.loads(report.read_text()) if report.exists() else None
    return code, document, captured.out + captured.err


def by_entry(target: dict) -> dict[str, dict]:
    return {e["entry"]: e for e in target["entries"]}


def test_applies_conflicts_and_already_upstream(world, up, capsys, monkeypatch, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    code, doc, out = run(world, capsys)
    assert code == 1  # something needs attention
    assert doc["schema"] == "sglforge-canary" and doc["exit_status"] == 1
    (upstream,) = doc["upstreams"]
    release, head = upstream["targets"]
    assert (release["kind"], release["ref"], release["commit"]) == ("release", "v1.10", up.release)
    assert (head["kind"], head["ref"], head["commit"]) == ("head", "HEAD -> main", up.head)
    assert upstream["refs"]["other_tags"] == 1  # nightly-20260101
    entries = by_entry(release)
    assert entries["0001-a.patch"]["status"] == "applies"
    conflict = entries["0002-b.patch"]
    assert conflict["status"] == "conflicts" and conflict["files"] == ["b.py"]
    (hunk,) = conflict["hunks"]
    assert hunk["file"] == "b.py" and hunk["hunk"].startswith("@@ -") and hunk["reason"]
    assert hunk["reason"] == "context-differs"
    assert "expected (from the patch)" in conflict["detail"]
    assert (conflict["total_hunks"], conflict["failed_hunks"]) == (1, 1)
    assert conflict["already_applied_hunks"] == 0
    assert entries["0001-a.patch"]["total_hunks"] == 1
    assert entries["0003-c.patch"]["status"] == "upstream"
    later = entries["0004-b-again.patch"]
    assert later["status"] == "conflicts" and later["after_skipped"] == ["0002-b.patch"]
    assert later["where"] == "patches/up/series:4 (0004-b-again.patch)"
    assert release["counts"] == {"applies": 1, "conflicts": 2, "upstream": 1, "refused": 0}
    assert by_entry(head)["0003-c.patch"]["status"] == "upstream"
    # the table: one line per target, one per entry needing attention
    assert "release v1.10" in out and "head HEAD -> main" in out
    assert "UPSTREAM 0003-c.patch (already in the target: a candidate to drop)" in out
    assert "CONFLICTS 0002-b.patch: 1 of 1 hunk(s), in 1 file(s): b.py" in out
    assert list(scratch.iterdir()) == []  # every temporary work tree is gone


def test_a_series_that_applies_everywhere_exits_0(world, up, capsys):
    world.write_series("up", ["0001-a.patch"])
    code, doc, _ = run(world, capsys)
    assert code == 0 and doc["exit_status"] == 0
    for target in doc["upstreams"][0]["targets"]:
        assert target["counts"]["applies"] == 1


def test_each_entry_sees_the_earlier_ones_that_applied(world, up, capsys):
    """0004 on the pin (with 0002 applied before it) applies: cumulative, not alone."""
    run_git(up.repo.path, "tag", "v2.0", up.pin)  # newest release: the pin itself
    world.write_series("up", ["0002-b.patch", "0004-b-again.patch"])
    code, doc, _ = run(world, capsys, "--branch", "up=ours")
    release, head = doc["upstreams"][0]["targets"]
    assert release["ref"] == "v2.0"
    assert [e["status"] for e in release["entries"]] == ["applies", "applies"]
    # branch `ours` already holds 0002: it is upstream there, and 0004 applies on it
    assert head["ref"] == "ours"
    assert [e["status"] for e in head["entries"]] == ["upstream", "applies"]
    assert code == 1


def test_release_selection_is_by_version_and_prereleases_only_when_newer():
    commit = {n: f"{n:040x}" for n in range(1, 9)}
    text = "\n".join(
        [
            f"ref: refs/heads/dev\tHEAD\n{commit[8]}\tHEAD",
            f"{commit[1]}\trefs/tags/v0.5.9",
            f"{commit[2]}\trefs/tags/v0.5.16",
            f"{commit[3]}\trefs/tags/v0.5.16rc1",
            f"{commit[4]}\trefs/tags/v0.5.16.post1",
            f"{commit[5]}\trefs/tags/v0.5.17rc2",
            f"{commit[6]}\trefs/tags/v0.5.17-rc.1",
            f"{'f' * 40}\trefs/tags/v0.5.17rc2^{{}}",  # peeled: the annotated tag's commit
            f"{commit[7]}\trefs/tags/nv_dev_c491439",
            f"{commit[7]}\trefs/tags/v9.9 evil",
            f"{commit[7]}\trefs/tags/--upload-pack=touch",
            "garbage line",
        ]
    )
    tags, head, ignored = parse_ls_remote(text, None)
    assert [t.name for t in tags][-3:] == ["v0.5.16.post1", "v0.5.17-rc.1", "v0.5.17rc2"]
    assert ignored == 3
    targets = pick_targets(UpstreamRefs(tuple(tags), head, ignored, "test"))
    assert [(t.kind, t.ref, t.commit) for t in targets] == [
        ("release", "v0.5.16.post1", commit[4]),
        ("prerelease", "v0.5.17rc2", "f" * 40),
        ("head", "HEAD -> dev", commit[8]),
    ]
    assert version_key("v1.2.0") == version_key("1.2") and version_key("v1.2.3rc1") < version_key(
        "v1.2.3"
    )
    # a newer final release hides the older pre-releases
    tags, _, _ = parse_ls_remote(
        f"{commit[1]}\trefs/tags/v1.0rc1\n{commit[2]}\trefs/tags/v1.0", None
    )
    assert [t.kind for t in pick_targets(UpstreamRefs(tuple(tags), None, 0, "t"))] == ["release"]


def test_offline_uses_the_targets_an_online_run_recorded(world, up, capsys):
    code, _, out = run(world, capsys, "--offline")
    assert code == 2 and "offline: the source cache has no repository" in out
    assert run(world, capsys)[0] == 1
    up.repo.commit("moved after the online run", {"e.txt": "e3\n"})
    code, doc, out = run(world, capsys, "--offline")
    assert code == 1, out
    assert [t["commit"] for t in doc["upstreams"][0]["targets"]] == [up.release, up.head]


def test_unreachable_upstream_is_exit_2_with_a_report(world, up, capsys):
    world.write_lockfile(source_entry("up", world.url("org/gone"), up.pin))
    code, doc, out = run(world, capsys)
    assert code == 2 and doc["exit_status"] == 2
    assert "cannot list the tags and head of" in doc["upstreams"][0]["error"]
    assert "up: cannot list the tags and head" in out
    assert "error: 1 of 1 upstream(s) could not be checked or have a refused entry: up" in out


def test_series_naming_a_file_outside_its_directory_is_refused(world, up, capsys):
    world.write_series("up", ["../../lockfiles/upstreams.toml.patch"])
    code, doc, _ = run(world, capsys)
    assert code == 2
    error = doc["upstreams"][0]["error"]
    assert "patches/up/series" in error and "line 1" in error and "no directories" in error


def test_a_patch_whose_path_leaves_the_tree_is_refused_and_writes_nothing(world, up, capsys):
    evil = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: Someone <someone@example.invalid>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
        b"Subject: [PATCH] escape\n\nDescription: escape\n---\n"
        b"diff --git a/../escaped.py b/../escaped.py\nnew file mode 100644\n"
        b"--- /dev/null\n+++ b/../escaped.py\n@@ -0,0 +1 @@\n+owned = 1\n-- \n2.39.5\n"
    )
    world.write_series("up", ["0001-a.patch", "0009-escape.patch"], {"0009-escape.patch": evil})
    code, doc, _ = run(world, capsys)
    assert code == 2
    for target in doc["upstreams"][0]["targets"]:
        first, escape = target["entries"]
        assert first["status"] == "applies" and escape["status"] == "refused"
        assert (
            "series:2 (0009-escape.patch): file '../escaped.py' contains '..'" in (escape["detail"])
        )
    assert not list(world.root.rglob("escaped.py"))


def test_an_upstream_without_a_series_reports_its_targets_only(world, up, capsys):
    (world.project / "patches/up/series").unlink()
    code, doc, _ = run(world, capsys)
    assert code == 0
    upstream = doc["upstreams"][0]
    assert upstream["note"] == "no series: nothing to try"
    assert [t["ref"] for t in upstream["targets"]] == ["v1.10", "HEAD -> main"]


def test_an_entry_partly_upstream_conflicts_and_counts_the_hunks_already_there(world, up, capsys):
    both = local_patch(
        up.repo,
        up.pin,
        "Fix b5 and c10",
        {"b.py": lines("b", {5: "b5 = 55"}), "c.py": lines("c", {10: "c10 = 1"})},
    )
    world.write_series("up", ["0005-both.patch"], {"0005-both.patch": both})
    code, doc, out = run(world, capsys)
    assert code == 1
    (entry,) = doc["upstreams"][0]["targets"][0]["entries"]
    assert entry["status"] == "conflicts" and entry["files"] == ["b.py", "c.py"]
    assert {h["file"]: h["reason"] for h in entry["hunks"]} == {
        "b.py": "context-differs",
        "c.py": "already-applied",
    }
    assert (entry["total_hunks"], entry["already_applied_hunks"]) == (2, 1)
    assert "2 of 2 hunk(s), 1 already in the target, in 2 file(s)" in out


@pytest.mark.parametrize("value", ["up=--upload-pack=touch", "up=a..b", "up", "nope=main"])
def test_a_bad_branch_option_is_bad_input(world, up, capsys, value):
    code, doc, out = run(world, capsys, "--branch", value)
    assert code == 2 and doc is None  # refused before any work: no report
    assert "--branch" in out or "unknown upstream 'nope'" in out


def test_offline_an_upstream_without_a_series_is_not_an_error(world, up, capsys):
    (world.project / "patches/up/series").unlink()
    code, doc, _ = run(world, capsys, "--offline")
    assert code == 0 and doc["upstreams"][0]["note"] == "no series: nothing to try"


def test_json_puts_only_the_document_on_stdout(world, up, capsys):
    code = main([*world.cli_args(), "canary", "--json"])
    captured = capsys.readouterr()
    assert code == 1
    document = json.loads(captured.out)  # nothing else on stdout
    assert document["schema"] == "sglforge-canary" and document["version"] == 1
    assert "release v1.10" in captured.err  # the table went to stderr


def test_no_git_hook_runs_even_one_the_users_config_names(world, up, capsys, monkeypatch, tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    ran = tmp_path / "hook-ran"
    for name in (
        "post-checkout",
        "post-commit",
        "applypatch-msg",
        "pre-applypatch",
        "post-applypatch",
    ):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {ran}\n")
        (hooks / name).chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hooks}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    code, doc, _ = run(world, capsys)
    assert code == 1 and doc["upstreams"][0]["targets"][0]["counts"]["applies"] == 1
    assert not ran.exists()
