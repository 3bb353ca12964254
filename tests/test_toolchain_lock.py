"""Issue 11 item 3: torch is what the lock says (CUDA variant included), and the toolchain
lock installs with hashes from one index per section, never from anywhere else."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from sglforge.base.errors import SglforgeError
from sglforge.builder import toolchain_lock
from sglforge.inputs import toolchain as toolchain_mod
from sglforge.inputs.toolchain import load_toolchain

ROOT = Path(__file__).resolve().parents[1]
H1, H2 = "a" * 64, "b" * 64


def write_lock(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_committed_lock_matches_toolchain_toml_and_pins_torch_with_its_cuda_variant():
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    assert toolchain.torch == "2.11.0+cu130" and toolchain.torch_public == "2.11.0"
    assert toolchain.torch_index == toolchain_lock.DEFAULT_INDEX  # PyPI: reachable
    lock = toolchain_lock.parse_lock(ROOT / "lockfiles" / "toolchain.lock")
    pins = dict(toolchain.build_requires, torch=toolchain.torch)
    assert toolchain_lock.check_against_pins(lock, pins) == []
    assert all(entry.hashes for entries in lock.sections.values() for entry in entries)
    assert [e.name for e in lock.sections["torch"]] == ["torch"]
    assert lock.get("torch").version == "2.11.0"  # PyPI's cu130 build: no local label
    deps = {e.name: e.version for e in lock.sections["torch-deps"]}
    assert deps["triton"] == "3.6.0" and deps["cuda-toolkit"].startswith("13.0.2")
    assert "nvidia-nccl-cu13" in deps and "nvidia-cudnn-cu13" in deps
    build = {e.name for e in lock.sections["build"]}
    assert not build & set(deps)  # shared dependencies stay at [build]'s versions
    # the cp312 manylinux_2_28 x86_64 wheel, installed by `nox -s build` (issue 22): its
    # torch/version.py says 2.11.0+cu130, cuda '13.0'
    assert (
        "0f68f4ac6d95d12e896c3b7a912b5871619542ec54d3649cf48cc1edd4dd2756"
        in lock.get("torch").hashes
    )


def test_torch_lock_entry_may_lack_the_local_label_but_not_differ_otherwise(tmp_path):
    lock = toolchain_lock.parse_lock(
        write_lock(
            tmp_path / "l",
            f"""\
# [torch]
torch==2.13.0 --hash=sha256:{H1}
""",
        )
    )
    assert toolchain_lock.check_against_pins(lock, {"torch": "2.13.0+cu130"}) == []
    assert toolchain_lock.check_against_pins(lock, {"torch": "2.13.1+cu130"}) == [
        "torch: toolchain.toml pins 2.13.1+cu130, l has 2.13.0 (line 2)"
    ]
    cpu = toolchain_lock.parse_lock(
        write_lock(tmp_path / "c", f"# [torch]\ntorch==2.13.0+cpu --hash=sha256:{H1}\n")
    )
    assert toolchain_lock.check_against_pins(cpu, {"torch": "2.13.0+cu130"}) == [
        "torch: toolchain.toml pins 2.13.0+cu130, c has 2.13.0+cpu (line 2)"
    ]


UV_BUILD = f"""\
setuptools==80.9.0 \\
    --hash=sha256:{H1}
typing-extensions==4.16.0 \\
    --hash=sha256:{H1}
"""
UV_TORCH = f"""\
nvidia-nccl-cu13==2.29.7 \\
    --hash=sha256:{H2}
setuptools==80.9.0 \\
    --hash=sha256:{H1}
torch==2.13.0 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
typing-extensions==4.16.0 \\
    --hash=sha256:{H1}
