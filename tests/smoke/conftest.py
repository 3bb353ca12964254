"""Fixtures for smoke tests: a throw-away sglforge project with tiny real wheels (each with a
sglforge-build.json), a hash-pinned lock, a third-party wheelhouse, and a profile that
launches the stand-in servers through the product's own launcher and the REAL
sglang-router from PyPI.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomli_w

from sglforge.wheel.provenance import Provenance, read_json

HERE = Path(__file__).parent
# The stand-ins ship with the demo project (its `laptop` profile runs them: issue 33 item 14).
STANDIN = HERE.parents[1] / "demo" / "project" / "standin" / "server.py"
STANDIN_ROUTER = HERE.parents[1] / "demo" / "project" / "standin" / "router.py"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    provenance: Provenance | None,
    requires: list[str] = (),
    requires_python: str | None = None,
) -> Path:
    """A minimal, valid, pure-Python wheel (RECORD with hashes) pip will install."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files: dict[str, bytes] = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + (f"Requires-Python: {requires_python}\n" if requires_python else "")
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sglforge-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if provenance is not None:
        provenance.write(files, dist_info)
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in files.items():
            # Fixed timestamps: the same inputs give the same wheel bytes and hashes.
            info = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def provenance(
    upstream: str, version: str, archs: list[str], torch: str | None = None
) -> Provenance:
    return Provenance(
        upstream=upstream,
        commit=hashlib.sha1(upstream.encode()).hexdigest(),
        version=version,
        cuda_archs=tuple(archs),
        requires_torch=torch,
        toolchain={"cuda": "13.0", "python": "3.11", "torch": torch or "2.13.0"},
    )


# Servers' ports come from below the kernel's ephemeral range (ip_local_port_range, 32768+ by
# default): a port taken from that range (bind to 0) and released can be handed to any
# outgoing connection of the suite before the server binds it, and the doctor then finds it
# busy. Below it, nothing but a listener asks for a port by number.
PORT_RANGE = (20000, 32000)


def free_ports(n: int) -> list[int]:
    """Distinct free TCP ports below the ephemeral range (held together while choosing)."""
    import random

    pick = random.Random(os.getpid() ^ time.monotonic_ns())
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < n:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", pick.randrange(*PORT_RANGE)))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SmokeProject:
    root: Path
    ports: dict[str, int]
    wheels: list[Path] = field(default_factory=list)

    def write_profile(
        self,
        name: str = "standin",
        *,
        prefill_env: dict | None = None,
        decode_env: dict | None = None,
        timeouts: dict | None = None,
        checks: dict | None = None,
        server_command: list[str] | None = None,
        router_command: list[str] | None = None,
        router_extra: dict | None = None,
        top_extra: dict | None = None,
    ) -> Path:
        profile = {
            "description": "stand-in PD pair for tests",
            "model": "standin-model",
            "backend": "nixl",
            "host": "127.0.0.1",
            "requires-gpu": False,
            "numa-binding": False,
            "install": {"wheelhouse": "wheelhouse"},
            "server": {
                "command": server_command or [sys.executable, str(STANDIN)],
                "args": ["--trust-remote-code"],
                "env": {"STANDIN_RUN_DIR": "{run_dir}"},
            },
            "prefill": {
                "gpus": [0, 1],
                "numa-node": 0,
                "tp": 2,
                "port": self.ports["prefill"],
                "bootstrap-port": self.ports["bootstrap"],
                "env": prefill_env or {},
            },
            "decode": {
                "gpus": [2, 3],
                "numa-node": 1,
                "tp": 2,
                "port": self.ports["decode"],
                "env": decode_env or {},
            },
            # The real router from PyPI, from the test venv (the smoke venv holds only the
            # tiny test wheels).
            "router": {
                "command": router_command or [sys.executable, "-m", "sglang_router.launch_router"],
                "port": self.ports["router"],
                "metrics-port": self.ports["metrics"],
                **(router_extra or {}),
            },
            "timeouts": {
                "health": 20,
                "health-generate": 10,
                "router": 30,
                "request": 20,
                "teardown": 5,
                **(timeouts or {}),
            },
            "checks": {
                "needle-lengths": [256, 1024, 2048, 4096],
                "needle-must-recall": [256],
                "words-per-token": 1.0,
                "concurrency": 8,
                "max-new-tokens": 8,
                **(checks or {}),
            },
        }
        profile.update(top_extra or {})
        path = self.root / "profiles" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(tomli_w.dumps(profile))
        return path

    def smoke(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command("smoke", *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env(), **(env or {})},
            check=False,
        )

    def run_verb(self, verb: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(verb, *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            check=False,
        )

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "sglforge", "--project", str(self.root), *args]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SGLFORGE_PROJECT", None)
        return env

    @property
    def run_dir(self) -> Path:
        return self.root / "out"

    def report(self) -> dict:
        return json.loads((self.run_dir / "smoke-report.json").read_text())


