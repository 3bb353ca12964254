"""A remote store of files on a WebDAV server over plain HTTP(S): GET, HEAD, PUT, MKCOL, MOVE.

Why WebDAV: ccache's `http-storage` speaks the same GET/PUT protocol, so one server (nginx
with `dav_methods`, Apache mod_dav, wsgidav, `rclone serve webdav` in front of an S3 bucket)
holds both cache tiers; and the client is the standard library (`http.client`): no boto3 in
the build environment.

    store = RemoteStore.from_url("https://user:token@cache.example/sglforge/")
    store.put("ab/abcd…/x.whl", path)       # PUT under a temporary name, then MOVE into place
    store.get("ab/abcd…/x.whl", dest, sha256=digest)   # False when absent

Contracts:
- Keys are '/'-separated relative paths: no leading '/', no empty, '.' or '..' segment, no
  backslash or control character; each segment is percent-encoded in the URL.
- Credentials come from the URL's userinfo, else from the netrc file (`$NETRC`, else
  `~/.netrc`) `machine` entry of exactly the configured host (its `default` entry is never
  used: it would hand its credentials to any host). They are sent as HTTP Basic on every
  request and never appear in an error, a log line or `str(store)` (`store.url` is the URL
  without them).
- Redirects are not followed (an error): credentials never travel to another host.
- Writes are atomic for readers: the bytes go to `<collection>/.<name>.tmp-<random>` and a
  WebDAV MOVE puts them at the key (`Overwrite: T`, or `F` with `overwrite=False`, where an
  existing key is an error). An interrupted upload leaves only a temporary name, which no key
  ever reads. Collections are created with MKCOL as needed.
- `get(..., sha256=)`: downloads next to `dest`, verifies, then renames. A mismatch raises
  `IntegrityError` (an `SglforgeError`) and leaves `dest` untouched: the caller decides
  whether that is fatal (publishing) or a miss (the wheel cache rebuilds, wheelcache.py).
- Downloads are bounded: at most `max_bytes` (a larger `Content-Length` is refused before
  the body, a longer body when it passes the cap: `DownloadTooLarge`), and one total
  `deadline` per object, connect and headers included — a socket timeout alone is not
  enough, a server trickling one byte every few seconds never trips it. A watchdog shuts the
  socket down when the deadline passes. On any failure the partial file is deleted.
  `progress` (a `DownloadProgress`) gets a line every N bytes or seconds of a long download.
- A read-only store refuses `put` with an error before any request.
- Timeouts, connection failures and unexpected HTTP statuses are one-line `SglforgeError`s
  naming the method and the URL (without credentials).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import netrc
import os
import re
import secrets
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from sglforge.base.credentials import mask_url, url_syntax_problem
from sglforge.base.errors import SglforgeError

DEFAULT_TIMEOUT = 60.0  # one socket operation (connect, one read)
DEFAULT_DEADLINE = 1800.0  # one whole download: connect, headers and body
MAX_SMALL_FILE = 16 << 20  # get_bytes refuses more than this
MAX_DOWNLOAD = 64 << 30  # get without max_bytes: the hard maximum of one object
_CHUNK = 1 << 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PCHAR = "+,;=@:!$&'()*"  # allowed unencoded in a path segment (RFC 3986); wheels have '+'


def _quote(segment: str) -> str:
    return quote(segment, safe=_PCHAR)


class IntegrityError(SglforgeError):
    """A downloaded file's sha256 is not the expected one (the file was not kept)."""


class DownloadTooLarge(SglforgeError):
    """A download is larger than its cap (the partial file was not kept)."""


