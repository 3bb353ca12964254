"""Fetch pinned sources into the source cache and verify them (commit id; tree or sha256).

Fails closed: a commit or archive that is not what the pin says is an error ("expected X,
got Y"), never a cache entry. URLs and commits reach git after `--`; mirrors come from the
settings (`url.<mirror>.insteadOf`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sglforge.base.errors import SglforgeError
from sglforge.base.git import (
    git,
    git_out,
    has_commit,
    missing_object,
    remove_fetch_litter,
    rev,
    stderr_text,
)
from sglforge.base.procgroup import Terminated
from sglforge.inputs.pins import Lockfile, Pin
from sglforge.inputs.settings import Settings
from sglforge.sources.cache import PIN_REF, SourceCache, ensure_bare
from sglforge.sources.download import describe_source, fetch_tarball


@dataclass(frozen=True)
class GitWant:
    """A commit some step needs from a repository (a pin, or a backport's source)."""

    url: str
    commit: str
    label: str  # who wants it, for messages ("flashinfer", "backport in patches/x/series")


@dataclass
class FetchReport:
    fetched: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    substituted: list[str] = field(default_factory=list)  # [substitutes]: not fetched


# The hint of a source that could not be reached; fetch_failures replaces it with one that
# knows which mirror rules applied.
UNREACHABLE = (
    "check the URL, your network, or add a mirror (--mirror or [mirrors] in the config file)"
)


def _fetch_failure(want: GitWant, settings: Settings, procs: list) -> SglforgeError:
    """git fetch failed: say which source, show git's whole stderr and any missing object.

    `procs` are the attempts (by id, then all branches); a line both print is shown once.
    """
    lines: list[str] = []
    for proc in procs:
        if proc.returncode != 0:
            lines += [
                line
                for line in stderr_text(proc).splitlines()
                if line.strip() not in {seen.strip() for seen in lines}
            ]
    detail = "\n".join(lines) or f"git fetch exited with status {procs[-1].returncode}"
    missing = missing_object(detail)
    what = f"the source is missing object {missing}; " if missing else ""
    return SglforgeError(
        f"{want.label}: cannot fetch {describe_source(want.url, settings)}: {what}git says:\n"
        + "\n".join("  " + line for line in detail.splitlines()),
        hint=(
            "the mirror or repository is incomplete or corrupt; repair it (e.g. fetch it "
            "again from upstream)"
            if missing
            else UNREACHABLE
        ),
    )


def fetch_commit(
    cache: SourceCache,
    want: GitWant,
    settings: Settings,
    offline: bool,
    ref_hint: str | None = None,
    hint: str | None = None,
) -> str:
    """Make `want.commit` present in the cache; return 'cached' or 'fetched'.

    Fetches the commit by id first (what GitHub and protocol v2 servers allow); if the
    server refuses, fetches all branches and tags and looks again. Fails closed when the
    commit is not there: "expected commit X, got ..." (`hint` says what to fix then). The
    URL and commit go after `--`; temporary packs of a failed fetch are removed.
    """
    git_dir = cache.git_dir(want.url)
    if git_dir.is_dir():  # what a killed fetch left (the cache is locked: nobody is working)
        remove_fetch_litter(git_dir)
    if has_commit(git_dir, want.commit):
        git("update-ref", "--", PIN_REF + want.commit, want.commit, git_dir=git_dir)
        return "cached"
    if offline:
        return "missing"
    ensure_bare(git_dir)
    mirror_cfg = settings.git_mirror_args() + [
        "-c",
        "protocol.version=2",
        "-c",
        "uploadpack.allowAnySHA1InWant=true",
    ]
    try:
        by_id = git(
            "fetch",
            "--quiet",
            "--no-tags",
            "--",
            want.url,
            want.commit,
            git_dir=git_dir,
            config=mirror_cfg,
            check=False,
        )
        if by_id.returncode != 0:
            remove_fetch_litter(git_dir)
        if by_id.returncode != 0 or not has_commit(git_dir, want.commit):
            every = git(
                "fetch",
                "--quiet",
                "--prune",
                "--",
                want.url,
                "+refs/heads/*:refs/sglforge/upstream/heads/*",
                "+refs/tags/*:refs/sglforge/upstream/tags/*",
                git_dir=git_dir,
                config=mirror_cfg,
                check=False,
            )
            if every.returncode != 0:
                remove_fetch_litter(git_dir)
                raise _fetch_failure(want, settings, [by_id, every])
    except (KeyboardInterrupt, Terminated):  # git's session is gone (base/git.py): clean up
        remove_fetch_litter(git_dir)
        raise
    if not has_commit(git_dir, want.commit):
        got = "no such commit in the repository"
        if ref_hint:
            head = (
                git(
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    f"refs/sglforge/upstream/heads/{ref_hint}^{{commit}}",
                    git_dir=git_dir,
                    check=False,
                )
                .stdout.decode()
                .strip()
                or git(
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    f"refs/sglforge/upstream/tags/{ref_hint}^{{commit}}",
                    git_dir=git_dir,
                    check=False,
                )
                .stdout.decode()
                .strip()
            )
            if head:
                got += f" ('{ref_hint}' is now at {head})"
        raise SglforgeError(
            f"{want.label}: expected commit {want.commit} from "
            f"{describe_source(want.url, settings)}, got {got}",
            hint=hint
            or "the pin is wrong or upstream history was rewritten; fix lockfiles/upstreams.toml",
        )
    git("update-ref", "--", PIN_REF + want.commit, want.commit, git_dir=git_dir)
    return "fetched"


def gitlinks(git_dir: Path, commit: str) -> dict[str, str]:
    """Submodule entries (path -> commit) recorded in a commit's tree."""
    out = git("ls-tree", "-r", "-z", "--end-of-options", commit, git_dir=git_dir).stdout.decode()
    links = {}
    for record in filter(None, out.split("\0")):
        meta, path = record.split("\t", 1)
        _mode, kind, obj = meta.split()
        if kind == "commit":
            links[path] = obj
    return links


def check_submodule_pins(lock: Lockfile, cache: SourceCache, pin: Pin) -> list[str]:
    """Every gitlink in `pin`'s tree must be pinned; a different commit is reported (warning).

    The lockfile wins: a pinned submodule commit different from upstream's gitlink is how a
    deliberate submodule bump is expressed, so it is a warning, not an error.
    """
    assert pin.commit is not None
    links = gitlinks(cache.git_dir(pin.url), pin.commit)
    pinned = {p.path: p for p in lock.submodules(pin.name)}
    unpinned = sorted(set(links) - set(pinned))
    if unpinned:
        entries = "\n".join(
            f'  [[source]]\n  name = "{pin.name}.{PurePosixPath(path).name}"\n'
            f'  parent = "{pin.name}"\n  path = "{path}"\n  url = "<submodule url>"\n'
            f'  commit = "{links[path]}"'
            for path in unpinned
        )
        raise SglforgeError(
            f"{lock.path}: '{pin.name}' at {pin.commit[:12]} has submodule(s) without a pin: "
            f"{', '.join(unpinned)}. Add:\n{entries}"
        )
    warnings = []
    for path, sub in pinned.items():
        if path not in links:
            raise SglforgeError(
                f"{lock.path}: source '{sub.name}' (line {sub.line}) places a submodule at "
                f"'{path}', but '{pin.name}' at {pin.commit[:12]} has no submodule there"
            )
        if links[path] != sub.commit:
            warnings.append(
                f"{sub.name}: pinned {sub.commit} differs from the commit "
                f"'{pin.name}' records at {path} ({links[path]}); using the pin"
            )
    return warnings


def pinned_set(lock: Lockfile, names: list[str], *, with_children: bool = True) -> list[Pin]:
    """The pins `names` (all upstreams if empty) stand for: each with its closure (submodules,
    FetchContent archives) unless `with_children` is off; once each, parents first."""
    pins: list[Pin] = []
    for name in names or [p.name for p in lock.upstreams()]:
        closure = lock.closure(name) if with_children else [lock.get(name)]
        pins += [p for p in closure if p not in pins]
    return pins


def fetch_sources(
    lock: Lockfile,
    names: list[str],
    settings: Settings,
    *,
    offline: bool,
    extra: list[GitWant] = (),
    with_children: bool = True,
) -> FetchReport:
    """Fetch the closure of `names` (all upstreams if empty) plus `extra` commits.

    `with_children=False` fetches only the named sources themselves: enough to check patch
    series, which never reach into submodules or FetchContent archives.
    Offline, nothing is fetched; every missing item is listed in one error.
    """
    from sglforge.sources.substitute import substitutes_for

    cache = SourceCache(settings.cache_dir)
    report = FetchReport()
    substitutes = substitutes_for(lock, settings)
    pins = pinned_set(lock, names, with_children=with_children)
    for pin in [p for p in pins if p.name in substitutes]:
        sub = substitutes[pin.name]
        report.substituted.append(
            f"{pin.name} {pin.short}: NOT fetched; {sub.path} stands in "
            f"({sub.origin}: {sub.reason})"
        )
    pins = [p for p in pins if p.name not in substitutes]
    failed: list[tuple[str, SglforgeError]] = []  # (URL, why): every one, not the first
    with cache.locked():
        cache.remove_partial_downloads()  # a killed run's; under the lock, nobody else's
        for pin in pins:
            try:
                _fetch_pin(cache, pin, settings, offline, lock, report)
            except SglforgeError as exc:
                failed.append((pin.url or "", exc))
        for want in extra:
            try:
                state = fetch_commit(cache, want, settings, offline)
            except SglforgeError as exc:
                failed.append((want.url, exc))
                continue
            if state == "missing":
                report.missing.append(f"{want.label}: commit {want.commit} from {want.url}")
            else:
                getattr(report, state).append(f"{want.label} {want.commit[:12]}")
        if failed:
            raise fetch_failures(failed, len(pins) + len(extra), settings)
        if report.missing:
            raise SglforgeError(
                f"offline: {len(report.missing)} source(s) missing from the cache "
                f"{cache.root}:\n" + "\n".join(f"  - {m}" for m in report.missing),
                hint="run `nox -s fetch` on a connected host and move the cache with "
                "`--bundle FILE` / `--from-bundle FILE`",
            )
        for pin in pins:
            if pin.is_git and with_children:
                report.warnings += check_submodule_pins(lock, cache, pin)
    return report


BUNDLE_ROUTE = (
    "an air-gapped host: `nox -s fetch -- --bundle FILE` on a connected host, then "
    "`nox -s fetch -- --from-bundle FILE` here; `nox -s fetch -- --offline` lists what the "
    "cache lacks"
)


def fetch_failures(
    failed: list[tuple[str, SglforgeError]], total: int, settings: Settings
) -> SglforgeError:
    """One error for every source that could not be fetched, with a hint that fits: a mirror
    is suggested only for URLs no mirror rule matches; the bundle route always."""
    urls = [url for url, _ in failed if url]
    mirrored = [u for u in urls if settings.resolve_url(u) != u]
    unmirrored = [u for u in urls if settings.resolve_url(u) == u]
    hints = []
    if mirrored:
        rules = sorted(
            {
                m.upstream
                for m in settings.mirrors
                if any(u.startswith(m.upstream) for u in mirrored)
            }
        )
        hints.append(
            f"{len(mirrored)} went to a mirror ({', '.join(rules)}) that does not hold them: "
            "update the mirror"
        )
    if unmirrored:
        hints.append(
            f"{len(unmirrored)} match no mirror rule: check your network, or add a mirror "
            "(--mirror UPSTREAM=MIRROR or [mirrors] in the config file)"
        )
    hints.append(BUNDLE_ROUTE)
    if len(failed) == 1:
        exc = failed[0][1]
        return SglforgeError(
            exc.args[0], hint="\n  ".join(hints) if exc.hint in (UNREACHABLE, None) else exc.hint
        )
    lines = [f"  - {_one_line(exc)}" for _, exc in failed]
    return SglforgeError(
        f"cannot fetch {len(failed)} of {total} source(s):\n" + "\n".join(lines),
        hint="\n  ".join(hints),
    )


def _one_line(exc: SglforgeError) -> str:
    """What went wrong with one source: the message's first line and the tool's own error
    line (git's first fatal:/error:, else its last)."""
    lines = [line.strip() for line in exc.args[0].splitlines() if line.strip()]
    said = [line for line in lines[1:] if line.startswith(("fatal:", "error:"))] or lines[-1:]
    text = lines[0] if len(lines) < 2 else f"{lines[0]} {said[0]}"
    return text if len(text) <= 400 else text[:397] + "..."


def _fetch_pin(
    cache: SourceCache, pin: Pin, settings: Settings, offline: bool, lock: Lockfile, report
) -> None:
    """Fetch and check one pin into the cache; its state goes into `report`."""
    from sglforge.sources.sdist import fetch_sdist

    label = f"{pin.name} {pin.short}"
    if pin.is_git:
        state = fetch_commit(
            cache, GitWant(pin.url, pin.commit, pin.name), settings, offline, ref_hint=pin.ref
        )
        if state == "missing":
            report.missing.append(f"{pin.name}: commit {pin.commit} from {pin.url}")
            return
        verify_git_pin(cache, pin)
    elif pin.sdist is not None:
        state = fetch_sdist(cache, pin, settings, offline, lock)
        if state == "missing":
            report.missing.append(
                f"{pin.name}: sdist {pin.sdist} sha256 {pin.sha256} from the package index"
            )
            return
    else:
        state = fetch_tarball(cache, pin, settings, offline)
        if state == "missing":
            report.missing.append(f"{pin.name}: sha256 {pin.sha256} from {pin.url}")
            return
    getattr(report, state).append(label)


def verify_git_pin(cache: SourceCache, pin: Pin) -> str:
    """Check the cached commit (and its tree when pinned); return the tree id."""
    git_dir = cache.git_dir(pin.url)
    tree = git_out("rev-parse", rev(f"{pin.commit}^{{tree}}"), git_dir=git_dir)
    if pin.tree and tree != pin.tree:
        raise SglforgeError(
            f"{pin.name}: expected tree {pin.tree} for commit {pin.commit}, got {tree}"
        )
    return tree
