"""Issue 23 (the first hour, second round): `nox -s …` as a user types it is as careful as the
bare `sglforge` command. Every test runs the real nox (or `python -m sglforge`) on the fixture
project; none installs the toolchain: pip is pointed at no index (PIP_NO_INDEX; SGLFORGE_INDEX at an
empty directory for the hash-pinned installs, which ignore PIP_*), so reaching an install
shows as "installing" in the output and a quick pip failure."""

from __future__ import annotations

import fcntl
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures import upstreams
from tests.fixtures.project import FixtureProject, make_project
from tests.test_nox_order import nox_project

ROOT = Path(__file__).resolve().parents[1]
CURRENT = f"{sys.version_info.major}.{sys.version_info.minor}"
pytestmark = pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import nox"], capture_output=True, check=False
    ).returncode
    != 0,
    reason="needs nox (pip install nox)",
)


def _project(
    tmp_path: Path, python: str = CURRENT, names: tuple[str, ...] = ("purepy",)
) -> tuple[Path, FixtureProject]:
    project = nox_project(tmp_path, python) if names == ("purepy",) else None
    if project is None:  # nox_project builds purepy only; same layout for other fixtures
        import shutil

        fixture = make_project(tmp_path, names)
        root = fixture.root
        shutil.copy(ROOT / "noxfile.py", root / "noxfile.py")
        (root / "src").symlink_to(ROOT / "src")
        _matching_toolchain_lock(root)
        return root, fixture
    fixture = FixtureProject(
        root=project,
        mirror=tmp_path / "mirror",
        cache=tmp_path / "cache",
        build_root=tmp_path / "root",
        config=tmp_path / "config.toml",
        commits={},
    )
    _matching_toolchain_lock(project)
    return project, fixture


def _matching_toolchain_lock(root: Path) -> None:
    """A toolchain.lock pinning exactly the fixture's toolchain.toml (hashes never checked:
    pip gets no index, so an install fails at once)."""
    import importlib.metadata

    from tests.fixtures.project import BUILD_REQUIRES

    lines = ["# [build]"] + [
        f"{n}=={importlib.metadata.version(n)} --hash=sha256:{'0' * 64}" for n in BUILD_REQUIRES
    ]
    lines += ["# [torch-deps]", "# [torch]", f"torch==2.13.0 --hash=sha256:{'0' * 64}"]
    (root / "lockfiles" / "toolchain.lock").write_text("\n".join(lines) + "\n")


def _env(fixture: FixtureProject, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SGLFORGE_TOOLCHAIN_PYTHON", "SGLFORGE_CONFIG", "SGLFORGE_PROJECT")
        and not k.startswith("PIP_")
    }
    no_index = fixture.root.parent / "no-index"  # the hash-pinned installs' index: empty
    no_index.mkdir(exist_ok=True)
    env.update(
        SGLFORGE_CONFIG=str(fixture.config),
        SGLFORGE_INDEX=str(no_index),
        SGLFORGE_TORCH_INDEX=str(no_index),
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        SGLFORGE_TOOLCHAIN_PYTHON=sys.executable,
    )
    env.update(extra)
    return env


def _nox(
    root: Path, session: str, *args: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", session, "--", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout,
    )


def _mirror_args(fixture: FixtureProject) -> list[str]:
    return [
        "--mirror",
        f"{upstreams.MIRROR_PREFIX}={fixture.mirror}/",
        "--cache-dir",
        str(fixture.cache),
        "--build-root",
        str(fixture.build_root),
    ]


def _config_with_mirror(fixture: FixtureProject) -> None:
    fixture.config.write_text(
        f'cache-dir = "{fixture.cache}"\nbuild-root = "{fixture.build_root}"\n'
        f'[mirrors]\n"{upstreams.MIRROR_PREFIX}" = "{fixture.mirror}/"\n'
    )


# ---------------------------------------------------------------------------------------------
# 1. options after `--` reach the pre-fetch (and 10: one toolchain venv for build and matrix)