class DownloadProgress:
    """Lines about one long download: one each `every_bytes` or `every_seconds`, whichever
    comes first (a fast small download prints none; a trickle still prints)."""

    def __init__(
        self, name: str, report, *, every_bytes: int = 256 << 20, every_seconds: float = 15.0
    ) -> None:
        self.name, self.report = name, report  # report(line): print, usually
        self.every_bytes, self.every_seconds = every_bytes, every_seconds
        self.started = self._last_time = time.monotonic()
        self._last_bytes = 0

    def update(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if (
            done - self._last_bytes < self.every_bytes
            and now - self._last_time < self.every_seconds
        ):
            return
        self._last_bytes, self._last_time = done, now
        of = f" of {_mib(total)} ({100 * done // max(total, 1)}%)" if total else ""
        self.report(f"{self.name}: {_mib(done)}{of} after {now - self.started:.0f}s")


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class _Watchdog:
    """Ends one exchange at its deadline whatever the server does: shuts the socket down
    (a blocked read returns or fails at once), and remembers that it did."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._timer: threading.Timer | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def arm(self, sock: socket.socket | None, elapsed: float) -> None:
        self._sock = sock
        self._timer = threading.Timer(max(self.seconds - elapsed, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._sock is not None:
                with contextlib.suppress(OSError):  # the fd itself, not SSLSocket.shutdown
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._sock = None


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a remote store (None: it can). Never repeats credentials."""
    if _CONTROL.search(url) or " " in url:
        return "contains spaces or control characters"
    problem = url_syntax_problem(url)  # never the parser's message: it quotes the password
    if problem is not None:
        return problem
    parts = urlsplit(url)
    port = parts.port
    if parts.scheme not in ("http", "https"):
        shown = f"'{parts.scheme}'" if parts.scheme else "none"
        return f"scheme must be http or https, got {shown}"
    if not parts.hostname:
        return "names no host"
    if parts.query or parts.fragment:
        return "must not have a query or fragment"
    if port == 0:
        return "port must be 1-65535"
    return None


def redact(url: str) -> str:
    """`url` without userinfo (what errors and logs show)."""
    if url_syntax_problem(url) is not None:  # where its password ends is not certain
        return mask_url(url)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port else "")
    return f"{parts.scheme}://{netloc}{parts.path}"


def key_problem(key: str) -> str | None:
    if not isinstance(key, str) or not key:
        return "is empty"
    if _CONTROL.search(key):
        return "contains a control character"
    if key.startswith("/"):
        return "must be relative (no leading '/')"
    if "\\" in key:
        return "must not contain a backslash"
    if any(seg in ("", ".", "..") for seg in key.split("/")):
        return "must not have empty, '.' or '..' segments"
    return None


def check_key(key: str) -> str:
    problem = key_problem(key)
    if problem is not None:
        raise SglforgeError(f"remote store key {key!r} {problem}")
    return key


def _netrc_credentials(host: str) -> tuple[str, str] | None:
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    if not path.is_file():
        return None
    try:
        parsed = netrc.netrc(str(path))
    except (netrc.NetrcParseError, OSError) as exc:
        # the message of NetrcParseError quotes the line: it might hold a password
        raise SglforgeError(
            f"{path}: cannot read it ({type(exc).__name__}, line {getattr(exc, 'lineno', '?')})"
        ) from None
    # Only a `machine` entry naming this very host: `authenticators` falls back to the
    # `default` entry, whose credentials would then go to whatever host a config names.
    entry = next((v for k, v in parsed.hosts.items() if k.lower() == host.lower()), None)
    if entry is None:
        return None
    login, _account, password = entry
    return (login or "", password or "")


