"""Hand a meson project's pinned wrap inputs to meson the way meson builds offline.

CMake gets pinned dependencies as FETCHCONTENT_SOURCE_DIR_<NAME>; meson ignores those. What
meson (>= 1.3; read in mesonbuild/wrap/wrap.py of 1.9.1, `Resolver._resolve`) honours with
`--wrap-mode=nodownload` is its package cache, `<subprojects>/packagecache/`:
- `packagecache/<source_filename>` / `<patch_filename>`: used instead of downloading, after
  meson checks `source_hash` / `patch_hash` itself;
- `packagecache/<directory>`: an already-extracted source tree, copied to
  `subprojects/<directory>`; meson then still applies the wrap's patch (zip from the package
  cache, or `patch_directory`) and its `diff_files`, for wrap-file and wrap-git alike.

So each lockfile pin `<parent>.<x>` with `fetchcontent = "<wrap>"` (or `"<wrap>.patch"` for
the wrapdb patch zip) becomes one of those, checked against `subprojects/<wrap>.wrap`:
- an archive pin is the wrap's source (or patch) file: its sha256 must equal the wrap's
  source_hash (patch_hash), else the pin is not what the wrap names and the build stops;
- a git pin is an extracted tree under the wrap's `directory`. When it stands in for a
  wrap-file's release tarball whose files live one directory down in git (asio: the tarball's
  include/ is asio/include/ in the repository), the tree's top-level directory named like the
  wrap is used, as the release tarball is cut from it. The wrap's source_hash (of a tarball
  that is not used) cannot be checked then: the pinned commit is what is trusted.
Nothing is downloaded here; archives come from the source cache, trees from export_source.

The upstream tree and the pinned trees are hostile data, and this runs before the build, as
the user sglforge runs as (root on a build host): no link is followed out of a tree (issue 31).
`subprojects`, a `.wrap` file and the package cache are reached through links only while
those stay inside the upstream's tree; a pinned tree is copied by base/fs.copy_tree_inside
(links copied as links, and only those resolving inside the copied tree); anything else is
an error naming the pin and the path, before anything is written outside.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import copy_tree_inside, path_inside, read_capped, remove_tree
from sglforge.inputs.pins import Lockfile, Pin
from sglforge.sources.cache import SourceCache

PATCH_SUFFIX = ".patch"  # fetchcontent "<wrap>.patch": the wrap's patch_filename archive
_SAFE_NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]*"


@dataclass(frozen=True)
class MesonWrap:
    """The fields of one `subprojects/<name>.wrap` that say what meson would fetch."""

    name: str
    path: Path
    kind: str  # "file" or "git"
    directory: str
    source_filename: str | None = None
    source_hash: str | None = None
    patch_filename: str | None = None
    patch_hash: str | None = None


@dataclass(frozen=True)
class PlacedWrapInput:
    pin: str
    wrap: str
    placed: str  # path under the source root

    def describe(self) -> str:
        return f"{self.pin} -> {self.placed}"


def is_meson_project(root: Path) -> bool:
    return (root / "meson.build").is_file() and (root / "subprojects").is_dir()


def _plain_name(value: str, wrap: Path, key: str) -> str:
    if not re.fullmatch(_SAFE_NAME, value) or ".." in value:
        raise SglforgeError(f"{wrap}: {key} = {value!r} is not a plain file name")
    return value


WRAP_CAP = 1 << 20  # a .wrap file is a few hundred bytes


def read_wrap(path: Path) -> MesonWrap:
    """Parse one .wrap file (hostile data: a clear error naming the file and key)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(
            read_capped(path, WRAP_CAP, "wrap file").decode("utf-8"), source=str(path)
        )
    except (UnicodeError, configparser.Error) as exc:
        raise SglforgeError(f"{path}: not a readable wrap file: {exc}") from None
    sections = [s for s in parser.sections() if s.startswith("wrap-")]
    if len(sections) != 1:
        raise SglforgeError(f"{path}: expected one [wrap-*] section, found {sections or 'none'}")
    kind = sections[0].removeprefix("wrap-")
    values = parser[sections[0]]
    name = path.name.removesuffix(".wrap")

    def field(key: str) -> str | None:
        value = values.get(key)
        return _plain_name(value.strip(), path, key) if value is not None else None

    return MesonWrap(
        name=name,
        path=path,
        kind=kind,
        directory=field("directory") or name,
        source_filename=field("source_filename"),
        source_hash=(values.get("source_hash") or "").strip().lower() or None,
        patch_filename=field("patch_filename"),
        patch_hash=(values.get("patch_hash") or "").strip().lower() or None,
    )


