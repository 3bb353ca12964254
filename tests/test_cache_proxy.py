"""The compiler cache's proxy in-process, against a real redis-server and a real HTTP cache
server: it logs in for the client, forwards only ccache's commands, refuses hostile bytes
with an error (never a traceback, never a forwarded byte). The limits (issue 31, item 5)
against a stand-in upstream that counts its connections and keeps every byte it gets: a
connection limit, no upstream connection before a forwarded command, idle clients closed,
refused arguments dropped as they stream in (memory bounded), a client leaving mid-exchange
prints nothing, malformed (obs-folded) HTTP headers answered 400 and never forwarded.

Every socket wait has a timeout, so a broken proxy fails instead of hanging."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.redis_server import RedisServer, start_redis, stop_redis

PASSWORD = "pw/with?odd#chars@"


@pytest.fixture
def redis(tmp_path) -> Iterator[RedisServer]:
    server = start_redis(tmp_path / "redis", password=PASSWORD)
    yield server
    stop_redis(server)


def _resp(*words: bytes) -> bytes:
    out = b"*%d\r\n" % len(words)
    for word in words:
        out += b"$%d\r\n%s\r\n" % (len(word), word)
    return out


def _talk(path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:  # a proxy that closes on unread input resets: closed too
            pass
    return data


class FakeUpstream:
    """A TCP server standing in for the cache server: counts the connections it accepts and
    keeps every byte it receives; answers each Redis command with a miss (`$-1`) or each
    HTTP request with `201` (kind "http")."""

    def __init__(self, kind: str = "redis") -> None:
        self.kind = kind
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.accepts = 0
        self.received = bytearray()
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.accepts += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            with conn, conn.makefile("rb") as stream:
                while line := stream.readline(65536):
                    self.received += line
                    if self.kind == "redis":
                        for _ in range(int(line[1:-2])):
                            head = stream.readline(65536)
                            self.received += head + stream.read(int(head[1:-2]) + 2)
                        conn.sendall(b"$-1\r\n")
                        continue
                    length = 0
                    while (line := stream.readline(65536)) not in (b"\r\n", b""):
                        self.received += line
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    self.received += stream.read(length)
                    conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=10)
        self.listener.close()


@pytest.fixture
def fake_redis() -> Iterator[FakeUpstream]:
    server = FakeUpstream("redis")
    yield server
    server.close()


@pytest.fixture
def fake_http() -> Iterator[FakeUpstream]:
    server = FakeUpstream("http")
    yield server
    server.close()


def _started(upstream, read_only: bool = True, **limits):
    from sglforge.builder.cacheproxy import CacheProxy

    proxy = CacheProxy(upstream, read_only=read_only, **limits)
    proxy.start()
    return proxy


def _fake_redis_proxy(fake: FakeUpstream, read_only: bool = True, **limits):
    from sglforge.builder.cacheproxy import Upstream

    return _started(Upstream("redis", "127.0.0.1", fake.port), read_only, **limits)


def _fake_http_proxy(fake: FakeUpstream, read_only: bool = True, **limits):
    from sglforge.builder.cacheproxy import Upstream

    return _started(Upstream("http", "127.0.0.1", fake.port, prefix="/ccache"), read_only, **limits)


def _connect(path) -> socket.socket:
    """A client connection; a full listen queue (EAGAIN on a Unix socket) is waited out."""
    deadline = time.monotonic() + 15
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(15)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:
            sock.close()
            assert time.monotonic() < deadline, "the proxy does not accept connections"
            time.sleep(0.01)


def _recv_until(sock: socket.socket, end: bytes) -> bytes:
    """What the proxy sends up to and including `end` (b'' if it closes first)."""
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _recv_lines(sock: socket.socket, count: int) -> list[bytes]:
    """The next `count` lines the proxy sends (fewer if it closes first)."""
    data = b""
    while data.count(b"\r\n") < count and (chunk := sock.recv(65536)):
        data += chunk
    return data.split(b"\r\n")[:count]


def _closed(sock: socket.socket) -> bool:
    """Whether the proxy closes this connection (what it still sends is read and dropped;
    a socket timeout, 15 s, fails the test)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _handler_threads() -> list[threading.Thread]:
    """socketserver's threads of this process (the proxy's and the HTTP cache fixture's)."""
    return [t for t in threading.enumerate() if t.name.endswith("(process_request_thread)")]


