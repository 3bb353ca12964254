"""The sandbox every step that runs upstream code runs in: bubblewrap (`bwrap`), as Flatpak
and many CI builders use it.

The code being built is untrusted (a patch can change `setup.py` or a CMake file), so the
PEP 517 frontend and everything it starts (CMake, meson, ninja, nvcc, an upstream's own
scripts) run in a sandbox made of kernel namespaces, each one named explicitly (bubblewrap's
`--unshare-all` quietly goes on without a namespace it cannot make; this list fails instead):

- *user* (`--disable-userns`: no nested one), *ipc*, *uts* (hostname `sglforge-build`),
  *cgroup*;
- *pid*, with its own `/proc`: the build sees only its own processes (not sglforge, not pid 1
  of the host), and when the step's main process exits, bubblewrap's init (pid 1 of the
  namespace) exits and the kernel kills everything left in it — a daemon that setsid()s and
  double-forks does not outlive its step. `--die-with-parent` does the same if sglforge dies;
- *net*: only loopback. The one way out is the compiler cache's proxy socket, bound in when a
  remote cache is configured (builder/cacheproxy.py, builder/netbridge.py);
- no capabilities (`--cap-drop ALL`), no_new_privs, a new session (no TIOCSTI into the
  caller's terminal).

The filesystem is built up from nothing (a tmpfs root), not the host's root with holes:

- read-only: the system directories (`/usr`, `/etc`, `/bin`, `/lib*`, `/sbin`, as links where
  the host has merged /usr), `/sys`, the build interpreter wherever it lives (its prefix, base
  prefix and every directory its site-packages' `.pth` files add: a toolchain venv under
  `/root`, pyenv's interpreter, a venv layered over a host's torch venv), the CUDA toolkit,
  and what the pipeline names as inputs (FetchContent exports, the tools dir with the
  compiler wrappers, a wheelhouse, the proxy socket's directory, a read-only compiler cache);
- read-write: the build's own source tree and its work directory (dist/, build/, site/), the
  compiler cache's directory only for a writable cache, and a private HOME and TMP (fresh
  per step, at the build root's `home`/`tmp` paths and at `/tmp`);
- at fixed paths: the build root (its tree, work dir, tools, HOME and TMP) is shown at
  `/sglforge-build` (base/buildroot.py SANDBOX_PATH) wherever the host keeps it, and the
  command, its working directory and its environment name it there (`PathView`). What a
  compiler embeds (`__FILE__`, debug info, nvcc's per-file seeds and module ids), the content
  key and the provenance are then the same at any host path;
- not there at all: everything else — the checkout (`lockfiles/`, `wheels/`, sglforge's own
  sources), the source cache, the wheel caches, other builds' trees, `/root`, `/home`,
  `/run`, `/var`; and inside the bound directories, the secret files below are replaced by an
  empty file or directory (`/etc/shadow`, `/etc/ssh`, …, and sglforge's config file or a
  netrc wherever they lie inside a bound path).

As root, the build is root of its own user namespace without capabilities: it owns nothing
it can reach but its tree, work dir, HOME and TMP, because everything else is either read-only
mounts or absent. Not root, bubblewrap makes the same user namespace unprivileged (the kernel
must allow unprivileged user namespaces; `probe` says how when it does not).

Where no sandbox can be made, sglforge refuses to run upstream code (`SandboxUnavailable`,
with how to get one) unless the user passes `--unsafe-no-sandbox`, which is printed and
recorded in the wheel's provenance and its content key.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.base.buildroot import SANDBOX_PATH
from sglforge.base.errors import SglforgeError

UNSAFE_FLAG = "--unsafe-no-sandbox"
HOSTNAME = "sglforge-build"
# Each namespace by name (Bazel's linux-sandbox and sccache-dist do the same): bubblewrap fails
# when one cannot be made, instead of carrying on without it.
NAMESPACES = (
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup",
)
HARDENING = (
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    "--hostname",
    HOSTNAME,
)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Secret files a read-only /etc would otherwise show (root without capabilities still owns
# them): replaced by an empty file or directory.
SECRET_FILES = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
    "/etc/.pwd.lock",
)
SECRET_DIRS = (
    "/etc/ssh",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/wireguard",
    "/etc/docker",
    "/etc/containers",
)

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install "
    "bubblewrap; Arch: pacman -S bubblewrap). Not as root it needs unprivileged user "
    "namespaces: sysctl user.max_user_namespaces > 0 (and kernel.unprivileged_userns_clone=1 "
    "on older Debian kernels, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor "
    "profile for bwrap on Ubuntu 24.04). Inside a container, the container must allow "
    "user namespaces (Docker: --security-opt seccomp=unconfined, or run sglforge on the "
    f"host). Only for code you trust: {UNSAFE_FLAG} builds without a sandbox (printed, and "
    "recorded in the wheel's provenance)"
)


class SandboxUnavailable(SglforgeError):
    """No sandbox can be made on this host: upstream code is not run."""


@dataclass(frozen=True)
class PathView:
    """Where the sandbox shows host paths: the build root (as given and as resolved) at
    `inside`; every other path where the host has it."""

    host_root: Path
    inside: Path = SANDBOX_PATH

    def _roots(self) -> list[Path]:
        given = Path(os.path.abspath(self.host_root))
        real = Path(os.path.realpath(self.host_root))
        return list(dict.fromkeys((given, real)))

    def path(self, path: Path) -> Path:
        """`path` as the build sees it."""
        path = Path(os.path.abspath(path))
        for root in self._roots():
            if _under(path, root):
                return self.inside / path.relative_to(root)
        return path

    def text(self, value: str) -> str:
        """A command-line argument or environment value with every host build root in it (a
        whole path component: not inside a longer name) renamed to `inside`."""
        for root in sorted(self._roots(), key=lambda p: -len(str(p))):
            if root == self.inside or str(root) == "/":
                continue
            value = re.sub(
                r"(?<![\w.\-/])" + re.escape(str(root)) + r"(?![\w.\-])",
                lambda _: str(self.inside),
                value,
            )
        return value

    def env(self, env: dict[str, str]) -> dict[str, str]:
        return {name: self.text(value) for name, value in env.items()}


@dataclass(frozen=True)
class Mounts:
    """What one step's sandbox holds, besides the system directories and the interpreter."""

    cwd: Path
    writable: tuple[Path, ...]  # the build's tree and work dir (+ a writable compiler cache)
    readable: tuple[Path, ...] = ()  # its inputs: FetchContent exports, tools, wheelhouse, …
    private: Path | None = None  # host dir for this step's HOME and TMP (emptied here)
    home: Path | None = None  # where the build sees HOME (the build root's `home`)
    tmp: Path | None = None  # where it sees TMPDIR (the build root's `tmp`), also at /tmp
    secrets: tuple[Path, ...] = field(default_factory=tuple)  # config file, netrc, …
    view: PathView | None = None  # the build root at a fixed path (None: host paths)


