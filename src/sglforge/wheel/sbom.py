"""CycloneDX SBOMs (PEP 770): `<dist-info>/sboms/sglforge.cdx.json` in every wheel sglforge
builds, and `sbom.cdx.json` in a bundle (the stack). The one owner of both documents.

A wheel's SBOM is derived from what the wheel already carries and from nothing else: its
provenance (wheel/provenance.py: the pinned upstream and its children with commit, tree id or
archive sha256; every series entry with its digest; the toolchain; the build requirements)
and its METADATA (name, version, Requires-Dist). So it is bit-identical whenever the wheel
is (`verify`). cyclonedx-python-lib would write a random serial number, the current time and
random bom-refs: the serial is a UUID5 of the wheel's content key and version, the time is
the provenance's SOURCE_DATE_EPOCH, and every bom-ref is a name. The library has no
CycloneDX `formulation`, so the build's inputs that are not shipped (sources, patches,
toolchain, build requirements) are components with scope "excluded" and a `sglforge:role`
property, and the build's facts are `sglforge:` properties of the wheel's component.

Readers (`check`'s sbom part, check/sbom.py) read it as JSON and compare it with the
provenance and METADATA beside it; the tests validate it against the CycloneDX 1.6 schema.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import canonical_name
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance

SBOM_DIR = "sboms"  # PEP 770: <name>-<version>.dist-info/sboms/
SBOM_FILE = "sglforge.cdx.json"
STACK_SBOM_FILE = "sbom.cdx.json"  # a bundle's, beside sglforge-stack.json
SPEC_VERSION = "1.6"
# UUID5 namespace of every serial number sglforge writes (a fixed, random UUID)
_NAMESPACE = uuid.UUID("5b1f0c52-3a7e-4a8e-9d3c-0e6f2f1a9c41")
_GITHUB = re.compile(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?")
ROLE = "sglforge:role"  # upstream, source, patch, toolchain, build-requires, requires

# -- what a reader needs ------------------------------------------------------------------------


def member(dist_info: str) -> str:
    """The SBOM's path inside a wheel whose dist-info directory is `dist_info`."""
    return f"{dist_info}/{SBOM_DIR}/{SBOM_FILE}"


def wheel_serial(content_key: str | None, name: str, version: str) -> str:
    seed = json.dumps([content_key, canonical_name(name), version])
    return f"urn:uuid:{uuid.uuid5(_NAMESPACE, seed)}"


def bom_link(serial: str) -> str:
    """A CycloneDX BOM-Link to version 1 of the SBOM `serial` (urn:uuid:…)."""
    return f"urn:cdx:{serial.removeprefix('urn:uuid:')}/1"


@dataclass(frozen=True)
class PatchEntry:
    """One series entry as the SBOM records it (from the provenance's `patches`)."""

    position: int
    name: str
    sha256: str
    kind: str  # "backport" or "patch"
    url: str | None  # a backport's upstream repository
    commit: str | None  # a backport's commit
    path: str | None  # a local patch's file, relative to the project (patches/<upstream>/…)


def patch_entries(provenance: Provenance) -> list[PatchEntry]:
    out = []
    for position, entry in enumerate(provenance.patches or (), 1):
        name = str(entry.get("name", ""))
        kind = entry.get("kind") or ("backport" if name.startswith("backport ") else "patch")
        out.append(
            PatchEntry(
                position,
                name,
                str(entry.get("sha256", "")),
                str(kind),
                entry.get("url"),
                entry.get("commit"),
                entry.get("path"),
            )
        )
    return out


# -- a wheel's SBOM ------------------------------------------------------------------------------


