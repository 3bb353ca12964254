"""Where a relative path leads inside a tree that exists only as a model, following its
symbolic links as the kernel would and never touching the disk. One walker serves the
archive members sglforge extracts (sources/archive.py) and the links a patch series leaves
(patching/apply.py); each supplies how to read a link in its model. `walk_on_disk` reads the
links of a real tree instead (lstat + readlink, nothing followed by the kernel): the copies
sglforge makes from and into upstream trees (base/fs.copy_tree_inside, builder/mesonwraps.py)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable

MAX_LINK_HOPS = 40  # links followed while resolving one path (the kernel's ELOOP limit)

Path = tuple[str, ...]


class LinkEscape(Exception):
    """The path leaves the tree; the message is a phrase that completes "the link …"."""


def walk(
    parts: Iterable[str],
    link_target: Callable[[Path], str | None],
    *,
    follow_last: bool = True,
    guard: Callable[[Path], None] | None = None,
) -> Path:
    """The components `parts` (relative to the root) lead to. `link_target(path)` is the
    target text of the link at `path`, or None where there is no link (a component that does
    not exist yet is taken as a name); it may raise LinkEscape (a target it cannot know).
    `guard(path)` sees every path on the way and may raise LinkEscape. The last component is
    followed only with `follow_last`."""
    stack: list[str] = []
    pending = list(parts)
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                raise LinkEscape("climbs above the tree root")
            stack.pop()
            continue
        stack.append(part)
        if guard is not None:
            guard(tuple(stack))
        if not pending and not follow_last:
            continue
        target = link_target(tuple(stack))
        if target is None:
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            raise LinkEscape("loops (too many levels of symbolic links)")
        if target.startswith("/"):
            raise LinkEscape(f"goes through the symlink {'/'.join(stack)} -> {target} (absolute)")
        stack.pop()
        pending = target.split("/") + pending
    return tuple(stack)


class DiskLinks:
    """`link_target` for a real tree on disk under `root` (never following anything itself:
    each path is lstat'ed, its links read). `followed` keeps the links walked through, so an
    escape can name the one that led out."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self.followed: list[tuple[str, str]] = []

    def __call__(self, path: Path) -> str | None:
        full = os.path.join(self.root, *path)
        try:
            if not stat.S_ISLNK(os.lstat(full).st_mode):
                return None
            target = os.readlink(full)
        except (FileNotFoundError, NotADirectoryError):
            return None  # a name that does not exist (yet): taken as a name
        except OSError as exc:
            raise LinkEscape(
                f"cannot be read at {'/'.join(path)} ({exc.strerror or exc})"
            ) from None
        self.followed.append(("/".join(path), target))
        return target


def walk_on_disk(
    root: str | os.PathLike[str], parts: Iterable[str], *, follow_last: bool = True
) -> Path:
    """`walk` over the real tree at `root`: where `parts` lead, following its links as the
    kernel would; LinkEscape, naming the link that led out, when the way leaves `root` (an
    absolute link, a `..` above the root, a loop)."""
    links = DiskLinks(root)
    try:
        return walk(parts, links, follow_last=follow_last)
    except LinkEscape as exc:
        if links.followed and "goes through the symlink" not in str(exc):
            link, target = links.followed[-1]
            raise LinkEscape(
                f"goes through the symlink {link} -> {target}, which then {exc}"
            ) from None
        raise
