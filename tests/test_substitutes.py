"""Substitutes (sources/substitute.py): a local directory built in place of a FetchContent pin
that cannot be fetched here, named only by the user config. The real fcdemo CMake build
compiles the substitute; the pin is not fetched; the wheel's label, key and provenance say so;
the archive tree records are not poisoned; and the wheel cannot leave the host (publish,
bundle, promote refuse it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge.qualification.receipt import KIND, SCHEMA, wheel_set
from tests.fixtures import upstreams
from tests.fixtures.gitrepos import Repo, run_git
from tests.fixtures.project import make_project

SUBSTITUTE_MESSAGE = "hello from the local substitute"


def _substitute_dir(base: Path, message: str = SUBSTITUTE_MESSAGE) -> Path:
    sub = base / "greetdep-local"
    for name, text in upstreams.GREETDEP.items():
        path = sub / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("hello from greetdep", message))
    return sub


def _configure(project, sub: Path, reason: str = "the archive is not reachable here") -> None:
    project.config.write_text(
        f'[substitutes."fcdemo.greetdep"]\npath = "{sub}"\nreason = "{reason}"\n'
    )


def _tree_by_hand(files: Path, scratch: Path) -> str:
    repo = Repo(scratch)
    repo.commit(
        "by hand",
        {str(p.relative_to(files)): p.read_text() for p in sorted(files.rglob("*")) if p.is_file()},
    )
    return run_git(repo.path, "rev-parse", "HEAD^{tree}")


def _library_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith("libfcdemo.so")]
        return archive.read(name)


def test_substitute_is_compiled_labelled_recorded_and_never_fetched(tmp_path: Path) -> None:
    project = make_project(tmp_path, ("fcdemo",))
    pinned = project.run("build")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    [pinned_entry] = project.manifest()["wheels"]
    sha = pinned_entry["provenance"]["sources"][0]["sha256"]
    real_tree = pinned_entry["provenance"]["sources"][0]["tree"]

    # the pinned archive becomes unreachable and is not in a fresh cache either
    (project.mirror / "dl" / "greetdep-1.0.tar.gz").unlink()
    fresh = tmp_path / "fresh-cache"
    unreachable = project.run("fetch", cache=fresh)
    assert unreachable.returncode != 0
    sub = _substitute_dir(tmp_path)
    _configure(project, sub)

    bundle = tmp_path / "sources.tar"
    fetched = project.run("fetch", "--no-export", "--bundle", str(bundle), cache=fresh)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert "SUBSTITUTED fcdemo.greetdep" in fetched.stdout and "NOT fetched" in fetched.stdout
    # the bundle carries the pinned sources only, and says what it left out
    assert f"fcdemo.greetdep: NOT bundled, SUBSTITUTED by {sub} here" in fetched.stdout
    import tarfile

    with tarfile.open(bundle) as archive:
        assert not [n for n in archive.getnames() if n.startswith("tarballs/")]
    plan = project.run("plan", cache=fresh)
    assert f"SUBSTITUTED by {sub}" in plan.stdout, plan.stdout

    built = project.run("build", cache=fresh)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "fcdemo.greetdep is SUBSTITUTED" in built.stdout
    [entry] = project.manifest()["wheels"]
    wheel = project.root / "wheels" / entry["file"]
    # what was compiled is the substitute's content, not the pin's
    assert SUBSTITUTE_MESSAGE.encode() in _library_bytes(wheel)
    assert b"hello from greetdep" not in _library_bytes(wheel)
    # never the pinned wheel's name, nor its key
    assert entry["version"] != pinned_entry["version"]
    assert re.search(r"[+.]sub[0-9a-f]{8}$", entry["version"]), entry["version"]
    assert entry["file"] != pinned_entry["file"]
    assert entry["provenance"]["content_key"] != pinned_entry["provenance"]["content_key"]
    expected_tree = _tree_by_hand(sub, tmp_path / "by-hand")
    [record] = entry["provenance"]["substitutes"]
    assert record == {
        "name": "fcdemo.greetdep",
        "pinned": f"sha256:{sha}",
        "url": f"{upstreams.MIRROR_PREFIX}dl/greetdep-1.0.tar.gz",
        "tree": expected_tree,
        "path": str(sub),
        "reason": "the archive is not reachable here",
    }
    assert entry["provenance"]["sources"][0]["tree"] == expected_tree
    # verify --trees re-derives the substitute's tree (and, like the build, records nothing)
    trees = project.run("verify", "--trees", cache=fresh)
    assert trees.returncode == 0, trees.stdout + trees.stderr
    # the archive's tree record (sha256 -> tree) never learns the substitute's tree
    record_file = fresh / "trees" / f"archive-{sha}"
    assert not record_file.exists() or record_file.read_text().strip() == real_tree
    # a substitute directory that is not the one the wheel was built from is named as such
    edited = next(p for p in sorted(sub.rglob("*")) if p.is_file())
    original = edited.read_bytes()
    edited.write_bytes(original + b"\n")
    differs = project.run("verify", "--trees", cache=fresh)
    edited.write_bytes(original)
    assert differs.returncode != 0
    assert (
        f"substituted input fcdemo.greetdep: the wheel was built from a [substitutes] "
        f"directory with tree {expected_tree} ({sub}); the one here has tree "
    ) in differs.stdout + differs.stderr, differs.stdout + differs.stderr
    assert "changed under an unchanged patchset" not in differs.stdout + differs.stderr

    # another directory content is another wheel
    _configure(project, _substitute_dir(tmp_path / "v2", "another message"))
    again = project.run("build", cache=fresh)
    assert again.returncode == 0, again.stdout + again.stderr
    [changed] = project.manifest()["wheels"]
    assert (
        changed["version"] != entry["version"]
        and changed["provenance"]["content_key"] != entry["provenance"]["content_key"]
    )


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.fixture
def substituted_stack(tmp_path: Path) -> Path:
    """A stack whose sglang wheel's provenance says an input was substituted."""
    from tests import test_publish

    original = test_publish.provenance

    def stamped(name, version, archs):
        stamp = original(name, version, archs)
        if name != "sglang":
            return stamp
        import dataclasses

        return dataclasses.replace(
            stamp,
            substitutes=(
                {
                    "name": "sglang.dep",
                    "pinned": "sha256:" + "0" * 64,
                    "url": "https://x.invalid/d",
                    "tree": "1" * 40,
                    "path": "/srv/subst/dep",
                    "reason": "unreachable",
                },
            ),
        )

    test_publish.provenance = stamped
    try:
        return test_publish._stack(tmp_path)
    finally:
        test_publish.provenance = original


