"""Issue 34: the JIT-cache artifact — its key (each component changes it), reproducible packing,
the round trip, a mismatch that falls back with a warning, and refusal of a corrupt, tampered or
hostile artifact (naming the file and the member, never a traceback); then `warm` and
`smoke --jit-cache` through the real smoke code path with stand-in servers that "JIT-compile"."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.smoke import jitcache, startup
from sglforge.smoke.jitcache import JitCacheRefused, JitKey
from sglforge.sources.archive import ArchiveLimits, ArchiveRefused

from .conftest import SmokeProject

KEY = JitKey(
    wheels_lock="a" * 64,
    compute_capability="9.0",
    cuda_major="13",
    driver_major="580",
    server_args=("decode: --tp 1 --attention-backend triton", "prefill: --tp 1"),
    model_config="b" * 64,
    stack_path="sglang=/opt/stack/site;flashinfer=/opt/stack/site",
)


def make_caches(root: Path, order: list[str] | None = None) -> None:
    files = {
        "triton/ab12/kernel.cubin": b"\x7fELF cubin",
        "triton/ab12/kernel.json": b'{"name": "k"}',
        "tvm_ffi/sgl_kernel_jit_silu/sgl_kernel_jit_silu.so": b"\x7fELF so",
        "flashinfer/.cache/flashinfer/0.6.12/90/cached_ops/norm/norm.so": b"norm",
        "cuda/ComputeCache/index": b"idx",
    }
    for name in order or sorted(files):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])
    (root / "tvm_ffi/sgl_kernel_jit_silu/sgl_kernel_jit_silu.so").chmod(0o755)


# --------------------------------------------------------------------------------------------
# The key


@pytest.mark.parametrize("component", [f.name for f in dataclasses.fields(JitKey)])
def test_each_key_component_changes_the_key(component: str) -> None:
    value = getattr(KEY, component)
    other = value + ("x",) if isinstance(value, tuple) else value + "1"
    changed = dataclasses.replace(KEY, **{component: other})
    assert changed.digest != KEY.digest
    check = jitcache.check_key(jitcache.Manifest(KEY.components(), KEY.digest, {}), changed)
    assert not check.matches
    assert [d.split(":")[0] for d in check.differing] == [component]


def test_kernel_args_drop_addresses_and_keep_what_changes_kernels() -> None:
    argv = [
        "/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/m", "--host",
        "127.0.0.1", "--port", "30000", "--tp", "1", "--attention-backend", "triton",
        "--disaggregation-bootstrap-port", "8998", "--log-level=info", "--kv-cache-dtype",
        "fp8_e4m3",
    ]  # fmt: skip
    assert (
        jitcache.kernel_args(argv) == "--tp 1 --attention-backend triton --kv-cache-dtype fp8_e4m3"
    )
    other_port = [a if a != "30000" else "31000" for a in argv]
    assert jitcache.kernel_args(other_port) == jitcache.kernel_args(argv)
    other_backend = [a if a != "triton" else "flashinfer" for a in argv]
    assert jitcache.kernel_args(other_backend) != jitcache.kernel_args(argv)


def test_model_config_digest_is_canonical_and_sensitive(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "config.json").write_text('{"hidden_size": 128, "num_layers": 2}')
    (b / "config.json").write_text('{\n  "num_layers": 2,\n  "hidden_size": 128\n}\n')
    (c / "config.json").write_text('{"hidden_size": 256, "num_layers": 2}')
    assert jitcache.model_config_digest(a) == jitcache.model_config_digest(b)
    assert jitcache.model_config_digest(a) != jitcache.model_config_digest(c)
    assert jitcache.model_config_digest(tmp_path / "absent") == "none"


# --------------------------------------------------------------------------------------------
# Packing and unpacking


def test_packing_is_reproducible_and_lists_every_file(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    make_caches(one)
    make_caches(two, order=sorted(
        ["triton/ab12/kernel.json", "cuda/ComputeCache/index", "triton/ab12/kernel.cubin",
         "flashinfer/.cache/flashinfer/0.6.12/90/cached_ops/norm/norm.so",
         "tvm_ffi/sgl_kernel_jit_silu/sgl_kernel_jit_silu.so"], reverse=True))  # fmt: skip
    # The same files with the same times, written in another order at another moment: the
    # same bytes (the members' own mtimes are fixed; the manifest keeps each file's, below).
    for tree in (one, two):
        for path in tree.rglob("*"):
            if path.is_file():
                os.utime(path, ns=(1_700_000_000_123_456_789,) * 2)
    for tree in (one, two):
        (tree / "triton" / "ab12" / "kernel.cubin.lock").write_text("")  # skipped: lock files
        (tree / "triton" / "link").symlink_to("/etc/passwd")  # skipped: links
    a = jitcache.pack(one, KEY, tmp_path / "out-a")
    b = jitcache.pack(two, KEY, tmp_path / "out-b")
    assert a.path.read_bytes() == b.path.read_bytes() and a.sha256 == b.sha256
    assert sorted(b.skipped) == [
        "roots/triton/ab12/kernel.cubin.lock (lock or temporary file)",
        "roots/triton/link (a link)",
    ]
    manifest = jitcache.read_manifest(a.path)
    assert manifest.key_digest == KEY.digest and a.path.name == f"jitcache-{KEY.short}.tar.gz"
    assert set(manifest.files) == {
        f"roots/{p.relative_to(one).as_posix()}"
        for p in one.rglob("*")
        if p.is_file() and not p.is_symlink() and not p.name.endswith(".lock")
    }
    with tarfile.open(a.path) as archive:
        members = archive.getmembers()
    assert members[0].name == jitcache.MANIFEST
    assert [m.name for m in members[1:]] == sorted(m.name for m in members[1:])
    assert {m.mtime for m in members} == {jitcache.MTIME} and {m.uid for m in members} == {0}


def test_round_trip_restores_the_files_with_their_modes(tmp_path: Path) -> None:
    make_caches(tmp_path / "caches")
    for number, path in enumerate(sorted((tmp_path / "caches").rglob("*"))):
        if path.is_file():
            os.utime(path, ns=(1_600_000_000_000_000_007 + number * 1_000_000_123,) * 2)
    packed = jitcache.pack(tmp_path / "caches", KEY, tmp_path / "out")
    manifest = jitcache.read_manifest(packed.path)
    assert jitcache.check_key(manifest, KEY).matches
    root = tmp_path / "root"
    result = jitcache.unpack(packed.path, manifest, root)
    assert result.files == 5
    for path in (tmp_path / "caches").rglob("*"):
        if path.is_file():
            copy = root / path.relative_to(tmp_path / "caches")
            assert copy.read_bytes() == path.read_bytes()
            assert copy.stat().st_mode & 0o777 == (0o755 if path.stat().st_mode & 0o100 else 0o644)
    assert (root / jitcache.ROOT_MARKER).read_text().strip() == KEY.digest
    # Each file gets back its own mtime: flashinfer's ninja rebuilds what .ninja_deps saw
    # with another time (measured on the H200).
    for path in (tmp_path / "caches").rglob("*"):
        if path.is_file():
            copy = root / path.relative_to(tmp_path / "caches")
            assert copy.stat().st_mtime_ns == path.stat().st_mtime_ns
    # A root sglforge made is replaced on the next unpack; a stranger's is not.
    (root / "triton" / "stale").write_text("old")
    jitcache.unpack(packed.path, manifest, root)
    assert not (root / "triton" / "stale").exists()
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "precious").write_text("mine")
    with pytest.raises(SglforgeError, match="did not put there"):
        jitcache.unpack(packed.path, manifest, stranger)
    assert (stranger / "precious").read_text() == "mine"


def _retar(source: Path, target: Path, change) -> Path:
    """A copy of the artifact with `change(name, info, data) -> [(info, data), ...]` applied."""
    out = io.BytesIO()
    with tarfile.open(source) as old, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as new:  # fmt: skip
        for member in old.getmembers():
            data = old.extractfile(member).read() if member.isreg() else None
            for info, content in change(member.name, member, data):
                new.addfile(info, io.BytesIO(content) if content is not None else None)
    target.write_bytes(gzip.compress(out.getvalue(), mtime=0))
    return target


def _info(name: str, kind=tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mode = kind, size, link, 0o644
    return info


CUBIN = "roots/triton/ab12/kernel.cubin"


def _tampered_content(name, info, data):
    return [(info, b"\x7fELF CUBIN" if name == CUBIN else data)]  # same size, other bytes


def _manifest_key_edited(name, info, data):
    if name != jitcache.MANIFEST:
        return [(info, data)]
    document = json.loads(data)
    document["key"]["compute_capability"] = "12.0"  # relabelled for another GPU
    data = json.dumps(document).encode()
    info.size = len(data)
    return [(info, data)]


def _bad_mtime(name, info, data):
    if name != jitcache.MANIFEST:
        return [(info, data)]
    document = json.loads(data)
    document["files"][0]["mtime_ns"] = -5
    data = json.dumps(document).encode()
    info.size = len(data)
    return [(info, data)]


def _traversal(name, info, data):
    extra = [(_info("roots/triton/../../../escaped", size=1), b"x")] if name == CUBIN else []
    return [(info, data), *extra]


def _symlink(name, info, data):
    link = _info("roots/triton/evil", tarfile.SYMTYPE, link="../../../../etc/passwd")
    return [(info, data)] + ([(link, None)] if name == CUBIN else [])


def _hardlink(name, info, data):
    link = _info("roots/triton/hard", tarfile.LNKTYPE, link=CUBIN)
    return [(info, data)] + ([(link, None)] if name == CUBIN else [])


def _unlisted(name, info, data):
    extra = [(_info("roots/triton/extra.so", size=3), b"abc")] if name == CUBIN else []
    return [(info, data), *extra]


def _outside_roots(name, info, data):
    extra = [(_info("etc/profile.d/x.sh", size=3), b"abc")] if name == CUBIN else []
    return [(info, data), *extra]


def _file_dropped(name, info, data):
    return [] if name == CUBIN else [(info, data)]


def _device(name, info, data):
    extra = [(_info("roots/triton/dev", tarfile.CHRTYPE), None)] if name == CUBIN else []
    return [(info, data), *extra]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_tampered_content, f"member '{CUBIN}' has sha256"),
        (_manifest_key_edited, "'key_digest' is not the digest of 'key'"),
        (_bad_mtime, "files[0]: 'mtime_ns' must be a non-negative integer"),
        (_traversal, "member 'roots/triton/../../../escaped'"),
        (_symlink, "member 'roots/triton/evil' is a symlink"),
        (_hardlink, "member 'roots/triton/hard' is a hard link"),
        (_unlisted, "member 'roots/triton/extra.so' is not in the manifest"),
        (_outside_roots, "member 'etc/profile.d/x.sh' is outside roots/"),
        (_file_dropped, f"not in the archive, first '{CUBIN}'"),
        (_device, "member 'roots/triton/dev' is special"),
    ],
)
def test_a_tampered_or_hostile_artifact_is_refused(tmp_path: Path, change, expected: str) -> None:
    make_caches(tmp_path / "caches")
    packed = jitcache.pack(tmp_path / "caches", KEY, tmp_path / "out")
    bad = _retar(packed.path, tmp_path / "bad.tar.gz", change)
    root = tmp_path / "x" / "y" / "root"
    root.parent.mkdir(parents=True)
    with pytest.raises(JitCacheRefused) as info:
        jitcache.unpack(bad, jitcache.read_manifest(bad), root)
    message = str(info.value)
    assert str(bad) in message and expected in message, message
    # verify (bundle, install.sh's check before pip) refuses it the same way, writing nothing
    with pytest.raises(JitCacheRefused) as again:
        jitcache.verify(bad, jitcache.read_manifest(bad))
    assert str(bad) in str(again.value) and expected in str(again.value), str(again.value)
    assert not root.exists()  # nothing half-unpacked
    assert not (tmp_path / "x" / "escaped").exists() and not (tmp_path / "escaped").exists()
    assert [p.name for p in root.parent.iterdir()] == []  # the staging directory is gone


def test_an_oversized_or_corrupt_artifact_is_refused(tmp_path: Path) -> None:
    make_caches(tmp_path / "caches")
    packed = jitcache.pack(tmp_path / "caches", KEY, tmp_path / "out")
    manifest = jitcache.read_manifest(packed.path)
    with tarfile.open(packed.path) as archive:
        cap = archive.getmember(jitcache.MANIFEST).size + 10  # the manifest and a file fit
    with pytest.raises(
        ArchiveRefused, match=f"more than {cap} bytes of file content \\(at member 'roots/"
    ):
        jitcache.unpack(packed.path, manifest, tmp_path / "r1", ArchiveLimits(100, cap))
    with pytest.raises(ArchiveRefused, match="more than 3 members"):
        jitcache.unpack(packed.path, manifest, tmp_path / "r2", ArchiveLimits(3, 1 << 20))
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(packed.path.read_bytes()[:-200])
    with pytest.raises(JitCacheRefused, match=f"JIT cache {truncated}: "):  # whichever it hits
        jitcache.unpack(truncated, manifest, tmp_path / "r3")
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not an archive at all")
    with pytest.raises(JitCacheRefused, match="not a readable tar archive"):
        jitcache.read_manifest(garbage)
    not_first = _retar(
        packed.path,
        tmp_path / "not-first.tar.gz",
        lambda n, i, d: [] if n == jitcache.MANIFEST else [(i, d)],
    )
    with pytest.raises(JitCacheRefused, match="first member must be the regular file"):
        jitcache.read_manifest(not_first)


# --------------------------------------------------------------------------------------------
# Start-up phases from a server log


def test_phases_follow_sglang_log_markers() -> None:
    base = time.mktime(time.strptime("2026-12-02 10:00:00", "%Y-%m-%d %H:%M:%S"))
    lines = [
        "some import noise without a stamp",
        "[2026-12-02 10:00:20.500] server_args=ServerArgs(model_path='m')",
        "[2026-12-02 10:00:41.000 TP0] Init torch distributed begin.",
        "[2026-12-02 10:00:43.000 TP0] Load weight begin. avail mem=100 GB",
        "[2026-12-02 10:00:44.250 TP0] Load weight end. type=LlamaForCausalLM",
        "[2026-12-02 10:00:45.000 TP0] Memory pool end. avail mem=50 GB",
        "[2026-12-02 10:00:47.000] Start of pd disaggregation warmup ...",
        "[2026-12-02 10:01:58.000] The server is fired up and ready to roll!",
    ]
    result = startup.phases(lines, base, ready_s=119.0)
    assert result["phases"] == {
        "imports": 20.5,
        "scheduler_init": 20.5,
        "model_init": 2.0,
        "weight_load": 1.25,
        "kv_cache": 0.75,
        "http_start": 2.0,
        "warmup_jit": 71.0,
    }
    assert result["after_last_marker"] == 1.0
    # A log without milliseconds, and one missing a marker, still parse.
    partial = startup.phases(["[2026-12-02 10:00:30] server_args=..."], base)
    assert partial["phases"] == {"imports": 30.0}


# --------------------------------------------------------------------------------------------
# warm and smoke --jit-cache, through the real smoke code path (stand-in servers)


def _jit_profile(project: SmokeProject, seconds: float = 3.0, **kw) -> None:
    env = {"STANDIN_JIT_SECONDS": str(seconds)}
    project.write_profile(checks={"run": ["generate"]}, prefill_env=env, decode_env=env, **kw)


def _log(project: SmokeProject, out: Path, role: str) -> str:
    return (out / "logs" / f"{role}.log").read_text()


def test_warm_then_smoke_with_the_artifact_skips_the_jit(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _jit_profile(smoke_project)
    warm_out, art_dir = tmp_path / "warm", tmp_path / "artifacts"
    common = ["--profile", "standin", "--venv", str(installed_venv)]
    result = smoke_project.run_verb(
        "warm", *common, "--out", str(warm_out), "--artifact-dir", str(art_dir),
        "--jit-root", str(tmp_path / "root-warm"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "standin jit: compiled" in _log(smoke_project, warm_out, "prefill")
    warm_report = json.loads((warm_out / "smoke-report.json").read_text())
    record = warm_report["jit_cache"]
    artifact = Path(record["artifact"])
    assert record["mode"] == "warm" and artifact.parent == art_dir and record["files"] == 2
    assert any(s.endswith("(lock or temporary file)") for s in record["skipped"])
    assert warm_report["startup"]["ready_s"] >= 3.0
    # A fresh run directory, fresh processes, caches only from the artifact.
    art_out = tmp_path / "with-artifact"
    result = smoke_project.smoke(
        *common, "--out", str(art_out), "--jit-cache", str(artifact),
        "--jit-root", str(tmp_path / "root-art"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    for role in ("prefill", "decode"):
        log = _log(smoke_project, art_out, role)
        assert "standin jit: cache hit" in log and "compiled" not in log
    report = json.loads((art_out / "smoke-report.json").read_text())
    assert report["jit_cache"]["used"] is True and report["jit_cache"]["files"] == 2
    assert report["jit_cache"]["key_digest"] == record["key_digest"]
    assert report["startup"]["ready_s"] < warm_report["startup"]["ready_s"]


def test_a_key_mismatch_warns_and_compiles_as_without_the_artifact(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _jit_profile(smoke_project, seconds=0.5)
    common = ["--profile", "standin", "--venv", str(installed_venv)]
    result = smoke_project.run_verb(
        "warm", *common, "--out", str(tmp_path / "warm"), "--artifact-dir", str(tmp_path / "a"),
        "--jit-root", str(tmp_path / "root-warm"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (artifact,) = (tmp_path / "a").iterdir()
    lock = smoke_project.root / "lockfiles" / "wheels.lock"
    lock.write_text(lock.read_text() + "# another wheel set\n")  # the key's first component
    out = tmp_path / "mismatch"
    result = smoke_project.smoke(
        *common, "--out", str(out), "--jit-cache", str(artifact),
        "--jit-root", str(tmp_path / "root-art"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "was made for another key; not used" in result.stdout
    assert "wheels_lock: artifact" in result.stdout
    assert "standin jit: compiled" in _log(smoke_project, out, "prefill")
    report = json.loads((out / "smoke-report.json").read_text())
    assert report["jit_cache"]["used"] is False and not (tmp_path / "root-art").exists()


def test_a_tampered_artifact_fails_the_smoke_before_anything_starts(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    _jit_profile(smoke_project, seconds=0.1)
    common = ["--profile", "standin", "--venv", str(installed_venv)]
    result = smoke_project.run_verb(
        "warm", *common, "--out", str(tmp_path / "warm"), "--artifact-dir", str(tmp_path / "a"),
        "--jit-root", str(tmp_path / "root-warm"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (artifact,) = (tmp_path / "a").iterdir()
    name = "roots/triton/standin/prefill-kernel.bin"

    def flip(member, info, data):
        return [(info, data[::-1] if member == name else data)]

    bad = _retar(artifact, tmp_path / "bad.tar.gz", flip)
    out = tmp_path / "tampered"
    result = smoke_project.smoke(
        *common, "--out", str(out), "--jit-cache", str(bad), "--jit-root", str(tmp_path / "r")
    )
    assert result.returncode == 1
    assert f"JIT cache {bad}: member '{name}' has sha256" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    report = json.loads((out / "smoke-report.json").read_text())
    assert report["failure"]["stage"] == "jit cache" and report["processes"] == []


def test_the_h200_router_launcher_starts_the_real_router(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    """The H200 profile's router command (launch_router's Rust path without its MiniLB import,
    issue 34) serves the PD pair through the real sglang-router 0.3.2."""
    import sys

    from sglforge.smoke.profile import load_profile

    repo = Path(__file__).resolve().parents[2]
    command = load_profile(repo / "profiles" / "h200-pd-1gpu.toml", repo).router.command
    assert command[:2] == ("{python}", "-c") and "launch_router" not in command[2]
    smoke_project.write_profile(
        checks={"run": ["generate"]}, router_command=[sys.executable, "-c", command[2]]
    )
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert smoke_project.report()["startup"]["router_s"] > 0


# --------------------------------------------------------------------------------------------
# The DeepGEMM warmup marker (issue 34 item 4): written by warm from the servers' logs; the
# all-M warmup is skipped only when it fits the run


WARM_LOG = (
    "[..] Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=4096, K=7168, num_groups=1 with "
    "all Ms. It only takes a little time\n"
    "[..] Try DeepGEMM JIT Compiling for <GROUPED_GEMM_NT_F8F8BF16_MASKED> N=4096, K=7168, "
    "num_groups=8 with all Ms.\n"
)


def test_the_marker_is_complete_only_when_the_warmup_ran_in_full() -> None:
    from sglforge.smoke import dgwarmup

    good = dgwarmup.marker(KEY.digest, [("prefill", {}, WARM_LOG), ("decode", {}, "")])
    assert good["complete"] and good["problems"] == []
    assert good["roles"]["prefill"]["shapes"] == [
        "<GEMM_NT_F8F8BF16> N=4096 K=7168 num_groups=1",
        "<GROUPED_GEMM_NT_F8F8BF16_MASKED> N=4096 K=7168 num_groups=8",
    ]
    assert good["roles"]["decode"]["shapes"] == []
    assert dgwarmup.check_marker(good) is None
    reduced = WARM_LOG + "... reducing max_m to 4096 to avoid out of memory\n"
    cut = dgwarmup.marker(KEY.digest, [("prefill", {}, reduced)])
    assert not cut["complete"] and "cut the warmup short (max_m 4096" in cut["problems"][0]
    off = dgwarmup.marker(KEY.digest, [("prefill", {dgwarmup.PRECOMPILE: "0"}, "")])
    assert not off["complete"] and f"{dgwarmup.PRECOMPILE}=0 in the warm run" in off["problems"][0]


def test_the_warmup_is_skipped_only_when_the_marker_fits() -> None:
    from sglforge.smoke import dgwarmup

    good = dgwarmup.marker(KEY.digest, [("prefill", {}, WARM_LOG), ("decode", {}, "")])
    servers = {"prefill": {"PATH": "/bin"}, "decode": {}}
    assert dgwarmup.judge(good, KEY.digest, servers, 3) == (
        True,
        "marker matches: 2 shape(s) warmed with all Ms, 3 files",
    )
    fast = {**servers, "decode": {"SGLANG_JIT_DEEPGEMM_FAST_WARMUP": "1"}}
    cut = dgwarmup.marker(KEY.digest, [("prefill", {}, WARM_LOG + "reducing max_m to 8 to avoid out of memory")])  # fmt: skip
    for found, key, run, files, why in (
        (None, KEY.digest, servers, 3, "no DeepGEMM warmup marker"),
        (good, "f" * 64, servers, 3, "names another key"),
        (cut, KEY.digest, {"prefill": {}}, 3, "warmup was incomplete"),
        (good, KEY.digest, {**servers, "colocated": {}}, 3, "colocated was not warmed"),
        (good, KEY.digest, fast, 3, ("decode: DeepGEMM environment differs: "
         "SGLANG_JIT_DEEPGEMM_FAST_WARMUP='1' (warm: None)")),
        (good, KEY.digest, servers, 0, "2 warmed shape(s) but no DeepGEMM cache file"),
    ):  # fmt: skip
        skip, reason = dgwarmup.judge(found, key, run, files)
        assert not skip and why in reason, reason


def test_a_malformed_marker_is_refused_and_a_good_one_round_trips(tmp_path: Path) -> None:
    from sglforge.smoke import dgwarmup

    make_caches(tmp_path / "caches")
    good = dgwarmup.marker(KEY.digest, [("prefill", {}, WARM_LOG)])
    packed = jitcache.pack(tmp_path / "caches", KEY, tmp_path / "out", good)
    assert jitcache.read_manifest(packed.path).deep_gemm_warmup == good

    def bad_marker(name, info, data):
        if name != jitcache.MANIFEST:
            return [(info, data)]
        document = json.loads(data)
        document["deep_gemm_warmup"]["complete"] = "yes"
        data = json.dumps(document).encode()
        info.size = len(data)
        return [(info, data)]

    bad = _retar(packed.path, tmp_path / "bad.tar.gz", bad_marker)
    with pytest.raises(JitCacheRefused, match="'deep_gemm_warmup': 'key_digest' .* 'complete'"):
        jitcache.read_manifest(bad)


def test_warm_writes_the_marker_and_the_smoke_skips_the_deep_gemm_warmup(
    smoke_project: SmokeProject, installed_venv: Path, tmp_path: Path
) -> None:
    env = {"STANDIN_JIT_SECONDS": "0.2", "STANDIN_DEEPGEMM_SHAPES": "GEMM_NT_F8F8BF16:4096:7168"}
    smoke_project.write_profile(checks={"run": ["generate"]}, prefill_env=env, decode_env=env)
    common = ["--profile", "standin", "--venv", str(installed_venv)]
    result = smoke_project.run_verb(
        "warm", *common, "--out", str(tmp_path / "warm"), "--artifact-dir", str(tmp_path / "a"),
        "--jit-root", str(tmp_path / "root-warm"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (artifact,) = (tmp_path / "a").iterdir()
    found = jitcache.read_manifest(artifact).deep_gemm_warmup
    assert found["complete"] and found["roles"]["prefill"]["shapes"] == [
        "<GEMM_NT_F8F8BF16> N=4096 K=7168 num_groups=1"
    ]
    out = tmp_path / "skip"
    result = smoke_project.smoke(
        *common, "--out", str(out), "--jit-cache", str(artifact), "--jit-root", str(tmp_path / "r")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for role in ("prefill", "decode"):
        log = _log(smoke_project, out, role)
        assert "standin deep_gemm: all-M warmup skipped" in log and "Try DeepGEMM" not in log
    report = json.loads((out / "smoke-report.json").read_text())
    assert report["jit_cache"]["deep_gemm_warmup"]["skipped"] is True
    # Another DeepGEMM environment on decode than the warm run's: the warmup runs.
    smoke_project.write_profile(
        checks={"run": ["generate"]},
        prefill_env=env,
        decode_env={**env, "SGLANG_JIT_DEEPGEMM_FAST_WARMUP": "1"},
    )
    out = tmp_path / "kept"
    result = smoke_project.smoke(
        *common, "--out", str(out), "--jit-cache", str(artifact), "--jit-root", str(tmp_path / "r")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Try DeepGEMM JIT Compiling" in _log(smoke_project, out, "prefill")
    decision = json.loads((out / "smoke-report.json").read_text())["jit_cache"]["deep_gemm_warmup"]
    assert (
        decision["skipped"] is False and "decode: DeepGEMM environment differs" in decision["why"]
    )
