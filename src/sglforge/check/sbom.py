"""Does each wheel's SBOM say what the wheel is (`check`'s sbom part)?

A wheel sglforge built (provenance format 2 and later) carries
`<dist-info>/sboms/sglforge.cdx.json` (wheel/sbom.py). The SBOM is what a serving host's
scanner reads, so it must agree with the facts beside it: its serial number is the one the
wheel's content key gives, its component is the wheel's name and version, it names the
provenance file by sha256, and its upstream, pinned sources, series (position, entry,
digest) and runtime requirements are those of the provenance and METADATA. An SBOM that is
missing from such a wheel, unreadable, or disagrees is an error naming the wheel and what
differs; a wheel built before SBOMs (provenance format 1) is a hint.

Read as JSON, never through the library that wrote it: a reader needs no CycloneDX package.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import zipfile

from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import canonical_name
from sglforge.check.findings import Findings
from sglforge.check.stack import Stack, StackWheel
from sglforge.wheel import sbom
from sglforge.wheel.members import read_member
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance

PART = "sbom"
FIRST_FORMAT = 2  # the provenance format from which every wheel carries an SBOM


def check_sboms(stack: Stack, findings: Findings) -> None:
    checked = 0
    for wheel in stack.wheels:
        prov = wheel.provenance
        if prov is None:
            continue
        if (prov.format or 1) < FIRST_FORMAT:
            findings.hint(
                PART,
                f"{wheel.file.name}: built before sglforge wrote SBOMs (provenance format "
                f"{prov.format or 1}): no SBOM to check; rebuild it for one",
            )
            continue
        problems = sbom_problems(wheel)
        for problem in problems:
            findings.error(PART, f"{wheel.file.name}: {problem}")
        checked += not problems
    if checked:
        findings.info(
            PART, f"{checked} wheel SBOM(s) (CycloneDX {sbom.SPEC_VERSION}) agree with their wheels"
        )


def sbom_problems(wheel: StackWheel) -> list[str]:
    """What is wrong with `wheel`'s SBOM (empty: nothing)."""
    prov = wheel.provenance
    assert prov is not None
    dist_infos = {m.split("/", 1)[0] for m in wheel.members if m.endswith(".dist-info/METADATA")}
    if len(dist_infos) != 1:
        return [f"expected one dist-info directory, found {len(dist_infos)}"]
    dist_info = dist_infos.pop()
    name = sbom.member(dist_info)
    if name not in wheel.members:
        return [f"no {name} (every wheel sglforge builds carries one): rebuild it"]
    try:
        with zipfile.ZipFile(wheel.file) as archive:
            data = read_member(archive, name, wheel.file, sbom.SBOM_FILE)
            provenance_bytes = read_member(
                archive, Provenance.member(dist_info), wheel.file, PROVENANCE_FILE
            )
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return [f"{name} is not valid JSON: {exc}"]
    except SglforgeError as exc:
        return [str(exc)]
    if not isinstance(document, dict):
        return [f"{name} is not a JSON object"]
    return _disagreements(document, wheel, prov, provenance_bytes, name)


def _disagreements(
    doc: dict, wheel: StackWheel, prov: Provenance, provenance_bytes: bytes, where: str
) -> list[str]:
    problems: list[str] = []

    def expect(key: str, found, wanted) -> None:
        if found != wanted:
            problems.append(f"{where}: {key} is {_show(found)}, expected {_show(wanted)}")

    expect("bomFormat", doc.get("bomFormat"), "CycloneDX")
    expect("specVersion", doc.get("specVersion"), sbom.SPEC_VERSION)
    expect(
        "serialNumber",
        doc.get("serialNumber"),
        sbom.wheel_serial(prov.content_key, wheel.name, wheel.version),
    )
    metadata = _object(doc.get("metadata"))
    component = _object(metadata.get("component"))
    expect("metadata.component.name", component.get("name"), canonical_name(wheel.name))
    expect("metadata.component.version", component.get("version"), wheel.version)
    if prov.source_date_epoch is not None:
        expect(
            "metadata.timestamp",
            metadata.get("timestamp"),
            datetime.datetime.fromtimestamp(
                prov.source_date_epoch, datetime.timezone.utc
            ).isoformat(),
        )
    wheel_props = _properties(component)
    expect(
        "the wheel's sglforge:provenance-sha256",
        wheel_props.get("sglforge:provenance-sha256"),
        hashlib.sha256(provenance_bytes).hexdigest(),
    )
    expect(
        "the wheel's sglforge:content-key",
        wheel_props.get("sglforge:content-key"),
        prov.content_key,
    )
    components = [c for c in doc.get("components") or [] if isinstance(c, dict)]
    by_role: dict[str, list[dict]] = {}
    for c in components:
        by_role.setdefault(_properties(c).get(sbom.ROLE, ""), []).append(c)
    upstreams = by_role.get("upstream", [])
    if len(upstreams) != 1:
        problems.append(f"{where}: {len(upstreams)} upstream component(s), expected 1")
    else:
        up = upstreams[0]
        expect("the upstream component's name", up.get("name"), prov.upstream)
        if not prov.commit.startswith("sha256:"):
            expect("the upstream component's version", up.get("version"), prov.commit)
        else:
            expect(
                "the upstream component's SHA-256", _sha256(up), prov.commit.removeprefix("sha256:")
            )
        expect("the upstream's sglforge:tree", _properties(up).get("sglforge:tree"), prov.tree)
    expect(
        "the pinned sources (name, commit, sha256)",
        sorted(
            (c.get("name"), _properties(c).get("sglforge:commit"), _sha256(c))
            for c in by_role.get("source", [])
        ),
        sorted((s.get("name"), s.get("commit"), s.get("sha256")) for s in prov.sources or ()),
    )
    expect(
        "the series (position, entry, sha256)",
        sorted(
            (
                int(_properties(c).get("sglforge:series-position", "0") or 0),
                _properties(c).get("sglforge:series-entry"),
                _sha256(c),
            )
            for c in by_role.get("patch", [])
        ),
        [(e.position, e.name, e.sha256) for e in sbom.patch_entries(prov)],
    )
    expect(
        "the runtime requirements",
        sorted(c.get("name") for c in by_role.get("requires", [])),
        sorted({_requirement_name(r) for r in wheel.requires_dist}),
    )
    return problems


def _object(value) -> dict:
    return value if isinstance(value, dict) else {}


def _properties(component: dict) -> dict[str, str]:
    return {
        p.get("name"): p.get("value")
        for p in component.get("properties") or []
        if isinstance(p, dict)
    }


def _sha256(component: dict) -> str | None:
    for entry in component.get("hashes") or []:
        if isinstance(entry, dict) and entry.get("alg") == "SHA-256":
            return entry.get("content")
    return None


def _requirement_name(text: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return canonical_name(Requirement(text).name)
    except InvalidRequirement:
        return text


def _show(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "…"
