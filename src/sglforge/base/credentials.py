"""Credentials in remote URLs: the one place that decides where a URL's secret is, shows the
URL without it, and keeps secrets out of sglforge's own environment.

Where the secret is: everything between `scheme://` and the *last* '@' of the URL. That is
where urllib (and RFC 3986) end the userinfo for a well-formed URL, and for a malformed one
(a raw '/', '?', '#', '@' or space in the password) it covers every character a parser might
read as password, host, port or path: masking too much is harmless, too little is a leak.
A URL whose '@' sits after the authority urllib sees (`http://u:12/3@h/`: host `u`, port
12, path `/3@h/`) is refused (`ambiguous_userinfo`): sglforge would otherwise connect to a
host other than the one the user meant, with a password in its path.

Messages never embed a URL parser's exception text: `ValueError("Port could not be cast to
integer value as 'pa'")` quotes the "port", i.e. the password up to the first '/', '?' or
'#'. `url_syntax_problem` says what is wrong in words of its own.

`scrub_environment()` (called once by the CLI, after the settings are read) drops the
variables that may hold a secret from `os.environ`, so no child inherits them, and marks the
process non-dumpable (prctl PR_SET_DUMPABLE 0), which makes `/proc/<pid>/environ`, `mem` and
friends of sglforge unreadable by other processes of the same uid: `unsetenv` does not touch
the copy of the environment the kernel shows in `/proc/<pid>/environ`.
"""

from __future__ import annotations

import ctypes
import os
import re
from urllib.parse import urlsplit

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# user names shown in front of the mask: a plain token (anything odder is masked with it)
_PLAIN_USER = re.compile(r"[A-Za-z0-9._~%!$&'()*+,;=-]*")

# Variables whose values may be a URL with a password (inputs/settings.py reads them).
SECRET_ENV = ("SGLFORGE_COMPILER_CACHE_REMOTE", "SGLFORGE_WHEEL_CACHE_REMOTE")
PR_SET_DUMPABLE = 4


def mask_url(text: str) -> str:
    """`text` (a URL, or a value that may be one) with its userinfo's secret replaced by ***:
    `scheme://user:***@rest` when the user name is a plain token, else `scheme://***@rest`
    (a Redis URL's lone userinfo is its password). The userinfo runs from `scheme://` to the
    last '@' in `text`."""
    match = _SCHEME.search(text)
    if match is None or "@" not in text[match.end() :]:
        return text
    start = match.end()
    end = text.rindex("@")
    info = text[start:end]
    user, colon, _ = info.partition(":")
    shown = f"{user}:{MASK}" if colon and _PLAIN_USER.fullmatch(user) else MASK
    return text[:start] + shown + text[end:]


def url_parse_problem(url: str) -> str | None:
    """Why urllib cannot parse `url` into host and port, in sglforge's words (never the
    parser's message, which may quote the password), or None."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises for a non-numeric or out-of-range port
    except ValueError:
        return (
            "is not a valid URL (its host or port cannot be parsed; percent-encode "
            "'@', ':', '/', '?', '#' and spaces in the user name and password)"
        )
    return None


def url_syntax_problem(url: str) -> str | None:
    """url_parse_problem, and an '@' after the host (for URLs that carry credentials)."""
    return url_parse_problem(url) or ambiguous_userinfo(url)


def ambiguous_userinfo(url: str) -> str | None:
    """An '@' after the authority urllib sees: the user meant a password with a raw '/', '?'
    or '#' in it (see the module docstring); refused rather than guessed."""
    match = _SCHEME.match(url)
    if match is None:
        return None
    parts = urlsplit(url)
    if "@" in parts.path + parts.query + parts.fragment:
        return (
            "has an '@' after its host (a password with a raw '/', '?' or '#'?): "
            "percent-encode them in the user name and password (%2F, %3F, %23, %40)"
        )
    return None


def scrub_environment() -> dict[str, str]:
    """Take SECRET_ENV out of os.environ (no child inherits them) and make this process
    non-dumpable (its /proc/<pid>/environ unreadable by same-uid processes). Returns what was
    taken, for the settings to read instead of os.environ."""
    taken = {name: os.environ.pop(name) for name in SECRET_ENV if name in os.environ}
    set_non_dumpable()
    return taken


def set_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0); False where it is not available (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
