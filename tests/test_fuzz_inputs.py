"""Hostile inputs never produce a traceback (issue 9, items 3 and 7).

Property-based: Hypothesis damages one input file of a complete offline project (lockfile,
toolchain, recipe, series, patch, profile, wheels.lock, runtime.lock, manifest) the way a pull
request could — delete/duplicate/replace lines, swap value types, truncate, insert bytes that
are not UTF-8, huge numbers, quoted paths — and runs the verbs that read it through the CLI's
in-process `main()`. Exit 0/1/2 with a message is fine; any other exception escaping `main()`
is a traceback and fails the test. Deterministic (`derandomize=True`, no example database) and
bounded: the whole module runs in well under a minute on a 2-core runner.

Every crash the fuzzer found is kept below as an explicit case (`REGRESSIONS`), with the
message the user now gets.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import fuzzproject
from tests.fixtures.project import SRC

FUZZ = settings(
    max_examples=int(os.environ.get("SGLFORGE_FUZZ_EXAMPLES", "100")),
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SMOKE = ("smoke", "--profile", "standin")
# Which verbs read which input (all of them offline).
VERBS = {
    "lockfile": [("plan",), ("patches", "lint"), ("patches", "check", "--offline")],
    "toolchain": [("plan",), ("build-requirements",)],
    "recipe": [("plan",), ("build-requirements",)],
    "series": [("plan",), ("patches", "lint"), ("patches", "check", "--offline")],
    "patch": [("patches", "lint"), ("patches", "check", "--offline")],
    "profile": [(*SMOKE, "--dry-run"), ("doctor", "--profile", "standin")],
    "wheels-lock": [(*SMOKE, "--dry-run"), ("doctor", "--profile", "standin")],
    "manifest": [(*SMOKE, "--dry-run"), ("doctor", "--profile", "standin")],
    "runtime-lock": [],  # read by `build` only: exercised through its loader below
}

# Values a hostile or careless edit puts where another type belongs.
VALUES = [
    '"text"',
    '""',
    "0",
    "-1",
    "70000",
    "99999999999999999999",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "1.5",
    "true",
    "[]",
    '[1, "a"]',
    '["x", "y"]',
    "{}",
    "{ a = 1 }",
    "2026-13-45",
    "2026-08-01",
    '"../../etc/passwd"',
    '"/abs/path"',
    '"a\\\\"',
    '"\\u00e9\\u0000"',
    "'''multi\nline'''",
    '"-–upload-pack=touch /tmp/x"',
    '"fd::0"',
    '"ext::sh -c id"',
    "[[1]]",
]
JSON_VALUES = [
    "null",
    "1",
    "-1",
    "1e999",
    '"x"',
    "[]",
    "{}",
    "true",
    "[1, 2]",
    '"../../../etc/passwd"',
    "9" * 5000,
    "[" * 3000,
]
# Whole lines a mutation inserts (headers, quoted diff paths, hunks, series entries).
LINES = [
    "[[source]]",
    "[source]",
    "[prefill]",
    "[checks]",
    "[build-requires]",
    "[env]",
    "port = 70000",
    "health = nan",
    "needle-lengths = [-1]",
    "concurrency = 100000000",
    "upstream = 7",
    'name = "x"',
    "= 1",
    "[[",
    '"unterminated',
    "backport https://example.invalid/x " + "0" * 40 + " sha256=" + "0" * 64,
    "backport --upload-pack=x " + "0" * 40,
    "../escape.patch",
    "0002-missing.patch",
    'diff --git "a/src/\\303\\251" "b/src/\\303\\251"',
    'diff --git "a/x\\\\" b/x',
    '--- "a/src/purepy/__init__.py\\"',
    '+++ "b/\\u00e9"',
    "+++ b/../../outside",
    "@@ -1,99999999999999999999 +1,1 @@",
    "@@ -0,0 +0,0 @@",
    "@@ -1 +1 @@",
    "\\ No newline",
    "new file mode 120000",
    "old mode 100644",
    "rename from ../x",
    "Binary files a/x and b/x differ",
    "GIT binary patch",
    "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
    "Subject: =?utf-8?q?=FF?=",
    "Last-Update: 2026-99-99",
    "sglang==1.0 --hash=sha256:" + "0" * 64,
    "x==1 \\",
    "-r other.txt",
    "--hash=sha256:zz",
    '{"wheels": [{"file": "../../x", "name": 1}]}',
    "\x00",
    "\r",
    "\ufeff",
]
NOT_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80abc", b"\xf4\x90\x80\x80"]

# Values the structural mutation puts into a parsed file (which is then written back valid).
OBJECTS = [
    "x",
    "",
    0,
    -1,
    70000,
    2**63 - 1,
    -(2**63),
    10**20,
    1e308,
    float("nan"),
    float("inf"),
    -0.0,
    1.5,
    True,
    False,
    [],
    [1, "a"],
    ["x"],
    [-1, 0],
    {},
    {"a": 1},
    dt.date(2026, 8, 1),
    "../../etc/passwd",
    "/abs/path",
    "a\\",
    "\u00e9\x00",
    "fd::0",
    "--upload-pack=x",
    "{unknown}",
    "{python}",
    "x" * 5000,
    "{cuda!x}",
    "{patchset8:d}",
    "{version:>999999999}",
    "a..b",
    "a\x00b",
]
# Keys the structural mutation adds: unknown ones, and names no environment accepts (a
# profile's env table: '=' splits a name, '$(…)' runs when a --dry-run line is pasted).
KEYS = ["unknown-0", "unknown-1", "A=B", "$(touch pwned)", "", "1X", "a b", "X\n", "\u00e9"]
# Nesting deeper than tomllib's and json's recursion (RecursionError before issue 21).
DEEP = [b"x = " + b"[" * 3000 + b"]" * 3000, b"x = " + b"{a = " * 3000 + b"1" + b"}" * 3000]
ASSIGN = re.compile(rb"^(\s*[\"']?[A-Za-z0-9_.-]+[\"']?\s*[=:]\s*)(.*)$")


def mutate(data: bytes, ops: list[tuple[str, int, int]], kind: str) -> bytes:
    """Apply `ops` (operation, position seed, choice seed) to `data`."""
    for op, pos, choice in ops:
        lines = data.split(b"\n")
        index = pos % max(1, len(lines))
        if op == "delete":
            del lines[index]
        elif op == "duplicate":
            lines.insert(index, lines[index])
        elif op == "insert":
            lines.insert(index, LINES[choice % len(LINES)].encode())
        elif op == "swap":
            # Replace the value of an assignment (`key = value`, `"key": value`) at or after
            # `index` by a value of another type.
            for offset in range(len(lines)):
                i = (index + offset) % len(lines)
                match = ASSIGN.match(lines[i])
                if match:
                    pool = JSON_VALUES if kind == "manifest" else VALUES
                    new = pool[choice % len(pool)].encode()
                    tail = b"," if kind == "manifest" and lines[i].rstrip().endswith(b",") else b""
                    lines[i] = match.group(1) + new + tail
                    break
        elif op == "truncate":
            return b"\n".join(lines)[: pos % max(1, len(data))]
        elif op == "not-utf8":
            joined = b"\n".join(lines)
            at = pos % (len(joined) + 1)
            data = joined[:at] + NOT_UTF8[choice % len(NOT_UTF8)] + joined[at:]
            continue
        elif op == "crlf":
            data = b"\n".join(lines).replace(b"\n", b"\r\n")
            continue
        elif op == "tree":
            data = tree_mutate(data, kind, pos, choice)
            continue
        elif op == "huge":
            lines.insert(index, b"x = " + b"9" * (1000 + choice % 5000))
        elif op == "nest":
            lines.insert(
                index,
                DEEP[choice % len(DEEP)] if kind != "manifest" else b"[" * (1000 + choice % 3000),
            )
        data = b"\n".join(lines)
    return data


def tree_mutate(data: bytes, kind: str, pos: int, choice: int) -> bytes:
    """Parse a TOML/JSON input, replace, delete or add one value anywhere, write it back:
    syntactically valid files with wrong types and values reach the validators."""
    import tomllib

    is_json = kind == "manifest"
    try:
        tree = json.loads(data) if is_json else tomllib.loads(data.decode())
    except (ValueError, RecursionError):
        return data  # already broken by an earlier mutation
    slots: list[tuple[object, object]] = []

    def walk(node: object) -> None:
        items = (
            node.items()
            if isinstance(node, dict)
            else (enumerate(node) if isinstance(node, list) else ())
        )
        for key, value in list(items):
            slots.append((node, key))
            walk(value)

    walk(tree)
    if not slots:
        return data
    node, key = slots[pos % len(slots)]
    value = OBJECTS[choice % len(OBJECTS)]
    action = (choice // len(OBJECTS)) % 4
    if is_json and isinstance(value, dt.date):
        value = value.isoformat()
    if action == 0 and (len(node) > 1 or isinstance(node, dict)):
        del node[key]
    elif action == 1 and isinstance(node, dict):
        node[KEYS[choice % len(KEYS)]] = value
    else:
        node[key] = value
    try:
        if is_json:
            return json.dumps(tree, indent=1).encode()
        return tomli_w.dumps(tree).encode()
    except (TypeError, ValueError):
        return data  # e.g. a list mixing tables and values: not expressible in TOML


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "tree",
                "tree",
                "tree",
                "delete",
                "duplicate",
                "insert",
                "swap",
                "swap",
                "truncate",
                "not-utf8",
                "crlf",
                "huge",
                "nest",
            ]
        ),
        st.integers(0, 10_000),
        st.integers(0, 10_000),
    ),
    min_size=1,
    max_size=3,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return fuzzproject.build(tmp_path_factory.mktemp("fuzz-project"))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-clones")


def run_verbs(clone: fuzzproject.Clone, kind: str, verbs=None) -> list[tuple]:
    """Run every verb that reads `kind`; a traceback propagates and fails the test."""
    results = []
    for verb in verbs if verbs is not None else VERBS[kind]:
        code, out, err = clone.main(*verb)
        assert code in (0, 1, 2), (verb, code, out, err)
        if code == 2:
            assert err.startswith("error: ") or "usage:" in err, (verb, err)
        results.append((verb, code, out, err))
    return results


def load_directly(clone: fuzzproject.Clone, kind: str) -> None:
    """The loaders themselves: only `SglforgeError` may come out of them."""
    from sglforge.base.errors import SglforgeError
    from sglforge.smoke.profile import load_profile
    from sglforge.wheel.outputs import load_manifest, read_runtime_lock
    from sglforge.wheel.wheelset import load_wheelset

    try:
        if kind == "profile":
            assert_launchable(load_profile(clone.path(kind), clone.root))
        elif kind == "runtime-lock":
            read_runtime_lock(clone.path(kind), {"purepy"})
        elif kind == "manifest":
            load_manifest(clone.path(kind))
            load_wheelset(clone.root / "wheels", clone.root / "lockfiles" / "wheels.lock")
        elif kind == "wheels-lock":
            load_wheelset(clone.root / "wheels", clone.root / "lockfiles" / "wheels.lock")
    except SglforgeError:
        pass


def assert_launchable(profile) -> None:
    """A profile that loads can be launched: every env name is one execve accepts and a
    pasted --dry-run line sets (before issue 21, 'A=B' loaded and the launch raised
    ValueError)."""
    for env in (profile.server.env, profile.prefill.env, profile.decode.env, profile.router.env):
        for name, value in env.items():
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), name
            assert "\0" not in value


def fuzz_one(pristine, scratch, kind: str, ops, check: bool = True) -> None:
    clone = fuzzproject.clone(pristine, scratch / kind)
    path = clone.path(kind)
    path.write_bytes(mutate(path.read_bytes(), ops, kind))
    load_directly(clone, kind)
    verbs = [v for v in VERBS[kind] if check or "check" not in v]
    run_verbs(clone, kind, verbs)


def test_pristine_project_is_accepted(pristine, scratch):
    clone = fuzzproject.clone(pristine, scratch / "pristine")
    for kind in VERBS:
        for verb, code, out, err in run_verbs(clone, kind):
            assert code == 0, (verb, out, err)


# One property per input family: failures name the file that was damaged. `patches check`
# (an export + strict apply, ~0.3 s) runs for series and patch mutations, where it matters.


@FUZZ
@given(ops=OPS)
# Found by this test before the fixes (kept as regressions):
@example(ops=[("tree", 1, 57)])  # an int where a [[source]] table belongs: TypeError
@example(ops=[("huge", 0, 3301)])  # a 4301-digit integer: ValueError out of tomllib
@example(ops=[("truncate", 0, 0)])  # empty lockfile: nothing to build
def test_fuzz_lockfile(pristine, scratch, ops):
    fuzz_one(pristine, scratch, "lockfile", ops, check=False)


@FUZZ
@given(ops=OPS, kind=st.sampled_from(["toolchain", "recipe"]))
@example(ops=[("huge", 0, 3301)], kind="toolchain")  # found: ValueError out of tomllib
@example(
    ops=[("tree", 6, OBJECTS.index("{cuda!x}") + 2 * len(OBJECTS))],  # local-version
    kind="recipe",
)  # found: ValueError in plan
def test_fuzz_toolchain_and_recipe(pristine, scratch, ops, kind):
    fuzz_one(pristine, scratch, kind, ops)


@FUZZ
@given(ops=OPS, kind=st.sampled_from(["series", "patch"]))
@example(ops=[("crlf", 0, 0)], kind="patch")
@example(ops=[("insert", 15, LINES.index('+++ "b/\\u00e9"'))], kind="patch")
def test_fuzz_series_and_patches(pristine, scratch, ops, kind):
    fuzz_one(pristine, scratch, kind, ops)


@FUZZ
@given(ops=OPS)
@example(ops=[("nest", 0, 0)])  # found: RecursionError out of tomllib
def test_fuzz_profile(pristine, scratch, ops):
    fuzz_one(pristine, scratch, "profile", ops)


WAIVERS = Path(__file__).resolve().parents[1] / "lockfiles" / "api-waivers.toml"


@FUZZ
@given(ops=OPS)
@example(ops=[("nest", 0, 1)])  # found: RecursionError out of tomllib
def test_fuzz_waivers(tmp_path_factory, ops):
    """lockfiles/api-waivers.toml, read by `check`: only an SglforgeError may come out."""
    from sglforge.base.errors import SglforgeError
    from sglforge.check.waivers import load_policy

    path = tmp_path_factory.mktemp("waivers") / "api-waivers.toml"
    path.write_bytes(mutate(WAIVERS.read_bytes(), ops, "waivers"))
    try:
        load_policy(path)
    except SglforgeError:
        pass


@FUZZ
@given(ops=OPS, kind=st.sampled_from(["wheels-lock", "runtime-lock", "manifest"]))
@example(ops=[("not-utf8", 0, 0)], kind="wheels-lock")  # found: UnicodeDecodeError
@example(ops=[("not-utf8", 0, 0)], kind="runtime-lock")  # found: UnicodeDecodeError
@example(ops=[("not-utf8", 0, 0)], kind="manifest")  # found: UnicodeDecodeError
@example(ops=[("tree", 0, 0)], kind="manifest")  # {"wheels": ...} replaced by "x"
def test_fuzz_wheel_set_files(pristine, scratch, ops, kind):
    fuzz_one(pristine, scratch, kind, ops)


# ---------------------------------------------------------------------------------------------
# Regressions: the cases of issue 9 item 3 and every crash the fuzzer found, with the message
# the user gets now. (kind, damage, verb, exit code, expected text in stderr+stdout)


def replace(old: str, new: str):
    def damage(path: Path) -> None:
        text = path.read_text()
        assert old in text, (old, text)
        path.write_text(text.replace(old, new, 1))

    return damage


def write(data: bytes):
    return lambda path: path.write_bytes(data)


def insert_bytes(data: bytes, after_line: int = 1):
    def damage(path: Path) -> None:
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join(lines[:after_line] + [data] + lines[after_line:]))

    return damage


def make_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


DRY = (*SMOKE, "--dry-run")
DOCTOR = ("doctor", "--profile", "standin")
CHECK = ("patches", "check", "--offline")
RANGE = "must be a finite number > 0 and <= 604800"
REGRESSIONS = [
    # --- issue 9 item 3 (the loaders) ---
    (
        "wheels-lock",
        insert_bytes(b"\xff\xfe"),
        DRY,
        0,
        "wheels.lock: line 2: not UTF-8 text (invalid start byte at byte",
    ),
    ("wheels-lock", insert_bytes(b"\xff\xfe"), DOCTOR, 0, "wheels.lock: line 2: not UTF-8 text"),
    (
        "manifest",
        insert_bytes(b"\xc3\x28", 2),
        DOCTOR,
        0,
        "manifest.json: line 3: not UTF-8 text (invalid continuation byte",
    ),
    (
        "manifest",
        write(b"{not json"),
        DOCTOR,
        0,
        "manifest.json: invalid JSON: Expecting property name enclosed in double quotes",
    ),
    (
        "manifest",
        write(b'{"wheels": [1, {"file": 2}]}'),
        DOCTOR,
        0,
        "wheels[0]: needs string keys file, sha256, name, version",
    ),
    (
        "manifest",
        write(b'{"wheels": {"file": "x"}}'),
        DOCTOR,
        0,
        'expected {"wheels": [...]} with at least one wheel',
    ),
    (
        "manifest",
        write(
            b'{"wheels": [{"file": "../../../etc/passwd", "name": "x", '
            b'"version": "1", "sha256": "0"}]}'
        ),
        DOCTOR,
        0,
        "'file' must be a file name in",
    ),
    (
        "series",
        make_directory,
        ("plan",),
        2,
        "series: 1 problem:\n  - cannot read the series file: is a directory",
    ),
    (
        "series",
        make_directory,
        ("patches", "lint"),
        1,
        "cannot read the series file: is a directory",
    ),
    ("series", make_directory, CHECK, 2, "cannot read the series file: is a directory"),
    (
        "profile",
        replace("port = 30103", "port = 70000"),
        DOCTOR,
        2,
        "[router], key 'port' (line 52): must be between 1 and 65535, got 70000",
    ),
    (
        "profile",
        replace("port = 30100", "port = 0"),
        DRY,
        2,
        "[prefill], key 'port' (line 30): must be between 1 and 65535, got 0",
    ),
    (
        "profile",
        replace("health = 20", "health = nan"),
        DRY,
        2,
        f"[timeouts], key 'health' (line 56): {RANGE}, got nan",
    ),
    (
        "profile",
        replace("request = 20", "request = inf"),
        DRY,
        2,
        f"[timeouts], key 'request' (line 59): {RANGE}, got inf",
    ),
    (
        "profile",
        replace("router = 30", "router = 1e308"),
        DRY,
        2,
        f"[timeouts], key 'router' (line 58): {RANGE}, got 1e+308",
    ),
    (
        "profile",
        replace("teardown = 5", "teardown = -inf"),
        DRY,
        2,
        f"[timeouts], key 'teardown' (line 60): {RANGE}, got -inf",
    ),
    (
        "profile",
        replace("needle-lengths = [", "needle-lengths = [-5, "),
        DRY,
        2,
        (
            "[checks], key 'needle-lengths' (line 63): each value must be between 1 and 1048576, "
            "got -5"
        ),
    ),
    (
        "profile",
        replace("needle-must-recall = [", "needle-must-recall = [0, "),
        DRY,
        2,
        (
            "[checks], key 'needle-must-recall' (line 69): each value must be between 1 and 1048576, "
            "got 0"
        ),
    ),
    (
        "profile",
        replace("concurrency = 8", "concurrency = 99999999999"),
        DRY,
        2,
        "[checks], key 'concurrency' (line 73): must be between 1 and 1024, got 99999999999",
    ),
    (
        "profile",
        replace("words-per-token = 1.0", "words-per-token = nan"),
        DRY,
        2,
        "[checks], key 'words-per-token' (line 72): must be a finite number > 0 and <= 10, got nan",
    ),
    (
        "lockfile",
        write(b""),
        ("plan",),
        2,
        "upstreams.toml: 1 problem:\n  - no [[source]] entries: nothing to build",
    ),
    (
        "lockfile",
        write(b"# all gone\n"),
        ("patches", "lint"),
        2,
        "no [[source]] entries: nothing to build",
    ),
    (
        "toolchain",
        insert_bytes(b'cuda = "\xff"', 0),
        ("plan",),
        2,
        "toolchain.toml: line 1: not UTF-8 text (invalid start byte at byte 8)",
    ),
    # --- crashes the fuzzer found (input -> exception before the fix) ---
    # source = [1, 2] -> TypeError: argument of type 'int' is not iterable (pins.py)
    (
        "lockfile",
        write(b"source = [1, 2]\n"),
        ("plan",),
        2,
        "source #1: expected a table ([[source]]), got 1",
    ),
    # a 5000-digit integer -> ValueError from tomllib (int digit limit) in load_toml
    (
        "recipe",
        insert_bytes(b"nvcc-threads = " + b"9" * 5000, 0),
        ("plan",),
        2,
        "purepy.toml: invalid TOML: Exceeds the limit (4300 digits)",
    ),
    # a 5000-digit JSON number / 3000-deep nesting -> ValueError / RecursionError (wheelset.py)
    ("manifest", write(b"9" * 5000), DRY, 0, "manifest.json: invalid JSON: Exceeds the limit"),
    ("manifest", write(b"[" * 3000), DOCTOR, 0, "manifest.json: invalid JSON: maximum recursion"),
    # template conversions/format specs -> ValueError / MemoryError in plan (recipes.py)
    (
        "recipe",
        replace("cpu.{patchset8}", "cpu.{patchset8!x}"),
        ("plan",),
        2,
        "'cpu.{patchset8!x}' is not a valid template",
    ),
    (
        "recipe",
        replace("cpu.{patchset8}", "cpu.{cuda:d}"),
        ("build-requirements",),
        2,
        "'cpu.{cuda:d}' is not a valid template",
    ),
    (
        "recipe",
        replace("cpu.{patchset8}", "cpu.{cuda:>999999999999999999}"),
        ("plan",),
        2,
        "is not a valid template",
    ),
    # quoted diff paths with bad escapes -> UnicodeDecodeError in diffparse._unquote (then);
    # now a malformed-diff finding naming the patch and line (`patches check` exits 1)
    (
        "patch",
        replace("+++ b/src/purepy/__init__.py", '+++ "b/src/purepy/\\x"'),
        CHECK,
        1,
        "(0001-greeting.patch): malformed diff at line",
    ),
    (
        "patch",
        replace("--- a/src/purepy/__init__.py", '--- "a/src/purepy/__init__.py\\"'),
        CHECK,
        1,
        "(0001-greeting.patch): malformed diff at line",
    ),
    # --- issue 21 item 7: deep nesting -> RecursionError out of tomllib; an env name with '='
    # loaded and failed at launch (ValueError: illegal environment variable name) ---
    (
        "recipe",
        insert_bytes(DEEP[0], 0),
        ("plan",),
        2,
        "purepy.toml: invalid TOML: arrays or inline tables nested too deeply for the parser",
    ),
    (
        "lockfile",
        insert_bytes(DEEP[1], 0),
        ("plan",),
        2,
        "upstreams.toml: invalid TOML: arrays or inline tables nested too deeply",
    ),
    (
        "profile",
        insert_bytes(DEEP[0], 0),
        DRY,
        2,
        "standin.toml: invalid TOML: arrays or inline tables nested too deeply",
    ),
    (
        "profile",
        replace("STANDIN_RUN_DIR = ", '"A=B" = "x"\nSTANDIN_RUN_DIR = '),
        DRY,
        2,
        "[server] env, key 'A=B' (line 21): not an environment variable name",
    ),
    # --- issue 21 item 11: every input read up to a cap that fits its kind (before: read
    # whole, whatever its size) ---
    (
        "patch",
        write(b"Description: x\n" + b" padding\n" * (2 << 20)),
        ("patches", "lint"),
        1,
        "0001-greeting.patch: larger than the 16 MiB a patch may be — refused",
    ),
    (
        "series",
        write(b"# padding\n" * ((1 << 20) // 10 + 1)),
        ("plan",),
        2,
        "cannot read the series file: larger than the 1 MiB a series file may be",
    ),
    (
        "recipe",
        write(b"# padding\n" * ((1 << 20) // 10 + 1)),
        ("plan",),
        2,
        "purepy.toml: larger than the 1 MiB a TOML input may be — refused",
    ),
    (
        "wheels-lock",
        write(b"# padding\n" * ((16 << 20) // 10 + 1)),
        DRY,
        0,
        "wheels.lock: larger than the 16 MiB a text input may be — refused",
    ),
    # host with a NUL -> TypeError from socket.bind in doctor (now refused for every string)
    (
        "profile",
        replace('host = "127.0.0.1"', 'host = "a\\u0000b"'),
        DOCTOR,
        2,
        "profile, key 'host' (line 4): contains a NUL character",
    ),
]


@pytest.mark.parametrize(
    "kind, damage, verb, code, message",
    REGRESSIONS,
    ids=[f"{r[0]}-{i}" for i, r in enumerate(REGRESSIONS)],
)
def test_hostile_input_regressions(pristine, scratch, kind, damage, verb, code, message):
    clone = fuzzproject.clone(pristine, scratch / "regression")
    damage(clone.path(kind))
    load_directly(clone, kind)
    [(_, got, out, err)] = run_verbs(clone, kind, [verb])
    assert message in err + out, err + out
    assert got == code, (got, err + out)


def test_runtime_lock_not_utf8_names_file_and_line(tmp_path):
    from sglforge.base.errors import SglforgeError
    from sglforge.wheel.outputs import read_runtime_lock

    lock = tmp_path / "runtime.lock"
    lock.write_bytes(fuzzproject.RUNTIME_LOCK.encode() + b"x==1 \xff\n")
    with pytest.raises(SglforgeError, match=r"runtime.lock: line 4: not UTF-8 text"):
        read_runtime_lock(lock, set())
    lock.unlink()
    lock.mkdir()
    with pytest.raises(SglforgeError, match="runtime.lock: is a directory, expected a file"):
        read_runtime_lock(lock, set())


@pytest.mark.parametrize(
    "kind, damage, verb",
    [
        ("profile", replace("port = 30103", "port = 70000"), DOCTOR),
        ("wheels-lock", insert_bytes(b"\xff"), DRY),
        ("series", make_directory, ("plan",)),
        ("lockfile", write(b""), ("plan",)),
    ],
)
def test_real_cli_prints_no_traceback(pristine, tmp_path, kind, damage, verb):
    """A few through `python -m sglforge` as users run it (stdout/stderr encoding included)."""
    clone = fuzzproject.clone(pristine, tmp_path / "project")
    damage(clone.path(kind))
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("SGLFORGE_PROJECT", None)
    result = subprocess.run(
        [sys.executable, "-m", "sglforge", *pristine.args(root=clone.root), *verb],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 2), result.stderr
