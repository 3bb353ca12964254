"""`sglforge publish DEST` (issue 14, item 4): a fixture stack (tiny sglforge-built wheels
written to wheels/ + lockfiles/wheels.lock by the build's own output code, and a third-party
"runtime" wheel in a wheelhouse) published as a static PEP 503 index, served by
`python -m http.server` on 127.0.0.1, and installed by pip from it into fresh venvs with
`--require-hashes -r wheels.lock`; pip must refuse tampered bytes and wrong hashes. Also:
hostile names, idempotent re-publish, append-only refusal, and the root page written last."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.builder.pipeline import BuiltWheel
from sglforge.inputs.project import Project
from sglforge.inputs.toolchain import load_toolchain
from sglforge.wheel import index, outputs
from tests.smoke.conftest import free_ports, make_wheel, provenance

REPO = Path(__file__).resolve().parents[1]
SGLANG = "0.5.99+sm120.cu130.abcd1234"
KERNEL = "0.4.7+sm120.cu130.abcd1234"
HASH_MISMATCH = "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stack(
    base: Path,
    *,
    sglang: str = SGLANG,
    tinydep_requires: tuple[str, ...] = (),
    tinydep_python: str = ">=3.8, <4",
) -> Path:
    """A project whose wheels/, manifest.json and lockfiles/wheels.lock are written by
    `outputs.publish`, the code `sglforge build` ends with; tinydep is a runtime.lock pin."""
    root = base / "project"
    (root / "lockfiles").mkdir(parents=True)
    (root / "lockfiles" / "upstreams.toml").write_text("")
    built = []
    for name, version, archs, requires in (
        ("sglang", sglang, [], ["tinydep==1.0"]),
        ("sglang-kernel", KERNEL, ["sm_120a"], []),
    ):
        stamp = provenance(name, version, archs)
        path = make_wheel(
            base / "staging", name, version, stamp, requires=requires, requires_python=">=3.10"
        )
        built.append(
            BuiltWheel(
                recipe=name,
                path=path,
                sha256=_sha256(path),
                name=name,
                version=version,
                provenance=stamp,
                key="0" * 64,
                cached=False,
                seconds=0.0,
            )
        )
    tiny = make_wheel(
        root / "wheelhouse",
        "tinydep",
        "1.0",
        None,
        requires=list(tinydep_requires),
        requires_python=tinydep_python,
    )
    (root / "lockfiles" / "runtime.lock").write_text(
        f"tinydep==1.0 --hash=sha256:{_sha256(tiny)}\n"
    )
    outputs.publish(Project(root), built, load_toolchain(REPO / "lockfiles" / "toolchain.toml"))
    return root


def _publish(root: Path, dest: Path | str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), "publish", str(dest), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _published(root: Path, dest: Path) -> None:
    result = _publish(root, dest, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr


def _snapshot(dest: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(dest)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(dest.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """`python -m http.server` on 127.0.0.1 serving a directory; yields (dir, base URL)."""
    directory = tmp_path_factory.mktemp("served")
    (port,) = free_ports(1)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(directory),
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no http.server"
                time.sleep(0.05)
        yield directory, f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _pip_env() -> dict[str, str]:
    """No pip.conf, find-links or extra index from this machine: the served index only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONNOUSERSITE="1",
        PIP_NO_CACHE_DIR="1",
    )
    return env


def _pip_install(python: list[str], index_url: str, lock: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *python,
            "install",
            "--require-hashes",
            "--only-binary",
            ":all:",
            "--index-url",
            index_url,
            "-r",
            str(lock),
        ],
        capture_output=True,
        text=True,
        env=_pip_env(),
        timeout=120,
        check=False,
    )


