"""README.md and docs/ as a newcomer uses them (issues 16, 33).

- README.md is a first screen (issue 33 item 13): what it is, the demo and the test command
  first, what a build produces, and a page per audience in docs/ for the rest.
- Every command in a fenced ```bash block of README.md or docs/*.md is either run here, offline, against a
  fixture project, exactly as its nox session would run it (`nox -s VERB -- ARGS` runs
  `python -m sglforge VERB ARGS`; the fixture's global options go after the README's
  arguments, as a user would add them after `--`), or listed in NOT_RUN with the reason. A
  new example that is in neither list fails `test_every_readme_example_is_classified`.
- Every relative link in README.md and docs/*.md names a file in the repository, and every
  `#anchor` a heading of that file.
- The build-host prerequisites name what the recipes need and what the first build costs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.fixtures import upstreams
from tests.fixtures.gitrepos import DEP3
from tests.fixtures.project import SRC, FixtureProject, make_project

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
# The pages by audience the README sends its readers to (issue 33 item 13).
AUDIENCE_PAGES = (
    "build-host.md",
    "air-gapped.md",
    "many-hosts.md",
    "smoke.md",
    "serving-host.md",
    "reference.md",
)

# nox sessions that are `sglforge <same verb> <posargs>` (noxfile.py).
VERB_SESSIONS = {"plan", "fetch", "patches", "canary", "smoke", "doctor", "build", "verify"}

# README upstream names -> the fixture project's one upstream.
NAMES = {"flashinfer": "purepy", "sglang": "purepy", "sglang-kernel": "purepy"}

# Run here, in README order: command -> (allowed exit statuses, text the output must contain).
RUN: dict[str, tuple[set[int], str]] = {
    "nox -s plan": ({0}, "purepy"),
    "nox -s doctor": ({0, 1}, "doctor: "),  # exit 1 on this GPU-less host is the right answer
    "nox -s fetch -- flashinfer": ({0}, "fetched   purepy"),
    "nox -s fetch -- --offline": ({0}, "cached    purepy"),
    "nox -s fetch -- --bundle sources.tar": ({0}, "wrote bundle sources.tar"),
    "nox -s fetch -- --from-bundle sources.tar": ({0}, "exported  purepy"),
    "nox -s fetch -- sglang-kernel --bundle gpu.tar --depth 1": ({0}, "commit(s), shallow ("),
    "nox -s fetch -- --mirror https://github.com/=/srv/mirrors/github/": ({0}, "purepy"),
    "nox -s patches -- check": ({0}, "ok        purepy: 1 entry apply strictly"),
    "nox -s patches -- check --offline sglang": ({0}, "ok        purepy: 1 entry"),
    "nox -s patches -- lint": ({0}, "lint: ok"),
    "nox -s canary": ({0, 1}, "head HEAD -> main"),
    "nox -s canary -- --offline sglang": ({0, 1}, "head HEAD -> main"),
    "nox -s canary -- --json --output canary.json": ({0, 1}, '"schema": "sglforge-canary"'),
    "nox -s smoke -- --dry-run": ({0}, "# nothing below has been started"),
}

# Deliberately not run, with the reason. Everything extracted must be in RUN or here.
NOT_RUN: dict[str, str] = {
    "nox -s profile -- --from-host --out profiles/this-host.toml": "probes a GPU host; "
    "tests/smoke/test_profile_from_host.py proposes from recorded captures",
    "nox -s profile -- --from-host --save-facts capture/": "probes a GPU host; "
    "tests/smoke/test_profile_from_host.py saves and reloads captures",
    "nox -s profile -- --facts capture/ --out profiles/that-host.toml": "needs a capture; "
    "tests/smoke/test_profile_from_host.py runs the verb on the recorded ones",
    "'sglforge-stack-<version>/install.sh' /opt/sglang/bin/python": "serving-host install of a "
    "bundle; tests/test_bundle.py and tests/test_bundle_jit.py run install.sh",
    "nox -s warm -- --profile h200-pd-1gpu --venv /opt/sglang": "GPU host (H200); "
    "tests/smoke/test_jitcache.py runs warm with stand-in servers",
    "nox -s bundle -- --wheelhouse WHEELHOUSE/ --jit-cache "
    "'build/jitcache/jitcache-<key16>.tar.gz'": "needs built wheels and a warm artifact; "
    "tests/test_bundle_jit.py bundles a fixture artifact",
    ". /opt/sglang/sglforge-jit.env": "a serving host's env file; tests/test_bundle_jit.py "
    "sources the one install.sh wrote",
    "pip install nox && nox -s demo": "installs the build tools (an index); tests/test_demo.py "
    "runs `python -m demo`",
    "pip install nox && nox -s build": "a full CUDA build (hours; network)",
    "nox -s tests": "the test suite itself",
    "nox -s wheelhouse -- /srv/wheels": "downloads ~130 MB from PyPI; tests/test_offline_route.py "
    "runs it and uses the directory in a network namespace",
    "SGLFORGE_INDEX=/srv/wheels nox -s demo": "tests/test_offline_route.py runs it offline",
    "SGLFORGE_INDEX=/srv/wheels nox -s build": "tests/test_offline_route.py runs it offline "
    "(the fixture project)",
    "nox -s dev": "pip-installs into .nox/dev (needs an index); tests/test_noxfile.py checks it",
    "source .nox/dev/bin/activate && sglforge --help": "needs the venv `nox -s dev` makes",
    "nox -s patches -- refresh --onto 0123456789abcdef0123456789abcdef01234567 deepgemm": "needs a newer upstream commit; tests/test_refresh_lint.py runs refresh",
    "nox -s build": "a full CUDA build",
    "nox -s build -- sglang-kernel": "an nvcc build (~1 h on 20 jobs)",
    "nox -s build -- flashinfer-jit-cache": "an opt-in nvcc build (2,723 TUs, bench/"
    "realcheck-jitcache.json); tests/test_build.py "
    "builds an opt-in fixture recipe by name",
    "nox -s build -- --jobs 8 --mem-per-job 6GiB --compiler-cache ccache": "a full CUDA build",
    "nox -s build -- --compiler-cache-remote redis://cache.internal:6379/0 "
    "--compiler-cache-read-only": "a full CUDA build; tests/test_compiler_cache_remote.py "
    "builds the CUDA fixture against a real redis-server",
    "nox -s verify": "rebuilds every wheel",
    "nox -s build -- --dev sglang-kernel": "an nvcc build; tests/test_build_dev.py runs the "
    "dev loop on a CUDA fixture",
    "nox -s build -- --dev --publish-dev sglang-kernel": "an nvcc build; tests/test_build_dev.py",
    "nox -s smoke -- --model /models/DeepSeek-V4-Flash": "GPU host (8x RTX PRO 6000)",
    "nox -s smoke -- --wheelhouse /srv/wheelhouse": "GPU host",
    "nox -s smoke -- --index-url https://pypi.org/simple": "GPU host; network",
    "nox -s smoke -- --venv build/smoke/dsv4-flash-pd/venv": "GPU host",
    "nox -s smoke -- --profile h200-pd-2gpu --python /opt/torch/.venv/bin/python3 --model tiny": "GPU host (H200)",
    "pip install --require-hashes --no-index --only-binary :all: --find-links wheels/ "
    "--find-links WHEELHOUSE/ -r lockfiles/wheels.lock": "needs built wheels + a wheelhouse",
    "python3.12 -m venv /opt/sglang && . /opt/sglang/bin/activate": "serving-host setup",
    "nox -s lock-runtime": "resolves against PyPI; tests/test_runtime_lock.py runs it (fake uv)",
    "nox -s lock-runtime -- --check": "tests/test_runtime_lock.py checks staleness",
    "nox -s lock-runtime -- --metadata 'DIR/*.METADATA' --note 'where they came from'": "resolves against PyPI",
    "nox -s build -- --no-remote-cache": "a full CUDA build; tests/test_remote_cache.py",
    "nox -s build -- --remote-cache-read-only": "a full CUDA build; tests/test_remote_cache.py",
    "nox -s verify -- --from-lock": "rebuilds every wheel; tests/test_remote_cache.py runs it",
    "nox -s matrix -- --output matrix.json": "installs the build toolchain; tests/test_remote_cache.py runs `plan --matrix`",
    "nox -s check": "needs built wheels; tests/test_check.py builds fixture stacks",
    "nox -s check -- --wheels DIR --runtime-lock F": "needs a wheel set; tests/test_check.py",
    "nox -s check -- --python 3.12 --torch 2.11.0": "needs built wheels; tests/test_check.py",
    "nox -s check -- --gpu 12.0,12.1": "needs built wheels; tests/test_arch_audit.py (real nvcc)",
    "pip download --no-deps --only-binary :all: --python-version 3.12 --require-hashes '$(for' "
    "v in '$(seq' 17 '28);' do echo --platform 'manylinux_2_${v}_x86_64;' 'done)' --platform "
    "manylinux2014_x86_64 --platform any -r lockfiles/runtime.lock -d WHEELHOUSE": "downloads ~3.2 GB from PyPI; run by hand on the committed runtime.lock (189 wheels)",
    "nox -s bundle -- --wheelhouse WHEELHOUSE/ --sign-key KEY": "needs built wheels; "
    "tests/test_bundle_anchor.py signs a fixture bundle with a configured key",
    "ssh-keygen -Y verify -f allowed_signers -I sglforge -n sglforge-bundle -s "
    "'$A.anchor.json.sig' '<' '$A.anchor.json'": "serving-host check of a bundle's anchor; "
    "tests/test_bundle_anchor.py runs this ssh-keygen verify",
    "grep -q '\"archive_sha256\": \"$(sha256sum < $A | cut -c1-64)\"' '$A.anchor.json'": "serving-host "
    "check of a bundle archive against its anchor",
    "tar xzf '$A' && python3.12 -m venv venv": "serving-host install of a bundle; "
    "tests/test_bundle.py runs install.sh",
    "'sglforge-stack-<version>/install.sh' --anchor '$A.anchor.json' --allowed-signers "
    "allowed_signers venv/bin/python": "serving-host install of a bundle; "
    "tests/test_bundle_anchor.py runs install.sh with a signed anchor",
    "nox -s publish -- /srv/sglforge-index --wheelhouse WHEELHOUSE/": "needs built wheels; tests/test_publish.py publishes fixture stacks",
    "python3 -m http.server --bind 10.0.0.5 8080 --directory /srv/sglforge-index": "serves an index; tests/test_publish.py serves one on 127.0.0.1",
    "pip install --require-hashes --only-binary :all: --index-url http://10.0.0.5:8080/simple "
    "--trusted-host 10.0.0.5 -r lockfiles/wheels.lock": "serving-host install; tests/test_publish.py installs from the served index",
}


def readme_commands(text: str) -> list[str]:
    """Each command line of the fenced ```bash blocks (comments dropped, words re-joined),
    once, in order of first appearance."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():  # join `\` continuations
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words).replace(" '&&' ", " && "))
    return list(dict.fromkeys(commands))


def user_pages() -> list[Path]:
    """README.md, then the docs pages in the order a user reads them (the audience pages as
    the README lists them, then the others by name): where a user copies commands from."""
    audience = [DOCS / page for page in AUDIENCE_PAGES]
    return [README, *audience, *sorted(set(DOCS.glob("*.md")) - set(audience))]


def documented_commands() -> list[str]:
    """The commands of every page's ```bash blocks, once, in page order."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in user_pages())
    return readme_commands(text)


