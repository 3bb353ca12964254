"""Verbs `lock-runtime` (lockfiles/runtime.in -> runtime.lock) and `bundle` (a release
archive for serving hosts)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lock-runtime",
        help="derive lockfiles/runtime.in from wheel metadata and resolve it "
        "into the hash-pinned lockfiles/runtime.lock (uv; needs PyPI)",
    )
    p.add_argument(
        "--metadata",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="wheels or METADATA files to derive the input from instead of wheels/ "
        "(e.g. the pinned upstreams' released wheels, before a build)",
    )
    p.add_argument(
        "--note",
        default=None,
        help="a comment for the input's generated part (where --metadata came from)",
    )
    p.add_argument(
        "--input-only", action="store_true", help="only rewrite lockfiles/runtime.in (offline)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="only say whether runtime.lock matches runtime.in (exit 1 if not)",
    )
    p.add_argument("--uv", default=None, metavar="PATH", help="the uv to run (default: on PATH)")
    p.set_defaults(func=run_lock_runtime)

    p = subparsers.add_parser(
        "bundle",
        help="write dist/<name>-<stack-version>.tar.gz: wheels, hash-pinned "
        "requirements.lock, SHA256SUMS, sglforge-stack.json, install.sh",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="local wheels for the third-party pins (repeatable); every pin in "
        "runtime.lock must have a wheel here whose sha256 the lock allows",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the archive goes (default: <project>/dist)",
    )
    p.add_argument("--name", default="sglforge-stack", help="archive name (default: %(default)s)")
    p.add_argument(
        "--stack-version",
        default=None,
        help="default: the sglang wheel's version and a digest of the pinned set",
    )
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="hash-pinned set to bundle (default: <project>/lockfiles/wheels.lock)",
    )
    p.add_argument("--wheels-dir", type=Path, default=None, help="default: <project>/wheels")
    p.add_argument(
        "--zstd",
        action="store_true",
        help="write .tar.zst (needs the zstandard package) instead of .tar.gz",
    )
    p.add_argument(
        "--sign-key",
        type=Path,
        default=None,
        metavar="KEY",
        help="SSH private key that signs the anchor (ssh-keygen -Y sign, namespace "
        "sglforge-bundle; default: the `sign-key` setting, SGLFORGE_SIGN_KEY)",
    )
    p.add_argument(
        "--jit-cache",
        type=Path,
        action="append",
        default=[],
        metavar="ARTIFACT",
        help="a JIT-cache artifact of `sglforge warm` to carry (repeatable; verified, and made "
        "for this lock): install.sh unpacks the one whose key matches the host",
    )
    p.set_defaults(func=run_bundle)


def _our_names(project) -> set[str]:
    from sglforge.base.requirements import canonical_name
    from sglforge.inputs.recipes import recipe_names

    return {canonical_name(name) for name in recipe_names(project.recipes_dir)}


def run_lock_runtime(args: argparse.Namespace, ctx) -> int:
    from sglforge.base.fs import atomic_write_text
    from sglforge.base.tomlfile import read_input_text
    from sglforge.inputs.toolchain import load_toolchain
    from sglforge.wheel import runtime
    from sglforge.wheel.wheelset import load_wheelset

    project = ctx.project
    toolchain = load_toolchain(project.toolchain)
    input_path = runtime.input_path(project)
    if args.check:
        stale = runtime.runtime_lock_is_stale(project.runtime_lock, input_path, toolchain.python)
        print(
            f"lock-runtime: {stale}"
            if stale
            else f"lock-runtime: {project.runtime_lock.name} matches {input_path.name}"
        )
        return 1 if stale else 0
    ours = _our_names(project)
    files: list[Path] = list(args.metadata or [])
    if not files and (project.wheels_dir / "manifest.json").exists():
        wheelset = load_wheelset(project.wheels_dir, project.wheels_lock)
        files = [w.file for w in wheelset.wheels]
    if files:
        metadata = [runtime.read_metadata(p) for p in files]
        missing = sorted(ours - {m.name for m in metadata})
        note = args.note or ("from --metadata" if args.metadata else "from wheels/ (built)")
        if missing:
            note += f"\nno metadata for: {', '.join(missing)} (their requirements are absent)"
        requirements = runtime.derive_requirements(
            metadata, ours, toolchain.python, toolchain.torch_public
        )
        current = read_input_text(input_path) if input_path.exists() else ""
        atomic_write_text(
            input_path,
            runtime.render_input(current, metadata, requirements, toolchain.python, note),
        )
        print(
            f"lock-runtime: wrote {input_path} ({len(requirements)} requirements from "
            f"{len(metadata)} wheels)"
        )
    elif not input_path.exists():
        from sglforge.base.errors import SglforgeError

        raise SglforgeError(
            f"{input_path} is missing and there are no built wheels",
            hint="build first (`nox -s build`) or pass --metadata FILE...",
        )
    else:
        print(f"lock-runtime: no built wheels (wheels/manifest.json); keeping {input_path.name}")
    if args.input_only:
        return 0
    version = runtime.compile_lock(
        runtime.find_uv(args.uv),
        input_path,
        project.runtime_lock,
        toolchain.python,
        ours,
        project.root,
    )
    from sglforge.base.requirements import parse_pinned

    pins, _ = parse_pinned(read_input_text(project.runtime_lock))
    print(f"lock-runtime: wrote {project.runtime_lock} ({len(pins)} pins; {version})")
    return 0


def run_bundle(args: argparse.Namespace, ctx) -> int:
    from sglforge.wheel.bundle import BundleOptions, write_bundle

    project = ctx.project
    if args.sign_key is not None:
        sign_key, origin = args.sign_key.absolute(), "--sign-key"
    else:
        settings = ctx.settings
        sign_key, origin = settings.sign_key, f"sign-key ({settings.origin('sign-key')})"
    written = write_bundle(
        project,
        BundleOptions(
            wheels_dir=args.wheels_dir or project.wheels_dir,
            lock=args.lock or project.wheels_lock,
            wheelhouses=tuple(args.wheelhouse),
            out_dir=args.out or project.root / "dist",
            name=args.name,
            stack_version=args.stack_version,
            zstd=args.zstd,
            sign_key=sign_key,
            sign_key_origin=origin,
            jit_caches=tuple(path.absolute() for path in args.jit_cache),
        ),
    )
    for member in written.jit_caches:
        print(f"bundle: JIT cache {member} (install.sh unpacks it where its key matches)")
    print(f"bundle: archive sha256 {written.archive_sha256}  {written.archive.name}")
    print(f"bundle: SHA256SUMS sha256 {written.sums_sha256} (install.sh --sha256sums)")
    print(
        f"bundle: anchor {written.anchor} ("
        + (
            f"signed: {written.signature.name}, namespace sglforge-bundle"
            if written.signature
            else "unsigned: no sign-key configured"
        )
        + f"; for Python {written.python})"
    )
    print(f"bundle: wrote {written.archive}")
    return 0
