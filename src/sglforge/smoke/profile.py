"""Smoke profiles: `profiles/<name>.toml` validated into one typed `SmokeProfile`.

A profile says where the PD pair runs (GPUs and NUMA node per role), how servers and the
router are launched, which ports they use, how long to wait, and which checks to run.
Unknown keys and bad values are errors naming the file, key and line (like recipes).

Commands, arguments and environment values may use placeholders, filled in at launch:
  {python}     the smoke venv's interpreter      {model}    the model path
  {run_dir}    this run's output directory       {project}  the project root
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglforge.base.errors import SglforgeError, did_you_mean
from sglforge.base.tomlfile import Problems, TableReader, key_line, load_toml, tomllib
from sglforge.qualification import qualprofile
from sglforge.qualification.qualprofile import (
    ColocatedSpec,
    EquivalenceSpec,
    GatesSpec,
    ReferenceSpec,
)

PLACEHOLDERS = ("python", "model", "run_dir", "project")
# SGLang's --disaggregation-transfer-backend choices (0.5.9 `--help`, upstreams.md §8).
TRANSFER_BACKENDS = ("nixl", "mooncake", "ascend", "mori", "fake")
CHECKS = ("generate", "logprobs", "stream", "concurrent", "needle", "equivalence")
DEFAULT_CHECKS = CHECKS[:5]  # equivalence needs a [colocated] server, so it is opted into
ROLES = ("prefill", "decode")
# Bounds of numeric settings: beyond them a value is a typo or an attack, not a deployment.
PORT_MAX = 65535
MAX_SECONDS = 7 * 24 * 3600.0  # a timeout beyond a week is a typo (health waits for minutes)
MAX_CONCURRENCY = 1024
MAX_NEEDLE_TOKENS = 1 << 20  # 1M-token prompts; DeepSeek-V4-Flash's context is 1M
MAX_NEW_TOKENS = 1 << 20
MAX_GPUS_INDEX = 1023
HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]{2,45}\]?"
# `model = "tiny"`: a small random-weight Llama generated into the run directory
# (`sglforge tiny-model`), so a smoke needs no downloaded weights.
TINY_MODEL = "tiny"
# The router endpoint the smoke waits on. sglang-router's /health answers 200 as soon as the
# router listens, before any worker is registered; /readiness answers 200 only once healthy
# prefill and decode workers are registered (503 "insufficient healthy workers" before).
DEFAULT_ROUTER_READY_PATH = "/readiness"
# sglang-router serves Prometheus metrics on a second port, 29000 on all interfaces unless told
# otherwise: a router whose own port is 29000 fails with "Address already in use". The smoke
# always names the metrics port (and binds it to the profile's host), so it is one of the
# profile's ports, checked against the others and by the doctor.
DEFAULT_ROUTER_METRICS_PORT = 29000
ROUTER_METRICS_FLAGS = ("--prometheus-port", "--prometheus-host")


@dataclass(frozen=True)
class RoleSpec:
    """One SGLang server of the PD pair."""

    role: str  # "prefill" or "decode"
    gpus: tuple[int, ...]
    numa_node: int | None  # None: do not bind
    tp: int
    port: int
    bootstrap_port: int | None  # prefill only: the KV handshake server the router names
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerSpec:
    """What both roles share: the launcher and common arguments/environment."""

    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True)
class RouterSpec:
    command: tuple[str, ...]
    port: int
    args: tuple[str, ...]
    env: dict[str, str]
    ready_path: str = DEFAULT_ROUTER_READY_PATH
    metrics_port: int = DEFAULT_ROUTER_METRICS_PORT


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `health` covers model load, which is minutes for a 284B model."""

    health: float
    health_generate: float
    router: float
    request: float
    teardown: float  # SIGTERM grace before SIGKILL


@dataclass(frozen=True)
class ChecksSpec:
    run: tuple[str, ...]
    prompt: str
    max_new_tokens: int
    concurrency: int
    needle_lengths: tuple[int, ...]  # target prompt sizes in tokens
    needle_must_recall: tuple[int, ...]  # lengths whose failure fails the smoke
    words_per_token: float  # filler sizing; the report shows the server's real token count


