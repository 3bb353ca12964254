"""A meson-python upstream whose meson wrap (source tarball + wrapdb-style patch zip) is pinned
in the lockfile builds with --wrap-mode=nodownload: sglforge hands the pinned files to meson in
subprojects/packagecache (builder/mesonwraps.py), as CMake gets FETCHCONTENT_SOURCE_DIR_*.
A pin whose sha256 is not the wrap's source_hash is an error naming the wrap, before meson runs.

Real parts: real git mirror, real `sglforge build` (pip wheel, meson-python, meson, ninja)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.builder.mesonwraps import place_wrap_inputs
from sglforge.inputs.pins import parse_lockfile
from sglforge.sources.cache import SourceCache
from tests.fixtures import upstreams
from tests.fixtures.project import FixtureProject, cuda_release
from tests.helpers import snapshot

pytest.importorskip("mesonpy", reason="meson-python (a [test] extra) is not installed")

MTIME = 1754049600
BUILD_REQUIRES = ("meson-python", "meson", "ninja")


def _tarball(dest: Path, message: str) -> str:
    """A release tarball of the wrapped dependency (top directory greetwrap-1.0)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        top = tarfile.TarInfo("greetwrap-1.0")
        top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, MTIME
        archive.addfile(top)
        data = message.encode()
        info = tarfile.TarInfo("greetwrap-1.0/message.txt")
        info.size, info.mode, info.mtime = len(data), 0o644, MTIME
        archive.addfile(info, io.BytesIO(data))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def _patch_zip(dest: Path) -> str:
    """A wrapdb-style patch: the meson.build the upstream tarball lacks."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("greetwrap-1.0/meson.build", date_time=(2025, 8, 1, 12, 0, 0))
        info.external_attr = 0o100644 << 16  # a regular file, as wrapdb's zips record
        archive.writestr(
            info, "project('greetwrap')\ngreeting = import('fs').read('message.txt').strip()\n"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def _upstream_files(source_sha: str, patch_sha: str) -> dict[str, str]:
    return {
        "pyproject.toml": """\
[build-system]
requires = ["meson-python"]
build-backend = "mesonpy"

[project]
name = "mesondemo"
version = "1.0.0"
""",
        "meson.build": """\
project('mesondemo', version: '1.0.0')
py = import('python').find_installation()
greeting = subproject('greetwrap').get_variable('greeting')
nested = subproject('nestwrap').get_variable('nested')
cloned = subproject('gitwrap').get_variable('cloned')
conf = configuration_data()
conf.set_quoted('GREETING', greeting)
conf.set_quoted('NESTED', nested)
conf.set_quoted('CLONED', cloned)
configure_file(output: '_greeting.py', configuration: conf,
               install_dir: py.get_install_dir() / 'mesondemo')
py.install_sources('mesondemo/__init__.py', subdir: 'mesondemo')
""",
        "mesondemo/__init__.py": "from mesondemo._greeting import GREETING\n",
        # Unreachable on purpose: this only builds when the pinned files are handed over.
        "subprojects/greetwrap.wrap": f"""\
[wrap-file]
directory = greetwrap-1.0
source_url = https://unreachable.invalid/greetwrap-1.0.tar.gz
source_filename = greetwrap-1.0.tar.gz
source_hash = {source_sha}
patch_url = https://unreachable.invalid/greetwrap_1.0-1/get_patch
patch_filename = greetwrap_1.0-1_patch.zip
patch_hash = {patch_sha}
""",
        # a release tarball stood in for by a git pin whose files are one directory down
        # (asio's layout); the build files come from the tree's packagefiles
        "subprojects/nestwrap.wrap": """\
[wrap-file]
directory = nestwrap-2.0
source_url = https://unreachable.invalid/nestwrap-2.0.tar.gz
source_filename = nestwrap-2.0.tar.gz
source_hash = 0000000000000000000000000000000000000000000000000000000000000000
patch_directory = nestwrap
""",
        "subprojects/packagefiles/nestwrap/meson.build": "project('nestwrap')\nnested = import('fs').read('message.txt').strip()\n",
        # a wrap-git pinned by commit (prometheus-cpp's form), with a diff meson applies
        "subprojects/gitwrap.wrap": """\
[wrap-git]
url = https://unreachable.invalid/gitwrap.git
revision = v1
diff_files = gitwrap-fix.patch
""",
        "subprojects/packagefiles/gitwrap-fix.patch": """\
