"""A complete offline sglforge project for the input fuzz tests and hostile-input regressions.

Built once per test session: the `purepy` fixture upstream with one local patch in its series,
a recipe, the toolchain, a stand-in smoke profile, a wheel set (manifest + wheels.lock), a
runtime.lock, and a source cache already filled by `fetch`, so `patches check --offline` works
without a network. Tests copy it (`clone`) and damage one input file at a time.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures import upstreams
from tests.fixtures.project import FixtureProject, make_project
from tests.smoke.conftest import SmokeProject, build_wheelset

H = "a" * 64
RUNTIME_LOCK = f"# third-party runtime pins\nuvicorn==0.54.0 \\\n    --hash=sha256:{H}\n"

# Every input file a pull request can change, relative to the project root.
INPUTS = {
    "lockfile": "lockfiles/upstreams.toml",
    "toolchain": "lockfiles/toolchain.toml",
    "recipe": "recipes/purepy.toml",
    "series": "patches/purepy/series",
    "patch": "patches/purepy/0001-greeting.patch",
    "profile": "profiles/standin.toml",
    "wheels-lock": "lockfiles/wheels.lock",
    "runtime-lock": "lockfiles/runtime.lock",
    "manifest": "wheels/manifest.json",
}

PATCH_HEADER = (
    "Description: say hello to the fuzzer instead of the world, so the tests can tell the\n"
    " patched tree apart\n"
    "Origin: vendor\nForwarded: not-needed\nLast-Update: 2026-08-01\n"
)


@dataclass
class Clone:
    """A copy of the pristine project; `main(*verb)` runs the CLI in-process on it."""

    fixture: FixtureProject
    root: Path

    def path(self, kind: str) -> Path:
        return self.root / INPUTS[kind]

    def main(self, *verb: str) -> tuple[int, str, str]:
        """`sglforge <global args> <verb…>` in-process: (exit code, stdout, stderr).

        argparse exits with SystemExit(2); anything else that escapes `main()` is a traceback
        a user would see, so it propagates and fails the calling test.
        """
        from sglforge.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([*self.fixture.args(root=self.root), *verb])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
        return code, out.getvalue(), err.getvalue()


def build(base: Path) -> FixtureProject:
    fixture = make_project(base, ("purepy",))
    root = fixture.root
    repo = fixture.mirror / "org" / "purepy"
    patches = root / "patches" / "purepy"
    upstreams.make_patch(
        repo,
        "0001-greeting.patch",
        {
            "src/purepy/__init__.py": 'GREETING = "hello, fuzzer"\n\n\ndef greet():\n    return GREETING\n'
        },
        "purepy: greet the fuzzer\n\n" + PATCH_HEADER,
        patches,
    )
    (patches / "series").write_text("# purepy patches\n0001-greeting.patch\n")
    smoke = SmokeProject(
        root=root,
        ports={
            "prefill": 30100,
            "decode": 30101,
            "bootstrap": 30102,
            "router": 30103,
            "metrics": 30104,
        },
    )
    smoke.write_profile("standin")
    build_wheelset(root)
    (root / "lockfiles" / "runtime.lock").write_text(RUNTIME_LOCK)
    clone = Clone(fixture, root)
    code, out, err = clone.main("fetch", "--no-export")
    assert code == 0, out + err
    return fixture


def clone(fixture: FixtureProject, dest: Path) -> Clone:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(fixture.root, dest, symlinks=True)
    return Clone(fixture, dest)
