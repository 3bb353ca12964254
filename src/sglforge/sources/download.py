"""Downloading a pinned archive into the source cache: verified by sha256 before it is
kept, written atomically, nothing partial left (fetch.py and sdist.py both use it)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import urllib.parse
import urllib.request

from sglforge.base.errors import SglforgeError
from sglforge.inputs.pins import Pin
from sglforge.inputs.settings import Settings
from sglforge.sources.cache import SourceCache


def describe_source(url: str, settings: Settings) -> str:
    resolved = settings.resolve_url(url)
    return url if resolved == url else f"{url} (mirror {resolved})"


def _open_url(url: str):
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        return open(urllib.parse.unquote(parsed.path) if parsed.scheme else url, "rb")
    request = urllib.request.Request(url, headers={"User-Agent": "sglforge"})
    return urllib.request.urlopen(request, timeout=60)


def fetch_tarball(cache: SourceCache, pin: Pin, settings: Settings, offline: bool) -> str:
    assert pin.sha256 is not None
    target = cache.tarball(pin.sha256)
    if target.exists():
        return "cached"
    if offline:
        return "missing"
    target.parent.mkdir(parents=True, exist_ok=True)
    resolved = settings.resolve_url(pin.url)
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=target.parent)
    digest = hashlib.sha256()
    try:
        try:
            with _open_url(resolved) as response, os.fdopen(fd, "wb") as out:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as exc:
            raise SglforgeError(
                f"{pin.name}: cannot download {describe_source(pin.url, settings)}: {exc}"
            ) from None
        if digest.hexdigest() != pin.sha256:
            raise SglforgeError(
                f"{pin.name}: expected sha256 {pin.sha256}, got {digest.hexdigest()} from "
                f"{describe_source(pin.url, settings)}",
                hint="the archive changed upstream or the pin is wrong; nothing was cached",
            )
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return "fetched"