@dataclass(frozen=True)
class InstallSpec:
    wheelhouse: Path | None  # third-party wheels (find-links), None: index or nothing
    index_url: str | None


@dataclass(frozen=True)
class SmokeProfile:
    name: str
    path: Path
    description: str
    model: str
    backend: str
    host: str
    requires_gpu: bool  # false: stand-in deployment; doctor skips GPU/driver/CUDA checks
    numa_binding: bool  # wrap servers in `numactl --cpunodebind=N --membind=N`
    install: InstallSpec
    server: ServerSpec
    prefill: RoleSpec
    decode: RoleSpec
    router: RouterSpec
    timeouts: Timeouts
    checks: ChecksSpec
    share_gpus: bool = False  # prefill and decode may list the same GPUs (1-GPU hosts)
    tiny_heads: int = 2  # attention heads of the generated tiny model (TP-N needs N | heads)
    # Qualification (issue 24, qualification/qualprofile.py): the colocated server of `equivalence`,
    # its prompts, the `--reference` thresholds, acceptance gates, stated limitations.
    colocated: ColocatedSpec | None = None
    equivalence: EquivalenceSpec | None = None
    reference: ReferenceSpec | None = None
    gates: GatesSpec = field(default_factory=GatesSpec)
    limitations: tuple[str, ...] = ()

    @property
    def tiny_model(self) -> bool:
        return self.model == TINY_MODEL

    @property
    def roles(self) -> tuple[RoleSpec, RoleSpec]:
        return (self.prefill, self.decode)

    def ports(self) -> dict[int, str]:
        """Every port the smoke will listen on → what it is for (for doctor and errors)."""
        ports = {
            self.prefill.port: "prefill HTTP port",
            self.decode.port: "decode HTTP port",
            self.router.port: "router port",
            self.router.metrics_port: "router metrics port",
        }
        if self.prefill.bootstrap_port is not None:
            ports[self.prefill.bootstrap_port] = "prefill bootstrap port"
        if self.colocated is not None:
            ports[self.colocated.port] = "colocated HTTP port"
        return ports

    def with_model(self, model: str | None) -> SmokeProfile:
        return self if not model else replace(self, model=model)


def resolve_profile_path(profiles_dir: Path, name_or_path: str) -> Path:
    """A name (`dsv4-flash-pd`) means profiles/<name>.toml; anything with .toml is a path."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return Path(name_or_path)
    path = profiles_dir / f"{name_or_path}.toml"
    if not path.exists():
        known = sorted(p.stem for p in profiles_dir.glob("*.toml")) if profiles_dir.is_dir() else []
        raise SglforgeError(
            f"no smoke profile '{name_or_path}' ({path} does not exist)"
            f"{did_you_mean(name_or_path, known)}",
            hint=f"known profiles: {', '.join(known) or 'none'}",
        )
    return path


@dataclass(frozen=True)
class _ProfileFile:
    """One profile file being read: its text (for line numbers), the problems found so far,
    and the reader of its top-level table."""

    text: str
    problems: Problems
    top: TableReader

    @classmethod
    def read(cls, path: Path) -> _ProfileFile:
        data, text = load_toml(path)
        problems = Problems(path)
        return cls(text, problems, TableReader(data, problems, "profile", _locate_in(text, None)))

    def locate_in(self, table: str | None):
        """`key -> line number` for the keys of `[table]` (of the top level for None)."""
        return _locate_in(self.text, table)

    def sub(self, name: str, required: bool = False) -> TableReader:
        """A reader of the top-level table `[name]` (empty when it is absent)."""
        table = self.top.table(name, required=required) or {}
        return TableReader(table, self.problems, f"[{name}]", self.locate_in(name))


def _locate_in(text: str, table: str | None):
    """`key -> line number` for the keys of `[table]` in `text` (of the top level for None)."""
    start = 1
    if table:
        lines = text.splitlines()
        header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]\s*(#.*)?$")
        start = next((i for i, line in enumerate(lines, 1) if header.match(line)), 1)
    return lambda key: key_line(text, start, key)


@dataclass(frozen=True)
class _TopLevel:
    """The profile's top-level keys (its tables are read on their own)."""

    description: str
    model: str
    backend: str
    host: str
    requires_gpu: bool
    numa_binding: bool
    share_gpus: bool
    tiny_heads: int


