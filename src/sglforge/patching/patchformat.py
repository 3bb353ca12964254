"""The two forms a local patch may take, told apart explicitly by its first line.

- `mbox`: what `git format-patch` writes — first line `From <40-hex commit> <date>`, mail
  headers (From, Date, Subject), a message that may carry DEP-3 pseudo-headers, then the diff;
- `dep3`: the quilt/Debian form (DEP-3) — a header block of fields (Description/Subject,
  Author/From, Origin, Bug, Forwarded, Last-Update, …), optional free text, then a unified diff.

Anything else (no header, garbage, an mbox from another tool) is an unknown format: an error
naming the patch, never a guess. Standard library only (`plan` and `lint` read these).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import re

from sglforge.base.errors import SglforgeError

MBOX_FIRST_LINE = re.compile(rb"^From [0-9a-f]{40}(?:[0-9a-f]{24})? ")  # SHA-1 or SHA-256 ids
FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
# DEP-3 field names (case-insensitive, as in RFC 2822), spelled as DEP-3 spells them.
DEP3_NAMES = {
    name.lower(): name
    for name in (
        "Description",
        "Subject",
        "Origin",
        "Bug",
        "Forwarded",
        "Author",
        "From",
        "Reviewed-by",
        "Acked-by",
        "Last-Update",
        "Applied-Upstream",
        "Signed-off-by",
    )
}
DIFF_START = ("--- ", "diff ", "Index: ", "===", "+++ ")


class PatchFormatError(SglforgeError):
    """A local patch in neither known form, or a DEP-3 header sglforge cannot commit from."""


def _canonical(name: str) -> str | None:
    lower = name.lower()
    if lower in DEP3_NAMES:
        return DEP3_NAMES[lower]
    if lower.startswith("bug-"):
        return "Bug-" + name[4:]
    return None


def patch_format(data: bytes) -> str:
    """'mbox' or 'dep3'; raises PatchFormatError otherwise."""
    first = data.split(b"\n", 1)[0].rstrip(b"\r")
    if MBOX_FIRST_LINE.match(first):
        return "mbox"
    match = FIELD.match(first.decode("utf-8", "replace"))
    if match and _canonical(match.group(1)):
        return "dep3"
    shown = first[:80].decode("utf-8", "replace")
    raise PatchFormatError(
        f"unknown patch format (first line {shown!r}): expected a `git format-patch` mbox "
        "(first line 'From <40-hex commit> <date>') or a DEP-3 patch (first line a DEP-3 "
        "field such as 'Description:', 'Subject:', 'Author:' or 'From:')"
    )


def dep3_fields(data: bytes) -> dict[str, str]:
    """DEP-3 fields of a plain patch: every known field before the diff starts (first value
    wins); continuation lines (leading blank) extend the field above, ' .' is an empty line."""
    fields: dict[str, str] = {}
    last: str | None = None
    for raw in data.decode("utf-8", "replace").split("\n"):
        line = raw.rstrip("\r")
        if line.startswith(DIFF_START):
            break
        if line[:1] in (" ", "\t") and last is not None:
            text = line.strip()
            fields[last] += "\n" + ("" if text == "." else text)
            continue
        last = None
        match = FIELD.match(line)
        name = _canonical(match.group(1)) if match else None
        if name and name not in fields:
            fields[name] = match.group(2).strip()
            last = name
    return fields


def dep3_commit(data: bytes, fallback_date: str) -> tuple[str, str, str, str]:
    """(author name, author email, author date, message) for committing a DEP-3 patch:
    Author/From is the author, Description/Subject the message (first line the subject), the
    other DEP-3 fields kept as trailers so a refresh to mbox form keeps them. The date is
    Last-Update (midnight UTC), else `fallback_date`, so the same series gives the same commit.
    """
    fields = dep3_fields(data)
    text = fields.get("Description") or fields.get("Subject")
    if not text or not text.strip():
        raise PatchFormatError(
            "DEP-3 patch without Description or Subject: nothing to use as the commit message"
        )
    author = fields.get("Author") or fields.get("From")
    name, mail = email.utils.parseaddr(author or "")
    if not author or not mail or "@" not in mail:
        raise PatchFormatError(
            f"DEP-3 patch without a usable Author (or From) field ('Name <email>'), got {author!r}"
        )
    date = fallback_date
    try:
        date = dt.date.fromisoformat(fields.get("Last-Update", "")).isoformat() + "T00:00:00+0000"
    except ValueError:
        pass
    summary, _, body = text.strip().partition("\n")
    trailers = [
        f"{key}: {value}"
        for key, value in fields.items()
        if key not in ("Description", "Subject", "Author", "From") and "\n" not in value
    ]
    message = summary.strip() + "\n\n"
    if body.strip():
        message += body.strip() + "\n\n"
    if trailers:
        message += "\n".join(trailers) + "\n"
    return name or mail, mail, date, message
