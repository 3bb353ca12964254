"""Verbs `smoke`, `doctor` and `tiny-model`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_PROFILE = "dsv4-flash-pd"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"profile name in profiles/ or a path to a .toml (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model path (overrides the profile's model); 'tiny' generates a small "
        "random-weight Llama into the run directory",
    )
    p.add_argument(
        "--python",
        type=Path,
        default=None,
        metavar="PATH",
        help="run against the existing environment of this interpreter: install "
        "nothing, ignore wheels/, record its installed versions, check it",
    )
    p.add_argument("--wheels-dir", type=Path, default=None, help="default: <project>/wheels")
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="hash-pinned requirements (default: <project>/lockfiles/wheels.lock)",
    )


def _jit_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--jit-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="the servers' JIT caches live in DIR (default with --jit-cache and for warm: "
        "/var/tmp/sglforge-jit/<key16>, one fixed path per key)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "smoke", help="install the wheels into a fresh venv, launch the PD pair, run checks"
    )
    _common(p)
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run directory for venv, logs and report (default: <project>/build/smoke/<profile>)",
    )
    p.add_argument(
        "--venv",
        type=Path,
        default=None,
        help="use this existing venv instead of installing a fresh one (without a "
        "wheel set in the project: like --python VENV/bin/python)",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help="directory of third-party wheels pinned in the lock (find-links)",
    )
    p.add_argument("--index-url", default=None, help="index for third-party pins in the lock")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the exact commands and environment; start nothing",
    )
    p.add_argument(
        "--record-reference",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the greedy token ids and top-k logprobs of the profile's "
        "prompts, with the model's identity and the stack, to FILE",
    )
    p.add_argument(
        "--reference",
        type=Path,
        default=None,
        metavar="FILE",
        help="compare this run with a recorded reference (top-1 match, top-k "
        "overlap, logprob difference; thresholds from the profile)",
    )
    p.add_argument(
        "--sign-key",
        type=Path,
        default=None,
        metavar="KEY",
        help="sign receipt.json with this SSH private key (ssh-keygen -Y sign)",
    )
    _jit_options(p)
    p.add_argument(
        "--jit-cache",
        type=Path,
        default=None,
        metavar="ARTIFACT",
        help="start from this JIT-cache artifact (`sglforge warm`): used when its key matches "
        "this run (lock, GPU, CUDA/driver, server arguments, model config), else a warning and "
        "the servers JIT-compile; a corrupt or tampered one is refused",
    )
    p.set_defaults(func=run_smoke_verb)
    _register_doctor(subparsers)

    p = subparsers.add_parser(
        "tiny-model",
        help="write a small random-weight Llama (config, safetensors, tokenizer "
        "trained offline) for a weight-free smoke",
    )
    p.add_argument("dir", type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="overwrite an existing model there")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="random seed of the weights (same seed, same files; default 0)",
    )
    p.add_argument(
        "--heads",
        type=int,
        default=2,
        metavar="N",
        help="attention heads (KV heads: half, at least 1); a TP-N server needs a "
        "multiple of N (default 2)",
    )
    p.set_defaults(func=run_tiny_model_verb)


def _register_doctor(subparsers: argparse._SubParsersAction) -> None:
    from sglforge.cli.jsonout import add_json_option

    p = subparsers.add_parser(
        "doctor", help="check this host against a smoke profile and the built wheels"
    )
    _common(p)
    p.add_argument(
        "--venv",
        type=Path,
        default=None,
        help="venv whose torch is checked (default: the smoke run's venv if present)",
    )
    add_json_option(p, "doctor", "the findings")
    p.set_defaults(func=run_doctor_verb)


def _options(args: argparse.Namespace, ctx):
    from dataclasses import replace

    from sglforge.smoke.profile import InstallSpec, load_profile, resolve_profile_path
    from sglforge.smoke.run import SmokeOptions

    project = ctx.project
    profile = load_profile(
        resolve_profile_path(project.profiles_dir, args.profile), project.root
    ).with_model(args.model)
    wheelhouse = getattr(args, "wheelhouse", None)
    index_url = getattr(args, "index_url", None)
    if not (wheelhouse or index_url or profile.install.wheelhouse or profile.install.index_url):
        wheelhouse, index_url = _index_from_environment()  # the offline route: SGLFORGE_INDEX
    if wheelhouse or index_url:
        profile = replace(
            profile,
            install=InstallSpec(
                wheelhouse=wheelhouse.resolve() if wheelhouse else profile.install.wheelhouse,
                index_url=index_url or profile.install.index_url,
            ),
        )
    from sglforge.base.errors import SglforgeError

    out = getattr(args, "out", None)
    run_dir = (out or project.root / "build" / "smoke" / profile.name).resolve()
    tiny = profile.tiny_model
    if tiny:
        profile = profile.with_model(str(run_dir / "tiny-model"))
    venv = args.venv.resolve() if args.venv else None
    if venv is not None and not (venv / "bin" / "python").exists():
        raise SglforgeError(
            f"--venv {venv}: no bin/python there",
            hint="run the smoke once without --venv to create it",
        )
    wheels_dir = (args.wheels_dir or project.wheels_dir).resolve()
    python = None
    if args.python is not None:
        if venv is not None:
            raise SglforgeError("--python and --venv name the environment twice; pass one")
        # Not resolved: a venv's bin/python is a symlink whose target lacks the venv's site.
        python = Path(os.path.abspath(args.python))
        if not python.is_file() or not os.access(python, os.X_OK):
            raise SglforgeError(f"--python {args.python}: not an executable file")
    elif venv is not None and not (wheels_dir / "manifest.json").exists():
        python = venv / "bin" / "python"  # an existing env, not one the smoke installed
    lock = (args.lock or project.wheels_lock).resolve()
    return SmokeOptions(
        profile=profile,
        project_root=project.root,
        run_dir=run_dir,
        wheels_dir=wheels_dir,
        lock=lock,
        reuse_venv=None if python else venv,
        existing_python=python,
        tiny_model=tiny,
        # Qualification (issue 24). With --python the lock is read only when named: it is
        # then the environment's wheel set, bound into the receipt.
        record_reference=_abs(getattr(args, "record_reference", None)),
        reference=_abs(getattr(args, "reference", None)),
        sign_key=_abs(getattr(args, "sign_key", None)),
        receipt_lock=lock if (args.lock or not python) else None,
        jit_cache=_abs(getattr(args, "jit_cache", None)),
        jit_root=_abs(getattr(args, "jit_root", None)),
        warm_into=_abs(getattr(args, "artifact_dir", None)),
    )


def _index_from_environment() -> tuple[Path | None, str | None]:
    """Where the third-party wheels come from when nothing else says: $SGLFORGE_INDEX, the
    one setting of the offline route (docs/air-gapped.md): a local directory of wheels is a
    wheelhouse (find-links, no index), anything else an index URL."""
    chosen = os.environ.get("SGLFORGE_INDEX")
    if not chosen:
        return None, None
    local = chosen.removeprefix("file://")
    if "://" not in local:
        path = Path(local)
        if not path.is_dir():
            from sglforge.base.errors import SglforgeError

            raise SglforgeError(f"SGLFORGE_INDEX={chosen}: not a directory (of wheels)")
        return path, None
    return None, chosen


def _abs(path: Path | None) -> Path | None:
    return Path(os.path.abspath(path)) if path is not None else None


def run_smoke_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.smoke.run import dry_run_text, run_smoke

    opts = _options(args, ctx)
    if args.dry_run:
        print(dry_run_text(opts), end="")
        return 0
    _check_lock(args, opts)
    return run_smoke(opts)


def _check_lock(args: argparse.Namespace, opts) -> None:
    """The lock the run reads must exist before any stage starts (exit 2, no traceback)."""
    from sglforge.base.errors import SglforgeError

    lock = opts.receipt_lock
    if lock is None or lock.is_file():
        return
    if args.lock is not None:
        raise SglforgeError(f"--lock {args.lock}: no such file ({lock}); nothing was started")
    raise SglforgeError(
        f"{lock} does not exist: the smoke installs the wheel set it pins; nothing was started",
        hint="build first (`nox -s build` writes it), name a lock with --lock FILE, or smoke "
        "an existing environment with --python PATH",
    )


def run_doctor_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.base.findings import blocking
    from sglforge.cli.jsonout import emit, human_output_to_stderr

    with human_output_to_stderr(args.json):
        profile, findings, skipped = _doctor(args, ctx)
    errors = blocking(findings)
    if args.json:
        emit(
            "doctor",
            {
                "ok": not errors,
                "profile": profile.name,
                "errors": len(errors),
                "warnings": sum(f.level == "warning" for f in skipped + findings),
                "findings": [
                    {"check": f.check, "level": f.level, "message": f.message, "fix": f.fix}
                    for f in skipped + findings
                ],
            },
        )
    return 1 if errors else 0


def _doctor(args: argparse.Namespace, ctx):
    """The doctor's findings, printed as they are found: (profile, findings, and the
    warnings said outside them — wheels that could not be read — as findings too)."""
    from sglforge.base.errors import SglforgeError
    from sglforge.base.findings import Finding, blocking
    from sglforge.smoke import doctor
    from sglforge.smoke.install import venv_python
    from sglforge.wheel.wheelset import load_wheelset

    opts = _options(args, ctx)
    env = None
    wheelset = None
    # Warnings printed here, outside the findings; the summary counts every one printed.
    skipped: list[Finding] = []
    if opts.existing_python:
        from sglforge.smoke.environment import probe_environment

        env = probe_environment(opts.existing_python)
        python = opts.existing_python
    else:
        try:
            wheelset = load_wheelset(opts.wheels_dir, opts.lock)
        except SglforgeError as exc:
            print(
                f"[warning] wheels: {exc}\n          — arch and torch checks skipped",
                file=sys.stderr,
            )
            skipped.append(
                Finding("wheels", doctor.WARNING, str(exc), "arch and torch checks skipped")
            )
        python = venv_python(opts.reuse_venv or opts.run_dir / "venv")
    facts = doctor.gather_host_facts(opts.profile, python, env)
    if opts.tiny_model:  # the smoke generates it into the run directory
        from dataclasses import replace

        facts = replace(facts, model_exists=None)
    findings = doctor.diagnose(opts.profile, wheelset, facts)
    for finding in findings:
        print(finding.render())
    errors = blocking(findings)
    warnings = len(skipped) + sum(f.level == doctor.WARNING for f in findings)
    print(
        f"\ndoctor: {len(errors)} error(s), {warnings} warning(s) for profile {opts.profile.name}"
    )
    return opts.profile, findings, skipped


def run_tiny_model_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.smoke.tinymodel import write_tiny_model

    summary = write_tiny_model(args.dir, seed=args.seed, force=args.force, heads=args.heads)
    print(summary)
    return 0
