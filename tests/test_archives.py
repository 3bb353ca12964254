"""Hostile archives (issue 21 item 2): pinned source tarballs and source bundles are checked
member by member by sglforge itself, with or without tarfile's `data` filter.

Each hostile tarball is pinned by its real sha256 and goes through the real `fetch` + export
(git, the file:// download, the cache); "filter absent" removes `tarfile.data_filter` the way
a Python build without it (Debian 12's 3.11.2) lacks it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.cli.main import main
from sglforge.inputs.pins import parse_lockfile
from sglforge.sources.bundle import import_bundle
from sglforge.sources.export import export_source
from sglforge.sources.fetch import fetch_sources

TOP = "evil-1.0"


def tar_bytes(members: list[tuple], compression: str = "gz") -> bytes:
    """members: (kind, name[, data or link target]); kinds file/dir/sym/hard/chr/fifo."""
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode=f"w:{compression}" if compression else "w", format=tarfile.PAX_FORMAT
    ) as archive:
        for kind, name, *rest in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = 1_700_000_000, 0o644
            data = None
            if kind == "file":
                data = rest[0] if rest else b"x\n"
                info.size = len(data)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, rest[0]
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, rest[0]
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


@pytest.fixture(params=["filter present", "filter absent"])
def data_filter(request, monkeypatch):
    if request.param == "filter absent":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return request.param


def pin_tarball(world, blob: bytes) -> str:
    path = world.mirror / "org/evil/archive/v1.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    digest = hashlib.sha256(blob).hexdigest()
    world.write_lockfile(
        f'[[source]]\nname = "evil"\nurl = "{world.url("org/evil/archive/v1.tar.gz")}"\n'
        f'sha256 = "{digest}"\n'
    )
    return digest


def export_evil(world):
    lock = parse_lockfile(world.project / "lockfiles" / "upstreams.toml")
    fetch_sources(lock, [], world.settings(), offline=False)
    return export_source(lock, "evil", world.build_root / "src" / "evil", world.settings())


def outside_entries(world) -> list[str]:
    """What the archive managed to create next to the build root (it must create nothing)."""
    return sorted(p.name for p in world.root.iterdir() if p.name.startswith("pwned"))


HOSTILE = {
    # name: (members, words the error must contain)
    "absolute name": ([("dir", TOP), ("file", "/tmp/pwned-abs")], ["'/tmp/pwned-abs'"]),
    "dotdot name": ([("dir", TOP), ("file", f"{TOP}/../../../pwned-dotdot")], ["'..'"]),
    "link to the parent": (
        [("dir", TOP), ("sym", f"{TOP}/up", ".."), ("file", f"{TOP}/up/pwned-up")],
        ["symlink", "'..'"],
    ),
    "chain of links": (
        [
            ("dir", TOP),
            ("dir", f"{TOP}/x"),
            ("sym", f"{TOP}/x/l1", ".."),
            ("sym", f"{TOP}/l2", "x/l1/.."),
            ("file", f"{TOP}/l2/pwned-chain"),
        ],
        ["x/l1/.."],
    ),
    "later link redirects an earlier one": (
        [
            ("dir", TOP),
            ("dir", f"{TOP}/sub"),
            ("sym", f"{TOP}/p", "sub/x/../.."),
            ("sym", f"{TOP}/sub/x", "."),
        ],
        ["'p'", "once the whole archive is extracted"],
    ),
    "absolute link": ([("dir", TOP), ("sym", f"{TOP}/etc", "/etc")], ["'/etc'"]),
    "link loop": (
        [("dir", TOP), ("sym", f"{TOP}/a", "b"), ("sym", f"{TOP}/b", "a"), ("file", f"{TOP}/a/x")],
        ["/a/x'", "loops (too many levels"],
    ),
    "character device": ([("dir", TOP), ("chr", f"{TOP}/null")], ["character device"]),
    "fifo": ([("dir", TOP), ("fifo", f"{TOP}/pipe")], ["fifo"]),
    "hard link outside": (
        [("dir", TOP), ("hard", f"{TOP}/passwd", f"{TOP}/../../../../../../etc/passwd")],
        ["hard link", "not an earlier regular file"],
    ),
    "hard link to a later member": (
        [("dir", TOP), ("hard", f"{TOP}/a", f"{TOP}/b"), ("file", f"{TOP}/b")],
        ["not an earlier regular file"],
    ),
    "duplicate file": (
        [("dir", TOP), ("file", f"{TOP}/a", b"one\n"), ("file", f"{TOP}/a", b"two\n")],
        ["duplicate"],
    ),
    "file over a link": (
        [
            ("dir", TOP),
            ("file", f"{TOP}/t"),
            ("sym", f"{TOP}/a", "t"),
            ("file", f"{TOP}/a", b"two\n"),
        ],
        ["duplicate"],
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_source_tarball_is_refused_naming_archive_and_member(world, data_filter, case):
    members, words = HOSTILE[case]
    pin_tarball(world, tar_bytes(members))
    with pytest.raises(SglforgeError) as caught:
        export_evil(world)
    message = str(caught.value)
    assert message.startswith("evil: archive "), message  # names the pin and the archive
    for word in words:
        assert word in message, message
    assert not isinstance(caught.value, tarfile.TarError)
    assert not (world.build_root / "src" / "evil").exists()  # nothing half-written
    assert outside_entries(world) == []
    assert not Path("/tmp/pwned-abs").exists()


def test_links_inside_the_tree_and_writes_through_them_extract(world, data_filter):
    members = [
        ("dir", TOP),
        ("dir", f"{TOP}/include"),
        ("sym", f"{TOP}/inc", "include"),
        ("file", f"{TOP}/inc/a.h", b"int a;\n"),  # written through the link
        ("sym", f"{TOP}/include/self", "../include/a.h"),
        ("hard", f"{TOP}/include/b.h", f"{TOP}/include/a.h"),
        ("file", f"{TOP}/run.sh", b"#!/bin/sh\n"),
    ]
    pin_tarball(world, tar_bytes(members))
    tree = export_evil(world).path
    assert (tree / "include/a.h").read_bytes() == b"int a;\n"
    assert os.readlink(tree / "inc") == "include" and (tree / "inc").is_symlink()
    assert (tree / "include/self").read_bytes() == b"int a;\n"
    assert os.stat(tree / "include/b.h").st_ino == os.stat(tree / "include/a.h").st_ino
    assert not (tree / "inc").resolve().relative_to(tree.resolve()).is_absolute()


def _sized_member_tar(name: str, size: int) -> bytes:
    """A plain tar whose header declares `size` bytes (data truncated): only the header is
    needed to know it is over the cap."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.PAX_FORMAT) + b"\0" * 1024


