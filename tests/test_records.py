"""The records of the real builds can be checked by anyone (issue 32 item 2).

`bench/realcheck.json` (format 2) records each real wheel built twice, from two checkouts of
the same commit at two different host build roots, with the exact command of each build;
`lockfiles/wheels.lock` is the lock those builds published (committed, so that
`nox -s verify -- --from-lock` runs on a fresh clone) and `bench/realcheck-manifest.json` is
their `wheels/manifest.json`. These tests read committed files only (CI has no network and no
fetched code): the three must agree, read the way the product reads them (verify's
`expected_from_lock`, the manifest loader), each reproduced row must really have two
distinct places, and nothing host-specific may be in what the wheels carry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.buildroot import SANDBOX_PATH
from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import canonical_name
from sglforge.builder.key import BUILD_FORMAT
from sglforge.builder.verify import expected_from_lock
from sglforge.inputs.project import Project
from sglforge.inputs.recipes import recipe_names
from sglforge.wheel.outputs import load_manifest

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "bench" / "realcheck.json"
MANIFEST = REPO / "bench" / "realcheck-manifest.json"
LOCK = REPO / "lockfiles" / "wheels.lock"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def record() -> dict:
    return json.loads(RECORD.read_text())


def rows() -> list[dict]:
    return record()["recipes"]


def fresh_clone(tmp_path: Path) -> Project:
    """What a fresh clone has of the project for verify --from-lock: the committed lockfiles,
    recipes and patches, and no wheels/ (that directory is not committed)."""
    root = tmp_path / "clone"
    for part in ("lockfiles", "recipes", "patches"):
        shutil.copytree(REPO / part, root / part)
    assert not (root / "wheels").exists()
    return Project(root)


def test_record_format_and_code():
    data = record()
    assert data["format"] == 2
    assert data["build_format"] == BUILD_FORMAT, (
        "bench/realcheck.json was recorded with another BUILD_FORMAT: its wheels no longer "
        "come out of this code; rebuild them and re-record (and lockfiles/wheels.lock)"
    )
    assert re.fullmatch(r"[0-9a-f]{40}", data["code_commit"])
    assert HEX64.match(data["toolchain_lock_sha256"])
    assert data["workarounds"], "every local workaround of the builds is listed"
    assert data["recipes"], "no rows"


def test_lock_rows_and_manifest_agree(tmp_path):
    """lockfiles/wheels.lock's own pins, read by verify --from-lock on a fresh clone (no
    wheels/), are exactly the reproduced rows: same recipes, versions and sha256."""
    expected = expected_from_lock(fresh_clone(tmp_path))
    recorded = {row["recipe"]: row for row in rows()}
    assert set(expected) == set(recorded)
    manifest = {e["recipe"]: e for e in load_manifest(MANIFEST)}
    assert set(manifest) == set(recorded)
    for recipe, row in recorded.items():
        entry = manifest[recipe]
        assert expected[recipe]["sha256"] == row["sha256"] == entry["sha256"], recipe
        assert expected[recipe]["version"] == entry["version"], recipe
        assert row["wheel"] == entry["file"], recipe
        assert expected[recipe]["name"] == canonical_name(entry["name"]), recipe
        assert entry["provenance"]["content_key"] == row["content_key"], recipe


def test_lock_with_the_manifest_attaches_provenance(tmp_path):
    """With the committed manifest as wheels/manifest.json (a checkout that has the wheels),
    verify maps every lock pin to its manifest entry and takes its provenance: the manifest
    and the lock describe the same files."""
    project = fresh_clone(tmp_path)
    (project.root / "wheels").mkdir()
    shutil.copy(MANIFEST, project.root / "wheels" / "manifest.json")
    expected = expected_from_lock(project)
    for recipe, ref in expected.items():
        assert ref["provenance"] is not None, f"{recipe}: lock and manifest sha256 differ"
        assert ref["provenance"]["wheel"] == recipe


def test_a_lock_that_differs_from_the_record_is_caught(tmp_path):
    """The agreement check above can fail: one changed hash in the lock is seen."""
    project = fresh_clone(tmp_path)
    text = project.wheels_lock.read_text()
    first = rows()[0]["sha256"]
    project.wheels_lock.write_text(text.replace(first, "0" * 64))
    expected = expected_from_lock(project)
    assert {r["sha256"] for r in expected.values()} != {row["sha256"] for row in rows()}


def test_fresh_clone_without_the_lock_is_a_clear_error(tmp_path):
    project = fresh_clone(tmp_path)
    project.wheels_lock.unlink()
    with pytest.raises(SglforgeError, match="not found; --from-lock needs"):
        expected_from_lock(project)


def test_verify_from_lock_on_a_fresh_clone_reads_the_committed_lock(tmp_path):
    """The CLI route: `sglforge verify --from-lock NAME` on a fresh clone takes its expected
    set from the committed lock; a recipe the lock does not pin is refused (exit 2) before
    the build root is touched."""
    project = fresh_clone(tmp_path)
    root = tmp_path / "build-root"
    unpinned = sorted(set(recipe_names(project.recipes_dir)) - {r["recipe"] for r in rows()})
    assert unpinned, "every recipe is in the record: pick another check"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLFORGE_")}
    env["PYTHONPATH"] = str(REPO / "src")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglforge",
            "verify",
            "--from-lock",
            unpinned[0],
            "--build-root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        cwd=project.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"not in {project.wheels_lock}: {unpinned[0]}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not root.exists()


@pytest.mark.parametrize("row", rows(), ids=lambda r: r["recipe"])
def test_row_reproduced_at_two_places(row):
    """Each row: two builds, from two checkouts at two host build roots, each with its exact
    command, both giving the row's sha256, size and content key."""
    builds = row["builds"]
    assert row["reproduced"] is True
    assert len(builds) >= 2
    assert len({b["build_root"] for b in builds}) == len(builds), "build roots must differ"
    assert len({b["checkout"] for b in builds}) == len(builds), "checkouts must differ"
    for b in builds:
        assert b["sha256"] == row["sha256"] and HEX64.match(b["sha256"])
        assert b["size"] == row["size"] > 0
        assert b["content_key"] == row["content_key"] and HEX64.match(b["content_key"])
        assert b["built_s"] > 0
        assert b["build_root"].startswith("/") and b["build_root"] != SANDBOX_PATH
        assert f"--build-root {b['build_root']}" in b["command"]
        assert b["command"].startswith(f"cd {b['checkout']} && ")
        assert f" {row['recipe']} " in f" {b['command']} "