def wheel_sbom(
    provenance: Provenance,
    name: str,
    version: str,
    requires_dist: Iterable[str],
    provenance_bytes: bytes,
    other_sboms: Iterable[str] = (),
) -> bytes:
    """The SBOM's bytes for the wheel `name` `version` whose provenance (already stamped with
    the version) is `provenance`, written as `provenance_bytes`. `other_sboms`: SBOM files
    another tool put in the same `sboms/` directory (auditwheel's), referenced by name."""
    from cyclonedx.model import (
        ExternalReference,
        ExternalReferenceType,
        Property,
        XsUri,
    )
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.bom_ref import BomRef
    from cyclonedx.model.component import (
        Component,
        ComponentScope,
        ComponentType,
        Diff,
        Patch,
        PatchClassification,
        Pedigree,
    )
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    def props(pairs: dict[str, Any]) -> list:
        return [
            Property(name=f"sglforge:{k}", value=_text(v))
            for k, v in pairs.items()
            if v is not None and v != ()
        ]

    canonical = canonical_name(name)
    wheel = Component(
        type=ComponentType.LIBRARY,
        name=canonical,
        version=version,
        bom_ref=BomRef(f"wheel:{canonical}"),
        purl=PackageURL("pypi", None, canonical, version),
        properties=props(
            {
                "recipe": provenance.wheel,
                "content-key": provenance.content_key,
                "build-root": provenance.build_root,
                "cuda-archs": ",".join(provenance.cuda_archs),
                "requires-torch": provenance.requires_torch,
                "recipe-sha256": provenance.recipe_sha256,
                "series-sha256": provenance.series_sha256,
                "source-date-epoch": provenance.source_date_epoch,
                "target": provenance.target,
                "dev": provenance.dev,
                "unsandboxed": provenance.unsandboxed,
                "removed": ",".join(provenance.removed or ()) or None,
                "provenance": PROVENANCE_FILE,
                "provenance-sha256": hashlib.sha256(provenance_bytes).hexdigest(),
            }
        ),
        external_references=[
            ExternalReference(type=ExternalReferenceType.BOM, url=XsUri(other))
            for other in sorted(other_sboms)
        ],
    )
    components: list = []
    patches = patch_entries(provenance)
    patch_refs = []
    for entry in patches:
        ref = BomRef(f"patch:{entry.position}")
        patch_refs.append(ref)
        components.append(
            Component(
                type=ComponentType.FILE,
                name=entry.path or entry.name,
                bom_ref=ref,
                scope=ComponentScope.EXCLUDED,
                hashes=[_sha256(entry.sha256)] if _is_sha256(entry.sha256) else [],
                external_references=(
                    [ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(entry.url))]
                    if entry.url
                    else []
                ),
                properties=props(
                    {
                        "role": "patch",
                        "series-position": entry.position,
                        "series-entry": entry.name,
                        "kind": entry.kind,
                        "commit": entry.commit,
                        # a backport's digest is of its normalized diff, a patch's of the file
                        "digest-of": "normalized diff" if entry.kind == "backport" else "file",
                    }
                ),
            )
        )
    children = []
    for source in provenance.sources or ():
        child = _source_component(source, "source", props, PackageURL)
        children.append(child)
        components.append(child)
    upstream = _source_component(
        {
            "name": provenance.upstream,
            "url": provenance.url,
            "commit": None if provenance.commit.startswith("sha256:") else provenance.commit,
            "sha256": provenance.sha256,
            "tree": provenance.tree,
            "sdist": provenance.sdist,
            "subdir": provenance.subdir,
        },
        "upstream",
        props,
        PackageURL,
    )
    upstream.pedigree = Pedigree(
        patches=[
            Patch(
                type=(
                    PatchClassification.BACKPORT
                    if e.kind == "backport"
                    else PatchClassification.UNOFFICIAL
                ),
                diff=Diff(url=XsUri(_patch_url(e))) if _patch_url(e) else None,
            )
            for e in patches
        ]
    )
    components.append(upstream)
    for embed in provenance.embeds or ():
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=f"{provenance.upstream}/{embed.get('path')}",
                version=embed.get("claimed_commit"),
                bom_ref=BomRef(f"embed:{embed.get('path')}"),
                scope=ComponentScope.EXCLUDED,
                properties=props(
                    {
                        "role": "embed",
                        "url": embed.get("url"),
                        "tree": embed.get("tree"),
                        "verified": embed.get("verified"),
                    }
                ),
            )
        )
    for tool, value in sorted(provenance.toolchain.items()):
        if value is None:
            continue
        components.append(
            Component(
                type=ComponentType.LIBRARY if tool == "torch" else ComponentType.APPLICATION,
                name=tool,
                version=value,
                bom_ref=BomRef(f"toolchain:{tool}"),
                scope=ComponentScope.EXCLUDED,
                purl=PackageURL("pypi", None, "torch", value) if tool == "torch" else None,
                properties=props({"role": "toolchain"}),
            )
        )
    for requirement, pinned in sorted((provenance.build_requires or {}).items()):
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=canonical_name(requirement),
                version=pinned,
                bom_ref=BomRef(f"build-requires:{canonical_name(requirement)}"),
                scope=ComponentScope.EXCLUDED,
                purl=PackageURL("pypi", None, canonical_name(requirement), pinned),
                properties=props({"role": "build-requires"}),
            )
        )
    runtime = []
    for requirement in _requirements(requires_dist):
        runtime.append(
            Component(
                type=ComponentType.LIBRARY,
                name=requirement.name,
                version=requirement.version,
                bom_ref=BomRef(f"requires:{requirement.name}"),
                scope=ComponentScope.OPTIONAL if requirement.optional else ComponentScope.REQUIRED,
                purl=PackageURL("pypi", None, requirement.name, requirement.version),
                properties=props({"role": "requires", "requirement": requirement.texts}),
            )
        )
    components += runtime
    bom = Bom(
        serial_number=uuid.UUID(
            wheel_serial(provenance.content_key, name, version).removeprefix("urn:uuid:")
        ),
        metadata=BomMetaData(component=wheel, timestamp=_timestamp(provenance.source_date_epoch)),
    )
    bom.metadata.tools.components.update(_tools(Component, ComponentType, PackageURL))
    for component in components:
        bom.components.add(component)
    bom.register_dependency(wheel, [upstream, *runtime])
    bom.register_dependency(upstream, children)
    return _dumps(JsonV1Dot6(bom).output_as_string(indent=2))