def test_publish_and_bundle_refuse_a_substituted_wheel(
    substituted_stack: Path, tmp_path: Path
) -> None:
    root = substituted_stack
    published = _cli(
        root, "publish", str(tmp_path / "index"), "--wheelhouse", str(root / "wheelhouse")
    )
    assert published.returncode == 2, published.stdout + published.stderr
    assert "built with substituted inputs (sglang.dep" in published.stderr
    assert "Traceback" not in published.stderr
    assert not (tmp_path / "index" / "files").exists() or not any(
        (tmp_path / "index" / "files").iterdir()
    )
    bundled = _cli(
        root, "bundle", "--wheelhouse", str(root / "wheelhouse"), "--out", str(tmp_path / "bundle")
    )
    assert bundled.returncode == 2, bundled.stdout + bundled.stderr
    assert "bundle: refused" in bundled.stderr and "sglang.dep" in bundled.stderr


def test_promote_refuses_a_substituted_wheel_even_if_the_receipt_hides_it(
    substituted_stack: Path, tmp_path: Path
) -> None:
    from sglforge.wheel import index
    from sglforge.wheel.bundle import cached_sha256

    root = substituted_stack
    (root / "channels.toml").write_text('[candidate]\n\n[stable]\nfrom = "candidate"\n')
    dest = tmp_path / "index"
    # planted straight into the candidate index (publish would have refused it)
    files, _ = [], None
    for path in sorted((root / "wheels").glob("*.whl")) + sorted(
        (root / "wheelhouse").glob("*.whl")
    ):
        files.append(index.describe_wheel(path, cached_sha256(path)))
    index.write_index(index.LocalTarget(dest / "candidate"), files)
    ws = wheel_set(root / "lockfiles" / "wheels.lock", (root / "wheels", root / "wheelhouse"))
    receipt = tmp_path / "receipt.json"
    checks = [{"name": "equivalence", "passed": True, "enforced": True}]
    base = {
        "kind": KIND,
        "schema": SCHEMA,
        "result": "pass",
        "failure": None,
        "gates_passed": True,
        "wheel_set": ws,
        "checks": checks,
        "limitations": [],
    }
    receipt.write_text(json.dumps(base))  # says nothing of the substitution
    hidden = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert hidden.returncode == 2, hidden.stdout + hidden.stderr
    assert "substituted inputs" in hidden.stderr and "sglang" in hidden.stderr
    assert not (dest / "stable" / "files").exists()
    receipt.write_text(json.dumps({**base, "substituted": {"sglang": ["sglang.dep"]}}))
    said = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert said.returncode == 2
    assert (
        "the qualified stack holds wheels built with substituted inputs (sglang: "
        "sglang.dep)" in said.stderr
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[substitutes."fcdemo.greetdep"]\npath = "relative/dir"\nreason = "r"\n',
            "key 'path' (line 2): 'relative/dir' must be an absolute path",
        ),
        ('[substitutes."fcdemo.greetdep"]\npath = "/srv/x"\n', "missing required key 'reason'"),
        (
            '[substitutes."fcdemo.greetdep"]\npath = "/srv/x"\nreason = "  "\n',
            "must say why the pinned source cannot be used",
        ),
        (
            '[substitutes."fcdemo.greetdep"]\npath = "/srv/x"\nreason = "r"\npaht = "/y"\n',
            "key 'paht' (line 4): unknown key",
        ),
        ('[substitutes]\n"fcdemo.greetdep" = "/srv/x"\n', "must be a table with path and reason"),
        (
            '[substitutes."fcdemo"]\npath = "/srv/x"\nreason = "r"\n',
            "'fcdemo' is not a FetchContent input in",
        ),
        (
            '[substitutes."fcdemo.nosuch"]\npath = "/srv/x"\nreason = "r"\n',
            "(FetchContent inputs: fcdemo.greetdep)",
        ),
    ],
)
def test_bad_substitute_config_is_a_clear_error(tmp_path: Path, table: str, message: str) -> None:
    project = make_project(tmp_path, ("fcdemo",))
    project.config.write_text(table)
    result = project.run("fetch", "--no-export")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_substitute_with_a_link_out_of_it_is_refused(tmp_path: Path) -> None:
    project = make_project(tmp_path, ("fcdemo",))
    sub = _substitute_dir(tmp_path)
    (sub / "include" / "passwd.h").symlink_to("/etc/passwd")
    _configure(project, sub)
    result = project.run("build")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{sub}/include/passwd.h links outside {sub}" in result.stderr
    assert not (project.root / "wheels" / "manifest.json").exists()


