"""The remote tier of the wheel cache and the CI flow built on it (issue 14, items 2 and 3).

Real builds of the fixture project, a real WebDAV server (wsgidav, tests/fixtures/
webdav_server.py) and its access log; each "host" is a checkout of its own (a copy of the
project), a local cache of its own and, where it matters, an interpreter at another location
(a venv seeing this one's packages). All hosts use the same fixed build root, as CI runners
must (the content key holds it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglforge.builder.key import remote_key
from sglforge.wheel.provenance import read as read_provenance
from tests.fixtures import upstreams
from tests.fixtures.project import SRC, FixtureProject, make_project

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
UPLOADS = ("PUT ", "MKCOL ", "MOVE ", "DELETE ")


def other_interpreter(path: Path) -> Path:
    """A venv at `path` that sees this interpreter's packages: another sys.prefix, the same
    toolchain (what a second runner with its own `.nox/build-toolchain` looks like)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for tool in Path(sysconfig.get_paths()["scripts"]).iterdir():  # cmake, ninja: the same
        if not (path / "bin" / tool.name).exists():  # toolchain fingerprint
            (path / "bin" / tool.name).symlink_to(tool)
    return python


@dataclass
class Host:
    project: FixtureProject
    root: Path  # this host's checkout
    cache: Path  # this host's local cache
    python: str = sys.executable

    def run(
        self, *verb: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        environ = dict(os.environ, PYTHONPATH=str(SRC), **(env or {}))
        environ.pop("SGLFORGE_PROJECT", None)
        cmd = [
            self.python,
            "-m",
            "sglforge",
            *self.project.args(root=self.root, cache=self.cache),
            *verb,
        ]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=environ, cwd=self.root, check=False
        )

    def matrix(self, *args: str) -> dict:
        result = self.run("plan", "--matrix", *args)
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(result.stdout.splitlines()) == 1  # one line: fits $GITHUB_OUTPUT
        return json.loads(result.stdout)

    def lock(self) -> str:
        return (self.root / "lockfiles" / "wheels.lock").read_text()


def host(project: FixtureProject, name: str, *, python: Path | None = None) -> Host:
    base = project.root.parent / "hosts" / name
    shutil.copytree(project.root, base / "checkout")
    return Host(project, base / "checkout", base / "cache", str(python or sys.executable))


@pytest.fixture()
def shared(tmp_path, webdav):
    project = make_project(tmp_path, ("purepy", "usespy"))
    project.config.write_text(f'[wheel-cache]\nremote = "{webdav.url}"\n')
    return project


def _built(result: subprocess.CompletedProcess[str], name: str) -> bool:
    return f"==> {name}: building" in result.stdout


