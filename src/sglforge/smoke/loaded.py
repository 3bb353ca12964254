"""What each server really loaded, read while it serves (issue 37): the stack's shared objects
mapped into its processes and the lines of its log that name the KV transfer's set-up.

"The KV transfer went through our nixl-cu13 and UCX" is a claim about files: which
`libplugin_UCX.so`, `libucp.so`, `libuct.so`, `libucs.so` and NIXL bindings the server's
processes mapped, from which directory (so from which wheel), next to the log lines where NIXL
says which backend it instantiated. The same record answers whether SGLang loaded deep_gemm
(its `_C` extension mapped) and, with the JIT cache the profile points it at, what it compiled.

Every process of the server's session is read (SGLang's scheduler and detokenizer are
children of the launcher: the GPU work, and the NIXL agent, live in the scheduler), from
/proc/PID/maps; nothing here signals or changes a process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sglforge.base.procgroup import session_members

# The stack's native parts: NIXL and its plugins, UCX, the kernel package, DeepGEMM,
# flashinfer's and tvm-ffi's JIT libraries, NCCL.
LIBRARY = re.compile(
    r"(nixl|ucx|libuc[mpst]|plugin_|sgl_kernel|common_ops|deep_gemm|"
    r"flashinfer|tvm_ffi|nccl)",
    re.IGNORECASE,
)
# Log lines about the transfer backend and DeepGEMM.
LOG_LINE = re.compile(r"(nixl|\bucx\b|libplugin|backend ucx|deep_?gemm)", re.IGNORECASE)
MAX_LOG_LINES = 40
MAX_LINE = 300
MAX_JIT_FILES = 60


def mapped_files(pid: int) -> set[str]:
    """Paths of the files `pid` has mapped that look like shared objects."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return set()
    out = set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and ".so" in parts[5] and parts[5].startswith("/"):
            out.add(parts[5].removesuffix(" (deleted)"))
    return out


def server_libraries(session: int) -> tuple[list[int], list[str]]:
    """The session's live pids and the stack libraries any of them mapped."""
    pids = session_members(session)
    found: set[str] = set()
    for pid in pids:
        found |= {
            p
            for p in mapped_files(pid)
            if LIBRARY.search(Path(p).name) or LIBRARY.search(str(Path(p).parent))
        }
    return pids, sorted(found)


def log_lines(log: Path, skip: int = 0) -> list[str]:
    """The log's transfer/DeepGEMM lines, after its first `skip` lines (the command header
    ProcessSet.start writes, which can span lines)."""
    try:
        lines = log.read_text(errors="replace").splitlines()[skip:]
    except OSError:
        return []
    picked = [
        line[:MAX_LINE] for line in lines if LOG_LINE.search(line) and "server_args=" not in line
    ]  # not the argument dump
    return picked[:MAX_LOG_LINES]


def jit_files(directory: Path) -> list[str] | None:
    """What a JIT cache directory holds (relative paths), or None where it does not exist."""
    if not directory.is_dir():
        return None
    files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    return files[:MAX_JIT_FILES] + (
        [f"... {len(files) - MAX_JIT_FILES} more"] if len(files) > MAX_JIT_FILES else []
    )


def evidence(process: Any, jit_dirs: dict[str, Path] | None = None) -> dict[str, Any]:
    """One server's record (a processes.ManagedProcess): pids, stack libraries mapped, the
    transfer/DeepGEMM log lines so far, and the listed JIT caches."""
    pids, libraries = server_libraries(process.pgid)
    record: dict[str, Any] = {
        "pids": pids,
        "libraries": libraries,
        "log_lines": log_lines(process.command.log, process.command.shell().count("\n") + 1),
    }
    for name, directory in (jit_dirs or {}).items():
        record[f"jit_{name}"] = jit_files(directory)
    return record
