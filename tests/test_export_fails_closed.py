"""Export fails closed (issue 32, item 3): a source cache with a missing or damaged object is
an error naming the source and the path, through the real `python -m sglforge fetch` (which
exports what it fetched), and the previous export stays as it was, with no staging left.

git itself exits 0 from `checkout` after `error: unable to read sha1 file of <path>` and
leaves the file out, and writes a damaged loose object's bytes without a word.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.sources.cache import SourceCache
from tests.fixtures.gitrepos import run_git
from tests.fixtures.project import SRC
from tests.helpers import snapshot


def sglforge(world, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("SGLFORGE_PROJECT", None)
    return subprocess.run(
        [sys.executable, "-m", "sglforge", *argv, *world.cli_args()],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def loose_object(git_dir: Path, oid: str) -> Path:
    path = git_dir / "objects" / oid[:2] / oid[2:]
    assert path.is_file(), f"fixture expects {oid} as a loose object in {git_dir}"
    path.chmod(0o644)
    return path


@pytest.fixture
def exported(world, upstreams):
    """alpha fetched and exported once, as a user's earlier run would have left it."""
    first = sglforge(world, "fetch", "alpha")
    assert first.returncode == 0, first.stderr
    dest = world.build_root / "src" / "alpha"
    assert (dest / "src/alpha/core.py").is_file()
    return dest, snapshot(dest)


def refetch_fails(world, dest: Path, before: dict[str, str]) -> str:
    result = sglforge(world, "fetch", "alpha")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(dest) == before  # the earlier export is untouched
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith(".")] == []  # no staging
    return result.stderr


def test_missing_blob_of_the_upstream_is_an_error_naming_source_and_path(
    world, upstreams, exported
):
    dest, before = exported
    git_dir = SourceCache(world.cache).git_dir(world.url("org/alpha"))
    oid = run_git(upstreams.alpha.path, "rev-parse", f"{upstreams.pinned}:src/alpha/core.py")
    loose_object(git_dir, oid).unlink()
    stderr = refetch_fails(world, dest, before)
    assert f"error: alpha: the exported files are not commit {upstreams.pinned}" in stderr
    assert f"missing  src/alpha/core.py (object {oid} is not in the source cache)" in stderr
    assert "unable to read sha1 file of src/alpha/core.py" in stderr  # what git printed
    assert f"hint: the source cache is damaged: remove {git_dir}" in stderr


def test_missing_blob_of_a_submodule_names_the_submodule_and_its_path(world, upstreams, exported):
    dest, before = exported
    git_dir = SourceCache(world.cache).git_dir(world.url("org/beta"))
    oid = run_git(upstreams.beta.path, "rev-parse", f"{upstreams.beta_v2}:beta.h")
    loose_object(git_dir, oid).unlink()
    stderr = refetch_fails(world, dest, before)
    assert "error: alpha.beta (third_party/beta of alpha): the exported files are not" in stderr
    assert f"missing  beta.h (object {oid} is not in the source cache)" in stderr


def test_damaged_object_that_git_reads_without_complaint_is_caught_by_the_tree_check(
    world, upstreams, exported
):
    dest, before = exported
    git_dir = SourceCache(world.cache).git_dir(world.url("org/alpha"))
    core = run_git(upstreams.alpha.path, "rev-parse", f"{upstreams.pinned}:src/alpha/core.py")
    init = run_git(upstreams.alpha.path, "rev-parse", f"{upstreams.pinned}:src/alpha/__init__.py")
    # a well-formed object with another blob's bytes: git checks out "VALUE = 1" as core.py
    loose_object(git_dir, core).write_bytes(loose_object(git_dir, init).read_bytes())
    stderr = refetch_fails(world, dest, before)
    assert f"differs  src/alpha/core.py (its bytes do not hash to {core}" in stderr


def test_intact_cache_exports_and_checks_quietly(world, upstreams, exported):
    dest, before = exported
    again = sglforge(world, "fetch", "alpha")
    assert again.returncode == 0, again.stderr
    # replaced by an identical export (git's own files record when they were written)
    files = {k: v for k, v in before.items() if not k.startswith(".git/")}
    assert {k: v for k, v in snapshot(dest).items() if not k.startswith(".git/")} == files
    assert run_git(dest, "status", "--porcelain") == ""


def test_build_on_a_damaged_cache_fails_before_building_and_writes_no_wheel(tmp_path):
    """The same check on `sglforge build`'s own export: exit 2 naming the source and path,
    no wheel, no manifest, no export left in the build root."""
    from tests.fixtures.project import make_project

    project = make_project(tmp_path, ("purepy",))
    fetched = project.run("fetch", "--no-export")
    assert fetched.returncode == 0, fetched.stderr
    mirror = project.mirror / "org" / "purepy"
    oid = run_git(mirror, "rev-parse", f"{project.commits['purepy']}:src/purepy/__init__.py")
    [blob] = project.cache.rglob(f"objects/{oid[:2]}/{oid[2:]}")
    blob.chmod(0o644)
    blob.unlink()
    result = project.run("build")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "purepy: the exported files are not commit" in result.stderr
    assert f"missing  src/purepy/__init__.py (object {oid} is not in the source cache)" in (
        result.stderr
    )
    assert not list((project.root / "wheels").glob("*.whl"))
    assert not (project.root / "wheels" / "manifest.json").exists()
    src = project.build_root / "src"
    assert not src.exists() or not any(src.iterdir()), list(src.iterdir())


def test_a_file_committed_with_crlf_under_text_attributes_is_not_a_difference(world):
    """`* text` with a file committed as CRLF: hashing through the attributes says it
    changed (git status too), yet checkout wrote exactly the committed bytes; `eol=crlf`
    files are converted on checkout and match through the attributes. Neither is an error."""
    from tests.fixtures.gitrepos import source_entry

    repo = world.repo("org/crlf")
    repo.commit("windows file", {"win.txt": b"a\r\nb\r\n", "run.bat": "echo\n"})
    (repo.path / ".gitattributes").write_text("* text\n*.bat text eol=crlf\n")
    run_git(repo.path, "add", ".gitattributes")  # only it: `add -A` would renormalize win.txt
    who = {"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "d@x", "GIT_COMMITTER_NAME": "Dev"}
    run_git(
        repo.path, "commit", "-q", "-m", "attributes", env={**who, "GIT_COMMITTER_EMAIL": "d@x"}
    )
    pinned = repo.head()
    assert run_git(repo.path, "cat-file", "-p", f"{pinned}:win.txt") == "a\r\nb"
    world.write_lockfile(source_entry("crlf", world.url("org/crlf"), pinned))
    result = sglforge(world, "fetch", "crlf")
    assert result.returncode == 0, result.stderr
    dest = world.build_root / "src" / "crlf"
    assert (dest / "win.txt").read_bytes() == b"a\r\nb\r\n"
    assert (dest / "run.bat").read_bytes() == b"echo\r\n"