def _wait_for_handlers(proxy, seconds: float = 30) -> None:
    """Until the proxy is done with every connection made so far: one more request answered
    (its connection is accepted after theirs, so their threads run), then no handler left."""
    if proxy.upstream.scheme == "redis":
        probe, end = _resp(b"EXISTS", b"ccache:probe"), b"\r\n"
    else:
        probe, end = b"HEAD /ccache/probe HTTP/1.1\r\nConnection: close\r\n\r\n", b"\r\n\r\n"
    with _connect(proxy.path) as client:
        client.sendall(probe)
        assert _recv_until(client, end).endswith(end)
    deadline = time.monotonic() + seconds
    while _handler_threads():
        assert time.monotonic() < deadline, f"handler threads still running: {_handler_threads()}"
        time.sleep(0.05)


def _proxy(redis: RedisServer, read_only: bool, password: str | None = PASSWORD, db: int = 0):
    from sglforge.builder.cacheproxy import CacheProxy, Upstream

    proxy = CacheProxy(
        Upstream("redis", "127.0.0.1", redis.port, password=password, db=db), read_only=read_only
    )
    proxy.start()
    return proxy


def test_redis_login_and_commands(redis):
    writable = _proxy(redis, read_only=False, db=1)
    try:
        assert _talk(writable.path, _resp(b"SET", b"ccache:abc", b"v")) == b"+OK\r\n"
        assert _talk(writable.path, _resp(b"GET", b"ccache:abc")) == b"$1\r\nv\r\n"
        assert _talk(writable.path, _resp(b"EXISTS", b"ccache:abc")) == b":1\r\n"
        refused = _talk(writable.path, _resp(b"SET", b"other", b"v"))
        assert refused.startswith(b"-ERR sglforge cache proxy: 'SET' on a key outside")
    finally:
        writable.close()
    assert redis.command("DBSIZE") == "0"  # database 1 was used: SELECT by the proxy
    read_only = _proxy(redis, read_only=True, db=1)
    try:
        assert _talk(read_only.path, _resp(b"GET", b"ccache:abc")) == b"$1\r\nv\r\n"
        for words in (
            [b"SET", b"ccache:abc", b"w"],
            [b"DEL", b"ccache:abc"],
            [b"FLUSHDB"],
            [b"SELECT", b"0"],
            [b"AUTH", b"x"],
            [b"EVAL", b"x", b"0"],
        ):
            reply = _talk(read_only.path, _resp(*words))
            assert reply.startswith(b"-ERR sglforge cache proxy: "), (words, reply)
        assert _talk(read_only.path, _resp(b"GET", b"ccache:abc")) == b"$1\r\nv\r\n"
        assert len(read_only.refused) == 6
    finally:
        read_only.close()


def test_wrong_password_closes_the_connection(redis):
    proxy = _proxy(redis, read_only=True, password="wrong")
    try:
        assert _talk(proxy.path, _resp(b"GET", b"ccache:abc")) == b""
    finally:
        proxy.close()


def _forwardable(words: list[bytes]) -> bool:
    """What a read-only proxy may forward: ccache's GET/EXISTS on a key of its key space."""
    return (
        len(words) == 2
        and words[0].upper() in (b"GET", b"EXISTS")
        and re.fullmatch(rb"ccache:[A-Za-z0-9]{1,200}", words[1]) is not None
    )


_WORDS = st.one_of(
    st.binary(max_size=24),
    st.sampled_from(
        [
            b"GET",
            b"get",
            b"SET",
            b"set",
            b"DEL",
            b"EXISTS",
            b"ccache:abc",
            b"ccache:",
            b"ccache:a/b",
            b"other:abc",
            b"FLUSHALL",
            b"CONFIG",
            b"AUTH",
            b"SELECT",
            b"EVAL",
            b"0",
            b"v",
        ]
    ),
)
_COMMANDS = st.lists(
    st.lists(_WORDS, min_size=1, max_size=5)
    .filter(lambda w: not _forwardable(w))
    .map(lambda w: _resp(*w)),
    min_size=1,
    max_size=3,
).map(b"".join)
_HOSTILE = st.one_of(
    st.binary(max_size=200), _COMMANDS, st.tuples(_COMMANDS, st.binary(max_size=40)).map(b"".join)
)


