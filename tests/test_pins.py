"""The lockfile parser: every malformed entry is an error naming file, entry, key and line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.inputs.pins import parse_lockfile, rewrite_pin

GOOD = "0123456789abcdef0123456789abcdef01234567"


def write(tmp_path, text):
    path = tmp_path / "upstreams.toml"
    path.write_text(text)
    return path


def problems_of(tmp_path, text):
    with pytest.raises(ConfigErrors) as err:
        parse_lockfile(write(tmp_path, text))
    return err.value.problems, str(err.value)


def test_good_lockfile_parses_into_typed_pins(tmp_path):
    lock = parse_lockfile(
        write(
            tmp_path,
            f"""
# comment
[[source]]
name = "up"
url = "https://example.invalid/up"
commit = "{GOOD}"
ref = "main"
date = 2026-08-22

[[source]]
name = "up.sub"
parent = "up"
path = "3rdparty/sub"
url = "https://example.invalid/sub"
commit = "{GOOD}"

[[source]]
name = "up.dep"
parent = "up"
fetchcontent = "repo-dep"
url = "https://example.invalid/dep.tar.gz"
sha256 = "{"a" * 64}"
""",
        )
    )
    assert [p.name for p in lock.upstreams()] == ["up"]
    assert lock.get("up").date.isoformat() == "2026-08-22"
    assert [p.name for p in lock.closure("up")] == ["up", "up.sub", "up.dep"]
    assert lock.get("up.dep").is_git is False and lock.get("up.sub").is_submodule


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            f'name = "x"\nurl = "https://x/u"\ncommit = "{GOOD[:7]}"',
            "source #1 'x', key 'commit' (line 5): '0123456' is a short SHA (7 hex digits)",
        ),
        (
            'name = "x"\nurl = "https://x/u"\ncommit = "main"',
            "key 'commit' (line 5): 'main' looks like a branch or tag name",
        ),
        (
            f'name = "x"\nurl = "https://x/u"\ncommit = "{GOOD}"\nbranch = "main"',
            "source #1 'x', key 'branch' (line 6): unknown key",
        ),
        (
            'name = "x"\nurl = "https://x/u"\nsha256 = "abc"',
            "key 'sha256' (line 5): 'abc' is not 64 lowercase hex digits",
        ),
        (f'name = "x"\ncommit = "{GOOD}"', "source #1 'x': missing required key 'url'"),
        ('name = "x"\nurl = "https://x/u"', "missing 'commit' (a 40-hex git commit) or 'sha256'"),
        (
            f'name = "x"\nurl = "https://x/u"\ncommit = "{GOOD}"\nparent = "nope"',
            "source 'x' (line 2), key 'parent': no source named 'nope'",
        ),
        (
            f'name = "x"\nurl = "https://x/u"\ncommit = "{GOOD}"\ndate = "yesterday"',
            "key 'date' (line 6): expected a date like 2026-08-22",
        ),
        (
            f'name = "X Y"\nurl = "https://x/u"\ncommit = "{GOOD}"',
            "key 'name' (line 3): 'X Y' is not a lowercase",
        ),
        (
            f'name = "x"\nurl = "https://x/u"\ncommit = "{GOOD}"\nsha256 = "{"a" * 64}"',
            "give either 'commit' (git) or 'sha256' (tarball), not both",
        ),
    ],
)
def test_each_malformed_entry_names_entry_key_and_line(tmp_path, body, expected):
    problems, message = problems_of(tmp_path, "# header\n[[source]]\n" + body + "\n")
    assert any(expected in p for p in problems), message
    assert str(tmp_path / "upstreams.toml") in message


def test_duplicate_names_and_submodule_without_parent(tmp_path):
    problems, _ = problems_of(
        tmp_path,
        f"""
[[source]]
name = "x"
url = "https://x/u"
commit = "{GOOD}"

[[source]]
name = "x"
url = "https://x/u2"
commit = "{GOOD}"

[[source]]
name = "y"
url = "https://x/u"
commit = "{GOOD}"
path = "sub"
""",
    )
    assert any(
        "source #2 'x', key 'name' (line 8): duplicate name 'x' (first at line 2)" in p
        for p in problems
    )
    assert any("key 'path'" in p and "needs 'parent'" in p for p in problems)


def test_all_problems_reported_together(tmp_path):
    problems, _ = problems_of(
        tmp_path,
        f"""
[[source]]
name = "a"
url = "https://x/u"
commit = "abc1234"

[[source]]
name = "b"
url = "https://x/u"
commit = "{GOOD}"
colour = "blue"
""",
    )
    assert len(problems) == 2


def test_toml_syntax_error_names_file_and_line(tmp_path):
    with pytest.raises(SglforgeError, match=r"upstreams.toml: invalid TOML: .*line 3"):
        parse_lockfile(write(tmp_path, '[[source]]\nname = "x"\nurl = \n'))


def test_cli_reports_bad_lockfile_without_traceback(tmp_path):
    (tmp_path / "lockfiles").mkdir()
    (tmp_path / "lockfiles/upstreams.toml").write_text(
        '[[source]]\nname = "x"\nurl = "https://x/u"\ncommit = "deadbeef"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(tmp_path), "plan"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "key 'commit' (line 4): 'deadbeef' is a short SHA" in proc.stderr


def test_rewrite_pin_keeps_comments_and_other_entries(tmp_path):
    other = "f" * 40
    path = write(
        tmp_path,
        f"""# keep me
[[source]]
name = "up"
url = "https://x/u"
commit = "{GOOD}"  # why: keep this too
ref = "main"

[[source]]
name = "other"
url = "https://x/u"
commit = "{GOOD}"
""",
    )
    rewrite_pin(path, "up", {"commit": other, "date": "2026-09-01"})
    text = path.read_text()
    assert "# keep me" in text and "# why: keep this too" in text
    lock = parse_lockfile(path)
    assert lock.get("up").commit == other and lock.get("other").commit == GOOD
    assert lock.get("up").date.isoformat() == "2026-09-01"
