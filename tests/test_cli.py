"""The command line as a user meets it (issue 16): the real `python -m sglforge` in a
subprocess against a fixture project — global options after the verb, names and options in
any order, verb usage on mistakes, unknown names with "did you mean", the doctor's warning
count, compiler-cache tools checked before any work, and a clean message without a TOML
parser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import upstreams
from tests.fixtures.project import SRC, FixtureProject, make_project

REPO = Path(__file__).resolve().parents[1]


def sglforge(
    project: FixtureProject,
    *argv: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m sglforge ARGV` exactly as given (no global options added)."""
    run_env = dict(os.environ, PYTHONPATH=str(SRC))
    run_env.pop("SGLFORGE_PROJECT", None)
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sglforge", *argv],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=project.root,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> FixtureProject:
    return make_project(tmp_path)


def with_series(project: FixtureProject) -> None:
    """purepy gets a one-patch series."""
    patches = project.root / "patches" / "purepy"
    upstreams.make_patch(
        project.mirror / "org" / "purepy",
        "0001-greeting.patch",
        {"src/purepy/__init__.py": 'GREETING = "patched"\n'},
        "Change the greeting",
        patches,
    )
    (patches / "series").write_text("0001-greeting.patch\n")


# --- 1. global options after the verb ---------------------------------------------------------


def test_global_options_after_the_verb(project: FixtureProject) -> None:
    # As `nox -s fetch -- …` passes them: every global option after the verb.
    result = sglforge(
        project,
        "fetch",
        "--no-export",
        *project.args(),
        "--mirror",
        "https://github.com/=/srv/mirrors/github/",
    )
    assert result.returncode == 0, result.stderr
    assert f"fetched   purepy {project.commits['purepy'][:12]}" in result.stdout


def test_mirrors_before_and_after_the_verb_add_up(project: FixtureProject) -> None:
    # The fixture's own mirror comes after the verb, another one before it: the fetch only
    # works when the one after the verb is used, and the one before is not dropped.
    args = project.args()
    mirror_at = args.index("--mirror")
    before, fixture_mirror = args[:mirror_at], args[mirror_at:]
    result = sglforge(
        project,
        *before,
        "--mirror",
        "https://github.com/=/srv/mirrors/github/",
        "fetch",
        "--no-export",
        *fixture_mirror,
    )
    assert result.returncode == 0, result.stderr
    assert "fetched   purepy" in result.stdout


def test_global_option_after_the_verb_overrides_the_one_before(
    project: FixtureProject, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere-cache"
    result = sglforge(
        project, *project.args(), "fetch", "--no-export", "--cache-dir", str(elsewhere)
    )
    assert result.returncode == 0, result.stderr
    assert elsewhere.is_dir() and not project.cache.exists()


# --- 3. options and names in any order; the verb's usage on mistakes ----------------------------


def test_options_and_names_mix_in_any_order(project: FixtureProject) -> None:
    with_series(project)
    assert project.run("fetch", "--no-export").returncode == 0
    for argv in (
        ["patches", "check", "--offline", "purepy"],
        ["patches", "--offline", "check", "purepy"],
        ["patches", "check", "purepy", "--offline"],
    ):
        result = project.run(*argv)
        assert result.returncode == 0, (argv, result.stderr)
        assert "ok        purepy: 1 entry apply strictly" in result.stdout


def test_refresh_takes_the_name_after_onto(project: FixtureProject) -> None:
    with_series(project)
    commit = project.commits["purepy"]
    result = project.run("patches", "refresh", "--onto", commit, "--offline", "purepy")
    assert "unrecognized arguments" not in result.stderr
    assert "usage:" not in result.stderr
    # Offline with an empty cache: refresh itself runs and says what is missing.
    assert result.returncode == 2 and "offline" in result.stderr.lower(), result.stderr


def test_patches_without_action_shows_its_usage(project: FixtureProject) -> None:
    result = project.run("patches")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: sglforge patches ")
    assert "[UPSTREAM ...]" in result.stderr  # optional in the usage line
    assert "the following arguments are required: action\n" in result.stderr  # not UPSTREAM


@pytest.mark.parametrize(
    "argv",
    [
        ["fetch", "--bogus"],
        ["patches", "check", "--bogus"],
        ["build", "--bogus"],
        ["doctor", "--bogus"],
    ],
)
def test_unknown_option_prints_the_verbs_usage(project: FixtureProject, argv: list[str]) -> None:
    result = project.run(*argv)
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: sglforge {argv[0]} "), result.stderr
    assert f"sglforge {argv[0]}: error: unrecognized arguments: --bogus" in result.stderr
    assert "VERB" not in result.stderr  # not the top-level usage


# --- 2. unknown names: errors with "did you mean" -----------------------------------------------


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["fetch", "purepi"], "upstream"),
        (["fetch", "--offline", "purepi"], "upstream"),
        (["patches", "check", "purepi"], "upstream"),
        (["patches", "apply", "purepi"], "upstream"),
        (["patches", "lint", "purepi"], "upstream"),
        (["patches", "refresh", "purepi", "--onto", "0" * 40], "upstream"),
        (["canary", "purepi"], "upstream"),
        (["build", "purepi"], "recipe"),
        (["verify", "purepi"], "recipe"),
        (["build-requirements", "purepi"], "recipe"),
    ],
)
def test_unknown_names_are_errors_with_did_you_mean(
    project: FixtureProject, argv: list[str], kind: str
) -> None:
    result = project.run(*argv)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"error: unknown {kind} 'purepi'" in result.stderr
    assert "did you mean 'purepy'?" in result.stderr
    assert "Traceback" not in result.stderr
    assert not project.cache.exists()  # rejected before any work