@needs_cc
def test_ci_flow_job_a_job_b_then_assemble_gives_the_single_host_lock(shared, webdav, tmp_path):
    # the single-host reference; --no-remote-cache: not one request to the server
    reference = host(shared, "reference")
    single = reference.run("build", "--no-remote-cache")
    assert single.returncode == 0, single.stdout + single.stderr
    assert _built(single, "purepy") and _built(single, "usespy")
    assert "remote wheel cache" not in single.stdout and webdav.requests() == []

    a = host(shared, "a")
    b = host(shared, "b", python=other_interpreter(tmp_path / "venvs" / "b"))
    c = host(shared, "c", python=other_interpreter(tmp_path / "elsewhere" / "venv-c"))
    plan = a.matrix()
    assert [(j["recipe"], j["needs"], j["wave"]) for j in plan["build"]] == [
        ("purepy", [], 0),
        ("usespy", ["purepy"], 1),
    ]
    assert plan["cached"] == [] and plan["cache"] == f"remote {webdav.public_url}"
    assert [[j["recipe"] for j in w["include"]] for w in plan["waves"]] == [["purepy"], ["usespy"]]
    assert plan["assemble"]["needs"] == ["purepy", "usespy"]
    assert plan["smoke"] == {"cuda_archs": [], "needs": ["assemble"]}
    wave1 = a.run("plan", "--matrix", "--wave", "1")
    assert json.loads(wave1.stdout) == plan["waves"][1]
    assert json.loads(a.run("plan", "--matrix", "--wave", "5").stdout) == {"include": []}
    deep = a.run("plan", "--matrix", "--max-waves", "1")
    assert deep.returncode == 2
    assert "need 2 waves, more than --max-waves 1" in deep.stderr

    # job A (wave 0): purepy, built and uploaded (wheel, then entry.json last)
    webdav.clear_log()
    job_a = a.run("build", "purepy", "--no-check")  # a CI job: assemble checks the set
    assert job_a.returncode == 0, job_a.stdout + job_a.stderr
    assert _built(job_a, "purepy") and "built" in job_a.stdout and ", uploaded" in job_a.stdout
    assert "stack check skipped (--no-check)" in job_a.stdout and "check: ok" not in job_a.stdout
    puts = [line for line in webdav.requests() if line.startswith("MOVE ")]
    assert puts[0].split("/")[-1].startswith(".purepy-") and "/.entry.json.tmp-" in puts[1]
    assert len(webdav.files()) == 2 and not any("tmp" in f for f in webdav.files())
    partial = a.matrix()
    assert [(j["recipe"], j["needs"], j["wave"]) for j in partial["build"]] == [("usespy", [], 0)]
    assert [e["recipe"] for e in partial["cached"]] == ["purepy"]

    # job B (wave 1), another host and interpreter location: purepy from the remote cache
    webdav.clear_log()
    job_b = b.run("build", "usespy", "--no-check")
    assert job_b.returncode == 0, job_b.stdout + job_b.stderr
    assert "==> purepy: cached, from the remote cache" in job_b.stdout
    assert not _built(job_b, "purepy") and _built(job_b, "usespy")
    log = webdav.requests()
    wheel = next(f for f in webdav.files() if f.endswith(".whl") and "/purepy-" in f)
    entry = wheel.rsplit("/", 1)[0] + "/entry.json"
    assert f"GET /cache/{entry} 200" in log and f"GET /cache/{wheel} 200" in log
    assert "purepy  cached (remote)" in job_b.stdout
    assert "1 from the remote cache, 1 built (1 uploaded)" in job_b.stdout
    assert a.matrix()["build"] == []

    # assemble: every wheel a remote hit; the lock equals the single-host build's
    webdav.clear_log()
    assemble = c.run("build")
    assert assemble.returncode == 0, assemble.stdout + assemble.stderr
    assert "0 from the local cache, 2 from the remote cache, 0 built" in assemble.stdout
    assert "check: ok" in assemble.stdout
    assert not any(line.startswith(UPLOADS) for line in webdav.requests())
    assert c.lock() == reference.lock()
    # the remote hit filled c's local tier: the next build makes no request at all
    webdav.clear_log()
    again = c.run("build")
    assert "2 from the local cache, 0 from the remote cache" in again.stdout
    assert webdav.requests() == []


def _entry_dir(webdav, name: str) -> Path:
    [wheel] = [f for f in webdav.files() if f.endswith(".whl") and f"/{name}-" in f"/{f}"]
    return (webdav.root / "cache" / wheel).parent