def test_total_size_cap_refuses_on_the_headers_before_writing(world, data_filter):
    pin_tarball(world, _sized_member_tar("huge.bin", 9 << 30))
    with pytest.raises(SglforgeError) as caught:
        export_evil(world)
    assert "more than 8589934592 bytes" in str(caught.value)
    assert "'huge.bin'" in str(caught.value)


def test_member_count_and_size_caps(tmp_path):
    from sglforge.sources.archive import ArchiveLimits, extract_tar

    many = tar_bytes([("file", f"f{i}") for i in range(30)], compression="")
    (tmp_path / "many.tar").write_bytes(many)
    with pytest.raises(SglforgeError, match="more than 20 members"):
        extract_tar(
            tmp_path / "many.tar",
            tmp_path / "out1",
            "many.tar",
            ArchiveLimits(max_members=20, max_bytes=1 << 20),
        )
    assert not (tmp_path / "out1").exists()
    (tmp_path / "big.tar").write_bytes(tar_bytes([("file", "a", b"z" * 5000)], "gz"))
    with pytest.raises(SglforgeError, match="more than 4096 bytes"):
        extract_tar(
            tmp_path / "big.tar",
            tmp_path / "out2",
            "big.tar",
            ArchiveLimits(max_members=20, max_bytes=4096),
        )


