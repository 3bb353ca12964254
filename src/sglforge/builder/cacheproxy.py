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
only `Content-Length`/`Content-Type` copied; the proxy answers 400/403/404/405/411/413 itself
(400: a header block that is not plain `name: value` lines, an obs-folded line among them,
or two `Content-Length`s: never forwarded, whatever the server would make of it).

The build may open connections and send bytes at will; the proxy's threads, connections and
memory stay bounded, and a client's misbehaviour never prints to sglforge's stderr:
- at most `max_clients` connections at once, a thread each; one more is answered at once by
  the accepting thread (Redis `-ERR`, HTTP 503), closed and recorded in `refused`;
- the upstream connection is opened for a client's first forwarded command (and logged in
  then), never for a client that only connects or only sends refused commands;
- a client is closed when it sends nothing for `first_command_timeout` seconds after
  connecting, or for `idle_timeout` seconds later on (ccache holds its connection from its
  lookup across the compile to its `SET`/`PUT`, and a CUDA compile can take long), or takes
  nothing of an answer for as long (the timeouts are per socket operation: a client that
  trickles bytes keeps its connection, and its place among the `max_clients`);
- of a Redis command's words only the first 256 bytes are held (ccache's longest key is 207
  bytes): a refused command's arguments are dropped as they stream in, in 64 KiB pieces,
  and the error answered after them, so the stream stays in step and ccache's next command
  on the connection is served (only broken framing closes it: then the next command's start
  is unknown). An allowed `SET`'s value and the server's replies are copied in 64 KiB pieces.
  HTTP: a refused PUT's body is drained in pieces; an allowed one is held (at most 512 MiB);
- at most 1000 refusals are recorded (`refusals` counts all of them).
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