def test_hostile_bytes_are_refused_never_forwarded(fake_redis):
    """Arbitrary bytes and well-formed commands a read-only build may not send, through a
    read-only proxy: every answer is the proxy's error, each one recorded, and the upstream
    never sees a connection (let alone a byte)."""
    proxy = _fake_redis_proxy(fake_redis)

    @settings(max_examples=150, derandomize=True, deadline=None)
    @given(_HOSTILE)
    def check(data: bytes) -> None:
        before = len(proxy.refused)
        reply = _talk(proxy.path, data)
        *answers, rest = reply.split(b"\r\n")
        assert rest == b"", reply
        assert all(a.startswith(b"-ERR sglforge cache proxy: ") for a in answers), reply
        assert bool(answers) == bool(data), (data, reply)  # anything at all: refused
        assert len(proxy.refused) - before == len(answers)  # each refusal recorded
        assert fake_redis.accepts == 0 and not fake_redis.received, (data, reply)

    try:
        check()
    finally:
        proxy.close()
    assert fake_redis.accepts == 0 and not fake_redis.received


def test_declared_sizes_are_capped(redis):
    proxy = _proxy(redis, read_only=False)
    try:
        for payload in (
            b"*1000000\r\n",
            b"*1\r\n$99999999999\r\n",
            b"*-1\r\n",
            b"*x\r\n",
            b"GET ccache:abc\r\n",
        ):
            reply = _talk(proxy.path, payload)
            assert reply.startswith(b"-ERR sglforge cache proxy: "), (payload, reply)
    finally:
        proxy.close()
    assert redis.command("DBSIZE") == "0"


def test_http_paths_methods_and_auth():
    import base64
    import http.client

    from sglforge.builder.cacheproxy import CacheProxy, Upstream
    from tests.fixtures.http_cache import http_cache_server

    class UnixHTTP(http.client.HTTPConnection):
        def __init__(self, path: str) -> None:
            super().__init__("localhost")
            self.unix_path = path

        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(self.unix_path)

    with http_cache_server() as server:
        server.store["/ccache/ab/cd"] = b"entry"
        for read_only in (True, False):
            proxy = CacheProxy(
                Upstream(
                    "http", "127.0.0.1", server.port, user="ci", password=PASSWORD, prefix="/ccache"
                ),
                read_only=read_only,
            )
            proxy.start()
            try:
                conn = UnixHTTP(str(proxy.path))  # one kept-alive connection for all

                def ask(method, path, body=None, conn=conn):
                    conn.request(method, path, body=body)
                    response = conn.getresponse()
                    return response.status, response.read()

                assert ask("GET", "/ccache/ab/cd") == (200, b"entry")
                assert ask("HEAD", "/ccache/ab/cd")[0] == 200
                assert ask("GET", "/ccache/ab/none")[0] == 404
                for path in (
                    "/ccache/../x",
                    "/ccache/a%2fb",
                    "/other/ab",
                    "/ccache/ab?x=1",
                    "/ccache/ab/.hidden",
                    "/ccache",
                ):
                    status, _ = ask("GET", path)
                    assert status == 404, path
                    conn.close()
                status, _ = ask("PUT", "/ccache/ef/gh", b"new")
                assert status == (403 if read_only else 201)
            finally:
                proxy.close()
        assert ("/ccache/ef/gh" in server.store) is True  # only the writable proxy's PUT
        assert server.auth == {"Basic " + base64.b64encode(f"ci:{PASSWORD}".encode()).decode()}


def test_a_refused_put_is_answered_after_its_body_arrives():
    """A read-only proxy refusing a PUT reads the body first: a client that sends its body
    after the headers (http.client does) sees the 403, not a broken pipe."""
    import time

    from sglforge.builder.cacheproxy import CacheProxy, Upstream
    from tests.fixtures.http_cache import http_cache_server

    with http_cache_server() as server:
        for path, status in (("/ccache/ef/gh", b"403"), ("/elsewhere/ef", b"403")):
            proxy = CacheProxy(
                Upstream("http", "127.0.0.1", server.port, prefix="/ccache"), read_only=True
            )
            proxy.start()
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(10)
                    sock.connect(str(proxy.path))
                    sock.sendall(
                        f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n".encode()
                    )
                    time.sleep(0.3)  # the refusal used to close the socket here
                    sock.sendall(b"new")
                    reply = sock.recv(4096)
                assert reply.split()[1] == status, reply
            finally:
                proxy.close()
        assert "/ccache/ef/gh" not in server.store


