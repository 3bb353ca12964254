"""Registry sdists as pins: `sdist = "tilelang==0.1.11"` + `sha256`, fetched through the
configured package index, so a PyPI mirror (or a directory laid out as one) serves them.

The index is `$SGLFORGE_INDEX`, else `index` in lockfiles/toolchain.toml (next to the
lockfile), else PyPI; mirrors apply to it and to the file URL it names, as to every URL.
From the project's simple page (PEP 691 JSON when the server offers it, else PEP 503 HTML;
for a local index `<index>/<project>/index.html`) the one file named exactly
`<name>-<version>.tar.gz` (PEP 625 spelling, or the project's own spelling of older sdists)
is chosen; a `#sha256=` the page states must be the pin's; the download is verified against
the pin's sha256 ("expected … got …") and only then enters the cache, named by that digest.
The page is data from the network: only its file names and links are read, a link is taken
only with an allowed scheme, and nothing else on it reaches a URL or a path.
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

from sglforge.base.errors import SglforgeError
from sglforge.base.git import check_url
from sglforge.base.requirements import canonical_name
from sglforge.inputs.pins import SDIST, Lockfile, Pin
from sglforge.inputs.settings import Settings
from sglforge.sources.cache import SourceCache

DEFAULT_INDEX = "https://pypi.org/simple"
PAGE_LIMIT = 16 << 20  # a simple page larger than this is refused (PyPI's largest: ~10 MiB)
ACCEPT = (
    "application/vnd.pypi.simple.v1+json, "
    "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
)


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str  # absolute
    sha256: str | None  # what the page says (a hint: the pin's sha256 is what counts)


def package_index(lock: Lockfile) -> tuple[str, str]:
    """(index URL, where it came from): SGLFORGE_INDEX, toolchain.toml `index`, PyPI."""
    if os.environ.get("SGLFORGE_INDEX"):
        return os.environ["SGLFORGE_INDEX"], "env: SGLFORGE_INDEX"
    toolchain = lock.path.parent / "toolchain.toml"
    if toolchain.is_file():
        from sglforge.inputs.toolchain import load_toolchain

        index = load_toolchain(toolchain).index
        if index:
            return index, f"{toolchain.name} index"
    return DEFAULT_INDEX, "default"


def sdist_filenames(requirement: str) -> tuple[str, ...]:
    """The names an sdist of `name==version` may have: PEP 625's, then the name as written."""
    match = SDIST.fullmatch(requirement)
    assert match is not None  # checked when the lockfile was read
    name, version = match.group("name"), match.group("version")
    pep625 = re.sub(r"[-_.]+", "_", name).lower()
    return tuple(dict.fromkeys((f"{pep625}-{version}.tar.gz", f"{name}-{version}.tar.gz")))


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _page_files(body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    files: list[IndexFile] = []
    if "json" in content_type:
        try:
            data = json.loads(body)
            entries = data["files"]
            assert isinstance(entries, list)
        except (ValueError, KeyError, TypeError, AssertionError, RecursionError):
            raise SglforgeError(
                f"{page_url}: not a PEP 691 simple page (no 'files' list)"
            ) from None
        for entry in entries:
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("filename"), str)
                or not isinstance(entry.get("url"), str)
            ):
                continue
            hashes = entry.get("hashes") if isinstance(entry.get("hashes"), dict) else {}
            digest = hashes.get("sha256")
            files.append(
                IndexFile(
                    entry["filename"],
                    urllib.parse.urljoin(page_url, entry["url"]),
                    digest if isinstance(digest, str) else None,
                )
            )
        return files
    parser = _Links()
    parser.feed(body.decode("utf-8", errors="replace"))
    for href, text in parser.links:
        absolute = urllib.parse.urljoin(page_url, href)
        target, _, fragment = absolute.partition("#")
        name = text or urllib.parse.unquote(target.rstrip("/").rsplit("/", 1)[-1])
        digest = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        files.append(IndexFile(name, target, digest))
    return files