@dataclass(frozen=True)
class _ChecksTable:
    """What `[checks]` holds: the smoke's checks and the qualification's settings."""

    checks: ChecksSpec
    equivalence: EquivalenceSpec | None
    reference: ReferenceSpec | None


def load_profile(path: Path, project_root: Path) -> SmokeProfile:
    """Read and check the profile at `path`, table by table, then across tables; every
    problem found is raised at once (`ConfigErrors`)."""
    file = _ProfileFile.read(path)
    keys = _read_top_level(file.top)
    install = _read_install(file, project_root)
    server = _read_server(file)
    roles = _read_roles(file, keys.share_gpus)
    router = _read_router(file)
    timeouts = _read_timeouts(file)
    checks = _read_checks(file)
    colocated, gates, limitations = _qualification(
        file, project_root, checks.checks.run, roles, keys.share_gpus
    )
    file.top.finish()
    _check_ports(file.problems, roles, router, colocated)
    _check_placeholders(file.problems, server, roles.values(), router, colocated)
    if keys.model == TINY_MODEL:
        _check_tiny_model(file.problems, keys.tiny_heads, roles, colocated)
    file.problems.raise_if_any()
    return SmokeProfile(
        name=path.stem,
        path=path,
        description=keys.description,
        model=keys.model,
        backend=keys.backend,
        host=keys.host,
        requires_gpu=keys.requires_gpu,
        numa_binding=keys.numa_binding,
        install=install,
        server=server,
        prefill=roles["prefill"],
        decode=roles["decode"],
        router=router,
        timeouts=timeouts,
        checks=checks.checks,
        share_gpus=keys.share_gpus,
        tiny_heads=keys.tiny_heads,
        colocated=colocated,
        equivalence=checks.equivalence,
        reference=checks.reference,
        gates=gates,
        limitations=limitations,
    )


def _read_top_level(top: TableReader) -> _TopLevel:
    """The top-level keys: model, transfer backend, host, GPU and NUMA settings."""
    description = top.str("description") or ""
    model = top.str("model", required=True) or ""
    backend = top.str("backend", required=True) or "nixl"
    if backend not in TRANSFER_BACKENDS:
        top.error("backend", f"{backend!r} is not one of {', '.join(TRANSFER_BACKENDS)}")
    host = top.str("host", pattern=HOST, describe="a host name or IP address") or "127.0.0.1"
    requires_gpu = top.bool("requires-gpu", default=True)
    numa_binding = top.bool("numa-binding", default=True)
    share_gpus = top.bool("share-gpus", default=False)
    # A TP-N server splits attention heads N ways: the generated tiny model gets this many
    # (sglforge tiny-model --heads; 2 is the shape of the 1- and 2-GPU H200 runs).
    tiny_heads = top.int("tiny-heads", minimum=1, maximum=64)
    if tiny_heads is not None and model != TINY_MODEL:
        top.error("tiny-heads", f'only for model = "{TINY_MODEL}" (the generated model)')
    return _TopLevel(
        description=description,
        model=model,
        backend=backend,
        host=host,
        requires_gpu=requires_gpu,
        numa_binding=numa_binding,
        share_gpus=share_gpus,
        tiny_heads=tiny_heads or 2,
    )


def _read_install(file: _ProfileFile, project_root: Path) -> InstallSpec:
    """`[install]`: where the third-party wheels come from."""
    r = file.sub("install")
    wheelhouse = r.str("wheelhouse")
    install = InstallSpec(
        wheelhouse=(project_root / wheelhouse) if wheelhouse else None,
        index_url=r.str("index-url"),
    )
    r.finish()
    return install


