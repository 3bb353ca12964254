"""Issue 33 (the first hour, third round): the real `nox` and `python -m sglforge` on the
fixture project. Nothing here installs the toolchain: pip gets no index (tests/
test_nox_first_hour.py), so reaching an install shows as "installing sglforge into"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_nox_first_hour import _config_with_mirror, _env, _nox, _project

ROOT = Path(__file__).resolve().parents[1]
INSTALLING = "installing sglforge into"
pytestmark = pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import nox"], capture_output=True, check=False
    ).returncode
    != 0,
    reason="needs nox (pip install nox)",
)


# ---------------------------------------------------------------------------------------------
# item 6: a misspelled --target or profile is refused everywhere, with a "did you mean"


@pytest.mark.parametrize("session", ["build", "verify", "matrix"])
def test_a_misspelled_target_is_refused_before_fetching_or_installing(tmp_path, session):
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    (root / "targets").mkdir()
    (root / "targets" / "sm90.toml").write_text('description = "an sm_90a build"\n')
    (root / "wheels").mkdir(exist_ok=True)
    (root / "wheels" / "manifest.json").write_text('{"wheels": []}\n')  # verify's own check
    result = _nox(root, session, "--target", "sm9", env=_env(fixture))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "--target sm9: no " in out and "did you mean 'sm90'?" in out, out
    assert "exported" not in out and INSTALLING not in out and "Traceback" not in out, out


@pytest.mark.parametrize("verb", ["smoke", "doctor"])
def test_a_misspelled_profile_gets_a_did_you_mean(verb):
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", verb, "--"]
        + ["--profile", "h200-pd-2gp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "no smoke profile 'h200-pd-2gp'" in out and "did you mean 'h200-pd-2gpu'" in out, out
    assert "Traceback" not in out, out


# ---------------------------------------------------------------------------------------------
# item 9 (and 14: a broken nvcc): a setting the user gave that cannot be used is an error


def _other_python() -> str | None:
    from sglforge.base.python import candidates, major_minor

    current = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in ("3.12", "3.11", "3.13", "3.10"):
        for found in candidates(version, use_uv=False) if version != current else []:
            if (
                found != os.environ.get("SGLFORGE_TOOLCHAIN_PYTHON")
                and major_minor(found) == version
            ):
                return found
    return None


def _broken_nvcc(tmp_path: Path) -> Path:
    home = tmp_path / "cuda-broken"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc-wrapper: cannot exec real-nvcc' >&2\nexit 127\n")
    nvcc.chmod(0o755)
    return home


@pytest.mark.parametrize("case", ["cuda-home", "python-missing", "python-other", "nvcc-broken"])
def test_an_explicit_setting_that_cannot_be_used_is_an_error(tmp_path, case):
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    if case == "cuda-home":
        extra = {"CUDA_HOME": "/nonexistent"}
        message = "CUDA_HOME=/nonexistent: no /nonexistent/bin/nvcc"
    elif case == "python-missing":
        extra = {"SGLFORGE_TOOLCHAIN_PYTHON": str(tmp_path / "no" / "python3")}
        message = f"SGLFORGE_TOOLCHAIN_PYTHON={tmp_path / 'no' / 'python3'}: not an executable"
    elif case == "python-other":
        other = _other_python()
        if other is None:
            pytest.skip("needs a Python of another version than this one")
        extra = {"SGLFORGE_TOOLCHAIN_PYTHON": other}
        current = f"{sys.version_info.major}.{sys.version_info.minor}"
        message = f"lockfiles/toolchain.toml pins python {current}"
    else:
        home = _broken_nvcc(tmp_path)
        extra = {"CUDA_HOME": str(home)}
        message = f"{home / 'bin' / 'nvcc'} --version does not say its release"
    result = _nox(root, "build", env=_env(fixture, **extra))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert message in out, out
    assert "release unknown" not in out, out
    assert INSTALLING not in out and "Traceback" not in out, out


# ---------------------------------------------------------------------------------------------
# item 5: a read-only build root is refused by the preflight; a full disk is named


def test_a_read_only_build_root_is_refused_before_fetching_or_installing(tmp_path):
    from tests.helpers import read_only

    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    locked = tmp_path / "ro"
    locked.mkdir()
    prefix = read_only(locked)
    if prefix is None:
        pytest.skip("needs root and unshare (a read-only bind mount)")
    build_root = locked / "build-root"
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", "build"]
        + ["--", "--build-root", str(build_root)],
        cwd=root,
        capture_output=True,
        text=True,
        env=_env(fixture),
        check=False,
        timeout=240,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert (
        f"error: build root (cli: --build-root) {build_root} is not writable: Read-only file system"
    ) in out, out
    assert "exported" not in out and INSTALLING not in out and "Traceback" not in out, out


def test_a_full_disk_is_named_in_the_headline_of_the_failed_build(tmp_path):
    from tests.fixtures import upstreams
    from tests.fixtures.project import make_project
    from tests.helpers import small_disk

    fixture = make_project(tmp_path)
    disk = tmp_path / "disk"
    disk.mkdir()
    prefix = small_disk(disk, "12m")
    if prefix is None:
        pytest.skip("needs root and unshare (a small tmpfs)")
    upstreams.make_patch(  # the build writes 64 MiB into its tree: more than the disk holds
        fixture.mirror / "org" / "purepy",
        "0001-fill.patch",
        {
            "setup.py": "from setuptools import setup\n"
            "open('filler.bin', 'wb').write(b'x' * (64 << 20))\nsetup()\n"
        },
        "Fill the disk during the build",
        fixture.root / "patches" / "purepy",
    )
    (fixture.root / "patches" / "purepy" / "series").write_text("0001-fill.patch\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("SGLFORGE_PROJECT", None)
    args = fixture.args()
    args[args.index("--build-root") + 1] = str(disk / "build-root")
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "sglforge", *args, "build"],
        capture_output=True,
        text=True,
        env=env,
        cwd=fixture.root,
        check=False,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    headline = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert headline.startswith("error: build of purepy failed (exit 1): the disk is full"), (
        result.stderr
    )
    assert f"under the build root {disk / 'build-root'}" in headline, headline
    assert "Traceback" not in result.stderr.split("--- last 40 lines")[0]


# ---------------------------------------------------------------------------------------------
# item 14: small ones


@pytest.mark.parametrize("verb", [("config",), ("plan",), ("build-requirements",)])
def test_a_closed_pipe_is_no_traceback(verb):
    """`sglforge config | head -1`: the reader closes the pipe at once; sglforge's output is
    larger than what it reads."""
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    env["PYTHONPATH"] = str(ROOT / "src")
    read, write = os.pipe()
    os.close(read)  # nobody reads: every write fails with EPIPE
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(ROOT), *verb],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 141, proc.stderr


def test_a_relative_build_root_on_the_command_line_is_resolved(tmp_path):
    from tests.fixtures.project import make_project

    fixture = make_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    env["PYTHONPATH"] = str(ROOT / "src")
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(fixture.root), "config"]
        + ["--build-root", "rel/root"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("build-root"))
    assert f"= {tmp_path / 'rel' / 'root'} " in line and "cli: --build-root" in line, line


# ---------------------------------------------------------------------------------------------
# item 10: a build whose sources cannot be fetched lists every one, with the hint that fits


@pytest.mark.parametrize("mirror", [False, True])
def test_unfetchable_sources_are_all_listed_with_a_hint_that_fits(tmp_path, mirror):
    from tests.fixtures import upstreams

    root, fixture = _project(tmp_path, names=("purepy", "usespy"))
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    if mirror:  # a mirror rule that applies, to a mirror that lacks the repositories
        fixture.config.write_text(f'[mirrors]\n"{upstreams.MIRROR_PREFIX}" = "{empty}/"\n')
    else:
        fixture.config.write_text("")
    result = _nox(
        root,
        "build",
        "usespy",
        "--cache-dir",
        str(fixture.cache),
        "--build-root",
        str(fixture.build_root),
        env=_env(fixture),
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "cannot fetch 2 of 2 source(s):" in out, out
    assert "  - purepy: cannot fetch https://example.invalid/org/purepy" in out, out
    assert "  - usespy: cannot fetch https://example.invalid/org/usespy" in out, out
    assert "--bundle FILE" in out and "--from-bundle FILE" in out, out
    if mirror:
        assert "went to a mirror (https://example.invalid/) that does not hold them" in out
        assert "add a mirror" not in out, out
    else:
        assert "2 match no mirror rule" in out and "add a mirror" in out, out
    assert INSTALLING not in out and "Traceback" not in out, out


def test_an_sglforge_index_that_is_no_directory_is_refused_before_installing(tmp_path):
    root, fixture = _project(tmp_path)
    _config_with_mirror(fixture)
    missing = tmp_path / "no-such-wheelhouse"
    result = _nox(root, "build", env=_env(fixture, SGLFORGE_INDEX=str(missing)))
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert f"SGLFORGE_INDEX={missing}: not a directory" in out, out
    assert INSTALLING not in out and "Traceback" not in out, out


def test_a_no_op_build_does_not_claim_it_wrote_the_manifest_and_lock(tmp_path):
    from tests.fixtures.project import make_project

    fixture = make_project(tmp_path)
    first = fixture.run("build", "--no-check")
    assert first.returncode == 0, first.stderr
    manifest, lock = (
        fixture.root / "wheels" / "manifest.json",
        fixture.root / "lockfiles" / "wheels.lock",
    )
    assert f"wrote 1 wheel(s) into {fixture.root / 'wheels'}, {manifest}, {lock}" in first.stdout
    stamps = (manifest.stat().st_mtime_ns, lock.stat().st_mtime_ns)
    again = fixture.run("build", "--no-check")
    assert again.returncode == 0, again.stderr
    assert f"{manifest} and {lock} unchanged (no wheel was rebuilt or copied)" in again.stdout
    assert "wrote" not in again.stdout, again.stdout
    assert (manifest.stat().st_mtime_ns, lock.stat().st_mtime_ns) == stamps


def test_plain_nox_is_quick_and_nox_l_starts_with_the_list():
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    before = listed.stdout.split("Sessions defined in")[0].strip().splitlines()
    assert len(before) <= 3, before  # the noxfile's docstring, not 13 lines of it
    selected = [line for line in listed.stdout.splitlines() if line.startswith("* ")]
    assert [line.split(" ->")[0] for line in selected] == ["* plan"], selected
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    plain = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    out = plain.stdout + plain.stderr
    assert plain.returncode == 0, out
    assert "Running session plan" in out and "Running session tests" not in out, out


def _python39() -> str | None:
    import glob

    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for found in sorted(glob.glob(os.path.join(root, "versions", "3.9.*", "bin", "python3.9"))):
        return found
    import shutil

    return shutil.which("python3.9")


def test_python_3_9_is_told_to_use_a_newer_python_not_shown_a_traceback():
    python = _python39()
    if python is None or subprocess.run([python, "-V"], check=False).returncode != 0:
        pytest.skip("needs a Python 3.9")
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    env["PYTHONPATH"] = str(ROOT / "src")
    run = subprocess.run(
        [python, "-m", "sglforge", "--project", str(ROOT), "plan"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert "error: sglforge needs Python 3.10 or newer; this is Python 3.9" in run.stderr
    assert "Traceback" not in run.stderr and "TypeError" not in run.stderr, run.stderr
    # the noxfile says the same before it imports nox (nox itself may not be there for 3.9)
    loaded = subprocess.run(
        [
            python,
            "-c",
            f"exec(compile(open({str(ROOT / 'noxfile.py')!r}).read(), 'noxfile.py', 'exec'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert loaded.returncode == 2, loaded.stderr
    assert "this noxfile needs nox on Python 3.10 or newer" in loaded.stderr, loaded.stderr


def test_the_bare_build_refuses_a_read_only_build_root_too(tmp_path):
    from tests.fixtures.project import make_project
    from tests.helpers import read_only

    fixture = make_project(tmp_path)
    locked = tmp_path / "ro"
    (locked / "build-root").mkdir(parents=True)
    prefix = read_only(locked)
    if prefix is None:
        pytest.skip("needs root and unshare (a read-only bind mount)")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("SGLFORGE_PROJECT", None)
    args = fixture.args()
    args[args.index("--build-root") + 1] = str(locked / "build-root")
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "sglforge", *args, "build"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "is not writable: Read-only file system" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "OSError" not in result.stderr, result.stderr


def test_demo_help_shows_its_whole_description():
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "demo", "--", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0, out
    assert "offline, in a few minutes on two cores." in out, out  # the sentence's end
    assert "refused unless new, empty or made by the demo" in out, out


def test_the_bare_build_names_every_source_it_still_lacks_when_a_fetch_fails(tmp_path):
    """`sglforge build` fetches per wheel; when the first fetch fails, the error lists what
    the build's other upstreams lack in the cache too (checked offline), and the bundle
    route."""
    from tests.fixtures.project import make_project

    fixture = make_project(tmp_path, ("purepy", "usespy"))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("SGLFORGE_PROJECT", None)
    args = fixture.args()
    del args[args.index("--mirror") : args.index("--mirror") + 2]  # no mirror: unreachable
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", *args, "build", "usespy"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "error: purepy: cannot fetch https://example.invalid/org/purepy" in result.stderr
    assert "this build's other upstreams lack 1 source(s) in the cache as well:" in result.stderr
    assert "  - usespy: commit " in result.stderr, result.stderr
    assert "--from-bundle FILE" in result.stderr and "Traceback" not in result.stderr
