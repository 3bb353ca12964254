"""base/remotestore.py against a real WebDAV server (wsgidav on cheroot, tests/fixtures)."""

from __future__ import annotations

import hashlib

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.base.remotestore import IntegrityError, RemoteStore, key_problem
from tests.fixtures.webdav_server import PASSWORD


def test_put_get_exists_round_trip_through_a_temporary_name_and_move(webdav, tmp_path):
    store = RemoteStore.from_url(webdav.url)
    assert not store.exists("ab/abcdef/x.whl")
    assert store.get("ab/abcdef/x.whl", tmp_path / "x.whl") is False
    assert store.get_bytes("ab/abcdef/entry.json") is None
    source = tmp_path / "src.whl"
    source.write_bytes(b"wheel bytes" * 1000)
    store.put("ab/abcdef/x+cpu.whl", source)
    store.put("ab/abcdef/entry.json", b'{"a": 1}\n')
    assert webdav.files() == ["ab/abcdef/entry.json", "ab/abcdef/x+cpu.whl"]  # no temp left
    log = webdav.requests()
    puts = [line for line in log if line.startswith("PUT ")]
    assert all("/.x+cpu.whl.tmp-" in p or "/.entry.json.tmp-" in p for p in puts), puts
    assert any(line.startswith("MOVE /cache/ab/abcdef/.x+cpu.whl.tmp-") for line in log)
    assert any(line.startswith("MKCOL /cache/ab/abcdef/ 201") for line in log)
    assert store.exists("ab/abcdef/x+cpu.whl")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    dest = tmp_path / "out" / "x.whl"
    assert store.get("ab/abcdef/x+cpu.whl", dest, sha256=digest) is True
    assert dest.read_bytes() == source.read_bytes()
    assert store.get_bytes("ab/abcdef/entry.json") == b'{"a": 1}\n'
    # overwrite=False: an existing key is an error, the old bytes stay
    with pytest.raises(SglforgeError, match="exists already"):
        store.put("ab/abcdef/entry.json", b"other", overwrite=False)
    assert store.get_bytes("ab/abcdef/entry.json") == b'{"a": 1}\n'
    assert webdav.files() == ["ab/abcdef/entry.json", "ab/abcdef/x+cpu.whl"]


def test_a_digest_mismatch_keeps_nothing_and_names_the_url(webdav, tmp_path):
    store = RemoteStore.from_url(webdav.url)
    store.put("k/file.bin", b"good")
    (webdav.root / "cache" / "k" / "file.bin").write_bytes(b"evil")  # changed on the server
    dest = tmp_path / "file.bin"
    with pytest.raises(IntegrityError) as error:
        store.get("k/file.bin", dest, sha256=hashlib.sha256(b"good").hexdigest())
    assert f"{webdav.public_url}k/file.bin: sha256" in str(error.value)
    assert not dest.exists() and list(tmp_path.glob(".*download")) == []


def test_read_only_refuses_before_any_request(webdav):
    store = RemoteStore.from_url(webdav.url, read_only=True)
    webdav.clear_log()
    with pytest.raises(SglforgeError, match="read-only: refusing to upload k/x"):
        store.put("k/x", b"data")
    assert webdav.requests() == [] and webdav.files() == []


def test_basic_auth_works_and_credentials_are_never_shown(webdav_auth, tmp_path):
    store = RemoteStore.from_url(webdav_auth.url)
    store.put("k/x", b"data")
    assert store.get_bytes("k/x") == b"data"
    assert PASSWORD not in repr(store) and PASSWORD not in store.url_of("k/x")
    anonymous = RemoteStore.from_url(webdav_auth.public_url)
    with pytest.raises(SglforgeError) as error:
        anonymous.get_bytes("k/x")
    assert "HTTP 401" in str(error.value) and "credentials" in str(error.value)
    wrong = RemoteStore.from_url(webdav_auth.url.replace(PASSWORD, "wrong-pw"))
    with pytest.raises(SglforgeError) as error:
        wrong.put("k/y", b"x")
    assert "wrong-pw" not in str(error.value) and "HTTP 401" in str(error.value)


def test_netrc_supplies_credentials(webdav_auth, tmp_path, monkeypatch):
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login ci password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    store = RemoteStore.from_url(webdav_auth.public_url)
    store.put("k/x", b"via netrc")
    assert store.get_bytes("k/x") == b"via netrc"


def test_a_netrc_default_entry_is_never_sent(webdav_auth, tmp_path, monkeypatch):
    """Issue 21, low: netrc's `default` would hand its credentials to whatever host a config
    names; only a `machine` entry for exactly the configured host is used."""
    netrc = tmp_path / "netrc"
    netrc.write_text(
        f"machine cache.example login other password elsewhere\n"
        f"default login ci password {PASSWORD}\n"
    )
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    store = RemoteStore.from_url(webdav_auth.public_url)
    with pytest.raises(SglforgeError) as error:  # sent nothing, so the server says 401
        store.put("k/x", b"data")
    assert "HTTP 401" in str(error.value) and PASSWORD not in str(error.value)
    assert webdav_auth.files() == []
    netrc.write_text(
        f"default login nobody password wrong\nmachine 127.0.0.1 login ci password {PASSWORD}\n"
    )
    store = RemoteStore.from_url(webdav_auth.public_url)
    store.put("k/x", b"the machine entry")
    assert store.get_bytes("k/x") == b"the machine entry"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://host/x", "scheme must be http or https, got 'ftp'"),
        ("cache.example/x", "scheme must be http or https, got none"),
        ("https:///x", "names no host"),
        ("https://host/x?a=1", "must not have a query or fragment"),
        ("https://host:99999/x", "is not a valid URL"),
        ("https://u:pw@host/x y", "contains spaces or control characters"),
    ],
)
def test_bad_urls_are_one_line_errors_without_credentials(url, problem):
    with pytest.raises(SglforgeError) as error:
        RemoteStore.from_url(url)
    message = str(error.value)
    assert problem in message and "\n" not in message and "pw" not in message


def test_bad_keys_are_refused():
    for key, problem in [
        ("/abs", "leading '/'"),
        ("a/../b", "'..'"),
        ("a//b", "empty"),
        ("a\x00b", "control"),
        ("", "empty"),
        ("a\\b", "backslash"),
    ]:
        assert problem in key_problem(key), key
    assert key_problem("ab/abcd/x-1.0+cu130.abc-py3-none-any.whl") is None


def test_unreachable_server_and_timeouts_are_one_line_errors():
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = RemoteStore.from_url(f"http://u:hidden@127.0.0.1:{port}/c/", timeout=2)
    with pytest.raises(SglforgeError) as error:
        store.exists("k/x")
    message = str(error.value)
    assert message.startswith(f"remote store: HEAD http://127.0.0.1:{port}/c/k/x: cannot connect")
    assert "hidden" not in message and "\n" not in message
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        silent = RemoteStore.from_url(
            f"http://127.0.0.1:{listener.getsockname()[1]}/c/", timeout=0.5
        )
        with pytest.raises(SglforgeError, match=r"GET .*/c/k/x: timed out after 0.5s"):
            silent.get_bytes("k/x")