def test_a_smoke_receipt_names_substituted_wheels(tmp_path: Path) -> None:
    """The receipt side: a stack whose wheel says it was built with substitutes is named in
    the limitations and in `substituted`, which promotion refuses (judge_receipt)."""
    import dataclasses
    from types import SimpleNamespace

    from sglforge.qualification.qualify import substituted_wheels
    from sglforge.wheel.channels import Channel, judge_receipt
    from tests.smoke.conftest import provenance

    stamped = dataclasses.replace(
        provenance("sglang-kernel", "0.4.4+x", ["sm_90a"]),
        substitutes=({"name": "sglang-kernel.repo-triton"},),
    )
    env = SimpleNamespace(
        packages=[
            SimpleNamespace(name="sglang-kernel", provenance=stamped),
            SimpleNamespace(name="sglang", provenance=provenance("sglang", "0.5.15", [])),
            SimpleNamespace(name="torch", provenance=None),
        ]
    )
    assert substituted_wheels(env) == {"sglang-kernel": ["sglang-kernel.repo-triton"]}
    assert substituted_wheels(None) == {}
    receipt = SimpleNamespace(
        data={"result": "pass", "checks": [], "substituted": substituted_wheels(env)},
        check=lambda name: None,
    )
    problems = judge_receipt(receipt, Channel(name="stable", promote_from="candidate"))
    assert problems == [
        (
            "the qualified stack holds wheels built with substituted inputs "
            "(sglang-kernel: sglang-kernel.repo-triton): local use only"
        )
    ]


def test_exported_inputs_are_readable_by_the_build_user(tmp_path: Path) -> None:
    """Exports were mkdtemp's 0700: on a host where the build runs as the unprivileged build
    user (the H200 host), CMake then saw 'source directory is missing' for every
    FetchContent input. Both a pinned archive and a substitute export as 0755."""
    project = make_project(tmp_path, ("fcdemo",))
    pinned = project.run("fetch")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    exported = project.build_root / "src" / "fcdemo.greetdep"
    assert exported.stat().st_mode & 0o777 == 0o755
    sub = _substitute_dir(tmp_path)
    sub.chmod(0o700)
    _configure(project, sub)
    substituted = project.run("fetch")
    assert substituted.returncode == 0, substituted.stdout + substituted.stderr
    assert exported.stat().st_mode & 0o777 == 0o755
    assert (exported / "include" / "greetdep.h").read_text().count(SUBSTITUTE_MESSAGE) == 1