def test_build_passes_mirror_cache_dir_and_build_root_to_its_prefetch(tmp_path):
    root, fixture = _project(tmp_path)
    result = _nox(root, "build", *_mirror_args(fixture), env=_env(fixture))
    out = result.stdout + result.stderr
    assert "Could not resolve host" not in out, out
    assert f"exported  purepy -> {fixture.build_root}/src/purepy" in out, out
    assert (fixture.cache).is_dir()
    # ... and only then the toolchain install began (which fails here: no index)
    assert out.index("exported  purepy") < out.index("installing sglforge into"), out
    # 10. `nox -s matrix` then uses the same toolchain venv, keyed by the toolchain lock
    second = _nox(root, "matrix", env=_env(fixture))
    out = second.stdout + second.stderr
    assert "installing sglforge into" in out, out
    venvs = sorted(p.name for p in (root / ".nox").iterdir() if "toolchain" in p.name)
    assert len(venvs) == 1 and venvs[0].startswith("toolchain-"), venvs
    assert " -m venv " not in out, out  # reused, not made again


# ---------------------------------------------------------------------------------------------
# 2. recipes/_defaults.toml is not a recipe


def test_defaults_file_is_no_recipe_for_did_you_mean_or_lock_runtime(tmp_path):
    from tests.smoke.conftest import build_wheelset
    from tests.test_runtime_lock import _fake_uv

    fixture = make_project(tmp_path)
    (fixture.root / "recipes" / "_defaults.toml").write_text('mem-per-job = "1GiB"\n')
    result = fixture.run("build", "purepi")
    assert result.returncode == 2, result.stderr
    assert "did you mean 'purepy'" in result.stderr
    assert "_defaults" not in result.stderr, result.stderr
    # lock-runtime: the names sglforge builds exclude nothing called "-defaults"
    build_wheelset(fixture.root)
    (fixture.root / "lockfiles" / "runtime.in").write_text("# hand\n")
    env = {
        **{k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"},
        "SGLFORGE_UV": str(_fake_uv(tmp_path)),
        "PYTHONPATH": str(ROOT / "src"),
    }
    run = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(fixture.root), "lock-runtime"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    # the lock's header records the resolver call
    argv = (fixture.root / "lockfiles" / "runtime.lock").read_text().split()
    emitted = [argv[i + 1] for i, a in enumerate(argv) if a == "--no-emit-package"]
    assert emitted == ["purepy"], argv


# ---------------------------------------------------------------------------------------------
# 3. every verb's arguments are checked before anything is installed


BAD_BUILD_ARGS = {
    "unknown-flag": (["--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    "jobs-without-value": (["--jobs"], "argument --jobs: expected one argument"),
    "mem-per-job": (["--mem-per-job", "lots"], "invalid value 'lots'"),
    "remote-url": (["--compiler-cache-remote", "https://x y"], "contains whitespace"),
    "unknown-recipe": (["purepi"], "did you mean 'purepy'"),
}


@pytest.mark.parametrize("case", sorted(BAD_BUILD_ARGS))
def test_build_rejects_bad_arguments_before_fetching_or_installing(tmp_path, case):
    args, message = BAD_BUILD_ARGS[case]
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)  # the sources would fetch fine: only the arguments are wrong
    result = _nox(root, "build", *args, env=_env(fixture))
    out = result.stdout + result.stderr
    assert message in out, out
    assert result.returncode == 2, out  # sglforge's status for bad input, through nox
    assert "installing" not in out and "exported" not in out, out
    assert not list((root / ".nox").glob("*toolchain*")) if (root / ".nox").exists() else True


def test_build_rejects_a_cuda_toolkit_that_is_not_the_pin_before_installing(tmp_path):
    root, fixture = _project(tmp_path)
    if not Path("/usr/local/cuda/bin/nvcc").is_file():
        pytest.skip("needs an nvcc to disagree with")
    _config_with_mirror(fixture)
    toml = root / "lockfiles" / "toolchain.toml"
    import re

    toml.write_text(re.sub(r'^cuda = "[0-9.]+"', 'cuda = "9.2"', toml.read_text(), flags=re.M))
    result = _nox(root, "build", env=_env(fixture))
    out = result.stdout + result.stderr
    assert result.returncode == 2 and "pins CUDA 9.2" in out, out
    assert "installing" not in out, out


# ---------------------------------------------------------------------------------------------
# 4. SIGTERM to nox stops sglforge and what it started


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Serves an endless body one byte at a time: a download that never ends by itself."""

    started = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 30))
        self.end_headers()
        _Trickle.started.set()
        try:
            while True:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == sid:
                members.append(int(entry.name))
    return members


def test_sigterm_to_nox_stops_sglforge_and_releases_the_cache_lock(tmp_path):
    root, fixture = _project(tmp_path, names=("fcdemo",))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Trickle.started.clear()
    port = server.server_address[1]
    fixture.config.write_text(
        f'cache-dir = "{fixture.cache}"\nbuild-root = "{fixture.build_root}"\n[mirrors]\n'
        f'"{upstreams.MIRROR_PREFIX}" = "{fixture.mirror}/"\n'
        f'"{upstreams.MIRROR_PREFIX}dl/" = "http://127.0.0.1:{port}/dl/"\n'
    )
    nox = subprocess.Popen(
        [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", "fetch"],
        cwd=root,
        env=_env(fixture),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert _Trickle.started.wait(120), "the download never started"
        time.sleep(0.5)
        assert len(_session_members(nox.pid)) >= 2  # nox and sglforge
        nox.send_signal(signal.SIGTERM)  # to nox alone, as a CI runner cancelling the job
        out, _ = nox.communicate(timeout=60)
    finally:
        if nox.poll() is None:
            nox.kill()
        server.shutdown()
    deadline = time.monotonic() + 5
    while _session_members(nox.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_members(nox.pid) == [], out  # sglforge did not outlive nox
    assert nox.returncode == 128 + signal.SIGTERM, out
    assert "interrupted by SIGTERM" in out, out
    with open(fixture.cache / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held


# ---------------------------------------------------------------------------------------------
# 8. sglforge's exit status comes out of nox


def test_exit_status_two_passes_through_nox(tmp_path):
    root, fixture = _project(tmp_path)
    result = _nox(root, "fetch", "purepi", env=_env(fixture))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "did you mean 'purepy'" in result.stderr


# ---------------------------------------------------------------------------------------------
# 9. one Python discovery (pyenv too) for build and smoke


def _pyenv_with(tmp_path: Path, version: str) -> Path | None:
    real = Path.home() / ".pyenv" / "versions"
    found = sorted(real.glob(f"{version}.*/bin/python{version}")) if real.is_dir() else []
    if not found:
        return None
    fake = tmp_path / "pyenv"
    target = fake / "versions" / found[-1].parents[1].name / "bin"
    target.mkdir(parents=True)
    (target / f"python{version}").symlink_to(found[-1])
    return fake


def test_build_finds_a_pyenv_python_like_the_smoke_does(tmp_path):
    other = "3.12" if CURRENT != "3.12" else "3.11"
    pyenv = _pyenv_with(tmp_path, other)
    if pyenv is None:
        pytest.skip(f"needs a pyenv-installed Python {other}")
    root, fixture = _project(tmp_path, other)
    (root / "lockfiles" / "toolchain.lock").write_text("# [build]\n")  # stops before the venv
    env = _env(fixture, PATH="/usr/bin:/bin", PYENV_ROOT=str(pyenv))
    env.pop("SGLFORGE_TOOLCHAIN_PYTHON")
    result = _nox(root, "build", env=env)
    out = result.stdout + result.stderr
    assert f"no Python {other} found" not in out, out
    assert f"toolchain Python {other}: {pyenv}/versions/" in out, out


# ---------------------------------------------------------------------------------------------
# 13. CLI conventions; a venv session does not reinstall what it has


def test_check_session_does_not_reinstall_packaging_on_a_second_run(tmp_path):
    wheels = Path("/opt/pypi/files")
    if not list(wheels.glob("packaging-2*.whl")):
        pytest.skip("needs a local packaging wheel")
    root, fixture = _project(tmp_path)
    env = _env(fixture, PIP_FIND_LINKS=str(wheels))
    first = _nox(root, "check", env=env)
    assert "pip install" in first.stdout + first.stderr
    second = _nox(root, "check", env=dict(env, PIP_FIND_LINKS=str(tmp_path / "nothing")))
    out = second.stdout + second.stderr
    assert "pip install" not in out and "not reinstalled" in out, out


def _sglforge(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "sglforge", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=ROOT,
    )


def test_version_help_and_did_you_mean_for_a_verb():
    import sglforge

    version = _sglforge("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"sglforge {sglforge.__version__}"
    top = _sglforge("--help").stdout
    assert "argument parsing" not in top  # not the module docstring
    typo = _sglforge("biuld")
    assert typo.returncode == 2 and "did you mean 'build'" in typo.stderr, typo.stderr


def test_every_option_of_every_verb_has_help_text():
    from sglforge.cli.main import build_parser

    parser = build_parser()
    missing = []
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for verb, sub in action.choices.items():
                missing += [
                    f"{verb} {a.option_strings or a.dest}" for a in sub._actions if not a.help
                ]
    assert not missing, missing


# ---------------------------------------------------------------------------------------------
# 14. the interrupt tests hold when the suite runs with SIGINT ignored (nohup … &)


def test_interrupt_tests_pass_with_sigint_ignored_in_the_runner():
    tests = [
        "tests/test_build_interrupt.py::test_sigint_stops_a_slow_build_and_releases_the_lock",
        "tests/smoke/test_smoke_run.py::test_ctrl_c_tears_everything_down[ctrl-c]",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout


# ---------------------------------------------------------------------------------------------
# 11. a mirror rule that matches no pin is a warning, not silence


def test_a_mirror_rule_matching_no_pin_is_a_warning(tmp_path):
    root, fixture = _project(tmp_path)
    result = _nox(
        root,
        "fetch",
        "--mirror",
        "example.invalid=/srv/mirrors",
        *_mirror_args(fixture),
        env=_env(fixture),
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert (
        "mirror rule 'example.invalid' = '/srv/mirrors' (cli: --mirror) matches no pinned "
        "URL and is ignored"
    ) in out, out
    assert "https://example.invalid/" in out.split("matches no pinned URL")[1]
    assert f"mirror rule '{upstreams.MIRROR_PREFIX}'" not in out  # the rule that matches


# ---------------------------------------------------------------------------------------------
# 15. `lock-runtime -- --check` is offline: it installs nothing


def test_lock_runtime_check_installs_nothing(tmp_path):
    root, fixture = _project(tmp_path)
    (root / "lockfiles" / "runtime.in").write_text("# hand\n")
    result = _nox(root, "lock-runtime", "--check", env=_env(fixture))
    out = result.stdout + result.stderr
    assert "runtime.lock is missing" in out, out  # the check ran, and said what it found
    assert result.returncode == 1, out
    assert "pip install" not in out and "uv==" not in out, out  # (nox still makes its venv)


def test_build_refuses_a_missing_system_library_before_installing(tmp_path):
    """Item 3: UCX for nixl-cu13 is a recipe's `host-requires`, checked with pkg-config."""
    import shutil as _shutil

    if _shutil.which("pkg-config") is None:
        pytest.skip("needs pkg-config")
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    recipe = root / "recipes" / "purepy.toml"
    recipe.write_text(
        recipe.read_text().replace(
            'mem-per-job = "512MiB"',
            'mem-per-job = "512MiB"\nhost-requires = ["sglforge-no-such-lib >= 1.22"]',
        )
    )
    result = _nox(root, "build", env=_env(fixture))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "purepy: sglforge-no-such-lib >= 1.22 (not found)" in out, out
    assert "installing" not in out and "exported" not in out, out


def test_a_fetch_waiting_for_the_source_cache_lock_says_who_holds_it(tmp_path):
    """Item 13: two fetches meeting; the second says what it waits for instead of silence."""
    fixture = make_project(tmp_path)
    fixture.cache.mkdir(parents=True)
    with open(fixture.cache / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("pid 424242\n")
        held.flush()
        proc = fixture.start("fetch")
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True
        )
        reader.start()
        deadline = time.monotonic() + 30
        while not any("waiting for" in x for x in lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        still_waiting = proc.poll() is None
        held.truncate(0)
        fcntl.flock(held, fcntl.LOCK_UN)
    out = proc.stdout.read()
    proc.wait(timeout=120)
    reader.join(timeout=10)
    line = next((x for x in lines if "waiting for" in x), "".join(lines))
    assert "waiting for the source cache" in line and "held by pid 424242" in line, line
    assert still_waiting  # it waited while we held the lock
    assert proc.returncode == 0, lines
    assert "exported  purepy" in out


def test_patches_session_rejects_a_bad_action_before_installing_unidiff(tmp_path):
    root, fixture = _project(tmp_path)
    result = _nox(root, "patches", "chek", env=_env(fixture))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "invalid choice: 'chek'" in out, out
    assert "pip install" not in out, out
