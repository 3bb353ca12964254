"""Hostile URLs and refs never reach git as options; fetch failures are explicit and clean.

Each case runs the real CLI (`python -m sglforge`) where a user would meet it, and checks
both the message (file, entry, key, line) and that the injected command did not run.
"""

from __future__ import annotations

import base64
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.base.git import check_url
from sglforge.inputs.pins import parse_lockfile
from sglforge.inputs.settings import load_settings
from sglforge.sources.cache import SourceCache
from sglforge.sources.fetch import GitWant, fetch_commit
from tests.fixtures.gitrepos import UPSTREAM, local_patch, source_entry

SRC = Path(__file__).resolve().parents[1] / "src"
GOOD = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "a" * 64


def cli(
    world,
    *args: str,
    base: list[str] | None = None,
    stdin=subprocess.DEVNULL,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess; a hang (e.g. a transport reading stdin) fails at 120 s."""
    full_env = dict(os.environ, PYTHONPATH=str(SRC), **(env or {}))
    full_env.pop("SGLFORGE_CONFIG", None)
    full_env.update(env or {})
    command = [
        sys.executable,
        "-m",
        "sglforge",
        *(world.cli_args() if base is None else base),
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, env=full_env, stdin=stdin, timeout=120, check=False
    )


def hostile_lockfile(world, url: str) -> Path:
    return world.write_lockfile(source_entry("alpha", url, GOOD, ref="main"))


# ---------------------------------------------------------------------------------------------
# URLs refused at load


@pytest.mark.parametrize("verb", [["plan"], ["fetch", "--no-export"], ["patches", "check"]])
def test_upload_pack_url_in_lockfile_is_refused_and_never_runs(world, verb):
    pwned = world.root / "PWNED"
    lockfile = hostile_lockfile(world, f"--upload-pack=touch {pwned};true")
    world.write_series("alpha", ["0001-x.patch"], {"0001-x.patch": b"x\n"})
    proc = cli(world, *verb)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{lockfile}: 1 problem" in proc.stderr
    assert (
        "source #1 'alpha', key 'url' (line 3): '--upload-pack=touch "
        f"{pwned};true' starts with '-' (git would read it as an option)"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not pwned.exists()


@pytest.mark.parametrize(
    "url, reason",
    [
        ("fd::0", "uses the remote-helper transport 'fd::', which is not allowed"),
        (
            "ext::sh -c touch% /tmp/sglforge-PWNED-ext",
            "uses the remote-helper transport 'ext::', which is not allowed",
        ),
        (
            "foo::https://example.invalid/x",
            "uses the remote-helper transport 'foo::', which is not allowed",
        ),
        ("git://example.invalid/x", "scheme 'git://' is not allowed"),
        ("ssh://-oProxyCommand=touch%20x/p", "host or user starts with '-'"),
        ("relative/dir", "is neither a URL"),
    ],
)
def test_transport_and_bad_urls_are_refused_at_load_without_hanging(world, url, reason):
    hostile_lockfile(world, url)
    # stdin stays open: were fd::0 reached, git would block reading it (until the timeout).
    proc = cli(world, "fetch", "--no-export", stdin=subprocess.PIPE)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"source #1 'alpha', key 'url' (line 3): {url!r} {reason}" in proc.stderr
    assert not Path("/tmp/sglforge-PWNED-ext").exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/repo",
        "http://host/x.git",
        "file:///srv/x.git",
        "ssh://git@host/org/x.git",
        "git@github.com:org/x.git",
        "/srv/mirrors/x.git",
    ],
)
def test_ordinary_urls_are_accepted(url):
    assert check_url(url) is None


def test_backport_line_with_option_url_is_refused_by_lint_and_check(world, upstreams):
    pwned = world.root / "PWNED"
    line = f"backport --upload-pack=touch${{IFS}}{pwned};true {GOOD} sha256={DIGEST}"
    series = world.write_series("alpha", [line])
    lint = cli(world, "patches", "lint", "alpha")
    assert lint.returncode == 1, lint.stdout + lint.stderr
    message = (
        f"line 1: backport URL '--upload-pack=touch${{IFS}}{pwned};true' starts with "
        "'-' (git would read it as an option)"
    )
    assert message in lint.stdout
    check = cli(world, "patches", "check", "alpha")
    assert check.returncode == 2, check.stdout + check.stderr
    assert f"{series}: 1 problem" in check.stderr and message in check.stderr
    assert not pwned.exists()


def test_mirror_targets_are_checked_like_pin_urls(world, upstreams, tmp_path):
    base = [
        "--project",
        str(world.project),
        "--cache-dir",
        str(world.cache),
        "--build-root",
        str(world.build_root),
    ]
    proc = cli(world, "fetch", "--no-export", base=base + ["--mirror", f"{UPSTREAM}=--foo"])
    assert proc.returncode == 2
    assert (
        f"--mirror '{UPSTREAM}=--foo': mirror target '--foo' starts with '-' (git would "
        "read it as an option)"
    ) in proc.stderr
    config = tmp_path / "config.toml"
    config.write_text(f'[mirrors]\n"{UPSTREAM}" = "ext::sh -c touch% /tmp/x"\n')
    proc = cli(world, "fetch", "--no-export", base=base + ["--config", str(config)])
    assert proc.returncode == 2
    assert (f"{config}: 1 problem") in proc.stderr
    assert (
        f"[mirrors], key '{UPSTREAM}' (line 2): mirror target 'ext::sh -c touch% /tmp/x' "
        "uses the remote-helper transport 'ext::', which is not allowed"
    ) in proc.stderr
    config.write_text("")
    with pytest.raises(SglforgeError, match="mirror target 'relative/mirror' is neither"):
        load_settings(config, extra_mirrors=[f"{UPSTREAM}=relative/mirror"])


# ---------------------------------------------------------------------------------------------
# the git layer itself, for a URL that got past validation


@pytest.mark.parametrize(
    "template",
    [
        "--upload-pack=touch {pwned};true",
        "ext::sh -c touch% {pwned}",
    ],
)
def test_fetch_layer_never_runs_an_unvalidated_url(world, template):
    pwned = world.root / "PWNED"
    want = GitWant(template.format(pwned=pwned), GOOD, "hostile")
    cache = SourceCache(world.cache)
    with pytest.raises(SglforgeError, match="hostile: cannot fetch"):
        fetch_commit(cache, want, world.settings(mirrors=()), offline=False)
    assert not pwned.exists()


def test_fetch_layer_does_not_block_on_fd_transport(world):
    code = (
        "import sys; from pathlib import Path\n"
        "from sglforge.sources.cache import SourceCache\n"
        "from sglforge.sources.fetch import GitWant, fetch_commit\n"
        "from sglforge.inputs.settings import Settings\n"
        f"s = Settings(cache_dir=Path({str(world.cache)!r}), build_root=Path('/tmp/x'))\n"
        f"w = GitWant('fd::0', {GOOD!r}, 'hostile')\n"
        "try:\n"
        "    fetch_commit(SourceCache(s.cache_dir), w, s, offline=False)\n"
        "except Exception as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(SRC)),
    )
    assert "hostile: cannot fetch fd::0" in proc.stdout, proc.stdout + proc.stderr
    assert "transport 'fd' not allowed" in proc.stdout


# ---------------------------------------------------------------------------------------------
# fetch failures


def _incomplete_mirror(world):
    """A repository whose last blob is gone, after >128 KiB of others (so git starts
    sending a pack and dies mid-way: index-pack leaves a tmp_pack_* behind)."""
    repo = world.repo("org/big")
    rng = random.Random(9)
    files = {f"f{i:03d}": base64.b64encode(rng.randbytes(3000)).decode() for i in range(200)}
    files["zbig"] = base64.b64encode(rng.randbytes(300_000)).decode()
    head = repo.commit("big", files)
    blob = subprocess.run(
        ["git", "rev-parse", "HEAD:zbig"], cwd=repo.path, text=True, capture_output=True, check=True
    ).stdout.strip()
    (repo.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    return head, blob


def test_fetch_from_incomplete_mirror_names_object_shows_stderr_and_leaves_no_litter(world):
    head, blob = _incomplete_mirror(world)
    cache = SourceCache(world.cache)
    want = GitWant(world.url("org/big"), head, "big")
    with pytest.raises(SglforgeError) as err:
        fetch_commit(cache, want, world.settings(), offline=False)
    message = str(err.value)
    assert (
        f"big: cannot fetch {world.url('org/big')} (mirror {world.mirror}/org/big): "
        f"the source is missing object {blob}; git says:" in message
    )
    assert f"remote: fatal: unable to read {blob}" in message
    assert "early EOF" in message  # more than git's last line
    pack_dir = cache.git_dir(want.url) / "objects" / "pack"
    assert [p.name for p in pack_dir.iterdir() if p.name.startswith("tmp_")] == []


def test_patches_check_checks_every_upstream_and_fails_at_the_end(world, upstreams):
    lock = (world.project / "lockfiles/upstreams.toml").read_text()
    world.write_lockfile(source_entry("delta", world.url("org/nothere"), GOOD) + lock)
    world.write_series("delta", ["0001-x.patch"], {"0001-x.patch": b"x\n"})
    patch = local_patch(
        upstreams.alpha,
        upstreams.pinned,
        "Fix f3",
        {"src/alpha/core.py": "def f3():\n    return 33\n"},
    )
    world.write_series("alpha", ["0001-fix-f3.patch"], {"0001-fix-f3.patch": patch})
    proc = cli(world, "patches", "check", "delta", "alpha")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        f"FAILED    delta: cannot fetch\ndelta: cannot fetch {world.url('org/nothere')}"
        in proc.stdout
    )
    assert "ok        alpha: 1 entry apply strictly" in proc.stdout
    assert proc.stdout.index("FAILED    delta") < proc.stdout.index("ok        alpha")
    assert "error: 1 of 2 series failed: delta (fetch)" in proc.stderr


def test_bad_refresh_onto_is_blamed_on_onto(world, upstreams):
    bogus = "f" * 40
    proc = cli(world, "patches", "refresh", "alpha", "--onto", bogus)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: --onto {bogus}: alpha: expected commit {bogus}")
    assert "hint: --onto must name a commit of" in proc.stderr
    assert "fix lockfiles/upstreams.toml" not in proc.stderr
    assert (
        parse_lockfile(world.project / "lockfiles/upstreams.toml").get("alpha").commit
        == upstreams.pinned
    )
