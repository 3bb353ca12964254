"""`nox -s realcheck`: build real upstream wheels twice and prove they are the same bytes.

For every recipe whose sources are in the cache or reachable (mirrors from --config apply):
  1. fetch (a failure is recorded as `unreachable` with the error; nothing else is tried)
  2. build from clean state (build root's src/deps/work/out removed, no wheel cache) with
     caller venv A, then again with caller venv B (another path, another path length);
     each build runs sglforge's own audits: platform tag / DT_NEEDED, the arch audit
     (cuobjdump) and the path-leak scan (wheel/leaks.py)
  3. compare sha256; leak-scan both wheels again for *both* venvs' paths and the build root
  4. install the wheel with --no-deps into a fresh venv and import its top-level module
     (dependencies such as torch come from caller venv A's site-packages on PYTHONPATH);
     an import that needs a GPU or a missing dependency is recorded, not fatal
  5. write bench/realcheck.json: per recipe result, seconds, size, both sha256, audits,
     import, plus the workarounds this run used (--workarounds FILE, a JSON list of strings)

The caller venvs are made from the toolchain Python (--python) and get the hash-pinned
lockfiles/toolchain.lock (builder/toolchain_lock.py; torch sections only when a selected
recipe needs torch) and sglforge's own dependencies; sglforge itself runs from src/.
Not part of `nox -s tests`: it needs the real sources and takes minutes per recipe.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SGLFORGE_DEPS = ["tomli-w>=1.0", "filelock>=3.12", "unidiff>=1.0,<2"]
TAIL = 25


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(map(str, cmd)) + "\n").encode())
        out.flush()
        return subprocess.run(
            [str(c) for c in cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            check=False,
        ).returncode


def _tail(log: Path, lines: int = TAIL) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _sglforge_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(extra or {})
    return env


def make_caller_venv(python: str, venv: Path, project: Path, with_torch: bool, log: Path) -> Path:
    """A caller venv: the toolchain lock (hash-pinned) plus sglforge's dependencies."""
    sys.path.insert(0, str(ROOT / "src"))
    from sglforge.builder import toolchain_lock
    from sglforge.inputs.toolchain import load_toolchain

    bin_python = venv / "bin" / "python"
    if not bin_python.exists() and _run([python, "-m", "venv", venv], log) != 0:
        raise RuntimeError(f"venv {venv} failed: {_tail(log)}")
    toolchain = load_toolchain(project / "lockfiles" / "toolchain.toml")
    lock = toolchain_lock.parse_lock(project / "lockfiles" / "toolchain.lock")
    commands = toolchain_lock.install_commands(
        str(bin_python),
        lock,
        with_torch,
        toolchain.index,
        toolchain.torch_index,
        venv / "sglforge-requirements",
    )
    for command in commands:
        if _run(command, log, env=toolchain_lock.pip_env()) != 0:
            raise RuntimeError(f"toolchain install into {venv} failed:\n{_tail(log)}")
    # sglforge's own small dependencies (not build inputs), from the default index
    if _run([bin_python, "-m", "pip", "install", "--quiet", *SGLFORGE_DEPS], log) != 0:
        raise RuntimeError(f"installing sglforge's dependencies failed:\n{_tail(log)}")
    return bin_python


def clean_build_state(build_root: Path) -> None:
    for sub in ("src", "deps", "work", "out", "tools", "home", "tmp"):
        shutil.rmtree(build_root / sub, ignore_errors=True)


def build_once(
    python: Path,
    project: Path,
    settings: list[str],
    name: str,
    build_root: Path,
    log: Path,
    out: Path,
) -> tuple[Path | None, float]:
    clean_build_state(build_root)
    started = time.monotonic()
    cmd = [
        python,
        "-m",
        "sglforge",
        "--project",
        project,
        *settings,
        "--build-root",
        build_root,
        "build",
        name,
        "--no-wheel-cache",
    ]
    rc = _run(cmd, log, env=_sglforge_env())
    seconds = time.monotonic() - started
    if rc != 0:
        return None, seconds
    manifest = json.loads((project / "wheels" / "manifest.json").read_text())
    entries = manifest.get("wheels", manifest)
    files = [
        w["file"]
        for w in (entries if isinstance(entries, list) else entries.values())
        if w.get("recipe", w.get("name")) == name or w.get("recipe") == name
    ]
    wheel = project / "wheels" / (files[0] if files else "")
    if not files or not wheel.is_file():
        wheels = sorted((project / "wheels").glob("*.whl"), key=lambda p: p.stat().st_mtime)
        wheel = wheels[-1]
    out.mkdir(parents=True, exist_ok=True)
    copy = out / wheel.name
    shutil.copyfile(wheel, copy)
    return copy, seconds