"""


def test_assemble_splits_torch_from_its_dependencies_and_keeps_build(tmp_path):
    assert toolchain_lock.constraints(UV_BUILD) == "setuptools==80.9.0\ntyping-extensions==4.16.0\n"
    pins = {"python": "3.12", "torch": "2.13.0+cu130"}
    text = toolchain_lock.assemble(UV_BUILD, UV_TORCH, None, pins)
    lock = toolchain_lock.parse_lock(write_lock(tmp_path / "toolchain.lock", text))
    assert {k: [e.name for e in v] for k, v in lock.sections.items()} == {
        "build": ["setuptools", "typing-extensions"],
        "torch-deps": ["nvidia-nccl-cu13"],
        "torch": ["torch"],
    }
    assert lock.get("torch").hashes == (H1, H2)
    assert "torch==2.13.0 from https://pypi.org/simple" in text
    assert "torch/version.py" in text  # says where the variant is checked
    assert all(len(line) <= 100 for line in text.splitlines() if line.startswith("#"))
    # an existing lock as the build input: its [build] section is kept, the rest replaced
    again = toolchain_lock.assemble(text, UV_TORCH, None, pins)
    assert again == text and toolchain_lock.constraints(text) == toolchain_lock.constraints(
        UV_BUILD
    )
    variant = f"torch==2.13.0+cu130 \\\n    --hash=sha256:{'c' * 64}\n"
    other = toolchain_lock.assemble(
        UV_BUILD, UV_TORCH, variant, dict(pins, **{"torch-index": "https://t.example/cu130"})
    )
    lock = toolchain_lock.parse_lock(write_lock(tmp_path / "other.lock", other))
    assert lock.get("torch").version == "2.13.0+cu130"
    assert lock.get("torch").hashes == ("c" * 64,)


def test_printed_regeneration_commands_follow_toolchain_toml(capsys):
    toolchain_lock.main([])
    text = capsys.readouterr().out
    assert "echo 'torch==2.11.0' > torch.in" in text
    assert "--constraint build-constraints.txt torch.in" in text
    assert "assemble build.lock torch.lock" in text
    assert "torch-variant" not in text  # torch-index is index (PyPI): one resolution


def test_parse_lock_sections_continuations_and_errors(tmp_path):
    lock = toolchain_lock.parse_lock(
        write_lock(
            tmp_path / "ok.lock",
            f"""\
# comment
# [build]
setuptools==80.9.0 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
# [torch]
torch==2.13.0+cu130 --hash=sha256:{H1}
""",
        )
    )
    assert lock.get("setuptools").hashes == (H1, H2)
    assert lock.get("torch").version == "2.13.0+cu130"
    bad = write_lock(
        tmp_path / "bad.lock",
        f"wheel==1 --hash=sha256:{H1}\n# [build]\n"
        "packaging==25.0\nnumpy>=2 --hash=sha256:" + H1 + "\n# [extras]\n",
    )
    with pytest.raises(toolchain_lock.LockError) as error:
        toolchain_lock.parse_lock(bad)
    text = str(error.value)
    assert "line 1: entry before the first" in text
    assert "line 3: packaging has no --hash" in text
    assert "line 4: 'numpy>=2" in text and "is not an exact" in text
    assert "unknown section [extras]" in text


def test_lock_disagreeing_with_a_pin_is_named(tmp_path):
    lock = toolchain_lock.parse_lock(
        write_lock(tmp_path / "l", f"# [build]\nsetuptools==80.0.0 --hash=sha256:{H1}\n")
    )
    problems = toolchain_lock.check_against_pins(lock, {"setuptools": "80.9.0", "ninja": "1"})
    assert problems == [
        "ninja==1: not in l",
        "setuptools: toolchain.toml pins 80.9.0, l has 80.0.0 (line 2)",
    ]


def test_install_plan_torch_only_when_needed_each_section_its_own_index(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLFORGE_INDEX", raising=False)
    monkeypatch.delenv("SGLFORGE_TORCH_INDEX", raising=False)
    lock = toolchain_lock.parse_lock(
        write_lock(
            tmp_path / "l",
            f"""\
