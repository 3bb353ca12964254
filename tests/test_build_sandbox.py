"""The build sandbox (builder/sandbox.py; issue 31): a hostile upstream — its setup.py, its
CMakeLists.txt (scikit-build-core) or its meson.build (meson-python) — runs one attack
script and tries everything a red-team did on a clone of main:

- write the lockfile, `wheels/`, the source cache, the tools dir's `nvcc`/`cc` wrappers, a
  file in the caller's home, a root-owned 0755 directory (a stand-in for /etc/cron.d),
  the sglforge package sglforge runs from, and another recipe's work tree;
- poison another recipe's local wheel-cache entry (the next `build purepy` must still publish
  the wheel it built, not a rewritten one);
- read the config file (a secret in it) and /etc/shadow; see or signal sglforge and pid 1;
- reach a TCP server on the host's loopback;
- leave a process behind (setsid + double fork) that keeps writing after sglforge exited;
- write `<cache>/ccache/ccache.conf` with a `prefix_command` that a later ccache would run.

Every attempt must fail with nothing changed outside the build, as root and not as root
(`unshare --user --map-user`: sglforge sees a non-zero euid and no capabilities), while the
legitimate part of the build (a ccache compile, the wheel) still works.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglforge.base.buildroot import SANDBOX_PATH
from tests.fixtures import upstreams
from tests.fixtures.project import SRC, FixtureProject, make_project

SECRET = "cfg-secret-Zq81"

ATTACK = r"""
import glob, json, os, signal, socket, subprocess, sys, time

