"""A meson-python upstream whose meson wrap (source tarball + wrapdb-style patch zip) is pinned
in the lockfile builds with --wrap-mode=nodownload: sglforge hands the pinned files to meson in
subprojects/packagecache (build/mesonwraps.py), as CMake gets FETCHCONTENT_SOURCE_DIR_*.
A pin whose sha256 is not the wrap's source_hash is an error naming the wrap, before meson runs.

Real parts: real git mirror, real `sglforge build` (pip wheel, meson-python, meson, ninja)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

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
        archive.writestr(info, "project('greetwrap')\n"
                               "greeting = import('fs').read('message.txt').strip()\n")
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
        "subprojects/packagefiles/nestwrap/meson.build":
            "project('nestwrap')\nnested = import('fs').read('message.txt').strip()\n",
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


def _project(base: Path, pinned_source: str = "greetwrap-1.0.tar.gz") -> tuple[FixtureProject,
                                                                               str]:
    mirror = base / "mirror"
    source_sha = _tarball(mirror / "dl" / "greetwrap-1.0.tar.gz", "hello from greetwrap\n")
    other_sha = _tarball(mirror / "dl" / "greetwrap-other.tar.gz", "not the wrap's file\n")
    patch_sha = _patch_zip(mirror / "dl" / "greetwrap_1.0-1_patch.zip")
    nest_commit = upstreams.make_repo(mirror / "org" / "nestwrap", {
        "README": "the release tarball is cut from nestwrap/\n",
        "nestwrap/message.txt": "hello from the nested tree\n"})
    git_commit = upstreams.make_repo(mirror / "org" / "gitwrap", {
        "meson.build": "project('gitwrap')\n"
                       "cloned = import('fs').read('message.txt').strip()\n",
        "message.txt": "cloned, unpatched\n"})
    commit = upstreams.make_repo(mirror / "org" / "mesondemo", _upstream_files(source_sha,
                                                                             patch_sha))
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
        f'commit = "{git_commit}"\n')
    pins = "\n".join(f'{n} = "{importlib.metadata.version(n)}"' for n in BUILD_REQUIRES)
    (root / "lockfiles" / "toolchain.toml").write_text(
        f'cuda = "{cuda_release()}"\n'
        f'python = "{sys.version_info.major}.{sys.version_info.minor}"\n'
        'torch = "2.13.0"\n\n[build-requires]\n' + pins + "\n")
    (root / "recipes").mkdir()
    (root / "recipes" / "mesondemo.toml").write_text(
        'upstream = "mesondemo"\nbuild-requires = ["meson-python", "meson", "ninja"]\n'
        'version-label = "retag"\nlocal-version = "cpu.{patchset8}"\nmem-per-job = "512MiB"\n\n'
        '[config-settings]\n"setup-args" = ["--wrap-mode=nodownload"]\n')
    (root / "wheels").mkdir()
    config = base / "config.toml"
    config.write_text("")
    project = FixtureProject(root=root, mirror=mirror, cache=base / "cache",
                             build_root=base / "root", config=config,
                             commits={"mesondemo": commit})
    return project, source_sha


def test_pinned_wrap_builds_offline_with_nodownload(tmp_path):
    project, _ = _project(tmp_path)
    result = project.run("build", "--no-check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "meson wrap greetwrap: mesondemo.greetwrap -> " \
           "subprojects/packagecache/greetwrap-1.0.tar.gz" in result.stdout
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
