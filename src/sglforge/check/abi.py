"""Python/ABI: the serving Python and torch match every wheel's tags, Requires-Python,
`torch==` pin, and (for CPython-specific wheels) the Python it was built with."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from sglforge.base.requirements import canonical_name
from sglforge.check.findings import Findings
from sglforge.check.stack import Stack
from sglforge.check.target import Target
from sglforge.wheel.runtime import UnevaluableMarker, marker_applies

PART = "abi"


def check_abi(stack: Stack, target: Target, findings: Findings) -> None:
    supported = target.supported_tags()
    python = Version(f"{target.python}.0")
    for wheel in stack.wheels:
        if not wheel.tags & supported:
            findings.error(
                PART,
                f"{wheel.file.name}: no tag installs on CPython "
                f"{target.python} {target.machine} (tags: "
                f"{', '.join(sorted(wheel.tags))})",
            )
        if wheel.requires_python:
            try:
                if not SpecifierSet(wheel.requires_python).contains(python, prereleases=True):
                    findings.error(
                        PART,
                        f"{wheel.label}: Requires-Python "
                        f"{wheel.requires_python} excludes {target.python}",
                    )
            except InvalidSpecifier:
                findings.error(
                    PART, f"{wheel.label}: invalid Requires-Python {wheel.requires_python!r}"
                )
        for text in wheel.requires_dist:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue  # reported by resolution
            try:
                applies = marker_applies(req, [target.marker_environment()])
            except UnevaluableMarker:
                continue  # reported by resolution
            if canonical_name(req.name) != "torch" or not applies:
                continue
            if target.torch and not req.specifier.contains(Version(target.torch), prereleases=True):
                findings.error(
                    PART, f"{wheel.label}: requires {req}, serving torch is {target.torch}"
                )
        prov = wheel.provenance
        bound = prov.requires_torch if prov else None
        # Provenance records the public version the wheel requires (torch==2.13.0); the
        # toolchain pins the variant too (2.13.0+cu130): compare what both say.
        if bound and target.torch and Version(bound).public != Version(target.torch).public:
            findings.error(
                PART, f"{wheel.label}: built against torch {bound}, serving torch is {target.torch}"
            )
        built_python = str((prov.toolchain.get("python") if prov else None) or "")
        cpython_only = any(t.split("-")[1].startswith("cp") for t in wheel.tags)
        if built_python and cpython_only and ".".join(built_python.split(".")[:2]) != target.python:
            findings.error(
                PART,
                f"{wheel.label}: built with Python {built_python}, serving "
                f"Python is {target.python}",
            )
