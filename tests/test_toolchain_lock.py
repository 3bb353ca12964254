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
from sglforge.build import toolchain_lock
from sglforge.inputs import toolchain as toolchain_mod
from sglforge.inputs.toolchain import load_toolchain

ROOT = Path(__file__).resolve().parents[1]
H1, H2 = "a" * 64, "b" * 64


def write_lock(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_committed_lock_matches_toolchain_toml_and_pins_torch_with_its_cuda_variant():
    toolchain = load_toolchain(ROOT / "lockfiles" / "toolchain.toml")
    assert toolchain.torch == "2.13.0+cu130" and toolchain.torch_public == "2.13.0"
    lock = toolchain_lock.parse_lock(ROOT / "lockfiles" / "toolchain.lock")
    assert toolchain_lock.check_against_pins(lock, toolchain.build_requires) == []
    assert all(entry.hashes for entries in lock.sections.values() for entry in entries)


def test_parse_lock_sections_continuations_and_errors(tmp_path):
    lock = toolchain_lock.parse_lock(write_lock(tmp_path / "ok.lock", f"""\
# comment
# [build]
setuptools==80.9.0 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
# [torch]
torch==2.13.0+cu130 --hash=sha256:{H1}
"""))
    assert lock.get("setuptools").hashes == (H1, H2)
    assert lock.get("torch").version == "2.13.0+cu130"
    bad = write_lock(tmp_path / "bad.lock", f"wheel==1 --hash=sha256:{H1}\n# [build]\n"
                                            "packaging==25.0\nnumpy>=2 --hash=sha256:" + H1
                                            + "\n# [extras]\n")
    with pytest.raises(toolchain_lock.LockError) as error:
        toolchain_lock.parse_lock(bad)
    text = str(error.value)
    assert "line 1: entry before the first" in text
    assert "line 3: packaging has no --hash" in text
    assert "line 4: not an exact" in text and "unknown section [extras]" in text


def test_lock_disagreeing_with_a_pin_is_named(tmp_path):
    lock = toolchain_lock.parse_lock(write_lock(
        tmp_path / "l", f"# [build]\nsetuptools==80.0.0 --hash=sha256:{H1}\n"))
    problems = toolchain_lock.check_against_pins(lock, {"setuptools": "80.9.0", "ninja": "1"})
    assert problems == ["ninja==1: not in l",
                        "setuptools: toolchain.toml pins 80.9.0, l has 80.0.0 (line 2)"]


def test_install_plan_torch_only_when_needed_each_section_its_own_index(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLFORGE_INDEX", raising=False)
    monkeypatch.delenv("SGLFORGE_TORCH_INDEX", raising=False)
    lock = toolchain_lock.parse_lock(write_lock(tmp_path / "l", f"""\
# [build]
setuptools==80.9.0 --hash=sha256:{H1}
# [torch-deps]
sympy==1.14.0 --hash=sha256:{H1}
# [torch]
torch==2.13.0+cu130 --hash=sha256:{H2}
"""))
    plan = toolchain_lock.install_plan(lock, False, None, "https://t.example/cu130")
    assert [p[0] for p in plan] == ["build"]
    options = plan[0][1]
    assert {"--require-hashes", "--no-deps"} <= set(options)
    assert options[-2:] == ["--index-url", toolchain_lock.DEFAULT_INDEX]
    plan = toolchain_lock.install_plan(lock, True, "https://mirror.example/simple",
                                       "https://t.example/cu130")
    assert [(p[0], p[1][-1]) for p in plan] == [
        ("build", "https://mirror.example/simple"), ("torch-deps", "https://mirror.example/simple"),
        ("torch", "https://t.example/cu130")]
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
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
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
    lock = toolchain_lock.parse_lock(write_lock(
        tmp_path / "l", f"# [torch]\nfakelib==2.13.0+cu130 --hash=sha256:{digest}\n"))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"file://{tmp_path / 'elsewhere'}")
    [command] = toolchain_lock.install_commands(sys.executable, lock, True, None,
                                                str(tmp_path / "torch-index"), tmp_path / "req")
    assert command[command.index("--find-links") + 1] == str(tmp_path / "torch-index")
    target = tmp_path / "site"
    ok = subprocess.run([*command, "--target", str(target), "--no-compile"],
                        env=toolchain_lock.pip_env(), capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stderr
    assert "2.13.0+cu130" in (target / "fakelib" / "__init__.py").read_text()
    wrong = toolchain_lock.parse_lock(write_lock(
        tmp_path / "w", f"# [torch]\nfakelib==2.13.0+cu130 --hash=sha256:{H1}\n"))
    [command] = toolchain_lock.install_commands(sys.executable, wrong, True, None,
                                                str(tmp_path / "torch-index"), tmp_path / "req2")
    bad = subprocess.run([*command, "--target", str(tmp_path / "site2"), "--no-compile"],
                         env=toolchain_lock.pip_env(), capture_output=True, text=True,
                         check=False)
    assert bad.returncode != 0 and "hash" in bad.stderr.lower()
    assert not (tmp_path / "site2" / "fakelib").exists()


def test_a_torch_of_another_variant_is_refused(tmp_path, monkeypatch):
    (tmp_path / "toolchain.toml").write_text(
        f'cuda = "13.0"\npython = "{sys.version_info.major}.{sys.version_info.minor}"\n'
        'torch = "2.13.0+cu130"\n[build-requires]\n')
    toolchain = load_toolchain(tmp_path / "toolchain.toml")
    installed = {"torch": "2.13.0+cpu"}
    monkeypatch.setattr(toolchain_mod, "installed_version", installed.get)
    with pytest.raises(SglforgeError, match=r"torch: pinned 2.13.0\+cu130, installed 2.13.0\+cpu"):
        toolchain_mod.fingerprint(toolchain, None, ["torch"])
    installed["torch"] = "2.13.0"  # the PyPI build: not the pinned variant either
    with pytest.raises(SglforgeError, match="installed 2.13.0$|installed 2.13.0\n"):
        toolchain_mod.fingerprint(toolchain, None, ["torch"])
    installed["torch"] = "2.13.0+cu130"
    assert toolchain_mod.fingerprint(toolchain, None, ["torch"]).torch == "2.13.0+cu130"


def test_toolchain_toml_index_keys_are_read(tmp_path):
    (tmp_path / "t.toml").write_text('cuda = "13.0"\npython = "3.12"\n'
                                     'torch = "2.13.0+cu130"\nindex = "https://m.example/simple"\n'
                                     'torch-index = "https://t.example/cu130"\n')
    data = tomllib.loads((tmp_path / "t.toml").read_text())
    toolchain = load_toolchain(tmp_path / "t.toml")
    assert toolchain.index == data["index"] and toolchain.torch_index == data["torch-index"]
