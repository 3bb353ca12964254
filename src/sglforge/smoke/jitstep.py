"""The smoke's "jit cache" step and `warm`'s packing (issue 34), between the model and the launch.

- `--jit-cache ART`: the key of this run (smoke/jitcache.py) is compared with the artifact's;
  equal: the artifact is checked and unpacked into the key's cache root and every server's cache
  variables point there; different: a warning naming the components that differ, and the
  servers JIT-compile into a fresh root under the run directory, as without it. A refused
  artifact (corrupt, tampered, hostile) fails the step before anything starts.
- `warm` (`warm_into`): the key's cache root is emptied, the servers compile into it, and after
  a passing run it is packed into `warm_into/jitcache-<key16>.tar.gz`, with the DeepGEMM warmup
  marker read from the servers' logs (smoke/dgwarmup.py).
- With a matching artifact whose marker fits this run, SGLang's all-M DeepGEMM warmup is
  skipped (SGLANG_JIT_DEEPGEMM_PRECOMPILE=0 unless the profile sets it).
- `--jit-root DIR` alone: the caches live in DIR (kept between starts: a second start).
Without any of them the servers' environment is the profile's, as before.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.base.fs import sha256_file
from sglforge.smoke import dgwarmup, jitcache
from sglforge.smoke.commands import LaunchCommand, LaunchPlan


def run_key(opts: Any, facts: Any, plan: LaunchPlan) -> jitcache.JitKey:
    """This run's key: the lock, the GPUs the profile uses, nvcc and driver, the servers'
    kernel-relevant arguments, the model's config."""
    lock = opts.receipt_lock if opts.existing_python else opts.lock
    if lock is None or not Path(lock).is_file():
        raise SglforgeError(
            f"a JIT cache is bound to the wheel set's lock, and there is none ({lock})",
            hint="pass --lock with the environment's hash-pinned lock (stage_stack.py writes one)",
        )
    profile = opts.profile
    used = {g for role in (profile.prefill, profile.decode) for g in role.gpus}
    if profile.colocated is not None:
        used |= set(profile.colocated.gpus)
    gpus = getattr(facts, "gpus", ()) or ()
    caps = sorted({g.compute_cap for g in gpus if g.index in used}) or ["unknown"]
    driver = getattr(facts, "driver_version", None) or "unknown"
    nvcc = getattr(facts, "nvcc_version", None) or "unknown"
    servers = [*plan.servers] + ([plan.colocated] if plan.colocated_after_pair else [])
    return jitcache.JitKey(
        wheels_lock=sha256_file(Path(lock)),
        compute_capability=",".join(caps),
        cuda_major=nvcc.split(".")[0],
        driver_major=driver.split(".")[0],
        server_args=tuple(sorted(f"{c.role}: {jitcache.kernel_args(c.argv)}" for c in servers)),
        model_config=jitcache.model_config_digest(Path(profile.model)),
        stack_path=jitcache.stack_path(opts.python, plan.prefill.env),
    )


def _map_servers(plan: LaunchPlan, change) -> LaunchPlan:
    """The plan with `change(env)` applied to every server's environment (not the router's:
    it compiles nothing)."""

    def server(command: LaunchCommand | None) -> LaunchCommand | None:
        return None if command is None else replace(command, env=change(command.env))

    return replace(
        plan,
        prefill=server(plan.prefill),
        decode=server(plan.decode),
        colocated=server(plan.colocated),
    )


def with_cache_env(plan: LaunchPlan, root: Path) -> LaunchPlan:
    """Every server's cache variables pointing under `root`, over the profile's."""
    env = jitcache.root_env(root)
    return _map_servers(plan, lambda old: {**old, **env})


def with_env_defaults(plan: LaunchPlan, defaults: dict[str, str]) -> LaunchPlan:
    """Variables the servers get unless the profile sets them."""
    return _map_servers(plan, lambda old: {**defaults, **old})


def _servers(plan: LaunchPlan) -> list[LaunchCommand]:
    return [c for c in (plan.prefill, plan.decode, plan.colocated) if c is not None]


def _effective_env(command: LaunchCommand) -> dict[str, str]:
    """What the server's process sees (smoke/processes.py: inherited, then the command's)."""
    import os

    return {**os.environ, **command.env}