# [build]
setuptools==80.9.0 --hash=sha256:{H1}
# [torch-deps]
sympy==1.14.0 --hash=sha256:{H1}
# [torch]
torch==2.13.0+cu130 --hash=sha256:{H2}
""",
        )
    )
    plan = toolchain_lock.install_plan(lock, False, None, "https://t.example/cu130")
    assert [p[0] for p in plan] == ["build"]
    options = plan[0][1]
    assert {"--require-hashes", "--no-deps"} <= set(options)
    assert options[-2:] == ["--index-url", toolchain_lock.DEFAULT_INDEX]
    plan = toolchain_lock.install_plan(
        lock, True, "https://mirror.example/simple", "https://t.example/cu130"
    )
    assert [(p[0], p[1][-1]) for p in plan] == [
        ("build", "https://mirror.example/simple"),
        ("torch-deps", "https://mirror.example/simple"),
        ("torch", "https://t.example/cu130"),
    ]
    assert not any("--extra-index-url" in p[1] for p in plan)
    monkeypatch.setenv("SGLFORGE_TORCH_INDEX", "https://other.example/torch")
    plan = toolchain_lock.install_plan(lock, True, None, "https://t.example/cu130")
    assert plan[-1][1][-1] == "https://other.example/torch"
    empty = toolchain_lock.parse_lock(write_lock(tmp_path / "e", "# [build]\n"))
    with pytest.raises(toolchain_lock.LockError, match="no \\[torch\\] section"):
        toolchain_lock.install_plan(empty, True, None, "https://t.example/cu130")


def test_pip_env_switches_pip_configuration_off(monkeypatch):
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://elsewhere.example/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/somewhere")
    env = toolchain_lock.pip_env()
    assert "PIP_EXTRA_INDEX_URL" not in env and "PIP_FIND_LINKS" not in env
    assert env["PIP_CONFIG_FILE"] == "/dev/null"


def _tiny_wheel(directory: Path, name: str, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, text in {**files, f"{dist}/RECORD": record}.items():
            archive.writestr(member, text)
    return wheel


def test_install_takes_only_the_hashed_file_from_the_given_index(tmp_path, monkeypatch):
    """A torch-like package: the right variant from the pinned (local) index installs; with a
    wrong hash nothing installs, even though pip.conf-style extra indexes offer the file."""
    monkeypatch.delenv("SGLFORGE_TORCH_INDEX", raising=False)
    good = _tiny_wheel(tmp_path / "torch-index", "fakelib", "2.13.0+cu130")
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    _tiny_wheel(tmp_path / "elsewhere", "fakelib", "2.13.0+cpu")
    lock = toolchain_lock.parse_lock(
        write_lock(tmp_path / "l", f"# [torch]\nfakelib==2.13.0+cu130 --hash=sha256:{digest}\n")
    )
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"file://{tmp_path / 'elsewhere'}")
    [command] = toolchain_lock.install_commands(
        sys.executable, lock, True, None, str(tmp_path / "torch-index"), tmp_path / "req"
    )
    assert command[command.index("--find-links") + 1] == str(tmp_path / "torch-index")
    target = tmp_path / "site"
    ok = subprocess.run(
        [*command, "--target", str(target), "--no-compile"],
        env=toolchain_lock.pip_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "2.13.0+cu130" in (target / "fakelib" / "__init__.py").read_text()
    wrong = toolchain_lock.parse_lock(
        write_lock(tmp_path / "w", f"# [torch]\nfakelib==2.13.0+cu130 --hash=sha256:{H1}\n")
    )
    [command] = toolchain_lock.install_commands(
        sys.executable, wrong, True, None, str(tmp_path / "torch-index"), tmp_path / "req2"
    )
    bad = subprocess.run(
        [*command, "--target", str(tmp_path / "site2"), "--no-compile"],
        env=toolchain_lock.pip_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "hash" in bad.stderr.lower()
    assert not (tmp_path / "site2" / "fakelib").exists()


VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '{version}'
debug = False
cuda: Optional[str] = {cuda!r}
git_version = 'cf30153c4c131c8164ee7798e5022d810682e2cb'
hip: Optional[str] = None
"""


def fake_torch(
    site: Path, dist_version: str, version: str | None, cuda: str | None = "13.0"
) -> Path:
    """An "installed torch" without torch: its dist-info, and torch/version.py unless None."""
    dist = site / f"torch-{dist_version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.4\nName: torch\nVersion: {dist_version}\n")
    if version is not None:
        (site / "torch").mkdir()
        (site / "torch" / "version.py").write_text(VERSION_PY.format(version=version, cuda=cuda))
    return site


def _toolchain(tmp_path: Path):
    (tmp_path / "toolchain.toml").write_text(
        f'cuda = "13.0"\npython = "{sys.version_info.major}.{sys.version_info.minor}"\n'
        'torch = "2.13.0+cu130"\n[build-requires]\n'
    )
    return load_toolchain(tmp_path / "toolchain.toml")


@pytest.mark.parametrize("dist_version", ["2.13.0", "2.13.0+cu130"])  # PyPI, its own index
def test_installed_cu130_torch_passes_read_from_files(tmp_path, monkeypatch, dist_version):
    site = fake_torch(tmp_path / "site", dist_version, "2.13.0+cu130")
    found = toolchain_mod.installed_torch([str(site)])
    assert found == toolchain_mod.InstalledTorch(
        dist_version, site / "torch" / "version.py", "2.13.0+cu130", "13.0"
    )
    assert toolchain_mod.torch_problem("2.13.0+cu130", found) is None
    monkeypatch.syspath_prepend(str(site))
    found = toolchain_mod.fingerprint(_toolchain(tmp_path), None, ["torch"])
    assert found.torch == "2.13.0+cu130"  # the variant, as content keys had it
    assert "torch" not in sys.modules  # read, never imported


