"""--jobs and --mem-per-job: argparse errors naming the flag and the value, never a traceback."""

from __future__ import annotations

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.builder.scheduler import Machine, plan_jobs
from sglforge.cli.main import main


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--jobs", "99999999999999999999", "expected a whole number from 1 to 4096"),
        ("--jobs", "0", "expected a whole number from 1 to 4096"),
        ("--jobs", "-1", "expected a whole number from 1 to 4096"),
        ("--jobs", "many", "expected a whole number from 1 to 4096"),
        ("--mem-per-job", "0GiB", "must be more than 0 and at most 1 PiB"),
        ("--mem-per-job", "banana", "expected a size like 6GiB or 512MiB"),
        ("--mem-per-job", "9" * 400 + "GiB", "expected a size like 6GiB or 512MiB"),
    ],
)
def test_bad_jobs_and_memory_flags_are_cli_errors(flag, value, message, capsys):
    for verb in ("build", "verify"):
        with pytest.raises(SystemExit) as info:
            main([verb, flag, value])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"error: argument {flag}: invalid value '{value}': {message}" in err
        assert "Traceback" not in err


def test_the_scheduler_refuses_what_the_cli_would_have_refused():
    machine = Machine(cores=4, mem_available=8 << 30)
    for mem, jobs in ((0, None), (1 << 30, 0), (1 << 30, -1)):
        with pytest.raises(SglforgeError, match="must be positive"):
            plan_jobs(machine, mem, 1, jobs)
    assert plan_jobs(machine, 1 << 30, 1, 4096).jobs == 4096


def test_a_recipe_size_too_large_for_a_float_is_not_a_size():
    from sglforge.inputs.recipes import parse_memory

    assert parse_memory("9" * 400 + "GiB") is None  # was OverflowError (int(inf))
    assert parse_memory("1.5GiB") == 3 << 29
