"""Install a checked `WheelSet` into a fresh venv, hash-pinned, nothing resolved on the fly.

`pip install --require-hashes` makes pip refuse anything not pinned with a hash in the lock,
so the venv holds exactly the locked set: our wheels from wheels/, third-party pins from a
local wheelhouse (find-links) or the configured index.

The venv is created with the toolchain's Python (`python` in lockfiles/toolchain.toml, the one
the wheels are built for and serving hosts run), found on this host (`find_python`), not with
whatever interpreter runs sglforge.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sglforge.base import python as base_python
from sglforge.base.errors import SglforgeError
from sglforge.base.fs import remove_tree
from sglforge.base.requirements import installed_version
from sglforge.smoke.profile import InstallSpec
from sglforge.wheel.wheelset import WheelSet


@dataclass(frozen=True)
class InstallPlan:
    venv: Path
    create: tuple[str, ...]
    pip: tuple[str, ...]
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return venv_python(self.venv)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def find_python(
    version: str,
    *,
    search_path: str | None = None,
    use_uv: bool = True,
    pyenv_root: str | None = None,
) -> Path:
    """The toolchain interpreter for the smoke venv: the one discovery routine the build's
    nox sessions use too (`sglforge.base.python`)."""
    return base_python.find_python(
        version, "the smoke venv", search_path=search_path, use_uv=use_uv, pyenv_root=pyenv_root
    )


def venv_base_python(project_root: Path) -> Path:
    """The interpreter the smoke venv is created with: the toolchain's Python; the running
    one when the project has no lockfiles/toolchain.toml."""
    from sglforge.inputs.toolchain import load_toolchain

    toolchain = project_root / "lockfiles" / "toolchain.toml"
    if not toolchain.exists():
        return Path(sys.executable)
    return find_python(load_toolchain(toolchain).python)


def plan_install(
    venv: Path,
    lock_path: Path,
    wheels_dir: Path,
    spec: InstallSpec,
    base_python: Path | None = None,
) -> InstallPlan:
    pip = [
        str(venv_python(venv)),
        "-m",
        "pip",
        "install",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "--find-links",
        str(wheels_dir),
    ]
    if spec.wheelhouse:
        pip += ["--find-links", str(spec.wheelhouse)]
    if spec.index_url:
        pip += ["--index-url", spec.index_url]
    else:
        pip += ["--no-index"]
    pip += ["-r", str(lock_path)]
    # A user's pip.conf may add indexes or find-links; the lock alone decides what installs.
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    base = str(base_python or sys.executable)
    return InstallPlan(venv=venv, create=(base, "-m", "venv", str(venv)), pip=tuple(pip), env=env)


def install(plan: InstallPlan, wheelset: WheelSet, log: Path) -> None:
    """Recreate the venv and install; on failure show pip's last lines and the log path."""
    if plan.venv.exists():
        remove_tree(plan.venv)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **plan.env}
    with open(log, "w") as out:
        for argv in (plan.create, plan.pip):
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            result = subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            if result.returncode != 0:
                out.close()
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                what = "creating the venv" if argv is plan.create else "pip install"
                raise SglforgeError(
                    f"{what} failed (exit {result.returncode}); last lines of {log}:\n{tail}",
                    hint=None
                    if argv is plan.create
                    else "third-party pins come from [install] wheelhouse/index-url "
                    "(or --wheelhouse/--index-url)",
                )
    missing = [
        w.name for w in wheelset.wheels if installed_version(w.name, plan.python) != w.version
    ]
    if missing:
        raise SglforgeError(f"after pip install, the venv {plan.venv} lacks {', '.join(missing)}")


def missing_launch_modules(python: Path, commands: dict[str, tuple[str, ...]]) -> list[str]:
    """For commands of the form `{python} -m pkg.module`, the ones whose top-level package is
    not installed in the venv (e.g. sglang-router left out of the lock). Checked without
    importing: importing sglang takes seconds and needs a GPU."""
    wanted = {
        where: argv[2].split(".")[0]
        for where, argv in commands.items()
        if len(argv) >= 3 and argv[0] == "{python}" and argv[1] == "-m"
    }
    if not wanted:
        return []
    code = (
        "import importlib.util, sys\n"
        "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    )
    result = subprocess.run(
        [str(python), "-c", code, *sorted(set(wanted.values()))],
        capture_output=True,
        text=True,
        check=False,
    )
    absent = set(result.stdout.split()) if result.returncode == 0 else set(wanted.values())
    return [
        f"{where}: module '{module}' is not installed in {python.parent.parent}"
        for where, module in sorted(wanted.items())
        if module in absent
    ]