def main(here):
    attack = json.load(open(os.path.join(here, "attack.json")))
    report = {"uid": os.getuid(), "euid": os.geteuid(), "writes": {}, "reads": {},
              "stage": attack["stage"]}

    def write(path):
        try:
            with open(path, "ab") as f:
                f.write(b"EVIL\n")
            return "WROTE"
        except OSError as exc:
            return "DENIED " + type(exc).__name__

    for path in attack["write"] + glob.glob(os.path.join(attack["cache"], "wheels", "*", "*")):
        report["writes"][path] = write(path)
    for path in (attack["config"], "/etc/shadow"):
        try:
            report["reads"][path] = open(path, errors="replace").read()
        except OSError as exc:
            report["reads"][path] = "DENIED " + type(exc).__name__
    # processes: what can be seen and signalled
    report["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    report["cmdlines"] = []
    for pid in report["pids"]:
        try:
            report["cmdlines"].append(open(f"/proc/{pid}/cmdline", "rb").read()
                                      .replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    report["signals"] = {}
    for pid in (attack["pytest_pid"], 1):
        try:
            os.kill(pid, 0)
            report["signals"][str(pid)] = "ALLOWED"
        except OSError as exc:
            report["signals"][str(pid)] = "DENIED " + type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", attack["port"]), timeout=3).close()
        report["network"] = "CONNECTED"
    except OSError as exc:
        report["network"] = "DENIED " + type(exc).__name__
    # ccache: a config with a prefix_command, then the legitimate compile through ccache
    ccache_dir = os.environ.get("CCACHE_DIR")
    if ccache_dir:
        marker = os.path.join(here, "PREFIX-COMMAND-RAN")
        script = os.path.join(ccache_dir, "evil.sh")
        report["writes"]["ccache.conf"] = "DENIED"
        try:
            with open(script, "w") as f:
                f.write(f"#!/bin/sh\ntouch {marker}\nexec \"$@\"\n")
            os.chmod(script, 0o755)
            with open(os.path.join(ccache_dir, "ccache.conf"), "w") as f:
                f.write(f"prefix_command = {script}\n")
            report["writes"]["ccache.conf"] = "WROTE"
        except OSError as exc:
            report["writes"]["ccache.conf"] = "DENIED " + type(exc).__name__
        with open(os.path.join(here, "probe.c"), "w") as f:
            f.write("int probe(void) { return 42; }\n")
        done = subprocess.run([os.environ["SGLFORGE_COMPILER_CACHE"], os.environ.get("CC", "cc"),
                               "-c", "probe.c", "-o", "probe.o"], cwd=here,
                              capture_output=True, text=True)
        report["compile"] = done.returncode
        report["prefix_command_ran"] = os.path.exists(marker)
    # a process left behind: it keeps trying to write until it is killed
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # detached: no inherited pipe keeps the frontend waiting
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 1024)
            for _ in range(600):
                with open(attack["alive"], "a") as f:
                    f.write("x")
                for path in attack["write"]:
                    try:
                        with open(path, "a") as f:
                            f.write("LATER\n")
                    except OSError:
                        pass
                time.sleep(0.1)
        os._exit(0)
    with open(os.path.join(os.environ["HOME"], "report.json"), "w") as f:
        json.dump(report, f)

if __name__ == "__main__":
    main(sys.argv[1])
"""

SETUP_PY = """
import os, subprocess, sys
from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
subprocess.run([sys.executable, os.path.join(here, "attack.py"), here], check=True)
setup(name="hostile", version="1.0", py_modules=["hostile"])
"""

CMAKELISTS = """
cmake_minimum_required(VERSION 3.26)
project(hostile LANGUAGES NONE)
find_package(Python COMPONENTS Interpreter REQUIRED)
execute_process(COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/attack.py ${CMAKE_SOURCE_DIR}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "attack.py failed: ${rc}")
endif()
install(FILES hostile.py DESTINATION .)
"""

MESON_BUILD = """
project('hostile', version: '1.0')
py = import('python').find_installation()
run_command(py, meson.current_source_dir() / 'attack.py', meson.current_source_dir(),
            check: true)
py.install_sources('hostile.py')
"""

BACKENDS = {
    "setup.py": ({"setup.py": SETUP_PY}, ["setuptools"]),
    "cmake": (
        {
            "CMakeLists.txt": CMAKELISTS,
            "pyproject.toml": (
                '[build-system]\nrequires = ["scikit-build-core"]\n'
                'build-backend = "scikit_build_core.build"\n\n'
                '[project]\nname = "hostile"\nversion = "1.0"\n'
            ),
        },
        ["scikit-build-core", "cmake", "ninja"],
    ),
    "meson": (
        {
            "meson.build": MESON_BUILD,
            "pyproject.toml": (
                '[build-system]\nrequires = ["meson-python"]\nbuild-backend = "mesonpy"\n\n'
                '[project]\nname = "hostile"\nversion = "1.0"\n'
            ),
        },
        ["meson-python", "meson", "ninja"],
    ),
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(top: Path) -> dict[str, str]:
    """Every file under `top` with its digest (links by target)."""
    out = {}
    for path in sorted(top.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = _sha(path)
    return out


def _add_hostile(project: FixtureProject, backend: str, attack: dict) -> None:
    files, requires = BACKENDS[backend]
    files = {
        **files,
        "attack.py": ATTACK,
        "hostile.py": "X = 1\n",
        "attack.json": json.dumps(attack, indent=1),
    }
    commit = upstreams.make_repo(project.mirror / "org" / "hostile", files)
    lock = project.root / "lockfiles" / "upstreams.toml"
    lock.write_text(
        lock.read_text() + f'\n[[source]]\nname = "hostile"\n'
        f'url = "{upstreams.MIRROR_PREFIX}org/hostile"\ncommit = "{commit}"\n'
    )
    project.recipe("hostile").write_text(
        'upstream = "hostile"\nbuild-requires = [' + ", ".join(f'"{r}"' for r in requires) + "]\n"
    )
    # meson-python is not in the fixture toolchain's pins: pin what this venv has
    import importlib.metadata

    toolchain = project.root / "lockfiles" / "toolchain.toml"
    text = toolchain.read_text()
    for name in requires:
        if f"\n{name} =" not in text:
            text += f'{name} = "{importlib.metadata.version(name)}"\n'
    toolchain.write_text(text)


def _entry(project: FixtureProject, recipe: str) -> dict:
    [entry] = [w for w in project.manifest()["wheels"] if w["recipe"] == recipe]
    return entry


def _as_user(cmd: list[str], mode: str) -> list[str]:
    if mode == "root":
        return cmd
    # not root: a user namespace where sglforge's euid is 1000 and it has no capabilities
    return ["unshare", "--user", "--map-user=1000", "--map-group=1000", *cmd]


def _run(
    project: FixtureProject, src: Path, mode: str, *verb: str, home: Path
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(src), HOME=str(home))
    env.pop("SGLFORGE_PROJECT", None)
    cmd = _as_user([sys.executable, "-m", "sglforge", *project.args(), *verb], mode)
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=project.root, check=False, timeout=900
    )


def _sandbox_or_skip() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("SGLFORGE_REQUIRE_CUDA"):  # CI: .ci/run installs bubblewrap
            pytest.fail("bwrap (bubblewrap) is not installed")
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")


# not root, the sandbox is the same; setup.py covers that path
@pytest.mark.parametrize(
    ("backend", "mode"),
    [("setup.py", "root"), ("setup.py", "not-root"), ("cmake", "root"), ("meson", "root")],
)
def test_hostile_build_reaches_nothing_but_its_own_tree(tmp_path, mode, backend):
    _sandbox_or_skip()
    if mode == "root" and os.geteuid() != 0:
        pytest.skip("needs root")
    if shutil.which("ccache") is None:
        pytest.skip("ccache is not installed (.ci/run installs it)")
    project = make_project(tmp_path, ("purepy",))
    src = tmp_path / "sglforge-src"  # a copy: the attack tries to write sglforge's package
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    cron = tmp_path / "cron.d"  # a root-owned 0755 directory
    cron.mkdir(mode=0o755)
    (cron / "job").write_text("ok\n")
    project.config.write_text(f'# {SECRET}\n[compiler-cache]\nkind = "ccache"\n')
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    # first a legitimate wheel: the one whose cache entry the attack tries to poison
    first = _run(project, src, mode, "build", "purepy", "--no-check", home=home)
    assert first.returncode == 0, first.stdout + first.stderr
    purepy_sha = _entry(project, "purepy")["sha256"]
    root = project.build_root
    writes = [
        project.root / "lockfiles" / "upstreams.toml",
        project.root / "wheels" / "EVIL.whl",
        root / "tools" / "bin" / "nvcc",
        root / "tools" / "bin" / "cc",
        root / "src" / "purepy" / "setup.py",
        root / "work" / "purepy" / "EVIL",
        home / "EVIL",
        cron / "EVIL",
        src / "sglforge" / "__init__.py",
        project.cache / "EVIL",
        project.config,
    ]
    # the build sees its root at a fixed path (sandbox.PathView): the same targets there
    inside = SANDBOX_PATH
    writes += [
        inside / "tools" / "bin" / "nvcc",
        inside / "tools" / "bin" / "cc",
        inside / "tools" / "ccache.conf",
        inside / "src" / "purepy" / "setup.py",
        inside / "work" / "purepy" / "EVIL",
        inside / "logs" / "purepy.log",
        inside / ".sglforge-build.lock",
    ]
    alive = root / "work" / "hostile" / "alive"  # written at its inside path
    attack = {
        "write": [str(p) for p in writes],
        "cache": str(project.cache),
        "config": str(project.config),
        "pytest_pid": os.getpid(),
        "port": listener.getsockname()[1],
        "alive": str(inside / "work" / "hostile" / "alive"),
        "stage": backend,
    }
    _add_hostile(project, backend, attack)
    before = {
        top: _snapshot(top)
        for top in (
            project.root,
            src,
            project.cache,
            home,
            cron,
            root / "tools",
            root / "src" / "purepy",
        )
    }
    started = time.monotonic()
    result = _run(project, src, mode, "build", "hostile", "--no-check", home=home)
    print(f"hostile build: {time.monotonic() - started:.1f} s\n{result.stdout}")
    log = (root / "logs" / "hostile.log").read_text()
    assert result.returncode == 0, result.stdout + result.stderr + log[-3000:]
    assert "sandbox: bubblewrap" in result.stdout
    report = json.loads((root / "sandbox" / "hostile" / "home" / "report.json").read_text())
    assert report["stage"] == backend
    # every write outside the build's own tree failed (the read-only mounts, or nothing
    # there at all), except where the path lies under /tmp: the sandbox's /tmp is the step's
    # private TMP, so the write lands there; the snapshots below prove the host's files are
    # unchanged either way
    wrote = {p: v for p, v in report["writes"].items() if v == "WROTE"}
    assert {p for p in wrote if not p.startswith("/tmp/")} <= {"ccache.conf"}, wrote
    assert len(report["writes"]) > len(writes)  # the wheel cache's files were tried too
    for path in wrote:
        if path.startswith("/tmp/"):
            assert (root / "sandbox" / "hostile" / "tmp" / path[len("/tmp/") :]).is_file()
    # the leftover process died with the step's pid namespace
    time.sleep(1.0)
    assert alive.is_file() and alive.stat().st_size > 0  # it ran while the step ran
    size = alive.stat().st_size
    time.sleep(1.5)
    assert (alive.stat().st_size if alive.exists() else 0) == size, "a build process survived"
    after = {top: _snapshot(top) for top in before}
    for top, files in before.items():
        # what existed is unchanged (the compiler cache's own files excepted: the legitimate
        # compile writes there); new files only where sglforge's own steps write (the
        # project's wheels/ and lock, the caches' new entries), none planted by the attack
        changed = {
            k
            for k in files
            if after[top].get(k) != files[k]
            and "/cache/ccache/" not in k
            and not k.endswith(("/wheels/manifest.json", "/lockfiles/wheels.lock"))
        }
        assert not changed, (top, changed)
        new = set(after[top]) - set(files)
        if top in (project.root, project.cache):
            new = {n for n in new if n.rsplit("/", 1)[-1] in ("EVIL", "EVIL.whl")}
        assert not new, (top, new)
    # secrets: the config file is not there at all (its host path lies under /tmp, the
    # step's private TMP inside: at most the attack reads back what it planted there itself),
    # /etc/shadow is empty
    config_read = report["reads"][str(project.config)]
    assert config_read.startswith(("DENIED", "EVIL")), report["reads"]
    assert SECRET not in config_read
    assert report["reads"]["/etc/shadow"] in ("", "DENIED PermissionError")
    assert SECRET not in json.dumps(report)
    # processes: only the build's own, neither pytest nor sglforge; its pid 1 is the
    # sandbox's own init (bubblewrap), not the host's
    assert report["signals"][str(os.getpid())].startswith("DENIED")
    assert report["pids"][0] == 1 and "bwrap" in report["cmdlines"][0].split()[0]
    assert len(report["pids"]) < 30, report["cmdlines"]
    assert not any("-m sglforge" in c for c in report["cmdlines"]), report["cmdlines"]
    # no network, not even the host's loopback
    assert report["network"].startswith("DENIED")
    with pytest.raises(socket.timeout):
        listener.accept()
    # ccache: the compile worked; the planted config was not read
    assert report["compile"] == 0
    assert report["prefix_command_ran"] is False
    # the poisoned cache entry was never poisoned: the next build is a cache hit on the
    # bytes built first, and the published wheel is that one
    again = _run(project, src, mode, "build", "purepy", "--no-check", home=home)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cached" in again.stdout
    assert _entry(project, "purepy")["sha256"] == purepy_sha
    wheel = project.root / "wheels" / _entry(project, "purepy")["file"]
    assert _sha(wheel) == purepy_sha
    listener.close()


def test_no_sandbox_no_build_unless_the_risk_is_named(tmp_path):
    """Without bubblewrap the build refuses before running anything and says how to get one;
    --unsafe-no-sandbox builds, says so, and records it in provenance and key."""
    project = make_project(tmp_path, ("purepy",))
    env = dict(os.environ, PYTHONPATH=str(SRC), SGLFORGE_BWRAP=str(tmp_path / "no-bwrap"))
    env.pop("SGLFORGE_PROJECT", None)
    cmd = [sys.executable, "-m", "sglforge", *project.args(), "build", "--no-check"]
    refused = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "no build sandbox" in refused.stderr and "apt-get install bubblewrap" in refused.stderr
    assert "--unsafe-no-sandbox" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not list((project.root / "wheels").glob("*.whl"))
    assert not (project.build_root / "src").exists()  # nothing was exported or built
    # what nox runs before installing anything says the same, in seconds
    preflight = subprocess.run(
        [sys.executable, "-m", "sglforge", *project.args(), "preflight", "--no-fetch", "build"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert preflight.returncode == 2 and "no build sandbox" in preflight.stderr, preflight
    named = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglforge",
            *project.args(),
            "preflight",
            "--no-fetch",
            "build",
            "--unsafe-no-sandbox",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert named.returncode == 0 and "NO build sandbox (--unsafe-no-sandbox)" in named.stdout
    unsafe = subprocess.run(
        [*cmd, "--unsafe-no-sandbox"], capture_output=True, text=True, env=env, check=False
    )
    assert unsafe.returncode == 0, unsafe.stdout + unsafe.stderr
    assert "WARNING: --unsafe-no-sandbox" in unsafe.stdout
    from sglforge.wheel.provenance import read as read_provenance

    entry = project.manifest()["wheels"][0]
    provenance = read_provenance(project.root / "wheels" / entry["file"])
    assert provenance.unsandboxed == "--unsafe-no-sandbox"
    log = (project.build_root / "logs" / "purepy.log").read_text()
    assert "# sandbox: NONE (--unsafe-no-sandbox)" in log
    if shutil.which("bwrap") is None:
        return
    unsafe_wheel = tmp_path / entry["file"]
    shutil.copy(project.root / "wheels" / entry["file"], unsafe_wheel)
    # the sandboxed build of the same inputs has another key: the unsandboxed wheel never
    # answers its cache lookup; the bytes differ only in the provenance record, the SBOM made
    # from it, and RECORD
    env.pop("SGLFORGE_BWRAP")
    boxed = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert boxed.returncode == 0, boxed.stdout + boxed.stderr
    assert "cached" not in boxed.stdout
    boxed_entry = project.manifest()["wheels"][0]
    boxed_wheel = project.root / "wheels" / boxed_entry["file"]
    assert read_provenance(boxed_wheel).unsandboxed is None
    assert boxed_entry["sha256"] != entry["sha256"]
    import zipfile

    with zipfile.ZipFile(unsafe_wheel) as a, zipfile.ZipFile(boxed_wheel) as b:
        assert a.namelist() == b.namelist()
        differ = [n for n in a.namelist() if a.read(n) != b.read(n)]
    assert sorted(n.rsplit("/", 1)[-1] for n in differ) == [
        "RECORD",
        "sglforge-build.json",
        "sglforge.cdx.json",
    ]


def test_a_build_root_reached_through_a_link_builds_in_the_sandbox(tmp_path):
    """The build root behind a symlink (/home -> /data): the build sees it at the fixed
    path, whichever name the host used, once; a CMake + FetchContent build still works and
    reads its inputs."""
    _sandbox_or_skip()
    project = make_project(tmp_path, ("fcdemo",))
    real = tmp_path / "disk" / "root"
    real.mkdir(parents=True)
    (tmp_path / "root-link").symlink_to(real)
    project.build_root = tmp_path / "root-link"
    result = project.run("build", "--no-check")
    assert result.returncode == 0, result.stdout + result.stderr
    log = (real / "logs" / "fcdemo.log").read_text()
    tree = "/src/fcdemo"
    assert f"--bind {real}{tree} {SANDBOX_PATH}{tree} " in log
    dests = re.findall(r"--(?:ro-)?bind \S+ (\S+)", log)
    assert not [d for d in dests if d.startswith((str(real), str(project.build_root)))], dests
    assert [w["recipe"] for w in project.manifest()["wheels"]] == ["fcdemo"]


def test_git_in_the_exported_tree_works_inside_the_sandbox(tmp_path):
    """The exported tree borrows the source cache's objects (objects/info/alternates), and
    setuptools-scm's file finder runs `git archive HEAD` there: with the cache hidden, it
    "pretended there aren't any" files and the sandboxed sglang wheel lost 47 of them. The
    borrowed object stores are bound read-only; the rest of the cache stays invisible."""
    _sandbox_or_skip()
    project = make_project(tmp_path, ("purepy",))
    files = {
        "setup.py": (
            "import os, subprocess\nfrom setuptools import setup\n"
            "here = os.path.dirname(os.path.abspath(__file__))\n"
            "names = subprocess.run(['git', 'archive', 'HEAD'], cwd=here, check=True,\n"
            "                       capture_output=True).stdout\n"
            "assert b'data.txt' in names, 'git archive lost files'\n"
            "setup(name='gitfiles', version='1.0', py_modules=['gitfiles'])\n"
        ),
        "gitfiles.py": "X = 1\n",
        "data.txt": "only git knows me\n",
    }
    commit = upstreams.make_repo(project.mirror / "org" / "gitfiles", files)
    lock = project.root / "lockfiles" / "upstreams.toml"
    lock.write_text(
        lock.read_text() + f'\n[[source]]\nname = "gitfiles"\n'
        f'url = "{upstreams.MIRROR_PREFIX}org/gitfiles"\ncommit = "{commit}"\n'
    )
    project.recipe("gitfiles").write_text(
        'upstream = "gitfiles"\nbuild-requires = ["setuptools"]\n'
    )
    result = project.run("build", "gitfiles", "--no-check")
    log = (project.build_root / "logs" / "gitfiles.log").read_text()
    assert result.returncode == 0, result.stdout + result.stderr + log[-2000:]
    assert "sandbox: bubblewrap" in result.stdout
    # only the borrowed object store of the cache is in the sandbox, read-only
    assert f"--ro-bind {project.cache}/git/" in log
    assert f"--bind {project.cache}" not in log
