"""The typed TOML reader: ranges, finite numbers, NUL-free strings, unreadable files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.base.tomlfile import Problems, TableReader, load_toml


def reader(data: dict) -> TableReader:
    return TableReader(data, Problems("f.toml"), "t", locate=lambda key: 3)


@pytest.mark.parametrize(
    "value, message",
    [
        (70000, "t, key 'k' (line 3): must be between 1 and 65535, got 70000"),
        (0, "must be between 1 and 65535, got 0"),
        (True, "expected an integer, got True"),
        (1.0, "expected an integer, got 1.0"),
    ],
)
def test_int_range(value, message):
    r = reader({"k": value})
    assert r.int("k", minimum=1, maximum=65535) is None
    assert message in r.problems.items[0]


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), float("-inf"), 1e308, 0, -1.5, "5", False]
)
def test_number_is_finite_positive_and_bounded(value):
    r = reader({"k": value})
    assert r.number("k", default=7.0, maximum=3600.0) == 7.0
    assert r.problems.items, value


def test_number_accepts_ints_and_floats_in_range():
    assert reader({"k": 5}).number("k", default=1.0, maximum=10.0) == 5.0
    assert reader({}).number("k", default=1.0, maximum=10.0) == 1.0


def test_int_list_range_and_nul_strings():
    r = reader({"a": [1, -1], "s": "x\0y", "l": ["ok", "\0"], "t": {"K": "\0"}})
    assert r.int_list("a", minimum=0) is None
    assert r.str("s") is None and r.str_list("l") is None and r.str_table("t") == {}
    assert [p.split(": ", 1)[1] for p in r.problems.items] == [
        "each value must be >= 0, got -1",
        "contains a NUL character",
        "contains a NUL character",
        "contains a NUL character",
    ]


def test_long_values_are_shortened_in_messages():
    r = reader({"k": "x" * 10_000})
    r.int("k")
    assert len(r.problems.items[0]) < 200


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda p: p.write_bytes(b'a = 1\nb = "\xff"\n'),
            "line 2: not UTF-8 text (invalid start byte at byte 11)",
        ),
        (lambda p: p.mkdir(), "is a directory, expected a file"),
        (lambda p: None, "file not found"),
        (lambda p: p.write_text("a = " + "9" * 5000), "invalid TOML: Exceeds the limit"),
    ],
)
def test_unreadable_files_are_errors(tmp_path, make, message):
    path = tmp_path / "f.toml"
    make(path)
    with pytest.raises(SglforgeError, match=re.escape(message)):
        load_toml(path)


@pytest.mark.parametrize(
    "text", ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b = " * 5000 + "1" + "}" * 5000]
)
def test_deeply_nested_toml_is_an_error_naming_the_file(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(SglforgeError, match=re.escape(f"{path}: invalid TOML: ") + ".*nested"):
        load_toml(path)


def test_toml_inputs_are_read_up_to_a_cap(tmp_path):
    from sglforge.base.fs import TOML_INPUT_CAP

    path = tmp_path / "big.toml"
    path.write_bytes(b"# padding\n" * (TOML_INPUT_CAP // 10 + 1))
    with pytest.raises(
        SglforgeError, match=re.escape(f"{path}: larger than the 1 MiB a TOML input may be")
    ):
        load_toml(path)


def test_read_capped_refuses_what_is_not_a_regular_file(tmp_path):
    import os

    from sglforge.base.fs import read_capped

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it without O_NONBLOCK would hang the reader forever
    with pytest.raises(SglforgeError, match="not a regular file"):
        read_capped(fifo, 10, "patch")
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * 10)
    assert read_capped(exact, 10, "patch") == b"x" * 10
    with pytest.raises(SglforgeError, match="larger than the 9 bytes a patch may be"):
        read_capped(exact, 9, "patch")
    with pytest.raises(SglforgeError, match="not a regular file"):  # a device never ends
        read_capped(Path("/dev/zero"), 9, "patch")
