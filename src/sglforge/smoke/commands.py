"""The exact commands the smoke runs: one `LaunchCommand` per process, built once from the
profile and shared by `--dry-run` (which prints them) and the launcher (which runs them).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from sglforge.smoke.profile import RoleSpec, SmokeProfile, expand


@dataclass(frozen=True)
class LaunchCommand:
    role: str  # prefill | decode | router
    argv: tuple[str, ...]
    env: dict[str, str]  # set on top of the inherited environment
    log: Path
    url: str  # base URL of its HTTP server
    summary: str  # one line: what runs where

    def shell(self) -> str:
        """A copy-pasteable line: `ENV=... argv...`."""
        return shell_line(self.env, self.argv)


def shell_line(env: dict[str, str], argv: tuple[str, ...]) -> str:
    """`NAME=value ... argv...` safe to paste: every name, value and word shell-quoted. Profile
    names are checked to be POSIX names on load, which quoting leaves as they are; any other
    name would come out quoted, a word the shell runs as nothing but a missing command."""
    words = [f"{shlex.quote(k)}={shlex.quote(v)}" for k, v in sorted(env.items())]
    return shlex.join(argv) if not words else " ".join(words) + " " + shlex.join(argv)


@dataclass(frozen=True)
class LaunchPlan:
    prefill: LaunchCommand
    decode: LaunchCommand
    router: LaunchCommand
    colocated: LaunchCommand | None = None  # the non-PD server `equivalence` compares with
    colocated_after_pair: bool = False  # started once the pair and router are stopped

    @property
    def servers(self) -> tuple[LaunchCommand, ...]:
        """The servers started together, before the router."""
        with_pair = self.colocated is not None and not self.colocated_after_pair
        return (self.prefill, self.decode) + ((self.colocated,) if with_pair else ())

    @property
    def all(self) -> tuple[LaunchCommand, ...]:
        later = (self.colocated,) if self.colocated and self.colocated_after_pair else ()
        return (*self.servers, self.router, *later)


def build_launch_plan(
    profile: SmokeProfile, python: Path, run_dir: Path, project_root: Path
) -> LaunchPlan:
    values = {
        "python": str(python),
        "model": profile.model,
        "run_dir": str(run_dir),
        "project": str(project_root),
    }
    logs = run_dir / "logs"
    prefill = _server(profile, profile.prefill, values, logs)
    decode = _server(profile, profile.decode, values, logs)
    router_argv = [expand(a, values) for a in profile.router.command]
    router_argv += [
        "--pd-disaggregation",
        "--prefill",
        prefill.url,
        str(profile.prefill.bootstrap_port),
        "--decode",
        decode.url,
        "--host",
        profile.host,
        "--port",
        str(profile.router.port),
        "--prometheus-port",
        str(profile.router.metrics_port),
        "--prometheus-host",
        profile.host,
    ]
    router_argv += [expand(a, values) for a in profile.router.args]
    router = LaunchCommand(
        role="router",
        argv=tuple(router_argv),
        env={k: expand(v, values) for k, v in profile.router.env.items()},
        log=logs / "router.log",
        url=f"http://{profile.host}:{profile.router.port}",
        summary=f"router: port {profile.router.port}, prefill {prefill.url} (bootstrap "
        f"{profile.prefill.bootstrap_port}), decode {decode.url}",
    )
    colocated = (
        _colocated(profile, values, logs)
        if profile.colocated is not None and "equivalence" in profile.checks.run
        else None
    )
    return LaunchPlan(
        prefill=prefill,
        decode=decode,
        router=router,
        colocated=colocated,
        colocated_after_pair=bool(colocated and profile.colocated.after_pair),
    )


def _colocated(profile: SmokeProfile, values: dict[str, str], logs: Path) -> LaunchCommand:
    """One ordinary server: the same launcher, model and shared arguments as the pair, no
    --disaggregation-* (issue 24: what PD must reproduce token for token)."""
    spec = profile.colocated
    assert spec is not None
    argv: list[str] = []
    if profile.numa_binding and spec.numa_node is not None:
        argv += ["numactl", f"--cpunodebind={spec.numa_node}", f"--membind={spec.numa_node}"]
    argv += [expand(a, values) for a in profile.server.command]
    argv += [
        "--model-path",
        profile.model,
        "--host",
        profile.host,
        "--port",
        str(spec.port),
        "--tp",
        str(spec.tp),
    ]
    argv += [expand(a, values) for a in profile.server.args]
    argv += [expand(a, values) for a in spec.args]
    env = {k: expand(v, values) for k, v in profile.server.env.items()}
    env.update({k: expand(v, values) for k, v in spec.env})
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    return LaunchCommand(
        role="colocated",
        argv=tuple(argv),
        env=env,
        log=logs / "colocated.log",
        url=f"http://{profile.host}:{spec.port}",
        summary=f"colocated (non-PD) server: GPUs {','.join(map(str, spec.gpus))}, TP "
        f"{spec.tp}, port {spec.port}"
        + (", started after the pair and router stop" if spec.after_pair else ""),
    )


def _server(
    profile: SmokeProfile, role: RoleSpec, values: dict[str, str], logs: Path
) -> LaunchCommand:
    argv: list[str] = []
    if profile.numa_binding and role.numa_node is not None:
        # CPU threads and host allocations (pinned KV staging buffers) stay on the socket the
        # role's GPUs hang off; crossing UPI halves host<->GPU bandwidth.
        argv += ["numactl", f"--cpunodebind={role.numa_node}", f"--membind={role.numa_node}"]
    argv += [expand(a, values) for a in profile.server.command]
    argv += [
        "--model-path",
        profile.model,
        "--disaggregation-mode",
        role.role,
        "--disaggregation-transfer-backend",
        profile.backend,
        "--host",
        profile.host,
        "--port",
        str(role.port),
        "--tp",
        str(role.tp),
    ]
    if role.bootstrap_port is not None:
        argv += ["--disaggregation-bootstrap-port", str(role.bootstrap_port)]
    argv += [expand(a, values) for a in profile.server.args]
    argv += [expand(a, values) for a in role.args]
    env = {k: expand(v, values) for k, v in profile.server.env.items()}
    env.update({k: expand(v, values) for k, v in role.env.items()})
    # Each role sees only its own GPUs, numbered from 0 inside the server.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in role.gpus)
    numa = (
        f", NUMA node {role.numa_node}"
        if profile.numa_binding and role.numa_node is not None
        else ", no NUMA binding"
    )
    bootstrap = f", bootstrap {role.bootstrap_port}" if role.bootstrap_port is not None else ""
    return LaunchCommand(
        role=role.role,
        argv=tuple(argv),
        env=env,
        log=logs / f"{role.role}.log",
        url=f"http://{profile.host}:{role.port}",
        summary=f"{role.role}: GPUs {','.join(map(str, role.gpus))}{numa}, TP {role.tp}, "
        f"port {role.port}{bootstrap}, backend {profile.backend}",
    )