def _bare_venv(path: Path) -> list[str]:
    """A fresh venv without pip (fast); this interpreter's pip installs into it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python")]


def _installed(python: Path, *names: str) -> list[str]:
    code = (
        "import importlib.metadata as m, sys\n"
        "for n in sys.argv[1:]:\n"
        "    try: print(m.version(n))\n"
        "    except m.PackageNotFoundError: print('-')"
    )
    return subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, check=True
    ).stdout.split()


def test_pip_installs_the_lock_from_the_served_index_into_a_fresh_venv(tmp_path, served):
    root = _stack(tmp_path)
    directory, url = served
    dest = directory / "good"
    result = _publish(root, dest, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr
    assert "3 projects; 3 files added, 0 already there, 8 pages written" in result.stdout
    assert sorted(p.name for p in (dest / "files").iterdir()) == [
        f"sglang-{SGLANG}-py3-none-any.whl",
        f"sglang_kernel-{KERNEL}-py3-none-any.whl",
        "tinydep-1.0-py3-none-any.whl",
    ]
    root_page = (dest / "simple" / "index.html").read_text()
    assert [
        '<a href="sglang/">sglang</a>',
        '<a href="sglang-kernel/">sglang-kernel</a>',
        '<a href="tinydep/">tinydep</a>',
    ] == [line.strip().removesuffix("<br>") for line in root_page.splitlines() if "<a " in line]
    kernel = dest / "files" / f"sglang_kernel-{KERNEL}-py3-none-any.whl"
    page = (dest / "simple" / "sglang-kernel" / "index.html").read_text()
    assert (
        f'<a href="../../files/sglang_kernel-0.4.7%2Bsm120.cu130.abcd1234-py3-none-any.whl'
        f'#sha256={_sha256(kernel)}" data-requires-python="&gt;=3.10">'
    ) in page
    assert (
        'data-requires-python="&gt;=3.8, &lt;4"'
        in (dest / "simple" / "tinydep" / "index.html").read_text()
    )

    venv = tmp_path / "host-venv"  # a serving host: a fresh venv with its own pip
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    run = _pip_install(
        [str(python), "-m", "pip"], f"{url}/good/simple", root / "lockfiles" / "wheels.lock"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"127.0.0.1:{url.rsplit(':', 1)[1]}/good/files/tinydep-1.0" in run.stdout
    assert _installed(python, "sglang", "sglang-kernel", "tinydep") == [SGLANG, KERNEL, "1.0"]


def test_pip_refuses_a_tampered_file_and_a_lock_with_a_wrong_hash(tmp_path, served):
    root = _stack(tmp_path)
    directory, url = served
    _published(root, directory / "tampered")
    wheel = directory / "tampered" / "files" / "tinydep-1.0-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # bytes changed after publishing
    venv = tmp_path / "venv-a"
    run = _pip_install(
        _bare_venv(venv), f"{url}/tampered/simple", root / "lockfiles" / "wheels.lock"
    )
    assert run.returncode != 0
    assert HASH_MISMATCH in run.stderr and "tinydep==1.0" in run.stderr
    assert _installed(venv / "bin" / "python", "sglang", "tinydep") == ["-", "-"]

    _published(root, directory / "intact")
    lock = tmp_path / "wrong.lock"
    good = _sha256(directory / "intact" / "files" / f"sglang-{SGLANG}-py3-none-any.whl")
    text = (root / "lockfiles" / "wheels.lock").read_text()
    lock.write_text(text.replace(good, "0" * 64))
    assert lock.read_text() != text
    venv = tmp_path / "venv-b"
    run = _pip_install(_bare_venv(venv), f"{url}/intact/simple", lock)
    assert run.returncode != 0
    assert HASH_MISMATCH in run.stderr and f"sglang=={SGLANG}" in run.stderr
    assert _installed(venv / "bin" / "python", "sglang", "tinydep") == ["-", "-"]


def test_pip_reads_data_requires_python_from_the_pages(tmp_path, served):
    root = _stack(tmp_path, tinydep_python="<3")
    directory, url = served
    _published(root, directory / "py2only")
    assert (
        'data-requires-python="&lt;3"'
        in (directory / "py2only" / "simple" / "tinydep" / "index.html").read_text()
    )
    run = _pip_install(
        _bare_venv(tmp_path / "venv"), f"{url}/py2only/simple", root / "lockfiles" / "wheels.lock"
    )
    assert run.returncode != 0
    assert (
        "Ignored the following versions that require a different python version: "
        "1.0 Requires-Python <3" in run.stderr
    )


def test_republishing_the_same_bytes_changes_nothing_and_output_is_deterministic(tmp_path):
    root = _stack(tmp_path)
    dest = tmp_path / "index"
    _published(root, dest)
    before = _snapshot(dest)
    again = _publish(root, dest, "--wheelhouse", str(root / "wheelhouse"))
    assert again.returncode == 0, again.stderr
    assert "0 files added, 3 already there, 0 pages written" in again.stdout
    assert _snapshot(dest) == before  # same bytes, not even rewritten (mtimes)
    other = tmp_path / "other"
    _published(root, other)
    assert {k: v[0] for k, v in _snapshot(other).items()} == {k: v[0] for k, v in before.items()}


def test_an_index_is_append_only(tmp_path):
    dest = tmp_path / "index"
    first = _stack(tmp_path / "a")
    _published(first, dest)
    newer = _stack(tmp_path / "b", sglang="0.5.100+sm120.cu130.abcd1234")  # a new version
    _published(newer, dest)
    files = sorted(p.name for p in (dest / "files").iterdir())
    assert f"sglang-{SGLANG}-py3-none-any.whl" in files
    assert "sglang-0.5.100+sm120.cu130.abcd1234-py3-none-any.whl" in files
    page = (dest / "simple" / "sglang" / "index.html").read_text()
    assert page.count("<a href=") == 2  # both versions linked
    before = _snapshot(dest)

    # The same file name with other bytes: refused, naming it; nothing written.
    changed = _stack(tmp_path / "c", tinydep_requires=("six",))
    result = _publish(changed, dest, "--wheelhouse", str(changed / "wheelhouse"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "tinydep-1.0-py3-none-any.whl: already published with other bytes" in result.stderr
    assert "append-only" in result.stderr
    assert _snapshot(dest) == before


class _Recording(index.LocalTarget):
    """A real directory target that records the order of writes, or fails on one path."""

    def __init__(self, root: Path, fail_on: str | None = None) -> None:
        super().__init__(root)
        object.__setattr__(self, "writes", [])
        object.__setattr__(self, "fail_on", fail_on)

    def write_file(self, relpath, content, sha256=None):
        if relpath == self.fail_on:
            raise OSError(f"injected failure writing {relpath}")
        self.writes.append(relpath)
        super().write_file(relpath, content, sha256)


def _files(root: Path) -> list[index.IndexFile]:
    wheels = [*(root / "wheels").glob("*.whl"), *(root / "wheelhouse").glob("*.whl")]
    return [index.describe_wheel(p, _sha256(p)) for p in sorted(wheels)]


def test_files_first_then_project_pages_then_the_root_page_last(tmp_path):
    root = _stack(tmp_path / "a")
    target = _Recording(tmp_path / "index")
    index.write_index(target, _files(root))
    writes = target.writes
    assert [w.split("/")[0] for w in writes[:3]] == ["files"] * 3
    assert writes[3:9] == [
        f"simple/{p}/index.{ext}"
        for p in ("sglang", "sglang-kernel", "tinydep")
        for ext in ("json", "html")
    ]
    assert writes[9:] == ["simple/index.json", "simple/index.html"]

    # A failure midway (a new project's page) leaves the old root page as it was, valid,
    # and every link in it pointing at a complete file.
    old_root = (tmp_path / "index" / "simple" / "index.html").read_bytes()
    extra = make_wheel(tmp_path / "extra", "newproj", "2.0", None)
    failing = _Recording(tmp_path / "index", fail_on="simple/newproj/index.html")
    with pytest.raises(OSError, match="injected failure"):
        index.write_index(failing, [index.describe_wheel(extra, _sha256(extra))])
    assert failing.writes == ["files/newproj-2.0-py3-none-any.whl", "simple/newproj/index.json"]
    assert (tmp_path / "index" / "simple" / "index.html").read_bytes() == old_root
    assert b"newproj" not in old_root
    assert not list((tmp_path / "index").rglob("*.tmp"))  # no temporary file left behind
    for project in ("sglang", "sglang-kernel", "tinydep"):
        for entry in index.existing_files(index.LocalTarget(tmp_path / "index"), project):
            assert _sha256(tmp_path / "index" / "files" / entry.filename) == entry.sha256


@pytest.mark.parametrize(
    "name",
    [
        "../evil-1.0-py3-none-any.whl",
        "a/b-1.0-py3-none-any.whl",
        "..-1.0-py3-none-any.whl",
        'x"><script>-1.0-py3-none-any.whl',
        "tinydep-1.0-py3-none-any<b>.whl",
        "tinydep-1.0-py3-none-any.whl\n",
        ".hidden-1.0-py3-none-any.whl",
        "tinydep-1.0.tar.gz",
        "not a wheel.whl",
        "tinydep-1..0-py3-none-any.whl",
    ],
)
def test_hostile_file_names_are_refused(name):
    with pytest.raises(SglforgeError) as err:
        index.check_filename(name)
    assert repr(name) in str(err.value)


def test_hostile_metadata_is_refused_or_escaped(tmp_path):
    liar = make_wheel(tmp_path / "liar", "tinydep", "1.0", None)  # METADATA says another name
    renamed = liar.with_name("other-1.0-py3-none-any.whl")
    liar.rename(renamed)
    with pytest.raises(SglforgeError, match="other-1.0-py3-none-any.whl: METADATA says 'tinydep'"):
        index.describe_wheel(renamed, _sha256(renamed))
    odd = make_wheel(
        tmp_path / "odd", "odd", "1.0", None, requires_python='>=3.10"><script>alert(1)</script>'
    )
    entry = index.describe_wheel(odd, _sha256(odd))
    page = index.render_project_html("odd", [entry]).decode()
    assert "<script>" not in page
    assert 'data-requires-python="&gt;=3.10&quot;&gt;&lt;script&gt;' in page
    with pytest.raises(SglforgeError, match="refusing the path"):
        index.LocalTarget(tmp_path).write_file("files/../../escape", b"x")
    assert not (tmp_path.parent / "escape").exists()


def test_a_tampered_index_record_is_refused(tmp_path):
    root = _stack(tmp_path)
    dest = tmp_path / "index"
    _published(root, dest)
    record = dest / "simple" / "tinydep" / "index.json"
    record.write_text(
        record.read_text().replace(
            '"tinydep-1.0-py3-none-any.whl"', '"../tinydep-1.0-py3-none-any.whl"'
        )
    )
    result = _publish(root, dest, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "simple/tinydep/index.json: files[0]" in result.stderr


def test_a_wheel_that_differs_from_the_lock_is_refused_naming_it(tmp_path):
    root = _stack(tmp_path)
    wheel = root / "wheels" / f"sglang_kernel-{KERNEL}-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    result = _publish(root, tmp_path / "index", "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"sglang_kernel-{KERNEL}-py3-none-any.whl): sha256 of the file is" in result.stderr
    assert not (tmp_path / "index").exists()


def test_runtime_wheels_are_published_by_default_and_ours_only_leaves_them_out(tmp_path):
    root = _stack(tmp_path)
    missing = _publish(root, tmp_path / "index")
    assert missing.returncode == 2
    assert "tinydep==1.0" in missing.stderr and "no wheel for it" in missing.stderr
    ours = _publish(root, tmp_path / "index", "--ours-only")
    assert ours.returncode == 0, ours.stderr
    assert "the lock's 1 third-party pins are not in this index" in ours.stdout
    assert sorted(p.name for p in (tmp_path / "index" / "simple").iterdir()) == [
        "index.html",
        "index.json",
        "sglang",
        "sglang-kernel",
    ]


def test_unknown_targets_are_refused(tmp_path):
    root = _stack(tmp_path)
    result = _publish(root, "s3://bucket/index")
    assert result.returncode == 2 and "a directory or an http(s):// URL" in result.stderr


def test_publishing_to_a_webdav_server_gives_the_same_installable_index(
    tmp_path, served, webdav_auth
):
    """A real wsgidav server (basic auth) as DEST: the files on its disk are byte for byte a
    local publish's; served over HTTP, pip installs the lock from them; a second publish
    uploads nothing; a published wheel is never replaced; the password is never printed."""
    from tests.fixtures.webdav_server import PASSWORD

    root = _stack(tmp_path)
    local = tmp_path / "local-index"
    _published(root, local)
    result = _publish(root, webdav_auth.url + "index", "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    on_server = webdav_auth.root / "cache" / "index"
    assert {k: v[0] for k, v in _snapshot(on_server).items()} == {
        k: v[0] for k, v in _snapshot(local).items()
    }
    puts = [r.split()[1] for r in webdav_auth.requests() if r.startswith("PUT")]
    moves = [r.split()[1] for r in webdav_auth.requests() if r.startswith("MOVE")]
    assert len(puts) == len(moves) == len(_snapshot(local))  # every file: a PUT, a MOVE
    assert all(
        ".tmp-" in p.rsplit("/", 1)[-1] and p.rsplit("/", 1)[-1].startswith(".") for p in puts
    )  # uploaded under temporary names only
    assert moves[-1].startswith("/cache/index/simple/.index.html.tmp-")  # root page last
    webdav_auth.clear_log()
    again = _publish(root, webdav_auth.url + "index", "--wheelhouse", str(root / "wheelhouse"))
    assert again.returncode == 0, again.stderr
    assert "0 files added" in again.stdout
    assert not [r for r in webdav_auth.requests() if r.startswith(("PUT", "MOVE"))]
    # serve what the WebDAV server holds; pip installs the lock from it
    shutil.copytree(on_server, served[0] / "from-webdav")
    venv = tmp_path / "venv"
    install = _pip_install(
        _bare_venv(venv), f"{served[1]}/from-webdav/simple", root / "lockfiles" / "wheels.lock"
    )
    assert install.returncode == 0, install.stderr
    assert _installed(venv / "bin" / "python", "sglang", "tinydep") == [SGLANG, "1.0"]
    # append-only on the server too: another wheel under a published name is refused
    wheel = next((root / "wheels").glob("sglang-0*.whl"))
    (on_server / "files" / wheel.name).write_bytes(b"not the published bytes")
    refused = _publish(root, webdav_auth.url + "index", "--wheelhouse", str(root / "wheelhouse"))
    assert refused.returncode != 0 and wheel.name in refused.stderr
    assert "Traceback" not in refused.stderr and PASSWORD not in refused.stderr


def test_nothing_is_left_when_the_index_directory_is_new_and_publish_fails(tmp_path):
    root = _stack(tmp_path)
    shutil.rmtree(root / "wheelhouse")
    (root / "wheelhouse").mkdir()
    assert (
        _publish(root, tmp_path / "index", "--wheelhouse", str(root / "wheelhouse")).returncode == 2
    )
    assert not (tmp_path / "index").exists()


def test_one_publish_at_a_time_and_filesystem_errors_are_one_line(tmp_path):
    root = _stack(tmp_path)
    dest = tmp_path / "index"
    with index.LocalTarget(dest).locked():  # another publisher holds the index
        busy = _publish(root, dest, "--wheelhouse", str(root / "wheelhouse"))
    assert busy.returncode == 2
    assert busy.stderr == (
        f"error: {dest}: another publish into this index is running; try again when it is done\n"
    )
    assert list(dest.iterdir()) == []
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("x")
    result = _publish(root, a_file, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == f"error: {a_file}: not a directory (DEST is the index directory)\n"
    (tmp_path / "index" / "files" / "tinydep-1.0-py3-none-any.whl").mkdir(parents=True)
    result = _publish(root, dest, "--wheelhouse", str(root / "wheelhouse"))
    assert result.returncode == 2
    assert result.stderr == f"error: {dest}/files/tinydep-1.0-py3-none-any.whl: Is a directory\n"


def test_a_file_that_changes_while_it_is_copied_is_not_written(tmp_path):
    target = index.LocalTarget(tmp_path / "index")
    source = tmp_path / "w.whl"
    source.write_bytes(b"new bytes")
    with pytest.raises(SglforgeError, match="w.whl: sha256 is .* expected 0{64}"):
        target.write_file("files/w.whl", source, sha256="0" * 64)
    assert [p.name for p in (tmp_path / "index" / "files").iterdir()] == []


def test_republish_removes_the_temporary_a_killed_publish_left(tmp_path):
    from tests.test_bundle import killed_writer_temp

    root = _stack(tmp_path)
    dest = tmp_path / "index"
    _published(root, dest)
    wheel = next((dest / "files").glob("sglang-*.whl"))
    left = killed_writer_temp(wheel.with_name("tinydep-2.0-py3-none-any.whl"), 3 << 20)
    page = killed_writer_temp(dest / "simple" / "sglang" / "index.html", 1000)
    _published(root, dest)
    assert not left.exists() and not page.exists()
    assert not [p for p in dest.rglob(".*")]  # nothing hidden left in what is served