@needs_cc
def test_untrusted_remote_entries_are_refused_and_rebuilt(tmp_path, webdav):
    project = make_project(tmp_path, ("purepy",))
    project.config.write_text(f'[wheel-cache]\nremote = "{webdav.url}"\n')
    first = host(project, "first").run("build")
    assert first.returncode == 0 and ", uploaded" in first.stdout, first.stderr
    entry = _entry_dir(webdav, "purepy")
    [wheel] = entry.glob("*.whl")
    good = wheel.read_bytes()

    # bytes changed on the server: refused (sha256), rebuilt; read-only uploads nothing
    wheel.write_bytes(good[:-10] + b"0123456789")
    before = {f: (webdav.root / "cache" / f).read_bytes() for f in webdav.files()}
    webdav.clear_log()
    ro = host(project, "untrusted-pr").run("build", env={"SGLFORGE_WHEEL_CACHE_READ_ONLY": "1"})
    assert ro.returncode == 0, ro.stdout + ro.stderr
    assert "remote wheel cache http://127.0.0.1" in ro.stdout and "(read-only)" in ro.stdout
    assert "warning: remote wheel cache entry refused, rebuilding: " in ro.stdout
    assert f"{wheel.name}: sha256 " in ro.stdout and "is not the expected" in ro.stdout
    assert _built(ro, "purepy") and "1 built (0 uploaded)" in ro.stdout
    assert not any(line.startswith(UPLOADS) for line in webdav.requests()), webdav.requests()
    assert {f: (webdav.root / "cache" / f).read_bytes() for f in webdav.files()} == before
    cli_ro = host(project, "cli-ro")
    webdav.clear_log()
    assert cli_ro.run("build", "--remote-cache-read-only").returncode == 0
    assert not any(line.startswith(UPLOADS) for line in webdav.requests())

    # a trusted writer rebuilds and overwrites the bad entry; the next host hits it
    fixer = host(project, "trusted").run("build")
    assert "entry refused" in fixer.stdout and ", uploaded" in fixer.stdout
    assert wheel.read_bytes() == good
    hit = host(project, "next").run("build")
    assert "==> purepy: cached, from the remote cache" in hit.stdout, hit.stdout + hit.stderr

    # an entry copied under another key (sha256 consistent): its stamped content_key differs
    patched = host(project, "patched")
    upstreams.make_patch(
        project.mirror / "org" / "purepy",
        "0001-greeting.patch",
        {"src/purepy/__init__.py": 'def greet():\n    return "hi"\n'},
        "Change the greeting",
        patched.root / "patches" / "purepy",
    )
    (patched.root / "patches" / "purepy" / "series").write_text("0001-greeting.patch\n")
    [job] = patched.matrix()["build"]
    foreign = remote_key(job["key"])
    planted = webdav.root / "cache" / foreign[:2] / foreign
    shutil.copytree(entry, planted)
    refused = patched.run("build")
    assert refused.returncode == 0, refused.stdout + refused.stderr
    assert "entry refused, rebuilding" in refused.stdout
    original = read_provenance(entry / wheel.name).content_key
    assert (
        f"its content_key {original[:12]} is not the key looked up {job['key'][:12]}"
        in refused.stdout
    )
    assert _built(refused, "purepy") and ", uploaded" in refused.stdout
    replaced = planted / json.loads((planted / "entry.json").read_text())["file"]
    assert read_provenance(replaced).content_key == job["key"]

    # an interrupted upload (the wheel under its temporary name, no entry.json): never served
    (entry / "entry.json").unlink()
    wheel.rename(entry / f".{wheel.name}.tmp-0123456789abcdef")
    webdav.clear_log()
    after = host(project, "after-crash").run("build")
    assert after.returncode == 0 and _built(after, "purepy"), after.stdout + after.stderr
    log = webdav.requests()
    assert f"GET /cache/{entry.relative_to(webdav.root / 'cache')}/entry.json 404" in log
    assert not any("tmp-0123456789abcdef" in line for line in log)
    assert (entry / "entry.json").is_file() and wheel.read_bytes() == good