MAX_VALUE = 512 << 20  # Redis' own proto-max-bulk-len default; also the HTTP body cap
CONNECT_TIMEOUT = 10.0
UPSTREAM_TIMEOUT = 60.0
MAX_CLIENTS = 256  # connections at once: a build's parallel compiles each hold one
FIRST_COMMAND_TIMEOUT = 60.0  # ccache sends its first command right after connecting
IDLE_TIMEOUT = 3600.0  # ccache's connection waits out the compile between GET and SET
MAX_RECORDED = 1000  # refusals kept in `refused` (the build log shows the first 50)
WORD_CAP = 256  # bytes of a Redis command word held; longer: never a word ccache sends
CHUNK = 64 << 10  # what is read, copied or dropped at once
REDIS_KEY = re.compile(rb"ccache:[A-Za-z0-9]{1,200}")
_SEGMENT = r"/[A-Za-z0-9_-]{1,200}"
_HEADER_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n\x00]*\r?\n")


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
    one compile). `owner`: the uid that may connect, None: this process's (the sandboxed build runs as it).
    `max_clients`, `first_command_timeout`, `idle_timeout`: the limits of the module's doc
    (the first command's timeout is at most the idle one)."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        read_only: bool,
        owner: int | None = None,
        max_clients: int = MAX_CLIENTS,
        idle_timeout: float = IDLE_TIMEOUT,
        first_command_timeout: float = FIRST_COMMAND_TIMEOUT,
    ) -> None:
        if max_clients < 1 or not idle_timeout > 0 or not first_command_timeout > 0:
            raise ValueError("the cache proxy needs max_clients >= 1 and positive timeouts")
        self.upstream = upstream
        self.read_only = read_only
        self.owner = owner
        self.max_clients = max_clients
        self.idle_timeout = float(idle_timeout)
        self.first_command_timeout = min(float(first_command_timeout), self.idle_timeout)
        self.dir = Path(tempfile.mkdtemp(prefix="sglforge-cc-"))  # short: sun_path is 108 bytes
        self.path = self.dir / "remote.sock"
        self.refused: list[str] = []  # what was refused, for the build's log and tests
        self.refusals = 0  # all of them, `refused` keeps the first MAX_RECORDED
        self._lock = threading.Lock()
        self._active = 0
        self._server: _Server | None = None
        handler = _RedisHandler if upstream.scheme == "redis" else _HttpHandler
        proxy = self

        class Handler(handler):  # type: ignore[misc, valid-type]
            owner_proxy = proxy
            timeout = proxy.first_command_timeout  # StreamRequestHandler.setup sets it

        self._handler = Handler

    @property
    def active(self) -> int:
        """Clients connected now (each with its thread)."""
        return self._active

    def start(self) -> None:
        server = _Server(str(self.path), self._handler, self)
        if self.owner is not None:  # only that uid (and root) may connect
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
        with self._lock:
            self.refusals += 1
            if len(self.refused) < MAX_RECORDED:
                self.refused.append(what)

    def _admit(self) -> bool:
        with self._lock:
            if self._active >= self.max_clients:
                return False
            self._active += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1

    def connect_upstream(self) -> socket.socket:
        up = self.upstream
        if up.unix_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(up.unix_path)
        else:
            sock = socket.create_connection((up.host, up.port), timeout=CONNECT_TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # values go in pieces
        sock.settimeout(UPSTREAM_TIMEOUT)
        return sock


class _Server(socketserver.ThreadingUnixStreamServer):
    """A thread per admitted client, at most `max_clients` of them; errors of a client that
    left (an OSError: EPIPE, ECONNRESET, a timeout) are not printed."""

    daemon_threads = True
    request_queue_size = 128  # a burst of compiles connecting at once waits for accept()

    def __init__(self, path: str, handler: type, proxy: CacheProxy) -> None:
        self.proxy = proxy
        super().__init__(path, handler)

    def verify_request(self, request, client_address) -> bool:
        """Over the limit: answered and closed here, in the accepting thread (no thread, no
        upstream connection); the answer is small enough for the empty socket buffer."""
        proxy = self.proxy
        if proxy._admit():
            return True
        proxy.refuse(
            f"{proxy.upstream.scheme} a connection over the limit of {proxy.max_clients} at once"
        )
        try:
            request.setblocking(False)  # never wait on a client here
            request.send(self.RequestHandlerClass.turn_away)
        except OSError:
            pass
        return False  # the base class closes it (shutdown_request)

    def process_request(self, request, client_address) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.proxy._leave()  # no thread started: nothing else gives the place back
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.proxy._leave()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client left or went quiet mid-exchange: nothing to report
        super().handle_error(request, client_address)


def _drop(data: bytes) -> None:
    pass


def _read_exact(stream, size: int, truncated: str) -> bytes:
    data = stream.read(size) if size else b""
    if len(data) != size:
        raise ProtocolError(truncated)
    return data


def _copy(stream, write: Callable[[bytes], object], size: int, truncated: str) -> None:
    """`size` bytes of `stream` to `write`, CHUNK at a time (never held whole)."""
    while size > 0:
        chunk = stream.read(min(size, CHUNK))
        if not chunk:
            raise ProtocolError(truncated)
        write(chunk)
        size -= len(chunk)


# ---------------------------------------------------------------------------------------------
# Redis


def _bulk(word: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(word), word)


def _resp_command(words: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(_bulk(word) for word in words)


def read_array_head(stream) -> int | None:
    """The number of words of the next RESP command (an array of bulk strings), None at a
    clean end of stream."""
    line = stream.readline(64)
    if not line:
        return None
    if not line.startswith(b"*") or not line.endswith(b"\r\n"):
        shown = re.sub(rb"[^A-Za-z0-9 *$:_-]", b"?", line[:16]).decode()
        raise ProtocolError(f"only RESP arrays are accepted (no inline commands): {shown!r}")
    count = _number(line[1:-2])
    if not 1 <= count <= 8:
        raise ProtocolError(f"a command of {count} words")
    return count


def read_bulk_head(stream) -> int:
    head = stream.readline(64)
    if not head.startswith(b"$") or not head.endswith(b"\r\n"):
        raise ProtocolError("expected a bulk string")
    size = _number(head[1:-2])
    if not 0 <= size <= MAX_VALUE:
        raise ProtocolError(f"a bulk string of {size} bytes")
    return size


def _read_crlf(stream) -> None:
    if _read_exact(stream, 2, "truncated bulk string") != b"\r\n":
        raise ProtocolError("a bulk string without its CRLF")


def read_word(stream, keep: int = WORD_CAP) -> bytes:
    """One bulk string of a command: its first `keep` bytes; the rest is read and dropped."""
    size = read_bulk_head(stream)
    kept = _read_exact(stream, min(size, keep), "truncated bulk string")
    _copy(stream, _drop, size - len(kept), "truncated bulk string")
    _read_crlf(stream)
    return kept


def relay_reply(stream, write: Callable[[bytes], object], depth: int = 0) -> None:
    """One whole RESP2 reply of the server (nested arrays included), copied to `write` in
    pieces of at most CHUNK bytes."""
    line = stream.readline(65536)
    if not line.endswith(b"\r\n") or line[:1] not in (b"+", b"-", b":", b"$", b"*"):
        raise ProtocolError("bad reply from the server")
    kind, value = line[:1], line[1:-2]
    if kind == b"$":
        size = _number(value)
        if size > MAX_VALUE:
            raise ProtocolError("reply too large")
        if size < 0:
            write(line)
        elif size + 2 <= CHUNK:
            write(line + _read_exact(stream, size + 2, "truncated reply"))
        else:
            write(line)
            _copy(stream, write, size + 2, "truncated reply")
        return
    if kind == b"*":
        count = _number(value)
        if count > 1024 or depth >= 4:
            raise ProtocolError("reply too large")
        write(line)
        for _ in range(max(count, 0)):
            relay_reply(stream, write, depth + 1)
        return
    write(line)


def _number(text: bytes) -> int:
    try:
        return int(text)
    except ValueError:
        raise ProtocolError("not a number") from None


def redis_verdict(count: int, name: bytes, key: bytes | None, read_only: bool) -> str | None:
    """Why the proxy refuses a command of `count` words starting `name key` (None: forward
    it); `name` and `key` may be the first WORD_CAP bytes of longer words."""
    upper = name.upper()
    shown = re.sub(rb"[^A-Za-z0-9_-]", b"?", name[:32]).decode()
    shapes = {b"GET": 2, b"EXISTS": 2, b"SET": 3, b"DEL": 2}
    if upper not in shapes:
        return f"command '{shown}' is not one ccache uses"
    if count != shapes[upper]:
        return f"'{shown}' with {count - 1} argument(s)"
    if upper in (b"SET", b"DEL") and read_only:
        return f"'{shown}': the cache is read-only for this build"
    if key is None or not REDIS_KEY.fullmatch(key):
        return f"'{shown}' on a key outside ccache's key space"
    return None


class _RedisHandler(socketserver.StreamRequestHandler):
    owner_proxy: CacheProxy
    turn_away = b"-ERR sglforge cache proxy: too many connections\r\n"
    _upstream: socket.socket | None = None
    _replies = None  # the upstream's buffered reader

    def handle(self) -> None:
        proxy = self.owner_proxy
        try:
            count = read_array_head(self.rfile)  # within first_command_timeout
            if count is not None:
                self.connection.settimeout(proxy.idle_timeout)
            while count is not None:
                if not self._command(count):
                    return
                count = read_array_head(self.rfile)
        except ProtocolError as exc:  # the framing is lost: answered, then closed
            proxy.refuse(f"redis {exc}")
            try:
                self.wfile.write(f"-ERR sglforge cache proxy: {exc}\r\n".encode())
            except OSError:
                pass
        except OSError:
            pass  # the client left or went quiet, or the server did: the connection is closed

    def _command(self, count: int) -> bool:
        """One command: refused (its words dropped as they come, an error answered) or
        forwarded and the server's reply relayed. False: close the connection."""
        proxy, rfile = self.owner_proxy, self.rfile
        name = read_word(rfile)
        key = read_word(rfile) if count > 1 else None
        problem = redis_verdict(count, name, key, proxy.read_only)
        if problem is not None:
            for _ in range(count - (1 if key is None else 2)):
                read_word(rfile, keep=0)
            proxy.refuse(f"redis {problem}")
            self.wfile.write(f"-ERR sglforge cache proxy: {problem}\r\n".encode())
            return True
        assert key is not None
        upstream = self._connect()
        if upstream is None:
            return False
        request = b"*%d\r\n" % count + _bulk(name) + _bulk(key)
        if count == 3:  # SET's value: copied through as it comes (framing checked first)
            size = read_bulk_head(rfile)
            request += b"$%d\r\n" % size
            if size + 2 <= CHUNK:
                value = _read_exact(rfile, size + 2, "truncated bulk string")
                if value[-2:] != b"\r\n":
                    raise ProtocolError("a bulk string without its CRLF")
                upstream.sendall(request + value)
            else:  # a client that stops short leaves the server an unfinished command,
                upstream.sendall(request)  # which it drops when the connection closes
                _copy(rfile, upstream.sendall, size, "truncated bulk string")
                _read_crlf(rfile)
                upstream.sendall(b"\r\n")
        else:
            upstream.sendall(request)
        relay_reply(self._replies, self.wfile.write)
        return True

    def _connect(self) -> socket.socket | None:
        """The upstream connection, opened and logged in for the first forwarded command."""
        if self._upstream is None:
            try:
                self._upstream = self.owner_proxy.connect_upstream()
            except OSError:
                return None  # ccache counts a remote_storage_error and compiles on
            self._replies = self._upstream.makefile("rb")
            if not self._login():
                return None  # wrong password or db: the client sees a closed connection
        return self._upstream

    def _login(self) -> bool:
        assert self._upstream is not None and self._replies is not None
        up = self.owner_proxy.upstream
        steps = []
        if up.password is not None:
            steps.append([b"AUTH", *([up.user.encode()] if up.user else []), up.password.encode()])
        if up.db:
            steps.append([b"SELECT", str(up.db).encode()])
        for words in steps:
            self._upstream.sendall(_resp_command(words))
            if not self._replies.readline(65536).startswith(b"+"):
                return False
        return True

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._upstream is not None:
                self._replies.close()
                self._upstream.close()


# ---------------------------------------------------------------------------------------------
# HTTP


def _header_problem(lines: list[bytes]) -> str | None:
    """Why a request's header lines (as read, up to the blank line) are not accepted."""
    for line in lines:
        if line in (b"\r\n", b"\n", b""):
            break
        if line[:1] in (b" ", b"\t"):
            return "a folded header line (obs-fold) is not accepted"
        if not _HEADER_LINE.fullmatch(line):
            return "a malformed header line"
    return None


class _Recorded:
    """The request's reader while its headers are parsed, keeping the lines as they come."""

    def __init__(self, stream, lines: list[bytes]) -> None:
        self._stream, self._lines = stream, lines

    def readline(self, limit: int = -1) -> bytes:
        line = self._stream.readline(limit)
        self._lines.append(line)
        return line


def _turn_away_http() -> bytes:
    body = b"sglforge cache proxy: too many connections\n"
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )


class _HttpHandler(BaseHTTPRequestHandler):
    owner_proxy: CacheProxy
    protocol_version = "HTTP/1.1"
    server_version = "sglforge-cache-proxy"
    turn_away = _turn_away_http()
    _upstream: http.client.HTTPConnection | None = None
    _header_lines: list[bytes]

    def log_message(self, format: str, *args: object) -> None:
        pass  # client_address of a Unix socket is '': the base class would fail

    def address_string(self) -> str:
        return "build"

    def handle(self) -> None:
        """Requests until the client closes, goes quiet (a timeout) or leaves mid-exchange
        (an OSError anywhere: closed, never a traceback)."""
        self.close_connection = True
        try:
            self.handle_one_request()
            while not self.close_connection:
                self.handle_one_request()
        except OSError:
            self.close_connection = True

    def parse_request(self) -> bool:
        self.connection.settimeout(self.owner_proxy.idle_timeout)  # a request line came
        self._header_lines = []
        real = self.rfile
        self.rfile = _Recorded(real, self._header_lines)  # type: ignore[assignment]
        try:
            if not super().parse_request():
                return False
        finally:
            self.rfile = real
        return self._headers_ok()

    def handle_expect_100(self) -> bool:  # a malformed block gets its 400, not a 100 first
        return self._headers_ok() and super().handle_expect_100()

    def _headers_ok(self) -> bool:
        problem = _header_problem(self._header_lines)
        if problem is None and len(self.headers.get_all("Content-Length") or ()) > 1:
            problem = "more than one Content-Length"
        if problem is not None:
            self._refuse(400, problem)
            return False
        return True

    def _answer(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "text/plain",
        head_length: str | None = None,
    ) -> None:
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
            headers["Content-Type"] = self.headers.get("Content-Type", "application/octet-stream")
        if up.password is not None or up.user is not None:
            token = f"{up.user or ''}:{up.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(
                    up.host, up.port, timeout=UPSTREAM_TIMEOUT
                )
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
        self._answer(
            response.status,
            data,
            response.getheader("Content-Type", "application/octet-stream"),
            head_length=length if length.isdigit() else "0",
        )

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
            while left > 0 and (chunk := self.rfile.read(min(left, CHUNK))):
                left -= len(chunk)
            self._refuse(*refusal)
            return
        body = self.rfile.read(size)
        if len(body) != size:  # the client left mid-body: a truncated entry is not stored
            self.close_connection = True
            return
        self._forward(body)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._upstream is not None:
                self._upstream.close()
