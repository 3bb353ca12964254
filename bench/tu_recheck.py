"""Recompile a finished build's translation units without the compiler cache, by parts.

Measurement helper (not product code): a whole `sglforge verify` of a recipe with hundreds of
C++ TUs (tilelang: 683, ~4.2 CPU-hours) does not fit a session on a 2-core host, and it cannot
resume: it wipes its build root. This checks the compile step one TU at a time instead, so it
can stop at any point and go on in a later session:

  for each entry of <build dir>/compile_commands.json, in a fixed shuffled order, run its exact
  command in its directory with the build's environment (the `# env` lines of the build log,
  plus CCACHE_DISABLE=1), writing the object to a scratch path instead of the build's, and
  compare the bytes with the object the build linked; one JSON line per TU in --results.
  TUs already in --results are skipped.

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
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build_environment(log: Path) -> dict[str, str]:
    """The environment the build ran with (sglforge writes it as `# env K=V` lines at the top
    of the recipe's log), with the compiler cache off."""
    env = {}
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("# env "):
            key, _, value = line[len("# env "):].partition("=")
            env[key] = value
    if "PATH" not in env:
        sys.exit(f"error: {log}: no `# env PATH=...` line: not an sglforge build log")
    env["CCACHE_DISABLE"] = "1"
    return env


def scratch_command(command: str, directory: str, output: str, scratch: str) -> list[str]:
    """The entry's argv with its `-o OUTPUT` pointed at the scratch file (exactly one; the
    command may name the output relative to the entry's directory)."""
    argv = shlex.split(command)
    target = os.path.normpath(os.path.join(directory, output))
    places = [i for i, arg in enumerate(argv[:-1])
              if arg == "-o" and os.path.normpath(os.path.join(directory, argv[i + 1])) == target]
    if len(places) != 1:
        raise ValueError(f"expected one `-o {output}` in the command, found {len(places)}")
    argv[places[0] + 1] = scratch
    return argv


def recheck(entry: dict, env: dict[str, str], scratch_dir: str) -> dict:
    directory = entry["directory"]
    output = entry.get("output") or entry["command"].split(" -o ", 1)[1].split()[0]
    recorded = Path(directory, output)
    with tempfile.NamedTemporaryFile(dir=scratch_dir, suffix=".o", delete=False) as handle:
        scratch = handle.name
    result = {"file": entry["file"], "output": output}
    try:
        argv = scratch_command(entry["command"], directory, output, scratch)
        start = time.monotonic()
        run = subprocess.run(argv, cwd=directory, env=env, capture_output=True, text=True)
        result["seconds"] = round(time.monotonic() - start, 1)
        if run.returncode != 0:
            result.update(status="compile-failed", stderr=run.stderr[-2000:])
            return result
        new, old = Path(scratch).read_bytes(), recorded.read_bytes()
        result.update(sha256=hashlib.sha256(new).hexdigest(), size=len(new),
                      status="identical" if new == old else "differs")
        if new != old:
            result["recorded_sha256"] = hashlib.sha256(old).hexdigest()
    except (OSError, ValueError) as error:
        result.update(status="error", error=str(error))
    finally:
        Path(scratch).unlink(missing_ok=True)
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
    lock = open(args.results.with_name(args.results.name + ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"error: another tu_recheck is writing {args.results}")
    entries = json.loads((args.build_dir / "compile_commands.json").read_text())
    random.Random(args.seed).shuffle(entries)
    done = set()
    if args.results.exists():
        for line in args.results.read_text().splitlines():
            if line.strip():
                done.add(json.loads(line)["file"])
    todo = [e for e in entries if e["file"] not in done]
    if args.limit:
        todo = todo[:args.limit]
    env = build_environment(args.log)
    print(f"{len(entries)} TUs, {len(done)} already checked, {len(todo)} to do "
          f"({args.jobs} job(s))", flush=True)
    with tempfile.TemporaryDirectory(prefix="tu-recheck-") as scratch_dir, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, \
            args.results.open("a") as out:
        for result in pool.map(lambda e: recheck(e, env, scratch_dir), todo):
            out.write(json.dumps(result, sort_keys=True) + "\n")
            out.flush()
            print(f"{result['status']:>14}  {result.get('seconds', '-')}s  {result['file']}",
                  flush=True)
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
