"""Fetch, verify, export and bundle against real git repositories standing in for upstreams."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.cli.main import main
from sglforge.inputs.pins import parse_lockfile
from sglforge.sources.cache import SourceCache
from sglforge.sources.export import export_source
from sglforge.sources.fetch import GitWant, fetch_commit, fetch_sources
from tests.fixtures.gitrepos import run_git


def lock_of(world):
    return parse_lockfile(world.project / "lockfiles" / "upstreams.toml")


def test_fetch_verifies_and_exports_pinned_commit_with_submodule(world, upstreams):
    lock = lock_of(world)
    report = fetch_sources(lock, [], world.settings(), offline=False)
    assert sorted(x.split()[0] for x in report.fetched) == ["alpha", "alpha.beta", "alpha.gamma"]
    tree = export_source(lock, "alpha", world.build_root / "src" / "alpha", world.settings())
    # The export is at the pin, not at the branch head that moved on.
    assert run_git(tree.path, "rev-parse", "HEAD") == upstreams.pinned
    assert (tree.path / "src/alpha/__init__.py").read_text() == "VALUE = 1\n"
    assert (tree.path / "third_party/beta/beta.h").read_text() == "#define BETA 2\n"
    assert run_git(tree.path, "status", "--porcelain") == ""
    gamma = export_source(lock, "alpha.gamma", world.build_root / "src" / "gamma", world.settings())
    assert (gamma.path / "gamma.h").read_text() == "int g;\n"  # top directory stripped
    again = fetch_sources(lock, [], world.settings(), offline=False)
    assert again.fetched == [] and len(again.cached) == 3


def test_submodule_pin_wins_over_upstream_gitlink(world, upstreams):
    text = (world.project / "lockfiles/upstreams.toml").read_text()
    world.write_lockfile(text.replace(upstreams.beta_v2, upstreams.beta_v1))
    lock = lock_of(world)
    report = fetch_sources(lock, ["alpha"], world.settings(), offline=False)
    assert any("alpha.beta: pinned " + upstreams.beta_v1 in w for w in report.warnings)
    tree = export_source(lock, "alpha", world.root / "out", world.settings())
    assert (tree.path / "third_party/beta/beta.h").read_text() == "#define BETA 1\n"


def test_unpinned_submodule_is_an_error_with_the_entry_to_add(world, upstreams):
    text = (world.project / "lockfiles/upstreams.toml").read_text()
    alpha_only = text.split('[[source]]\nname = "alpha.beta"')[0]
    world.write_lockfile(alpha_only)
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), ["alpha"], world.settings(), offline=False)
    message = str(err.value)
    assert "third_party/beta" in message and f'commit = "{upstreams.beta_v2}"' in message


def test_missing_commit_fails_closed_naming_expected_and_got(world, upstreams):
    bogus = "0123456789abcdef0123456789abcdef01234567"
    text = (world.project / "lockfiles/upstreams.toml").read_text()
    world.write_lockfile(text.replace(upstreams.pinned, bogus))
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock_of(world), ["alpha"], world.settings(), offline=False)
    message = str(err.value)
    assert f"expected commit {bogus}" in message
    assert f"'main' is now at {upstreams.moved}" in message
    assert "mirror" in message  # says where it actually looked


def test_tree_mismatch_fails_closed(world, upstreams):
    text = (world.project / "lockfiles/upstreams.toml").read_text()
    wrong_tree = "f" * 40
    world.write_lockfile(text.replace('ref = "main"', f'ref = "main"\ntree = "{wrong_tree}"'))
    with pytest.raises(SglforgeError, match=f"expected tree {wrong_tree} .* got [0-9a-f]{{40}}"):
        fetch_sources(lock_of(world), ["alpha"], world.settings(), offline=False)


def test_tarball_digest_mismatch_caches_nothing(world, upstreams):
    text = (world.project / "lockfiles/upstreams.toml").read_text()
    world.write_lockfile(text.replace(upstreams.gamma_sha, "0" * 64))
    with pytest.raises(
        SglforgeError, match=f"expected sha256 {'0' * 64}, got {upstreams.gamma_sha}"
    ):
        fetch_sources(lock_of(world), ["alpha"], world.settings(), offline=False)
    assert not any((world.cache / "tarballs").iterdir())


def test_offline_lists_exactly_what_is_missing(world, upstreams):
    lock = lock_of(world)
    cache = SourceCache(world.cache)
    with cache.locked():
        fetch_commit(
            cache,
            GitWant(world.url("org/beta"), upstreams.beta_v2, "alpha.beta"),
            world.settings(),
            False,
        )
    with pytest.raises(SglforgeError) as err:
        fetch_sources(lock, [], world.settings(), offline=True)
    message = str(err.value)
    assert "2 source(s) missing" in message
    assert f"alpha: commit {upstreams.pinned}" in message
    assert "alpha.gamma: sha256" in message
    assert "alpha.beta" not in message


def test_bundle_round_trip_to_a_fresh_cache_without_the_mirror(world, upstreams, capsys):
    bundle = world.root / "sources.tar"
    assert main(world.cli_args() + ["fetch", "--no-export", "--bundle", str(bundle)]) == 0
    shutil.rmtree(world.mirror)  # the air-gapped host cannot reach upstream
    fresh = world.root / "other-cache"
    args = [
        "--project",
        str(world.project),
        "--cache-dir",
        str(fresh),
        "--build-root",
        str(world.root / "other-build"),
    ]
    assert main(args + ["fetch", "--from-bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "imported" in out and "exported  alpha" in out
    exported = world.root / "other-build/src/alpha"
    assert run_git(exported, "rev-parse", "HEAD") == upstreams.pinned
    assert (exported / "third_party/beta/beta.h").read_text() == "#define BETA 2\n"
    assert (world.root / "other-build/src/alpha.gamma/gamma.h").exists()


def _shallow_world(world, upstreams):
    """alpha's pin plus a backport whose parent is a later commit (`moved`), bundled with
    --depth 1 and the mirror removed; returns (bundle, fix, digest)."""
    from sglforge.patching.backport import digest_of

    alpha = upstreams.alpha
    run_git(alpha.path, "checkout", "--quiet", "-B", "fix-branch", upstreams.moved)
    core = (alpha.path / "src/alpha/core.py").read_text().replace("return 7\n", "return 77\n")
    fix = alpha.commit("Upstream: fix f7", {"src/alpha/core.py": core})
    run_git(alpha.path, "checkout", "--quiet", "main")
    url = world.url("org/alpha")
    cache = SourceCache(world.cache)
    with cache.locked():
        fetch_commit(cache, GitWant(url, fix, "t"), world.settings(), False)
    digest = digest_of(cache.git_dir(url), fix)
    world.write_series("alpha", [f"backport {url} {fix} sha256={digest}"])
    bundle = world.root / "shallow.tar"
    assert (
        main(world.cli_args() + ["fetch", "--no-export", "--bundle", str(bundle), "--depth", "1"])
        == 0
    )
    shutil.rmtree(world.mirror)
    return bundle, fix, digest


def _other_host(world, name: str) -> list[str]:
    return [
        "--project",
        str(world.project),
        "--cache-dir",
        str(world.root / f"{name}-cache"),
        "--build-root",
        str(world.root / f"{name}-build"),
    ]


def test_shallow_bundle_carries_pins_and_backport_parents_only(world, upstreams, capsys):
    from sglforge.patching.backport import digest_of

    initial = run_git(upstreams.alpha.path, "rev-list", "--max-parents=0", "main")
    bundle, fix, digest = _shallow_world(world, upstreams)
    assert "shallow (2 boundary commit(s))" in capsys.readouterr().out  # pinned, moved
    assert main(_other_host(world, "gpu") + ["fetch", "--from-bundle", str(bundle)]) == 0
    git_dir = SourceCache(world.root / "gpu-cache").git_dir(world.url("org/alpha"))
    assert sorted((git_dir / "shallow").read_text().split()) == sorted(
        [upstreams.pinned, upstreams.moved]
    )
    assert (
        subprocess.run(
            ["git", "--git-dir", str(git_dir), "cat-file", "-e", initial],
            check=False,
            capture_output=True,
        ).returncode
        != 0
    )  # history left behind
    exported = world.root / "gpu-build/src/alpha"
    assert run_git(exported, "rev-parse", "HEAD") == upstreams.pinned
    assert run_git(exported, "rev-list", "--count", "HEAD") == "1"
    assert (exported / "third_party/beta/beta.h").read_text() == "#define BETA 2\n"
    assert digest_of(git_dir, fix) == digest  # the backport's parent tree came along
    out = capsys.readouterr().out
    assert main(_other_host(world, "gpu") + ["patches", "check", "alpha"]) == 0, out
    # the shallow cache can be bundled again (its boundary travels) and imported
    again = world.root / "again.tar"
    assert main(_other_host(world, "gpu") + ["fetch", "--no-export", "--bundle", str(again)]) == 0
    assert main(_other_host(world, "third") + ["fetch", "--from-bundle", str(again)]) == 0
    assert run_git(world.root / "third-build/src/alpha", "rev-parse", "HEAD") == upstreams.pinned


def test_a_shallow_claim_the_bundle_cannot_back_leaves_the_cache_as_it_was(
    world, upstreams, capsys
):
    import io
    import json
    import tarfile

    bundle, _, _ = _shallow_world(world, upstreams)
    hostile = world.root / "hostile.tar"
    with tarfile.open(bundle) as source, tarfile.open(hostile, "w") as out:
        for member in source:
            data = source.extractfile(member).read()
            if member.name == "manifest.json":
                manifest = json.loads(data)
                manifest["git"][0]["shallow"].append("b" * 40)
                data = json.dumps(manifest).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    assert main(_other_host(world, "gpu") + ["fetch", "--from-bundle", str(hostile)]) == 2
    assert f"expected commit {'b' * 40}" in capsys.readouterr().err
    git_dir = SourceCache(world.root / "gpu-cache").git_dir(world.url("org/alpha"))
    assert not (git_dir / "shallow").exists()


def test_depth_needs_a_bundle_and_a_sane_number(world, upstreams, capsys):
    assert main(world.cli_args() + ["fetch", "--depth", "1"]) == 2
    assert "give --bundle" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(world.cli_args() + ["fetch", "--bundle", "x.tar", "--depth", "0"])
    assert "from 1 to 1000" in capsys.readouterr().err


def test_corrupt_bundle_is_a_clear_error(world, upstreams, capsys):
    bad = world.root / "bad.tar"
    bad.write_bytes(b"not a tar file")
    assert main(world.cli_args() + ["fetch", "--from-bundle", str(bad)]) == 2
    assert "not a sglforge bundle" in capsys.readouterr().err


def test_export_replaces_only_on_success(world, upstreams):
    lock = lock_of(world)
    fetch_sources(lock, [], world.settings(), offline=False)
    dest = world.build_root / "src" / "alpha"
    export_source(lock, "alpha", dest, world.settings())
    (dest / "local-edit").write_text("x")
    shutil.rmtree(world.cache / "tarballs")  # make the next export of gamma fail
    with pytest.raises(SglforgeError):
        export_source(
            lock, "alpha.gamma", world.build_root / "src" / "alpha.gamma", world.settings()
        )
    assert not (world.build_root / "src" / "alpha.gamma").exists()
    assert not [p for p in (world.build_root / "src").iterdir() if p.name.startswith(".")]
    export_source(lock, "alpha", dest, world.settings())
    assert not (dest / "local-edit").exists()  # a fresh, clean export


def test_cli_fetch_then_plan_offline(world, upstreams, capsys):
    assert main(world.cli_args() + ["fetch"]) == 0
    out = capsys.readouterr().out
    assert "fetched   alpha" in out and "exported  alpha ->" in out
    assert main(world.cli_args() + ["fetch", "--offline", "--no-export"]) == 0
    assert "cached    alpha" in capsys.readouterr().out
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(world.project), "plan"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert upstreams.pinned in proc.stdout and "third_party/beta" in proc.stdout


def test_nested_submodules_are_fetched_and_placed_recursively(world):
    from tests.fixtures.gitrepos import source_entry

    leaf = world.repo("org/leaf")
    leaf_commit = leaf.commit("leaf", {"leaf.txt": "leaf\n"})
    mid = world.repo("org/mid")
    mid.commit("mid", {"mid.txt": "mid\n"})
    mid.add_submodule(leaf, "deps/leaf", leaf_commit)
    mid_commit = mid.commit("add leaf")
    top = world.repo("org/top")
    top.commit("top", {"top.txt": "top\n"})
    top.add_submodule(mid, "third_party/mid", mid_commit)
    top_commit = top.commit("add mid")
    world.write_lockfile(
        source_entry("top", world.url("org/top"), top_commit)
        + source_entry(
            "top.mid", world.url("org/mid"), mid_commit, parent="top", path="third_party/mid"
        )
        + source_entry(
            "top.mid.leaf", world.url("org/leaf"), leaf_commit, parent="top.mid", path="deps/leaf"
        )
    )
    lock = lock_of(world)
    fetch_sources(lock, ["top"], world.settings(), offline=False)
    tree = export_source(lock, "top", world.root / "top", world.settings())
    assert (tree.path / "third_party/mid/deps/leaf/leaf.txt").read_text() == "leaf\n"
    assert "third_party/mid/deps/leaf @ " + leaf_commit[:12] in tree.placed


def test_plan_lists_series_entries_with_digests(world, upstreams, capsys):
    from tests.fixtures.gitrepos import local_patch

    patch = local_patch(
        upstreams.alpha, upstreams.pinned, "Fix", {"src/alpha/__init__.py": "VALUE = 3\n"}
    )
    world.write_series("alpha", ["0001-fix.patch"], {"0001-fix.patch": patch})
    import hashlib

    assert main(["--project", str(world.project), "--build-root", "/opt/fixed", "plan"]) == 0
    out = capsys.readouterr().out
    assert f"0001-fix.patch  sha256:{hashlib.sha256(patch).hexdigest()[:12]}" in out
    assert "alpha: 1 entry, patchset " in out
    assert "export to /opt/fixed/src/alpha" in out and "apply 1 patch(es)" in out


def test_a_cached_archive_is_checked_again_at_export(world, upstreams):
    lock = lock_of(world)
    fetch_sources(lock, [], world.settings(), offline=False)
    cached = world.cache / "tarballs" / upstreams.gamma_sha
    cached.write_bytes(cached.read_bytes() + b"x")  # damaged after the fetch verified it
    dest = world.build_root / "src" / "alpha.gamma"
    with pytest.raises(
        SglforgeError,
        match=f"alpha.gamma: cached archive is corrupt: expected "
        f"sha256 {upstreams.gamma_sha}, got [0-9a-f]{{64}}",
    ):
        export_source(lock, "alpha.gamma", dest, world.settings())
    cached.unlink()
    with pytest.raises(SglforgeError, match="not in the cache; run `nox -s fetch` first"):
        export_source(lock, "alpha.gamma", dest, world.settings())
    assert not dest.exists()
