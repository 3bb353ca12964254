"""The compiler cache's proxy in-process, against a real redis-server and a real HTTP cache
server: it logs in for the client, forwards only ccache's commands, refuses hostile bytes
with an error (never a traceback, never a forwarded byte)."""

from __future__ import annotations

import socket
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


def _proxy(redis: RedisServer, read_only: bool, password: str | None = PASSWORD, db: int = 0):
    from sglforge.build.cacheproxy import CacheProxy, Upstream

    proxy = CacheProxy(Upstream("redis", "127.0.0.1", redis.port, password=password, db=db),
                       read_only=read_only)
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
        for words in ([b"SET", b"ccache:abc", b"w"], [b"DEL", b"ccache:abc"],
                      [b"FLUSHDB"], [b"SELECT", b"0"], [b"AUTH", b"x"], [b"EVAL", b"x", b"0"]):
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


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.binary(max_size=200))
def test_hostile_bytes_are_refused_never_forwarded(data):
    """Arbitrary bytes: the parser returns a command, None, or raises ProtocolError."""
    import io

    from sglforge.build.cacheproxy import ProtocolError, read_command, redis_verdict

    stream = io.BufferedReader(io.BytesIO(data))
    try:
        while (words := read_command(stream)) is not None:
            redis_verdict(words, read_only=True)
    except ProtocolError:
        pass


def test_declared_sizes_are_capped(redis):
    proxy = _proxy(redis, read_only=False)
    try:
        for payload in (b"*1000000\r\n", b"*1\r\n$99999999999\r\n", b"*-1\r\n", b"*x\r\n",
                        b"GET ccache:abc\r\n"):
            reply = _talk(proxy.path, payload)
            assert reply.startswith(b"-ERR sglforge cache proxy: "), (payload, reply)
    finally:
        proxy.close()
    assert redis.command("DBSIZE") == "0"


def test_http_paths_methods_and_auth():
    import base64
    import http.client

    from sglforge.build.cacheproxy import CacheProxy, Upstream
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
            proxy = CacheProxy(Upstream("http", "127.0.0.1", server.port, user="ci",
                                        password=PASSWORD, prefix="/ccache"),
                               read_only=read_only)
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
                for path in ("/ccache/../x", "/ccache/a%2fb", "/other/ab", "/ccache/ab?x=1",
                             "/ccache/ab/.hidden", "/ccache"):
                    status, _ = ask("GET", path)
                    assert status == 404, path
                    conn.close()
                status, _ = ask("PUT", "/ccache/ef/gh", b"new")
                assert status == (403 if read_only else 201)
            finally:
                proxy.close()
        assert ("/ccache/ef/gh" in server.store) is True  # only the writable proxy's PUT
        assert server.auth == {
            "Basic " + base64.b64encode(f"ci:{PASSWORD}".encode()).decode()}


def test_a_refused_put_is_answered_after_its_body_arrives():
    """A read-only proxy refusing a PUT reads the body first: a client that sends its body
    after the headers (http.client does) sees the 403, not a broken pipe."""
    import time

    from sglforge.build.cacheproxy import CacheProxy, Upstream
    from tests.fixtures.http_cache import http_cache_server

    with http_cache_server() as server:
        for path, status in (("/ccache/ef/gh", b"403"), ("/elsewhere/ef", b"403")):
            proxy = CacheProxy(Upstream("http", "127.0.0.1", server.port, prefix="/ccache"),
                               read_only=True)
            proxy.start()
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(10)
                    sock.connect(str(proxy.path))
                    sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Length: 3\r\n\r\n".encode())
                    time.sleep(0.3)  # the refusal used to close the socket here
                    sock.sendall(b"new")
                    reply = sock.recv(4096)
                assert reply.split()[1] == status, reply
            finally:
                proxy.close()
        assert "/ccache/ef/gh" not in server.store