def build_wheelset(root: Path) -> list[Path]:
    """wheels/ (ours, with provenance) + wheelhouse/ (a third-party dep) + the lock."""
    wheels = root / "wheels"
    ours = [
        make_wheel(
            wheels,
            "sglang",
            "0.5.99+sm120.cu130.abcd1234",
            provenance("sglang", "0.5.99+sm120.cu130.abcd1234", []),
            requires=["tinydep==1.0"],
        ),
        make_wheel(
            wheels,
            "sglang-kernel",
            "0.4.7+sm120.cu130.abcd1234",
            provenance("sglang-kernel", "0.4.7+sm120.cu130.abcd1234", ["sm_120a"]),
        ),
    ]
    third = make_wheel(root / "wheelhouse", "tinydep", "1.0", None)
    manifest = {
        "wheels": [
            {
                "file": w.name,
                "sha256": sha256(w),
                "name": w.name.split("-")[0].replace("_", "-"),
                "version": w.name.split("-")[1],
                "provenance": read_json(w),
            }
            for w in ours
        ]
    }
    (wheels / "manifest.json").write_text(json.dumps(manifest, indent=2))
    lock = ["# GENERATED by `nox -s build` — tests write it by hand", ""]
    for entry in manifest["wheels"]:
        lock.append(f"{entry['name']}=={entry['version']} \\\n    --hash=sha256:{entry['sha256']}")
    lock.append(f"tinydep==1.0 --hash=sha256:{sha256(third)}")
    (root / "lockfiles").mkdir(parents=True, exist_ok=True)
    (root / "lockfiles" / "wheels.lock").write_text("\n".join(lock) + "\n")
    return ours


@pytest.fixture
def smoke_project(tmp_path: Path) -> SmokeProject:
    root = tmp_path / "project"
    (root / "lockfiles").mkdir(parents=True)
    (root / "lockfiles" / "upstreams.toml").write_text("")
    ports = dict(zip(("prefill", "decode", "bootstrap", "router", "metrics"), free_ports(5)))
    project = SmokeProject(root=root, ports=ports)
    project.wheels = build_wheelset(root)
    project.write_profile()
    return project


@pytest.fixture(scope="session")
def installed_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv with the test wheel set, installed by the product's installer, shared by the
    tests that pass --venv (the full-run test installs its own fresh venv)."""
    from sglforge.smoke.install import install, plan_install
    from sglforge.smoke.profile import InstallSpec
    from sglforge.wheel.wheelset import load_wheelset

    root = tmp_path_factory.mktemp("shared-wheels")
    build_wheelset(root)
    wheelset = load_wheelset(root / "wheels", root / "lockfiles" / "wheels.lock")
    venv = root / "venv"
    install(
        plan_install(
            venv,
            root / "lockfiles" / "wheels.lock",
            root / "wheels",
            InstallSpec(wheelhouse=root / "wheelhouse", index_url=None),
        ),
        wheelset,
        root / "install.log",
    )
    return venv