--- a/message.txt
+++ b/message.txt
@@ -1 +1 @@
-cloned, unpatched
+cloned and patched
""",
    }


def _repo(path: Path, files: dict[str, str], links: dict[str, str] | None = None) -> str:
    """upstreams.make_repo, with symbolic links (name -> target) committed too. A file under
    a linked directory is written through the link (out there) and is not in the commit."""
    for name, target in (links or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path / name)
    return upstreams.make_repo(path, files)


def _project(
    base: Path,
    pinned_source: str = "greetwrap-1.0.tar.gz",
    *,
    links: dict[str, dict[str, str]] | None = None,
) -> tuple[FixtureProject, str]:
    """`links`: repository (mesondemo, nestwrap, gitwrap) -> the links it ships."""
    links = links or {}
    mirror = base / "mirror"
    source_sha = _tarball(mirror / "dl" / "greetwrap-1.0.tar.gz", "hello from greetwrap\n")
    other_sha = _tarball(mirror / "dl" / "greetwrap-other.tar.gz", "not the wrap's file\n")
    patch_sha = _patch_zip(mirror / "dl" / "greetwrap_1.0-1_patch.zip")
    nest_files = {"README": "the release tarball is cut from nestwrap/\n"}
    if "nestwrap" not in links.get("nestwrap", {}):
        nest_files["nestwrap/message.txt"] = "hello from the nested tree\n"
    nest_commit = _repo(mirror / "org" / "nestwrap", nest_files, links.get("nestwrap"))
    git_commit = _repo(
        mirror / "org" / "gitwrap",
        {
            "meson.build": "project('gitwrap')\n"
            "cloned = import('fs').read('message.txt').strip()\n",
            "message.txt": "cloned, unpatched\n",
        },
        links.get("gitwrap"),
    )
    commit = _repo(
        mirror / "org" / "mesondemo", _upstream_files(source_sha, patch_sha), links.get("mesondemo")
    )
    pinned_sha = source_sha if pinned_source == "greetwrap-1.0.tar.gz" else other_sha
    root = base / "project"
    (root / "lockfiles").mkdir(parents=True)
    (root / "lockfiles" / "upstreams.toml").write_text(
        f'[[source]]\nname = "mesondemo"\nurl = "{upstreams.MIRROR_PREFIX}org/mesondemo"\n'
        f'commit = "{commit}"\n\n'
        '[[source]]\nname = "mesondemo.greetwrap"\nparent = "mesondemo"\n'
        f'fetchcontent = "greetwrap"\nurl = "{upstreams.MIRROR_PREFIX}dl/{pinned_source}"\n'
        f'sha256 = "{pinned_sha}"\n\n'
        '[[source]]\nname = "mesondemo.greetwrap-patch"\nparent = "mesondemo"\n'
        'fetchcontent = "greetwrap.patch"\n'
        f'url = "{upstreams.MIRROR_PREFIX}dl/greetwrap_1.0-1_patch.zip"\n'
        f'sha256 = "{patch_sha}"\n\n'
        '[[source]]\nname = "mesondemo.nestwrap"\nparent = "mesondemo"\n'
        f'fetchcontent = "nestwrap"\nurl = "{upstreams.MIRROR_PREFIX}org/nestwrap"\n'
        f'commit = "{nest_commit}"\n\n'
        '[[source]]\nname = "mesondemo.gitwrap"\nparent = "mesondemo"\n'
        f'fetchcontent = "gitwrap"\nurl = "{upstreams.MIRROR_PREFIX}org/gitwrap"\n'
        f'commit = "{git_commit}"\n'
    )
    pins = "\n".join(f'{n} = "{importlib.metadata.version(n)}"' for n in BUILD_REQUIRES)
    (root / "lockfiles" / "toolchain.toml").write_text(
        f'cuda = "{cuda_release()}"\n'
        f'python = "{sys.version_info.major}.{sys.version_info.minor}"\n'
        'torch = "2.13.0"\n\n[build-requires]\n' + pins + "\n"
    )
    (root / "recipes").mkdir()
    (root / "recipes" / "mesondemo.toml").write_text(
        'upstream = "mesondemo"\nbuild-requires = ["meson-python", "meson", "ninja"]\n'
        'version-label = "retag"\nlocal-version = "cpu.{patchset8}"\nmem-per-job = "512MiB"\n\n'
        '[config-settings]\n"setup-args" = ["--wrap-mode=nodownload"]\n'
    )
    (root / "wheels").mkdir()
    config = base / "config.toml"
    config.write_text("")
    project = FixtureProject(
        root=root,
        mirror=mirror,
        cache=base / "cache",
        build_root=base / "root",
        config=config,
        commits={"mesondemo": commit},
    )
    return project, source_sha


def test_pinned_wrap_builds_offline_with_nodownload(tmp_path):
    project, _ = _project(tmp_path)
    result = project.run("build", "--no-check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "meson wrap greetwrap: mesondemo.greetwrap -> "
        "subprojects/packagecache/greetwrap-1.0.tar.gz" in result.stdout
    )
    [entry] = project.manifest()["wheels"]
    with zipfile.ZipFile(project.root / "wheels" / entry["file"]) as wheel:
        generated = wheel.read("mesondemo/_greeting.py").decode()
    # the text comes from the pinned tarball, read by the meson.build of the pinned patch zip
    assert "hello from greetwrap" in generated
    assert "hello from the nested tree" in generated  # git pin, tree one directory down
    assert "cloned and patched" in generated  # git pin of a wrap-git; its diff_files applied
    names = {s["name"] for s in entry["provenance"]["sources"]}
    assert {"mesondemo.greetwrap", "mesondemo.greetwrap-patch"} <= names


def test_pin_that_is_not_the_wraps_file_is_an_error_naming_the_wrap(tmp_path):
    project, source_sha = _project(tmp_path, pinned_source="greetwrap-other.tar.gz")
    before = snapshot(project.root / "wheels")
    result = project.run("build", "--no-check")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "mesondemo.greetwrap: pinned sha256" in result.stderr
    assert f"is not the source_hash {source_sha}" in result.stderr
    assert "greetwrap.wrap (wrap 'greetwrap')" in result.stderr
    assert "build of mesondemo failed" not in result.stderr  # stopped before meson ran
    assert snapshot(project.root / "wheels") == before


# -- issue 31 item 3: sglforge's own steps never follow a link out of an upstream tree --------


def _outside(base: Path) -> tuple[Path, bytes]:
    """A directory out of every tree, holding a 0600 file (root's, when the suite is root)."""
    outside = base / "outside"
    outside.mkdir()
    (outside / "message.txt").write_text("read from outside the tree\n")
    secret = b"SECRET-0600-NOT-FOR-ANY-WHEEL\n"
    fd = os.open(outside / "secret", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret)
    os.close(fd)
    return outside, secret


def _holding(directory: Path, data: bytes) -> list[str]:
    """Every file under `directory` (links not followed) whose bytes contain `data`, and
    every wheel member that does."""
    found = []
    for parent, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(parent) / name
            if path.is_symlink() or not path.is_file():
                continue
            if data in path.read_bytes():
                found.append(str(path))
            if name.endswith(".whl"):
                with zipfile.ZipFile(path) as wheel:
                    found += [f"{path}:{m}" for m in wheel.namelist() if data in wheel.read(m)]
    return found


def test_wrap_tree_that_is_a_link_to_an_absolute_directory_is_refused_not_copied(tmp_path):
    """Red-team finding: a git pin standing in for a wrap whose top-level directory (the one
    named like the wrap) is a link to an absolute directory: the copy step, as root, copied a
    0600 file from out there into the package cache, and it ended up in the wheel."""
    outside, secret = _outside(tmp_path)
    project, _ = _project(tmp_path, links={"nestwrap": {"nestwrap": str(outside)}})
    result = project.run("build", "--no-check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"mesondemo.nestwrap: nestwrap goes through the symlink nestwrap -> {outside} "
        "(absolute)" in result.stderr
    )
    assert "leads outside the tree" in result.stderr
    assert _holding(project.build_root, secret) == []
    assert _holding(project.root, secret) == []
    # nothing half-placed is left for meson either
    assert not (project.build_root / "src" / "mesondemo" / "subprojects" / "packagecache").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["message.txt", "secret"]


def test_link_inside_a_wrap_tree_leading_out_is_refused(tmp_path):
    outside, secret = _outside(tmp_path)
    project, _ = _project(
        tmp_path, links={"gitwrap": {"data": str(outside), "docs/up": "../../.."}}
    )
    result = project.run("build", "--no-check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"mesondemo.gitwrap: data is a symlink to '{outside}' (absolute or empty)" in result.stderr
    )
    assert "sglforge copies no link out of a tree" in result.stderr
    assert _holding(project.build_root, secret) == []


def test_upstream_whose_subprojects_is_a_link_out_gets_no_packagecache_out_there(tmp_path):
    """Red-team finding: an upstream shipping `subprojects` as a link to a directory outside
    its tree made sglforge create `packagecache/` (and copy the pinned inputs) out there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the upstream's wrap files are written through the link: they exist only out there
    project, _ = _project(tmp_path, links={"mesondemo": {"subprojects": str(elsewhere)}})
    before = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))
    assert "greetwrap.wrap" in before
    result = project.run("build", "--no-check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"mesondemo: subprojects goes through the symlink subprojects -> {elsewhere} "
        "(absolute)" in result.stderr
    )
    assert not (elsewhere / "packagecache").exists()
    assert sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*")) == before


# place_wrap_inputs on its own (no build): each way a link could lead out, and the links that
# stay inside, which are copied as links

COMMIT = "1" * 40


def _wrap_case(
    tmp_path: Path, wrap: str = "[wrap-git]\nurl = https://x.invalid/d.git\n"
) -> tuple[Path, Path, object]:
    lockfile = tmp_path / "upstreams.toml"
    lockfile.write_text(
        f'[[source]]\nname = "up"\nurl = "https://x.invalid/up.git"\ncommit = "{COMMIT}"\n\n'
        '[[source]]\nname = "up.dep"\nparent = "up"\nfetchcontent = "dep"\n'
        f'url = "https://x.invalid/dep.git"\ncommit = "{"2" * 40}"\n'
    )
    source = tmp_path / "src"
    (source / "subprojects").mkdir(parents=True)
    (source / "meson.build").write_text("project('up')\n")
    (source / "subprojects" / "dep.wrap").write_text(wrap)
    dep = tmp_path / "dep"
    (dep / "src").mkdir(parents=True)
    (dep / "meson.build").write_text("project('dep')\n")
    (dep / "src" / "a.c").write_text("int a;\n")
    return source, dep, parse_lockfile(lockfile)


def _place(tmp_path: Path, source: Path, dep: Path, lock: object) -> list:
    return place_wrap_inputs(lock, "up", source, SourceCache(tmp_path / "cache"), lambda pin: dep)


def test_links_inside_a_wrap_tree_are_copied_as_links(tmp_path):
    source, dep, lock = _wrap_case(tmp_path)
    os.symlink("src/a.c", dep / "alias.c")
    os.symlink("../meson.build", dep / "src" / "up.build")
    os.symlink("src", dep / "srcdir")
    os.symlink("missing/../src", dep / "odd")  # dangling on the way, but inside
    [placed] = _place(tmp_path, source, dep, lock)
    assert placed.placed == "subprojects/packagecache/dep"
    copy = source / placed.placed
    assert os.readlink(copy / "alias.c") == "src/a.c"  # a link still, not its file
    assert os.readlink(copy / "src" / "up.build") == "../meson.build"
    assert os.readlink(copy / "srcdir") == "src" and os.readlink(copy / "odd") == "missing/../src"
    assert (copy / "src" / "a.c").read_text() == "int a;\n"


def test_subprojects_linked_inside_the_tree_is_used_there(tmp_path):
    source, dep, lock = _wrap_case(tmp_path)
    (source / "subprojects").rename(source / "real-subprojects")
    os.symlink("real-subprojects", source / "subprojects")
    [placed] = _place(tmp_path, source, dep, lock)
    assert placed.placed == "real-subprojects/packagecache/dep"
    assert (source / "subprojects" / "packagecache" / "dep" / "meson.build").is_file()


@pytest.mark.parametrize(
    ("hostile", "message"),
    [
        # a link in the copied tree, absolute, or climbing out (directly, through a chain, or
        # out of the copied tree into the rest of the pinned one)
        ({"dep/leak": "/etc"}, "up.dep: leak is a symlink to '/etc' (absolute or empty)"),
        (
            {"dep/src/up": "../../outside"},
            ("up.dep: src/up is a symlink to '../../outside', which climbs above the tree root"),
        ),
        (
            {"dep/hop": "src/next", "dep/src/next": "/etc/passwd"},
            (
                "up.dep: hop is a symlink to 'src/next', which goes through the symlink src/next -> "
                "/etc/passwd (absolute)"
            ),
        ),
        (
            {"dep/loop": "loop2", "dep/loop2": "loop"},
            ("up.dep: loop is a symlink to 'loop2', which goes through the symlink"),
        ),
        # the upstream tree: the wrap file, the package cache, a link on the way to subprojects
        (
            {"src/subprojects/dep.wrap": "/etc/passwd"},
            "up: subprojects/dep.wrap goes through the symlink subprojects/dep.wrap -> /etc/passwd",
        ),
        (
            {"src/subprojects/packagecache": "/nonexistent-sglforge"},
            "packagecache already exists in the exported tree",
        ),
        (
            {"src/subprojects": "../outside"},
            (
                "up: subprojects goes through the symlink subprojects -> ../outside, which then climbs "
                "above the tree root"
            ),
        ),
    ],
)
def test_every_link_out_is_refused_naming_the_pin_and_the_path(tmp_path, hostile, message):
    source, dep, lock = _wrap_case(tmp_path)
    (tmp_path / "outside").mkdir()
    bases = {"dep": dep, "src": source}
    for name, target in hostile.items():
        where, _, rel = name.partition("/")
        path = bases[where] / rel
        if os.path.lexists(path):
            if path.is_dir() and not path.is_symlink():
                (path / "dep.wrap").rename(tmp_path / "outside" / "dep.wrap")
                path.rmdir()
            else:
                path.unlink()
        os.symlink(target, path)
    before = sorted(p.name for p in (tmp_path / "outside").iterdir())
    with pytest.raises(SglforgeError) as caught:
        _place(tmp_path, source, dep, lock)
    assert message in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == before
    assert not (source / "subprojects" / "packagecache" / "dep").exists()
