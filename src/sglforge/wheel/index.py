"""A private package index for serving hosts: `sglforge publish DEST` (docs/serving-host.md, "Publishing").

DEST gets a static PEP 503 "simple" repository any plain file server can serve
(`python -m http.server`, nginx, a WebDAV share):

- `files/<wheel>`: the wheels, byte for byte what the lock pins;
- `simple/index.html`: the root page, one link per project (PEP 503 normalized name);
- `simple/<project>/index.html`: one link per file,
  `<a href="../../files/<wheel>#sha256=<hex>" data-requires-python="&gt;=3.10">`
  (Requires-Python from the wheel's METADATA, HTML-escaped);
- `simple/index.json`, `simple/<project>/index.json`: the same as PEP 691 JSON. They are also
  the record the next publish merges with (a server that negotiates PEP 691 may serve them).

Hosts then install the hash-pinned set from it:
`pip install --require-hashes --index-url http://HOST/simple -r lockfiles/wheels.lock`.

**Append-only.** Publishing adds files and links, never removes or replaces them: a file
already in `files/` with other bytes is refused, naming it, before anything is written; the
same bytes again change nothing (re-publishing is byte-for-byte idempotent). **Readers never
see a broken index:** every file is written to a temporary name and renamed, files first,
then the project pages, the root page last, so a link only ever points at a complete file.
**Hostile names** (wheel file names, project names, Requires-Python come from wheels and
wheelhouses): a file name must be a valid wheel name of `[A-Za-z0-9._+!-]` only, its METADATA
must name the same project and version, and everything that reaches HTML is escaped (hrefs
percent-quoted too).

What `publish` lists (`stack_files`): our wheels, checked against wheels/manifest.json and the
lock, and by default the runtime wheels, the `--wheelhouse` files whose sha256 a third-party
pin of the lock allows (bundle's rule), so one index serves all of `lockfiles/wheels.lock`;
`--ours-only` leaves those out. One publish at a time per directory (`LocalTarget.locked`).

The writer works through a `Target` (`exists`, `read`, `write_file`): `LocalTarget` is a
directory; `open_target` is where an `http(s)://` DEST gets its remote target (the WebDAV/HTTP
client of `base/remotestore.py`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import html
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import atomic_output
from sglforge.base.requirements import canonical_name
from sglforge.base.staletemp import remove_stale_temps

API_VERSION = "1.0"  # PEP 629 repository version / PEP 691 api-version
FILES = "files"
SIMPLE = "simple"
_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl")
_PROJECT = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # a PEP 503 normalized name
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Target(Protocol):
    """Where an index is written. Paths are relative, `/`-separated (`files/x.whl`)."""

    def exists(self, relpath: str) -> bool: ...

    def read(self, relpath: str) -> bytes: ...

    def write_file(self, relpath: str, content: bytes | Path, sha256: str | None = None) -> None:
        """Make `relpath` hold `content` atomically (a temporary name, then a rename): a
        reader sees the old file or the new one, never a part. With `sha256`, content with
        another digest is an error and nothing is written."""


@dataclass(frozen=True)
class LocalTarget:
    root: Path

    def __str__(self) -> str:
        return str(self.root)

    def _path(self, relpath: str) -> Path:
        parts = relpath.split("/")
        if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
            raise SglforgeError(f"{self.root}: refusing the path {relpath!r} (not inside)")
        return self.root.joinpath(*parts)

    @contextlib.contextmanager
    def _os_errors(self, path: Path) -> Iterator[None]:
        """An OSError (permissions, a directory where a file goes, a full disk) is one line
        naming the path, not a traceback."""
        try:
            yield
        except OSError as exc:
            raise SglforgeError(f"{path}: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock on the index directory itself (flock; no file is left in
        what is served): a second publisher into it is refused instead of racing on pages."""
        if self.root.exists() and not self.root.is_dir():
            raise SglforgeError(f"{self.root}: not a directory (DEST is the index directory)")
        with self._os_errors(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SglforgeError(
                    f"{self.root}: another publish into this index is "
                    "running; try again when it is done"
                ) from None
            # Holding the lock, every atomic_output temporary in the index is a killed
            # publisher's (a whole wheel, hidden in what is served): remove them.
            remove_stale_temps(self.root, recursive=True)
            yield
        finally:
            os.close(fd)

    def exists(self, relpath: str) -> bool:
        return self._path(relpath).is_file()

    def read(self, relpath: str) -> bytes:
        path = self._path(relpath)
        with self._os_errors(path):
            return path.read_bytes()

    def write_file(self, relpath: str, content: bytes | Path, sha256: str | None = None) -> None:
        path = self._path(relpath)
        digest = hashlib.sha256()
        with self._os_errors(path), atomic_output(path) as out:
            if isinstance(content, bytes):
                digest.update(content)
                out.write(content)
            else:
                with open(content, "rb") as source:
                    while chunk := source.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
            if sha256 is not None and digest.hexdigest() != sha256:
                name = content.name if isinstance(content, Path) else relpath
                raise SglforgeError(
                    f"{name}: sha256 is {digest.hexdigest()} while copying, "
                    f"expected {sha256} (the file changed); nothing written"
                )


def open_target(dest: str) -> Target:
    """DEST of `sglforge publish`: a directory (created when missing), or an http(s):// URL
    served through base/remotestore.py."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", dest)
    if scheme is None:
        return LocalTarget(Path(dest))
    if scheme.group(1).lower() not in ("http", "https"):
        raise SglforgeError(f"{dest}: publish writes to a directory or an http(s):// URL")
    from sglforge.base.remotestore import RemoteStore

    store = RemoteStore.from_url(dest if dest.endswith("/") else dest + "/")
    store.make_base()
    return RemoteTarget(store)


@dataclass(frozen=True)
class RemoteTarget:
    """An index on a WebDAV server (base/remotestore.py): each file is uploaded under a
    temporary name and MOVEd into place, so readers of the served index see whole files only;
    a file under `files/` is MOVEd with `Overwrite: F`, so two publishers racing on one name
    cannot replace a published wheel. There is no cross-host lock: two publishers at once may
    each rewrite a project page and one's link may be lost until the next publish (the files
    stay); run one publish job at a time (the CI workflow's assemble job)."""

    store: Any  # base.remotestore.RemoteStore

    def __str__(self) -> str:
        return self.store.url.rstrip("/")

    def exists(self, relpath: str) -> bool:
        return self.store.exists(relpath)

    def read(self, relpath: str) -> bytes:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sglforge-publish-") as tmp:
            dest = Path(tmp) / "file"
            if not self.store.get(relpath, dest):
                raise SglforgeError(f"{self.store.url_of(relpath)}: not found")
            return dest.read_bytes()

    def write_file(self, relpath: str, content: bytes | Path, sha256: str | None = None) -> None:
        if sha256 is not None:
            digest = (
                hashlib.sha256(content).hexdigest()
                if isinstance(content, bytes)
                else _sha256_path(content)
            )
            if digest != sha256:
                raise SglforgeError(
                    f"{content if isinstance(content, Path) else relpath}: "
                    f"sha256 {digest} is not the expected {sha256}; not "
                    "published"
                )
        self.store.put(relpath, content, overwrite=not relpath.startswith(f"{FILES}/"))


def _sha256_path(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class IndexFile:
    """One file the index links: where it goes and what its link says."""

    filename: str
    project: str  # normalized
    sha256: str
    requires_python: str | None = None
    source: Path | None = None  # the local wheel to copy (None: recorded in the index already)

    def link(self) -> dict:
        entry = {
            "filename": self.filename,
            "url": f"../../{FILES}/{_quote(self.filename)}",
            "hashes": {"sha256": self.sha256},
        }
        if self.requires_python:
            entry["requires-python"] = self.requires_python
        return entry


def _quote(filename: str) -> str:
    return urllib.parse.quote(filename, safe="")


def check_filename(filename: str) -> tuple[str, str]:
    """(normalized project, version) of a wheel file name that is safe in a path, a URL and
    HTML; anything else is an error naming it."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    if not _FILENAME.fullmatch(filename) or ".." in filename:
        raise SglforgeError(
            f"{filename!r}: not a wheel file name publish accepts "
            "([A-Za-z0-9._+!-] only, ending in .whl, no '..')"
        )
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise SglforgeError(f"{filename!r}: invalid wheel file name ({exc})") from None
    project = canonical_name(str(name))
    if not _PROJECT.fullmatch(project):
        raise SglforgeError(f"{filename!r}: project name {project!r} is not a normalized name")
    return project, str(version)


def describe_wheel(path: Path, sha256: str) -> IndexFile:
    """An IndexFile for a local wheel whose sha256 is known (checked again while copying):
    the name checked, METADATA read for Requires-Python and checked against the file name."""
    from packaging.version import InvalidVersion, Version

    from sglforge.wheel.runtime import read_metadata

    project, version = check_filename(path.name)
    metadata = read_metadata(path)
    try:
        same_version = Version(metadata.version) == Version(version)
    except InvalidVersion:
        same_version = False
    if metadata.name != project or not same_version:
        raise SglforgeError(
            f"{path.name}: METADATA says {metadata.name!r} "
            f"{metadata.version!r}, the file name {project} {version}"
        )
    return IndexFile(
        filename=path.name,
        project=project,
        sha256=sha256,
        requires_python=metadata.requires_python,
        source=path,
    )


# -- pages -----------------------------------------------------------------------------------

_HEAD = (
    "<!DOCTYPE html>\n<html>\n  <head>\n"
    f'    <meta name="pypi:repository-version" content="{API_VERSION}">\n'
    "    <title>{title}</title>\n  </head>\n  <body>\n    <h1>{title}</h1>\n"
)
_TAIL = "  </body>\n</html>\n"


def render_root_html(projects: list[str]) -> bytes:
    links = "".join(
        f'    <a href="{_quote(p)}/">{html.escape(p)}</a><br>\n' for p in sorted(projects)
    )
    return (_HEAD.format(title="Simple index") + links + _TAIL).encode()


def render_project_html(project: str, files: list[IndexFile]) -> bytes:
    links = []
    for f in sorted(files, key=lambda f: f.filename):
        attrs = f'href="{html.escape(f.link()["url"])}#sha256={f.sha256}"'
        if f.requires_python:
            attrs += f' data-requires-python="{html.escape(f.requires_python)}"'
        links.append(f"    <a {attrs}>{html.escape(f.filename)}</a><br>\n")
    title = html.escape(f"Links for {project}")
    return (_HEAD.format(title=title) + "".join(links) + _TAIL).encode()


def _json(document: dict) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def render_root_json(projects: list[str]) -> bytes:
    return _json(
        {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in sorted(projects)]}
    )


def render_project_json(project: str, files: list[IndexFile]) -> bytes:
    return _json(
        {
            "meta": {"api-version": API_VERSION},
            "name": project,
            "files": [f.link() for f in sorted(files, key=lambda f: f.filename)],
        }
    )


# -- reading what is there -------------------------------------------------------------------


def _load_json(target: Target, relpath: str, html_page: str) -> dict | None:
    if not target.exists(relpath):
        if target.exists(html_page):
            raise SglforgeError(
                f"{target}/{html_page} exists without {relpath}: not an index "
                "sglforge publish wrote; publish into an empty directory"
            )
        return None
    try:
        data = json.loads(target.read(relpath))
    except (ValueError, RecursionError) as exc:
        raise SglforgeError(
            f"{target}/{relpath}: invalid JSON ({str(exc).split(';')[0]})"
        ) from None
    if not isinstance(data, dict):
        raise SglforgeError(f"{target}/{relpath}: expected a JSON object")
    return data


def existing_projects(target: Target) -> list[str]:
    data = _load_json(target, f"{SIMPLE}/index.json", f"{SIMPLE}/index.html")
    if data is None:
        return []
    projects = data.get("projects")
    names = (
        [p.get("name") if isinstance(p, dict) else None for p in projects]
        if isinstance(projects, list)
        else [None]
    )
    bad = [n for n in names if not isinstance(n, str) or not _PROJECT.fullmatch(n)]
    if bad:
        raise SglforgeError(
            f"{target}/{SIMPLE}/index.json: 'projects' must list normalized names; found {bad[0]!r}"
        )
    return names


def existing_files(target: Target, project: str) -> list[IndexFile]:
    where = f"{SIMPLE}/{project}/index.json"
    data = _load_json(target, where, f"{SIMPLE}/{project}/index.html")
    if data is None:
        return []
    entries = data.get("files")
    if data.get("name") != project or not isinstance(entries, list):
        raise SglforgeError(f"{target}/{where}: expected name {project!r} and a 'files' list")
    files = []
    for i, entry in enumerate(entries):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("filename"), str)
            and isinstance(entry.get("hashes"), dict)
            and _HEX64.fullmatch(str(entry["hashes"].get("sha256", "")))
            and isinstance(entry.get("requires-python", ""), str)
        )
        if not ok:
            raise SglforgeError(
                f"{target}/{where}: files[{i}] needs filename, hashes.sha256 "
                "(64 hex) and an optional requires-python string"
            )
        try:
            named = check_filename(entry["filename"])[0]
        except SglforgeError as exc:
            raise SglforgeError(f"{target}/{where}: files[{i}]: {exc}") from None
        if named != project:
            raise SglforgeError(
                f"{target}/{where}: files[{i}] {entry['filename']} belongs to {named}"
            )
        files.append(
            IndexFile(
                filename=entry["filename"],
                project=project,
                sha256=entry["hashes"]["sha256"],
                requires_python=entry.get("requires-python") or None,
            )
        )
    return files


# -- writing ---------------------------------------------------------------------------------


@dataclass
class Published:
    """What a publish did (for the one-line summary)."""

    projects: int = 0  # in the index after this run
    added: list[str] = field(default_factory=list)  # files copied in this run
    present: int = 0  # given files already in the index, same bytes
    pages: list[str] = field(default_factory=list)  # pages (re)written, in order


def _digest_of(target: Target, relpath: str) -> str:
    return hashlib.sha256(target.read(relpath)).hexdigest()


def write_index(target: Target, files: list[IndexFile]) -> Published:
    """Add `files` (each with a local `source`) to the index at `target`: check everything,
    then write the files, the project pages, the root page last; unchanged pages are not
    rewritten."""
    given: dict[str, IndexFile] = {}
    problems = []
    for f in sorted(files, key=lambda f: f.filename):
        other = given.setdefault(f.filename, f)
        if other.sha256 != f.sha256:
            problems.append(
                f"{f.filename}: given twice with different sha256 ({other.sha256}, {f.sha256})"
            )
    if problems:
        raise ConfigErrors("publish", problems)
    projects = sorted({f.project for f in given.values()})
    recorded = {p: {f.filename: f for f in existing_files(target, p)} for p in projects}
    root_projects = existing_projects(target)
    to_copy: list[IndexFile] = []
    result = Published()
    for f in given.values():
        relpath = f"{FILES}/{f.filename}"
        known = recorded[f.project].get(f.filename)
        there = target.exists(relpath)
        if known is not None and known.sha256 != f.sha256:
            theirs = f"the index records sha256 {known.sha256}"
        elif there and (digest := _digest_of(target, relpath)) != f.sha256:
            theirs = f"{relpath} there has sha256 {digest}"
        else:
            if there:
                result.present += 1
            else:
                to_copy.append(f)
            continue
        problems.append(
            f"{f.filename}: already published with other bytes ({theirs}; this "
            f"one has {f.sha256}): an index is append-only, publish a new version"
        )
    if problems:
        raise ConfigErrors(f"{target}", problems)
    for f in to_copy:  # 1. files, each complete before anything links to it
        target.write_file(f"{FILES}/{f.filename}", f.source, sha256=f.sha256)
        result.added.append(f.filename)

    def put(relpath: str, data: bytes) -> None:
        if not target.exists(relpath) or target.read(relpath) != data:
            target.write_file(relpath, data)
            result.pages.append(relpath)

    for project in projects:  # 2. project pages (JSON record, then the page pip reads)
        merged = {**recorded[project], **{n: f for n, f in given.items() if f.project == project}}
        entries = list(merged.values())
        put(f"{SIMPLE}/{project}/index.json", render_project_json(project, entries))
        put(f"{SIMPLE}/{project}/index.html", render_project_html(project, entries))
    every = sorted(set(root_projects) | set(projects))
    put(f"{SIMPLE}/index.json", render_root_json(every))  # 3. the root page, last
    put(f"{SIMPLE}/index.html", render_root_html(every))
    result.projects = len(every)
    return result


def stack_files(
    wheels_dir: Path, lock: Path, wheelhouses: tuple[Path, ...], runtime: bool = True
) -> tuple[list[IndexFile], int]:
    """The files of the stack `bundle` ships, as IndexFiles: our wheels (wheels/, checked
    against manifest.json and the lock, sha256 included) and, with `runtime`, every
    wheelhouse file whose sha256 a third-party pin of the lock allows (a pin without one is
    an error naming it). Returns (files, third-party pins left out)."""
    from sglforge.wheel.bundle import cached_sha256, find_runtime_wheels
    from sglforge.wheel.wheelset import load_wheelset, refuse_local_only

    wheelset = load_wheelset(wheels_dir, lock)
    refuse_local_only(wheelset.wheels, "publish")
    files = [describe_wheel(w.file, w.sha256) for w in wheelset.wheels]
    third = list(wheelset.third_party)
    if not runtime or not third:
        return files, len(third)
    found = find_runtime_wheels(third, wheelhouses, what="publish")
    files += [
        describe_wheel(path, cached_sha256(path)) for pin in third for path in found[pin.name]
    ]
    return files, 0