def test_not_a_tarball_is_a_clear_error(world):
    pin_tarball(world, b"\x1f\x8b" + b"not really gzip" * 10)
    with pytest.raises(SglforgeError, match="not a readable tar archive"):
        export_evil(world)


# ---------------------------------------------------------------------------------------------
# source bundles (`fetch --from-bundle`)


def bundle_bytes(
    manifest: object, members: list[tuple] = (), *, first: list[tuple] = (), compression: str = ""
) -> bytes:
    raw = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return tar_bytes([*first, ("file", "manifest.json", raw), *members], compression)


def write_bundle_file(tmp_path: Path, blob: bytes) -> Path:
    path = tmp_path / "in.tar"
    path.write_bytes(blob)
    return path


def test_bundle_manifest_cannot_name_a_local_file_for_the_cache(world, tmp_path):
    passwd = Path("/etc/passwd").read_bytes()
    digest = hashlib.sha256(passwd).hexdigest()
    manifest = {
        "format": 1,
        "git": [],
        "tarballs": [{"name": "x", "sha256": digest, "file": "/etc/passwd"}],
    }
    bundle = write_bundle_file(tmp_path, bundle_bytes(manifest))
    with pytest.raises(SglforgeError) as caught:
        import_bundle(bundle, world.settings())
    assert "tarballs[0].file '/etc/passwd'" in str(caught.value)
    assert not (world.cache / "tarballs" / digest).exists()


@pytest.mark.parametrize(
    "case",
    [
        "member not in manifest",
        "manifest not first",
        "symlink member",
        "dotdot member",
        "compressed",
        "duplicate member",
        "missing member",
        "bad url",
    ],
)
def test_hostile_bundle_is_refused_before_the_cache_changes(world, tmp_path, case):
    blob_data = b"archive bytes\n"
    digest = hashlib.sha256(blob_data).hexdigest()
    manifest = {
        "format": 1,
        "git": [],
        "tarballs": [{"name": "x", "sha256": digest, "file": f"tarballs/{digest}"}],
    }
    good = [("file", f"tarballs/{digest}", blob_data)]
    blob = {
        "member not in manifest": lambda: bundle_bytes(manifest, [*good, ("file", "extra")]),
        "manifest not first": lambda: bundle_bytes(
            manifest, good, first=[("file", "big", b"\0" * 100_000)]
        ),
        "symlink member": lambda: bundle_bytes(
            manifest, [("sym", f"tarballs/{digest}", "/etc/passwd")]
        ),
        "dotdot member": lambda: bundle_bytes(manifest, [*good, ("file", "../../pwned")]),
        "compressed": lambda: bundle_bytes(manifest, good, compression="gz"),
        "duplicate member": lambda: bundle_bytes(manifest, good + good),
        "missing member": lambda: bundle_bytes(manifest, []),
        "bad url": lambda: bundle_bytes(
            {
                "format": 1,
                "tarballs": [],
                "git": [
                    {
                        "url": "ext::sh -c touch% /tmp/pwned",
                        "commits": ["a" * 40],
                        "file": "git/000.bundle",
                    }
                ],
            }
        ),
    }[case]()
    bundle = write_bundle_file(tmp_path, blob)
    with pytest.raises(SglforgeError) as caught:
        import_bundle(bundle, world.settings())
    assert str(bundle) in str(caught.value)
    assert not (world.cache / "tarballs").exists() or not any((world.cache / "tarballs").iterdir())
    assert not (world.cache / "git").exists()
    assert not (tmp_path.parent / "pwned").exists()


