"""Finding an interpreter of one Python version (`X.Y`) on this host.

One routine for every place that needs the toolchain's Python (`python` in
lockfiles/toolchain.toml): `nox -s build`/`verify`/`matrix` make the build venv with it, the
smoke makes its venv with it. Looked at, in order: $SGLFORGE_TOOLCHAIN_PYTHON, the running
interpreter, `pythonX.Y` on PATH, what `uv python find` knows (installed ones only), pyenv's
versions. Each candidate is run once: a pyenv shim for an unselected version, or a binary
that lies about its name, fails the probe and the search goes on.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sglforge.base.errors import SglforgeError

OVERRIDE = "SGLFORGE_TOOLCHAIN_PYTHON"


def major_minor(python: str) -> str | None:
    """`X.Y` of the interpreter at `python` (None: it does not run)."""
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def candidates(
    version: str,
    *,
    search_path: str | None = None,
    use_uv: bool = True,
    pyenv_root: str | None = None,
) -> list[str]:
    """Where an interpreter of `version` may be, in the order they are tried."""
    found = [os.environ.get(OVERRIDE) or ""]
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        found.append(sys.executable)
    found.append(shutil.which(f"python{version}", path=search_path) or "")
    uv = shutil.which("uv", path=search_path) if use_uv else None
    if uv:
        try:
            result = subprocess.run(
                [uv, "python", "find", "--no-python-downloads", version],
                capture_output=True,
                text=True,
                check=False,
                stdin=subprocess.DEVNULL,
                timeout=60,
            )
            if result.returncode == 0:
                found.append(result.stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    root = (
        pyenv_root
        if pyenv_root is not None
        else os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    )
    found += sorted(
        glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")),
        reverse=True,
    )
    return [c for c in dict.fromkeys(found) if c]


def find_python(
    version: str,
    purpose: str = "the build and smoke venvs",
    *,
    search_path: str | None = None,
    use_uv: bool = True,
    pyenv_root: str | None = None,
) -> Path:
    """An interpreter of Python `version`, or an error saying where it looked and how to get
    one. $SGLFORGE_TOOLCHAIN_PYTHON, when set, is the user's choice: it is used or refused
    (missing, not runnable, another version), never passed over for another interpreter."""
    chosen = os.environ.get(OVERRIDE)
    if chosen:
        return _chosen_python(chosen, version, purpose)
    for candidate in candidates(
        version, search_path=search_path, use_uv=use_uv, pyenv_root=pyenv_root
    ):
        if major_minor(candidate) == version:
            return Path(candidate)
    override = os.environ.get(OVERRIDE)
    tried = (f"${OVERRIDE} ({override}), " if override else "") + (
        f"python{version} on PATH" + (", `uv python find`" if use_uv else "") + ", pyenv"
    )
    raise SglforgeError(
        f"no Python {version} found for {purpose} (lockfiles/toolchain.toml `python`: the "
        f"wheels are built for exactly that version); looked at {tried}",
        hint=f"get it:  uv python install {version}   (https://docs.astral.sh/uv/)\n"
        f"    or:  pyenv install {version}\n"
        f"    or:  sudo apt install python{version} python{version}-venv   "
        "(Debian/Ubuntu; deadsnakes PPA on older releases)\n"
        f"  or point at one: {OVERRIDE}=/path/to/python{version}",
    )


def _chosen_python(chosen: str, version: str, purpose: str) -> Path:
    path = Path(chosen)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SglforgeError(
            f"{OVERRIDE}={chosen}: not an executable file (it names the interpreter for "
            f"{purpose}; lockfiles/toolchain.toml `python` = {version})",
            hint=f"point it at a python{version}, or unset it to search PATH, uv and pyenv",
        )
    found = major_minor(chosen)
    if found != version:
        what = f"Python {found}" if found else "not a working Python"
        raise SglforgeError(
            f"{OVERRIDE}={chosen}: {what}, but lockfiles/toolchain.toml pins python "
            f"{version} for {purpose} (the wheels are built for exactly that version)",
            hint=f"point it at a python{version}, or unset it to search PATH, uv and pyenv",
        )
    return path
