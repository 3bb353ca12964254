"""The pin lockfile `lockfiles/upstreams.toml`: every source a build uses, at an exact commit
or as an archive verified by sha256.

Four kinds of entry, one shape (`[[source]]`):
- an upstream repository: `name`, `url`, `commit` (40 hex), optional `tree`, `ref`, `date`;
- a git submodule placed inside its parent's tree: `parent` + `path` + `commit`;
- a downloaded dependency (CMake FetchContent tarball): `url` + `sha256`, usually with
  `parent` + `fetchcontent` (the FetchContent name the build injects);
- an upstream that is an archive, not a commit: a release tarball (`url` + `sha256`) or a
  registry sdist fetched through the package index (`sdist = "name==version"` + `sha256`),
  with an optional `archive-root` (the one top directory the archive must have), `tree`
  (the git tree id of the imported archive, checked on export) and
  `embeds`: what the archive carries that no pin can fetch (inline tables `path`, `url`,
  `claimed-commit`, optional `tree`), recorded as claims, never as fetchable commits.
Branch and tag names (`ref`) are informational only: nothing resolves them.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sglforge.base.errors import SglforgeError
from sglforge.base.git import check_url
from sglforge.base.tomlfile import Problems, TableReader, array_table_lines, key_line, load_toml

FULL_SHA = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
# `name==version` of a registry sdist: a PEP 508 name and an exact PEP 440 version
SDIST = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)=="
    r"(?P<version>[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?"
    r"(?:\.dev[0-9]+)?)"
)
EMBED_KEYS = ("path", "url", "claimed-commit", "tree")


@dataclass(frozen=True)
class Embed:
    """A tree an archive carries inside it that sglforge cannot fetch on its own (a vendored
    submodule of an sdist): where it sits and the commit the archive's maker says it is.

    `claimed_commit` is a claim, never verified (no repository reachable holds it); `tree`,
    when pinned, is the git tree id of the directory as the archive ships it, checked on
    every export, so the content is pinned even though its origin is not."""

    path: str
    url: str | None
    claimed_commit: str | None
    tree: str | None = None


@dataclass(frozen=True)
class Pin:
    """One pinned source."""

    name: str
    url: str
    commit: str | None = None  # git sources
    sha256: str | None = None  # tarball and sdist sources
    tree: str | None = None  # optional: expected tree id of `commit`
    ref: str | None = None  # informational
    date: dt.date | None = None  # informational (commit date)
    parent: str | None = None
    path: str | None = None  # submodule path inside the parent's tree
    fetchcontent: str | None = None  # CMake FetchContent name injected into the parent's build
    line: int | None = None  # where the entry starts in the lockfile
    sdist: str | None = None  # "name==version": fetched from the package index's simple page
    archive_root: str | None = None  # the single top directory the archive must have
    embeds: tuple[Embed, ...] = ()  # trees an archive upstream carries, recorded as claims

    @property
    def is_git(self) -> bool:
        return self.commit is not None

    @property
    def is_submodule(self) -> bool:
        return self.path is not None

    @property
    def is_archive_upstream(self) -> bool:
        """A top-level source that is an archive (tarball or sdist): exported as a git work
        tree of one synthetic commit so a patch series applies to it."""
        return self.commit is None and self.parent is None

    @property
    def identity(self) -> str:
        """What the pin is, as provenance and labels name it: the commit, or `sha256:<hex>`."""
        return self.commit or f"sha256:{self.sha256}"

    @property
    def short(self) -> str:
        return (self.commit or f"sha256:{self.sha256}")[:12]


@dataclass(frozen=True)
class Lockfile:
    path: Path
    pins: tuple[Pin, ...]

    def get(self, name: str) -> Pin:
        for pin in self.pins:
            if pin.name == name:
                return pin
        known = ", ".join(p.name for p in self.upstreams())
        raise SglforgeError(f"{self.path}: no source named '{name}' (upstreams: {known})")

    def upstreams(self) -> list[Pin]:
        """Top-level sources: those without a parent."""
        return [p for p in self.pins if p.parent is None]

    def submodules(self, parent: str) -> list[Pin]:
        return [p for p in self.pins if p.parent == parent and p.is_submodule]

    def fetchcontent(self, parent: str) -> list[Pin]:
        return [p for p in self.pins if p.parent == parent and p.fetchcontent]

    def closure(self, name: str) -> list[Pin]:
        """`name` and everything placed in or injected into it, recursively, parents first."""
        result = [self.get(name)]
        for pin in result:
            result.extend(p for p in self.pins if p.parent == pin.name)
        return result


def _check_commit(reader: TableReader, key: str) -> str | None:
    value = reader.str(key)
    if value is None:
        return None
    if FULL_SHA.fullmatch(value):
        return value
    if re.fullmatch(r"[0-9a-fA-F]{4,39}", value):
        reader.error(
            key,
            f"{value!r} is a short SHA ({len(value)} hex digits); "
            "pins need the full 40-hex commit id",
        )
    elif re.fullmatch(r"[0-9A-F]{40}", value, re.IGNORECASE):
        reader.error(key, f"{value!r} must be lowercase hex")
    else:
        reader.error(
            key,
            f"{value!r} looks like a branch or tag name; pins need the full "
            "40-hex commit id (put names in 'ref', which is informational)",
        )
    return None


def _safe_relative_path(reader: TableReader, key: str, value: str | None) -> str | None:
    if value is None:
        return None
    posix = PurePosixPath(value)
    if posix.is_absolute() or ".." in posix.parts or value in ("", "."):
        reader.error(key, f"{value!r} must be a relative path inside the parent's tree")
        return None
    return str(posix)


def _embeds(reader: TableReader, value: object) -> tuple[Embed, ...]:
    """`embeds = [{ path = "3rdparty/tvm", url = "…", claimed-commit = "…", tree = "…" }]`."""
    reader.seen.add("embeds")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        reader.error(
            "embeds", 'expected a list of inline tables { path = "…", claimed-commit = "…" }'
        )
        return ()
    out: list[Embed] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        sub = TableReader(
            item,
            reader.problems,
            f"{reader.where}, embeds[{index}]",
            locate=lambda key: reader.locate("embeds"),
        )
        path = _safe_relative_path(sub, "path", sub.str("path", required=True))
        url = sub.str("url")
        claimed = _check_commit(sub, "claimed-commit")
        tree = _check_commit(sub, "tree")
        sub.finish(EMBED_KEYS)
        if url is not None and (problem := check_url(url)) is not None:
            sub.error("url", f"{url!r} {problem}")
        if path is None:
            continue
        if path in seen:
            sub.error("path", f"'{path}' is listed twice")
            continue
        seen.add(path)
        out.append(Embed(path, url, claimed, tree))
    return tuple(out)


def _top_level_entries(problems: Problems, data: dict[str, object]) -> list[object]:
    """The [[source]] array (empty when it is not one); any other top-level key is a problem."""
    for key in data:
        if key != "source":
            problems.add(f"top-level key '{key}': unknown key (entries are [[source]] tables)")
    entries = data.get("source", [])
    if not isinstance(entries, list):
        problems.add("'source' must be an array of tables ([[source]])")
        entries = []
    return entries


def _source_reader(
    problems: Problems, text: str, index: int, entry: dict, start: int | None
) -> TableReader:
    """A reader of the `index`th [[source]] table (at line `start`), named by its `name`."""
    label = entry.get("name")
    where = f"source #{index + 1}" + (f" '{label}'" if isinstance(label, str) else "")
    return TableReader(
        entry,
        problems,
        where,
        locate=(lambda key, s=start: key_line(text, s, key) if s else None),
    )


@dataclass(frozen=True)
class _SourceKeys:
    """The keys of one [[source]] table, each checked on its own (None: absent or invalid)."""

    name: str | None
    sdist: str | None
    url: str | None
    commit: str | None
    tree: str | None
    sha256: str | None
    ref: str | None
    date: dt.date | None
    parent: str | None
    path: str | None
    fetchcontent: str | None
    archive_root: str | None
    embeds: tuple[Embed, ...]


def _read_source_keys(reader: TableReader, entry: dict) -> _SourceKeys:
    """Every key of the table, type- and form-checked; then the keys nobody asked for."""
    name = reader.str(
        "name",
        required=True,
        pattern=NAME.pattern,
        describe="a lowercase name of letters, digits, '.', '_' or '-'",
    )
    sdist = reader.str(
        "sdist", pattern=SDIST.pattern, describe='an exact requirement like "tilelang==0.1.11"'
    )
    url = reader.str("url", required="sdist" not in entry)
    commit = _check_commit(reader, "commit")
    tree = _check_commit(reader, "tree")
    sha256 = reader.str("sha256", pattern=SHA256.pattern, describe="64 lowercase hex digits")
    ref = reader.str("ref")
    date = reader.date("date")
    parent = reader.str("parent")
    sub_path = _safe_relative_path(reader, "path", reader.str("path"))
    fetchcontent = reader.str(
        "fetchcontent", pattern=r"[A-Za-z0-9_.+-]+", describe="a CMake FetchContent name"
    )
    archive_root = reader.str("archive-root")
    if archive_root is not None and ("/" in archive_root or archive_root in ("", ".", "..")):
        reader.error(
            "archive-root",
            f"{archive_root!r} must be one directory name (the archive's single top directory)",
        )
        archive_root = None
    embeds = _embeds(reader, entry.get("embeds"))
    reader.finish()
    return _SourceKeys(
        name=name,
        sdist=sdist,
        url=url,
        commit=commit,
        tree=tree,
        sha256=sha256,
        ref=ref,
        date=date,
        parent=parent,
        path=sub_path,
        fetchcontent=fetchcontent,
        archive_root=archive_root,
        embeds=embeds,
    )


def _check_archive_keys(reader: TableReader, entry: dict) -> None:
    """`sdist`, `archive-root` and `embeds` only where an archive upstream may have them."""
    if "sdist" in entry and "url" in entry:
        reader.error(
            "sdist",
            "give either 'url' (a tarball) or 'sdist' (fetched through "
            "the package index), not both",
        )
    if "sdist" in entry and ("sha256" not in entry or "commit" in entry):
        reader.error("sdist", "an sdist is verified by its 'sha256' (no 'commit')")
    if "sdist" in entry and "parent" in entry:
        reader.error("sdist", "an sdist is an upstream of its own (no 'parent')")
    if ("archive-root" in entry or "embeds" in entry) and (
        "sha256" not in entry or "parent" in entry
    ):
        key = "archive-root" if "archive-root" in entry else "embeds"
        reader.error(key, "only an archive upstream ('sha256', no 'parent') has one")


def _source_url(reader: TableReader, sdist: str | None, url: str | None) -> str | None:
    """The url keys and messages name: `sdist:<name==version>` for an sdist, else the
    checked `url`."""
    if sdist is not None and url is None:
        return f"sdist:{sdist}"  # what keys and messages name; the index says where it is
    if url is not None and (url_problem := check_url(url)) is not None:
        reader.error("url", f"{url!r} {url_problem}" if url.strip() else url_problem)
    return url


def _check_source_kind(reader: TableReader, entry: dict) -> None:
    """The keys fit one kind of source: git or archive; submodule, FetchContent or neither."""
    if "commit" in entry and "sha256" in entry:
        reader.error(None, "give either 'commit' (git) or 'sha256' (tarball), not both")
    elif "commit" not in entry and "sha256" not in entry:
        reader.error(None, "missing 'commit' (a 40-hex git commit) or 'sha256' (a tarball)")
    if "tree" in entry and "commit" not in entry and ("parent" in entry or "sha256" not in entry):
        reader.error(
            "tree",
            "only git sources (with 'commit') and archive upstreams "
            "('sha256', no 'parent': the imported tree) have a tree",
        )
    if "path" in entry and ("parent" not in entry or "commit" not in entry):
        reader.error("path", "a submodule needs 'parent' and a git 'commit'")
    if "fetchcontent" in entry and "parent" not in entry:
        reader.error("fetchcontent", "a FetchContent source needs 'parent'")
    if "path" in entry and "fetchcontent" in entry:
        reader.error(None, "give either 'path' (submodule) or 'fetchcontent', not both")


def _parse_source(reader: TableReader, entry: dict, start: int | None) -> Pin | None:
    """One [[source]] table as a pin (None when it has no usable name or url); its problems
    go to the reader."""
    keys = _read_source_keys(reader, entry)
    _check_archive_keys(reader, entry)
    url = _source_url(reader, keys.sdist, keys.url)
    _check_source_kind(reader, entry)
    if keys.name is None or url is None:
        return None
    return Pin(
        name=keys.name,
        url=url,
        commit=keys.commit,
        sha256=keys.sha256,
        tree=keys.tree,
        ref=keys.ref,
        date=keys.date,
        parent=keys.parent,
        path=keys.path,
        fetchcontent=keys.fetchcontent,
        line=start,
        sdist=keys.sdist,
        archive_root=keys.archive_root,
        embeds=keys.embeds,
    )


def _parse_sources(problems: Problems, text: str, entries: list[object]) -> list[Pin]:
    """The pins of the [[source]] tables, in order; a name given twice keeps its first."""
    header_lines = array_table_lines(text, "source")
    pins: list[Pin] = []
    first_line: dict[str, int | None] = {}
    for index, entry in enumerate(entries):
        start = header_lines[index] if index < len(header_lines) else None
        if not isinstance(entry, dict):
            problems.add(f"source #{index + 1}: expected a table ([[source]]), got {entry!r:.60}")
            continue
        reader = _source_reader(problems, text, index, entry, start)
        pin = _parse_source(reader, entry, start)
        if pin is None:
            continue
        if pin.name in first_line:
            at = f" (first at line {first_line[pin.name]})" if first_line[pin.name] else ""
            reader.error("name", f"duplicate name '{pin.name}'{at}")
            continue
        first_line[pin.name] = start
        pins.append(pin)
    return pins


def _check_parents(problems: Problems, pins: list[Pin]) -> None:
    """Every `parent` names a source, and no parent chain loops."""
    names = {p.name for p in pins}
    for pin in pins:
        where = f"source '{pin.name}'" + (f" (line {pin.line})" if pin.line else "")
        if pin.parent is not None and pin.parent not in names:
            problems.add(f"{where}, key 'parent': no source named '{pin.parent}'")
        seen = {pin.name}
        cursor = pin
        while cursor.parent in names:
            cursor = next(p for p in pins if p.name == cursor.parent)
            if cursor.name in seen:
                problems.add(f"{where}, key 'parent': parent chain loops through '{cursor.name}'")
                break
            seen.add(cursor.name)


def _check_slots(problems: Problems, pins: list[Pin]) -> None:
    """No two sources take the same submodule path or FetchContent name in one parent."""
    placed: dict[tuple[str | None, str], str] = {}
    for pin in pins:
        slot = pin.path or pin.fetchcontent
        if slot is None:
            continue
        if (pin.parent, slot) in placed:
            problems.add(
                f"source '{pin.name}': '{slot}' in '{pin.parent}' is already taken by "
                f"'{placed[(pin.parent, slot)]}'"
            )
        placed[(pin.parent, slot)] = pin.name


def parse_lockfile(path: Path) -> Lockfile:
    """The lockfile, validated; every problem of the file is reported together, in the order
    of the steps below."""
    data, text = load_toml(path)
    problems = Problems(path)
    entries = _top_level_entries(problems, data)
    pins = _parse_sources(problems, text, entries)
    _check_parents(problems, pins)
    _check_slots(problems, pins)
    if not entries and not problems.items:
        problems.add("no [[source]] entries: nothing to build (pin at least one upstream)")
    problems.raise_if_any()
    return Lockfile(path=path, pins=tuple(pins))


def rewrite_pin(path: Path, name: str, updates: dict[str, str]) -> None:
    """Change string values of one entry in place, keeping every comment and the layout.

    Used by `patches refresh --onto` to move a pin. Keys missing from the entry are added
    after its `commit` line. The file is replaced atomically.
    """
    from sglforge.base.fs import atomic_write_text

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    headers = array_table_lines(text, "source")
    lock = parse_lockfile(path)
    index = [p.name for p in lock.pins].index(lock.get(name).name)
    start = headers[index]
    end = headers[index + 1] - 1 if index + 1 < len(headers) else len(lines)
    commit_line = key_line(text, start, "commit")
    for key, value in updates.items():
        number = key_line(text, start, key)
        is_date = key == "date" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value)
        rendered = f"{key} = {value}" if is_date else f'{key} = "{value}"'
        if number is not None and number <= end:
            old = lines[number - 1]
            comment = re.search(r'"\s*(#.*)$', old.rstrip("\n"))
            lines[number - 1] = rendered + (f"  {comment.group(1)}" if comment else "") + "\n"
        else:
            at = commit_line if commit_line is not None else start
            lines.insert(at, rendered + "\n")
            end += 1
    atomic_write_text(path, "".join(lines))
    parse_lockfile(path)