@pytest.mark.parametrize(
    ("dist_version", "version", "cuda", "message"),
    [
        (
            "2.13.0+cpu",
            "2.13.0+cpu",
            None,
            r"torch: pinned 2\.13\.0\+cu130, installed 2\.13\.0\+cpu \(its metadata Version\)",
        ),
        (
            "2.13.0",
            "2.13.0+cpu",
            None,  # a CPU build without the label in its metadata
            (
                r"torch: pinned 2\.13\.0\+cu130, installed 2\.13\.0\+cpu \(.*version\.py: "
                r"__version__ = '2\.13\.0\+cpu', cuda = None\)"
            ),
        ),
        (
            "2.12.0",
            "2.12.0+cu130",
            "13.0",
            r"torch: pinned 2\.13\.0\+cu130, installed 2\.12\.0 \(its metadata Version\)",
        ),
        (
            "2.13.0",
            "2.13.0+cu130",
            "12.8",
            (
                r"pinned 2\.13\.0\+cu130 \(CUDA 13\.0\), but the installed build says otherwise "
                r"\(.*cuda = '12\.8'\)"
            ),
        ),
    ],
)
def test_installed_torch_of_another_build_is_refused(
    tmp_path, monkeypatch, dist_version, version, cuda, message
):
    site = fake_torch(tmp_path / "site", dist_version, version, cuda)
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(SglforgeError, match=message):
        toolchain_mod.fingerprint(_toolchain(tmp_path), None, ["torch"])


def test_installed_torch_without_version_py_fails_clearly(tmp_path, monkeypatch):
    site = fake_torch(tmp_path / "site", "2.13.0", None)
    found = toolchain_mod.installed_torch([str(site)])
    assert found.version is None and found.cuda is None
    assert toolchain_mod.torch_problem("2.13.0+cu130", found) == (
        f"torch: pinned 2.13.0+cu130, installed 2.13.0 has no {site / 'torch' / 'version.py'}"
        ", so its CUDA variant is unknown (reinstall torch)"
    )
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(SglforgeError, match="has no .*version.py, so its CUDA variant"):
        toolchain_mod.fingerprint(_toolchain(tmp_path), None, ["torch"])
    assert toolchain_mod.installed_torch([str(tmp_path / "empty")]) is None


def test_toolchain_toml_index_keys_are_read(tmp_path):
    (tmp_path / "t.toml").write_text(
        'cuda = "13.0"\npython = "3.12"\n'
        'torch = "2.13.0+cu130"\nindex = "https://m.example/simple"\n'
        'torch-index = "https://t.example/cu130"\n'
    )
    data = tomllib.loads((tmp_path / "t.toml").read_text())
    toolchain = load_toolchain(tmp_path / "t.toml")
    assert toolchain.index == data["index"] and toolchain.torch_index == data["torch-index"]


def test_build_requirements_name_torch_as_the_index_does():
    out = subprocess.run(
        [sys.executable, "-m", "sglforge", "build-requirements", "sglang-kernel"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "torch==2.11.0\n" in out and "torch==2.11.0+cu130\n" not in out
    assert "# torch: only from https://pypi.org/simple" in out


def test_the_linker_on_the_build_path_is_in_the_fingerprint_and_the_key(tmp_path):
    """binutils alone changes a wheel's bytes (symbol order, layout: bench/toolchain-bytes.json),
    so the `ld` a build finds on its PATH is part of the fingerprint, its digest and
    provenance: two hosts that differ only there never share a content key."""
    seen = []
    for release in ("2.40", "2.44"):
        bin_dir = tmp_path / release
        bin_dir.mkdir()
        ld = bin_dir / "ld"
        ld.write_text(f"#!/bin/sh\necho 'GNU ld (GNU Binutils) {release}'\n")
        ld.chmod(0o755)
        found = toolchain_mod.fingerprint(_toolchain(tmp_path), None, [], search_path=str(bin_dir))
        assert found.linker == f"GNU ld (GNU Binutils) {release}"
        assert found.summary(with_torch=False)["linker"] == found.linker
        seen.append(found.digest)
    assert seen[0] != seen[1]
