"""Fuzzing archives and bundles (issue 21 items 2 and 7): hostile tar members, bundle
manifests and damaged bundle bytes never give a traceback, and nothing extracted ever
resolves outside the tree.

Deterministic (`derandomize=True`, no example database) and bounded (SGLFORGE_FUZZ_EXAMPLES,
default 100 per property; the module runs in seconds).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglforge.base.errors import SglforgeError
from sglforge.inputs.settings import Settings
from sglforge.sources.archive import ArchiveLimits, extract_tar
from sglforge.sources.bundle import import_bundle

FUZZ = settings(
    max_examples=int(os.environ.get("SGLFORGE_FUZZ_EXAMPLES", "100")),
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Few distinct components, so names collide and links point at each other.
COMPONENT = st.sampled_from(["a", "b", "top", "..", ".", "", "l", "x"])
PATH = st.lists(COMPONENT, min_size=1, max_size=4).map("/".join)
LINK = st.one_of(PATH, PATH.map(lambda p: "/" + p), st.sampled_from(["..", "../..", "/etc"]))
MEMBER = st.tuples(st.sampled_from(["file", "dir", "sym", "hard", "fifo", "chr"]), PATH, LINK)


def build_tar(members: list[tuple[str, str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for kind, name, link in members:
            info = tarfile.TarInfo(name)
            data = None
            info.type = {
                "file": tarfile.REGTYPE,
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chr": tarfile.CHRTYPE,
            }[kind]
            if kind in ("sym", "hard"):
                info.linkname = link
            if kind == "file":
                data = name.encode()
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def assert_contained(root: Path) -> None:
    real_root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode), path
            assert not mode & (stat.S_ISUID | stat.S_ISGID), path
            resolved = os.path.realpath(path)
            assert resolved == real_root or resolved.startswith(real_root + os.sep), (
                f"{path} resolves to {resolved}"
            )


@FUZZ
@given(st.lists(MEMBER, max_size=8), st.booleans())
def test_fuzzed_tar_members_are_refused_or_stay_inside(members, strip):
    with tempfile.TemporaryDirectory(prefix="sglforge-fuzz-") as tmp:
        work = Path(tmp)
        (work / "in.tar").write_bytes(build_tar(members))
        dest = work / "tree" / "out"
        dest.mkdir(parents=True)
        try:
            extract_tar(
                work / "in.tar", dest, "in.tar", ArchiveLimits(50, 1 << 20), strip_top=strip
            )
        except SglforgeError as exc:
            assert str(exc).startswith("in.tar: "), exc
        # Whether refused midway or not, nothing outside `tree/out` was touched.
        assert sorted(p.name for p in work.iterdir()) == ["in.tar", "tree"]
        assert os.listdir(work / "tree") == ["out"]
        assert_contained(dest)


def _valid_bundle_parts() -> tuple[dict, dict[str, bytes]]:
    data = b"tarball\n"
    digest = hashlib.sha256(data).hexdigest()
    manifest = {
        "format": 1,
        "git": [],
        "tarballs": [{"name": "gamma", "sha256": digest, "file": f"tarballs/{digest}"}],
    }
    return manifest, {f"tarballs/{digest}": data}


def _bundle(manifest_bytes: bytes, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in [("manifest.json", manifest_bytes), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(
        ["/etc/passwd", "../x", "git/000.bundle", "ext::sh -c id", "a" * 40, "tarballs/x"]
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["format", "git", "tarballs", "url", "commits", "file", "name", "sha256", "x"]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def _import(blob: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="sglforge-fuzz-") as tmp:
        path = Path(tmp) / "in.tar"
        path.write_bytes(blob)
        try:
            import_bundle(
                path, Settings(cache_dir=Path(tmp) / "cache", build_root=Path(tmp) / "build")
            )
        except SglforgeError as exc:
            assert str(path) in str(exc), exc
        cache = Path(tmp) / "cache"
        for item in cache.rglob("*") if cache.exists() else []:
            assert item.name == ".lock" or item.is_dir() or item.parent.name == "tarballs"


@FUZZ
@given(JSON)
def test_fuzzed_bundle_manifests_are_clear_errors(document):
    _, files = _valid_bundle_parts()
    _import(_bundle(json.dumps(document).encode(), files))


@FUZZ
@given(st.sampled_from(["format", "git", "tarballs"]), JSON, st.integers(0, 2))
def test_damaged_valid_manifest_fields_are_clear_errors(key, value, entry_field):
    manifest, files = _valid_bundle_parts()
    if key == "tarballs" and isinstance(value, (str, int)):
        field = ["name", "sha256", "file"][entry_field]
        manifest["tarballs"][0][field] = value
    else:
        manifest[key] = value
    _import(_bundle(json.dumps(manifest).encode(), files))


@FUZZ
@given(st.integers(0, 4000), st.binary(min_size=1, max_size=8), st.booleans())
def test_damaged_bundle_bytes_are_clear_errors(offset, patch, truncate):
    manifest, files = _valid_bundle_parts()
    blob = bytearray(_bundle(json.dumps(manifest).encode(), files))
    offset %= len(blob)
    if truncate:
        blob = blob[:offset]
    else:
        blob[offset : offset + len(patch)] = patch
    _import(bytes(blob))
