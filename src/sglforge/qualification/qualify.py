"""The smoke's qualification steps (issue 24), called by run.py: read the qualification inputs
before anything starts (a reference file, the lock the receipt binds, the gates' question
set), run the gates and the reference record/compare after the profile's checks, and write
the receipt whatever the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglforge.qualification import gates, reference
from sglforge.qualification.identity import model_identity
from sglforge.qualification.receipt import build_receipt, wheel_set, write_receipt
from sglforge.qualification.results import CheckResult

TINY_LIMITATION = (
    "tiny random-weight model (sglforge tiny-model): proves the stack serves "
    "and computes consistently (PD = colocated, run = reference), not model "
    "quality; accuracy and needle gates cannot pass on it"
)


@dataclass
class RunFacts:
    """What the receipt needs that the pipeline learns on the way."""

    wheels: dict[str, Any] | None = None
    reference: Any = None  # reference.Reference to compare with
    facts: Any = None  # doctor.HostFacts
    environment: Any = None  # environment.EnvStack (--python)
    model: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def prepare(opts: Any, qual: RunFacts) -> None:
    lock = opts.receipt_lock if opts.existing_python else opts.lock
    wheel_dirs = tuple(
        d
        for d in (opts.wheels_dir, opts.profile.install.wheelhouse)
        if d is not None and Path(d).is_dir()
    )
    qual.wheels = wheel_set(lock, wheel_dirs) if lock is not None else None
    if opts.reference is not None:
        qual.reference = reference.load_reference(opts.reference)
    if opts.profile.gates.accuracy is not None:
        gates.load_questions(opts.profile.gates.accuracy)  # the sha256 is checked up front


def run_qualification(
    opts: Any, router_url: str, timeout: float, qual: RunFacts
) -> list[CheckResult]:
    profile = opts.profile
    results = gates.run_gates(router_url, profile.gates, timeout, profile.checks.words_per_token)
    if opts.record_reference is None and qual.reference is None:
        return results
    qual.model = model_identity(profile.model)
    stack = {
        "versions": _versions(qual),
        "wheel_set_digest": (qual.wheels or {}).get("digest"),
        "host": _host(opts, qual),
    }
    if opts.record_reference is not None:
        spec = profile.reference
        generations = reference.collect(
            router_url,
            profile.equivalence.all_prompts(),
            profile.equivalence.max_new_tokens,
            spec.top_k,
            timeout,
        )
        ref = reference.new_reference(
            generations,
            model=qual.model,
            stack=stack,
            top_k=spec.top_k,
            max_new_tokens=profile.equivalence.max_new_tokens,
            profile=profile.name,
        )
        try:
            reference.write_reference(opts.record_reference, ref)
            results.append(
                CheckResult(
                    "record-reference",
                    True,
                    f"{len(generations)} prompts, top-{spec.top_k}, "
                    f"written to {opts.record_reference}",
                    metrics={"file": str(opts.record_reference)},
                )
            )
        except Exception as exc:  # noqa: BLE001 - SglforgeError or OSError: reported
            results.append(CheckResult("record-reference", False, str(exc)))
    if qual.reference is not None:
        ref = qual.reference
        run = reference.collect(
            router_url,
            tuple(g.prompt for g in ref.generations),
            ref.max_new_tokens,
            ref.top_k,
            timeout,
        )
        observed = opts.run_dir / "reference-observed.json"
        try:  # what this run saw, in reference form: compared again offline if need be
            reference.write_reference(
                observed,
                reference.new_reference(
                    run,
                    model=qual.model,
                    stack=stack,
                    top_k=ref.top_k,
                    max_new_tokens=ref.max_new_tokens,
                    profile=profile.name,
                ),
            )
        except Exception:  # noqa: BLE001, S110 - a failed generation is judged by compare()
            pass
        results.append(reference.compare(ref, run, profile.reference, qual.model))
    return results


def _versions(qual: RunFacts) -> dict[str, str]:
    env = qual.environment
    if env is not None:
        return {pkg.name: pkg.version for pkg in env.packages}
    return {w["name"]: w["version"] for w in (qual.wheels or {}).get("wheels", [])}


def _host(opts: Any, qual: RunFacts) -> dict[str, Any]:
    facts = qual.facts
    profile = opts.profile
    roles = {
        r.role: {"gpus": list(r.gpus), "numa_node": r.numa_node if profile.numa_binding else None}
        for r in profile.roles
    }
    if profile.colocated is not None and "equivalence" in profile.checks.run:
        c = profile.colocated
        roles["colocated"] = {
            "gpus": list(c.gpus),
            "numa_node": c.numa_node if profile.numa_binding else None,
        }
    host: dict[str, Any] = {"numa": {"binding": profile.numa_binding, "roles": roles}}
    if facts is not None:
        host.update(
            gpus=[
                {
                    "index": g.index,
                    "name": g.name,
                    "compute_capability": g.compute_cap,
                    "numa_node": g.numa_node,
                }
                for g in facts.gpus
            ],
            driver=facts.driver_version,
            cuda=facts.nvcc_version,
            torch=facts.torch_version,
            nvidia_smi_error=facts.nvidia_smi_error,
        )
        host["numa"]["nodes"] = list(facts.numa_nodes) if facts.numa_nodes else None
    env = qual.environment
    if env is not None:
        host["torch_cuda"] = env.torch_cuda
        host["torch"] = host.get("torch") or getattr(env.get("torch"), "version", None)
    return host


def substituted_wheels(env: Any) -> dict[str, list[str]]:
    """Distribution -> the pins its provenance says were substituted (sources/substitute.py)."""
    if env is None:
        return {}
    out = {}
    for pkg in env.packages:
        subs = pkg.provenance.substitutes if pkg.provenance is not None else None
        if subs:
            out[pkg.name] = [str(s.get("name")) for s in subs]
    return out


def _limitations(opts: Any, report: Any, qual: RunFacts) -> list[str]:
    profile = opts.profile
    out = list(profile.limitations)
    model = qual.model or {}
    if model.get("tiny_model") and not any("tiny random-weight model" in x for x in out):
        out.append(TINY_LIMITATION)
    if qual.wheels is None:
        out.append(
            "not bound to a wheel set: the environment was used as found (--python "
            "without --lock), so this receipt qualifies no wheels and cannot be "
            "promoted"
        )
    env = qual.environment
    for name, subs in sorted(substituted_wheels(env).items()):
        out.append(
            f"{name} was built with substituted inputs ({', '.join(subs)}: local "
            "directories in place of their pins); this receipt cannot promote it"
        )
    if env is not None:
        others = sorted(p.name for p in env.packages if p.provenance is None)
        if others:
            out.append(
                f"{len(others)} stack distributions were not built by sglforge: {', '.join(others)}"
            )
    names = {c.name for c in report.checks}
    if "equivalence" not in names:
        out.append("no equivalence check (PD vs colocated) in this run")
    if "reference" not in names:
        out.append("no --reference comparison in this run")
    out += [
        f"gate {c.name} failed and is not enforced by the profile: {c.detail}"
        for c in report.checks
        if not c.passed and not c.enforced
    ]
    return out


def _origins(qual: RunFacts) -> dict[str, Any] | None:
    env = qual.environment
    if env is None:
        return None
    return {pkg.name: pkg.origin for pkg in sorted(env.packages, key=lambda p: p.name)}


def write_run_receipt(opts: Any, report: Any, qual: RunFacts, duration: float) -> Path:
    if qual.model is None:
        qual.model = model_identity(opts.profile.model)
    receipt = build_receipt(
        report=report,
        profile=opts.profile,
        wheels=qual.wheels,
        model=qual.model,
        host=_host(opts, qual),
        duration=duration,
        limitations=_limitations(opts, report, qual),
        stack_origins=_origins(qual),
        substituted=substituted_wheels(qual.environment),
    )
    return write_receipt(opts.run_dir, receipt, opts.sign_key)
