"""Every wheel sglforge builds carries a CycloneDX SBOM (PEP 770, wheel/sbom.py), and a bundle
carries the stack's: valid against the CycloneDX 1.6 schema, derived from the provenance and
METADATA alone (bit-identical on rebuild), and read back by `sglforge check`."""

from __future__ import annotations

import hashlib
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from sglforge.check.sbom import sbom_problems
from sglforge.check.stack import read_wheel
from sglforge.wheel import sbom
from sglforge.wheel.normalize import write_normalized
from sglforge.wheel.provenance import Provenance
from tests.fixtures import upstreams
from tests.fixtures.project import make_project
from tests.helpers import provenance_stub

SBOM_MEMBER = "purepy-1.2.3+cpu.{}.dist-info/sboms/sglforge.cdx.json"


def _valid(data: bytes) -> dict:
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode())
    assert error is None, error
    return json.loads(data)


def _by_ref(document: dict) -> dict[str, dict]:
    return {c["bom-ref"]: c for c in document["components"]}


def _props(component: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def _wheel_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def _rewrite(path: Path, members: dict[str, bytes]) -> None:
    dist_info = next(n.split("/")[0] for n in members if n.endswith(".dist-info/METADATA"))
    path.unlink()
    write_normalized(members, {}, dist_info, path, 315532800)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """purepy with a one-patch series, built by the real `sglforge build`."""
    project = make_project(tmp_path_factory.mktemp("sbom"), ("purepy",))
    patches = project.root / "patches" / "purepy"
    upstreams.make_patch(
        project.mirror / "org" / "purepy",
        "0001-greeting.patch",
        {"src/purepy/__init__.py": 'GREETING = "sbom"\n\n\ndef greet():\n    return GREETING\n'},
        "Change the greeting",
        patches,
    )
    (patches / "series").write_text("0001-greeting.patch\n")
    result = project.run("build")
    assert result.returncode == 0, result.stderr
    [entry] = project.manifest()["wheels"]
    return project, project.root / "wheels" / entry["file"], entry


def test_a_built_wheel_carries_a_schema_valid_sbom_of_its_provenance(patched):
    project, wheel, entry = patched
    members = _wheel_members(wheel)
    [name] = [n for n in members if n.endswith("/sboms/sglforge.cdx.json")]
    assert name.count("/") == 2 and name.split("/")[0].endswith(".dist-info")
    assert name in members[f"{name.split('/')[0]}/RECORD"].decode()  # RECORD lists it
    document = _valid(members[name])
    prov = entry["provenance"]
    assert document["serialNumber"] == sbom.wheel_serial(
        prov["content_key"], "purepy", entry["version"]
    )
    assert document["metadata"]["timestamp"].startswith("20")  # SOURCE_DATE_EPOCH, not now
    component = document["metadata"]["component"]
    assert (component["name"], component["version"]) == ("purepy", entry["version"])
    assert component["purl"].startswith("pkg:pypi/purepy@1.2.3")
    provenance_bytes = members[name.split("/")[0] + "/sglforge-build.json"]
    assert (
        _props(component)["sglforge:provenance-sha256"]
        == hashlib.sha256(provenance_bytes).hexdigest()
    )
    components = _by_ref(document)
    upstream = components["upstream:purepy"]
    assert upstream["version"] == project.commits["purepy"]
    assert upstream["scope"] == "excluded"  # a build input, not shipped
    [patch] = [c for c in components.values() if _props(c).get("sglforge:role") == "patch"]
    patch_file = project.root / "patches" / "purepy" / "0001-greeting.patch"
    assert patch["name"] == "patches/purepy/0001-greeting.patch"
    assert patch["hashes"] == [
        {"alg": "SHA-256", "content": hashlib.sha256(patch_file.read_bytes()).hexdigest()}
    ]
    assert upstream["pedigree"]["patches"] == [
        {"type": "unofficial", "diff": {"url": "patches/purepy/0001-greeting.patch"}}
    ]
    tools = {t["name"]: t["version"] for t in document["metadata"]["tools"]["components"]}
    assert set(tools) == {"sglforge", "cyclonedx-python-lib"} and all(tools.values())
    toolchain = {
        c["name"] for c in components.values() if _props(c).get("sglforge:role") == "toolchain"
    }
    assert {"python", "compiler", "platform"} <= toolchain
    # nothing random: every bom-ref is a name sglforge chose, not a UUID
    assert {ref.split(":")[0] for ref in components} <= {
        "upstream",
        "source",
        "patch",
        "toolchain",
        "build-requires",
        "requires",
    }


def test_the_sbom_is_bit_identical_from_another_build_root_and_cache(patched, tmp_path):
    project, wheel, entry = patched
    again = project.run(
        "build",
        "--no-wheel-cache",
        "--build-root",
        str(tmp_path / "other-root"),
        cache=tmp_path / "other-cache",
    )
    assert "purepy: building" in again.stdout
    assert again.returncode == 0, again.stderr
    rebuilt = project.root / "wheels" / entry["file"]
    name = next(n for n in _wheel_members(rebuilt) if n.endswith("sglforge.cdx.json"))
    assert _wheel_members(rebuilt)[name] == _wheel_members(wheel)[name]


def test_check_reads_the_sbom_and_fails_on_one_that_disagrees(patched, tmp_path):
    project, wheel, _entry = patched
    good = project.run("check")
    assert "sbom ok" in good.stdout, good.stdout + good.stderr
    assert "1 wheel SBOM(s) (CycloneDX 1.6) agree with their wheels" in good.stdout

    members = _wheel_members(wheel)
    name = next(n for n in members if n.endswith("sglforge.cdx.json"))
    document = json.loads(members[name])
    for component in document["components"]:
        if _props(component).get("sglforge:role") == "patch":
            component["hashes"][0]["content"] = "0" * 64
    copy = tmp_path / wheel.name
    copy.write_bytes(wheel.read_bytes())
    _rewrite(copy, {**members, name: json.dumps(document).encode()})
    [problem] = sbom_problems(read_wheel(copy))
    assert problem.startswith(f"{name}: the series (position, entry, sha256) is ")

    del members[name]
    _rewrite(copy, members)
    [problem] = sbom_problems(read_wheel(copy))
    assert problem == f"no {name} (every wheel sglforge builds carries one): rebuild it"

    # through the CLI: the error names the wheel and the part
    wheel.write_bytes(copy.read_bytes())
    try:
        bad = project.run("check")
        assert bad.returncode != 0
        assert f"ERROR  sbom       {wheel.name}: no {name}" in bad.stdout
    finally:
        project.run("build")  # the module's wheel back for the other tests


def _full_provenance() -> Provenance:
    return provenance_stub(
        upstream="sglang",
        commit="a" * 40,
        version="0.5.15+cu130.abcd1234",
        url="https://github.com/sgl-project/sglang",
        tree="b" * 40,
        wheel="sglang",
        cuda_archs=("sm_120a",),
        requires_torch="2.11.0",
        toolchain={"cuda": "13.0", "nvcc": "V13.0.88", "torch": "2.11.0+cu130", "cmake": None},
        format=2,
        content_key="c" * 64,
        source_date_epoch=1787370530,
        sources=(
            {
                "name": "sglang.cutlass",
                "url": "https://github.com/NVIDIA/cutlass",
                "commit": "d" * 40,
                "sha256": None,
                "tree": "e" * 40,
            },
            {
                "name": "sglang.fmt",
                "url": "https://example.org/fmt-11.tar.gz",
                "commit": None,
                "sha256": "f" * 64,
                "tree": "1" * 40,
            },
        ),
        patches=(
            {
                "name": "backport faf68940939a",
                "sha256": "2" * 64,
                "kind": "backport",
                "url": "https://github.com/sgl-project/sglang",
                "commit": "faf68940939a" + "0" * 28,
            },
            {
                "name": "0001-x.patch",
                "sha256": "3" * 64,
                "kind": "patch",
                "path": "patches/sglang/0001-x.patch",
            },
        ),
        build_requires={"setuptools": "80.9.0", "torch": "2.11.0+cu130"},
    )


REQUIRES = [
    "torch==2.11.0",
    "tinydep==1.0",
    'numpy>=1.26; python_version >= "3.10"',
    'pytest; extra == "test"',
]


def test_a_full_provenance_gives_a_valid_deterministic_sbom():
    prov = _full_provenance()
    first = sbom.wheel_sbom(prov, "sglang", prov.version, REQUIRES, prov.dumps())
    assert sbom.wheel_sbom(prov, "sglang", prov.version, REQUIRES, prov.dumps()) == first
    document = _valid(first)
    assert document["metadata"]["timestamp"] == "2026-08-22T03:48:50+00:00"
    components = _by_ref(document)
    backport = components["patch:1"]
    assert _props(backport)["sglforge:kind"] == "backport"
    assert _props(backport)["sglforge:digest-of"] == "normalized diff"
    assert components["upstream:sglang"]["pedigree"]["patches"][0] == {
        "type": "backport",
        "diff": {"url": "https://github.com/sgl-project/sglang/commit/faf68940939a" + "0" * 28},
    }
    assert components["upstream:sglang"]["purl"] == f"pkg:github/sgl-project/sglang@{'a' * 40}"
    assert (
        components["source:sglang.cutlass"]["purl"] == f"pkg:github/nvidia/cutlass@{'d' * 40}"
    )  # purl: github names lowercased
    fmt = components["source:sglang.fmt"]
    assert fmt["hashes"] == [{"alg": "SHA-256", "content": "f" * 64}]
    assert "checksum=sha256:" + "f" * 64 in fmt["purl"]
    assert components["requires:torch"]["version"] == "2.11.0"
    assert components["requires:pytest"]["scope"] == "optional"
    assert (
        components["requires:numpy"]["scope"] == "required"
        and "version" not in (components["requires:numpy"])
    )
    assert components["toolchain:torch"]["purl"] == "pkg:pypi/torch@2.11.0%2Bcu130"
    assert "toolchain:cmake" not in components  # not recorded: not listed
    depends = {d["ref"]: d.get("dependsOn", []) for d in document["dependencies"]}
    assert depends["wheel:sglang"] == sorted(
        [
            "upstream:sglang",
            "requires:numpy",
            "requires:pytest",
            "requires:tinydep",
            "requires:torch",
        ]
    )
    assert depends["upstream:sglang"] == ["source:sglang.cutlass", "source:sglang.fmt"]
    # another content key: another serial; a changed requirement: other bytes
    other = Provenance.from_json({**prov.to_json(), "content_key": "9" * 64}, "w")
    assert (
        json.loads(sbom.wheel_sbom(other, "sglang", prov.version, REQUIRES, other.dumps()))[
            "serialNumber"
        ]
        != document["serialNumber"]
    )
    assert sbom.wheel_sbom(prov, "sglang", prov.version, REQUIRES[:1], prov.dumps()) != first


def test_a_bad_requirement_in_metadata_is_an_error_naming_it():
    from sglforge.base.errors import SglforgeError

    prov = _full_provenance()
    with pytest.raises(SglforgeError, match=r"METADATA Requires-Dist 'torch ===== 2'"):
        sbom.wheel_sbom(prov, "sglang", prov.version, ["torch ===== 2"], prov.dumps())


def test_a_wheel_built_before_sboms_is_a_hint_not_an_error(tmp_path):
    from sglforge.check.findings import Findings
    from sglforge.check.sbom import check_sboms
    from sglforge.check.stack import Stack
    from tests.smoke.conftest import make_wheel

    prov = provenance_stub(version="1.0", format=1)
    wheel = make_wheel(tmp_path, "old", "1.0", prov)
    findings = Findings()
    check_sboms(Stack((read_wheel(wheel),), (), tmp_path, tmp_path / "none"), findings)
    assert not findings.errors
    [hint] = findings.of("hint")
    assert "built before sglforge wrote SBOMs (provenance format 1)" in hint.message


def test_the_bundle_carries_a_stack_sbom_linking_each_wheel_sbom(patched, tmp_path):
    project, wheel, _entry = patched
    result = project.run("bundle", "--out", str(tmp_path / "dist"))
    assert result.returncode == 0, result.stdout + result.stderr
    [archive] = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar if m.isfile()}
    document = _valid(files["sbom.cdx.json"])
    assert "sbom.cdx.json" in files["SHA256SUMS"].decode()
    [ours] = [c for c in document["components"] if _props(c)["sglforge:role"] == "sglforge-wheel"]
    carried = files[f"wheels/{wheel.name}"]
    assert ours["hashes"] == [{"alg": "SHA-256", "content": hashlib.sha256(carried).hexdigest()}]
    inner = json.loads(
        next(v for n, v in _wheel_members(wheel).items() if n.endswith("sglforge.cdx.json"))
    )
    assert ours["externalReferences"] == [
        {"type": "bom", "url": sbom.bom_link(inner["serialNumber"])}
    ]
    assert _props(ours)["sglforge:commit"] == project.commits["purepy"]
    stack = document["metadata"]["component"]
    assert archive.name.startswith(f"{stack['name']}-{stack['version']}")
    assert (
        _props(stack)["sglforge:requirements-sha256"]
        == hashlib.sha256(files["requirements.lock"]).hexdigest()
    )