@dataclass(frozen=True)
class Bubblewrap:
    path: str
    version: str

    def describe(self) -> str:
        names = ", ".join(n.removeprefix("--unshare-") for n in NAMESPACES)
        return (
            f"bubblewrap {self.version} ({self.path}): namespaces {names}; no "
            "capabilities; read-only system, interpreter and inputs; writable: its tree, "
            "work dir, private HOME and TMP"
        )

    def wrap(self, mounts: Mounts, cmd: list[str]) -> list[str]:
        """`cmd` run inside a sandbox holding `mounts` (a fresh private HOME/TMP); its
        arguments and working directory as the build sees them (`mounts.view`)."""
        view = mounts.view
        return [
            self.path,
            *NAMESPACES,
            *HARDENING,
            *filesystem(mounts),
            "--chdir",
            str(view.path(mounts.cwd) if view else mounts.cwd),
            "--",
            *([view.text(a) for a in cmd] if view else cmd),
        ]


def filesystem(mounts: Mounts) -> list[str]:
    """bubblewrap's filesystem arguments, in mount order (parents before children, secrets
    last). Creates the private HOME and TMP."""
    args = ["--proc", "/proc", "--dev", "/dev"]
    for top in SYSTEM_DIRS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if os.path.isdir("/sys"):
        args += ["--ro-bind", "/sys", "/sys"]
    binds: list[tuple[str, Path, Path]] = []  # (option, source, destination)
    if mounts.private is not None:
        home, tmp = mounts.private / "home", mounts.private / "tmp"
        for path in (home, tmp):
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        binds.append(("--bind", tmp, Path("/tmp")))
        if mounts.home is not None:
            binds.append(("--bind", home, mounts.home))
        if mounts.tmp is not None:
            binds.append(("--bind", tmp, mounts.tmp))
    writable = _existing(mounts.writable)
    for source, dest in writable:
        binds.append(("--bind", source, dest))
    for source, dest in _readable(mounts, [dest for _, dest in writable]):
        binds.append(("--ro-bind", source, dest))
    hidden = [(src, dest) for _, src, dest in binds]  # host layout, for the secret masks
    if mounts.view is not None:
        shown = mounts.view
        binds = [(option, source, shown.path(dest)) for option, source, dest in binds]
        binds = list(dict.fromkeys(binds))  # a root bound as given and resolved: once
    binds.sort(key=lambda b: len(b[2].parts))  # a child mount after its parent's
    for option, source, dest in binds:
        args += [option, str(source), str(dest)]
    args += _masks(hidden, mounts.secrets, mounts.view)
    # the tmpfs root itself: a write outside the binds is an error, not a silent no-op
    return [*args, "--remount-ro", "/"]