def test_unknown_name_without_a_close_match_lists_the_known_ones(project: FixtureProject) -> None:
    result = project.run("patches", "lint", "zzz")
    assert result.returncode == 2
    assert "unknown upstream 'zzz'" in result.stderr and "did you mean" not in result.stderr
    assert "hint: upstreams: purepy" in result.stderr


def test_suggestions_and_list_prefer_upstreams_over_submodule_entries(world, upstreams) -> None:
    # alpha has a submodule entry alpha.beta and a FetchContent entry alpha.gamma.
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("SGLFORGE_PROJECT", None)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sglforge", *argv, *world.cli_args()],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )

    result = run("fetch", "alpah", "--offline")
    assert result.returncode == 2
    assert (
        "unknown upstream 'alpah' (not in lockfiles/upstreams.toml); did you mean 'alpha'?\n"
        in result.stderr
    )
    assert "hint: upstreams: alpha\n" in result.stderr
    result = run("patches", "lint", "alpha.bet")
    assert result.returncode == 2
    assert "did you mean 'alpha.beta' or 'alpha'?" in result.stderr


# --- 6. doctor counts every warning it prints ---------------------------------------------------


def test_doctor_summary_counts_every_printed_warning(project: FixtureProject) -> None:
    # No wheels/manifest.json: the doctor warns about that outside its findings.
    result = project.run("doctor", "--profile", str(REPO / "profiles" / "dsv4-flash-pd.toml"))
    output = result.stdout + result.stderr
    assert "[warning] wheels:" in result.stderr
    printed = len(re.findall(r"^\[warning\]", output, re.MULTILINE))
    summary = re.search(r"doctor: \d+ error\(s\), (\d+) warning\(s\)", result.stdout)
    assert summary, result.stdout
    assert int(summary.group(1)) == printed >= 1


# --- 7. compiler cache checked before any work ---------------------------------------------------


def test_missing_compiler_cache_is_reported_before_fetching(
    project: FixtureProject, tmp_path: Path
) -> None:
    # A PATH with git and nothing else: no sccache, but a fetch would work.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = subprocess.run(
        ["sh", "-c", "command -v git"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (bin_dir / "git").symlink_to(git)
    result = sglforge(
        project, *project.args(), "build", "--compiler-cache", "sccache", env={"PATH": str(bin_dir)}
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "--compiler-cache sccache: 'sccache' is not on PATH" in result.stderr
    assert result.stdout == ""
    assert not project.cache.exists() and not project.build_root.exists()  # nothing fetched


# --- 9. no TOML parser: one line, exit 2 ----------------------------------------------------------

BLOCK_TOML = """
import runpy, sys

class NoToml:
    def find_spec(self, name, path=None, target=None):
        if name in ("tomllib", "tomli") or name.startswith(("tomllib.", "tomli.")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoToml())
for name in [m for m in sys.modules if m.split(".")[0] in ("tomllib", "tomli")]:
    del sys.modules[name]
sys.argv = ["sglforge", *sys.argv[1:]]
runpy.run_module("sglforge", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("verb", ["plan", "fetch", "patches"])
def test_without_a_toml_parser_says_what_to_install(project: FixtureProject, verb: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    argv = [verb, "check"] if verb == "patches" else [verb]
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TOML, *project.args(), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=project.root,
        check=False,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "needs Python ≥ 3.11 (for tomllib) or `pip install tomli`" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_the_toml_blocker_really_blocks() -> None:
    """The simulation above is real: without the check, importing sglforge's TOML reader
    fails with ModuleNotFoundError."""
    code = BLOCK_TOML.split("sys.argv =")[0] + "import sglforge.base.tomlfile\n"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 1
    assert "ModuleNotFoundError" in result.stderr