def test_readme_examples_are_extracted() -> None:
    commands = documented_commands()
    assert "nox -s fetch -- --offline" in commands
    assert "nox -s fetch -- --mirror https://github.com/=/srv/mirrors/github/" in commands
    assert "nox -s smoke -- --dry-run" in commands  # comment after the command dropped


def test_every_readme_example_is_classified() -> None:
    commands = set(documented_commands())
    assert not RUN.keys() & NOT_RUN.keys()
    unclassified = commands - RUN.keys() - NOT_RUN.keys()
    assert not unclassified, f"new README examples: add them to RUN or NOT_RUN: {unclassified}"
    stale = (RUN.keys() | NOT_RUN.keys()) - commands
    assert not stale, f"no longer in README.md or docs/: {stale}"


def _as_sglforge(command: str, project: FixtureProject) -> list[str]:
    words = shlex.split(command)
    assert words[:2] == ["nox", "-s"] and words[2] in VERB_SESSIONS, command
    posargs = words[4:] if words[3:4] == ["--"] else words[3:]
    posargs = [NAMES.get(word, word) for word in posargs]
    return [sys.executable, "-m", "sglforge", words[2], *posargs, *project.args()]


def test_offline_readme_examples_run_against_a_fixture_project(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    shutil.copytree(REPO / "profiles", project.root / "profiles")
    patches = project.root / "patches" / "purepy"
    upstreams.make_patch(
        project.mirror / "org" / "purepy",
        "0001-greeting.patch",
        {"src/purepy/__init__.py": 'GREETING = "patched"\n'},
        "Change the greeting\n\n" + DEP3.format(description="A test."),
        patches,
    )
    (patches / "series").write_text("0001-greeting.patch\n")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("SGLFORGE_PROJECT", None)
    ran = []
    for command in documented_commands():
        if command not in RUN:
            continue
        statuses, expected = RUN[command]
        result = subprocess.run(
            _as_sglforge(command, project),
            capture_output=True,
            text=True,
            env=env,
            cwd=project.root,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode in statuses, f"{command}: exit {result.returncode}\n{output}"
        assert expected in output, f"{command}: {expected!r} not in\n{output}"
        assert "Traceback" not in output, f"{command}\n{output}"
        ran.append(command)
    assert ran == [c for c in documented_commands() if c in RUN]
    assert set(ran) == RUN.keys()


# --- links ----------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def anchors(doc: Path) -> set[str]:
    """The `#fragment` each heading of `doc` gets on GitHub: lower case, punctuation (backticks
    included) dropped, spaces to hyphens; headings inside fenced blocks are not headings."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#{1,6} (.+)$", text, re.M)
    }


def test_anchors_are_computed_as_github_does() -> None:
    assert "pins-lockfilesupstreamstoml" in anchors(DOCS / "reference.md")
    assert "wheels-nox--s-build-nox--s-verify" in anchors(DOCS / "build-host.md")


def test_every_relative_link_resolves_to_a_file_in_the_repository() -> None:
    broken = []
    checked = 0
    for doc in markdown_files():
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # a URL
            name, _, fragment = target.partition("#")
            path = (doc.parent / name).resolve() if name else doc
            checked += 1
            if not path.is_relative_to(REPO) or not path.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
            elif fragment and path.suffix == ".md" and fragment not in anchors(path):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
    assert checked >= 5


def test_the_readme_links_the_docs_and_names_no_notes_outside_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    for doc in ("docs/architecture.md", "docs/reproducibility.md"):
        assert f"]({doc})" in text
    for outside in (
        "shared notes",
        "reference/reproducibility.md",
        "shared/reference",
        "DESIGN.md",
    ):
        assert outside not in text, outside


def test_architecture_names_every_package() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = {
        p.name for p in (REPO / "src" / "sglforge").iterdir() if (p / "__init__.py").exists()
    } | {"check"}
    missing = [p for p in sorted(packages) if f"- `{p}/`" not in text]
    assert not missing, missing
    for contract in ("Trust", "Coherence", "Pins", "Patches", "Build", "Smoke"):
        assert f"**{contract}.**" in text


# --- build-host prerequisites ---------------------------------------------------------------


def section(page: Path, heading: str) -> str:
    """The text of `heading` (a whole line) in `page`, up to the next heading of its level."""
    text = page.read_text(encoding="utf-8")
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n") + 1
    following = re.search(rf"^{level} ", text[start + len(heading) :], re.M)
    return text[start : start + len(heading) + following.start()] if following else text[start:]


def test_build_host_prerequisites_name_ucx_and_the_cost_of_the_first_build() -> None:
    page = DOCS / "build-host.md"
    needs = section(page, "## What it needs")
    assert "UCX" in needs and "nixl" in needs
    cost = section(page, "## How long, and what the first run downloads")
    assert "4.9 GB" in cost and "hours on few cores" in cost
    assert "about 130 MB (~440 MB installed)" in cost  # measured, issue 33 item 13
    # The recipe that needs UCX says where UCX comes from.
    assert "UCX" in (REPO / "recipes" / "nixl-cu13.toml").read_text(encoding="utf-8")


def test_nixl_prerequisites_state_one_truth() -> None:
    """Issue 23 item 12: the wraps come from the pins (handed to meson), UCX from the
    toolchain's libucx-cu13 wheel; neither from the system."""
    needs = section(DOCS / "build-host.md", "## What it needs")
    assert "installed on the system" not in needs and "ucx.pc" not in needs
    assert "subprojects/packagecache/" in needs and "libucx-cu13" in needs
    recipe = (REPO / "recipes" / "nixl-cu13.toml").read_text(encoding="utf-8")
    assert "-Ducx_path={site_packages}/libucx" in recipe
    assert "host-requires" not in recipe.split("upstream =")[1]
    assert "must come from" not in recipe


FIRST_SCREEN_LINES = 150  # issue 33 item 13: "at most ~400"; it is about half that


def test_readme_is_a_first_screen_with_the_demo_first() -> None:
    """Issue 33 item 13: the README was 1,102 lines; a newcomer needs what it is, the two
    commands (the demo first: it works without GitHub), what a build produces and where to go
    next. The rest lives in docs/, one page per audience, each linked from the README."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= FIRST_SCREEN_LINES, len(lines)
    commands = readme_commands(text)
    assert commands[:2] == ["pip install nox && nox -s demo", "nox -s tests"], commands
    # the first command is on the first screen of a terminal, not after pages of prose
    assert next(i for i, line in enumerate(lines) if "nox -s demo" in line) < 15
    for page in AUDIENCE_PAGES:
        assert f"](docs/{page}" in text, page
        assert (DOCS / page).read_text(encoding="utf-8").startswith("# "), page
    for changelog in ("is gone", "is closed", "(issue "):
        for page in [README, *(DOCS / p for p in AUDIENCE_PAGES)]:
            assert changelog not in page.read_text(encoding="utf-8"), (page.name, changelog)


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run runs what the README tells a newcomer the tests are."""
    test_command = readme_commands(README.read_text(encoding="utf-8"))[1]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in [line.split("#")[0].strip() for line in ci], test_command


def test_h200_page_has_no_internal_notes() -> None:
    assert "Note for helpers" not in (DOCS / "h200-pd.md").read_text(encoding="utf-8")


def test_first_screen_says_what_a_build_on_the_committed_pins_produces_needs_and_costs() -> None:
    """Issue 23 item 6: a newcomer reads the failing end state before hours of compiling,
    not 500 lines later; the details are one link away (docs/build-host.md)."""
    text = README.read_text(encoding="utf-8")
    produces = section(README, "## The real build: `nox -s build`")
    assert "wheels/" in produces and "stack check" in produces and "exit status 1" in produces
    assert "--no-check" in produces and "bench/realcheck.json" in produces
    # it names the release set the lockfile pins
    lock = (REPO / "lockfiles" / "upstreams.toml").read_text(encoding="utf-8")
    assert 'ref = "v0.5.15"' in lock and "SGLang 0.5.15" in produces
    assert "**What it needs**" in produces and "CUDA 13.0" in produces and "3.12" in produces
    assert "**How long:**" in produces and "hours" in produces
    assert "**Exit status:**" in produces and "SIGTERM" in produces
    assert "docs/build-host.md#what-it-needs" in text
    page = DOCS / "build-host.md"
    assert "SGLang 0.5.15" in section(page, "## What a build on the committed pins produces")
    needs = section(page, "## What it needs")
    assert "~5 GB toolchain venv" in needs and "shared by `build`, `verify` and `matrix`" in needs
    assert "SIGTERM" in section(page, "## Exit status, and the order of the checks")


def test_module_paths_named_in_docs_and_lockfile_headers_exist() -> None:
    """Issue 23 item 15: headers named src/sglforge/pins.py and toolchain.py after they moved."""
    import re

    files = [
        README,
        *(REPO / "docs").glob("*.md"),
        *(REPO / "lockfiles").glob("*"),
        *(REPO / "stacks").glob("*/lockfiles/*"),
        REPO / "wheels" / "README.md",
        REPO / "bench" / "README.md",
    ]
    named = {
        m
        for f in files
        if f.is_file()
        for m in re.findall(r"src/sglforge/[A-Za-z0-9_/]+\.py", f.read_text("utf-8"))
    }
    assert named and not [m for m in sorted(named) if not (REPO / m).exists()]


def test_serving_host_install_routes_are_ones_that_can_work() -> None:
    """Issue 23 item 5: wheels/README.md's route lacked the third-party wheelhouse; the README
    promised a wheelhouse download that stops at cuda-tile, and a --from-lock verify whose lock
    nobody said where to get."""
    wheels_readme = (REPO / "wheels" / "README.md").read_text(encoding="utf-8")
    assert "--find-links wheels/ --find-links WHEELHOUSE/ -r lockfiles/wheels.lock" in " ".join(
        wheels_readme.replace("\\\n", " ").split()
    )
    assert "wheelhouse download command" in wheels_readme
    serving = section(DOCS / "serving-host.md", "## Install on a serving host")
    # pip takes --platform literally: the command must name every manylinux level up to 2_28
    assert "$(for v in $(seq 17 28); do echo --platform manylinux_2_${v}_x86_64; done)" in serving
    assert "-r lockfiles/runtime.lock -d WHEELHOUSE" in serving
    runtime_lock = (REPO / "lockfiles" / "runtime.lock").read_text(encoding="utf-8")
    assert "cuda-tile==1.6.0rc5" not in runtime_lock  # the sdist-only pin of the 0.5.21 set
    text = (DOCS / "many-hosts.md").read_text(encoding="utf-8")
    many = text[text.index("nox -s verify -- --from-lock") : text.index("**The CI matrix.**")]
    assert "written by `nox -s build`" in many
    # where a fresh clone's lock comes from (issue 32 item 2): main carries it, and it exists
    assert "Main carries the lock of the stack of record" in " ".join(many.split())
    assert (REPO / "lockfiles" / "wheels.lock").is_file()
