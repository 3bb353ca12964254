"""`sglforge check`: the stack check over wheels/ + manifest.json and lockfiles/runtime.lock."""

from __future__ import annotations

import argparse
from pathlib import Path

from sglforge.cli.jsonout import add_json_option, emit, human_output_to_stderr


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check",
        help="offline stack check: requirements resolve, SGLang's kernel API names "
        "exist, labels match pins, Python/torch ABI",
    )
    p.add_argument(
        "--wheels",
        type=Path,
        default=None,
        metavar="DIR",
        help="wheel directory with manifest.json (default: wheels/)",
    )
    p.add_argument(
        "--runtime-lock",
        type=Path,
        default=None,
        metavar="FILE",
        help="third-party pins (default: lockfiles/runtime.lock)",
    )
    p.add_argument(
        "--waivers",
        type=Path,
        default=None,
        metavar="FILE",
        help="API waivers (default: lockfiles/api-waivers.toml)",
    )
    p.add_argument(
        "--python",
        default=None,
        metavar="X.Y",
        type=_major_minor,
        help="serving Python (default: python in lockfiles/toolchain.toml)",
    )
    p.add_argument(
        "--torch",
        default=None,
        metavar="VERSION",
        help="serving torch (default: torch in lockfiles/toolchain.toml)",
    )
    p.add_argument(
        "--gpu",
        default=None,
        metavar="CC[,CC]",
        type=_devices,
        help="also check that every wheel's device code runs on GPUs of these compute "
        "capabilities (e.g. 12.0,12.1: RTX PRO 6000 and DGX Spark), from the SASS and PTX "
        "each ELF carries (needs cuobjdump)",
    )
    add_json_option(p, "check", "the result")
    p.set_defaults(func=run_check_verb)


def _major_minor(value: str) -> str:
    import re

    if not re.fullmatch(r"[0-9]+\.[0-9]+", value):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR like 3.12, got {value!r}")
    return value


def _devices(value: str) -> tuple[str, ...]:
    from sglforge.base.errors import SglforgeError
    from sglforge.wheel.audit import parse_devices

    try:
        return parse_devices(value)
    except SglforgeError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--gpu {value!r}: ")) from None


def check_or_fail(
    project, *, reuse: Path | None = None, outcome: dict | None = None, **options
) -> int:
    """Run the check, print the report; 0 when the stack fits, else 1 (`check`, `build`).

    `reuse` (build only): a file keeping the last result; when nothing the check reads has
    changed since (check/cache.py), that result is printed instead of checking again.
    `outcome` (build --json) is filled with `ok`, `reused` and the `report` printed."""
    from sglforge.check.run import CheckOptions, render, run_check

    key = None
    if reuse is not None and not options:
        from sglforge.check import cache

        key = cache.inputs_digest(project)
        hit = cache.lookup(reuse, key)
        if hit is not None:
            print(
                hit[1] + "\n(stack check: inputs unchanged since the last check; its "
                "result reused)",
                flush=True,
            )
            if outcome is not None:
                outcome.update(ok=bool(hit[0]), reused=True, report=hit[1])
            return 0 if hit[0] else 1
    result = run_check(project, CheckOptions(**options))
    report = render(result)
    print(report, flush=True)
    if outcome is not None:
        outcome.update(ok=result.ok, reused=False, report=report)
    if key is not None:
        from sglforge.check import cache

        cache.store(reuse, key, result.ok, report)
    return 0 if result.ok else 1


def run_check_verb(args: argparse.Namespace, ctx) -> int:
    options = dict(
        wheels_dir=args.wheels,
        runtime_lock=args.runtime_lock,
        waivers=args.waivers,
        python=args.python,
        torch=args.torch,
    )
    if args.gpu:
        options["gpus"] = args.gpu
    if not args.json:
        return check_or_fail(ctx.project, **options)
    from sglforge.check.run import CheckOptions, document, render, run_check

    with human_output_to_stderr(True):
        result = run_check(ctx.project, CheckOptions(**options))
        print(render(result))
    emit("check", document(result))
    return 0 if result.ok else 1
