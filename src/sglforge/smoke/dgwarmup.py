"""DeepGEMM's all-M warmup and the marker that lets a start skip it (issue 34 item 4; the idea of
sgl-project/sglang#32124).

SGLang (srt/layers/deep_gemm_wrapper/compile_utils.py) compiles, the first time a server meets a
DeepGEMM shape (kernel type, N, K, num_groups), that kernel for every M of its list (1..16384 and
more, from `--chunked-prefill-size` and SGLANG_JIT_DEEPGEMM_FAST_WARMUP): with DeepSeek-V4 most
of a start, even when every kernel is already in the cache, because each M is still executed.
SGLANG_JIT_DEEPGEMM_PRECOMPILE=0 turns that loop off; a kernel the cache lacks is then compiled
when first used (slow requests, never a wrong kernel).

`warm` writes a marker into the artifact's manifest (`deep_gemm_warmup`) from what its servers
logged: the shapes SGLang warmed with all Ms ("Try DeepGEMM JIT Compiling for <TYPE> N=n, K=k,
num_groups=g with all Ms."), per role, and the environment that changes what that warmup
compiles. The marker is `complete` only when the warmup ran in full: not turned off in the warm
run, and never cut short ("reducing max_m to ..." when GPU memory was short).

`smoke --jit-cache` skips the warmup (sets SGLANG_JIT_DEEPGEMM_PRECOMPILE=0 where the profile
does not set it) only when the artifact's key matched this run (which binds the wheel set, GPU,
CUDA, driver, server arguments, model config and stack path, so the same shapes and M lists), the
marker names that key and is complete, every server role of this run was warmed, each role's
DeepGEMM environment equals the warm run's, and, where shapes were warmed, the artifact carries
DeepGEMM cache files. Anything else: the warmup runs, as without the marker, and the report says
why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

PRECOMPILE = "SGLANG_JIT_DEEPGEMM_PRECOMPILE"
# What changes which kernels the all-M warmup compiles or whether it runs.
ENV_VARS = (
    "SGLANG_ENABLE_JIT_DEEPGEMM",
    PRECOMPILE,
    "SGLANG_JIT_DEEPGEMM_FAST_WARMUP",
    "SGL_DG_USE_NVRTC",
)
_WARMED = re.compile(
    r"Try DeepGEMM JIT Compiling for <(\w+)> N=(\d+), K=(\d+), num_groups=(\d+) with all Ms\."
)
_REDUCED = re.compile(r"reducing max_m to (\d+) to avoid out of memory")
_OFF = ("0", "false", "no", "off")


def deep_gemm_env(env: Mapping[str, str]) -> dict[str, str | None]:
    """The DeepGEMM variables of a server's effective environment (None: not set)."""
    return {name: env.get(name) for name in ENV_VARS}


def marker(key_digest: str, servers: Iterable[tuple[str, Mapping[str, str], str]]) -> dict:
    """The marker for a passing warm run: `servers` is (role, effective environment, log text)
    of each server."""
    roles: dict[str, dict] = {}
    problems: list[str] = []
    for role, env, log in servers:
        shapes = sorted({"<{}> N={} K={} num_groups={}".format(*m) for m in _WARMED.findall(log)})
        values = deep_gemm_env(env)
        roles[role] = {"shapes": shapes, "env": values}
        if (values[PRECOMPILE] or "").strip().lower() in _OFF:
            problems.append(f"{role}: {PRECOMPILE}={values[PRECOMPILE]} in the warm run")
        if (values["SGLANG_ENABLE_JIT_DEEPGEMM"] or "").strip().lower() in _OFF:
            problems.append(f"{role}: SGLANG_ENABLE_JIT_DEEPGEMM is off in the warm run")
        reduced = _REDUCED.findall(log)
        if reduced:
            problems.append(f"{role}: SGLang cut the warmup short (max_m {reduced[0]}: memory)")
    return {
        "key_digest": key_digest,
        "complete": not problems,
        "problems": problems,
        "roles": dict(sorted(roles.items())),
    }


def check_marker(value: object) -> str | None:
    """What is wrong with a manifest's `deep_gemm_warmup` (None: well formed)."""
    if not isinstance(value, dict):
        return "not a table"
    if not isinstance(value.get("key_digest"), str) or type(value.get("complete")) is not bool:
        return "'key_digest' (a string) and 'complete' (true/false) are required"
    roles = value.get("roles")
    if not isinstance(roles, dict):
        return "'roles' (a table) is required"
    for role, entry in roles.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("shapes"), list)
            and all(isinstance(s, str) for s in entry["shapes"])
            and isinstance(entry.get("env"), dict)
            and all(isinstance(v, (str, type(None))) for v in entry["env"].values())
        ):
            return f"roles.{role}: 'shapes' (strings) and 'env' (strings or null) are required"
    return None


def judge(
    found: dict | None,
    key_digest: str,
    servers: Mapping[str, Mapping[str, str]],
    deep_gemm_files: int,
) -> tuple[bool, str]:
    """(skip SGLang's all-M warmup?, why) for a run whose key matched the artifact's;
    `servers`: role -> effective environment; `deep_gemm_files`: the artifact's files under
    roots/deep_gemm/."""
    if found is None:
        return False, "the artifact has no DeepGEMM warmup marker (warm it again)"
    if found["key_digest"] != key_digest:
        return False, "the marker names another key than the artifact's"
    if not found["complete"]:
        return False, "the marker says the warm run's warmup was incomplete: " + "; ".join(
            str(p) for p in found.get("problems", [])
        )
    warmed = found["roles"]
    shapes = 0
    for role, env in sorted(servers.items()):
        if role not in warmed:
            return False, f"{role} was not warmed (marker roles: {', '.join(warmed)})"
        here = deep_gemm_env(env)
        if here != warmed[role]["env"]:
            diff = [f"{n}={here[n]!r} (warm: {warmed[role]['env'].get(n)!r})"
                    for n in ENV_VARS if here[n] != warmed[role]["env"].get(n)]  # fmt: skip
            return False, f"{role}: DeepGEMM environment differs: {', '.join(diff)}"
        shapes += len(warmed[role]["shapes"])
    if shapes and not deep_gemm_files:
        return False, f"the marker lists {shapes} warmed shape(s) but no DeepGEMM cache file"
    return True, f"marker matches: {shapes} shape(s) warmed with all Ms, {deep_gemm_files} files"
