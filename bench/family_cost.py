"""Compile cost and kernel evidence of sglang-kernel's family target (`sm_120f`) against the
arch-specific one (`sm_120a`), on real TUs (issue 36 item 1).

Measurement helper (not product code). Input: the exact nvcc command lines of a few TUs, as a
real configure of recipes/sglang-kernel.toml wrote them (`ninja -t compdb` of the build
directory; `--extract`), with `-gencode=arch=compute_120f,code=sm_120f` (the recipe's list).
The sm_120a command is the same line with that one flag as the previous recipe made it
(`-gencode=arch=compute_120a,code=sm_120a`; patches/sglang-kernel/0001 writes one flag per
arch) and its own output name. `--run` compiles each TU for both, all at once, one core each
(old and new of a TU side by side, so load affects both alike), and records per object:
seconds, size, the cubins `cuobjdump --list-elf` names, the arch-conditional stubs the arch
audit finds (`sglforge.wheel.audit.stubs`), and the MMA instructions of its SASS by opcode
(`cuobjdump -sass`; needs nvdisasm), so real kernels and stubs can be told apart. Writes JSON.

    python bench/family_cost.py --extract COMPDB --out cmds.json TU-SUBSTRING...
    python bench/family_cost.py --run cmds.json --workdir DIR --out result.json
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

FAMILY = "-gencode=arch=compute_120f,code=sm_120f"
SPECIFIC = "-gencode=arch=compute_120a,code=sm_120a"
MMA = re.compile(r"\b([A-Z]*MMA)(\.[A-Z0-9_.]+)?\b")
FUNCTION = re.compile(r"^\s*Function : (\S+)")


def extract(compdb: Path, wanted: list[str]) -> list[dict]:
    """The common_ops_sm100_build entries (the variant sglforge builds) whose file contains
    one of `wanted`, in that order."""
    entries = json.loads(compdb.read_text())
    chosen = []
    for needle in wanted:
        for e in entries:
            if needle in e["file"] and "common_ops_sm100_build" in e["output"]:
                if FAMILY not in e["command"]:
                    sys.exit(f"{e['file']}: no {FAMILY} in its command")
                chosen.append({"file": e["file"], "output": e["output"], "command": e["command"]})
                break
        else:
            sys.exit(f"no common_ops_sm100_build entry for {needle!r}")
    return chosen


def _variant(entry: dict, arch: str) -> list[str]:
    words = shlex.split(entry["command"])
    out = f"{entry['output']}.{arch}.o"
    words = [SPECIFIC if (w == FAMILY and arch == "sm_120a") else w for w in words]
    words[words.index("-o") + 1] = out
    words[words.index("-MF") + 1] = out + ".d"
    return words


def _compile(words: list[str], workdir: Path, timeout: int) -> dict:
    out = workdir / words[words.index("-o") + 1]
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(
            words, cwd=workdir, capture_output=True, text=True, timeout=timeout, check=False
        )
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = None, f"timed out after {timeout} s"
    return {
        "seconds": round(time.monotonic() - start, 1),
        "rc": rc,
        "log_tail": tail,
        "object": str(out),
    }


def _evidence(obj: Path, cuobjdump: str) -> dict:
    from sglforge.wheel import audit

    listing = subprocess.run(
        [cuobjdump, "--list-elf", str(obj)], capture_output=True, text=True, check=False
    )
    found = audit.stubs(Path(cuobjdump), obj)
    counts: collections.Counter = collections.Counter()
    kernels, kernels_with_mma, current, has_mma = 0, 0, None, False
    with subprocess.Popen(
        [cuobjdump, "-sass", str(obj)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    ) as proc:
        for line in proc.stdout:
            match = FUNCTION.match(line)
            if match:
                kernels += 1
                kernels_with_mma += has_mma
                current, has_mma = match.group(1), False
                continue
            if current is not None:
                for op, _ in MMA.findall(line):
                    counts[op] += 1
                    has_mma = True
        sass_error = proc.stderr.read().strip()[-300:]
    kernels_with_mma += has_mma
    return {
        "sass": "ok" if proc.returncode == 0 else f"cuobjdump -sass failed: {sass_error}",
        "bytes": obj.stat().st_size,
        "cubins": re.findall(r"\S+\.cubin", listing.stdout),
        "functions": kernels,
        "functions_with_mma": kernels_with_mma,
        "mma_by_opcode": dict(sorted(counts.items())),
        "stubs": [
            {
                "cubin": s.cubin,
                "arch": s.arch,
                "fatal": s.fatal,
                "messages": list(s.messages),
                "kernels": len(s.kernels),
                "kernel_sample": [k[:200] for k in s.kernels[:5]],
            }
            for s in found
        ],
    }


def run(
    cmds: Path, workdir: Path, out: Path, timeout: int, cuobjdump: str, jobs_at_once: int
) -> None:
    entries = json.loads(cmds.read_text())
    jobs = [(e, arch) for e in entries for arch in ("sm_120a", "sm_120f")]
    nvcc = (
        subprocess.run(
            [shlex.split(entries[0]["command"])[0], "--version"],
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.strip()
        .splitlines()
    )
    with concurrent.futures.ThreadPoolExecutor(jobs_at_once or len(jobs)) as pool:
        results = list(pool.map(lambda j: _compile(_variant(*j), workdir, timeout), jobs))
    rows = []
    for (entry, arch), result in zip(jobs, results):
        row = {
            "file": entry["file"],
            "arch": arch,
            "command": shlex.join(_variant(entry, arch)),
            **result,
        }
        if result["rc"] == 0:
            row.update(_evidence(Path(result["object"]), cuobjdump))
        rows.append(row)
    by_file = collections.defaultdict(dict)
    for row in rows:
        if row["rc"] == 0:
            by_file[row["file"]][row["arch"]] = row["seconds"]
    ratios = {f: round(v["sm_120f"] / v["sm_120a"], 3) for f, v in by_file.items() if len(v) == 2}
    out.write_text(
        json.dumps(
            {
                "host": {
                    "node": platform.node(),
                    "cpus": os.cpu_count(),
                    "machine": platform.machine(),
                    "cpu_model": next(
                        (
                            ln.split(":", 1)[1].strip()
                            for ln in Path("/proc/cpuinfo").read_text().splitlines()
                            if ln.startswith("model name")
                        ),
                        None,
                    ),
                },
                "nvcc": nvcc[-2:],
                "concurrency": f"{jobs_at_once or len(jobs)} compiles at once (nvcc --threads=1), in the "
                "order old, new per TU",
                "cpath": os.environ.get("CPATH"),
                "rows": rows,
                "ratio_family_over_specific": ratios,
            },
            indent=1,
        )
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extract", type=Path)
    parser.add_argument("--run", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path.cwd())
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=int, default=480)
    parser.add_argument("--cuobjdump", default="cuobjdump")
    parser.add_argument("--jobs", type=int, default=0, help="compiles at once (0: all)")
    parser.add_argument("tus", nargs="*")
    args = parser.parse_args()
    if args.extract:
        args.out.write_text(json.dumps(extract(args.extract, args.tus), indent=1) + "\n")
    elif args.run:
        run(args.run, args.workdir, args.out, args.timeout, args.cuobjdump, args.jobs)
    else:
        parser.error("--extract or --run")


if __name__ == "__main__":
    main()
