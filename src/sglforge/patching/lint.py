"""`patches lint`: DEP-3 errors that block, and advice that doesn't (conda-smithy's split).

Policy (stricter than DEP-3 itself, because every patch here must be retire-able):
errors  — missing or malformed Description/Subject, Origin, Forwarded, Last-Update; missing Bug
          unless Forwarded is not-needed; a patch in neither known form (a `git format-patch`
          mbox with DEP-3 pseudo-headers, or a plain DEP-3 patch: header block then a diff);
          a plain DEP-3 patch without Author/From (its commit identity); a diff that does not
          parse; series problems;
hints   — Forwarded: no (say why), Applied-Upstream set (drop it when the pin moves), stale
          Last-Update, terse descriptions, unlisted patch files, names/numbering off; and a
          literal arch in a recipe's [env]/[cmake-defines]/[config-settings] of a linted
          upstream (archs come from `cuda-archs` through placeholders, inputs/recipes.py).
"""

from __future__ import annotations

import datetime as dt
import re

from sglforge.base.errors import ConfigErrors
from sglforge.base.findings import ERROR, HINT, Finding, blocking
from sglforge.inputs.pins import Lockfile
from sglforge.inputs.project import Project
from sglforge.inputs.recipes import recipe_hints
from sglforge.patching.diff import DiffParseError, parse_diff
from sglforge.patching.patchformat import PatchFormatError, patch_format
from sglforge.patching.series import PATCH_NAME, LocalPatch, parse_series

ORIGIN = re.compile(
    r"^(?:(upstream|backport|vendor|other)(?:,\s*\S.*)?|https?://\S+|commit:[0-9a-f]{7,40})$"
)
FORWARDED = re.compile(r"^(?:no|not-needed|yes|https?://\S+)$")
NUMBERED = re.compile(r"^(\d{4})-[a-z0-9][a-z0-9.+-]*\.patch$")
STALE_DAYS = 365


def lint_patch(patch: LocalPatch, where: str, today: dt.date) -> list[Finding]:
    findings: list[Finding] = []

    def error(message: str) -> None:
        findings.append(Finding(where, ERROR, message))

    def hint(message: str) -> None:
        findings.append(Finding(where, HINT, message))

    try:
        kind = patch_format(patch.data)
    except PatchFormatError as exc:
        error(str(exc))
        return findings
    try:
        parse_diff(patch.data)
    except DiffParseError as exc:
        error(f"malformed diff at line {exc.line}: {exc.message}")
    fields = patch.headers()
    if kind == "dep3" and not (fields.get("Author") or fields.get("From")):
        error("plain DEP-3 patch without Author (or From): it becomes the commit's author")
    description = fields.get("Description") or fields.get("Subject")
    if not description:
        error("missing Description (or Subject): say what the patch does and why")
    elif "Description" not in fields:
        hint(
            "only a Subject: add a Description saying why the patch exists and when it can "
            "be dropped"
        )
    elif len(fields["Description"]) < 20:
        hint("Description is terse; say why the patch exists and when it can be dropped")
    origin = fields.get("Origin")
    if not origin:
        error("missing Origin (upstream|backport|vendor|other, URL or commit:<id>)")
    elif not ORIGIN.match(origin):
        error(
            f"Origin {origin!r} is not 'upstream|backport|vendor|other[, URL]', a URL or "
            "commit:<id>"
        )
    forwarded = fields.get("Forwarded")
    if not forwarded:
        error("missing Forwarded (no | not-needed | URL of the upstream PR)")
    elif not FORWARDED.match(forwarded):
        error(f"Forwarded {forwarded!r} is not no, not-needed, yes or a URL")
    elif forwarded == "no":
        hint("Forwarded: no — say in the Description why it is not sent upstream")
    if not fields.get("Bug") and not any(k.startswith("Bug-") for k in fields):
        if forwarded == "not-needed":
            hint("no Bug field; link the issue this works around if there is one")
        else:
            error("missing Bug (the upstream issue or PR this patch addresses)")
    last_update = fields.get("Last-Update")
    if not last_update:
        error("missing Last-Update (YYYY-MM-DD)")
    else:
        try:
            updated = dt.date.fromisoformat(last_update)
            if (today - updated).days > STALE_DAYS:
                hint(f"Last-Update {last_update} is over a year old; is the patch still needed?")
        except ValueError:
            error(f"Last-Update {last_update!r} is not a date (YYYY-MM-DD)")
    if fields.get("Applied-Upstream"):
        hint(
            f"Applied-Upstream: {fields['Applied-Upstream']} — drop this patch when the pin "
            "moves past it"
        )
    if not NUMBERED.match(patch.name):
        hint("name is not NNNN-lowercase-slug.patch")
    return findings


def lint_project(
    project: Project, lock: Lockfile, names: list[str] | None, today: dt.date | None = None
) -> list[Finding]:
    today = today or dt.date.today()
    findings: list[Finding] = []
    targets = names or [p.name for p in lock.upstreams()]
    for name in targets:
        path = project.series_file(name)
        rel = path.relative_to(project.root) if path.is_relative_to(project.root) else path
        try:
            series = parse_series(path, name)
        except ConfigErrors as exc:
            findings += [Finding(str(rel), ERROR, problem) for problem in exc.problems]
            continue
        numbers = []
        for entry in series.entries:
            if isinstance(entry, LocalPatch):
                findings += lint_patch(entry, f"{rel.parent}/{entry.name}", today)
                match = NUMBERED.match(entry.name)
                if match:
                    numbers.append(int(match.group(1)))
        if numbers != sorted(numbers):
            findings.append(Finding(str(rel), HINT, "patch numbers are not in series order"))
        if path.parent.is_dir():
            listed = {e.name for e in series.entries}
            for file in sorted(path.parent.iterdir()):
                if PATCH_NAME.fullmatch(file.name) and file.name not in listed:
                    findings.append(
                        Finding(
                            f"{rel.parent}/{file.name}",
                            HINT,
                            "not listed in series (never applied)",
                        )
                    )
    for path, upstream, message in recipe_hints(project.recipes_dir):
        if names and upstream not in names:
            continue
        rel = path.relative_to(project.root) if path.is_relative_to(project.root) else path
        findings.append(Finding(str(rel), HINT, message))
    return findings


def render_findings(findings: list[Finding]) -> str:
    errors = blocking(findings)
    hints = [f for f in findings if f.level == HINT]
    lines = [f"errors ({len(errors)}):"] + [f"  {f.check}: {f.message}" for f in errors]
    lines += [f"hints ({len(hints)}):"] + [f"  {f.check}: {f.message}" for f in hints]
    lines.append(
        "lint: "
        + ("FAILED" if errors else "ok")
        + f" — {len(errors)} error(s), {len(hints)} hint(s)"
    )
    return "\n".join(lines)
