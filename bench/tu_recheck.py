"""Recompile a finished build's translation units without the compiler cache, by parts.

Measurement helper (not product code): a whole `sglforge verify` of a recipe with hundreds of
C++ TUs (tilelang: 683, ~4.2 CPU-hours) does not fit a session on a 2-core host, and it cannot
resume: it wipes its build root. This checks the compile step one TU at a time instead, so it
can stop at any point and go on in a later session:

  for each entry of <build dir>/compile_commands.json (or `ninja -t compdb`), in a fixed
  shuffled order, run its exact command in its directory with the build's environment (the
  `# env` lines of the build log, plus CCACHE_DISABLE=1), in place (the build's object moved
  aside and put back after: nvcc writes the output's name into the object), and compare the
  bytes with the object the build linked; one JSON line per TU in --results. TUs already in
  --results are skipped.

With a compiler-cache rebuild that was bit-identical (which covers linking, post-processing
and packaging), every TU here identical means the uncached build gives the same objects.

    python bench/tu_recheck.py --build-dir BUILD --log BUILD_ROOT/logs/RECIPE.log \
        --results FILE [--jobs 2] [--limit N] [--seed 0]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import hashlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path


def build_environment(log: Path) -> dict[str, str]:
    """The environment the build ran with (sglforge writes it as `# env K=V` lines at the top
    of the recipe's log), with the compiler cache off."""
    env: dict[str, str] = {}
    key = None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("$ "):  # the header ends at the first command
            break
        if line.startswith("# env "):
            key, _, value = line[len("# env ") :].partition("=")
            # `\\` and `\n` escapes (compiler_cache.mask_env_lines)
            env[key] = re.sub(r"\\([\\n])", lambda m: "\n" if m[1] == "n" else "\\", value)
        elif key is not None and not line.startswith("#"):
            # a log from before the escapes: a value's further lines follow as they are
            env[key] += "\n" + line
    if "PATH" not in env:
        sys.exit(f"error: {log}: no `# env PATH=...` line: not an sglforge build log")
    env["CCACHE_DISABLE"] = "1"
    return env


BACKUP = ".tu-recheck-orig"  # the build's object, moved aside while its TU recompiles


def backup_of(recorded: Path) -> Path:
    return recorded.with_name(recorded.name + BACKUP)


def restore_interrupted(entries: list[dict]) -> int:
    """Put back the build's objects a killed run left moved aside; returns how many."""
    restored = 0
    for entry in entries:
        recorded = Path(entry["directory"], entry["output"])
        if backup_of(recorded).is_file():
            os.replace(backup_of(recorded), recorded)
            restored += 1
    return restored


def compile_entries(build_dir: Path) -> list[dict]:
    """The build's compile commands: CMake's compile_commands.json, else (a build that did not
    export it, e.g. sgl-kernel's) `ninja -t compdb`, keeping the compiles whose object the
    build made (targets left out of the build, EXCLUDE_FROM_ALL, have none)."""
    exported = build_dir / "compile_commands.json"
    if exported.is_file():
        return json.loads(exported.read_text())
    run = subprocess.run(
        ["ninja", "-C", str(build_dir), "-t", "compdb"], check=False, capture_output=True, text=True
    )
    if run.returncode != 0:
        sys.exit(
            f"error: {build_dir}: no compile_commands.json and `ninja -t compdb` failed: "
            f"{run.stderr.strip()[-300:]}"
        )
    return [
        e
        for e in json.loads(run.stdout)
        if " -c " in e["command"]
        and e.get("output", "").endswith(".o")
        and (
            Path(e["directory"], e["output"]).is_file()
            or backup_of(Path(e["directory"], e["output"])).is_file()
        )
    ]


def recheck(entry: dict, env: dict[str, str]) -> dict:
    """Recompile one TU in place (nvcc writes its output's name into the object, so a scratch
    path would differ by that alone): the build's object is moved aside, the exact command
    writes a new one, the bytes are compared, and the build's object is always put back."""
    directory = entry["directory"]
    recorded = Path(directory, entry["output"])
    result = {"file": entry["file"], "output": entry["output"]}
    try:
        old = recorded.read_bytes()
        os.replace(recorded, backup_of(recorded))
    except OSError as error:
        result.update(status="error", error=str(error))
        return result
    try:
        start = time.monotonic()
        run = subprocess.run(
            shlex.split(entry["command"]),
            cwd=directory,
            env=env,
            check=False,
            capture_output=True,
            text=True,
        )
        result["seconds"] = round(time.monotonic() - start, 1)
        if run.returncode != 0:
            result.update(status="compile-failed", stderr=run.stderr[-2000:])
            return result
        new = recorded.read_bytes()
        result.update(
            sha256=hashlib.sha256(new).hexdigest(),
            size=len(new),
            status="identical" if new == old else "differs",
        )
        if new != old:
            result["recorded_sha256"] = hashlib.sha256(old).hexdigest()
    except OSError as error:
        result.update(status="error", error=str(error))
    finally:
        os.replace(backup_of(recorded), recorded)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="stop after N new TUs (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # one run per results file: a second would redo the same TUs and write them twice
    # held (flock) until the process exits: no `with`
    lock = open(args.results.with_name(args.results.name + ".lock"), "w")  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"error: another tu_recheck is writing {args.results}")
    entries = compile_entries(args.build_dir)
    random.Random(args.seed).shuffle(entries)
    done = set()
    if args.results.exists():
        for line in args.results.read_text().splitlines():
            if line.strip():
                done.add(json.loads(line)["file"])
    todo = [e for e in entries if e["file"] not in done]
    if args.limit:
        todo = todo[: args.limit]
    env = build_environment(args.log)
    if restore_interrupted(entries):
        print("restored the build's objects an interrupted run had moved aside", flush=True)
    print(
        f"{len(entries)} TUs, {len(done)} already checked, {len(todo)} to do ({args.jobs} job(s))",
        flush=True,
    )
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, args.results.open("a") as out:
        for result in pool.map(lambda e: recheck(e, env), todo):
            out.write(json.dumps(result, sort_keys=True) + "\n")
            out.flush()
            print(
                f"{result['status']:>14}  {result.get('seconds', '-')}s  {result['file']}",
                flush=True,
            )
    latest = {}  # per TU, its last result
    for x in args.results.read_text().splitlines():
        if x.strip():
            line = json.loads(x)
            latest[line["file"]] = line
    counts: dict[str, int] = {}
    for line in latest.values():
        counts[line["status"]] = counts.get(line["status"], 0) + 1
    print(f"checked {len(latest)} of {len(entries)}: {counts}")
    return 0 if set(counts) <= {"identical"} else 1


if __name__ == "__main__":
    sys.exit(main())