def test_manifest_is_host_independent():
    """The provenance records the sandbox's fixed build root, and no host build root or
    checkout path of the record's builds is in the manifest or the lock."""
    text = MANIFEST.read_text()
    for entry in load_manifest(MANIFEST):
        assert entry["provenance"]["build_root"] == str(SANDBOX_PATH), entry["recipe"]
    places = {b[k] for row in rows() for b in row["builds"] for k in ("build_root", "checkout")}
    assert places
    for place in places:
        assert place not in text, f"{place} is in bench/realcheck-manifest.json"
        assert place not in LOCK.read_text(), f"{place} is in lockfiles/wheels.lock"


def test_old_rows_say_why_they_are_not_reproducible():
    """The format-1 rows are kept, each recipe of them with the reason it cannot be checked
    (rebuilt above, or not rebuilt and why)."""
    old = record()["format_1_rows"]
    assert "build root" in old["why"]
    recipes = {row["recipe"] for row in old["rows"]}
    assert recipes and recipes <= set(old["per_recipe"])
    for recipe in {row["recipe"] for row in rows()} & recipes:
        assert old["per_recipe"][recipe].startswith("rebuilt in format 2"), recipe
    previous = record()["build_format_2_rows"]
    assert "SBOM" in previous["why"] and previous["rows"]
    assert {r["sha256"] for r in previous["rows"]}.isdisjoint({r["sha256"] for r in rows()})


@pytest.mark.parametrize("row", rows(), ids=lambda r: r["recipe"])
def test_row_sbom_was_validated_and_reproduced(row):
    """Each wheel of record carries an SBOM (wheel/sbom.py) that passed the CycloneDX 1.6
    schema and came out byte for byte the same from both builds; the manifest's provenance
    is of the SBOM era (format 2), and check's sbom part found no error on the set."""
    sbom = row["sbom"]
    assert sbom["schema_valid"] is True and sbom["schema_error"] is None
    assert sbom["identical_in_both_builds"] is True
    assert HEX64.match(sbom["sha256"]) and sbom["size"] > 0
    assert sbom["member"].endswith(".dist-info/sboms/sglforge.cdx.json")
    assert re.fullmatch(r"urn:uuid:[0-9a-f-]{36}", sbom["serial"])
    assert sbom["components_by_role"]["upstream"] == 1
    [entry] = [e for e in load_manifest(MANIFEST) if e["recipe"] == row["recipe"]]
    assert entry["provenance"]["format"] >= 2
    assert sbom["member"].startswith(entry["file"].split("-")[0])
    assert record()["sbom_check"]["check_sbom_errors"] == 0


def test_sglforge_lock_digest_is_the_committed_one():
    """The SBOM inside every wheel names the cyclonedx-python-lib that wrote it (pinned in
    lockfiles/sglforge.lock): another version gives other bytes, so the committed wheels.lock
    would no longer verify."""
    digest = hashlib.sha256((REPO / "lockfiles" / "sglforge.lock").read_bytes()).hexdigest()
    assert record()["sglforge_lock_sha256"] == digest, (
        "lockfiles/sglforge.lock changed since bench/realcheck.json was recorded: bump "
        "BUILD_FORMAT if the wheels change, rebuild the wheels of record and re-record"
    )


def test_toolchain_digest_is_the_committed_toolchain_lock():
    """The wheels of the record come from lockfiles/toolchain.lock as committed; a changed
    toolchain gives other bytes, so the committed wheels.lock would no longer verify."""
    digest = hashlib.sha256((REPO / "lockfiles" / "toolchain.lock").read_bytes()).hexdigest()
    assert record()["toolchain_lock_sha256"] == digest, (
        "lockfiles/toolchain.lock changed since bench/realcheck.json was recorded: rebuild "
        "the wheels of record and commit the new lockfiles/wheels.lock with the record"
    )
