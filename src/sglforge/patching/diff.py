"""Unified diffs (what `git format-patch`/`git diff`/quilt write) read into sglforge's model.

The `unidiff` package does the parsing: it splits the diff into file sections, reads the hunks
(counting lines strictly: a short or long hunk is an error) and marks binary sections. This
module keeps only what unidiff lacks, and says why where it does so:

- git's C-style quoted paths (`"a/\\303\\251.txt"`): unidiff returns them still quoted;
- `rename from/to`, `copy from/to`: unidiff leaves them as uninterpreted header lines;
- CRLF: unidiff's header patterns end in `$`, so a CR-terminated `new file mode 120000\\r`
  (a CRLF-converted patch, which git still accepts) yields no mode and a CRLF deletion fails
  to parse; unidiff is given LF lines, and each hunk line gets its CR back from the patch;
- names are read from the section's own header lines (the quoted `diff --git` pair is
  ambiguous for unidiff's pattern when names contain spaces); modes come from unidiff;
- the `-p1` view git applies: every name read as apply.c reads it (`_name`), modes made
  canonical as git makes them (`_mode`), and, as the last word, git's own reading of the
  patch compared with this one (`gitpaths`);
- bytes: unidiff works on text; the patch is decoded with `surrogateescape` so every line
  round-trips to its exact bytes (CR included), which the applier compares with the tree.

`unidiff` is imported when a diff is parsed, not when this module is, so `plan` and `fetch`
keep running on the standard library alone (see the noxfile).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglforge.base.errors import SglforgeError

SYMLINK_MODE = "120000"
_GIT_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


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
    copy: bool = False  # `copy from/to`: the old path stays
    hunks: list[Hunk] = field(default_factory=list)
    raw: bytes = b""  # the whole section, for re-emitting a filtered diff
    line: int = 0  # where the section starts in the patch (1-based)

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
    def is_rename(self) -> bool:
        return (
            not self.copy
            and self.old_path is not None
            and self.new_path is not None
            and self.old_path != self.new_path
        )


class DiffParseError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


def unquote(token: str, line: int = 0) -> str:
    """Undo git's C-style quoting (`"…"` with \\ooo octal bytes and \\t \\n \\" \\\\ …).

    Octal escapes are bytes (git quotes each byte of a UTF-8 name), decoded as UTF-8 at the
    end; undecodable bytes survive as surrogates. Anything else is a DiffParseError.
    """
    if not (len(token) >= 2 and token.startswith('"') and token.endswith('"')):
        if token.startswith('"'):
            raise DiffParseError(line, f"unterminated quoted path {token!r}")
        return _no_nul(token, line)
    body = token[1:-1].encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char == 0x22:
            raise DiffParseError(line, f"unescaped '\"' inside quoted path {token!r}")
        if char != 0x5C:
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(body):
            raise DiffParseError(line, f"quoted path {token!r} ends in a backslash")
        escape = chr(body[i + 1])
        if escape in "01234567":
            digits = body[i + 1 : i + 4].decode("ascii", "replace")
            if (
                len(digits) != 3
                or any(d not in "01234567" for d in digits)
                or int(digits, 8) > 0o377
            ):
                raise DiffParseError(
                    line,
                    f"bad octal escape '\\{digits}' in quoted path "
                    f"{token!r} (git writes three octal digits per byte)",
                )
            out.append(int(digits, 8))
            i += 4
        elif escape in _C_ESCAPES:
            out.append(_C_ESCAPES[escape])
            i += 2
        else:
            raise DiffParseError(
                line,
                f"unknown escape '\\{escape}' in quoted path {token!r} "
                "(git quotes with \\ooo octal bytes and \\a\\b\\t\\n\\v"
                '\\f\\r\\"\\\\ only)',
            )
    return _no_nul(bytes(out).decode("utf-8", "surrogateescape"), line)


def _no_nul(name: str, line: int) -> str:
    if "\0" in name:
        raise DiffParseError(line, f"file name {name!r} contains a NUL byte")
    return name


def _name(field: str, line: int, *, strip: bool = True) -> str | None:
    """A file name from a diff header, as `git apply -p1` reads it (apply.c find_name):

    - quoted (`"a/caf\\303\\251"`): C-unquoted; else the name ends at a TAB or CR (git's
      terminators for these lines; a space does not end it);
    - `strip` (the `diff --git`, `---` and `+++` names): everything through the first '/' is
      dropped, as -p1 does (`rename/copy from/to` names are already relative: git strips
      nothing there);
    - runs of '/' become one (git's squash_slash).

    A name written in absolute form is refused, not read: git strips `/src/e` to `src/e` (its
    first component is the empty one before the '/'), while a reader, and sglforge before,
    sees a file `e`; so is a name that only strips to an absolute one (`a//x`)."""
    if field.startswith('"'):
        name = unquote(field.split("\t", 1)[0].rstrip("\r"), line)
    else:
        name = _no_nul(re.split(r"[\t\r]", field, maxsplit=1)[0], line)
    if strip and name == "/dev/null":
        return None
    if name.startswith("/"):
        raise DiffParseError(
            line,
            f"file name {name!r} is an absolute path — refused (patches "
            "name files relative to the tree: a/…, b/…)",
        )
    if strip:
        if "/" not in name:
            raise DiffParseError(
                line,
                f"file name {name!r} has no leading directory to strip "
                "(git applies patches with -p1: a/…, b/…)",
            )
        stripped = name.split("/", 1)[1]
    else:
        stripped = name
    path = re.sub(r"/{2,}", "/", stripped)
    if path.startswith("/"):
        raise DiffParseError(
            line,
            f"file name {name!r} is the absolute path {path!r} once its "
            "leading directory is stripped — refused",
        )
    if not path:
        raise DiffParseError(line, f"file name {name!r} names no file after its leading directory")
    return path


def _mode(text: str, line: int) -> str:
    """A mode from a git header line, canonical as git makes it (apply.c parse_mode_line:
    strtoul base 8, then canon_mode): git makes a link of `120777` or `0120000`, so sglforge
    must see one there too."""
    match = re.match(r"[ \t\r\n\v\f]*([+-]?)([0-7]+)(?=[ \t\r\n]|$)", text)
    if not match:
        raise DiffParseError(line, f"invalid mode {text[:40]!r} (an octal number such as 100644)")
    value = int(match.group(2), 8)
    value = (-value if match.group(1) == "-" else value) & 0xFFFFFFFF  # C's unsigned int
    kind = value & 0o170000
    if kind == 0o100000:
        return "100755" if value & 0o100 else "100644"
    return {0o120000: SYMLINK_MODE, 0o040000: "040000"}.get(kind, "160000")


class _Counted:
    """The patch's lines, remembering how far unidiff has read (for error line numbers)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0

    def __iter__(self):
        for number, line in enumerate(self.lines, 1):
            self.at = number
            yield line


def parse_diff(data: bytes) -> list[FilePatch]:
    """Parse every file section of a diff, mbox or DEP-3 patch; text before the first section
    is ignored. Malformed input raises DiffParseError naming the line."""
    try:
        from unidiff import PatchSet
        from unidiff.errors import UnidiffParseError
    except ImportError:
        raise SglforgeError(
            "reading patches needs the 'unidiff' package: pip install "
            "'unidiff>=1.0,<2' (or run `nox -s patches`, which installs it)"
        ) from None

    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    # unidiff's header patterns end in `$` and miss CR-terminated lines (a deletion then reads
    # as 'Target without source'); it gets LF lines, and _hunk puts each line's CR back.
    reader = _Counted(
        [line.removesuffix("\r\n") + "\n" if line.endswith("\r\n") else line for line in lines]
    )
    try:
        patch_set = PatchSet(reader)
    except UnidiffParseError as exc:
        message = str(exc).strip()
        if "\r\n" in text:
            message += " (the patch has CRLF line endings: was it converted?)"
        raise DiffParseError(reader.at, message) from None
    files = []
    starts = [_start(pf) for pf in patch_set] + [len(lines) + 1]
    for index, patched in enumerate(patch_set):
        start, end = starts[index], starts[index + 1]
        files.append(_file_patch(patched, lines, start, end))
    return files


def _start(patched) -> int:  # unidiff.PatchedFile
    info = patched.patch_info
    if info and info[0].startswith("diff --git "):
        return patched.diff_line_no
    return patched.diff_line_no - 1  # a plain diff: unidiff counts from the '+++' line


def _file_patch(
    patched,
    lines: list[str],
    start: int,  # patched: unidiff's PatchedFile
    end: int,
) -> FilePatch:
    section = lines[start - 1 : end - 1]
    result = FilePatch(None, None, line=start)
    result.raw = "".join(section).encode("utf-8", "surrogateescape")
    if section and section[0].startswith("diff --git "):
        _read_git_header(result, section, start)
    else:
        result.old_path = _name(patched.source_file, start)
        result.new_path = _name(patched.target_file, start + 1)
        if result.old_path and result.new_path and result.old_path != result.new_path:
            # A plain diff changes one file: git takes the new name, or the old one when the
            # new one only adds to it (`x` and `x.orig`): apply.c parse_traditional_patch.
            old, new = result.old_path, result.new_path
            result.old_path = result.new_path = old if new.startswith(old) else new
    result.binary = result.binary or bool(patched.is_binary_file)
    for hunk in patched:
        result.hunks.append(_hunk(hunk, lines))
    return result


def _read_git_header(result: FilePatch, section: list[str], start: int) -> None:
    """Paths and rename/copy from the git extended header lines (see the module docstring)."""
    header = section[0].rstrip("\r\n")
    match = _GIT_HEADER.match(header)
    if not match:
        raise DiffParseError(start, f"cannot read the two file names of {header[:120]!r}")
    result.old_path = _name(match.group(1), start)
    result.new_path = _name(match.group(2), start)
    old_name = new_name = None
    for offset, raw in enumerate(section[1:], 1):
        line = raw.rstrip("\r\n")
        number = start + offset
        if line.startswith("@@ "):
            break
        if line.startswith("new file mode "):
            result.old_path = None
            result.new_mode = _mode(line[14:], number)
        elif line.startswith("deleted file mode "):
            result.new_path = None
            result.old_mode = _mode(line[18:], number)
        elif line.startswith("old mode "):
            result.old_mode = _mode(line[9:], number)
        elif line.startswith("new mode "):
            result.new_mode = _mode(line[9:], number)
        elif line.startswith("index ") and " " in line[6:]:
            result.old_mode = _mode(line[6:].split(" ", 1)[1], number)  # git: the old mode
        elif line.startswith(("rename from ", "copy from ")):
            result.old_path = _name(line.split(" ", 2)[2], number, strip=False)
            result.copy = line.startswith("copy ")
        elif line.startswith(("rename to ", "copy to ")):
            result.new_path = _name(line.split(" ", 2)[2], number, strip=False)
        elif line.startswith("--- "):
            old_name = (number, _name(line[4:], number))
        elif line.startswith("+++ "):
            new_name = (number, _name(line[4:], number))
        elif line == "GIT binary patch" or line.startswith("Binary files "):
            result.binary = True
            break
    # git refuses a section whose ---/+++ names disagree with its header; so does sglforge,
    # so that the paths checked are the paths git writes.
    for seen, expected, side in (
        (old_name, result.old_path, "old"),
        (new_name, result.new_path, "new"),
    ):
        if seen is not None and seen[1] != expected:
            raise DiffParseError(
                seen[0],
                f"inconsistent {side} file name {seen[1]!r} (the diff header says {expected!r})",
            )


def _hunk(hunk, lines: list[str]) -> Hunk:  # unidiff.Hunk
    body = [line for line in hunk if line.line_type in ("+", "-", " ")]
    header = (
        lines[body[0].diff_line_no - 2].rstrip("\r\n")
        if body
        else f"@@ -{hunk.source_start},{hunk.source_length} "
        f"+{hunk.target_start},{hunk.target_length} @@"
    )
    return Hunk(
        old_start=hunk.source_start,
        old_count=hunk.source_length,
        new_start=hunk.target_start,
        new_count=hunk.target_length,
        header=header,
        lines=[
            (
                line.line_type
                + line.value.removesuffix("\n")
                + ("\r" if lines[line.diff_line_no - 1].endswith("\r\n") else "")
            ).encode("utf-8", "surrogateescape")
            for line in body
        ],
    )


def render_files(files: list[FilePatch]) -> bytes:
    return b"".join(f.raw for f in files)
