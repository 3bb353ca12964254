"""builder/devtree.py (sync, park/adopt/recover) and the toolchain `--version` cache: no nvcc."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sglforge.base.buildroot import BuildRoot
from sglforge.builder.devtree import DevWorkspace, sync_tree
from sglforge.inputs.toolchain import VersionCache, _first_line

OLD = 1_000_000_000_000_000_000  # ns: an mtime far in the past, to see what was rewritten


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def age(tree: Path) -> None:
    for dirpath, _, files in os.walk(tree):
        for name in files:
            os.utime(os.path.join(dirpath, name), ns=(OLD, OLD), follow_symlinks=False)


def test_sync_writes_only_what_differs(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    for tree in (src, dest):
        write(tree / "same.cu", "unchanged\n")
        write(tree / "dir/keep.h", "header\n")
        write(tree / "run.sh", "#!/bin/sh\n")
    write(src / "changed.cu", "new body\n")
    write(dest / "changed.cu", "old body\n")  # same length as the new body
    write(src / "added.cu", "added\n")
    write(dest / "gone.cu", "removed by the series\n")
    write(dest / "gonedir/x.h", "x\n")
    write(src / "dir2/was_file", "now a dir entry\n")
    write(dest / "dir2", "a file where src has a directory\n")
    (src / "run.sh").chmod(0o755)  # mode-only change
    os.symlink("same.cu", src / "link")
    os.symlink("changed.cu", dest / "link")  # retargeted
    age(dest)

    stats = sync_tree(src, dest)

    assert sorted(stats.written) == ["added.cu", "changed.cu", "dir2/was_file", "link"]
    assert sorted(stats.removed) == ["gone.cu", "gonedir"]  # dir2: replaced, not removed
    assert stats.mode_changed == ["run.sh"]
    assert (dest / "changed.cu").read_text() == "new body\n"
    assert os.readlink(dest / "link") == "same.cu"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    for kept in ("same.cu", "dir/keep.h", "run.sh"):  # ninja sees them as up to date
        assert (dest / kept).stat().st_mtime_ns == OLD, kept
    assert not (dest / "gone.cu").exists() and not (dest / "gonedir").exists()
    assert not list(dest.rglob(".sglforge-sync-*"))
    again = sync_tree(src, dest)
    assert again.written == [] and again.removed == [] and again.mode_changed == []


def test_sync_keeps_what_the_build_created_and_removes_what_the_series_dropped(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    write(src / "setup.py", "setup()\n")
    write(src / "added_by_patch.c", "int x;\n")
    first = sync_tree(src, dest, previous=None)
    write(dest / "build/temp.linux-x86_64/ext.o", "object\n")  # setuptools' in-tree build_temp
    write(dest / "pkg.egg-info/PKG-INFO", "Name: pkg\n")
    (src / "added_by_patch.c").unlink()  # the patch that added it was dropped from the series
    second = sync_tree(src, dest, previous=set(first.tracked))
    assert second.removed == ["added_by_patch.c"]
    assert (dest / "build/temp.linux-x86_64/ext.o").is_file()
    assert (dest / "pkg.egg-info/PKG-INFO").is_file()
    assert second.tracked == ["setup.py"]


def workspace(root: BuildRoot, config: str = "c1") -> DevWorkspace:
    return DevWorkspace(root, "ext", "upstream", ["ext.dep"], config)


def test_workspace_parks_adopts_and_recovers(tmp_path):
    root = BuildRoot(tmp_path / "root")
    ws = workspace(root)
    with ws.live():
        assert ws.fresh
        write(root.src("upstream") / "a.cu", "a\n")
        write(root.work("ext") / "build" / "build.ninja", "rules\n")
        ws.mark_synced()
    # parked under dev/ext; the live paths are free for release builds
    assert not root.src("upstream").exists()
    assert (root.dev("ext") / "tree" / "a.cu").is_file()
    write(root.src("upstream") / "release.txt", "a release build's export\n")

    ws = workspace(root)
    ws.checkout()  # back at the live paths, the release leftovers replaced
    assert not ws.fresh
    assert (root.src("upstream") / "a.cu").is_file()
    assert not (root.src("upstream") / "release.txt").exists()
    assert (root.work("ext") / "build" / "build.ninja").is_file()
    assert not (root.dev("ext") / "state.json").exists()  # until the sync completes
    ws.mark_synced()
    # killed before parking (no finally ran): the next dev build adopts the live tree
    ws = workspace(root)
    ws.checkout()
    assert not ws.fresh and (root.src("upstream") / "a.cu").is_file()
    # interrupted during the sync (no state.json): start afresh
    ws.park()
    ws = workspace(root)
    ws.checkout()
    ws.park()
    ws = workspace(root)
    ws.checkout()
    assert ws.fresh and not (root.src("upstream") / "a.cu").exists()
    ws.mark_synced()
    ws.park()
    # another recipe or toolchain (config): afresh too
    ws = workspace(root, "c2")
    ws.checkout()
    assert ws.fresh and not list(root.work("ext").joinpath("build").iterdir())


def fake_tool(bin_dir: Path, version: str) -> Path:
    counter = bin_dir.parent / "runs"
    return write(
        bin_dir / "c++", f"#!/bin/sh\necho run >> {counter}\necho 'c++ {version}'\n", 0o755
    )


def runs(tmp_path: Path) -> int:
    counter = tmp_path / "runs"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_version_cache_runs_a_tool_again_only_when_it_changes(tmp_path):
    bin_dir = tmp_path / "bin"
    tool = fake_tool(bin_dir, "1.0")
    cache_file = tmp_path / "cache" / "toolchain-versions.json"
    path = str(bin_dir)

    def first_line(search_path: str = path) -> str | None:
        cache = VersionCache(cache_file)  # a new build: loaded from the file
        line = _first_line(["c++", "--version"], search_path, cache)
        cache.save()
        return line

    assert first_line() == "c++ 1.0" and runs(tmp_path) == 1
    assert first_line() == "c++ 1.0" and runs(tmp_path) == 1  # no subprocess
    os.utime(tool, ns=(OLD, OLD))  # touched
    assert first_line() == "c++ 1.0" and runs(tmp_path) == 2
    assert first_line() == "c++ 1.0" and runs(tmp_path) == 2
    tool.unlink()
    fake_tool(bin_dir, "2.0")  # replaced (new inode, size)
    os.utime(bin_dir / "c++", ns=(OLD, OLD))  # even with the old mtime
    assert first_line() == "c++ 2.0" and runs(tmp_path) == 3
    other = tmp_path / "other"
    other.mkdir()
    assert first_line(f"{other}:{path}") == "c++ 2.0" and runs(tmp_path) == 4  # PATH differs
    # a symlink retargeted to another build of the tool
    real = fake_tool(tmp_path / "opt", "3.0")
    (bin_dir / "c++").unlink()
    os.symlink(real, bin_dir / "c++")
    assert first_line() == "c++ 3.0" and runs(tmp_path) == 5
    assert first_line() == "c++ 3.0" and runs(tmp_path) == 5
    cache_file.write_text("{damaged")  # a damaged cache file is a miss, not an error
    assert first_line() == "c++ 3.0" and runs(tmp_path) == 6
