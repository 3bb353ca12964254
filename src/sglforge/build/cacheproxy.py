"""The compiler cache's proxy: the only way a build reaches the remote cache. It runs in the
sglforge process, outside the build's network namespace, listens on a Unix socket, and for
every request of the build's ccache

- authenticates on the build's behalf: the credentials of the configured URL never enter
  the build's environment or any file it can read (Redis: the proxy sends `AUTH` and
  `SELECT` itself on its upstream connection; HTTP: it adds the `Authorization` header);
- enforces read-only at the protocol level, not by a ccache attribute the build could drop;
- goes only to the configured host, and only under the configured key space.

Redis (RESP, the commands ccache 4.7's `RedisStorage.cpp` sends, keys `ccache:<digest>`):
`GET` and `EXISTS` always, `SET key value` and `DEL key` when writable; anything else (an
inline command, `SET` with options, `CONFIG`, `KEYS`, `AUTH`, `SELECT`, `MULTI`, another key
space) is answered with a RESP error and never forwarded. One command is forwarded at a time
and the upstream's reply is read whole before the next, so replies stay in order.

HTTP (ccache's `http-storage`: GET/HEAD reads, PUT writes, DELETE removes): `GET`/`HEAD`
always, `PUT`/`DELETE` when writable, only on paths `<prefix>/<seg>/…/<seg>` with segments of
letters, digits, `_` and `-` (ccache's keys are digests: no dot segments, no percent-encoding,
no query); the request goes to the configured host whatever `Host` the client sends, with
only `Content-Length`/`Content-Type` copied; the proxy answers 403/404/405/411/413 itself.
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import shutil
import socket
import socketserver
import tempfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

MAX_VALUE = 512 << 20  # Redis' own proto-max-bulk-len default; also the HTTP body cap
CONNECT_TIMEOUT = 10.0
REDIS_KEY = re.compile(rb"ccache:[A-Za-z0-9]{1,200}")
_SEGMENT = r"/[A-Za-z0-9_-]{1,200}"


@dataclass(frozen=True)
class Upstream:
    """Where the proxy connects and how it authenticates (never shown: the password)."""

    scheme: str  # "redis" | "http"
    host: str = ""
    port: int = 0
    unix_path: str | None = None  # redis+unix: the server's socket
    user: str | None = None
    password: str | None = None
    db: int = 0
    prefix: str = ""  # http: the URL path every key lives under, without a trailing '/'

    def __repr__(self) -> str:  # the password stays out of any repr or traceback
        where = self.unix_path or f"{self.host}:{self.port}"
        return f"Upstream({self.scheme}, {where}, auth={'yes' if self.password else 'no'})"


class ProtocolError(Exception):
    """The client spoke something the proxy does not forward; the connection is closed."""


class CacheProxy:
    """A Unix socket served by a thread per connection, from `start()` to `close()` (around
    one compile). `owner`: the uid that may connect (the build user), None: this process's."""

    def __init__(self, upstream: Upstream, *, read_only: bool, owner: int | None = None
                 ) -> None:
        self.upstream = upstream
        self.read_only = read_only
        self.owner = owner
        self.dir = Path(tempfile.mkdtemp(prefix="sglforge-cc-"))  # short: sun_path is 108 bytes
        self.path = self.dir / "remote.sock"
        self.refused: list[str] = []  # what was refused, for the build's log and tests
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        handler = _RedisHandler if upstream.scheme == "redis" else _HttpHandler
        proxy = self

        class Handler(handler):  # type: ignore[misc, valid-type]
            owner_proxy = proxy

        self._handler = Handler

    def start(self) -> None:
        server = socketserver.ThreadingUnixStreamServer(str(self.path), self._handler)
        server.daemon_threads = True
        if self.owner is not None:  # only the build user (and root) may connect
            os.chown(self.dir, self.owner, -1)
            os.chown(self.path, self.owner, -1)
        os.chmod(self.dir, 0o700)
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True, name="cc-proxy").start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def refuse(self, what: str) -> None:
        self.refused.append(what)

    def connect_upstream(self) -> socket.socket:
        up = self.upstream
        if up.unix_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(up.unix_path)
        else:
            sock = socket.create_connection((up.host, up.port), timeout=CONNECT_TIMEOUT)
        sock.settimeout(60)
        return sock