# ---------------------------------------------------------------------------------------------
# limits (issue 31, item 5)


def test_idle_clients_open_no_upstream_connection(fake_redis):
    """Clients that only connect, or send only refused commands, cost the upstream nothing:
    the upstream connection is opened for a client's first forwarded command."""
    proxy = _fake_redis_proxy(fake_redis)
    idle = []
    try:
        for _ in range(60):
            idle.append(_connect(proxy.path))
        refused_only = _connect(proxy.path)
        refused_only.sendall(_resp(b"SET", b"ccache:abc", b"v") + _resp(b"FLUSHALL"))
        answers = _recv_lines(refused_only, 2)
        assert len(answers) == 2, answers
        assert all(a.startswith(b"-ERR sglforge cache proxy: ") for a in answers), answers
        with _connect(proxy.path) as client:  # accepted after all of them: they are served
            client.sendall(_resp(b"GET", b"ccache:abc"))
            assert _recv_until(client, b"\r\n") == b"$-1\r\n"
        assert fake_redis.accepts == 1  # the GET's, none for the 61 others
        assert fake_redis.received == _resp(b"GET", b"ccache:abc")
        refused_only.close()
    finally:
        for sock in idle:
            sock.close()
        proxy.close()


def test_connections_over_the_limit_are_refused_at_once(redis):
    """max_clients=4: four idle clients hold the places; each further one is answered with
    the proxy's error and closed by the accepting thread (no thread, no upstream connection),
    and recorded; a place given back is taken again."""
    from sglforge.builder.cacheproxy import Upstream

    proxy = _started(Upstream("redis", "127.0.0.1", redis.port, password=PASSWORD), max_clients=4)
    held = []
    try:
        threads = len(_handler_threads())
        for _ in range(4):
            sock = _connect(proxy.path)
            sock.sendall(_resp(b"GET", b"ccache:abc"))  # served: it holds a place
            assert _recv_until(sock, b"\r\n") == b"$-1\r\n"
            held.append(sock)
        for _ in range(20):
            with _connect(proxy.path) as extra:
                assert _recv_until(extra, b"\r\n") == (
                    b"-ERR sglforge cache proxy: too many connections\r\n"
                )
                assert _closed(extra)
        over = [r for r in proxy.refused if "over the limit of 4" in r]
        assert len(over) == 20, proxy.refused
        assert proxy.active == 4
        assert len(_handler_threads()) - threads <= 4
        held.pop().close()  # a place given back (once its handler sees the close)
        deadline = time.monotonic() + 20
        while True:
            with _connect(proxy.path) as again:
                try:
                    again.sendall(_resp(b"GET", b"ccache:abc"))
                except BrokenPipeError:
                    pass  # turned away and closed before the GET was sent: still answered
                try:
                    reply = _recv_until(again, b"\r\n")
                except ConnectionResetError:
                    reply = b""  # closed with the GET unread
            if reply == b"$-1\r\n":
                break
            assert reply in (b"", b"-ERR sglforge cache proxy: too many connections\r\n"), reply
            assert time.monotonic() < deadline, "the freed place was never taken again"
            time.sleep(0.05)
    finally:
        for sock in held:
            sock.close()
        proxy.close()


def test_connections_over_the_limit_http(fake_http):
    proxy = _fake_http_proxy(fake_http, max_clients=1)
    try:
        with _connect(proxy.path):  # holds the only place
            with _connect(proxy.path) as extra:
                reply = _recv_until(extra, b"too many connections\n")
                assert reply.startswith(b"HTTP/1.1 503 "), reply
                assert _closed(extra)
        assert any("http a connection over the limit of 1" in r for r in proxy.refused)
        assert fake_http.accepts == 0
    finally:
        proxy.close()


@pytest.mark.parametrize("kind", ["redis", "http"])
def test_an_idle_client_is_closed(fake_redis, fake_http, kind):
    """idle_timeout=1: a client that sends nothing, or nothing more after a request, is
    closed (the socket's own 15 s timeout fails the test if it is not)."""
    start = _fake_redis_proxy if kind == "redis" else _fake_http_proxy
    proxy = start(fake_redis if kind == "redis" else fake_http, read_only=False, idle_timeout=1.0)
    request, answer = (
        (_resp(b"GET", b"ccache:abc"), b"$-1\r\n")
        if kind == "redis"
        else (b"GET /ccache/ab HTTP/1.1\r\nHost: x\r\n\r\n", b"\r\n\r\n")
    )
    try:
        began = time.monotonic()
        with _connect(proxy.path) as silent:
            assert _closed(silent)
            assert time.monotonic() - began >= 0.5  # by the timeout, not at once
        with _connect(proxy.path) as client:
            client.sendall(request)
            assert _recv_until(client, answer).endswith(answer)
            assert _closed(client)
    finally:
        proxy.close()


