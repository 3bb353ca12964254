"""Fuzzing the inputs a wheel and a remote cache supply (issue 21 item 7): METADATA headers
(as read by `check`, `lock-runtime` and the remote wheel cache) and remote `entry.json`
(served over real HTTP to `RemoteWheelCache.fetch`). Any exception other than an
`SglforgeError` (a clear one-line message) is a traceback and fails the test.

Deterministic (`derandomize=True`, no example database) and bounded (SGLFORGE_FUZZ_EXAMPLES,
default 60 per test): a few seconds each on a 2-core runner.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sglforge.base.errors import SglforgeError
from sglforge.base.remotestore import RemoteStore
from sglforge.builder.wheelcache import (
    ExpectedWheel,
    RemoteRefused,
    RemoteWheelCache,
    read_entry,
    wheel_identity,
)
from sglforge.check.abi import check_abi
from sglforge.check.findings import Findings
from sglforge.check.resolution import check_resolution
from sglforge.check.stack import Stack, read_wheel
from sglforge.check.target import Target
from sglforge.wheel import runtime
from tests.test_remote_downloads import Hostile

FUZZ = settings(
    max_examples=int(os.environ.get("SGLFORGE_FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

NAMES = ["foo", "Foo_Bar.baz", "sglang", "torch", "", "a b", "x\ny", "-x", "é", "a" * 300]
SPECS = [
    "",
    "==1",
    ">=2,<3",
    "~=3",
    "~=1.0",
    "===x",
    "==1.*",
    "!=",
    "(>=1)",
    "==1.0+local",
    ">=1;",
    "@ https://x/y.whl",
    "[extra]",
    "[a,b]>=1",
]
MARKER_VARS = [
    "python_version",
    "python_full_version",
    "extra",
    "platform_machine",
    "os_name",
    "sys_platform",
    "implementation_version",
    "platform_release",
    "'3.12'",
    "undefined_name",
]
MARKER_OPS = ["==", "!=", "<", ">", "<=", ">=", "~=", "===", "in", "not in", "=", ""]
MARKER_VALUES = [
    '"3"',
    '"3.1"',
    '"abc"',
    '""',
    '"x86_64"',
    '"test"',
    "'1.0+x'",
    '"~="',
    "3",
    '"\\"',
]
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@st.composite
def requirement(draw) -> str:
    if draw(st.booleans()):
        return draw(TEXT)
    text = draw(st.sampled_from(NAMES)) + draw(st.sampled_from(SPECS))
    for _ in range(draw(st.integers(0, 2))):
        marker = (
            f"{draw(st.sampled_from(MARKER_VARS))} {draw(st.sampled_from(MARKER_OPS))} "
            f"{draw(st.sampled_from(MARKER_VALUES))}"
        )
        text += ("; " if ";" not in text else draw(st.sampled_from([" and ", " or "]))) + marker
    return text


HEADER = st.one_of(
    st.tuples(st.just("Requires-Dist"), requirement()),
    st.tuples(
        st.just("Requires-Python"),
        st.one_of(st.sampled_from([">=3.10", "~=3", ">=3.1O", "", "<4,>=3.9", "=== 3"]), TEXT),
    ),
    st.tuples(
        st.sampled_from(["Name", "Version"]),
        st.one_of(
            st.sampled_from(
                [
                    "sglang",
                    "0.5.21",
                    "0.5.21+cu130.abcdef12",
                    "",
                    " ",
                    "1.0\n",
                    "x y",
                    "🐍",
                    "1.0 --hash=sha256:" + "0" * 64,
                ]
            ),
            TEXT,
        ),
    ),
    st.tuples(TEXT, TEXT),
)


@st.composite
def metadata(draw) -> bytes:
    headers = [("Metadata-Version", "2.1")]
    if draw(st.booleans()):
        headers += [("Name", "sglang"), ("Version", "0.5.21")]
    headers += draw(st.lists(HEADER, max_size=8))
    text = "".join(f"{k}: {v}\n" for k, v in headers)
    if draw(st.booleans()):
        text += "\n" + draw(TEXT)  # a description body
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # not UTF-8 at a random place
        at = draw(st.integers(0, len(data)))
        data = (
            data[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"])) + data[at:]
        )
    return data


def _wheel(directory: Path, meta: bytes, wheel_tags: str = "Tag: py3-none-any\n") -> Path:
    path = directory / "sglang-0.5.21-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang/__init__.py", "")
        archive.writestr("sglang-0.5.21.dist-info/METADATA", meta)
        archive.writestr("sglang-0.5.21.dist-info/WHEEL", "Wheel-Version: 1.0\n" + wheel_tags)
    return path


@FUZZ
@given(
    meta=metadata(),
    wheel_tags=st.sampled_from(
        ["Tag: py3-none-any\n", "", "Tag: \n", "Tag: a-b\n", "Tag: py3-none-any\nTag: x y-z-w\n"]
    ),
)
@example(
    meta=b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n"
    b'Requires-Dist: foo; python_version ~= "3"\n',
    wheel_tags="Tag: py3-none-any\n",
)
def test_metadata_headers_never_raise_a_traceback(meta: bytes, wheel_tags: str) -> None:
    target = Target("3.12", "2.13.0")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _wheel(Path(tmp), meta, wheel_tags)
        loose = Path(tmp) / "sglang.METADATA"
        loose.write_bytes(meta)
        for path in (wheel, loose):  # lock-runtime reads both kinds
            try:
                parsed = runtime.read_metadata(path)
                runtime.derive_requirements([parsed], {"sglang"}, "3.12", "2.13.0")
            except SglforgeError:
                pass
        try:
            stacked = read_wheel(wheel, "sglang")
        except SglforgeError:
            stacked = None
        if stacked is not None:  # what `check` does with it
            stack = Stack((stacked,), (), Path(tmp), Path(tmp) / "runtime.lock")
            findings = Findings()
            check_resolution(stack, target, findings)
            check_abi(stack, target, findings)
        try:
            identity = wheel_identity(wheel)
        except SglforgeError:
            identity = None
        if identity is not None:  # what the remote cache may name a file and a lock line
            assert "/" not in identity.filename and identity.filename.endswith(".whl")
            assert not any(c.isspace() or ord(c) < 32 for c in identity.name + identity.version)


# -- remote entry.json, served over HTTP ------------------------------------------------------

KEY = "cd" + "2" * 62
GOOD_WHEEL_META = b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n"
JSON_ATOMS = [
    None,
    True,
    0,
    -1,
    1.5,
    10**30,
    "",
    "x",
    "a\nb",
    "../x",
    "/etc/passwd",
    [],
    {},
    "README.md",
    "sglang-0.5.21-py3-none-any.whl",
    "0" * 64,
    "sglang",
    "0.5.21",
]
JSON_VALUE = st.recursive(
    st.one_of(st.sampled_from(JSON_ATOMS), TEXT, st.integers()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)
FIELDS = ["file", "sha256", "name", "version", "size", "stat"]


class _Served(Hostile):
    wheel: bytes = b""

    def do_GET(self) -> None:
        if self.path.endswith(".whl") and self.path not in Hostile.entries:
            Hostile.requested.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(_Served.wheel)))
            self.end_headers()
            self.wfile.write(_Served.wheel)
            return
        super().do_GET()


@st.composite
def entry_bytes(draw, good: dict) -> bytes:
    choice = draw(st.integers(0, 5))
    if choice == 0:  # raw bytes: truncated good JSON, junk, deep nesting
        raw = json.dumps(good).encode()
        return draw(
            st.sampled_from(
                [
                    raw[: draw(st.integers(0, len(raw)))],
                    b"\xff\xfe",
                    b"[" * 5000,
                    b"1e999999",
                    b"9" * 5000,
                    b"",
                    b'{"file": "a", "file": "b"}',
                ]
            )
        )
    if choice == 1:
        return json.dumps(draw(JSON_VALUE)).encode()
    meta = dict(good)
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        if draw(st.booleans()):
            meta.pop(field, None)
        else:
            meta[field] = draw(st.one_of(JSON_VALUE, st.sampled_from(JSON_ATOMS)))
    return json.dumps(meta).encode()


@pytest.fixture(scope="module")
def served():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Served)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/c/"
    server.shutdown()
    server.server_close()


@FUZZ
@given(data=st.data())
def test_remote_entries_never_raise_a_traceback_or_leave_a_file(served, data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _wheel(Path(tmp), GOOD_WHEEL_META)
        _Served.wheel = wheel.read_bytes()
        good = {
            "file": wheel.name,
            "sha256": hashlib.sha256(_Served.wheel).hexdigest(),
            "name": "sglang",
            "version": "0.5.21",
            "size": len(_Served.wheel),
        }
        raw = data.draw(entry_bytes(good))
        Hostile.sent, Hostile.requested = {}, []
        Hostile.entries = {f"/c/{KEY[:2]}/{KEY}/entry.json": raw}
        try:
            read_entry(raw)
        except ValueError:
            pass
        store = RemoteStore.from_url(served, read_only=True)
        dest = Path(tmp) / "remote"
        try:
            found = RemoteWheelCache(store, report=lambda line: None).fetch(
                KEY, "k" * 64, dest, ExpectedWheel("sglang")
            )
        except RemoteRefused:
            found = None
        # the served wheel has no provenance: no entry is ever trusted
        assert found is None
        assert not dest.exists() or list(dest.iterdir()) == []


def test_the_good_entry_reaches_the_wheel_and_is_refused_only_for_its_provenance(tmp_path):
    """The fuzz test's baseline: its valid entry gets as far as the provenance check."""
    wheel = _wheel(tmp_path, GOOD_WHEEL_META)
    assert (
        read_entry(
            json.dumps(
                {"file": wheel.name, "sha256": "0" * 64, "name": "sglang", "version": "0.5.21"}
            )
        )["file"]
        == wheel.name
    )
    identity = wheel_identity(wheel)
    assert (identity.name, identity.version, identity.filename) == (
        "sglang",
        "0.5.21",
        "sglang-0.5.21-py3-none-any.whl",
    )
