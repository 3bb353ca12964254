"""Verbs `build`, `verify` and `build-requirements`."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sglforge.base.errors import SglforgeError
from sglforge.cli.names import check_recipes

if TYPE_CHECKING:
    from sglforge.builder.compiler_cache import CompilerCache
    from sglforge.inputs.settings import Settings

MAX_JOBS = 4096
MAX_MEM_PER_JOB = 1 << 50  # 1 PiB


def jobs_arg(text: str) -> int:
    """--jobs: a whole number of compile slots, 1..MAX_JOBS (argparse names flag and value)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected a whole number from 1 to {MAX_JOBS}"
        )
    return value


def mem_per_job_arg(text: str) -> int:
    """--mem-per-job: a positive size such as 6GiB or 512MiB, in bytes."""
    from sglforge.inputs.recipes import parse_memory

    value = parse_memory(text)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected a size like 6GiB or 512MiB"
        )
    if not 0 < value <= MAX_MEM_PER_JOB:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: must be more than 0 and at most 1 PiB"
        )
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "names",
        nargs="*",
        default=[],
        metavar="RECIPE",
        help="recipes (default: all); dependencies come along",
    )
    p.add_argument(
        "--jobs",
        type=jobs_arg,
        metavar="N",
        help="compile slots (default: min(cores, MemAvailable / mem-per-job))",
    )
    p.add_argument(
        "--mem-per-job",
        type=mem_per_job_arg,
        metavar="SIZE",
        help="memory per compile job, e.g. 6GiB (default: the recipe's)",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        metavar="DIR",
        help="local wheels for recipes built with isolation = true",
    )
    p.add_argument(
        "--target",
        metavar="NAME",
        help="build the same pins and series for targets/NAME.toml (e.g. "
        "h200-verify: sm_90a); wheels go to wheels/targets/NAME/",
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run upstream build code WITHOUT the bubblewrap sandbox, as you, "
        "with your files in reach: only for code you trust, on a host where "
        "no sandbox can be made (printed; recorded in each wheel's provenance "
        "and content key)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build", help="build wheels from recipes into wheels/")
    _common(p)
    p.add_argument(
        "--compiler-cache",
        choices=["ccache", "sccache", "none"],
        help="wrap nvcc and the host compilers with a compiler cache (overrides "
        "[compiler-cache] kind; sccache is refused for nvcc and inside a "
        "network namespace)",
    )
    p.add_argument(
        "--compiler-cache-remote",
        metavar="URL",
        help="ccache remote storage: redis://HOST[:PORT][/DB], redis+unix:SOCKET "
        "or http://HOST[:PORT][/PATH] (turns ccache on)",
    )
    p.add_argument(
        "--compiler-cache-read-only",
        action="store_true",
        default=None,
        help="read the remote cache, never write it (untrusted CI jobs)",
    )
    p.add_argument(
        "--no-wheel-cache",
        action="store_true",
        help="rebuild even when a wheel with the same content key is cached (local or remote)",
    )
    add_remote_cache_options(p)
    p.add_argument(
        "--dev",
        action="store_true",
        help="incremental build of ONE recipe: keep its tree and build directory "
        "between builds; the wheel is labelled .dev and goes to "
        "<build-root>/dev-wheels/ (verify and the smoke refuse it)",
    )
    p.add_argument(
        "--publish-dev",
        action="store_true",
        help="with --dev: write the dev wheel into wheels/ and the lock anyway",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip the stack check at the end (a CI job building part of the set; "
        "the assemble job checks the whole set)",
    )
    from sglforge.cli.jsonout import add_json_option

    add_json_option(p, "build", "the summary (wheels, caches, steps, outputs, stack check)")
    p.set_defaults(func=run_build_verb)

    p = subparsers.add_parser("verify", help="rebuild from scratch and compare sha256 per wheel")
    _common(p)
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where the rebuilt wheels go (default: a temporary directory)",
    )
    p.add_argument(
        "--from-lock",
        action="store_true",
        help="expected digests from lockfiles/wheels.lock (wheels/ need not exist); "
        "guards the shared wheel cache",
    )
    p.add_argument(
        "--trees",
        action="store_true",
        help="compile nothing: export each wheel's pin, apply its series and "
        "compare git write-tree (and each input's tree) with its provenance",
    )
    p.add_argument("--offline", action="store_true", help="with --trees: use only the source cache")
    p.set_defaults(func=run_verify_verb)

    p = subparsers.add_parser(
        "wheelhouse",
        help="download every wheel the offline sessions install into DIR (then "
        "SGLFORGE_INDEX=DIR on the air-gapped host)",
        description="On a connected host: pip download (hash-checked, for the toolchain's "
        "Python) lockfiles/sglforge.lock and lockfiles/toolchain.lock into DIR. On the "
        "air-gapped host, SGLFORGE_INDEX=DIR makes demo, build, verify, matrix, patches, "
        "check and smoke install from DIR only (docs/air-gapped.md).",
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="where the wheels go (made if missing)")
    p.add_argument(
        "--torch",
        action="store_true",
        help="also toolchain.lock [torch-deps] and [torch] (~3 GB): for recipes that "
        "build against torch",
    )
    p.add_argument(
        "--runtime",
        action="store_true",
        help="also the third-party pins of lockfiles/runtime.lock (~3.2 GB): what the "
        "smoke installs beside our wheels",
    )
    p.set_defaults(func=run_wheelhouse)

    p = subparsers.add_parser(
        "build-requirements", help="print the pinned build requirements (pip -r format)"
    )
    p.add_argument("names", nargs="*", default=[], metavar="RECIPE", help="recipes (default: all)")
    p.set_defaults(func=run_requirements)