def _read_server(file: _ProfileFile) -> ServerSpec:
    """`[server]`: the launcher, arguments and environment both roles share."""
    r = file.sub("server")
    server = ServerSpec(
        command=tuple(r.str_list("command") or ["{python}", "-m", "sglang.launch_server"]),
        args=tuple(r.str_list("args") or []),
        env=_env_table(r, file.text),
    )
    if not server.command:
        r.error("command", "must not be empty")
    r.finish()
    return server


def _read_roles(file: _ProfileFile, share_gpus: bool) -> dict[str, RoleSpec]:
    """`[prefill]` and `[decode]`, which may share GPUs only with share-gpus = true."""
    roles = {role: _read_role(file, role) for role in ROLES}
    overlap = set(roles["prefill"].gpus) & set(roles["decode"].gpus)
    if overlap and not share_gpus:
        file.problems.add(
            f"[prefill] and [decode] share GPUs {sorted(overlap)}; each role needs its "
            "own GPUs, or set share-gpus = true (and a --mem-fraction-static per role "
            "that leaves room for the other) to run both on one GPU"
        )
    return roles


def _read_role(file: _ProfileFile, role: str) -> RoleSpec:
    """`[prefill]` or `[decode]`: one server's GPUs, NUMA node, ports, arguments, environment."""
    r = file.sub(role, required=True)
    gpus = tuple(r.int_list("gpus", required=True, minimum=0, maximum=MAX_GPUS_INDEX) or [])
    tp = r.int("tp", minimum=1, maximum=MAX_GPUS_INDEX + 1) or max(1, len(gpus))
    if gpus and len(gpus) != tp:
        r.error("gpus", f"{len(gpus)} GPUs listed but tp = {tp}; list exactly tp GPUs")
    if len(set(gpus)) != len(gpus):
        r.error("gpus", f"GPU listed twice in {list(gpus)}")
    bootstrap = r.int("bootstrap-port", minimum=1, maximum=PORT_MAX) if role == "prefill" else None
    if role == "prefill" and bootstrap is None:
        bootstrap = 8998  # SGLang's default --disaggregation-bootstrap-port
    spec = RoleSpec(
        role=role,
        gpus=gpus,
        numa_node=r.int("numa-node", minimum=0, maximum=MAX_GPUS_INDEX),
        tp=tp,
        port=r.int("port", required=True, minimum=1, maximum=PORT_MAX) or 0,
        bootstrap_port=bootstrap,
        args=tuple(r.str_list("args") or []),
        env=_env_table(r, file.text),
    )
    r.finish()
    return spec


def _read_router(file: _ProfileFile) -> RouterSpec:
    """`[router]`: how the router is launched and the endpoint that says it is ready."""
    r = file.sub("router", required=True)
    router = RouterSpec(
        command=tuple(r.str_list("command") or ["{python}", "-m", "sglang_router.launch_router"]),
        port=r.int("port", required=True, minimum=1, maximum=PORT_MAX) or 0,
        args=tuple(r.str_list("args") or []),
        env=_env_table(r, file.text),
        ready_path=r.str("ready-path") or DEFAULT_ROUTER_READY_PATH,
        metrics_port=r.int("metrics-port", minimum=1, maximum=PORT_MAX)
        or DEFAULT_ROUTER_METRICS_PORT,
    )
    if not router.ready_path.startswith("/"):
        r.error("ready-path", f"must start with '/', got {router.ready_path!r}")
    for flag in ROUTER_METRICS_FLAGS:
        if any(a == flag or a.startswith(flag + "=") for a in router.args):
            r.error(
                "args",
                f"{flag} is set by the smoke (the metrics port is [router] metrics-port, default "
                f"{DEFAULT_ROUTER_METRICS_PORT}, on the profile's host); drop it from args",
            )
    r.finish()
    return router


