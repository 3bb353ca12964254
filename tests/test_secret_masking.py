"""Passwords in remote URLs never reach any output (issue 21, item 4): drawn from the whole
printable set ('/', '?', '#', '@', ':', space, quotes, backslash included), put into every
URL sglforge accepts a password in, through every way in (config file, environment, CLI) and
every way out (`sglforge config`, error messages, the build log's `# env` lines, the cache
descriptions printed by `build`, the wheel-cache store's name).

A password is HEAD + drawn + MID + drawn + TAIL: any leak of a prefix, a suffix or the middle
of it (a parser's "port", the rest after a first '@') shows one of the three markers."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.project import make_project

HEAD, MID, TAIL = "Hq7Kx", "Mv2Jd", "Zw4Pm"
MARKERS = (HEAD, MID, TAIL)
PRINTABLE = (
    string.printable.replace("\n", "")
    .replace("\r", "")
    .replace("\x0b", "")
    .replace("\x0c", "")
    .replace("\t", "")
)

passwords = st.builds(
    lambda a, b: HEAD + a + MID + b + TAIL,
    st.text(PRINTABLE, max_size=12),
    st.text(PRINTABLE, max_size=12),
)

COMPILER_URLS = (
    "redis://:{pw}@127.0.0.1:6379/0",
    "redis://{pw}@cache.internal",
    "http://ci:{pw}@cache.internal:8080/ccache",
    "redis://u:{pw}@h:1/2",
)
WHEEL_URLS = ("https://ci:{pw}@cache.example/sglforge/", "http://{pw}@cache.example:81/w/")


def _lone(template: str, pw: str) -> bool:
    """`scheme://{pw}@` with a ':' in pw is user:password (to urllib and ccache alike): the
    part before the ':' is a user name, shown like any other."""
    return "//{pw}@" in template and ":" in pw


def _leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def _outputs(environ=None, config=None, cli=None) -> list[str]:
    """Everything sglforge would show for these settings: the error, or `config`'s lines and
    the descriptions `build` prints."""
    from sglforge.base.errors import SglforgeError
    from sglforge.base.remotestore import RemoteStore
    from sglforge.builder.compiler_cache import CompilerCache, mask_env_lines
    from sglforge.inputs.settings import describe_settings, load_settings

    try:
        loaded = load_settings(config, environ=environ or {}, compiler_cache=cli)
    except SglforgeError as exc:
        return [str(exc), exc.hint or ""]
    out = [describe_settings(loaded), repr(loaded.compiler_cache), repr(loaded.wheel_cache)]
    cc = loaded.compiler_cache
    if cc.remote:
        out.append(CompilerCache("ccache", cc.remote, cc.read_only).describe())
        out.append(mask_env_lines({"CCACHE_REMOTE_STORAGE": cc.remote}))
    if loaded.wheel_cache.remote:
        try:
            store = RemoteStore.from_url(loaded.wheel_cache.remote, read_only=True)
            out += [str(store), store.url_of("ab/entry.json")]
        except SglforgeError as exc:
            out.append(str(exc))
    return out


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string of printable ASCII is a TOML basic string


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pw=passwords)
def test_no_password_reaches_any_message(tmp_path: Path, pw: str) -> None:
    config = tmp_path / "config.toml"
    for template in COMPILER_URLS:
        if _lone(template, pw):
            continue
        url = template.format(pw=pw)
        config.write_text(f"[compiler-cache]\nremote = {_toml_string(url)}\n")
        for out in (
            _outputs(environ={"SGLFORGE_COMPILER_CACHE_REMOTE": url}),
            _outputs(config=config),
            _outputs(cli={"remote": url}),
        ):
            assert not _leaks("\n".join(out)), (url, out)
    for template in WHEEL_URLS:
        if _lone(template, pw):
            continue
        url = template.format(pw=pw)
        config.write_text(f"[wheel-cache]\nremote = {_toml_string(url)}\n")
        for out in (
            _outputs(environ={"SGLFORGE_WHEEL_CACHE_REMOTE": url}),
            _outputs(config=config),
        ):
            assert not _leaks("\n".join(out)), (url, out)


def test_the_examples_the_issue_names() -> None:
    """'/', '?', '#', '@' and a space in a password: each used to show part of it."""
    for middle in ("/", "?", "#", "@", " ", "@x/", "/@", ":9/"):
        pw = HEAD + middle + TAIL
        for template in (*COMPILER_URLS, *WHEEL_URLS):
            if _lone(template, pw):
                continue
            url = template.format(pw=pw)
            var = (
                "SGLFORGE_WHEEL_CACHE_REMOTE"
                if template in WHEEL_URLS
                else "SGLFORGE_COMPILER_CACHE_REMOTE"
            )
            out = "\n".join(_outputs(environ={var: url}))
            assert not _leaks(out), (url, out)


def test_config_verb_and_its_errors_show_no_password(tmp_path: Path) -> None:
    """The real `sglforge config` (stdout and stderr), for a good URL and a refused one."""
    project = make_project(tmp_path)
    args = [sys.executable, "-m", "sglforge", *project.args(), "config"]
    for pw in (HEAD + "p@ss/w?rd#" + TAIL, HEAD + "a b" + TAIL, HEAD + "12/3" + TAIL):
        for var, url in (
            ("SGLFORGE_COMPILER_CACHE_REMOTE", f"redis://:{pw}@127.0.0.1:1/0"),
            ("SGLFORGE_WHEEL_CACHE_REMOTE", f"http://u:{pw}@h/w/"),
            ("SGLFORGE_WHEEL_CACHE_REMOTE", f"http://u:{pw.replace(HEAD, '12/')}@h/"),
        ):
            env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "src"), **{var: url})
            result = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
            assert "Traceback" not in result.stderr
            assert not _leaks(result.stdout + result.stderr), (url, result)


def test_a_password_on_the_command_line_is_warned_about(capsys) -> None:
    """/proc/<pid>/cmdline is world-readable: the build could read a CLI password there."""
    from sglforge.inputs.settings import load_settings

    load_settings(environ={}, compiler_cache={"remote": f"redis://:{HEAD}@h:1/0"})
    err = capsys.readouterr().err
    assert "--compiler-cache-remote carries a password" in err and "/proc/<pid>/cmdline" in err
    assert not _leaks(err)
    load_settings(environ={}, compiler_cache={"remote": "redis://h:1/0"})
    assert capsys.readouterr().err == ""


def test_mirror_credentials_are_masked_in_config_and_errors(tmp_path: Path) -> None:
    """A private git mirror with a token: `sglforge config` lists it masked, and a refused
    one (a bad port: the parser used to quote it) names it masked."""
    from sglforge.base.errors import SglforgeError
    from sglforge.inputs.settings import describe_settings, load_settings

    good = f"https://ci:{HEAD}x{TAIL}@git.internal/mirror/"
    loaded = load_settings(environ={}, extra_mirrors=[f"https://github.com/={good}"])
    shown = describe_settings(loaded)
    assert "https://ci:***@git.internal/mirror/" in shown and not _leaks(shown)
    for bad in (f"https://ci:{HEAD}/{TAIL}@git.internal/", f"https://u:{HEAD}{TAIL}@h:x/"):
        try:
            load_settings(environ={}, extra_mirrors=[f"https://github.com/={bad}"])
        except SglforgeError as exc:
            assert not _leaks(str(exc)), str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")