def _deep_gemm_step(plan: LaunchPlan, manifest: jitcache.Manifest, key, record: dict):
    """The plan with SGLang's all-M DeepGEMM warmup off when the artifact's marker fits this
    run (smoke/dgwarmup.py), else as it was; the decision in the record."""
    files = sum(1 for name in manifest.files if name.startswith("roots/deep_gemm/"))
    envs = {c.role: _effective_env(c) for c in _servers(plan)}
    skip, why = dgwarmup.judge(manifest.deep_gemm_warmup, key.digest, envs, files)
    set_by_profile = [c.role for c in _servers(plan) if dgwarmup.PRECOMPILE in c.env]
    if skip and set_by_profile:
        skip, why = False, f"the profile sets {dgwarmup.PRECOMPILE} ({', '.join(set_by_profile)})"
    record["deep_gemm_warmup"] = {"skipped": skip, "why": why}
    if skip:
        plan = with_env_defaults(plan, {dgwarmup.PRECOMPILE: "0"})
    return plan, f"DeepGEMM all-M warmup {'skipped' if skip else 'kept'}: {why}"


def default_root(opts: Any, key: jitcache.JitKey) -> Path:
    return Path(opts.jit_root) if opts.jit_root else jitcache.DEFAULT_JIT_ROOT / key.short


def prepare(opts: Any, facts: Any, plan: LaunchPlan, say) -> tuple[LaunchPlan, dict, list[str]]:
    """(the plan the servers run, the report's `jit_cache` record, detail lines)."""
    if not (opts.jit_cache or opts.warm_into or opts.jit_root):
        return plan, {}, ["not asked for: the profile's cache environment"]
    key = run_key(opts, facts, plan)
    record: dict[str, Any] = {"key": key.components(), "key_digest": key.digest}
    root = default_root(opts, key)
    if opts.warm_into:
        jitcache.fresh_root(root, key)
        record |= {"mode": "warm", "root": str(root)}
        # read back by pack_after_warm: what each server logged and ran with (the marker)
        record["servers"] = {
            c.role: {"log": str(c.log), "deep_gemm_env": dgwarmup.deep_gemm_env(_effective_env(c))}
            for c in _servers(plan)
        }
        return with_cache_env(plan, root), record, [f"warm: empty cache root {root}"]
    if not opts.jit_cache:
        record |= {"mode": "root", "root": str(root)}
        root.mkdir(parents=True, exist_ok=True)
        return with_cache_env(plan, root), record, [f"caches in {root} (kept between starts)"]
    artifact = Path(opts.jit_cache)
    record |= {"mode": "artifact", "artifact": str(artifact)}
    if not artifact.is_file():
        raise SglforgeError(f"--jit-cache {artifact}: no such file")
    record["artifact_sha256"] = sha256_file(artifact)
    manifest = jitcache.read_manifest(artifact)
    check = jitcache.check_key(manifest, key)
    if not check.matches:
        fallback = Path(opts.run_dir) / "cache" / "jit"
        jitcache.fresh_root(fallback, key)
        record |= {"used": False, "differing": list(check.differing), "root": str(fallback)}
        say(
            f"warning: JIT cache {artifact} was made for another key; not used, the servers "
            "JIT-compile: " + "; ".join(check.differing)
        )
        return with_cache_env(plan, fallback), record, ["key mismatch: not used (warning)"]
    start = time.monotonic()
    unpacked = jitcache.unpack(artifact, manifest, root)
    seconds = round(time.monotonic() - start, 3)
    record |= {
        "used": True,
        "root": str(root),
        "files": unpacked.files,
        "bytes": unpacked.bytes,
        "unpack_s": seconds,
    }
    detail = f"key {key.short} matches; {unpacked.files} files unpacked into {root} in {seconds} s"
    plan, warmup = _deep_gemm_step(plan, manifest, key, record)
    return with_cache_env(plan, root), record, [detail, warmup]


def pack_after_warm(opts: Any, record: dict) -> jitcache.Packed:
    """The warm run passed: its cache root becomes the artifact."""
    key = jitcache.JitKey(**{**record["key"], "server_args": tuple(record["key"]["server_args"])})
    start = time.monotonic()
    servers = []
    for role, server in record.get("servers", {}).items():
        try:
            log = Path(server["log"]).read_text(encoding="utf-8", errors="replace")
        except OSError:
            log = ""
        servers.append((role, server["deep_gemm_env"], log))
    marker = dgwarmup.marker(key.digest, servers)
    packed = jitcache.pack(Path(record["root"]), key, Path(opts.warm_into), marker)
    record["deep_gemm_warmup"] = {"complete": marker["complete"], "problems": marker["problems"]}
    record |= {
        "artifact": str(packed.path),
        "artifact_sha256": packed.sha256,
        "files": packed.files,
        "bytes": packed.bytes,
        "skipped": packed.skipped[:50],
        "pack_s": round(time.monotonic() - start, 3),
    }
    return packed