def _read_timeouts(file: _ProfileFile) -> Timeouts:
    """`[timeouts]`, in seconds."""
    t = file.sub("timeouts")
    timeouts = Timeouts(
        health=_seconds(t, "health", 1800),
        health_generate=_seconds(t, "health-generate", 600),
        router=_seconds(t, "router", 120),
        request=_seconds(t, "request", 600),
        teardown=_seconds(t, "teardown", 30),
    )
    t.finish()
    return timeouts


def _read_checks(file: _ProfileFile) -> _ChecksTable:
    """`[checks]`: which checks run and their settings, the equivalence and reference ones
    included."""
    c = file.sub("checks")
    run = tuple(c.str_list("run") or DEFAULT_CHECKS)
    for name in run:
        if name not in CHECKS:
            c.error("run", f"unknown check {name!r}; known: {', '.join(CHECKS)}")
    lengths = tuple(
        c.int_list("needle-lengths", minimum=1, maximum=MAX_NEEDLE_TOKENS)
        or [2048, 4096, 8192, 16384]
    )
    must = tuple(c.int_list("needle-must-recall", minimum=1, maximum=MAX_NEEDLE_TOKENS) or [])
    for length in must:
        if length not in lengths:
            c.error("needle-must-recall", f"{length} is not in needle-lengths {list(lengths)}")
    words_per_token = c.number("words-per-token", default=0.75, maximum=10.0)
    checks = ChecksSpec(
        run=run,
        prompt=c.str("prompt") or "The capital of France is",
        max_new_tokens=c.int("max-new-tokens", minimum=1, maximum=MAX_NEW_TOKENS) or 16,
        concurrency=c.int("concurrency", minimum=1, maximum=MAX_CONCURRENCY) or 16,
        needle_lengths=lengths,
        needle_must_recall=must,
        words_per_token=words_per_token,
    )
    equivalence = qualprofile.read_equivalence(c, words_per_token)
    reference = qualprofile.read_reference(c)
    c.finish()
    return _ChecksTable(checks, equivalence, reference)


def _check_ports(
    problems: Problems,
    roles: dict[str, RoleSpec],
    router: RouterSpec,
    colocated: ColocatedSpec | None,
) -> None:
    """Every port the smoke listens on is a different one."""
    ports: dict[int, str] = {}
    for where, port in (
        ("[prefill] port", roles["prefill"].port),
        ("[prefill] bootstrap-port", roles["prefill"].bootstrap_port),
        ("[decode] port", roles["decode"].port),
        ("[router] port", router.port),
        ("[router] metrics-port", router.metrics_port),
        ("[colocated] port", colocated.port if colocated else None),
    ):
        if port and port in ports:
            problems.add(f"{where} = {port} is also {ports[port]}; every port must differ")
        elif port:
            ports[port] = where


def _check_tiny_model(
    problems: Problems, heads: int, roles: dict[str, RoleSpec], colocated: ColocatedSpec | None
) -> None:
    """SGLang refuses a TP size that does not divide the generated model's attention heads."""
    for where, tp in ((f"[{r.role}] tp", r.tp) for r in roles.values()):
        _check_tiny_tp(problems, where, tp, heads)
    if colocated is not None:
        _check_tiny_tp(problems, "[colocated] tp", colocated.tp, heads)


