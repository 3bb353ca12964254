"""sglforge's own install into the toolchain venv is hash-pinned (issue 32, item 4):
lockfiles/sglforge.lock covers pyproject.toml's requirements, real pip takes only the hashed
files from the given index whatever PIP_* says, and sglforge itself comes from the checkout
with --no-deps (no index, no build isolation)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.builder import selflock, toolchain_lock
from sglforge.cli import nox_sessions
from tests.test_toolchain_lock import _tiny_wheel

ROOT = Path(__file__).resolve().parents[1]

BACKEND = '''\
"""An in-tree PEP 517 backend: the fixture checkout builds with nothing installed."""
import base64, hashlib, os, zipfile

NAME, VERSION = "fakeforge", "0.1.0"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\\n"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = f"{NAME}-{VERSION}.dist-info"
    files = {
        f"{NAME}/__init__.py": b"FROM = 'checkout'\\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n"
        "Requires-Dist: dep-a==1.0\\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\n"
        b"Tag: py3-none-any\\n",
    }
    record = "".join(_record_line(n, d) for n, d in files.items()) + f"{dist}/RECORD,,\\n"
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as archive:
        for member, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            archive.writestr(member, data)
    return name
'''


def checkout(tmp_path: Path, lock: str, deps: str = '"dep-a==1.0"') -> Path:
    root = tmp_path / "checkout"
    (root / "lockfiles").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "fakeforge"\nversion = "0.1.0"\ndependencies = [{deps}]\n'
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (root / "backend.py").write_text(BACKEND)
    (root / "lockfiles" / selflock.LOCK).write_text(lock)
    return root


def test_the_committed_lock_covers_pyproject_and_agrees_with_toolchain_lock():
    lock = toolchain_lock.parse_lock(ROOT / "lockfiles" / "toolchain.lock")
    pins = {e.name: e.version for entries in lock.sections.values() for e in entries}
    python = (ROOT / "lockfiles" / "toolchain.toml").read_text().split('python = "')[1][:4]
    assert selflock.lock_problems(ROOT, python, pins) == []
    names = {p.name for p in selflock.parse_self_lock(ROOT / "lockfiles" / selflock.LOCK)}
    assert {
        "unidiff",
        "packaging",
        "setuptools",
        "cyclonedx-python-lib",
        "py-serializable",
    } <= names


def test_every_gap_is_named_with_file_and_line(tmp_path):
    h = "0" * 64
    root = checkout(
        tmp_path,
        f"dep-a==2.0 --hash=sha256:{h}\nleftover==1 --hash=sha256:{h}\n"
        f"packaging==24.0 --hash=sha256:{h}\n",
        deps='"dep-a==1.0", "dep-b>=1", "packaging>=24", "tomli>=2; python_version < \'3.11\'"',
    )
    problems = selflock.lock_problems(root, "3.12", {"packaging": "25.0"})
    assert problems == [
        "dep-a: sglforge.lock line 1 pins 2.0, outside 'dep-a==1.0'",
        "dep-b: a dependency of sglforge ('dep-b>=1'), not in sglforge.lock",
        (
            "leftover: sglforge.lock line 2 pins what sglforge does not need (no dependency "
            "of pyproject.toml names it and it has no `# via NAME` line)"
        ),
        "packaging: sglforge.lock pins 24.0, toolchain.lock 25.0 (one venv, one version)",
    ]
    # tomli applies on 3.10 only: there it is a gap too
    assert "tomli: a dependency of sglforge" in "\n".join(selflock.lock_problems(root, "3.10", {}))
    (root / "lockfiles" / selflock.LOCK).write_text("dep-a==1.0\n")
    with pytest.raises(Exception, match=r"sglforge.lock:\n  line 1: dep-a has no --hash"):
        selflock.parse_self_lock(root / "lockfiles" / selflock.LOCK)


def test_a_dependency_of_a_dependency_is_pinned_with_a_via_line(tmp_path):
    """cyclonedx-python-lib's own dependencies are pinned too (`# via`, as pip-compile writes
    it); a `# via` naming nothing sglforge needs is still a pin nobody needs."""
    h = "0" * 64
    root = checkout(
        tmp_path,
        f"dep-a==1.0 \\\n    --hash=sha256:{h}\n"
        f"dep-c==3 \\\n    --hash=sha256:{h}\n    # via dep-a\n"
        f"dep-d==4 --hash=sha256:{h}\n    # via dep-c (python_version < '3.13')\n"
        f"stray==5 --hash=sha256:{h}\n    # via nothing-here\n",
    )
    assert selflock.lock_problems(root, "3.12", {}) == [
        (
            "stray: sglforge.lock line 8 pins what sglforge does not need (its `# via "
            "nothing-here` names nothing sglforge needs)"
        )
    ]
    assert selflock.via_comments(
        (root / "lockfiles" / selflock.LOCK).read_text(),
        {p.name: p for p in selflock.parse_self_lock(root / "lockfiles" / selflock.LOCK)},
    ) == {"dep-c": {"dep-a"}, "dep-d": {"dep-c"}, "stray": {"nothing-here"}}


def _pip(command: list[str], target: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = toolchain_lock.pip_env()
    env.update(extra)
    return subprocess.run(
        [*command, "--target", str(target), "--no-compile"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_real_pip_installs_the_hashed_dependency_and_the_checkout_without_deps(
    tmp_path, monkeypatch
):
    good = _tiny_wheel(tmp_path / "index", "dep_a", "1.0")
    _tiny_wheel(tmp_path / "elsewhere", "dep_a", "1.0.0")  # what a pip.conf would offer
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    root = checkout(tmp_path, f"dep-a==1.0 --hash=sha256:{digest}\n")
    assert selflock.lock_problems(root, "3.12", {}) == []
    # the caller's pip configuration: stripped by pip_env, whatever it points at
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "elsewhere"))
    deps, itself = selflock.install_commands(
        sys.executable, root, toolchain_lock.index_args(str(tmp_path / "index")), tmp_path / "w"
    )
    assert itself[-4:] == ["--no-deps", "--no-build-isolation", "--no-index", str(root)]
    site = tmp_path / "site"
    for command in (deps, itself):
        done = _pip(command, site)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "dep_a" / "__init__.py").read_text() == "VERSION = '1.0'\n"
    assert (site / "fakeforge" / "__init__.py").read_text() == "FROM = 'checkout'\n"
    # a lock whose hash is not the index's file installs nothing
    (root / "lockfiles" / selflock.LOCK).write_text(f"dep-a==1.0 --hash=sha256:{'1' * 64}\n")
    deps, _ = selflock.install_commands(
        sys.executable, root, toolchain_lock.index_args(str(tmp_path / "index")), tmp_path / "w2"
    )
    bad = _pip(deps, tmp_path / "site2")
    assert bad.returncode != 0 and "hash" in bad.stderr.lower()
    assert not (tmp_path / "site2" / "dep_a").exists()


class RecordingSession:
    """What install_toolchain asks of a nox session, recorded instead of run."""

    name = "build"

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.runs, self.logs = tmp, [], []

    def log(self, message: str) -> None:
        self.logs.append(message)

    def run(self, *args, **kwargs) -> None:
        self.runs.append([str(a) for a in args])
        if "venv" in args:  # the venv the commands' python lives in
            Path(args[-1], "bin").mkdir(parents=True, exist_ok=True)

    def create_tmp(self) -> str:
        self.tmp.mkdir(parents=True, exist_ok=True)
        return str(self.tmp)

    def error(self, message: str) -> None:
        raise SystemExit(message)


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "lockfiles").mkdir(parents=True)
    for name in ("toolchain.lock", "toolchain.toml"):
        (root / "lockfiles" / name).write_bytes((ROOT / "lockfiles" / name).read_bytes())
    return root


def test_the_toolchain_venv_gets_sglforge_only_hash_pinned_and_from_the_checkout(
    tmp_path, monkeypatch
):
    session = RecordingSession(tmp_path / "tmp")
    nox_sessions.install_toolchain(session, _project(tmp_path), sys.executable, torch=False)
    pips = [r for r in session.runs if "pip" in r]
    deps, itself = pips[0], pips[1]
    assert "--require-hashes" in deps and "--no-deps" in deps
    requirements = Path(deps[deps.index("-r") + 1]).read_text()
    assert "unidiff==" in requirements and "--hash=sha256:" in requirements
    assert itself[-4:] == [
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        str(nox_sessions.SGLFORGE_CHECKOUT),
    ]
    # every pip run is hash-pinned, but the one installing the checkout itself (no index)
    for run in pips:
        assert "--require-hashes" in run or run[-4:] == itself[-4:], run


def test_an_unpinned_dependency_stops_before_any_install(tmp_path, monkeypatch):
    fake = checkout(tmp_path, f"dep-a==1.0 --hash=sha256:{'0' * 64}\n", deps='"dep-b>=1"')
    monkeypatch.setattr(nox_sessions, "SGLFORGE_CHECKOUT", fake)
    session = RecordingSession(tmp_path / "tmp")
    with pytest.raises(SystemExit) as stop:
        nox_sessions.install_toolchain(session, _project(tmp_path), sys.executable, torch=False)
    assert stop.value.code == 2 and session.runs == []
    message = "\n".join(session.logs)
    assert "lockfiles/sglforge.lock does not fit" in message
    assert "dep-b: a dependency of sglforge ('dep-b>=1'), not in sglforge.lock" in message
    assert os.environ.get("PIP_CONFIG_FILE") != os.devnull  # nothing leaked into ours