def test_the_first_command_has_its_own_timeout(fake_redis):
    """first_command_timeout=1, idle_timeout=60: a client silent from the start is closed
    within seconds; one that sent a command may then wait (ccache's compile) and is served."""
    proxy = _fake_redis_proxy(fake_redis, first_command_timeout=1.0, idle_timeout=60.0)
    try:
        with _connect(proxy.path) as silent:
            assert _closed(silent)
        with _connect(proxy.path) as client:
            client.sendall(_resp(b"GET", b"ccache:abc"))
            assert _recv_until(client, b"\r\n") == b"$-1\r\n"
            time.sleep(2.5)  # well past the first command's timeout, far from the idle one
            client.sendall(_resp(b"EXISTS", b"ccache:abc"))
            assert _recv_until(client, b"\r\n") == b"$-1\r\n"
    finally:
        proxy.close()


def test_refused_arguments_are_dropped_as_they_stream(fake_redis):
    """A refused command with a 64 MiB argument (and one with a 16 MiB name) streamed in
    1 MiB pieces: the proxy's allocations (tracemalloc, every thread) peak far below the
    argument's size; the error is answered after the argument and the stream stays in step
    (the GET behind is served); the upstream sees the GET and nothing else."""
    import tracemalloc

    proxy = _fake_redis_proxy(fake_redis)
    piece = b"x" * (1 << 20)
    try:
        with _connect(proxy.path) as client:
            tracemalloc.start()
            try:
                client.sendall(b"*3\r\n$3\r\nSET\r\n$10\r\nccache:abc\r\n$%d\r\n" % (64 << 20))
                for _ in range(64):
                    client.sendall(piece)
                client.sendall(b"\r\n")
                first = _recv_until(client, b"\r\n")
                client.sendall(b"*1\r\n$%d\r\n" % (16 << 20))
                for _ in range(16):
                    client.sendall(piece)
                client.sendall(b"\r\n")
                second = _recv_until(client, b"\r\n")
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            client.sendall(_resp(b"GET", b"ccache:abc"))
            third = _recv_until(client, b"\r\n")
        assert first == (
            b"-ERR sglforge cache proxy: 'SET': the cache is read-only for this build\r\n"
        )
        assert second.startswith(b"-ERR sglforge cache proxy: command 'xxxxx"), second
        assert third == b"$-1\r\n"
        assert peak < 8 << 20, f"the proxy held {peak >> 20} MiB"
        assert fake_redis.received == _resp(b"GET", b"ccache:abc")
        assert len(proxy.refused) == 2
    finally:
        proxy.close()


def test_large_values_are_copied_through(redis):
    """An allowed SET of 3 MiB (copied in pieces) and its GET round-trip intact; a SET cut
    short mid-value leaves nothing on the server."""
    proxy = _proxy(redis, read_only=False)
    value = bytes(range(256)) * (3 << 12)
    try:
        assert _talk(proxy.path, _resp(b"SET", b"ccache:big", value)) == b"+OK\r\n"
        assert _talk(proxy.path, _resp(b"GET", b"ccache:big")) == (
            b"$%d\r\n%s\r\n" % (len(value), value)
        )
        with _connect(proxy.path) as client:
            client.sendall(b"*3\r\n$3\r\nSET\r\n$10\r\nccache:cut\r\n$%d\r\n" % len(value))
            client.sendall(value[: 1 << 20])
        _wait_for_handlers(proxy)
        assert _talk(proxy.path, _resp(b"EXISTS", b"ccache:cut")) == b":0\r\n"
    finally:
        proxy.close()


