"""The patched tree recorded (issue 22 item 4): `git write-tree` of each upstream after its
series and each input's tree, printed by `patches check` and `plan`, stamped into provenance,
and checked by `verify` (a change under an unchanged patchset digest is an error)."""

from __future__ import annotations

import json
import subprocess
import zipfile

from sglforge.cli.main import main
from tests.fixtures import upstreams
from tests.fixtures.gitrepos import Repo, local_patch, run_git
from tests.fixtures.project import make_project


def _apply_by_hand(mirror_repo, commit: str, patch: bytes, scratch) -> str:
    """What a peer runs: clone, check out the pin, `git am` the series, `git write-tree`."""
    subprocess.run(["git", "clone", "--quiet", str(mirror_repo), str(scratch)], check=True)
    run_git(scratch, "checkout", "--quiet", "--detach", commit)
    run_git(
        scratch,
        "am",
        "--quiet",
        input=patch,
        env={"GIT_COMMITTER_NAME": "peer", "GIT_COMMITTER_EMAIL": "peer@example.invalid"},
    )
    return run_git(scratch, "write-tree")


def test_patches_check_and_plan_print_the_trees(world, upstreams, capsys):
    alpha = Repo.__new__(Repo)
    alpha.path, alpha.clock = world.mirror / "org/alpha", 1_800_000_000
    patch = local_patch(
        alpha, upstreams.pinned, "alpha: value 3", {"src/alpha/__init__.py": "VALUE = 3\n"}
    )
    world.write_series("alpha", ["0001-value.patch"], {"0001-value.patch": patch})
    assert main(world.cli_args() + ["plan"]) == 0
    before = capsys.readouterr().out
    assert "  alpha: not computed: run patches check" in before

    assert main(world.cli_args() + ["fetch", "--no-export"]) == 0
    capsys.readouterr()
    assert main(world.cli_args() + ["patches", "check", "alpha"]) == 0
    out = capsys.readouterr().out
    expected = _apply_by_hand(alpha.path, upstreams.pinned, patch, world.root / "peer")
    assert f"tree {expected} (git write-tree after the series)" in out
    beta_tree = run_git(world.mirror / "org/beta", "rev-parse", f"{upstreams.beta_v2}^{{tree}}")
    assert f"input alpha.beta (submodule): tree {beta_tree}" in out
    gamma = Repo(world.root / "gamma-by-hand")  # the archive's files, as git sees them
    gamma.commit("gamma", {"CMakeLists.txt": "project(gamma)\n", "gamma.h": "int g;\n"})
    gamma_tree = run_git(gamma.path, "rev-parse", "HEAD^{tree}")
    assert f"input alpha.gamma (FetchContent): tree {gamma_tree}" in out

    assert main(world.cli_args() + ["plan"]) == 0  # now known from the cache's records
    after = capsys.readouterr().out
    assert f"  alpha: tree {expected}" in after
    assert f"    alpha.beta: tree {beta_tree}" in after
    assert f"    alpha.gamma: tree {gamma_tree}" in after


def test_build_records_the_tree_and_verify_checks_it(tmp_path):
    project = make_project(tmp_path, ("purepy",))
    repo = project.mirror / "org" / "purepy"
    patches = project.root / "patches" / "purepy"
    upstreams.make_patch(
        repo,
        "0001-greeting.patch",
        {"src/purepy/__init__.py": 'GREETING = "hi"\n\n\ndef greet():\n    return GREETING\n'},
        "Say hi",
        patches,
    )
    (patches / "series").write_text("0001-greeting.patch\n")
    result = project.run("build")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = project.manifest()
    [entry] = manifest["wheels"]
    with zipfile.ZipFile(project.root / "wheels" / entry["file"]) as archive:
        name = next(n for n in archive.namelist() if n.endswith("sglforge-build.json"))
        provenance = json.loads(archive.read(name))
    patch = (patches / "0001-greeting.patch").read_bytes()
    expected = _apply_by_hand(repo, project.commits["purepy"], patch, tmp_path / "peer")
    assert provenance["tree"] == expected
    assert entry["provenance"]["tree"] == expected

    ok = project.run("verify", "--trees")  # a peer's check: no compile
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"tree ok   {entry['file']}: tree {expected}" in ok.stdout

    # the recorded tree no longer matches while the patchset digest is the same
    forged = "f" * 40
    entry["provenance"]["tree"] = forged
    (project.root / "wheels" / "manifest.json").write_text(json.dumps(manifest))
    bad = project.run("verify", "--trees")
    assert bad.returncode == 1
    assert (
        f"source tree of purepy changed under an unchanged patchset "
        f"{entry['provenance']['series_sha256'][:8]}: expected tree {forged}, got "
        f"{expected}"
    ) in bad.stdout
    full = project.run("verify", "--out", str(tmp_path / "rebuilt"))
    assert full.returncode == 1, full.stdout + full.stderr
    assert "TREE" in full.stdout and f"expected tree {forged}, got {expected}" in full.stdout


def test_fetchcontent_input_tree_is_recorded_in_provenance(tmp_path):
    project = make_project(tmp_path, ("fcdemo",))
    result = project.run("build")
    assert result.returncode == 0, result.stdout + result.stderr
    [entry] = project.manifest()["wheels"]
    [dep] = entry["provenance"]["sources"]
    # the directory the build injected, as git sees it: greetdep's files in one commit
    by_hand = Repo(tmp_path / "greetdep-by-hand")
    by_hand.commit("greetdep", upstreams.GREETDEP)
    assert dep["name"] == "fcdemo.greetdep"
    assert dep["tree"] == run_git(by_hand.path, "rev-parse", "HEAD^{tree}")
    ok = project.run("verify", "--trees")
    assert ok.returncode == 0, ok.stdout + ok.stderr
