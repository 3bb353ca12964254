"""Verbs `receipt verify` (does a qualification receipt belong to exactly these wheels?) and
`reference compare` (judge a run's recorded observations against a reference, offline, by the
same rules as `smoke --reference`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "receipt", help="qualification receipts: `receipt verify RECEIPT --wheels DIR`"
    )
    p.add_argument("action", choices=["verify"], help="verify: check RECEIPT against wheel files")
    p.add_argument("receipt", type=Path, metavar="RECEIPT", help="a smoke run's receipt.json")
    p.add_argument(
        "--wheels",
        type=Path,
        action="append",
        default=[],
        required=True,
        metavar="DIR",
        help="directory of the wheels to check (repeatable); every "
        "wheel there must be one the receipt names, with its bytes",
    )
    p.add_argument(
        "--allowed-signers",
        type=Path,
        default=None,
        metavar="FILE",
        help="ssh-keygen allowed_signers file: the receipt's .sig must verify",
    )
    p.add_argument(
        "--identity",
        default="sglforge",
        help="signer identity in the allowed_signers file (default sglforge)",
    )
    p.set_defaults(func=run_receipt_verify)

    p = subparsers.add_parser(
        "reference",
        help="`reference compare --reference REF --observed RUN`: judge a "
        "recorded run against a reference with a profile's thresholds",
    )
    p.add_argument(
        "action",
        choices=["compare"],
        help="compare: judge recorded observations against a reference",
    )
    p.add_argument(
        "--reference",
        type=Path,
        required=True,
        metavar="FILE",
        help="a reference written by smoke --record-reference",
    )
    p.add_argument(
        "--observed",
        type=Path,
        required=True,
        metavar="FILE",
        help="a run's observations (reference-observed.json, or a reference "
        "recorded by --record-reference)",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="profile whose [checks] reference-* thresholds apply (default: the built-in defaults)",
    )
    p.set_defaults(func=run_reference_compare)


def run_receipt_verify(args: argparse.Namespace, ctx) -> int:
    from sglforge.qualification.receipt import verify_receipt

    done = verify_receipt(
        args.receipt,
        tuple(args.wheels),
        allowed_signers=args.allowed_signers,
        identity=args.identity,
    )
    data = done.receipt.data
    signed = (
        f", signature by {done.signed_by!r} verified"
        if done.signed_by
        else (
            ", signed (not checked: no --allowed-signers)"
            if done.receipt.signature
            else ", unsigned"
        )
    )
    print(
        f"receipt {args.receipt}: wheel set {done.receipt.digest[:16]}… = exactly the "
        f"{len(done.files)} wheels in {', '.join(map(str, args.wheels))}{signed}; result "
        f"{data.get('result')}, gates passed: {data.get('gates_passed')}"
    )
    return 0


def run_reference_compare(args: argparse.Namespace, ctx) -> int:
    from sglforge.base.errors import SglforgeError
    from sglforge.qualification import reference
    from sglforge.qualification.qualprofile import ReferenceSpec
    from sglforge.smoke.profile import load_profile, resolve_profile_path

    spec = ReferenceSpec(top_k=5, min_top1=1.0, min_topk_overlap=1.0, max_logprob_diff=0.02)
    if args.profile:
        project = ctx.project
        spec = load_profile(
            resolve_profile_path(project.profiles_dir, args.profile), project.root
        ).reference
    ref = reference.load_reference(args.reference)
    observed = reference.load_reference(args.observed)
    by_prompt = {g.prompt: g for g in observed.generations}
    missing = [g.prompt for g in ref.generations if g.prompt not in by_prompt]
    if missing:
        raise SglforgeError(
            f"{args.observed}: has no observation for {len(missing)} of the "
            f"reference's prompts (first: {missing[0][:40]!r})"
        )
    result = reference.compare(
        ref, tuple(by_prompt[g.prompt] for g in ref.generations), spec, observed.model
    )
    print(f"reference {'pass' if result.passed else 'FAIL'}: {result.detail}")
    return 0 if result.passed else 1
