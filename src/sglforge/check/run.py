"""Run the five parts over a stack and render one report (errors, waived, hints)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import canonical_name
from sglforge.check.abi import check_abi
from sglforge.check.api import KERNEL_MODULES, check_api
from sglforge.check.findings import Findings
from sglforge.check.labels import check_recipes, check_wheels
from sglforge.check.resolution import check_resolution
from sglforge.check.sbom import check_sboms
from sglforge.check.stack import load_stack
from sglforge.check.target import Target
from sglforge.check.waivers import load_policy
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.project import Project
from sglforge.inputs.recipes import load_recipes
from sglforge.inputs.toolchain import load_toolchain

WAIVERS = "api-waivers.toml"
PARTS = ("resolution", "api", "labels", "abi", "sbom")


@dataclass(frozen=True)
class CheckOptions:
    wheels_dir: Path | None = None  # default: project wheels/
    runtime_lock: Path | None = None  # default: lockfiles/runtime.lock
    waivers: Path | None = None  # default: lockfiles/api-waivers.toml
    python: str | None = None  # serving Python (major.minor); default: toolchain
    torch: str | None = None  # serving torch; default: toolchain
    kernel_modules: tuple[str, ...] = KERNEL_MODULES
    gpus: tuple[str, ...] = ()  # compute capabilities the device code must run on (--gpu)


@dataclass
class CheckResult:
    findings: Findings
    target: Target
    wheels: list[str] = field(default_factory=list)
    parts: tuple[str, ...] = PARTS  # the parts run (devices only with --gpu)

    @property
    def ok(self) -> bool:
        return not self.findings.errors


def run_check(project: Project, options: CheckOptions = CheckOptions()) -> CheckResult:
    """Check the stack. Without lockfiles/toolchain.toml (a bare wheel set, as some smoke
    projects are) the target is the running Python with no torch, and labels are skipped."""
    findings = Findings()
    toolchain = load_toolchain(project.toolchain) if project.toolchain.is_file() else None
    python = options.python or (
        toolchain.python if toolchain else "{}.{}".format(*sys.version_info[:2])
    )
    target = Target(python=python, torch=options.torch or (toolchain.torch if toolchain else None))
    stack = load_stack(
        options.wheels_dir or project.wheels_dir, options.runtime_lock or project.runtime_lock
    )
    policy = load_policy(options.waivers or project.root / "lockfiles" / WAIVERS)
    recipes = lock = None
    if toolchain is not None and project.recipes_dir.is_dir():
        lock = parse_lockfile(project.lockfile)
        recipes = load_recipes(project.recipes_dir, lock, toolchain)
    unbuilt = unbuilt_recipes(stack, recipes or {})
    check_resolution(stack, target, findings, unbuilt=unbuilt)
    if options.runtime_lock is None:
        check_runtime_lock_fresh(project, stack, target, findings, recipes or {}, unbuilt)
    check_api(stack, list(policy.waivers), findings, options.kernel_modules, aliases=policy.aliases)
    if recipes is not None:
        check_recipes(recipes, lock, findings)
        check_wheels(stack, recipes, lock, findings)
    else:
        findings.hint("labels", f"no {project.toolchain.name} / recipes/: labels not checked")
    check_abi(stack, target, findings)
    check_sboms(stack, findings)
    parts = PARTS
    if options.gpus:
        from sglforge.check.devices import PART, check_devices

        check_devices(stack, options.gpus, findings)
        parts += (PART,)
    return CheckResult(findings, target, [w.file.name for w in stack.wheels], parts)


def unbuilt_recipes(stack, recipes: dict) -> dict[str, str]:
    """Canonical name -> recipe file of each recipe of the project (opt-in ones aside: they
    are built only by name) with no wheel in the stack: what a partial set lacks."""
    built = {canonical_name(w.recipe or w.name) for w in stack.wheels} | {
        w.name for w in stack.wheels
    }
    return {
        canonical_name(r.name): f"recipes/{r.path.name}"
        for r in sorted(recipes.values(), key=lambda r: r.name)
        if not r.opt_in and canonical_name(r.name) not in built
    }


def check_runtime_lock_fresh(
    project: Project,
    stack,
    target: Target,
    findings: Findings,
    recipes: dict,
    unbuilt: dict[str, str],
) -> None:
    """runtime.lock must be what `lock-runtime` makes of runtime.in today (error), and
    runtime.in's generated part what the built wheels' metadata derives (hint: resolution
    above already fails on anything the lock lacks). Projects without runtime.in keep a
    hand-written lock: nothing to compare.

    runtime.in is derived from the whole set; a partial set (a recipe not built) derives
    less, and `lock-runtime` on it would drop what the unbuilt wheels need. So on a partial
    set the hint names the missing wheels instead and nothing is compared."""
    from sglforge.wheel import runtime

    source = runtime.input_path(project)
    if not source.exists():
        return
    stale = runtime.runtime_lock_is_stale(project.runtime_lock, source, target.python)
    if stale:
        findings.error("resolution", f"stale lock: {stale}")
    built = [w for w in stack.wheels if w.provenance is not None]
    if built and unbuilt:
        findings.hint(
            "resolution",
            f"{source.name} not compared with the wheels' metadata: it is derived from the "
            f"whole set and this one has no wheel for {_listed(unbuilt)}; build "
            f"{'them' if len(unbuilt) > 1 else 'it'} (`nox -s build -- {' '.join(unbuilt)}`) "
            "before any `lock-runtime`",
        )
        return
    if built:
        metadata = [runtime.read_metadata(w.file) for w in built]
        ours = {w.name for w in built} | {canonical_name(r.name) for r in recipes.values()}
        try:
            drift = runtime.runtime_input_is_stale(
                source,
                metadata,
                ours,
                target.python,
                target.torch and target.torch.split("+", 1)[0],
            )
        except SglforgeError as exc:  # a requirement lock-runtime cannot use
            findings.error("resolution", f"cannot derive {source.name}: {exc}")
            return
        if drift:
            findings.hint("resolution", drift)


def _listed(unbuilt: dict[str, str]) -> str:
    return ", ".join(f"{name} ({path})" for name, path in unbuilt.items())


def render(result: CheckResult) -> str:
    target = result.target
    lines = [
        (
            f"stack check: {len(result.wheels)} wheel(s) for CPython {target.python} "
            f"{target.machine}, torch {target.torch or '(none)'}"
        )
    ]
    for severity, title in (
        ("error", "ERROR"),
        ("waived", "waived"),
        ("hint", "hint"),
        ("info", "info"),
    ):
        for finding in result.findings.of(severity):
            lines.append(f"  {title:<6} {finding.check:<10} {finding.message}")
    counts = {p: sum(1 for f in result.findings.errors if f.check == p) for p in result.parts}
    status = "ok" if result.ok else "FAILED"
    lines.append(
        f"check: {status} — "
        + ", ".join(f"{p} {n} error(s)" if n else f"{p} ok" for p, n in counts.items())
    )
    return "\n".join(lines)


def document(result: CheckResult) -> dict:
    """`check --json`'s body (docs/reference.md, "Machine-readable output")."""
    target = result.target
    return {
        "ok": result.ok,
        "target": {"python": target.python, "torch": target.torch, "machine": target.machine},
        "wheels": list(result.wheels),
        "parts": {
            part: {"errors": sum(1 for f in result.findings.errors if f.check == part)}
            for part in result.parts
        },
        "findings": [
            {"part": f.check, "level": f.level, "message": f.message} for f in result.findings.items
        ],
    }