def _qualification(
    file: _ProfileFile,
    project_root: Path,
    run: tuple[str, ...],
    roles: dict[str, RoleSpec],
    share_gpus: bool,
):
    """[colocated], [gates.*] and `limitations` (qualprofile.py), with their cross-checks."""
    top, problems = file.top, file.problems
    colocated = None
    if "colocated" in top.data:
        colocated = qualprofile.read_colocated(file.sub("colocated"))
        for name in (n for n, _ in colocated.env if not ENV_NAME.fullmatch(n)):
            problems.add(
                f"[colocated] env, key {name[:80]!r}: not an environment variable "
                "name (letters, digits and '_', not starting with a digit)"
            )
        pair = set(roles["prefill"].gpus) | set(roles["decode"].gpus)
        if set(colocated.gpus) & pair and not share_gpus and not colocated.after_pair:
            problems.add(
                f"[colocated] gpus {list(colocated.gpus)} are also the PD pair's; give "
                "it its own GPUs, or set share-gpus = true (with a "
                "--mem-fraction-static per server that leaves room for the others)"
            )
    elif "equivalence" in run:
        problems.add(
            "[checks] run lists 'equivalence' but the profile has no [colocated] "
            "server to compare the PD pair with"
        )
    gates = GatesSpec()
    if "gates" in top.data:
        table = top.table("gates") or {}
        gates = qualprofile.read_gates(
            TableReader(table, problems, "[gates]", file.locate_in("gates")),
            problems,
            project_root,
            file.locate_in,
        )
    limitations = tuple(top.str_list("limitations") or [])
    return colocated, gates, limitations


# A POSIX environment variable name: anything else cannot be set by `NAME=value cmd` (a '='
# splits it, execve refuses it) and, pasted from --dry-run, could run as shell code.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_table(reader: TableReader, text: str) -> dict[str, str]:
    """The `env` table of `reader`, with every name checked (file, table, key and line)."""
    env = reader.str_table("env")
    for name in [n for n in env if not ENV_NAME.fullmatch(n)]:
        del env[name]
        line = _quoted_key_line(text, name)
        at = f" (line {line})" if line else ""
        reader.problems.add(
            f"{reader.where} env, key {name[:80]!r}{at}: not an environment "
            "variable name (letters, digits and '_', not starting with a digit)"
        )
    return env


def _quoted_key_line(text: str, name: str) -> int | None:
    """Line of `"<name>" = …` (a name that is not a bare key must be quoted in TOML)."""
    token = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*')\s*=""")
    for number, row in enumerate(text.splitlines(), 1):
        match = token.match(row)
        if match:
            try:
                if list(tomllib.loads(match.group(1) + " = 0")) == [name]:
                    return number
            except tomllib.TOMLDecodeError:
                continue
    return None


def _check_tiny_tp(problems: Problems, where: str, tp: int, heads: int) -> None:
    if heads % tp:
        problems.add(
            f"{where} = {tp}, but the tiny model has {heads} attention head(s) and "
            f"tensor parallelism splits them {tp} ways; set tiny-heads to a multiple "
            f"of {tp}"
        )


def _seconds(reader: TableReader, key: str, default: float) -> float:
    return reader.number(key, default=default, maximum=MAX_SECONDS)


def _check_placeholders(
    problems: Problems,
    server: ServerSpec,
    roles,
    router: RouterSpec,
    colocated: ColocatedSpec | None = None,
) -> None:
    """Unknown `{name}` in commands/args/env is a typo that would otherwise reach a server."""
    places: list[tuple[str, str]] = []
    if colocated is not None:
        places += [("[colocated] args", s) for s in colocated.args]
        places += [(f"[colocated] env {k}", v) for k, v in colocated.env]
    places += [("[server] command", s) for s in server.command]
    places += [("[server] args", s) for s in server.args]
    places += [(f"[server] env {k}", v) for k, v in server.env.items()]
    for role in roles:
        places += [(f"[{role.role}] args", s) for s in role.args]
        places += [(f"[{role.role}] env {k}", v) for k, v in role.env.items()]
    places += [("[router] command", s) for s in router.command]
    places += [("[router] args", s) for s in router.args]
    places += [(f"[router] env {k}", v) for k, v in router.env.items()]
    for where, value in places:
        for name in re.findall(r"\{([^{}]*)\}", value):
            if name not in PLACEHOLDERS:
                problems.add(
                    f"{where}: unknown placeholder {{{name}}} in {value!r}; "
                    f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )


def expand(value: str, values: dict[str, str]) -> str:
    """Fill placeholders (validated at load time, so every name is known)."""
    return re.sub(r"\{([a-z_]+)\}", lambda m: values.get(m.group(1), m.group(0)), value)
