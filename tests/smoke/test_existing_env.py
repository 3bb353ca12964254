"""Issue 13 with stand-ins: a smoke against an existing environment (--python; a PYTHONPATH
overlay reaches the servers; installed versions and sglforge provenance in the report; the
doctor checks that environment), the router readiness race, the H200 profiles and the
shared-GPU opt-in, and `sglforge tiny-model`."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.smoke import doctor, tinymodel
from sglforge.smoke.doctor import ERROR, OK, WARNING, GpuInfo, HostFacts, diagnose
from sglforge.smoke.environment import EnvStack, InstalledPackage, parse_probe
from sglforge.smoke.profile import load_profile
from sglforge.wheel.provenance import PROVENANCE_FILE, Provenance

from .conftest import STANDIN_ROUTER, SmokeProject, provenance

REPO = Path(__file__).resolve().parents[2]
H200_1GPU = REPO / "profiles" / "h200-pd-1gpu.toml"
H200_2GPU = REPO / "profiles" / "h200-pd-2gpu.toml"


# --------------------------------------------------------------------------------------------
# Profiles


def test_h200_profiles_load_with_the_recipe_settings() -> None:
    one, two = load_profile(H200_1GPU, REPO), load_profile(H200_2GPU, REPO)
    assert one.share_gpus and one.prefill.gpus == one.decode.gpus == (0,)
    assert not two.share_gpus and (two.prefill.gpus, two.decode.gpus) == ((0,), (1,))
    for profile in (one, two):
        assert profile.tiny_model and not profile.numa_binding
        assert profile.router.ready_path == "/readiness"
        assert profile.server.env["SGLANG_HOST_IP"] == "127.0.0.1"
        assert profile.server.env["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "UCX"
        assert profile.timeouts.teardown > 65  # SGLang lingers ~65 s after SIGTERM
        assert profile.checks.needle_must_recall == ()
    # Two servers on one GPU: each takes 0.45 of its memory.
    assert one.prefill.args == one.decode.args == ("--mem-fraction-static", "0.45")


def test_shared_gpu_profile_is_refused_without_the_opt_in(tmp_path: Path) -> None:
    text = H200_1GPU.read_text()
    opted_out = tmp_path / "no-opt-in.toml"
    opted_out.write_text(text.replace("share-gpus = true", "share-gpus = false"))
    with pytest.raises(ConfigErrors) as info:
        load_profile(opted_out, REPO)
    assert "share GPUs [0]" in str(info.value) and "share-gpus = true" in str(info.value)
    missing = tmp_path / "missing.toml"
    missing.write_text(
        "\n".join(line for line in text.splitlines() if not line.startswith("share-gpus"))
    )
    with pytest.raises(ConfigErrors):
        load_profile(missing, REPO)
    assert load_profile(H200_1GPU, REPO).share_gpus


def test_router_ready_path_must_be_a_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        H200_2GPU.read_text().replace('ready-path = "/readiness"', 'ready-path = "readiness"')
    )
    with pytest.raises(ConfigErrors, match="ready-path"):
        load_profile(bad, REPO)


# --------------------------------------------------------------------------------------------
# The readiness race, end to end


@pytest.mark.parametrize("ready_path, passes", [("/readiness", True), ("/health", False)])
def test_router_health_before_readiness_race(
    smoke_project: SmokeProject, installed_venv: Path, ready_path: str, passes: bool
) -> None:
    # The router stand-in answers /health at once but routes only 3 s later (/readiness 503
    # until then), like sglang-router before its workers are registered.
    smoke_project.write_profile(
        router_command=[sys.executable, str(STANDIN_ROUTER)],
        router_extra={"ready-path": ready_path, "env": {"STANDIN_ROUTER_REGISTER_AFTER": "3"}},
        checks={"run": ["generate"]},
    )
    result = smoke_project.smoke(
        "--profile", "standin", "--out", str(smoke_project.run_dir), "--venv", str(installed_venv)
    )
    report = smoke_project.report()
    router = next(s for s in report["stages"] if s["name"] == "router")
    [generate] = report["checks"]
    if passes:
        assert result.returncode == 0, result.stdout + result.stderr
        assert generate["passed"]
        assert float(router["detail"].split()[1]) >= 2.5  # waited for the registration
        assert report["readiness"]["router"]["/readiness"] >= 2.5  # from the router's launch
    else:
        # Waiting on /health starts the checks before any worker is registered.
        assert result.returncode == 1
        assert not generate["passed"] and "503" in generate["detail"]


# --------------------------------------------------------------------------------------------
# An existing environment (--python)


def _dist_info(site: Path, name: str, version: str, prov: Provenance | None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    if prov is not None:
        (info / PROVENANCE_FILE).write_bytes(prov.dumps())


def _overlay(tmp_path: Path) -> Path:
    """A PYTHONPATH overlay like the H200 stack: one sglforge-built package, one from PyPI."""
    site = tmp_path / "overlay"
    (site / "sgl_kernel").mkdir(parents=True)
    (site / "sgl_kernel" / "__init__.py").write_text("")
    _dist_info(
        site,
        "sglang-kernel",
        "0.4.4+sm90.cu130.abcd1234",
        provenance("sglang-kernel", "0.4.4+sm90.cu130.abcd1234", ["sm_90a"]),
    )
    _dist_info(site, "flashinfer-python", "0.6.12", None)
    return site


@pytest.mark.parametrize("overlay", [True, False])
def test_existing_environment_installs_nothing_and_records_it(
    smoke_project: SmokeProject, tmp_path: Path, overlay: bool
) -> None:
    site = _overlay(tmp_path)
    # The project's wheel set is not used: without it the run must still go.
    (smoke_project.root / "wheels" / "manifest.json").unlink()
    smoke_project.write_profile(
        prefill_env={"STANDIN_REQUIRE_MODULE": "sgl_kernel"},
        decode_env={"STANDIN_REQUIRE_MODULE": "sgl_kernel"},
        checks={"run": ["generate"]},
    )
    env = {"PYTHONPATH": str(site)} if overlay else {}
    result = smoke_project.smoke(
        "--profile",
        "standin",
        "--out",
        str(smoke_project.run_dir),
        "--python",
        sys.executable,
        env=env,
    )
    report = smoke_project.report()
    assert [s["name"] for s in report["stages"]][:3] == ["environment", "doctor", "install"]
    assert not (smoke_project.run_dir / "venv").exists()
    if not overlay:
        # The servers need the overlay; without it they die at start and the smoke says so.
        assert result.returncode == 1
        assert report["failure"]["process"] in ("prefill", "decode")
        assert "exit status 4" in report["failure"]["exit"]
        return
    assert result.returncode == 0, result.stdout + result.stderr
    versions = report["versions"]
    assert versions["sglang-kernel"]["origin"] == "sglforge"
    assert versions["sglang-kernel"]["version"] == "0.4.4+sm90.cu130.abcd1234"
    assert versions["sglang-kernel"]["cuda_archs"] == ["sm_90a"]
    assert versions["flashinfer-python"]["origin"] == "not built by sglforge"
    assert versions["sglang-router"]["version"] == "0.3.2"  # from the interpreter's own site
    assert report["environment"]["pythonpath"] == str(site)
    assert report["environment"]["built_by_sglforge"] == ["sglang-kernel"]
    install = next(s for s in report["stages"] if s["name"] == "install")
    assert "nothing installed" in install["detail"]
    summary = (smoke_project.run_dir / "smoke-summary.txt").read_text()
    assert "sglang-kernel 0.4.4+sm90.cu130.abcd1234  [sglforge: sglang-kernel@" in summary


def test_python_and_venv_together_are_refused(
    smoke_project: SmokeProject, installed_venv: Path
) -> None:
    result = smoke_project.smoke(
        "--profile", "standin", "--python", sys.executable, "--venv", str(installed_venv)
    )
    assert result.returncode == 2 and "--python and --venv" in result.stderr


def test_dry_run_with_python_and_tiny_model(smoke_project: SmokeProject) -> None:
    result = smoke_project.smoke(
        "--profile",
        str(H200_1GPU),
        "--out",
        str(smoke_project.run_dir),
        "--python",
        sys.executable,
        "--dry-run",
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    tiny = smoke_project.run_dir / "tiny-model"
    assert f"--model-path {tiny}" in text
    assert f"{sys.executable} -m sglang.launch_server" in text
    assert "ready: GET http://127.0.0.1:8000/readiness" in text
    assert "no install" in text and "pip" not in text


# --------------------------------------------------------------------------------------------
# Doctor over an existing environment (pure)

H200 = HostFacts(
    nvidia_smi_error=None,
    gpus=(GpuInfo(0, "NVIDIA H200", "9.0", 0), GpuInfo(1, "NVIDIA H200", "9.0", 0)),
    driver_version="580.159.04",
    numa_nodes=(0,),
    numactl=None,
    nvcc="/usr/local/cuda/bin/nvcc",
    nvcc_version="13.0",
    cuda_include="/usr/local/cuda/include",
    venv_python="/opt/v/bin/python",
    torch_version="2.11.0+cu130",
    busy_ports={},
    model_exists=None,
)


def _package(
    name: str, version: str, archs: list[str] | None = None, torch: str | None = None
) -> InstalledPackage:
    prov = (
        None
        if archs is None
        else Provenance(
            upstream=name,
            commit="b" * 40,
            version=version,
            cuda_archs=tuple(archs),
            requires_torch=torch,
            toolchain={"cuda": "13.0"},
        )
    )
    return InstalledPackage(
        name=name, version=version, location=None, installer="pip", provenance=prov
    )


def _env(
    *packages: InstalledPackage,
    plugins: tuple[str, ...] = ("/s/.nixl_cu13.mesonpy.libs/plugins/libplugin_UCX.so",),
) -> EnvStack:
    base = (
        _package("sglang", "0.5.15"),
        _package("torch", "2.11.0+cu130"),
        _package("nixl-cu13", "1.5.1"),
    )
    return EnvStack(
        python="/opt/v/bin/python",
        python_version="3.12.3",
        pythonpath="/site",
        packages=base + packages,
        torch_cuda="13.0",
        nixl_module="nixl_cu13",
        nixl_plugins=plugins,
    )


def _findings(env: EnvStack, check: str) -> list[doctor.Finding]:
    profile = load_profile(H200_2GPU, REPO)
    return [
        f for f in diagnose(profile, None, dataclasses.replace(H200, env=env)) if f.check == check
    ]


def test_doctor_environment_ok_for_the_h200_stack() -> None:
    env = _env(_package("sglang-kernel", "0.4.4"), _package("flashinfer-python", "0.6.12+x", []))
    profile = load_profile(H200_2GPU, REPO)
    findings = diagnose(profile, None, dataclasses.replace(H200, env=env))
    assert [f for f in findings if f.level == ERROR] == []
    [arch] = [f for f in findings if f.check == "arch"]
    # PyPI sglang-kernel carries device code sglforge knows nothing about: said, not blocking.
    assert arch.level == WARNING and "sglang-kernel" in arch.message
    [nixl] = [f for f in findings if f.check == "nixl"]
    assert nixl.level == OK and "libplugin_UCX" in nixl.message


def test_doctor_environment_catches_wrong_arch_torch_and_missing_nixl() -> None:
    env = _env(_package("sglang-kernel", "0.4.7+sm120", ["sm_120a"], "2.13.0"))
    [arch] = [f for f in _findings(env, "arch") if f.level == ERROR]
    assert "sm_120a only" in arch.message and "sm_90" in arch.message
    [torch] = _findings(env, "torch")
    assert torch.level == ERROR and "built against torch 2.13.0" in torch.message
    without = dataclasses.replace(env, nixl_module=None, nixl_plugins=())
    assert _findings(without, "nixl")[0].level == ERROR
    no_plugin = dataclasses.replace(env, nixl_plugins=("/s/plugins/libplugin_POSIX.so",))
    assert _findings(no_plugin, "nixl")[0].level == WARNING
    no_sglang = dataclasses.replace(env, packages=env.packages[1:])
    assert any(
        f.level == ERROR and "sglang" in f.message for f in _findings(no_sglang, "environment")
    )


def test_probe_output_parses_provenance_and_modules(tmp_path: Path) -> None:
    torch_dir = tmp_path / "torch"
    torch_dir.mkdir()
    # as PyPI's torch writes it: annotated assignments
    (torch_dir / "version.py").write_text(
        "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"
    )
    env = parse_probe(
        {
            "python": "/p",
            "python_version": "3.12.3",
            "pythonpath": "/site",
            "packages": {
                "flashinfer-python": {
                    "version": "0.6.12+sm120.cu130.cced78e6",
                    "location": "/site/x.dist-info",
                    "installer": "pip",
                    "provenance": provenance("flashinfer", "0.6.12", []).to_json(),
                },
                "torch": {
                    "version": "2.11.0+cu130",
                    "location": None,
                    "installer": None,
                    "provenance": None,
                },
            },
            "modules": {
                "torch": {"path": str(torch_dir)},
                "nixl_cu13": {"path": "/n", "plugins": ["/n/libplugin_UCX.so"]},
            },
        }
    )
    assert [p.name for p in env.built_by_sglforge()] == ["flashinfer-python"]
    assert env.torch_cuda == "13.0" and env.nixl_module == "nixl_cu13"
    assert env.versions()["torch"]["origin"] == "not built by sglforge"
    (torch_dir / "version.py").write_text("__version__ = '2.11.0+cpu'\ncuda = None\n")
    assert parse_probe({"modules": {"torch": {"path": str(torch_dir)}}}).torch_cuda is None


# --------------------------------------------------------------------------------------------
# tiny-model


def test_tiny_model_refuses_to_replace_a_directory_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "weights.bin").write_text("x")
    with pytest.raises(SglforgeError, match="not empty"):
        tinymodel._prepare(tmp_path / "precious", force=False)
    with pytest.raises(SglforgeError, match="refusing to delete"):
        tinymodel._prepare(tmp_path / "precious", force=True)
    assert (tmp_path / "precious" / "weights.bin").exists()


def test_probe_finds_the_ucx_plugin_in_meson_pythons_hidden_libs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglforge's nixl-cu13 (meson-python) keeps libplugin_UCX.so in a hidden
    `.nixl_cu13.mesonpy.libs/plugins/`: the H200 run of record warned 'no libplugin_UCX*.so
    beside the package' although the servers loaded it from there (issue 37)."""
    from sglforge.smoke.environment import probe_environment

    site = tmp_path / "site"
    (site / "nixl_cu13").mkdir(parents=True)
    (site / "nixl_cu13" / "__init__.py").write_text("")
    plugins = site / ".nixl_cu13.mesonpy.libs" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / "libplugin_UCX.so").write_bytes(b"")
    monkeypatch.setenv("PYTHONPATH", str(site))
    stack = probe_environment(Path(sys.executable))
    assert stack.nixl_module == "nixl_cu13"
    assert stack.nixl_plugins == (str(plugins / "libplugin_UCX.so"),)
