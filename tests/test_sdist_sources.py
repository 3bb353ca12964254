"""Archive upstreams (issue 22 item 3): a registry sdist fetched through a package index laid
out as a local simple index (file://), verified by sha256, exported as a one-commit git tree
that a patch series applies to; offline, bundles and the lockfile form."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.cli.main import main
from sglforge.inputs.pins import parse_lockfile
from sglforge.sources.export import export_source
from sglforge.sources.fetch import fetch_sources
from tests.fixtures.gitrepos import World, run_git

EPOCH = 1_767_225_600
SDIST_FILES = {
    "PKG-INFO": "Metadata-Version: 2.4\nName: demo\nVersion: 1.0\n",
    "pyproject.toml": '[project]\nname = "demo"\nversion = "1.0"\n',
    "demo/__init__.py": "VALUE = 1\n",
    # the sdist's own ignore rules must not hide its files from the imported tree
    ".gitignore": "*.txt\nbuild/\n",
    "notes.txt": "kept although .gitignore names it\r\n",
    ".gitattributes": "* text eol=crlf\n",
    "vendor/lib/lib.h": "int lib;\n",
    "vendor/lib/.git": "gitdir: ../../.git/modules/vendor/lib\n",  # a checkout's litter
}


def make_sdist(path: Path, top: str = "demo-1.0", files: dict[str, str] | None = None) -> str:
    """A setuptools-style sdist (no directory members, like the real tilelang one)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for rel, text in sorted((files or SDIST_FILES).items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, EPOCH
            archive.addfile(info, io.BytesIO(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def write_index(root: Path, project: str, filename: str, digest: str | None) -> Path:
    """`root/simple/<project>/index.html` linking ../../packages/<filename>."""
    page = root / "simple" / project / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    fragment = f"#sha256={digest}" if digest else ""
    page.write_text(
        "<!DOCTYPE html><html><body>\n"
        f'<a href="../../packages/demo-0.9.tar.gz">demo-0.9.tar.gz</a>\n'
        f'<a href="../../packages/{filename}{fragment}">{filename}</a>\n'
        "</body></html>\n"
    )
    return root / "simple"


SDIST_ENTRY = """\
[[source]]
name = "demo"
sdist = "demo==1.0"
sha256 = "{sha}"
archive-root = "demo-1.0"
embeds = [
  {{ path = "vendor/lib", url = "https://example.invalid/org/lib", claimed-commit = "{claimed}" }},
]
"""
CLAIMED = "c" * 40


@pytest.fixture
def index(world: World, monkeypatch: pytest.MonkeyPatch):
    """A local simple index serving demo-1.0.tar.gz, selected with SGLFORGE_INDEX."""
    served = world.root / "pypi"
    sha = make_sdist(served / "packages" / "demo-1.0.tar.gz")
    simple = write_index(served, "demo", "demo-1.0.tar.gz", sha)
    monkeypatch.setenv("SGLFORGE_INDEX", simple.as_uri())
    world.write_lockfile(SDIST_ENTRY.format(sha=sha, claimed=CLAIMED))
    return type("Index", (), {"root": served, "simple": simple, "sha": sha})


def lock_of(world: World):
    return parse_lockfile(world.project / "lockfiles" / "upstreams.toml")


def test_sdist_is_fetched_through_the_index_and_exported_as_one_commit(world, index):
    lock = lock_of(world)
    pin = lock.get("demo")
    assert pin.sdist == "demo==1.0" and pin.commit is None and pin.embeds[0].path == "vendor/lib"
    report = fetch_sources(lock, [], world.settings(), offline=False)
    assert report.fetched == [f"demo sha256:{index.sha[:5]}"]
    assert (world.cache / "tarballs" / index.sha).is_file()
    tree = export_source(lock, "demo", world.build_root / "src" / "demo", world.settings())
    # a git work tree of one commit: the series can apply on top of it
    assert run_git(tree.path, "rev-list", "--count", "HEAD") == "1"
    assert run_git(tree.path, "status", "--porcelain", "--ignored") == ""
    assert tree.commit == run_git(tree.path, "rev-parse", "HEAD")
    files = run_git(tree.path, "ls-files").splitlines()
    assert "notes.txt" in files and "demo/__init__.py" in files  # not hidden by .gitignore
    assert "vendor/lib/.git" not in files and not (tree.path / "vendor/lib/.git").exists()
    assert tree.imported.dropped == ("vendor/lib/.git",)
    # bytes as the archive ships them: no eol conversion from the in-tree .gitattributes
    blob = run_git(tree.path, "cat-file", "-p", "HEAD:notes.txt")
    assert (tree.path / "notes.txt").read_bytes() == b"kept although .gitignore names it\r\n"
    assert blob.startswith("kept")
    assert (
        run_git(tree.path, "show", "-s", "--format=%ct %an", "HEAD")
        == f"{EPOCH} sglforge archive import"
    )
    assert tree.imported.embedded == {
        "vendor/lib": run_git(tree.path, "rev-parse", "HEAD:vendor/lib")
    }
    # the same pin always gives the same commit (fixed author, date, message)
    again = export_source(lock, "demo", world.root / "again", world.settings())
    assert again.commit == tree.commit and again.imported.tree == tree.imported.tree


def test_toolchain_index_setting_and_mirrors_apply(world, index, monkeypatch):
    monkeypatch.delenv("SGLFORGE_INDEX")
    (world.project / "lockfiles" / "toolchain.toml").write_text(
        'cuda = "13.0"\npython = "3.12"\nindex = "https://pypi.example.invalid/simple"\n'
    )
    from sglforge.inputs.settings import Mirror

    settings = world.settings(
        mirrors=(Mirror("https://pypi.example.invalid/", index.root.as_uri() + "/"),)
    )
    report = fetch_sources(lock_of(world), [], settings, offline=False)
    assert report.fetched == [f"demo sha256:{index.sha[:5]}"]


def test_wrong_sha256_is_expected_got_and_caches_nothing(world, index):
    wrong = "0" * 64
    world.write_lockfile(SDIST_ENTRY.format(sha=wrong, claimed=CLAIMED))
    with pytest.raises(SglforgeError) as err:  # the page states the real digest
        fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert f"expected sha256 {wrong}, got {index.sha}" in str(err.value)
    write_index(index.root, "demo", "demo-1.0.tar.gz", None)  # a page without digests
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert f"expected sha256 {wrong}, got {index.sha} from" in str(err.value)
    assert not list((world.cache / "tarballs").iterdir())


def test_missing_file_on_the_index_names_what_was_expected(world, index):
    world.write_lockfile(
        SDIST_ENTRY.format(sha=index.sha, claimed=CLAIMED).replace("demo==1.0", "demo==2.0")
    )
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert "expected demo-2.0.tar.gz on" in str(err.value)
    assert "demo-1.0.tar.gz" in str(err.value)


def test_offline_uses_the_cache_and_lists_what_is_missing(world, index):
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), [], world.settings(), offline=True)
    assert f"demo: sdist demo==1.0 sha256 {index.sha}" in str(err.value)
    fetch_sources(lock_of(world), [], world.settings(), offline=False)
    shutil.rmtree(index.root)  # the index is gone: the cache must be enough
    report = fetch_sources(lock_of(world), [], world.settings(), offline=True)
    assert report.cached == [f"demo sha256:{index.sha[:5]}"]
    tree = export_source(lock_of(world), "demo", world.root / "out", world.settings())
    assert (tree.path / "demo/__init__.py").read_text() == "VALUE = 1\n"


def test_bundle_round_trip_without_the_index(world, index, capsys):
    bundle = world.root / "sources.tar"
    assert main(world.cli_args() + ["fetch", "--no-export", "--bundle", str(bundle)]) == 0
    first = export_source(lock_of(world), "demo", world.root / "first", world.settings())
    shutil.rmtree(index.root)
    args = [
        "--project",
        str(world.project),
        "--cache-dir",
        str(world.root / "other-cache"),
        "--build-root",
        str(world.root / "other-build"),
    ]
    assert main(args + ["fetch", "--from-bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert (
        f"exported  demo -> {world.root / 'other-build/src/demo'} (archive as one commit, "
        f"tree {first.imported.tree}; dropped 1 .git path(s)" in out
    )
    exported = world.root / "other-build/src/demo"
    assert run_git(exported, "rev-parse", "HEAD") == first.commit


def test_series_applies_to_the_archive_tree_and_plan_works(world, index, capsys):
    fetch_sources(lock_of(world), [], world.settings(), offline=False)
    scratch = export_source(lock_of(world), "demo", world.root / "scratch", world.settings())
    (scratch.path / "demo/__init__.py").write_text("VALUE = 2\n")
    run_git(
        scratch.path,
        "commit",
        "-qam",
        "demo: value 2\n\nDescription: two\n"
        "Origin: vendor\nForwarded: not-needed\nLast-Update: 2026-11-01\n",
        env={
            "GIT_AUTHOR_NAME": "Dev",
            "GIT_AUTHOR_EMAIL": "dev@example.invalid",
            "GIT_COMMITTER_NAME": "Dev",
            "GIT_COMMITTER_EMAIL": "dev@example.invalid",
        },
    )
    patch = run_git(scratch.path, "format-patch", "-1", "--stdout", "HEAD").encode() + b"\n"
    world.write_series("demo", ["0001-value.patch"], {"0001-value.patch": patch})
    assert main(world.cli_args() + ["patches", "check", "--offline", "demo"]) == 0
    out = capsys.readouterr().out
    assert "ok        demo: 1 entry apply strictly to sha256:" in out
    assert main(world.cli_args() + ["plan"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "sdist demo==1.0" in out
    assert f"embeds vendor/lib (claimed {CLAIMED[:12]}, unverifiable)" in out


def test_archive_root_and_embeds_are_checked(world, index):
    world.write_lockfile(
        SDIST_ENTRY.format(sha=index.sha, claimed=CLAIMED).replace(
            'archive-root = "demo-1.0"', 'archive-root = "other-1.0"'
        )
    )
    fetch_sources(lock_of(world), [], world.settings(), offline=False)
    with pytest.raises(SglforgeError) as err:
        export_source(lock_of(world), "demo", world.root / "out", world.settings())
    assert "expected archive root 'other-1.0', got 'demo-1.0'" in str(err.value)
    world.write_lockfile(
        SDIST_ENTRY.format(sha=index.sha, claimed=CLAIMED).replace(
            'path = "vendor/lib"', 'path = "vendor/none"'
        )
    )
    with pytest.raises(SglforgeError) as err:
        export_source(lock_of(world), "demo", world.root / "out", world.settings())
    assert "embeds 'vendor/none', but the archive has no such directory" in str(err.value)
    tree_pinned = SDIST_ENTRY.format(sha=index.sha, claimed=CLAIMED).replace(
        f'claimed-commit = "{CLAIMED}"', f'claimed-commit = "{CLAIMED}", tree = "{"d" * 40}"'
    )
    world.write_lockfile(tree_pinned)
    with pytest.raises(SglforgeError) as err:
        export_source(lock_of(world), "demo", world.root / "out", world.settings())
    assert f"expected tree {'d' * 40} for the embedded 'vendor/lib', got " in str(err.value)
    assert not (world.root / "out").exists()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            'name = "x"\nsdist = "x==1.0"\nurl = "https://example.invalid/x.tar.gz"\nsha256 = "%s"',
            "give either 'url' (a tarball) or 'sdist'",
        ),
        ('name = "x"\nsdist = "x==1.0"\ncommit = "%s"' % ("a" * 40), "verified by its 'sha256'"),
        ('name = "x"\nsdist = "x>=1.0"\nsha256 = "%s"', "is not an exact requirement"),
        (
            'name = "x"\nsdist = "x==1.0"\nsha256 = "%s"\nembeds = [{ path = "../up" }]',
            "must be a relative path",
        ),
        (
            'name = "x"\nsdist = "x==1.0"\nsha256 = "%s"\nembeds = [{ path = "a", commit = "b" }]',
            "embeds[0], key 'commit'",
        ),
        (
            'name = "x"\nsdist = "x==1.0"\nsha256 = "%s"\narchive-root = "a/b"',
            "must be one directory name",
        ),
    ],
)
def test_bad_archive_entries_are_errors_naming_the_key(world, entry, message):
    text = "[[source]]\n" + (entry % ("e" * 64) if "%s" in entry else entry) + "\n"
    world.write_lockfile(text)
    with pytest.raises(SglforgeError) as err:
        lock_of(world)
    assert message in str(err.value) and "upstreams.toml" in str(err.value)


def test_pep691_json_page_and_hostile_links(world, index):
    import json

    page = index.simple / "demo"
    (page / "index.html").unlink()
    (page / "index.json").write_text(
        json.dumps(
            {
                "meta": {"api-version": "1.0"},
                "files": [
                    {
                        "filename": "demo-1.0.tar.gz",
                        "url": "../../packages/demo-1.0.tar.gz",
                        "hashes": {"sha256": index.sha},
                    }
                ],
            }
        )
    )
    report = fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert report.fetched == [f"demo sha256:{index.sha[:5]}"]
    shutil.rmtree(world.cache)
    (page / "index.json").write_text(
        json.dumps(
            {"files": [{"filename": "demo-1.0.tar.gz", "url": "ext::sh -c touch% /tmp/pwned"}]}
        )
    )
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert "links demo-1.0.tar.gz to 'ext::sh" in str(err.value)
    (page / "index.json").write_text("{not json")
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert "not a PEP 691 simple page" in str(err.value)


def test_pinned_import_tree_and_a_top_directory_named_like_its_child(world, index):
    fetch_sources(lock_of(world), [], world.settings(), offline=False)
    first = export_source(lock_of(world), "demo", world.root / "a", world.settings())
    entry = SDIST_ENTRY.format(sha=index.sha, claimed=CLAIMED)
    world.write_lockfile(
        entry.replace("archive-root", f'tree = "{first.imported.tree}"\narchive-root')
    )
    assert (
        export_source(lock_of(world), "demo", world.root / "b", world.settings()).imported.tree
        == first.imported.tree
    )
    world.write_lockfile(entry.replace("archive-root", f'tree = "{"a" * 40}"\narchive-root'))
    with pytest.raises(SglforgeError) as err:
        export_source(lock_of(world), "demo", world.root / "c", world.settings())
    assert f"expected tree {'a' * 40} for the imported archive" in str(err.value)
    assert f"got {first.imported.tree}" in str(err.value)

    # a tarball (with its top directory as a member) whose only content is a directory of
    # the same name: that directory is content, not a second top to strip
    from tests.fixtures.gitrepos import make_tarball

    sha = make_tarball(
        world.mirror / "dl/twice-1.0.tar.gz", "twice-1.0", {"twice-1.0/inner.txt": "x\n"}
    )
    world.write_lockfile(
        f'[[source]]\nname = "twice"\nurl = "{world.url("dl/twice-1.0.tar.gz")}"'
        f'\nsha256 = "{sha}"\narchive-root = "twice-1.0"\n'
    )
    fetch_sources(lock_of(world), [], world.settings(), offline=False)
    tree = export_source(lock_of(world), "twice", world.root / "t", world.settings())
    assert (tree.path / "twice-1.0" / "inner.txt").read_text() == "x\n"
    assert run_git(tree.path, "ls-files") == "twice-1.0/inner.txt"


def test_a_remote_index_cannot_point_at_local_files(world, index, monkeypatch):
    from sglforge.sources import sdist

    page = f'<a href="file:///dev/zero#sha256={index.sha}">demo-1.0.tar.gz</a>'.encode()
    monkeypatch.setattr(sdist, "_read_page", lambda url: (page, "text/html"))
    monkeypatch.setenv("SGLFORGE_INDEX", "https://pypi.example.invalid/simple")
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), [], world.settings(), offline=False)
    assert (
        "links demo-1.0.tar.gz to 'file:///dev/zero': a remote index may only link to "
        "http(s) files" in str(err.value)
    )