def test_an_sbom_another_tool_wrote_stays_and_ours_references_it():
    """auditwheel >= 6.5 writes sboms/auditwheel.cdx.json for grafted libraries: post-
    processing keeps it, and the wheel's component in ours has a `bom` reference to it."""
    from sglforge.wheel.normalize import WheelInfo, write_sbom

    prov = _full_provenance()
    dist_info = f"sglang-{prov.version}.dist-info"
    theirs = b'{"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1}\n'
    members = {
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: sglang\nVersion: {prov.version}\n"
            "Requires-Dist: torch==2.11.0\n"
        ).encode(),
        f"{dist_info}/{sbom.SBOM_DIR}/auditwheel.cdx.json": theirs,
    }
    prov.write(members, dist_info)
    write_sbom(members, WheelInfo("sglang", prov.version, dist_info), prov)
    assert members[f"{dist_info}/{sbom.SBOM_DIR}/auditwheel.cdx.json"] == theirs
    document = _valid(members[sbom.member(dist_info)])
    assert document["metadata"]["component"]["externalReferences"] == [
        {"type": "bom", "url": "sboms/auditwheel.cdx.json"}
    ]
    assert [c["name"] for c in document["components"] if c["bom-ref"].startswith("requires:")] == [
        "torch"
    ]


@pytest.mark.parametrize(
    "data", [b"\x00not json", b"[]", b"[" * 100000 + b"]" * 100000], ids=["bytes", "array", "deep"]
)
def test_a_hostile_sbom_in_a_bundled_wheel_is_a_clear_error(tmp_path, data):
    """The bundle reads each wheel's SBOM serial: garbage, a non-object and JSON nested too
    deep for the parser are one error naming the wheel and the member, never a traceback."""
    from sglforge.base.errors import SglforgeError
    from sglforge.wheel.bundle import wheel_sbom_serial

    dist_info = "x-1.dist-info"
    wheel = tmp_path / "x-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{dist_info}/METADATA", "Name: x\nVersion: 1\n")
        archive.writestr(sbom.member(dist_info), data)
    with pytest.raises(
        SglforgeError, match=rf"x-1-py3-none-any.whl: {sbom.member(dist_info)} is not"
    ):
        wheel_sbom_serial(wheel)
