"""Patch series: `patches/<upstream>/series` parsed into typed entries.

One entry per line, applied top to bottom; `#` starts a comment. Two kinds:

    0001-sm120-dispatch.patch
    backport https://github.com/org/repo <40-hex commit> sha256=<64 hex> [exclude=GLOB,...]

A local patch is a `git format-patch` mbox whose message carries DEP-3 fields. A backport is
the diff of an upstream commit against its first parent, produced from the repository and
checked against the digest (like Nix `fetchpatch`); `exclude=` drops files from it (where our
own conflict-resolution patch carries them instead).
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import PATCH_CAP, SERIES_CAP, read_capped
from sglforge.base.git import check_url
from sglforge.inputs.pins import FULL_SHA, SHA256, Lockfile
from sglforge.inputs.project import Project
from sglforge.patching.patchformat import MBOX_FIRST_LINE, dep3_fields
from sglforge.sources.fetch import GitWant

PATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.(patch|diff)")
DEP3_FIELDS = (
    "Description",
    "Subject",
    "Origin",
    "Bug",
    "Forwarded",
    "Author",
    "From",
    "Reviewed-by",
    "Last-Update",
    "Applied-Upstream",
)


@dataclass(frozen=True)
class LocalPatch:
    name: str
    path: Path
    data: bytes
    line: int  # line in the series file

    @property
    def label(self) -> str:
        return self.name

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def headers(self) -> dict[str, str]:
        """Mail headers plus DEP-3 pseudo-headers from the message body (first value wins);
        for a plain DEP-3 patch (no mbox 'From <commit>' line), its DEP-3 header fields."""
        if not MBOX_FIRST_LINE.match(self.data):
            return dep3_fields(self.data)
        message = email.message_from_bytes(self.data, policy=email.policy.compat32)
        fields: dict[str, str] = {}
        for key in ("From", "Date", "Subject"):
            if message[key]:
                fields[key] = re.sub(r"\s+", " ", str(message[key])).strip()
        if "Subject" in fields:
            fields["Subject"] = re.sub(r"^\[PATCH[^\]]*\]\s*", "", fields["Subject"])
        body = message.get_payload(decode=False)
        if isinstance(body, str):
            text = body.split("\n---\n", 1)[0].split("\ndiff --git ", 1)[0]
            for line in text.splitlines():
                match = re.match(r"^([A-Za-z][A-Za-z-]*):\s*(.*)$", line)
                if match and match.group(1) in DEP3_FIELDS + ("Bug-Debian", "Bug-Ubuntu"):
                    fields.setdefault(match.group(1), match.group(2).strip())
        return fields

    def description(self) -> str:
        fields = self.headers()
        return fields.get("Description") or fields.get("Subject", "")


@dataclass(frozen=True)
class Backport:
    url: str
    commit: str
    sha256: str
    excludes: tuple[str, ...]
    line: int

    @property
    def label(self) -> str:
        return f"backport {self.commit[:12]}"

    @property
    def name(self) -> str:
        return self.label

    @property
    def digest(self) -> str:
        return self.sha256

    def render(self) -> str:
        text = f"backport {self.url} {self.commit} sha256={self.sha256}"
        if self.excludes:
            text += " exclude=" + ",".join(self.excludes)
        return text


Entry = LocalPatch | Backport


@dataclass(frozen=True)
class PatchSeries:
    upstream: str
    path: Path
    text: bytes  # the series file as read (b"" when there is none)
    entries: tuple[Entry, ...]

    @property
    def digest(self) -> str:
        """Covers the series file and every local patch's bytes, in order."""
        digest = hashlib.sha256(self.text)
        for entry in self.entries:
            digest.update(b"\0" + entry.digest.encode())
        return digest.hexdigest()

    @property
    def patchset8(self) -> str:
        return self.digest[:8]

    def where(self, entry: Entry) -> str:
        """Where an entry stands, for messages: `patches/x/series:3 (0002-fix.patch)`."""
        return f"{self.path}:{entry.line} ({entry.label})"