@dataclass(frozen=True)
class _Requirement:
    name: str
    version: str | None  # an exact `==` pin's version
    optional: bool  # only under an extra
    texts: str  # every Requires-Dist line for the name, "; "-joined


def _requirements(requires_dist: Iterable[str]) -> list[_Requirement]:
    """Requires-Dist lines grouped by name (a name may appear under several markers)."""
    from packaging.requirements import InvalidRequirement, Requirement

    grouped: dict[str, list[tuple[str, Any]]] = {}
    for text in requires_dist:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise SglforgeError(f"METADATA Requires-Dist {text!r}: {exc}") from None
        grouped.setdefault(canonical_name(req.name), []).append((text.strip(), req))
    out = []
    for name, entries in sorted(grouped.items()):
        pins = {
            s.version
            for _, r in entries
            for s in r.specifier
            if s.operator in ("==", "===") and "*" not in s.version
        }
        optional = all(r.marker is not None and "extra" in str(r.marker) for _, r in entries)
        out.append(
            _Requirement(
                name,
                pins.pop() if len(pins) == 1 else None,
                optional,
                " | ".join(sorted(t for t, _ in entries)),
            )
        )
    return out


def _source_component(source: dict, role: str, props, package_url) -> Any:
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
    from cyclonedx.model.bom_ref import BomRef
    from cyclonedx.model.component import Component, ComponentScope, ComponentType

    name = str(source.get("name"))
    url, commit, sha256 = source.get("url"), source.get("commit"), source.get("sha256")
    sdist = source.get("sdist")
    version = commit or (sdist.split("==", 1)[1] if sdist and "==" in sdist else None)
    purl = None
    github = _GITHUB.fullmatch(url or "")
    if sdist and "==" in sdist:
        purl = package_url("pypi", None, canonical_name(sdist.split("==", 1)[0]), version)
    elif github and commit:
        purl = package_url("github", github.group(1), github.group(2), commit)
    elif url:
        qualifiers = {"download_url": url}
        if _is_sha256(sha256):
            qualifiers["checksum"] = f"sha256:{sha256}"
        purl = package_url("generic", None, name, version, qualifiers=qualifiers)
    references = []
    if url:
        kind = ExternalReferenceType.VCS if commit else ExternalReferenceType.DISTRIBUTION
        references.append(ExternalReference(type=kind, url=XsUri(url)))
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version,
        bom_ref=BomRef(f"{role}:{name}"),
        scope=ComponentScope.EXCLUDED,
        purl=purl,
        hashes=[_sha256(sha256)] if _is_sha256(sha256) else [],
        external_references=references,
        properties=props(
            {
                "role": role,
                "commit": commit,
                "tree": source.get("tree"),
                "subdir": source.get("subdir"),
            }
        ),
    )


def _patch_url(entry: PatchEntry) -> str | None:
    if entry.kind == "backport" and entry.url and entry.commit:
        github = _GITHUB.fullmatch(entry.url)
        return f"{entry.url.rstrip('/')}/commit/{entry.commit}" if github else entry.url
    return entry.path


# -- a bundle's SBOM: the stack --------------------------------------------------------------------


@dataclass(frozen=True)
class StackWheel:
    """One of our wheels as the stack SBOM lists it."""

    name: str
    version: str
    file: str
    sha256: str
    sbom_serial: str | None  # its own SBOM's serial number (None: the wheel has none)
    upstream: str
    commit: str
    source_date_epoch: int | None


@dataclass(frozen=True)
class StackPin:
    """A third-party runtime pin and the wheel files the bundle carries for it."""

    name: str
    version: str
    files: tuple[tuple[str, str], ...]  # (file name, sha256)