@pytest.mark.parametrize(
    "manifest",
    [
        b"",
        b"\xff\xfe",
        b"[" * 100_000,
        b"[]",
        b'{"format": 1}',
        b'{"format": true, "git": []}',
        b'{"format": 1, "git": {}, "tarballs": []}',
        b'{"format": 1, "git": [1], "tarballs": []}',
        b'{"format": 1, "git": [{"url": 1, "commits": "x", "file": null}], "tarballs": []}',
        b'{"format": 1, "git": [], "tarballs": [{"name": [], "sha256": 5, "file": 1}]}',
        b'{"format": 2, "git": [{"url": "https://x.org/a", "commits": ["' + b"a" * 40 + b'"], '
        b'"file": "git/000.bundle", "shallow": ["-x"]}], "tarballs": []}',
        b'{"format": 3, "git": [], "tarballs": []}',
    ],
)
def test_malformed_manifest_is_a_clear_error(world, tmp_path, capsys, manifest):
    bundle = write_bundle_file(tmp_path, bundle_bytes(manifest))
    pin_tarball(world, tar_bytes([("dir", TOP)]))  # a project for the CLI to find
    assert main(world.cli_args() + ["fetch", "--from-bundle", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert f"{bundle}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"not a tar file",
        b"\x1f\x8b\x08\x00junk",
        tar_bytes([("file", "manifest.json", b"{}")])[:700],
    ],
)
def test_non_tar_or_truncated_bundle_is_a_clear_error(world, tmp_path, capsys, blob):
    bundle = write_bundle_file(tmp_path, blob)
    pin_tarball(world, tar_bytes([("dir", TOP)]))
    assert main(world.cli_args() + ["fetch", "--from-bundle", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert str(bundle) in err and "Traceback" not in err


def test_fetch_bundle_removes_the_temporary_a_killed_run_left(world, upstreams):
    from tests.test_bundle import killed_writer_temp

    bundle = world.root / "out" / "sources.tar"
    bundle.parent.mkdir()
    left = killed_writer_temp(bundle)
    assert main(world.cli_args() + ["fetch", "--no-export", "--bundle", str(bundle)]) == 0
    assert not left.exists()
    assert [p.name for p in bundle.parent.iterdir()] == ["sources.tar"]


# ---------------------------------------------------------------------------------------------
# zip: dependency wheels unpacked for a dependent build (they may come from a remote cache)


def _zip(path: Path, members: list[tuple[str, bytes, int]]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            archive.writestr(info, data)
    return path


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([("../../pwned", b"x", 0o100644)], "'..'"),
        ([("/abs", b"x", 0o100644)], "absolute"),
        ([("pkg/link", b"/etc/passwd", 0o120777)], "not a regular file"),
        ([("pkg/a.py", b"1", 0o100644), ("pkg/a.py", b"2", 0o100644)], "duplicate"),
        ([("pkg\\..\\..\\x", b"1", 0o100644)], "backslash"),
    ],
)
@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_hostile_zip_members_are_refused(tmp_path, members, words):
    from sglforge.sources.archive import extract_zip

    wheel = _zip(tmp_path / "dep-1.0-py3-none-any.whl", members)
    (tmp_path / "site").mkdir()
    with pytest.raises(SglforgeError, match=words) as caught:
        extract_zip(wheel, tmp_path / "site", "dependency wheel dep-1.0-py3-none-any.whl")
    assert "dependency wheel dep-1.0" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dep-1.0-py3-none-any.whl", "site"]


def test_zip_caps_and_a_plain_wheel(tmp_path):
    from sglforge.sources.archive import ArchiveLimits, extract_zip

    wheel = _zip(
        tmp_path / "w.whl",
        [
            ("pkg/__init__.py", b"X = 1\n", 0o100644),
            ("pkg/tool", b"#!/bin/sh\n", 0o100755),
            ("pkg/zeros", b"\0" * 100_000, 0o100644),
        ],
    )
    with pytest.raises(SglforgeError, match="more than 50000"):
        extract_zip(wheel, tmp_path / "a", "w.whl", ArchiveLimits(10, 50_000))
    with pytest.raises(SglforgeError, match="more than 2 members"):
        extract_zip(wheel, tmp_path / "a", "w.whl", ArchiveLimits(2, 1 << 20))
    extract_zip(wheel, tmp_path / "site", "w.whl")
    assert (tmp_path / "site/pkg/__init__.py").read_text() == "X = 1\n"
    assert os.access(tmp_path / "site/pkg/tool", os.X_OK)