def parse_series(path: Path, upstream: str) -> PatchSeries:
    """Parse `path` (missing file = empty series). All problems are reported together."""
    if path.is_symlink():  # a link in a pull request could read any file on the build host
        raise ConfigErrors(path, ["the series file is a symbolic link; it must be a regular file"])
    if not path.exists():
        return PatchSeries(upstream, path, b"", ())
    try:
        raw = read_capped(path, SERIES_CAP, "series file")
    except SglforgeError as exc:  # a directory, unreadable, over the cap
        raise ConfigErrors(
            path, ["cannot read the series file: " + str(exc).removeprefix(f"{path}: ")]
        ) from None
    problems: list[str] = []
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        words = text.split()
        where = f"line {number}"
        if words[0] == "backport":
            entry = _parse_backport(words, number, problems)
            if entry is None:
                continue
            key = entry.commit
        else:
            if len(words) != 1:
                problems.append(
                    f"{where}: expected one patch file name or 'backport URL "
                    f"COMMIT sha256=DIGEST', got {text!r}"
                )
                continue
            name = words[0]
            if "/" in name or not PATCH_NAME.fullmatch(name):
                problems.append(
                    f"{where}: {name!r} is not a patch file name in "
                    f"{path.parent} (NNNN-slug.patch, no directories)"
                )
                continue
            file = path.parent / name
            if file.is_symlink():
                problems.append(
                    f"{where}: patch file {file} is a symbolic link; patches must be "
                    "regular files (a link could read any file on the build host)"
                )
                continue
            if not file.is_file():
                problems.append(f"{where}: patch file {file} does not exist")
                continue
            try:
                entry = LocalPatch(name, file, read_capped(file, PATCH_CAP, "patch"), number)
            except SglforgeError as exc:
                problems.append(f"{where}: cannot read patch file: {exc}")
                continue
            key = name
        if key in seen:
            problems.append(f"{where}: {key} is already listed at line {seen[key]}")
            continue
        seen[key] = number
        entries.append(entry)
    if problems:
        raise ConfigErrors(path, problems)
    return PatchSeries(upstream, path, raw, tuple(entries))


def _parse_backport(words: list[str], number: int, problems: list[str]) -> Backport | None:
    where = f"line {number}"
    if len(words) < 4:
        problems.append(f"{where}: expected 'backport URL COMMIT sha256=DIGEST [exclude=GLOB,...]'")
        return None
    _, url, commit, *options = words
    ok = True
    url_problem = check_url(url)
    if url_problem is not None:
        problems.append(f"{where}: backport URL {url!r} {url_problem}")
        ok = False
    if not FULL_SHA.fullmatch(commit):
        problems.append(f"{where}: backport commit {commit!r} must be a full 40-hex commit id")
        ok = False
    digest, excludes = None, ()
    for option in options:
        key, _, value = option.partition("=")
        if key == "sha256" and SHA256.fullmatch(value):
            digest = value
        elif key == "sha256":
            problems.append(f"{where}: sha256={value!r} must be 64 lowercase hex digits")
            ok = False
        elif key == "exclude" and value:
            excludes = tuple(v for v in value.split(",") if v)
            for glob in excludes:
                if PurePosixPath(glob).is_absolute() or ".." in PurePosixPath(glob).parts:
                    problems.append(f"{where}: exclude {glob!r} must be a relative path glob")
                    ok = False
        else:
            problems.append(
                f"{where}: unknown backport option {option!r} (known: sha256=, exclude=)"
            )
            ok = False
    if digest is None and ok:
        problems.append(f"{where}: backport needs sha256=<digest of the normalized diff>")
        ok = False
    return Backport(url, commit, digest, excludes, number) if ok else None


def load_series(project: Project, upstream: str) -> PatchSeries:
    return parse_series(project.series_file(upstream), upstream)


def load_all_series(
    project: Project, lock: Lockfile, names: list[str] | None = None
) -> list[PatchSeries]:
    """Series of every upstream in `names` (default: all), including empty ones."""
    targets = names or [p.name for p in lock.upstreams()]
    return [load_series(project, name) for name in targets]


def backport_wants(all_series: list[PatchSeries]) -> list[GitWant]:
    """Commits the backports need, so fetch (and bundles) include them."""
    return [
        GitWant(e.url, e.commit, f"backport in {s.path}:{e.line}")
        for s in all_series
        for e in s.entries
        if isinstance(e, Backport)
    ]