def _existing(paths: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(source, destination) binds of the paths that exist: each at its resolved path and, where
    a link leads there, at the path as given too (the environment names the given one, a
    CMake that resolves links names the other)."""
    out: list[tuple[Path, Path]] = []
    for path in paths:
        real = Path(os.path.realpath(path))
        if not real.exists():
            continue
        for dest in dict.fromkeys((real, Path(os.path.abspath(path)))):
            if (real, dest) not in out:
                out.append((real, dest))
    return out


def _under(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _readable(mounts: Mounts, writable: list[Path]) -> list[tuple[Path, Path]]:
    """Read-only binds: the interpreter's and toolkit's directories and the named inputs,
    each once (a destination already inside a read-only bind is not bound again, unless a
    writable bind lies between)."""
    wanted = _existing([*interpreter_dirs(), *mounts.readable])
    system = [Path(p) for p in SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    chosen: list[tuple[Path, Path]] = []
    for source, dest in sorted(wanted, key=lambda b: len(b[1].parts)):
        if any(_under(dest, top) for top in system):
            continue
        covering = [top for _, top in chosen if _under(dest, top)]
        if covering and not any(
            _under(w, max(covering, key=lambda p: len(p.parts))) and _under(dest, w)
            for w in writable
        ):
            continue
        chosen.append((source, dest))
    return chosen


def _masks(
    bound: list[tuple[Path, Path]], secrets: Iterable[Path], view: PathView | None = None
) -> list[str]:
    """Secret files inside bound directories (`bound`: host source, host-side destination):
    an empty file (/dev/null) or directory in their place, where the build sees them."""
    args: list[str] = []
    candidates = [Path(p) for p in (*SECRET_FILES, *SECRET_DIRS)]
    candidates += [Path(os.path.realpath(p)) for p in secrets]
    tops = [(Path("/etc"), Path("/etc")), *bound]
    for path in candidates:
        if not os.path.lexists(path):
            continue
        where = [dest / path.relative_to(src) for src, dest in tops if _under(path, src)]
        for shown in dict.fromkeys(view.path(w) if view else w for w in where):
            if path.is_dir() and not path.is_symlink():
                args += ["--tmpfs", str(shown), "--remount-ro", str(shown)]
            elif path.is_file() and not path.is_symlink():
                args += ["--ro-bind", "/dev/null", str(shown)]
    return args


def git_alternates(tree: Path) -> list[Path]:
    """The object stores a work tree's repositories borrow (`objects/info/alternates`: the
    export shares the source cache's objects, sources/export.py), followed transitively. Bound
    read-only, so `git archive HEAD` works inside the sandbox: setuptools-scm's file finder
    runs it, and without those objects it "pretends there aren't any" files and the wheel
    silently loses every file only git knew of (sglang: 47)."""
    found: list[Path] = []
    todo = (
        list((tree / ".git").glob("**/objects/info/alternates")) if (tree / ".git").is_dir() else []
    )
    while todo:
        listing = todo.pop()
        try:
            lines = listing.read_text(errors="replace").splitlines()
        except OSError:
            continue
        base = listing.parent.parent  # .../objects
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            store = Path(os.path.normpath(line if os.path.isabs(line) else base / line))
            if store.is_dir() and store not in found:
                found.append(store)
                nested = store / "info" / "alternates"
                if nested.is_file():
                    todo.append(nested)
    return found


def interpreter_dirs() -> list[Path]:
    """Where the build interpreter lives: its prefixes (a venv's and its base interpreter's,
    as given and resolved), the directory of its executable, and every directory a `.pth`
    file in its site-packages adds (an editable install, a venv layered over another)."""
    dirs = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    for site_dir in site.getsitepackages():
        dirs.update(_pth_dirs(Path(site_dir)))
    return [Path(d) for d in sorted(dirs) if d]


def _pth_dirs(site_dir: Path) -> list[str]:
    if not site_dir.is_dir():
        return []
    out = []
    for pth in sorted(site_dir.glob("*.pth")):
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            path = line if os.path.isabs(line) else os.path.join(site_dir, line)
            if os.path.isdir(path):
                out.append(os.path.normpath(path))
    return out


@functools.lru_cache(maxsize=1)
def find() -> Bubblewrap:
    """The sandbox of this host, proven by running one (every namespace, no capabilities, a
    read-only root); else SandboxUnavailable saying why and how to get one."""
    path = os.environ.get("SGLFORGE_BWRAP") or shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(
            "no build sandbox: bubblewrap (bwrap) is not installed; sglforge does not run "
            "upstream build code without one",
            hint=INSTALL_HINT,
        )
    version = _version(path)
    probe = [
        path,
        *NAMESPACES,
        *HARDENING,
        *filesystem(Mounts(cwd=Path("/"), writable=())),
        "--",
        "/bin/sh",
        "-c",
        "test ! -w /usr && test ! -w /",
    ]
    try:
        done = subprocess.run(
            probe, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(
            f"no build sandbox: {path} could not run: {exc}", hint=INSTALL_HINT
        ) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SandboxUnavailable(
            f"no build sandbox: {path} ({version}) cannot make one here: {why}", hint=INSTALL_HINT
        )
    return Bubblewrap(path, version)


def _version(path: str) -> str:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, check=False, timeout=30
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out[-1] if out else "unknown"
