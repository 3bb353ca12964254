"""Issue 31 item 3 beyond the meson wraps (tests/test_meson_wraps.py): every copy sglforge
makes from or into an upstream tree refuses a link that leads out of the tree, and keeps the
links that stay inside as links. base/fs.copy_tree_inside itself; submodules placed through
a link (sources/export.py); a substitute whose directory gains a link out after its check
(sources/substitute.py); `patches check --against DIR` snapshots (sources/export.py); the dev
tree synced through a planted link (builder/devtree.py). No build runs here."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from sglforge.base.buildroot import BuildRoot
from sglforge.base.errors import SglforgeError
from sglforge.base.fs import copy_tree_inside, path_inside
from sglforge.builder.devtree import DevWorkspace, sync_tree
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.settings import Substitute
from sglforge.sources import substitute as substitute_module
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import _place_submodules, snapshot_directory
from tests.fixtures import upstreams


def _tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("a = 1\n")
    (root / "pkg" / "sub" / "b.py").write_text("b = 2\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o4755)  # setuid: not carried over
    return root


def _outside(base: Path) -> Path:
    outside = base / "outside"
    outside.mkdir()
    fd = os.open(outside / "secret", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"secret\n")
    os.close(fd)
    return outside


def test_copy_keeps_inside_links_as_links_and_files_with_their_modes(tmp_path):
    src = _tree(tmp_path / "src")
    os.symlink("pkg/a.py", src / "alias.py")
    os.symlink("../a.py", src / "pkg" / "sub" / "up.py")
    os.symlink("pkg", src / "pkgdir")
    os.symlink("pkgdir/sub/b.py", src / "chain.py")  # through an inside link
    os.symlink("nowhere", src / "dangling")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    copy_tree_inside(src, tmp_path / "dest", "pin", ignore=(".git",))
    dest = tmp_path / "dest"
    assert {
        p: os.readlink(dest / p)
        for p in ("alias.py", "pkg/sub/up.py", "pkgdir", "chain.py", "dangling")
    } == {
        "alias.py": "pkg/a.py",
        "pkg/sub/up.py": "../a.py",
        "pkgdir": "pkg",
        "chain.py": "pkgdir/sub/b.py",
        "dangling": "nowhere",
    }
    assert (dest / "pkg" / "sub" / "b.py").read_text() == "b = 2\n"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert not (dest / ".git").exists()


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ({"leak": "/etc"}, "pin: leak is a symlink to '/etc' (absolute or empty)"),
        (
            {"pkg/up": "../../outside"},
            ("pin: pkg/up is a symlink to '../../outside', which climbs above the tree root"),
        ),
        (
            {"pkg/sub/far": "../../../outside/secret"},
            ("pin: pkg/sub/far is a symlink to '../../../outside/secret', which climbs"),
        ),
        (
            {"a": "pkg/b", "pkg/b": "/etc/passwd"},
            "pin: a is a symlink to 'pkg/b', which goes through the symlink pkg/b -> /etc/passwd",
        ),
        ({"x": "y", "y": "x"}, "which goes through the symlink"),
    ],
)
def test_copy_refuses_every_link_leading_out(tmp_path, links, message):
    src = _tree(tmp_path / "src")
    _outside(tmp_path)
    for name, target in links.items():
        os.symlink(target, src / name)
    with pytest.raises(SglforgeError) as caught:
        copy_tree_inside(src, tmp_path / "dest", "pin")
    assert message in str(caught.value)
    assert "sglforge copies no link out of a tree" in str(caught.value)
    assert not (tmp_path / "dest" / "secret").exists()


def test_copy_refuses_a_top_level_link_and_special_files(tmp_path):
    outside = _outside(tmp_path)
    os.symlink(outside, tmp_path / "link")
    with pytest.raises(SglforgeError, match="is a symlink .* never through a link"):
        copy_tree_inside(tmp_path / "link", tmp_path / "dest", "pin")
    assert not (tmp_path / "dest").exists()
    src = _tree(tmp_path / "src")
    os.mkfifo(src / "pkg" / "fifo")
    with pytest.raises(SglforgeError, match="pin: pkg/fifo is not a regular file"):
        copy_tree_inside(src, tmp_path / "dest2", "pin")


def test_path_inside_follows_inside_links_and_refuses_a_way_out(tmp_path):
    root = _tree(tmp_path / "root")
    _outside(tmp_path)
    os.symlink("pkg/sub", root / "subdir")
    assert path_inside(root, "subdir/b.py", "pin") == root / "pkg" / "sub" / "b.py"
    os.symlink("../outside", root / "out")
    with pytest.raises(SglforgeError) as caught:
        path_inside(root, "out/secret", "pin")
    assert (
        "pin: out/secret goes through the symlink out -> ../outside, which then climbs "
        "above the tree root" in str(caught.value)
    )


# -- submodules: never written through a link of the parent's tree --------------------------


def _submodule_case(tmp_path: Path, path: str) -> tuple[object, SourceCache]:
    repo = tmp_path / "subrepo"
    commit = upstreams.make_repo(
        repo, {"post-applypatch": "#!/bin/sh\necho hooked\n", "lib.c": "int x;\n"}
    )
    cache = SourceCache(tmp_path / "cache")
    url = "https://example.invalid/org/sub"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(repo), str(cache.git_dir(url))], check=True
    )
    lockfile = tmp_path / "upstreams.toml"
    lockfile.write_text(
        f'[[source]]\nname = "up"\nurl = "https://example.invalid/org/up"\n'
        f'commit = "{"1" * 40}"\n\n'
        f'[[source]]\nname = "up.sub"\nparent = "up"\npath = "{path}"\nurl = "{url}"\n'
        f'commit = "{commit}"\n'
    )
    return parse_lockfile(lockfile), cache


def test_submodule_is_not_placed_through_a_link_out_of_the_tree(tmp_path):
    lock, cache = _submodule_case(tmp_path, "third_party/sub")
    outside = tmp_path / "outside"
    outside.mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    os.symlink(outside, tree / "third_party")
    with pytest.raises(SglforgeError) as caught:
        _place_submodules(lock, cache, lock.get("up"), tree)
    assert (
        "up.sub: cannot place submodule at third_party/sub: third_party is a symlink "
        f"(to '{outside}') in 'up'" in str(caught.value)
    )
    assert list(outside.iterdir()) == []


def test_submodule_is_not_placed_among_gits_own_files(tmp_path):
    lock, cache = _submodule_case(tmp_path, ".git/hooks")
    tree = tmp_path / "tree"
    (tree / ".git" / "hooks").mkdir(parents=True)  # empty: no sample hooks installed
    with pytest.raises(
        SglforgeError, match="cannot place submodule at .git/hooks: inside '.git' of 'up'"
    ):
        _place_submodules(lock, cache, lock.get("up"), tree)
    assert list((tree / ".git" / "hooks").iterdir()) == []


# -- a substitute: checked again while it is copied -------------------------------------------


def test_substitute_link_out_made_after_the_check_is_refused_by_the_copy(tmp_path, monkeypatch):
    directory = _tree(tmp_path / "sub")
    os.symlink("pkg/a.py", directory / "alias.py")
    linked = tmp_path / "configured"
    os.symlink(directory, linked)  # the configured path may itself be a link
    sub = Substitute(name="up.dep", path=linked, reason="test", origin="config: c.toml")
    substitute_module.place_substitute(sub, tmp_path / "placed")
    assert os.readlink(tmp_path / "placed" / "alias.py") == "pkg/a.py"

    outside = _outside(tmp_path)
    checked = substitute_module._check_directory

    def check_then_swap(sub: Substitute) -> None:  # the directory changes after its check
        checked(sub)
        os.symlink(outside, directory / "late")

    monkeypatch.setattr(substitute_module, "_check_directory", check_then_swap)
    with pytest.raises(SglforgeError) as caught:
        substitute_module.place_substitute(sub, tmp_path / "placed2")
    assert f"late is a symlink to '{outside}'" in str(caught.value)
    assert not (tmp_path / "placed2").exists()


# -- `patches check --against DIR` ------------------------------------------------------------


def test_snapshot_refuses_a_link_out_of_the_directory(tmp_path):
    source = _tree(tmp_path / "python")
    _outside(tmp_path)
    os.symlink("pkg/a.py", source / "alias.py")
    done = snapshot_directory(source, tmp_path / "snap", "python")
    assert os.readlink(done / "python" / "alias.py") == "pkg/a.py"
    os.symlink("../../outside/secret", source / "pkg" / "leak")
    with pytest.raises(SglforgeError, match="pkg/leak is a symlink to '../../outside/secret'"):
        snapshot_directory(source, tmp_path / "snap2", "python")


# -- the dev tree: never synced through a link the build planted --------------------------------


def test_sync_refuses_a_destination_that_is_a_link(tmp_path):
    src = _tree(tmp_path / "src")
    outside = _outside(tmp_path)
    os.symlink(outside, tmp_path / "live")
    with pytest.raises(SglforgeError, match="is a symlink .* never through a link"):
        sync_tree(src, tmp_path / "live")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_a_parked_slot_replaced_by_a_link_is_not_adopted(tmp_path):
    root = BuildRoot(tmp_path / "root")
    ws = DevWorkspace(root, "ext", "upstream", [], "c1")
    with ws.live():
        (root.src("upstream") / "a.cu").write_text("a\n")
        ws.mark_synced()
    outside = _outside(tmp_path)
    parked = root.dev("ext") / "tree"
    upstreams_tree = tmp_path / "moved"
    parked.rename(upstreams_tree)
    os.symlink(outside, parked)  # planted where the parked tree was
    ws = DevWorkspace(root, "ext", "upstream", [], "c1")
    ws.checkout()
    assert ws.fresh  # started afresh: the link was not taken for the tree
    live = root.src("upstream")
    assert not live.is_symlink() and list(live.iterdir()) == []
    sync_tree(_tree(tmp_path / "src"), live)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
