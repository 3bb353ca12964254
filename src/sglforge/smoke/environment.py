"""An existing Python environment as the smoke's stack (`--python PATH`, or `--venv` without
a wheel set): what is installed there, read once by running a probe in *that* interpreter.

Serving hosts often have the stack already (a container image, a site venv, an overlay on
PYTHONPATH) and cannot install wheels (no network, no room). The smoke then installs nothing;
it records what it ran: for every stack package the installed version, where it was found,
and, for packages sglforge built, the provenance their dist-info carries (sglforge-build.json).
Packages without that file came from elsewhere (PyPI, a container image) and are reported so.

The probe inherits this process's environment, so a PYTHONPATH overlay is seen exactly as the
servers will see it (they inherit it too). Nothing is imported: metadata and files only.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.base.requirements import canonical_name
from sglforge.inputs.toolchain import torch_version_file
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance

# Every distribution the PD smoke's processes load, in the order the report lists them.
STACK_PACKAGES = (
    "sglang",
    "sglang-kernel",
    "sgl-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "sgl-deep-gemm",
    "tilelang",
    "nixl",
    "nixl-cu13",
    "nixl-cu12",
    "sglang-router",
    "torch",
    "triton",
    "transformers",
    "tokenizers",
    "safetensors",
    "apache-tvm-ffi",
    "numpy",
)
# Packages whose top-level module the servers cannot run without (checked by the doctor when
# the profile needs GPUs; the stand-in profiles do not).
REQUIRED_FOR_GPU = ("sglang", "torch")
# Distributions of the NIXL Python package (the module name differs per CUDA major).
ORIGIN_SGLFORGE = "sglforge"
ORIGIN_OTHER = "not built by sglforge"

_PROBE = r"""
import glob, importlib.metadata as md, importlib.util, json, os, sys
names = json.loads(sys.argv[1])
out = {"python": sys.executable, "python_version": sys.version.split()[0],
       "pythonpath": os.environ.get("PYTHONPATH"), "packages": {}, "modules": {}}
for name in names:
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    path = getattr(dist, "_path", None)
    entry = {"version": dist.version, "location": str(path) if path else None,
             "installer": (dist.read_text("INSTALLER") or "").strip() or None,
             "provenance": None}
    text = dist.read_text(PROVENANCE_FILE)
    if text:
        try:
            entry["provenance"] = json.loads(text)
        except ValueError as exc:
            entry["provenance_error"] = str(exc)
    out["packages"][dist.metadata["Name"] or name] = entry
for module in ("torch", "nixl_cu13", "nixl_cu12", "nixl", "sglang", "sglang_router"):
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        continue
    where = list(spec.submodule_search_locations)[0]
    info = {"path": where}
    if module.startswith("nixl"):
        parent = os.path.dirname(where)
        # meson-python keeps the plugins in a hidden `.nixl_cu13.mesonpy.libs/plugins/`
        # (sglforge's nixl-cu13), which a plain `*nixl*` glob skips
        plugins = sorted({p for pattern in ("*nixl*", ".*nixl*") for p in glob.glob(
            os.path.join(parent, pattern, "**", "libplugin_*.so*"), recursive=True)})
        info["plugins"] = plugins
    out["modules"][module] = info
