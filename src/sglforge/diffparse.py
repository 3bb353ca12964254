"""A small parser for git-style unified diffs (what `git format-patch`/`git diff` write).

Only what sglforge needs: per-file paths, modes, binary flags and hunks with their lines,
so the applier can check paths and explain failing hunks before git touches the tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


@dataclass
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    header: str  # the whole "@@ ... @@ section" line
    lines: list[bytes] = field(default_factory=list)  # with their ' ', '-', '+' prefix

    @property
    def old_lines(self) -> list[bytes]:
        return [line[1:] for line in self.lines if line[:1] in (b" ", b"-")]

    @property
    def new_lines(self) -> list[bytes]:
        return [line[1:] for line in self.lines if line[:1] in (b" ", b"+")]

    def context_trimmed(self, fuzz: int) -> tuple[list[bytes], int]:
        """Old-side lines without up to `fuzz` leading/trailing context lines (GNU patch's
        fuzz), and how many lines were dropped at the start."""
        lines = list(self.lines)
        dropped = 0
        for _ in range(fuzz):
            if lines and lines[0][:1] == b" ":
                lines.pop(0)
                dropped += 1
            if lines and lines[-1][:1] == b" ":
                lines.pop()
        return [line[1:] for line in lines if line[:1] in (b" ", b"-")], dropped


@dataclass
class FilePatch:
    old_path: str | None  # None for a created file
    new_path: str | None  # None for a deleted file
    old_mode: str | None = None
    new_mode: str | None = None
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)
    raw: bytes = b""  # the whole section, for re-emitting a filtered diff

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys((self.old_path, self.new_path)) if p]

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_deleted(self) -> bool:
        return self.new_path is None

    @property
    def creates_symlink(self) -> bool:
        return self.new_mode == "120000"


class DiffParseError(ValueError):
    pass


def _unquote(path: bytes) -> str:
    """Undo git's C-style quoting of unusual path names."""
    text = path.decode("utf-8", errors="surrogateescape")
    if text.startswith('"') and text.endswith('"'):
        raw = text[1:-1].encode("latin-1", errors="backslashreplace")
        try:
            return raw.decode("unicode_escape").encode("latin-1").decode("utf-8",
                                                                         "surrogateescape")
        except UnicodeError as exc:  # a trailing backslash, a truncated \x escape, \u0100+
            raise DiffParseError(f"quoted path {text!r}: bad escape ({exc.reason})") from None
    return text


def _strip_prefix(path: bytes) -> str | None:
    text = _unquote(path.split(b"\t", 1)[0].rstrip(b"\r"))
    if text == "/dev/null":
        return None
    if text.startswith(("a/", "b/")):
        return text[2:]
    return text


def parse_diff(data: bytes) -> list[FilePatch]:
    """Parse every file section of a diff or mbox. Text before the first section is ignored."""
    lines = data.split(b"\n")
    files: list[FilePatch] = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if line.startswith(b"diff --git ") or (
            line.startswith(b"--- ") and i + 1 < n and lines[i + 1].startswith(b"+++ ")
        ):
            start = i
            current = FilePatch(old_path=None, new_path=None)
            git_header = line.startswith(b"diff --git ")
            if git_header:
                match = re.match(rb'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$',
                                 line)
                if match:
                    current.old_path = _strip_prefix(match.group(1))
                    current.new_path = _strip_prefix(match.group(2))
                i += 1
                while i < n and not lines[i].startswith((b"diff --git ", b"@@ ", b"--- ")):
                    header = lines[i]
                    if header.startswith(b"new file mode "):
                        current.old_path = None
                        current.new_mode = header.split()[-1].decode()
                    elif header.startswith(b"deleted file mode "):
                        current.new_path = None
                        current.old_mode = header.split()[-1].decode()
                    elif header.startswith(b"old mode "):
                        current.old_mode = header.split()[-1].decode()
                    elif header.startswith(b"new mode "):
                        current.new_mode = header.split()[-1].decode()
                    elif header.startswith((b"rename from ", b"copy from ")):
                        current.old_path = _unquote(header.split(b" ", 2)[2])
                    elif header.startswith((b"rename to ", b"copy to ")):
                        current.new_path = _unquote(header.split(b" ", 2)[2])
                    elif header.startswith((b"Binary files ", b"GIT binary patch")):
                        current.binary = True
                        if header.startswith(b"GIT binary patch"):
                            i += 1
                            while i < n and not lines[i].startswith(b"diff --git "):
                                i += 1
                            break
                    elif header == b"" or header.startswith(b"-- "):
                        break
                    i += 1
            if i < n and lines[i].startswith(b"--- ") and i + 1 < n and \
                    lines[i + 1].startswith(b"+++ "):
                old = _strip_prefix(lines[i][4:])
                new = _strip_prefix(lines[i + 1][4:])
                if not git_header or current.old_path is not None or old is None:
                    current.old_path = old
                if not git_header or current.new_path is not None or new is None:
                    current.new_path = new
                i += 2
            while i < n and lines[i].startswith(b"@@ "):
                match = HUNK.match(lines[i].rstrip(b"\r"))
                if not match:
                    raise DiffParseError(f"malformed hunk header {lines[i][:80]!r}")
                hunk = Hunk(
                    old_start=int(match.group(1)),
                    old_count=int(match.group(2)) if match.group(2) is not None else 1,
                    new_start=int(match.group(3)),
                    new_count=int(match.group(4)) if match.group(4) is not None else 1,
                    header=lines[i].decode("utf-8", errors="replace").rstrip("\r"),
                )
                i += 1
                old_left, new_left = hunk.old_count, hunk.new_count
                while i < n and (old_left > 0 or new_left > 0):
                    body = lines[i]
                    tag = body[:1]
                    if tag == b" " or body == b"":
                        old_left -= 1
                        new_left -= 1
                        body = body or b" "
                    elif tag == b"-":
                        old_left -= 1
                    elif tag == b"+":
                        new_left -= 1
                    elif tag == b"\\":
                        i += 1
                        continue
                    else:
                        raise DiffParseError(
                            f"{current.path}: hunk {hunk.header!r} ends early (line "
                            f"{body[:60]!r} where {old_left} old / {new_left} new lines were due)")
                    hunk.lines.append(body)
                    i += 1
                if old_left < 0 or new_left < 0:
                    raise DiffParseError(f"{current.path}: hunk {hunk.header!r} has more lines "
                                         "than its header says")
                if old_left > 0 or new_left > 0:
                    raise DiffParseError(f"{current.path}: hunk {hunk.header!r} is truncated")
                while i < n and lines[i].startswith(b"\\"):
                    i += 1
                current.hunks.append(hunk)
            current.raw = b"\n".join(lines[start:i]) + b"\n"
            files.append(current)
            continue
        i += 1
    return files


def render_files(files: list[FilePatch]) -> bytes:
    return b"".join(f.raw for f in files)