def add_remote_cache_options(p: argparse.ArgumentParser) -> None:
    """--no-remote-cache and --remote-cache-read-only: the remote tier of the wheel cache,
    configured by `[wheel-cache] remote` / SGLFORGE_WHEEL_CACHE_REMOTE."""
    p.add_argument(
        "--no-remote-cache",
        action="store_true",
        help="do not use the remote wheel cache ([wheel-cache] remote): no request is made",
    )
    p.add_argument(
        "--remote-cache-read-only",
        action="store_true",
        help="read the remote wheel cache, never upload (untrusted jobs; also "
        "[wheel-cache] read-only, SGLFORGE_WHEEL_CACHE_READ_ONLY=1)",
    )


def check_compiler_cache(settings: Settings) -> CompilerCache | None:
    """The effective compiler cache (CLI > env > [compiler-cache]); its tool must be on PATH:
    say so before fetching anything. None: no cache."""
    from sglforge.builder.compiler_cache import resolve

    chosen = settings.compiler_cache
    origin = settings.origin("compiler-cache.kind")
    cache = resolve(chosen.kind, chosen.remote, chosen.read_only)
    if cache is not None and shutil.which(cache.kind) is None:
        where = (
            f"--compiler-cache {cache.kind}"
            if origin.startswith("cli:")
            else f"compiler-cache kind {cache.kind} ({origin})"
        )
        raise SglforgeError(
            f"{where}: '{cache.kind}' is not on PATH (checked before any work)",
            hint=f"install {cache.kind}, or build with --compiler-cache none",
        )
    return cache


def _options(args: argparse.Namespace, **extra):
    from sglforge.builder.pipeline import BuildOptions

    # --jobs and --mem-per-job are validated by argparse (jobs_arg, mem_per_job_arg).
    return BuildOptions(
        names=tuple(args.names),
        jobs=args.jobs,
        mem_per_job=args.mem_per_job,
        wheelhouse=args.wheelhouse,
        target=args.target,
        sandbox=not args.unsafe_no_sandbox,
        **extra,
    )


def run_build_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.builder import hostdeps
    from sglforge.cli.jsonout import emit, human_output_to_stderr
    from sglforge.cli.names import select_recipes

    project = ctx.project
    check_recipes(args.names, project.recipes_dir)
    cache = check_compiler_cache(ctx.settings)  # before any fetch or build step
    from sglforge.base.fs import check_writable

    check_writable(
        ctx.settings.build_root, f"build root ({ctx.settings.origin('build-root')})"
    )  # as the preflight does: a read-only root is refused before any work
    hostdeps.check(select_recipes(project, args.names).host_requires)
    if args.publish_dev and not args.dev:
        raise SglforgeError("--publish-dev is for dev builds: add --dev RECIPE")
    if args.dev:
        from sglforge.builder.devtree import check_dev_names

        check_dev_names(tuple(args.names))
    options = _options(
        args,
        compiler_cache=cache,
        use_wheel_cache=not args.no_wheel_cache,
        use_remote_cache=not args.no_remote_cache,
        remote_read_only=args.remote_cache_read_only,
        dev=args.dev,
        publish_dev=args.publish_dev,
    )
    document: dict = {}
    with human_output_to_stderr(args.json):
        status = _build_and_check(args, ctx, options, document)
    if args.json:
        emit("build", {"ok": status == 0, **document})
    return status


def _build_and_check(args: argparse.Namespace, ctx, options, document: dict) -> int:
    """Build, print the summary and what was written, then the stack check; `document`
    is filled with the same as `build --json`'s body."""
    from sglforge.base.buildroot import BuildRoot
    from sglforge.builder.pipeline import run_build, summarize, summary_document

    project = ctx.project
    report = run_build(project, ctx.settings, options)
    print(summarize(report))
    document.update(summary_document(report), target=args.target, dev=args.dev, check=None)
    root = BuildRoot(ctx.settings.build_root)
    if args.dev and not args.publish_dev:
        document["outputs"] = {"manifest": str(root.dev_wheels / "manifest.json"), "lock": None}
        print(
            f"wrote {root.dev_wheels / 'manifest.json'} (dev build: wheels/ and the lock unchanged)"
        )
        return 0
    if args.target:
        from sglforge.builder.pipeline import target_wheels_dir

        manifest = target_wheels_dir(project, args.target) / "manifest.json"
        document["outputs"] = {"manifest": str(manifest), "lock": None}
        did = "wrote" if report.written else "unchanged:"
        print(
            f"{did} {manifest} (target {args.target}: wheels/ and the lock unchanged; stack "
            "check not run)"
        )
        return 0
    document["outputs"] = {
        "manifest": str(project.wheels_dir / "manifest.json"),
        "lock": str(project.wheels_lock),
    }
    print(_outputs_line(report.written, project))
    if args.no_check:
        print("stack check skipped (--no-check)")
        return 0
    from sglforge.cli.check import check_or_fail

    # the published set must fit together (DESIGN "Coherence"); a no-op reuses the last result
    document["check"] = {}
    return check_or_fail(project, reuse=root.check_result, outcome=document["check"])