print(json.dumps(out))
""".replace("PROVENANCE_FILE", repr(PROVENANCE_FILE))


@dataclass(frozen=True)
class InstalledPackage:
    name: str  # as the distribution spells it
    version: str
    location: str | None  # its dist-info directory
    installer: str | None
    provenance: Provenance | None  # None: not built by sglforge
    problem: str | None = None  # unreadable provenance

    @property
    def origin(self) -> str:
        return ORIGIN_SGLFORGE if self.provenance is not None else ORIGIN_OTHER

    def report(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "version": self.version,
            "origin": self.origin,
            "location": self.location,
            "installer": self.installer,
        }
        if self.provenance is not None:
            p = self.provenance
            entry.update(
                {
                    "upstream": p.upstream,
                    "commit": p.commit,
                    "cuda_archs": list(p.cuda_archs),
                    "requires_torch": p.requires_torch,
                    "toolchain": p.toolchain,
                    "provenance": p.to_json(),
                }
            )
        if self.problem:
            entry["problem"] = self.problem
        return entry


@dataclass(frozen=True)
class EnvStack:
    """The probed environment (built by `probe_environment`, or by a test)."""

    python: str
    python_version: str
    pythonpath: str | None
    packages: tuple[InstalledPackage, ...]
    torch_cuda: str | None = None  # torch.version.cuda, read from torch/version.py
    nixl_module: str | None = None  # nixl_cu13 / nixl_cu12 / nixl
    nixl_plugins: tuple[str, ...] = ()  # libplugin_*.so found beside the NIXL package

    def get(self, name: str) -> InstalledPackage | None:
        wanted = canonical_name(name)
        return next((p for p in self.packages if canonical_name(p.name) == wanted), None)

    def built_by_sglforge(self) -> tuple[InstalledPackage, ...]:
        return tuple(p for p in self.packages if p.provenance is not None)

    def versions(self) -> dict[str, dict[str, Any]]:
        return {p.name: p.report() for p in self.packages}

    def summary(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "python_version": self.python_version,
            "pythonpath": self.pythonpath,
            "torch_cuda": self.torch_cuda,
            "nixl_module": self.nixl_module,
            "nixl_plugins": list(self.nixl_plugins),
            "built_by_sglforge": [p.name for p in self.built_by_sglforge()],
            "not_built_by_sglforge": [p.name for p in self.packages if p.provenance is None],
        }


def probe_environment(python: Path, extra: tuple[str, ...] = ()) -> EnvStack:
    """Run the probe in `python` (inheriting this environment, PYTHONPATH included)."""
    names = list(dict.fromkeys((*STACK_PACKAGES, *extra)))
    try:
        result = subprocess.run(
            [str(python), "-c", _PROBE, json.dumps(names)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SglforgeError(
            f"cannot run {python}: {exc}",
            hint="--python must be an interpreter of the serving stack",
        ) from None
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
        raise SglforgeError(
            f"probing the environment of {python} failed (exit {result.returncode}):\n{tail}"
        )
    return parse_probe(json.loads(result.stdout))


def parse_probe(data: dict[str, Any]) -> EnvStack:
    packages = []
    for name, entry in data.get("packages", {}).items():
        provenance = None
        problem = entry.get("provenance_error")
        raw = entry.get("provenance")
        if raw is not None:
            try:
                provenance = Provenance.from_json(raw, f"{name} {PROVENANCE_FILE}")
            except SglforgeError as exc:
                problem = exc.args[0]
        packages.append(
            InstalledPackage(
                name=name,
                version=str(entry.get("version")),
                location=entry.get("location"),
                installer=entry.get("installer"),
                provenance=provenance,
                problem=problem,
            )
        )
    modules = data.get("modules", {})
    nixl = next((m for m in ("nixl_cu13", "nixl_cu12", "nixl") if m in modules), None)
    return EnvStack(
        python=data.get("python", ""),
        python_version=data.get("python_version", ""),
        pythonpath=data.get("pythonpath"),
        packages=tuple(packages),
        torch_cuda=_torch_cuda(modules.get("torch")),
        nixl_module=nixl,
        nixl_plugins=tuple((modules.get(nixl) or {}).get("plugins") or ()) if nixl else (),
    )


def _torch_cuda(torch_module: dict[str, Any] | None) -> str | None:
    """torch.version.cuda of the probed torch, read here (same host) by the build's reader."""
    where = (torch_module or {}).get("path")
    if not isinstance(where, str):
        return None
    return torch_version_file(Path(where) / "version.py")[1]