# ---------------------------------------------------------------------------------------------
# Redis


def _resp_command(words: list[bytes]) -> bytes:
    out = b"*%d\r\n" % len(words)
    for word in words:
        out += b"$%d\r\n%s\r\n" % (len(word), word)
    return out


def read_command(stream) -> list[bytes] | None:
    """One RESP command (an array of bulk strings), None at a clean end of stream."""
    line = stream.readline(64)
    if not line:
        return None
    if not line.startswith(b"*") or not line.endswith(b"\r\n"):
        shown = re.sub(rb"[^A-Za-z0-9 *$:_-]", b"?", line[:16]).decode()
        raise ProtocolError(f"only RESP arrays are accepted (no inline commands): {shown!r}")
    count = _number(line[1:-2])
    if not 1 <= count <= 8:
        raise ProtocolError(f"a command of {count} words")
    words = []
    for _ in range(count):
        head = stream.readline(64)
        if not head.startswith(b"$") or not head.endswith(b"\r\n"):
            raise ProtocolError("expected a bulk string")
        size = _number(head[1:-2])
        if not 0 <= size <= MAX_VALUE:
            raise ProtocolError(f"a bulk string of {size} bytes")
        data = stream.read(size + 2)
        if len(data) != size + 2 or not data.endswith(b"\r\n"):
            raise ProtocolError("truncated bulk string")
        words.append(data[:-2])
    return words


def read_reply(stream) -> bytes:
    """One whole RESP2 reply, as its bytes (nested arrays included)."""
    line = stream.readline(65536)
    if not line.endswith(b"\r\n") or line[:1] not in b"+-:$*":
        raise ProtocolError("bad reply from the server")
    kind, value = line[:1], line[1:-2]
    if kind == b"$":
        size = _number(value)
        if size < 0:
            return line
        if size > MAX_VALUE:
            raise ProtocolError("reply too large")
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise ProtocolError("truncated reply")
        return line + data
    if kind == b"*":
        count = _number(value)
        if count > 1024:
            raise ProtocolError("reply too large")
        return line + b"".join(read_reply(stream) for _ in range(max(count, 0)))
    return line


def _number(text: bytes) -> int:
    try:
        return int(text)
    except ValueError:
        raise ProtocolError("not a number") from None


def redis_verdict(words: list[bytes], read_only: bool) -> str | None:
    """Why the proxy refuses this command (None: forward it)."""
    name = words[0].upper()
    shown = re.sub(rb"[^A-Za-z0-9_-]", b"?", words[0][:32]).decode()
    shapes = {b"GET": 2, b"EXISTS": 2, b"SET": 3, b"DEL": 2}
    if name not in shapes:
        return f"command '{shown}' is not one ccache uses"
    if len(words) != shapes[name]:
        return f"'{shown}' with {len(words) - 1} argument(s)"
    if name in (b"SET", b"DEL") and read_only:
        return f"'{shown}': the cache is read-only for this build"
    if not REDIS_KEY.fullmatch(words[1]):
        return f"'{shown}' on a key outside ccache's key space"
    return None


class _RedisHandler(socketserver.StreamRequestHandler):
    owner_proxy: CacheProxy

    def handle(self) -> None:
        proxy = self.owner_proxy
        try:
            upstream = proxy.connect_upstream()
        except OSError:
            return  # ccache counts a remote_storage_error and compiles on
        with upstream, upstream.makefile("rb") as replies:
            try:
                if not self._login(upstream, replies):
                    return
                while (words := read_command(self.rfile)) is not None:
                    problem = redis_verdict(words, proxy.read_only)
                    if problem is not None:
                        proxy.refuse(f"redis {problem}")
                        self.wfile.write(f"-ERR sglforge cache proxy: {problem}\r\n".encode())
                        continue
                    upstream.sendall(_resp_command(words))
                    self.wfile.write(read_reply(replies))
            except ProtocolError as exc:
                proxy.refuse(f"redis {exc}")
                self.wfile.write(f"-ERR sglforge cache proxy: {exc}\r\n".encode())
            except OSError:
                return

    def _login(self, upstream: socket.socket, replies) -> bool:
        up = self.owner_proxy.upstream
        steps = []
        if up.password is not None:
            steps.append([b"AUTH", *([up.user.encode()] if up.user else []),
                          up.password.encode()])
        if up.db:
            steps.append([b"SELECT", str(up.db).encode()])
        for words in steps:
            upstream.sendall(_resp_command(words))
            if not read_reply(replies).startswith(b"+"):
                return False  # wrong password or db: the client sees a closed connection
        return True


