"""`smoke-report.json` (machine-readable) and `smoke-summary.txt` (for people).

The report is written whatever happens — pass, failed check, dead server, deadline, Ctrl-C —
so a failed smoke leaves as much evidence as a passing one.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sglforge.base.findings import Finding
from sglforge.base.fs import atomic_write_text
from sglforge.qualification.results import CheckResult

REPORT_NAME = "smoke-report.json"
SUMMARY_NAME = "smoke-summary.txt"
SCHEMA = 1


@dataclass(frozen=True)
class Stage:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class Failure:
    stage: str
    message: str
    process: str | None = None  # role of the process that failed, if one did
    exit: str | None = None
    log: str | None = None
    log_tail: str | None = None


@dataclass
class SmokeReport:
    profile: str
    profile_path: str
    model: str
    backend: str
    run_dir: str
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    result: str = "running"  # pass | fail | interrupted
    failure: Failure | None = None
    stages: list[Stage] = field(default_factory=list)
    doctor: list[Finding] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)  # --python: the probed env
    processes: list[dict[str, Any]] = field(default_factory=list)
    # role -> endpoint -> seconds from that process's own launch until it answered 200
    # (servers load in parallel; a wait measured from the previous server's readiness says
    # nothing about the next one)
    readiness: dict[str, dict[str, float]] = field(default_factory=dict)
    # role -> what its processes mapped and logged while serving (smoke/loaded.py)
    loaded: dict[str, Any] = field(default_factory=dict)
    teardown: dict[str, Any] = field(default_factory=dict)
    # issue 34: launch to router readiness with each server's phases (smoke/startup.py), and
    # the JIT cache the servers started from (smoke/jitstep.py)
    startup: dict[str, Any] = field(default_factory=dict)
    jit_cache: dict[str, Any] = field(default_factory=dict)
    host: dict[str, str] = field(
        default_factory=lambda: {"hostname": platform.node(), "python": platform.python_version()}
    )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA
        data["summary"] = self.headline_metrics()
        return data

    def headline_metrics(self) -> dict[str, Any]:
        by_name = {c.name: c for c in self.checks}
        stream = by_name.get("stream")
        concurrent = by_name.get("concurrent")
        needle = by_name.get("needle")
        return {
            "checks_passed": sum(c.passed for c in self.checks),
            "checks_failed": sum(not c.passed and c.enforced for c in self.checks),
            # Gates the profile runs without enforcing them (issue 24): failed, reported only.
            "unenforced_failed": [c.name for c in self.checks if not c.passed and not c.enforced],
            "ttft_s": stream.metrics.get("ttft_s") if stream else None,
            "decode_tokens_per_s": stream.metrics.get("decode_tokens_per_s") if stream else None,
            "concurrent_tokens_per_s": concurrent.metrics.get("tokens_per_s")
            if concurrent
            else None,
            "needle_recalled": needle.metrics.get("recalled") if needle else None,
            "needle_lost": needle.metrics.get("lost") if needle else None,
        }

    def summary_text(self) -> str:
        lines = [
            (
                f"sglforge smoke: {self.result.upper()} — profile {self.profile} "
                f"(model {self.model}, backend {self.backend})"
            ),
            "",
        ]
        if self.failure:
            f = self.failure
            who = f" [{f.process}: {f.exit}]" if f.process else ""
            lines += [f"failure in {f.stage}{who}: {f.message}"]
            if f.log:
                lines += [f"log: {f.log}"]
            lines += [""]
        lines += ["stages:"]
        lines += [
            f"  {'ok  ' if s.ok else 'FAIL'} {s.name:<16} {s.seconds:8.2f} s  {s.detail}"
            for s in self.stages
        ]
        if self.readiness:
            lines += ["", "ready (seconds from each process's own launch):"]
            lines += [
                f"  {role:<10} "
                + "; ".join(f"{path} {seconds:.1f} s" for path, seconds in paths.items())
                for role, paths in self.readiness.items()
            ]
        if self.checks:
            lines += ["", "checks:"]
            lines += [
                f"  {'pass' if c.passed else 'FAIL' if c.enforced else 'fail'} "
                f"{c.name:<12} {c.detail}" + ("" if c.enforced else "  (not enforced)")
                for c in self.checks
            ]
        needle = next((c for c in self.checks if c.name == "needle"), None)
        if needle and needle.metrics.get("lengths"):
            lines += ["", "needle recall (target tokens / prompt tokens seen by the server):"]
            for entry in needle.metrics["lengths"]:
                mark = "recalled" if entry["recalled"] else "LOST"
                lines += [
                    (
                        f"  {entry['target_tokens']:>7} / {entry['prompt_tokens']!s:>7}  "
                        f"{mark}  {entry['answer'][:60]!r}"
                    )
                ]
        head = self.headline_metrics()
        lines += [
            "",
            (
                f"TTFT {head['ttft_s']} s; decode {head['decode_tokens_per_s']} tokens/s; "
                f"concurrent {head['concurrent_tokens_per_s']} tokens/s"
            ),
        ]
        if self.versions and self.environment:
            lines += [
                "",
                (
                    f"environment {self.environment.get('python')} (installed "
                    "versions; sglforge provenance where the dist-info has it):"
                ),
            ]
            for name, v in sorted(self.versions.items()):
                origin = (
                    f"sglforge: {v['upstream']}@{str(v['commit'])[:12]}"
                    if v.get("upstream")
                    else v.get("origin", "?")
                )
                lines += [f"  {name} {v['version']}  [{origin}]"]
        elif self.versions:
            lines += ["", "wheels (from their sglforge-build.json):"]
            for name, v in sorted(self.versions.items()):
                archs = ",".join(v.get("cuda_archs") or []) or "no device code"
                lines += [
                    (f"  {name} {v['version']}  {v['upstream']}@{str(v['commit'])[:12]}  [{archs}]")
                ]
        if self.teardown:
            lines += [
                "",
                (
                    f"teardown: {self.teardown.get('signalled')}; survivors: "
                    f"{self.teardown.get('survivors') or 'none'}"
                ),
            ]
        return "\n".join(lines) + "\n"

    def ready(self, role: str, path: str, since_launch: float) -> float:
        """Record that `role` first answered 200 on `path` `since_launch` seconds after its
        own launch; returns the rounded figure."""
        seconds = round(since_launch, 3)
        self.readiness.setdefault(role, {})[path] = seconds
        return seconds

    def write(self, run_dir: Path) -> tuple[Path, Path]:
        report = run_dir / REPORT_NAME
        summary = run_dir / SUMMARY_NAME
        atomic_write_text(report, json.dumps(self.to_json(), indent=2, default=str) + "\n")
        atomic_write_text(summary, self.summary_text())
        return report, summary