@needs_cc
def test_verify_from_lock_rebuilds_without_caches_and_catches_a_tampered_hash(tmp_path, webdav):
    project = make_project(tmp_path, ("purepy",))
    project.config.write_text(f'[wheel-cache]\nremote = "{webdav.url}"\n')
    built = project.run("build")
    assert built.returncode == 0, built.stderr
    lock = project.root / "lockfiles" / "wheels.lock"
    for wheel in (project.root / "wheels").iterdir():  # another machine: only the lock
        wheel.unlink()
    webdav.clear_log()
    ok = project.run("verify", "--from-lock")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "identical  purepy==1.2.3+cpu.e3b0c442" in ok.stdout
    assert "wheel caches (local and remote) and compiler cache off" in ok.stdout
    assert webdav.requests() == []  # no remote cache, not even a lookup

    pin = next(line for line in lock.read_text().splitlines() if line.startswith("purepy=="))
    good = pin.split("sha256:")[1]
    lock.write_text(lock.read_text().replace(good, "0" * 64))
    bad = project.run("verify", "--from-lock", "--out", str(tmp_path / "rebuilt"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert (
        f"DIFFERS    purepy==1.2.3+cpu.e3b0c442: expected sha256:{'0' * 16}, rebuilt "
        f"sha256:{good[:16]}"
    ) in bad.stdout
    assert "not reproducible" in bad.stdout and "Traceback" not in bad.stderr

    lock.unlink()
    missing = project.run("verify", "--from-lock")
    assert missing.returncode == 2 and "wheels.lock: not found" in missing.stderr


def test_a_bad_remote_url_or_an_unreachable_server_is_one_line(tmp_path):
    project = make_project(tmp_path, ("purepy",))
    project.config.write_text('[wheel-cache]\nremote = "s3://bucket/x"\n')
    result = project.run("plan", "--matrix")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "[wheel-cache], key 'remote' (line 2): 's3://bucket/x' scheme must be http or https"
        in result.stderr
    )
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    project.config.write_text(f'[wheel-cache]\nremote = "http://u:pw@127.0.0.1:{port}/c/"\n')
    result = project.run("plan", "--matrix")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"HEAD http://127.0.0.1:{port}/c/" in result.stderr and "cannot connect" in result.stderr
    assert "pw" not in result.stderr


def test_wheel_cache_settings_layers_origins_and_no_credentials_shown(tmp_path):
    from sglforge.base.errors import SglforgeError
    from sglforge.inputs.settings import describe_settings, load_settings

    config = tmp_path / "config.toml"
    config.write_text('[wheel-cache]\nremote = "https://ci:hunter2@cache.example/s/"\n')
    settings = load_settings(config, environ={"SGLFORGE_WHEEL_CACHE_READ_ONLY": "yes"})
    assert settings.wheel_cache.remote == "https://ci:hunter2@cache.example/s/"
    assert settings.wheel_cache.read_only is True
    shown = describe_settings(settings)
    assert "hunter2" not in shown
    assert re.search(
        r"^wheel-cache\.remote += https://ci:\*\*\*@cache\.example/s/ +\(config: ", shown, re.M
    ), shown
    assert f"(config: {config})" in shown and "(env: SGLFORGE_WHEEL_CACHE_READ_ONLY)" in shown
    env = {"SGLFORGE_WHEEL_CACHE_REMOTE": "http://other.example/c/"}
    assert load_settings(config, environ=env).wheel_cache.remote == "http://other.example/c/"
    with pytest.raises(SglforgeError, match="SGLFORGE_WHEEL_CACHE_READ_ONLY='maybe': expected"):
        load_settings(config, environ={"SGLFORGE_WHEEL_CACHE_READ_ONLY": "maybe"})
    config.write_text('[wheel-cache]\nremote = "file:///srv/cache"\nread-only = "yes"\n')
    with pytest.raises(SglforgeError) as error:
        load_settings(config, environ={})
    assert "key 'remote' (line 2): 'file:///srv/cache' scheme must be http or https" in str(
        error.value
    )
    assert "key 'read-only' (line 3): expected true or false" in str(error.value)


def _plant(webdav, key: str, wheel: Path, name: str) -> None:
    """Put `wheel` into the remote cache under `key` by hand (sglforge never uploads it)."""
    planted = webdav.root / "cache" / remote_key(key)[:2] / remote_key(key)
    planted.mkdir(parents=True)
    shutil.copy(wheel, planted / wheel.name)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (planted / "entry.json").write_text(
        json.dumps({"file": wheel.name, "sha256": digest, "name": name, "version": "x"})
    )


@needs_cc
def test_a_dev_wheel_planted_under_its_clean_key_is_refused(tmp_path, webdav):
    """A dev build stamps the clean content key of its series; a writer who uploads it (by
    hand: sglforge never does) must not get it served as a release wheel."""
    project = make_project(tmp_path, ("purepy",))
    project.config.write_text(f'[wheel-cache]\nremote = "{webdav.url}"\n')
    dev = host(project, "dev")
    result = dev.run("build", "--dev", "purepy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert webdav.files() == []  # a dev build uploads nothing
    [wheel] = (project.build_root / "dev-wheels").glob("*.dev-*.whl")
    key = read_provenance(wheel).content_key
    assert read_provenance(wheel).dev is True
    _plant(webdav, key, wheel, "purepy")
    release = host(project, "release").run("build")
    assert release.returncode == 0, release.stdout + release.stderr
    assert "entry refused, rebuilding" in release.stdout and "a dev build" in release.stdout
    assert _built(release, "purepy") and ", uploaded" in release.stdout


def _renamed_wheel(good: Path, out: Path, name: str) -> None:
    """`good` with its METADATA Name changed (everything else, provenance and its content
    key included, kept): a wheel of another distribution planted under the right key."""
    import zipfile

    with zipfile.ZipFile(good) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".dist-info/METADATA"):
                data = re.sub(rb"(?m)^Name: .*$", f"Name: {name}".encode(), data)
            dst.writestr(info, data)


@needs_cc
def test_hostile_entries_never_name_files_or_lock_lines(tmp_path, webdav):
    """Issue 21 item 5: what entry.json says (file, name, version) never reaches wheels/ or
    wheels.lock; name, version and file name come from the verified wheel itself."""
    project = make_project(tmp_path, ("purepy",))
    project.config.write_text(f'[wheel-cache]\nremote = "{webdav.url}"\n')
    readme = project.root / "wheels" / "README.md"
    readme.write_text("# wheels/: tracked, never overwritten\n")
    first = host(project, "writer").run("build")
    assert first.returncode == 0 and ", uploaded" in first.stdout, first.stdout + first.stderr
    entry = _entry_dir(webdav, "purepy")
    [wheel] = entry.glob("*.whl")
    good, good_meta = wheel.read_bytes(), json.loads((entry / "entry.json").read_text())
    digest = good_meta["sha256"]
    evil = tmp_path / "evil.whl"
    _renamed_wheel(wheel, evil, "evil")
    evil_digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    inject = f" --hash=sha256:{digest}\ntorch==9.9.9"
    variants = {
        # the object named README.md holds the real wheel: sha256 and provenance match
        "readme": (
            {**good_meta, "file": "README.md"},
            {"README.md": good},
            "'file' 'README.md' is not a wheel file name",
        ),
        "name": (
            {**good_meta, "name": f"purepy\nevil==6.6.6 --hash=sha256:{digest}"},
            {},
            "'name' is empty or has spaces or control characters",
        ),
        "version": (
            {**good_meta, "version": good_meta["version"] + inject},
            {},
            "'version' is empty or has spaces or control characters",
        ),
        # every value well formed, none of them true
        "file": (
            {
                **good_meta,
                "file": "evil-6.6.6-py3-none-any.whl",
                "name": "evil",
                "version": "6.6.6",
            },
            {"evil-6.6.6-py3-none-any.whl": good},
            (
                "entry.json names the file evil-6.6.6-py3-none-any.whl, but the wheel's "
                f"METADATA and WHEEL make it {wheel.name}"
            ),
        ),
        # another distribution, stamped with the right content key
        "distribution": (
            {**good_meta, "name": "evil", "sha256": evil_digest},
            {wheel.name: evil.read_bytes()},
            "its METADATA Name 'evil' is not purepy, the wheel the recipe builds",
        ),
    }
    for label, (meta, objects, reason) in variants.items():
        for stale in entry.iterdir():
            stale.unlink()
        wheel.write_bytes(good)
        for object_name, data in objects.items():
            (entry / object_name).write_bytes(data)
        (entry / "entry.json").write_text(json.dumps(meta))
        victim = host(project, f"victim-{label}")
        result = victim.run("build", env={"SGLFORGE_WHEEL_CACHE_READ_ONLY": "1"})
        assert result.returncode == 0, (label, result.stdout + result.stderr)
        assert "warning: remote wheel cache entry refused, rebuilding: " in result.stdout, label
        assert reason in result.stdout, (label, result.stdout)
        assert _built(result, "purepy"), label
        assert (victim.root / "wheels" / "README.md").read_text() == readme.read_text(), label
        assert sorted(p.name for p in (victim.root / "wheels").iterdir()) == sorted(
            ["README.md", "manifest.json", wheel.name]
        ), label
        lines = [line for line in victim.lock().splitlines() if not line.startswith("#")]
        assert lines == [f"purepy=={good_meta['version']} --hash=sha256:{digest}"], (label, lines)
        assert not list((project.build_root / "out" / ".remote").glob("*")), label


@needs_cc
def test_a_substituted_wheel_is_never_uploaded_nor_served(tmp_path, webdav):
    """Built with [substitutes] (sources/substitute.py): not uploaded; planted by hand under
    its key, another host with the same substitutes refuses it and builds its own."""
    project = make_project(tmp_path, ("fcdemo",))
    sub = tmp_path / "greetdep-local"
    for name, text in upstreams.GREETDEP.items():
        (sub / name).parent.mkdir(parents=True, exist_ok=True)
        (sub / name).write_text(text)
    project.config.write_text(
        f'[wheel-cache]\nremote = "{webdav.url}"\n\n'
        f'[substitutes."fcdemo.greetdep"]\npath = "{sub}"\n'
        'reason = "unreachable here"\n'
    )
    first = host(project, "first")
    result = first.run("build")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not uploaded to the remote wheel cache: built with substituted inputs" in result.stdout
    assert webdav.files() == []
    [wheel] = (first.root / "wheels").glob("fcdemo-*.whl")
    key = read_provenance(wheel).content_key
    _plant(webdav, key, wheel, "fcdemo")
    second = host(project, "second").run("build")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "entry refused, rebuilding" in second.stdout
    assert "built with substituted inputs, never uploaded by sglforge" in second.stdout
    assert _built(second, "fcdemo")