# ---------------------------------------------------------------------------------------------
# HTTP


class _HttpHandler(BaseHTTPRequestHandler):
    owner_proxy: CacheProxy
    protocol_version = "HTTP/1.1"
    server_version = "sglforge-cache-proxy"
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass  # client_address of a Unix socket is '': the base class would fail

    def address_string(self) -> str:
        return "build"

    def _answer(self, status: int, body: bytes = b"", content_type: str = "text/plain",
                head_length: str | None = None) -> None:
        """The answer, with Content-Length (for HEAD: the upstream's, and no body)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if self.command == "HEAD" and head_length is not None:
            self.send_header("Content-Length", head_length)
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, status: int, why: str) -> None:
        self.owner_proxy.refuse(f"http {self.command} {self.path[:200]!r}: {why}")
        self.close_connection = True
        self._answer(status, f"sglforge cache proxy: {why}\n".encode())

    def _refusal(self) -> tuple[int, str] | None:
        """Why this request is not forwarded (status, reason), or None."""
        proxy = self.owner_proxy
        if self.command in ("PUT", "DELETE") and proxy.read_only:
            return 403, "the cache is read-only for this build"
        pattern = re.escape(proxy.upstream.prefix) + f"(?:{_SEGMENT})+"
        if not re.fullmatch(pattern, self.path):
            return 404, "outside the cache's path"
        return None

    def _allowed(self) -> bool:
        refusal = self._refusal()
        if refusal is not None:
            self._refuse(*refusal)
        return refusal is None

    def _forward(self, body: bytes | None) -> None:
        up = self.owner_proxy.upstream
        headers = {"User-Agent": "sglforge-cache-proxy"}
        if body is not None:
            headers["Content-Length"] = str(len(body))
            headers["Content-Type"] = self.headers.get("Content-Type",
                                                       "application/octet-stream")
        if up.password is not None or up.user is not None:
            token = f"{up.user or ''}:{up.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(up.host, up.port, timeout=60)
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                response = self._upstream.getresponse()
                data = response.read(MAX_VALUE + 1)
                break
            except (OSError, http.client.HTTPException):
                self._upstream.close()
                self._upstream = None
                if attempt == 2:
                    self._refuse(502, "the cache server cannot be reached")
                    return
        if len(data) > MAX_VALUE:
            self._refuse(502, "the server's answer is too large")
            return
        length = response.getheader("Content-Length", "0")
        self._answer(response.status, data,
                     response.getheader("Content-Type", "application/octet-stream"),
                     head_length=length if length.isdigit() else "0")

    def do_GET(self) -> None:
        if self._allowed():
            self._forward(None)

    do_HEAD = do_GET

    def do_DELETE(self) -> None:
        if self._allowed():
            self._forward(None)

    def do_PUT(self) -> None:
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "chunked bodies are not forwarded (send Content-Length)")
            return
        try:
            size = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._refuse(411, "no Content-Length")
            return
        if not 0 <= size <= MAX_VALUE:
            self._refuse(413, "body too large")
            return
        refusal = self._refusal()
        if refusal is not None:
            # Drain the body first (never held): closing on an unread body makes the client's
            # send fail with EPIPE (a Unix socket), so it would never see the 403/404 answer.
            left = size
            while left > 0 and (chunk := self.rfile.read(min(left, 1 << 20))):
                left -= len(chunk)
            self._refuse(*refusal)
            return
        self._forward(self.rfile.read(size))

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        super().finish()