def top_level(wheel: Path) -> str | None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tops = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        listed = archive.read(tops[0]).decode().split() if tops else []
        packages = [t for t in listed if f"{t}/__init__.py" in names]  # not build_backend.py
        if packages or listed:
            return (packages or listed)[0]
    roots = sorted(
        {n.split("/")[0] for n in names if n.endswith("/__init__.py") and n.count("/") == 1}
    )
    return roots[0] if roots else None


def try_import(python_src: str, wheel: Path, work: Path, deps_site: Path, log: Path) -> dict:
    venv = work / "import-venv"
    shutil.rmtree(venv, ignore_errors=True)
    if _run([python_src, "-m", "venv", venv], log) != 0:
        return {"ok": False, "error": "venv failed"}
    py = venv / "bin" / "python"
    if _run([py, "-m", "pip", "install", "--no-deps", "--no-index", wheel], log) != 0:
        return {"ok": False, "error": "pip install --no-deps failed: " + _tail(log, 5)}
    module = top_level(wheel)
    if module is None:
        return {"ok": False, "error": "no top-level module found"}
    site = subprocess.run(
        [py, "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([site, str(deps_site)]), CUDA_VISIBLE_DEVICES=""
    )
    proc = subprocess.run(
        [py, "-c", f"import {module}; print({module}.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=False,
        timeout=300,
    )
    where = (proc.stdout.strip().splitlines() or [""])[-1]
    ok = proc.returncode == 0 and where.startswith(str(venv))
    error = (proc.stderr.strip().splitlines() or ["?"])[-1] if proc.returncode else None
    return {"ok": ok, "module": module, "file": where or None, "error": error}


def check_recipe(
    args: argparse.Namespace,
    name: str,
    recipe_upstream: str,
    venvs: dict[str, Path],
    settings: list[str],
) -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    from sglforge.wheel import leaks

    work = args.work / name
    shutil.rmtree(work, ignore_errors=True)
    log = work / "realcheck.log"
    entry: dict = {"recipe": name, "upstream": recipe_upstream}
    started = time.monotonic()
    rc = _run(
        [
            venvs["a"],
            "-m",
            "sglforge",
            "--project",
            args.project,
            *settings,
            "--build-root",
            args.build_root,
            "fetch",
            recipe_upstream,
        ],
        log,
        env=_sglforge_env(),
    )
    entry["fetch_seconds"] = round(time.monotonic() - started, 1)
    if rc != 0:
        entry.update(result="unreachable", error=_tail(log, 12))
        return entry
    builds = {}
    for label in ("a", "b"):
        blog = work / f"build-{label}.log"
        wheel, seconds = build_once(
            venvs[label], args.project, settings, name, args.build_root, blog, work / f"out-{label}"
        )
        builds[label] = {"seconds": round(seconds, 1), "log": str(blog)}
        if wheel is None:
            entry.update(result="build-failed", builds=builds, error=_tail(blog, 40))
            return entry
        builds[label].update(
            wheel=wheel.name, sha256=_sha256(wheel), size=wheel.stat().st_size, path=str(wheel)
        )
    entry["builds"] = builds
    a, b = Path(builds["a"]["path"]), Path(builds["b"]["path"])
    identical = builds["a"]["sha256"] == builds["b"]["sha256"]
    needles = sorted(
        {
            str(args.build_root),
            *(str(v.parent.parent) for v in venvs.values()),
            *(os.path.realpath(v.parent.parent) for v in venvs.values()),
        }
    )
    found = leaks.scan_wheel(a, needles) + leaks.scan_wheel(b, needles)
    entry["leak_scan"] = {
        "needles": needles,
        "leaks": [{"member": x.member, "needle": x.needle, "count": x.count} for x in found],
    }
    entry["arch_audit"] = "passed in both builds (sglforge build fails otherwise)"
    code = "import site; print(site.getsitepackages()[0])"
    deps_site = Path(
        subprocess.run(
            [venvs["a"], "-c", code], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    entry["import"] = try_import(args.python, a, work, deps_site, work / "import.log")
    entry["result"] = (
        "pass" if identical and not found else ("not-reproducible" if not identical else "leaks")
    )
    entry["size"] = a.stat().st_size
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realcheck", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="recipes (default: all)")
    parser.add_argument("--project", type=Path, default=ROOT)
    parser.add_argument("--config", type=Path, help="sglforge config (mirrors)")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sglforge-realcheck"))
    parser.add_argument("--build-root", type=Path, default=Path("/tmp/sglforge-realcheck-root"))
    parser.add_argument(
        "--python",
        default=shutil.which("python3") or sys.executable,
        help="the toolchain interpreter the caller venvs are made from",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "realcheck.json")
    parser.add_argument("--workarounds", type=Path, help="JSON list of workaround notes")
    parser.add_argument(
        "--blockers",
        type=Path,
        help="JSON {recipe: note}: what blocks a recipe beyond the fetch error",
    )
    args = parser.parse_args(argv)
    args.project, args.work = args.project.resolve(), args.work.resolve()

    sys.path.insert(0, str(ROOT / "src"))
    from sglforge.inputs.pins import parse_lockfile
    from sglforge.inputs.recipes import load_recipes
    from sglforge.inputs.toolchain import load_toolchain

    lock = parse_lockfile(args.project / "lockfiles" / "upstreams.toml")
    toolchain = load_toolchain(args.project / "lockfiles" / "toolchain.toml")
    recipes = load_recipes(args.project / "recipes", lock, toolchain)
    names = args.names or sorted(recipes)
    with_torch = any(
        recipes[n].requires_torch_abi or "torch" in recipes[n].build_requires for n in names
    )
    settings = []
    if args.config:
        settings += ["--config", str(args.config)]
    if args.cache_dir:
        settings += ["--cache-dir", str(args.cache_dir)]
    venvs = {
        "a": make_caller_venv(
            args.python,
            args.work / "caller-a" / "venv",
            args.project,
            with_torch,
            args.work / "venv-a.log",
        ),
        "b": make_caller_venv(
            args.python,
            args.work / "elsewhere" / "caller-b-longer-path" / "venv",
            args.project,
            with_torch,
            args.work / "venv-b.log",
        ),
    }
    results = []
    for name in names:
        print(f"==> {name}", flush=True)
        entry = check_recipe(args, name, recipes[name].upstream, venvs, settings)
        builds = entry.get("builds", {})
        print(
            f"    {entry['result']}: "
            + ", ".join(
                f"{k} {v.get('seconds')}s {v.get('sha256', '')[:16]}" for k, v in builds.items()
            ),
            flush=True,
        )
        results.append(entry)
    if args.out.is_file():  # keep earlier results for recipes not checked this time
        earlier = json.loads(args.out.read_text()).get("recipes", [])
        checked = {r["recipe"] for r in results}
        results = [r for r in earlier if r["recipe"] not in checked] + results
        results.sort(key=lambda r: r["recipe"])
    report = {
        "format": 1,
        "generated_by": "bench/realcheck.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cores": os.cpu_count(), "python": args.python},
        "project": str(args.project),
        "build_root": str(args.build_root),
        "caller_venvs": {k: str(v.parent.parent) for k, v in venvs.items()},
        "workarounds": json.loads(args.workarounds.read_text()) if args.workarounds else [],
        "blockers": json.loads(args.blockers.read_text()) if args.blockers else {},
        "recipes": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    print(render(results))
    return 0 if all(r["result"] in ("pass", "unreachable") for r in results) else 1


def render(results: list[dict]) -> str:
    lines = [f"{'recipe':<22} {'result':<17} {'time a/b (s)':<14} {'size':>11}  sha256 a / b"]
    for r in results:
        builds = r.get("builds", {})
        a, b = builds.get("a", {}), builds.get("b", {})
        times = "/".join(str(x.get("seconds", "-")) for x in (a, b)) if builds else "-"
        lines.append(
            f"{r['recipe']:<22} {r['result']:<17} {times:<14} {r.get('size', 0):>11}  "
            f"{a.get('sha256', '-')[:16]} / {b.get('sha256', '-')[:16]}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
