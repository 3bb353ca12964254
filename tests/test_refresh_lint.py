"""`patches refresh` (gbp-pq style rebase onto a new pin) and `patches lint`."""

from __future__ import annotations

import datetime as dt

from sglforge.cli.main import main
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.project import Project
from sglforge.patching.lint import lint_project
from tests.fixtures.gitrepos import local_patch, run_git
from tests.test_apply import edit_core, upstream_fix


def core_text(values: dict[int, str], header: str = "") -> str:
    return header + "".join(f"def f{i}():\n    return {values.get(i, i)}\n\n" for i in range(30))


def lockfile_commit(world) -> str:
    return parse_lockfile(world.project / "lockfiles/upstreams.toml").get("alpha").commit


def upstream_moves(upstreams, files):
    """Upstream main gains a commit on top of the pinned one."""
    run_git(upstreams.alpha.path, "checkout", "--quiet", "-B", "next", upstreams.pinned)
    new = upstreams.alpha.commit("upstream moves", files)
    run_git(upstreams.alpha.path, "checkout", "--quiet", "main")
    return new


def test_refresh_rebases_regenerates_drops_and_moves_the_pin(world, upstreams, capsys):
    alpha = upstreams.alpha
    keep = local_patch(alpha, upstreams.pinned, "Fix f20", edit_core(20, "2020"))
    merged = local_patch(alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series(
        "alpha",
        ["# our fixes", "0001-fix-f20.patch", "0002-fix-f3.patch"],
        {"0001-fix-f20.patch": keep, "0002-fix-f3.patch": merged},
    )
    # Upstream adds lines at the top (every hunk moves) and merges our f3 fix.
    new = upstream_moves(upstreams, {"src/alpha/core.py": core_text({3: "33"}, "# new\n" * 5)})
    code = main(world.cli_args() + ["patches", "refresh", "alpha", "--onto", new])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "regenerated 0001-fix-f20.patch" in out.out
    assert "dropped   0002-fix-f3.patch" in out.out
    series = (world.project / "patches/alpha/series").read_text()
    assert series.splitlines()[0] == "# our fixes"
    assert "0001-fix-f20.patch" in series and "# dropped by refresh" in series
    assert not (world.project / "patches/alpha/0002-fix-f3.patch").exists()
    regenerated = (world.project / "patches/alpha/0001-fix-f20.patch").read_bytes()
    assert b"@@ -64,7 +64,7 @@" in regenerated  # was -59: moved by the 5 new lines
    assert b"Description: Fix f20" in regenerated  # DEP-3 fields survive the round trip
    assert lockfile_commit(world) == new
    # The written series applies strictly to the new pin.
    assert main(world.cli_args() + ["patches", "check", "alpha"]) == 0


def test_refresh_that_conflicts_changes_nothing(world, upstreams, capsys):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series("alpha", ["0001-fix-f3.patch"], {"0001-fix-f3.patch": patch})
    before_series = (world.project / "patches/alpha/series").read_bytes()
    before_lock = (world.project / "lockfiles/upstreams.toml").read_bytes()
    new = upstream_moves(upstreams, {"src/alpha/core.py": core_text({3: "300"})})
    assert main(world.cli_args() + ["patches", "refresh", "alpha", "--onto", new]) == 2
    err = capsys.readouterr().err
    assert "stopped at" in err and "(0001-fix-f3.patch): conflicts in src/alpha/core.py" in err
    assert "Nothing in" in err
    assert (world.project / "patches/alpha/series").read_bytes() == before_series
    assert (world.project / "patches/alpha/0001-fix-f3.patch").read_bytes() == patch
    assert (world.project / "lockfiles/upstreams.toml").read_bytes() == before_lock


def test_refresh_splits_a_backport_that_no_longer_applies_strictly(world, upstreams, capsys):
    fix, digest = upstream_fix(
        world,
        upstreams,
        "Upstream: fix f10 and VALUE",
        {**edit_core(10, "1010"), "src/alpha/__init__.py": "VALUE = 10\n"},
    )
    url = world.url("org/alpha")
    world.write_series("alpha", [f"backport {url} {fix} sha256={digest}"])
    # Upstream edits the outermost context line of the f10 hunk: strict application fails
    # (it needs fuzz), but a 3-way merge is clean.
    new = upstream_moves(upstreams, {"src/alpha/core.py": core_text({9: "9  # tuned"})})
    code = main(world.cli_args() + ["patches", "refresh", "alpha", "--onto", new])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "split" in out.out and "src/alpha/core.py" in out.out
    series = (world.project / "patches/alpha/series").read_text().splitlines()
    assert series[0] == f"backport {url} {fix} sha256={digest} exclude=src/alpha/core.py"
    resolution = world.project / "patches/alpha" / series[1]
    assert series[1].startswith("0001-resolve-backport-")
    text = resolution.read_text()
    assert "+    return 1010" in text and "Origin: backport," in text
    assert main(world.cli_args() + ["patches", "check", "alpha"]) == 0
    assert main(world.cli_args() + ["patches", "lint", "alpha"]) == 0


def test_refresh_requires_a_full_commit(world, upstreams, capsys):
    world.write_series("alpha", [])
    assert main(world.cli_args() + ["patches", "refresh", "alpha", "--onto", "main"]) == 2
    assert "give the full 40-hex commit id" in capsys.readouterr().err


GOOD_HEADERS = """Description: Dispatch sm_120 to the SM120 kernels instead of raising
Origin: vendor, https://example.invalid/sglforge
Bug: https://example.invalid/org/alpha/issues/7
Forwarded: https://example.invalid/org/alpha/pull/8
Last-Update: 2026-11-01
"""


def test_lint_separates_errors_from_hints(world, upstreams):
    alpha = upstreams.alpha
    good = local_patch(alpha, upstreams.pinned, "Good", edit_core(1, "11"), dep3=False)
    good = good.replace(b"\n---\n", ("\n\n" + GOOD_HEADERS + "---\n").encode(), 1)
    bare = local_patch(alpha, upstreams.pinned, "Bare", edit_core(2, "22"), dep3=False)
    hinted = local_patch(alpha, upstreams.pinned, "Hinted", edit_core(4, "44"), dep3=False)
    hinted = hinted.replace(
        b"\n---\n",
        b"\n\nDescription: short\nOrigin: other\n"
        b"Forwarded: no\nBug: https://x.invalid/1\n"
        b"Last-Update: 2024-01-01\n"
        b"Applied-Upstream: v2.0\n---\n",
        1,
    )
    malformed = local_patch(alpha, upstreams.pinned, "Bad values", edit_core(5, "55"), dep3=False)
    malformed = malformed.replace(
        b"\n---\n",
        b"\n\nDescription: values that are wrong here\n"
        b"Origin: somewhere\nForwarded: maybe\n"
        b"Bug: https://x.invalid/2\n"
        b"Last-Update: last week\n---\n",
        1,
    )
    world.write_series(
        "alpha",
        ["0001-good.patch", "0002-bare.patch", "0003-hinted.patch", "0004-bad.patch"],
        {
            "0001-good.patch": good,
            "0002-bare.patch": bare,
            "0003-hinted.patch": hinted,
            "0004-bad.patch": malformed,
            "0005-orphan.patch": good,
        },
    )
    lock = parse_lockfile(world.project / "lockfiles/upstreams.toml")
    findings = lint_project(Project(world.project), lock, ["alpha"], today=dt.date(2026, 11, 29))
    by = {
        (
            f.level,
            f.check.rsplit("/", 1)[-1],
            f.message.split(" ")[0] + " " + f.message.split(" ")[1],
        )
        for f in findings
    }
    assert not [f for f in findings if "0001-good" in f.check]
    bare_errors = {
        f.message.split(" (")[0] for f in findings if "0002-bare" in f.check and f.level == "error"
    }
    assert bare_errors == {
        "missing Origin",
        "missing Forwarded",
        "missing Bug",
        "missing Last-Update",
    }
    hinted_findings = [f for f in findings if "0003-hinted" in f.check]
    assert {f.level for f in hinted_findings} == {"hint"}
    assert len(hinted_findings) == 4  # terse, Forwarded: no, stale, Applied-Upstream
    bad = {f.message for f in findings if "0004-bad" in f.check}
    assert any("Origin 'somewhere'" in m for m in bad)
    assert any("Forwarded 'maybe'" in m for m in bad)
    assert any("Last-Update 'last week'" in m for m in bad)
    assert ("hint", "0005-orphan.patch", "not listed") in by


def test_lint_cli_exit_status(world, upstreams, capsys):
    bare = local_patch(upstreams.alpha, upstreams.pinned, "Bare", edit_core(2, "22"), dep3=False)
    world.write_series("alpha", ["0001-bare.patch"], {"0001-bare.patch": bare})
    assert main(world.cli_args() + ["patches", "lint"]) == 1
    out = capsys.readouterr().out
    assert "errors (4):" in out and "hints (1):" in out
    assert "only a Subject" in out and "lint: FAILED" in out


def test_lint_without_series_is_clean(world, upstreams, capsys):
    assert main(world.cli_args() + ["patches", "lint"]) == 0
    assert "lint: ok" in capsys.readouterr().out


def test_refresh_continue_after_resolving_by_hand_and_abort(world, upstreams, capsys):
    patch = local_patch(upstreams.alpha, upstreams.pinned, "Fix f3", edit_core(3, "33"))
    world.write_series("alpha", ["0001-fix-f3.patch"], {"0001-fix-f3.patch": patch})
    new = upstream_moves(upstreams, {"src/alpha/core.py": core_text({3: "300"})})
    args = world.cli_args() + ["patches", "refresh", "alpha"]
    assert main(args + ["--onto", new]) == 2
    assert "--continue" in capsys.readouterr().err
    # A second start is refused while one is in progress; --continue with conflicts left too.
    assert main(args + ["--onto", new]) == 2
    assert "is in progress" in capsys.readouterr().err
    assert main(args + ["--continue"]) == 2
    assert "still unresolved" in capsys.readouterr().err
    # Resolve by hand: keep upstream's new value and add ours next to it.
    scratch = world.build_root / "refresh/alpha"
    (scratch / "src/alpha/core.py").write_text(core_text({3: "300 + 33"}))
    run_git(scratch, "add", "src/alpha/core.py")
    assert main(args + ["--continue"]) == 0
    assert "regenerated 0001-fix-f3.patch" in capsys.readouterr().out
    text = (world.project / "patches/alpha/0001-fix-f3.patch").read_text()
    assert "-    return 300\n+    return 300 + 33" in text
    assert lockfile_commit(world) == new
    assert not scratch.exists()
    # --abort leaves everything as it was.
    newer = upstream_moves(upstreams, {"src/alpha/core.py": core_text({3: "3000"})})
    before = (world.project / "patches/alpha/0001-fix-f3.patch").read_bytes()
    assert main(args + ["--onto", newer]) == 2
    assert main(args + ["--abort"]) == 0
    assert "aborted" in capsys.readouterr().out
    assert not scratch.exists() and lockfile_commit(world) == new
    assert (world.project / "patches/alpha/0001-fix-f3.patch").read_bytes() == before