def _wrap_for(pin: Pin, source_root: Path, subprojects: str) -> tuple[MesonWrap, bool]:
    """The wrap `pin` stands in for; `subprojects` is where the upstream's subprojects
    directory really is (relative to `source_root`, links resolved inside it)."""
    assert pin.fetchcontent is not None
    is_patch = pin.fetchcontent.endswith(PATCH_SUFFIX)
    name = pin.fetchcontent.removesuffix(PATCH_SUFFIX) if is_patch else pin.fetchcontent
    # the .wrap may be a link, but one that stays in the tree: sglforge reads nothing outside
    path = path_inside(source_root, f"{subprojects}/{name}.wrap", str(pin.parent))
    if not path.is_file():
        raise SglforgeError(
            f"{pin.name} (fetchcontent = {pin.fetchcontent!r}): the tree of "
            f"'{pin.parent}' has no subprojects/{name}.wrap to hand it to"
        )
    return read_wrap(path), is_patch


def _check_archive_pin(pin: Pin, wrap: MesonWrap, is_patch: bool) -> str:
    """The file name meson looks up in its package cache for this archive pin; an error when
    the wrap names no such file or a different one (its hash)."""
    what = "patch" if is_patch else "source"
    filename = wrap.patch_filename if is_patch else wrap.source_filename
    expected = wrap.patch_hash if is_patch else wrap.source_hash
    if wrap.kind != "file" or filename is None or expected is None:
        raise SglforgeError(
            f"{pin.name}: {wrap.path} has no {what}_filename/{what}_hash "
            f"for an archive pin to stand in for"
        )
    if pin.sha256 != expected:
        raise SglforgeError(
            f"{pin.name}: pinned sha256 {pin.sha256} is not the {what}_hash "
            f"{expected} of {wrap.path} (wrap '{wrap.name}'): the pin and the "
            "wrap name different files"
        )
    return filename


def _place_archive(
    pin: Pin, wrap: MesonWrap, is_patch: bool, cache: SourceCache, packagecache: Path
) -> Path:
    filename = _check_archive_pin(pin, wrap, is_patch)
    assert pin.sha256 is not None
    archive = cache.verified_tarball(pin.name, pin.sha256)
    target = packagecache / filename
    if os.path.lexists(target):
        raise SglforgeError(
            f"{pin.name}: {target} is placed twice (another pin's input has the name '{filename}')"
        )
    shutil.copyfile(archive, target)
    return target


def _place_tree(pin: Pin, wrap: MesonWrap, is_patch: bool, tree: Path, packagecache: Path) -> Path:
    if is_patch:
        raise SglforgeError(
            f"{pin.name}: a wrap's patch ({pin.fetchcontent}) must be an "
            "archive pin (sha256), not a git pin"
        )
    root = tree
    if wrap.kind == "file" and not os.path.lexists(tree / "meson.build"):
        # the release tarball's tree is this directory of the repository (a link to it only
        # while that stays inside the pinned tree)
        nested = path_inside(tree, wrap.name, pin.name)
        if nested.is_dir():
            root = nested
    target = packagecache / wrap.directory
    if os.path.lexists(target):
        raise SglforgeError(
            f"{pin.name}: {target} is placed twice (two pins name the wrap "
            f"directory '{wrap.directory}')"
        )
    copy_tree_inside(root, target, pin.name, ignore=(".git",))
    return target


def place_wrap_inputs(
    lock: Lockfile,
    upstream: str,
    source_root: Path,
    cache: SourceCache,
    export_tree: Callable[[Pin], Path],
) -> list[PlacedWrapInput]:
    """Put every pinned wrap input of `upstream` into `<source_root>/subprojects/packagecache`.

    `export_tree(pin)` exports a git pin's tree (with its submodules) and returns it.
    """
    # `subprojects` (and any link on the way) must stay inside the tree: an upstream that
    # ships it as a link out would have the package cache made, and the wraps read, out there
    subprojects = path_inside(source_root, "subprojects", upstream)
    if not subprojects.is_dir():
        raise SglforgeError(f"{upstream}: subprojects is not a directory in {source_root}")
    packagecache = subprojects / "packagecache"
    if os.path.lexists(packagecache):  # a dangling link too
        raise SglforgeError(
            f"{upstream}: {packagecache} already exists in the exported tree; "
            "the pinned wrap inputs would mix with files of unknown origin"
        )
    where = str(subprojects.relative_to(source_root))
    pins = lock.fetchcontent(upstream)
    planned = [(pin, *_wrap_for(pin, source_root, where)) for pin in pins]
    for pin, wrap, is_patch in planned:  # every pin checked before anything is written
        if not pin.is_git:
            _check_archive_pin(pin, wrap, is_patch)
    packagecache.mkdir()
    placed = []
    try:
        for pin, wrap, is_patch in planned:
            if pin.is_git:
                target = _place_tree(pin, wrap, is_patch, export_tree(pin), packagecache)
            else:
                target = _place_archive(pin, wrap, is_patch, cache, packagecache)
            placed.append(
                PlacedWrapInput(pin.name, wrap.name, str(target.relative_to(source_root)))
            )
    except BaseException:
        remove_tree(packagecache)  # no half-filled package cache is left for meson
        raise
    return placed
