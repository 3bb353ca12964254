"""Issue 34 item 5: bench/coldstart-h200.json from the smoke reports of one H200 visit.

    python bench/coldstart.py OUT.json empty=RUN_DIR artifact=RUN_DIR second_start=RUN_DIR \
        [NAME=RUN_DIR ...] [--home NAME=DIR ...] [--rootdiff JSON] [--importtime TXT] [--note TEXT]

Each RUN_DIR holds the smoke-report.json of one start (bench/h200-kit/cs-chain.sh): `empty` is
`sglforge warm` (every JIT root empty, fresh run directory and HOME), `artifact` a smoke with
`--jit-cache` (fresh run directory, HOME and processes; caches only from the artifact),
`second_start` a smoke over the caches the artifact run left. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

GOAL_S, GOAL_RATIO = 30.0, 0.3


def run_record(run_dir: Path) -> dict:
    report = json.loads((run_dir / "smoke-report.json").read_text())
    startup = report.get("startup") or {}
    servers = {}
    for role, record in (startup.get("servers") or {}).items():
        servers[role] = {
            "ready_s": record.get("ready_s"),
            "phases": record.get("phases"),
            "after_last_marker_s": record.get("after_last_marker"),
            "markers": record.get("markers"),
        }
    jit = dict(report.get("jit_cache") or {})
    jit.pop("key", None)
    return {
        "ready_s": startup.get("ready_s"),
        "result": report.get("result"),
        "failure": report.get("failure"),
        "router_s": startup.get("router_s"),
        "readiness": report.get("readiness"),
        "servers": servers,
        "stages_s": {s["name"]: s["seconds"] for s in report.get("stages", [])},
        "checks": {c["name"]: c["passed"] for c in report.get("checks", [])},
        "jit_cache": jit,
        "run_dir": str(run_dir),
    }


def home_files(home: Path, limit: int = 40) -> list[str]:
    found = []
    for folder, _, names in os.walk(home):
        for name in names:
            found.append(str(Path(folder, name).relative_to(home)))
    found.sort()
    return found[:limit] + ([f"... {len(found) - limit} more"] if len(found) > limit else [])


def main(argv: list[str]) -> int:
    out, runs, homes, notes, extra = Path(argv[0]), {}, {}, [], {}
    words = iter(argv[1:])
    for word in words:
        if word == "--home":
            name, _, folder = next(words).partition("=")
            homes[name] = home_files(Path(folder))
        elif word == "--note":
            notes.append(next(words))
        elif word == "--rootdiff":  # what the artifact run changed in its root
            extra["artifact_root_after_run"] = json.loads(Path(next(words)).read_text())
        elif word == "--importtime":  # python -X importtime, largest cumulative first
            extra["importtime_top"] = Path(next(words)).read_text().splitlines()
        else:
            name, _, folder = word.partition("=")
            runs[name] = run_record(Path(folder))
    first = json.loads((Path(runs["empty"]["run_dir"]) / "smoke-report.json").read_text())
    artifact = dict(first.get("jit_cache") or {})
    empty, art = runs["empty"].get("ready_s"), runs.get("artifact", {}).get("ready_s")
    ratio = round(art / empty, 3) if empty and art else None
    document = {
        "format": 1,
        "generated_by": "bench/coldstart.py from bench/h200-kit/cs1.sh, cs2.sh (issue 34 item 5)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": first.get("profile"),
        "host": first.get("host"),
        "versions": first.get("versions"),
        "artifact": {
            k: artifact.get(k)
            for k in (
                "artifact",
                "artifact_sha256",
                "files",
                "bytes",
                "pack_s",
                "key",
                "key_digest",
            )
        },
        "runs": runs,
        "goal": {
            "artifact_ready_s_max": GOAL_S,
            "ratio_max": GOAL_RATIO,
            "ratio": ratio,
            "met": bool(
                art is not None and ratio is not None and art <= GOAL_S and ratio <= GOAL_RATIO
            ),
        },
        "home_after": homes,
        **extra,
        "notes": notes,
    }
    out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(json.dumps(document["goal"]), {k: v.get("ready_s") for k, v in runs.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
