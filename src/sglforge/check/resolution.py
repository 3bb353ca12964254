"""Resolution: every Requires-Dist of every built wheel is satisfied, exactly once, by the
built set plus runtime.lock.

Only the built wheels' own requirements (and those of extras one built wheel asks of
another) are walked: runtime.lock is the resolver's output for the third-party rest, so its
pins are taken as closed (a resolver wrote them); this part checks that our wheels fit it.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from sglforge.base.requirements import canonical_name
from sglforge.check.findings import Findings
from sglforge.check.stack import Stack, StackWheel
from sglforge.check.target import Target
from sglforge.wheel.runtime import UnevaluableMarker, marker_applies

PART = "resolution"


@dataclass(frozen=True)
class Provider:
    name: str
    version: str
    where: str  # "wheels/x.whl" or "runtime.lock line 12"
    wheel: StackWheel | None = None


def providers(stack: Stack) -> dict[str, list[Provider]]:
    found: dict[str, list[Provider]] = {}
    for wheel in stack.wheels:
        found.setdefault(wheel.name, []).append(
            Provider(wheel.name, wheel.version, f"{stack.wheels_dir.name}/{wheel.file.name}", wheel)
        )
    for pin in stack.runtime:
        found.setdefault(pin.name, []).append(
            Provider(pin.name, pin.version, f"{stack.runtime_lock.name} line {pin.line}")
        )
    return found


def active_requirements(
    wheel: StackWheel, extras: frozenset[str], target: Target, findings: Findings
) -> list[Requirement]:
    """The wheel's requirements that apply on the target with these extras requested."""
    active = []
    for text in wheel.requires_dist:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            findings.error(PART, f"{wheel.label}: unparsable Requires-Dist {text!r}: {exc}")
            continue
        try:
            if marker_applies(
                req, [target.marker_environment(extra) for extra in ("", *sorted(extras))]
            ):
                active.append(req)
        except UnevaluableMarker as exc:
            findings.error(PART, f"{wheel.label} ({wheel.file.name}): {exc}")
    return active


def check_resolution(
    stack: Stack, target: Target, findings: Findings, *, unbuilt: dict[str, str] | None = None
) -> None:
    """`unbuilt`: canonical name -> recipe file of the project's recipes with no wheel here
    (check/run.py); a requirement on one of those is a wheel to build, never a pin to add to
    runtime.lock, and the hint says which."""
    unbuilt = unbuilt or {}
    found = providers(stack)
    for name, provs in sorted(found.items()):
        if len(provs) > 1:
            listed = "; ".join(f"{p.version} ({p.where})" for p in provs)
            findings.error(PART, f"{name} is provided {len(provs)} times: {listed}")
    queue = [(wheel, frozenset()) for wheel in stack.wheels]
    seen: set[tuple[str, frozenset[str]]] = set()
    gaps = conflicts = 0
    not_built: dict[str, str] = {}
    while queue:
        wheel, extras = queue.pop(0)
        if (wheel.name, extras) in seen:
            continue
        seen.add((wheel.name, extras))
        for req in active_requirements(wheel, extras, target, findings):
            name = canonical_name(req.name)
            provs = found.get(name, [])
            asked = f"{wheel.label}{'[' + ','.join(sorted(extras)) + ']' if extras else ''}"
            if not provs and name in unbuilt:
                not_built[name] = unbuilt[name]
                findings.error(
                    PART, f"{asked} requires {req} — not built (no wheel of {unbuilt[name]})"
                )
                continue
            if not provs:
                gaps += 1
                findings.error(
                    PART, f"{asked} requires {req} — not built, not in {stack.runtime_lock.name}"
                )
                continue
            for prov in provs:
                try:
                    ok = req.specifier.contains(Version(prov.version), prereleases=True)
                except InvalidVersion:
                    ok = False
                if not ok:
                    conflicts += 1
                    findings.error(
                        PART,
                        f"{asked} requires {req} — {prov.where} has {prov.name} {prov.version}",
                    )
                if prov.wheel is not None and req.extras:
                    queue.append((prov.wheel, frozenset(canonical_name(e) for e in req.extras)))
                elif req.extras and prov.wheel is None:
                    pass  # a locked third-party package: its extras are the resolver's job
    if not_built:
        names = sorted(not_built)
        findings.hint(
            PART,
            "partial set: missing "
            + ", ".join(f"{n} ({not_built[n]})" for n in names)
            + f": build {'them' if len(names) > 1 else 'it'} (`nox -s build -- {' '.join(names)}`);"
            f" a recipe's wheel is never a pin in {stack.runtime_lock.name}",
        )
    if gaps or conflicts:
        findings.hint(
            PART,
            f"{gaps} missing and {conflicts} conflicting requirement(s): add "
            "the missing ones to lockfiles/runtime.lock (regenerate it with "
            "its documented command) or build them",
        )