def _read_page(url: str) -> tuple[bytes, str]:
    """The project's simple page and its content type (a local index: index.html)."""
    import urllib.request

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        path = Path(urllib.parse.unquote(parsed.path if parsed.scheme else url))
        for candidate in (path / "index.json", path / "index.html"):
            if candidate.is_file():
                with open(candidate, "rb") as handle:
                    body = handle.read(PAGE_LIMIT + 1)
                kind = (
                    "application/vnd.pypi.simple.v1+json"
                    if candidate.suffix == ".json"
                    else "text/html"
                )
                break
        else:
            raise FileNotFoundError(f"no index.html in {path}")
    else:
        request = urllib.request.Request(url, headers={"User-Agent": "sglforge", "Accept": ACCEPT})
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read(PAGE_LIMIT + 1)
            kind = response.headers.get("Content-Type", "text/html")
    if len(body) > PAGE_LIMIT:
        raise SglforgeError(f"{url}: simple page larger than {PAGE_LIMIT >> 20} MiB; refused")
    return body, kind


def find_sdist(pin: Pin, index: str, settings: Settings, origin: str) -> IndexFile:
    """The pin's sdist on the index's simple page for its project."""
    assert pin.sdist is not None
    project = canonical_name(SDIST.fullmatch(pin.sdist).group("name"))
    page = f"{index.rstrip('/')}/{project}/"
    resolved = settings.resolve_url(page)
    shown = page if resolved == page else f"{page} (mirror {resolved})"
    problem = check_url(resolved)
    if problem is not None:
        raise SglforgeError(f"{pin.name}: package index {index!r} ({origin}): {problem}")
    try:
        body, kind = _read_page(resolved)
    except OSError as exc:
        raise SglforgeError(
            f"{pin.name}: cannot read the package index page {shown} (index from {origin}): {exc}",
            hint="check SGLFORGE_INDEX / toolchain.toml `index`, your network, or add a mirror",
        ) from None
    files = _page_files(body, kind, resolved)
    wanted = sdist_filenames(pin.sdist)
    found = [f for f in files if f.filename in wanted]
    if not found:
        sdists = sorted(f.filename for f in files if f.filename.endswith((".tar.gz", ".zip")))
        near = [n for n in sdists if SDIST.fullmatch(pin.sdist).group("version") in n]
        listed = ", ".join(near or sdists[-5:]) or "none"
        raise SglforgeError(
            f"{pin.name}: expected {' or '.join(wanted)} on {shown}, got no such "
            f"file (sdists there: {listed})",
            hint="the release has no sdist on this index, or the pin is wrong",
        )
    chosen = found[0]
    if chosen.sha256 is not None and chosen.sha256 != pin.sha256:
        raise SglforgeError(
            f"{pin.name}: expected sha256 {pin.sha256}, got {chosen.sha256} "
            f"for {chosen.filename} on {shown}",
            hint="the index serves a different file under this name (a "
            "re-upload, or a wrong mirror); nothing was downloaded",
        )
    problem = check_url(chosen.url)
    scheme = chosen.url.split("://", 1)[0] if "://" in chosen.url else ""
    remote_page = resolved.split("://", 1)[0] in ("http", "https")
    if problem is None and scheme not in ("http", "https", "file", ""):
        problem = "not a download URL"
    if problem is None and remote_page and scheme not in ("http", "https"):
        problem = "a remote index may only link to http(s) files, never to local paths"
    if problem is not None:
        raise SglforgeError(
            f"{pin.name}: {shown} links {chosen.filename} to {chosen.url[:120]!r}: {problem}"
        )
    return chosen


def fetch_sdist(
    cache: SourceCache, pin: Pin, settings: Settings, offline: bool, lock: Lockfile
) -> str:
    """Make the pin's sdist present in the cache (by sha256); 'cached', 'fetched', 'missing'."""
    from sglforge.sources.download import fetch_tarball

    assert pin.sha256 is not None
    if cache.tarball(pin.sha256).exists():
        return "cached"
    if offline:
        return "missing"
    index, origin = package_index(lock)
    found = find_sdist(pin, index, settings, origin)
    # the download itself is the tarball path: same streaming, digest check, atomic rename
    return fetch_tarball(cache, replace(pin, url=found.url), settings, offline=False)