def stack_sbom(
    name: str,
    version: str,
    wheels: list[StackWheel],
    pins: list[StackPin],
    requirements: bytes,
    extra_files: dict[str, str] | None = None,
) -> bytes:
    """The stack SBOM of a bundle `name`-`version`: our wheels (file sha256, a BOM-Link to
    each one's own SBOM), the third-party runtime pins with the files carried, and
    `extra_files` (bundle path -> sha256: JIT caches). Serial: a UUID5 of the bundle's name,
    version and requirements.lock; time: the newest SOURCE_DATE_EPOCH of our wheels."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, Property, XsUri
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.bom_ref import BomRef
    from cyclonedx.model.component import Component, ComponentScope, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    stack = Component(
        type=ComponentType.APPLICATION,
        name=name,
        version=version,
        bom_ref=BomRef(f"stack:{name}"),
        properties=[
            Property(
                name="sglforge:requirements-sha256", value=hashlib.sha256(requirements).hexdigest()
            )
        ],
    )
    members = []
    for wheel in sorted(wheels, key=lambda w: w.file):
        references = []
        if wheel.sbom_serial:
            references.append(
                ExternalReference(
                    type=ExternalReferenceType.BOM, url=XsUri(bom_link(wheel.sbom_serial))
                )
            )
        members.append(
            Component(
                type=ComponentType.LIBRARY,
                name=canonical_name(wheel.name),
                version=wheel.version,
                bom_ref=BomRef(f"wheel:{canonical_name(wheel.name)}"),
                scope=ComponentScope.REQUIRED,
                purl=PackageURL("pypi", None, canonical_name(wheel.name), wheel.version),
                hashes=[_sha256(wheel.sha256)],
                external_references=references,
                properties=[
                    Property(name=ROLE, value="sglforge-wheel"),
                    Property(name="sglforge:file", value=wheel.file),
                    Property(name="sglforge:upstream", value=wheel.upstream),
                    Property(name="sglforge:commit", value=wheel.commit),
                ],
            )
        )
    for pin in sorted(pins, key=lambda p: p.name):
        members.append(
            Component(
                type=ComponentType.LIBRARY,
                name=pin.name,
                version=pin.version,
                bom_ref=BomRef(f"runtime:{pin.name}"),
                scope=ComponentScope.REQUIRED,
                purl=PackageURL("pypi", None, pin.name, pin.version),
                hashes=[_sha256(digest) for _, digest in sorted(pin.files)],
                properties=[Property(name=ROLE, value="runtime")]
                + [Property(name="sglforge:file", value=file) for file, _ in sorted(pin.files)],
            )
        )
    for path, digest in sorted((extra_files or {}).items()):
        members.append(
            Component(
                type=ComponentType.DATA,
                name=path,
                bom_ref=BomRef(f"file:{path}"),
                hashes=[_sha256(digest)],
                properties=[Property(name=ROLE, value="bundle-file")],
            )
        )
    seed = json.dumps([name, version, hashlib.sha256(requirements).hexdigest()])
    epochs = [w.source_date_epoch for w in wheels if w.source_date_epoch is not None]
    bom = Bom(
        serial_number=uuid.uuid5(_NAMESPACE, seed),
        metadata=BomMetaData(component=stack, timestamp=_timestamp(max(epochs, default=None))),
    )
    bom.metadata.tools.components.update(_tools(Component, ComponentType, PackageURL))
    for component in members:
        bom.components.add(component)
    bom.register_dependency(stack, members)
    return _dumps(JsonV1Dot6(bom).output_as_string(indent=2))


# -- shared ---------------------------------------------------------------------------------------


def _tools(component, component_type, package_url) -> list:
    """sglforge and the library that serialized the document, with their versions (they
    are part of what makes the bytes)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    out = []
    for dist in ("sglforge", "cyclonedx-python-lib"):
        try:
            found = installed(dist)
        except PackageNotFoundError:
            found = None
        out.append(
            component(
                type=component_type.APPLICATION if dist == "sglforge" else component_type.LIBRARY,
                name=dist,
                version=found,
                purl=package_url("pypi", None, dist, found),
            )
        )
    return out


def _timestamp(epoch: int | None) -> datetime.datetime:
    """SOURCE_DATE_EPOCH as the document's time (never the clock's); none: 1980-01-01."""
    return datetime.datetime.fromtimestamp(
        epoch if epoch is not None else 315532800, datetime.timezone.utc
    )


def _sha256(digest: str) -> Any:
    from cyclonedx.model import HashAlgorithm, HashType

    return HashType(alg=HashAlgorithm.SHA_256, content=digest)


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _dumps(text: str) -> bytes:
    """Keys sorted and one trailing newline: the bytes do not depend on the library's
    member order."""
    return (json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n").encode()
