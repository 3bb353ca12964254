"""Which GPUs code for an arch runs on (wheel/audit.py `runs_on`): CUDA's rules for plain,
arch-specific (`a`) and family-specific (`f`) SASS and PTX, without a GPU."""

from __future__ import annotations

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.wheel.audit import (
    ElfArchs,
    family_devices,
    implied_devices,
    load_gaps,
    parse_devices,
    runs_on,
)


@pytest.mark.parametrize(
    ("arch", "ptx", "devices"),
    [
        ("sm_120a", False, ("12.0",)),  # arch-specific: RTX PRO 6000 only, not GB10
        ("sm_120f", False, ("12.0", "12.1")),  # the family: RTX PRO 6000 and DGX Spark
        ("sm_121f", False, ("12.1",)),
        ("sm_120", False, ("12.0", "12.1")),  # plain SASS: the same major, this minor up
        ("sm_100f", False, ("10.0", "10.3")),
        ("sm_103a", False, ("10.3",)),
        ("sm_90a", False, ("9.0",)),
        ("sm_90", False, ("9.0",)),  # SASS never crosses a major
        ("sm_120a", True, ("12.0",)),
        ("sm_120f", True, ("12.0", "12.1")),
        ("sm_90", True, ("9.0", "10.0", "10.3", "11.0", "12.0", "12.1")),  # plain PTX: JIT up
    ],
)
def test_runs_on_follows_cudas_compatibility_rules(arch, ptx, devices) -> None:
    assert runs_on(arch, ptx=ptx) == devices


def test_an_elf_runs_sass_first_then_jit_ptx_and_names_what_it_lacks() -> None:
    specific = ElfArchs("k/lib.so", ("sm_120a",))
    assert specific.runs_with("12.0") == "SASS sm_120a"
    assert specific.runs_with("12.1") is None
    assert specific.describe(("12.0", "12.1")) == (
        "sm_120a; runs on 12.0 (SASS sm_120a); not on 12.1"
    )
    with_ptx = ElfArchs("k/lib.so", ("sm_90a",), ("sm_90",))
    assert with_ptx.runs_with("9.0") == "SASS sm_90a"
    assert with_ptx.runs_with("12.1") == "PTX compute_90 (JIT)"
    assert load_gaps([specific, with_ptx], ("12.0", "12.1")) == [
        "k/lib.so: nothing runs on 12.1 (carries sm_120a)"
    ]
    assert ElfArchs("p.so", (), ("sm_120f",)).describe(("12.1",)) == (
        "no SASS; PTX compute_120f; runs on 12.1 (PTX compute_120f (JIT))"
    )


def test_devices_a_recipe_promises_and_reports() -> None:
    assert implied_devices(("sm_120a",)) == ("12.0",)
    assert implied_devices(("sm_120f", "sm_90a")) == ("9.0", "12.0", "12.1")
    assert family_devices(("sm_120a",)) == ("12.0", "12.1")  # reported, to say "not on 12.1"
    assert parse_devices("12.0, 12.1") == ("12.0", "12.1")
    for bad in ("12.5", "", "sm_120", "12"):
        with pytest.raises(SglforgeError, match="not a known compute capability"):
            parse_devices(bad)
