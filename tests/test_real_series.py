"""The repository's own patch series: every series parses, every patch exists, lint is clean.

Runs against the real lockfiles/upstreams.toml and patches/ of this checkout (no network).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.project import Project
from sglforge.patching.lint import lint_project, render_findings
from sglforge.patching.series import LocalPatch, parse_series

ROOT = Path(__file__).resolve().parent.parent
SERIES_FILES = sorted((ROOT / "patches").glob("*/series"))


def test_there_are_series_files() -> None:
    assert SERIES_FILES, f"no patches/*/series under {ROOT}"


@pytest.mark.parametrize("series_file", SERIES_FILES, ids=[p.parent.name for p in SERIES_FILES])
def test_series_parses_and_patches_exist(series_file: Path) -> None:
    series = parse_series(series_file, series_file.parent.name)
    assert series.entries, f"{series_file} lists no patches"
    for entry in series.entries:
        if isinstance(entry, LocalPatch):
            assert entry.path.is_file(), f"{series_file}: {entry.name} is missing"
            assert entry.path.parent == series_file.parent
            assert entry.data.startswith(b"From "), f"{entry.name} is not a format-patch mbox"


@pytest.mark.parametrize("series_file", SERIES_FILES, ids=[p.parent.name for p in SERIES_FILES])
def test_series_belongs_to_a_pinned_upstream(series_file: Path) -> None:
    lock = parse_lockfile(ROOT / "lockfiles" / "upstreams.toml")
    upstreams = {pin.name for pin in lock.upstreams()}
    assert series_file.parent.name in upstreams, (
        f"{series_file}: '{series_file.parent.name}' is not an upstream in the lockfile"
    )


def test_lint_reports_no_errors_for_the_repositorys_patches() -> None:
    project = Project(ROOT)
    lock = parse_lockfile(project.lockfile)
    findings = lint_project(project, lock, None)
    errors = [f for f in findings if f.level == "error"]
    assert not errors, render_findings(findings)


def test_the_kernel_package_is_its_own_upstream_at_its_bump_commit() -> None:
    """sglang-kernel is released from a main-branch bump commit, not from the sglang tag, so it
    is a second source of the same repository with its own pin and series (issue 22)."""
    from sglforge.inputs.recipes import load_recipes
    from sglforge.inputs.toolchain import load_toolchain

    lock = parse_lockfile(ROOT / "lockfiles" / "upstreams.toml")
    recipes = load_recipes(
        ROOT / "recipes", lock, load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    )
    python, kernel = recipes["sglang"], recipes["sglang-kernel"]
    assert (python.upstream, kernel.upstream) == ("sglang", "sglang-kernel")
    sglang, sglang_kernel = lock.get("sglang"), lock.get("sglang-kernel")
    assert sglang.url == sglang_kernel.url and sglang.commit != sglang_kernel.commit
    assert (ROOT / "patches" / "sglang-kernel" / "series").is_file()
    # the kernel's FetchContent archives hang off the kernel source, not the python tree
    assert lock.fetchcontent("sglang-kernel") and not lock.fetchcontent("sglang")