def _outputs_line(written: list[Path], project) -> str:
    """What publishing changed: `wrote …` only for files it wrote (a no-op writes none)."""
    outputs = (project.wheels_dir / "manifest.json", project.wheels_lock)
    if not written:
        return f"{outputs[0]} and {outputs[1]} unchanged (no wheel was rebuilt or copied)"
    wheels = [p for p in written if p.suffix == ".whl"]
    files = [str(p) for p in outputs if p in written]
    parts = ([f"{len(wheels)} wheel(s) into {project.wheels_dir}"] if wheels else []) + files
    unchanged = [str(p) for p in outputs if p not in written]
    return f"wrote {', '.join(parts)}" + (
        f" ({', '.join(unchanged)} unchanged)" if unchanged else ""
    )


def run_verify_verb(args: argparse.Namespace, ctx) -> int:
    from sglforge.builder.verify import render, run_verify

    check_recipes(args.names, ctx.project.recipes_dir)
    if args.trees:
        from sglforge.builder.verify import check_trees, render_trees

        checked = check_trees(
            ctx.project,
            ctx.settings,
            tuple(args.names),
            from_lock=args.from_lock,
            offline=args.offline,
            target=args.target,
        )
        print(render_trees(checked))
        bad = [r for r in checked if not r.ok]
        print(
            f"verify --trees: {len(checked) - len(bad)} of {len(checked)} source tree(s) "
            "as recorded"
        )
        return 1 if bad else 0
    out = args.out or Path(tempfile.mkdtemp(prefix="sglforge-verify-"))
    results = run_verify(ctx.project, ctx.settings, _options(args), out, from_lock=args.from_lock)
    print(render(results))
    bad = [r for r in results if not r.ok]
    if bad:
        print(
            f"verify: {len(bad)} of {len(results)} wheel(s) are not reproducible "
            f"(rebuilt wheels in {out})"
        )
        return 1
    print(f"verify: all {len(results)} wheel(s) rebuilt bit-identical")
    if args.out is None:  # nothing to look at: drop the temporary rebuilds
        from sglforge.base.fs import remove_tree

        remove_tree(out)
    return 0


def run_wheelhouse(args: argparse.Namespace, ctx) -> int:
    from sglforge.builder.wheelhouse import write_wheelhouse

    checkout = Path(__file__).resolve().parents[3]  # this sglforge's lockfiles/sglforge.lock
    dest = args.dir.resolve()
    for line in write_wheelhouse(
        ctx.project.root, checkout, dest, torch=args.torch, runtime=args.runtime
    ):
        print(f"wheelhouse: {line}")
    print(
        f"wrote {dest}\nthen, on the host without an index:  SGLFORGE_INDEX={dest} nox -s demo"
        " (or build, smoke, ...)"
    )
    return 0


def run_requirements(args: argparse.Namespace, ctx) -> int:
    from sglforge.inputs.pins import parse_lockfile
    from sglforge.inputs.recipes import load_recipes, select
    from sglforge.inputs.toolchain import load_toolchain

    project = ctx.project
    check_recipes(args.names, project.recipes_dir)
    lock = parse_lockfile(project.lockfile)
    toolchain = load_toolchain(project.toolchain)
    recipes = load_recipes(project.recipes_dir, lock, toolchain)
    names = select(recipes, args.names)
    requires = sorted({r for n in names for r in recipes[n].build_requires})
    print(f"# build requirements of {', '.join(names)} (from {project.toolchain.name})")
    if toolchain.torch_index and any(r.lower() == "torch" for r in requires):
        # Not an --extra-index-url line: pip would then take torch from whichever index
        # offers it. `nox -s build` installs lockfiles/toolchain.lock section by section
        # with --index-url and --require-hashes instead.
        print(
            f"# torch: only from {toolchain.torch_index} (lockfiles/toolchain.lock [torch]);"
            f"\n# torch=={toolchain.torch_public}: the {toolchain.torch} build (PyPI has no "
            "local labels); the build checks the installed torch/version.py"
        )
    for line in toolchain.requirements(requires) if requires else []:
        # torch==2.13.0+cu130 exists on the cu130 index only; ==2.13.0 matches it there too
        print(f"torch=={toolchain.torch_public}" if line == f"torch=={toolchain.torch}" else line)
    return 0