@contextlib.contextmanager
def _local_file(path: Path):
    """`path` opened for writing; a local failure is an error naming the file (not "cannot
    connect", which is what an OSError inside a request means)."""
    try:
        handle = open(path, "wb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise SglforgeError(f"{path}: cannot write ({exc.strerror or exc})") from None
    with handle:
        yield handle


def _write(handle, data: bytes, path: Path) -> None:
    try:
        handle.write(data)
    except OSError as exc:
        raise SglforgeError(f"{path}: cannot write ({exc.strerror or exc})") from None


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes


class RemoteStore:
    """Files under one base URL (a WebDAV collection)."""

    def __init__(
        self, url: str, *, read_only: bool, timeout: float, credentials: tuple[str, str] | None
    ) -> None:
        parts = urlsplit(url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port
        path = parts.path or "/"
        self.base_path = path if path.endswith("/") else path + "/"
        self.url = redact(url.rstrip("/") + "/")  # without credentials
        self.read_only = read_only
        self.timeout = timeout
        self._auth = None
        if credentials is not None:
            token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
            self._auth = f"Basic {token}"

    @classmethod
    def from_url(
        cls, url: str, *, read_only: bool = False, timeout: float = DEFAULT_TIMEOUT
    ) -> RemoteStore:
        problem = url_problem(url)
        if problem is not None:
            raise SglforgeError(f"remote store URL {redact(url)} {problem}")
        parts = urlsplit(url)
        credentials = None
        if parts.username is not None:
            credentials = (unquote(parts.username), unquote(parts.password or ""))
        else:
            credentials = _netrc_credentials(parts.hostname or "")
        return cls(url, read_only=read_only, timeout=timeout, credentials=credentials)

    def __repr__(self) -> str:
        mode = ", read-only" if self.read_only else ""
        return f"RemoteStore({self.url}{mode})"

    __str__ = __repr__

    # -- addresses ----------------------------------------------------------------------------

    def _path(self, key: str, *, collection: bool = False) -> str:
        segments = [_quote(s) for s in key.split("/")]
        return self.base_path + "/".join(segments) + ("/" if collection else "")

    def url_of(self, key: str) -> str:
        """The public (credential-free) URL of `key`, for messages."""
        return self.url + "/".join(_quote(s) for s in check_key(key).split("/"))

    def _absolute(self, path: str) -> str:
        default = 443 if self.scheme == "https" else 80
        port = f":{self.port}" if self.port and self.port != default else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{port}{path}"

    # -- HTTP ---------------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"User-Agent": "sglforge", **(extra or {})}
        if self._auth:
            headers["Authorization"] = self._auth
        return headers

    def _fail(
        self, method: str, path: str, what: str, kind: type[SglforgeError] = SglforgeError
    ) -> SglforgeError:
        return kind(f"remote store: {method} {self._absolute(path)}: {what}")

    @contextlib.contextmanager
    def _exchange(
        self,
        method: str,
        path: str,
        *,
        body=None,
        headers: dict[str, str] | None = None,
        deadline: float | None = None,
    ):
        """One request on a fresh connection; yields the response (body not yet read).
        `deadline`: seconds for the whole exchange, reading the body included."""
        conn = self._connection()
        started = time.monotonic()
        watchdog = _Watchdog(deadline) if deadline is not None else None
        late = f"exceeded the deadline of {deadline:g}s for one download" if deadline else ""
        try:
            try:
                conn.connect()
                if watchdog is not None:
                    watchdog.arm(conn.sock, time.monotonic() - started)
                conn.request(method, path, body=body, headers=self._headers(headers))
                response = conn.getresponse()
                yield response
            except TimeoutError:
                if watchdog is not None and watchdog.fired:
                    raise self._fail(method, path, late) from None
                raise self._fail(method, path, f"timed out after {self.timeout:g}s") from None
            except ssl.SSLError as exc:
                if watchdog is not None and watchdog.fired:
                    raise self._fail(method, path, late) from None
                raise self._fail(method, path, f"TLS error ({exc.reason or exc})") from None
            except (ConnectionError, OSError) as exc:
                if watchdog is not None and watchdog.fired:
                    raise self._fail(method, path, late) from None
                reason = exc.strerror or type(exc).__name__
                raise self._fail(method, path, f"cannot connect ({reason})") from None
            except (http.client.HTTPException, ValueError) as exc:
                # ValueError: http.client on a mangled chunk size or Content-Length
                if watchdog is not None and watchdog.fired:
                    raise self._fail(method, path, late) from None
                raise self._fail(
                    method, path, f"bad HTTP response ({type(exc).__name__})"
                ) from None
            if watchdog is not None and watchdog.fired:  # the body ended because of it
                raise self._fail(method, path, late)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            conn.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        body=None,
        headers: dict[str, str] | None = None,
        limit: int = 1 << 16,
        deadline: float | None = None,
    ) -> _Response:
        with self._exchange(
            method, path, body=body, headers=headers, deadline=deadline
        ) as response:
            data = response.read(limit)
            return _Response(response.status, data)

    def _unexpected(self, method: str, path: str, status: int) -> SglforgeError:
        reason = http.client.responses.get(status, "")
        if status in (401, 403):
            reason += " (check the credentials in the URL or netrc)"
        if 300 <= status < 400:
            reason += " (redirects are not followed)"
        return self._fail(method, path, f"HTTP {status} {reason}".rstrip())

    # -- reading ------------------------------------------------------------------------------

    def exists(self, key: str, *, deadline: float = DEFAULT_DEADLINE) -> bool:
        path = self._path(check_key(key))
        status = self._request("HEAD", path, deadline=deadline).status
        if status == 200:
            return True
        if status == 404:
            return False
        raise self._unexpected("HEAD", path, status)

    def get_bytes(
        self, key: str, *, limit: int = MAX_SMALL_FILE, deadline: float = DEFAULT_DEADLINE
    ) -> bytes | None:
        """The file's bytes, or None when absent (small files: at most `limit` bytes)."""
        path = self._path(check_key(key))
        with self._exchange("GET", path, deadline=deadline) as response:
            if response.status == 404:
                return None
            if response.status != 200:
                raise self._unexpected("GET", path, response.status)
            self._refuse_declared_size(path, response, limit)
            data = bytearray()
            while len(data) <= limit and (chunk := response.read1(limit + 1 - len(data))):
                data += chunk
        if len(data) > limit:
            raise self._fail("GET", path, f"larger than {limit} bytes", DownloadTooLarge)
        return bytes(data)

    def _refuse_declared_size(
        self, path: str, response: http.client.HTTPResponse, cap: int
    ) -> None:
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > cap:
            raise self._fail(
                "GET",
                path,
                f"Content-Length {declared.strip()} is more than "
                f"the {cap} bytes allowed (not downloaded)",
                DownloadTooLarge,
            )

    def get(
        self,
        key: str,
        dest: Path,
        *,
        sha256: str | None = None,
        max_bytes: int | None = None,
        deadline: float = DEFAULT_DEADLINE,
        progress: DownloadProgress | None = None,
    ) -> bool:
        """Download `key` to `dest` (temporary file next to it, sha256 checked, rename).
        False when the key is absent; `IntegrityError` when the digest differs,
        `DownloadTooLarge` past `max_bytes`, an `SglforgeError` past `deadline` seconds."""
        path = self._path(check_key(key))
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.download")
        try:
            with self._exchange("GET", path, deadline=deadline) as response:
                if response.status == 404:
                    return False
                if response.status != 200:
                    raise self._unexpected("GET", path, response.status)
                cap = MAX_DOWNLOAD if max_bytes is None else max_bytes
                self._refuse_declared_size(path, response, cap)
                declared = response.getheader("Content-Length") or ""
                total = int(declared) if declared.strip().isdigit() else None
                digest, done = hashlib.sha256(), 0
                with _local_file(tmp) as handle:
                    # read1: returns what one receive brings (read(n) waits for all n bytes)
                    while chunk := response.read1(min(_CHUNK, cap + 1 - done)):
                        done += len(chunk)
                        if done > cap:
                            raise self._fail(
                                "GET",
                                path,
                                f"the body is longer than the {cap} "
                                "bytes allowed (download stopped, nothing kept)",
                                DownloadTooLarge,
                            )
                        digest.update(chunk)
                        _write(handle, chunk, tmp)
                        if progress is not None:
                            progress.update(done, total)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise IntegrityError(
                    f"remote store: {self._absolute(path)}: sha256 {digest.hexdigest()[:16]}… "
                    f"is not the expected {sha256[:16]}… (not used)"
                )
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    # -- writing ------------------------------------------------------------------------------

    def _mkcols(self, key: str) -> None:
        segments = key.split("/")[:-1]
        for depth in range(1, len(segments) + 1):
            path = self._path("/".join(segments[:depth]), collection=True)
            status = self._request("MKCOL", path).status
            # 201 created; 405 it exists already (RFC 4918 9.3.1); some servers say 301/409
            if status not in (200, 201, 204, 405):
                raise self._unexpected("MKCOL", path, status)

    def make_base(self) -> None:
        """Create the base collection and its parents where missing (publish's DEST may be
        new; the wheel cache's base is set up by whoever runs the server)."""
        if self.read_only:
            raise SglforgeError(f"remote store {self.url} is read-only: refusing to create it")
        segments = [s for s in self.base_path.split("/") if s]
        for depth in range(1, len(segments) + 1):
            path = "/" + "/".join(segments[:depth]) + "/"
            status = self._request("MKCOL", path).status
            if status not in (200, 201, 204, 301, 405):
                raise self._unexpected("MKCOL", path, status)

    def put(self, key: str, source: Path | bytes, *, overwrite: bool = True) -> None:
        """Upload under a temporary name in the key's collection, then MOVE it to the key."""
        check_key(key)
        if self.read_only:
            raise SglforgeError(f"remote store {self.url} is read-only: refusing to upload {key}")
        self._mkcols(key)
        parent, _, name = key.rpartition("/")
        tmp_key = (parent + "/" if parent else "") + f".{name}.tmp-{secrets.token_hex(8)}"
        tmp_path = self._path(tmp_key)
        if isinstance(source, bytes):
            body, size, handle = source, len(source), None
        else:
            handle = open(source, "rb")  # noqa: SIM115 - closed below
            body, size = handle, os.fstat(handle.fileno()).st_size
        try:
            status = self._request(
                "PUT",
                tmp_path,
                body=body,
                headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
            ).status
        finally:
            if handle is not None:
                handle.close()
        if status not in (200, 201, 204):
            raise self._unexpected("PUT", tmp_path, status)
        target = self._path(key)
        try:
            status = self._request(
                "MOVE",
                tmp_path,
                headers={
                    "Destination": self._absolute(target),
                    "Overwrite": "T" if overwrite else "F",
                },
            ).status
            if status == 412:
                raise self._fail("MOVE", target, "exists already (not overwritten)")
            if status not in (201, 204):
                raise self._unexpected("MOVE", tmp_path, status)
        except BaseException:
            with contextlib.suppress(SglforgeError):
                self._request("DELETE", tmp_path)
            raise