def test_a_client_leaving_mid_exchange_prints_nothing(redis, capfd):
    """Clients that hang up mid-reply, mid-argument or right after a bad line: the
    connection is closed quietly, nothing on stderr (Redis and HTTP)."""
    from sglforge.builder.cacheproxy import CacheProxy, Upstream
    from tests.fixtures.http_cache import http_cache_server

    big = b"y" * (4 << 20)
    proxy = _proxy(redis, read_only=False)
    try:
        assert _talk(proxy.path, _resp(b"SET", b"ccache:big", big)) == b"+OK\r\n"
        with _connect(proxy.path) as client:  # the reply is far larger than the socket buffer
            client.sendall(_resp(b"GET", b"ccache:big"))
        with _connect(proxy.path) as client:
            client.sendall(b"garbage\r\n")
        with _connect(proxy.path) as client:
            client.sendall(b"*2\r\n$7\r\nFLUSHDB\r\n$%d\r\n" % (1 << 20) + b"z" * 1000)
        _wait_for_handlers(proxy)
    finally:
        proxy.close()
    with http_cache_server() as server:
        server.store["/ccache/big/one"] = big
        proxy = CacheProxy(
            Upstream("http", "127.0.0.1", server.port, prefix="/ccache"), read_only=False
        )
        proxy.start()
        try:
            for request in (
                b"GET /ccache/big/one HTTP/1.1\r\nHost: x\r\n\r\n",
                b"PUT /ccache/ab/cd HTTP/1.1\r\nContent-Length: 1000\r\n\r\nab",
            ):
                with _connect(proxy.path) as client:
                    client.sendall(request)
            _wait_for_handlers(proxy)
        finally:
            proxy.close()
        stored = sorted(server.store)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
    assert stored == ["/ccache/big/one"]  # a body cut short is not stored


@pytest.mark.parametrize(
    ("request_bytes", "why"),
    [
        pytest.param(
            b"PUT /ccache/ab/cd HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b" X-Injected: yes\r\nContent-Length: 3\r\n\r\nnew",
            "obs-fold",
            id="fold-space-put",
        ),
        pytest.param(
            b"GET /ccache/ab/cd HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\tmore\r\n\r\n",
            "obs-fold",
            id="fold-tab",
        ),
        pytest.param(
            b"GET /ccache/ab/cd HTTP/1.1\r\n Host: x\r\n\r\n", "obs-fold", id="fold-first-line"
        ),
        pytest.param(
            b"GET /ccache/ab/cd HTTP/1.1\r\nHost: x\rX-Injected: yes\r\n\r\n",
            "a malformed header line",
            id="bare-cr",
        ),
        pytest.param(
            b"GET /ccache/ab/cd HTTP/1.1\r\nHost : x\r\n\r\n",
            "a malformed header line",
            id="space-before-colon",
        ),
        pytest.param(
            b"PUT /ccache/ab/cd HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nnew",
            "more than one Content-Length",
            id="two-content-lengths",
        ),
    ],
)
def test_malformed_http_headers_are_refused_never_forwarded(fake_http, request_bytes, why):
    """An obs-folded header line (or another malformed header block) is answered 400 and
    the connection closed; nothing reaches the upstream, even on a writable proxy."""
    proxy = _fake_http_proxy(fake_http, read_only=False)
    try:
        with _connect(proxy.path) as client:
            client.sendall(request_bytes)
            reply = _recv_until(client, b"\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 400 "), reply
            assert _closed(client)
        assert len(proxy.refused) == 1 and why in proxy.refused[0], proxy.refused
        assert fake_http.accepts == 0 and not fake_http.received
        with _connect(proxy.path) as client:  # a plain request still goes through
            client.sendall(b"PUT /ccache/ab/cd HTTP/1.1\r\nContent-Length: 3\r\n\r\nnew")
            assert _recv_until(client, b"\r\n\r\n").startswith(b"HTTP/1.1 201 ")
        assert fake_http.accepts == 1
    finally:
        proxy.close()


def test_recorded_refusals_are_capped(fake_redis):
    """A build sending refused commands without end: the first MAX_RECORDED are kept for the
    log, all are counted (the record's memory stays bounded)."""
    from sglforge.builder.cacheproxy import MAX_RECORDED

    proxy = _fake_redis_proxy(fake_redis)
    try:
        count = MAX_RECORDED + 200
        reply = _talk(proxy.path, _resp(b"FLUSHALL") * count)
        refusal = b"-ERR sglforge cache proxy: command 'FLUSHALL' is not one ccache uses\r\n"
        assert reply == refusal * count
        assert len(proxy.refused) == MAX_RECORDED and proxy.refusals == count
        assert fake_redis.accepts == 0
    finally:
        proxy.close()
