"""The layout under the build root: one value object, so no module spells a path by hand.

    <root>/src/<upstream>           exported upstream work tree (series applied on top)
    <root>/deps/<name>              exported FetchContent sources
    <root>/work/<recipe>/           per-wheel scratch: dist/, build/, site/
    <root>/tools/bin/               wrappers first on a build's PATH (nvcc)
    <root>/tools/ccache.conf        the only ccache configuration a build reads
    <root>/sandbox/<recipe>/        one build step's private HOME and TMP (builder/sandbox.py),
        home/ tmp/                  seen by the build at <root>/home, <root>/tmp and /tmp
    <root>/home, <root>/tmp         HOME and TMPDIR of builds
    <root>/logs/<wheel>.log         one log per wheel
    <root>/out/                     staged wheels of a run (nothing partial reaches wheels/)
    <root>/refresh/<upstream>[-…]   `patches refresh` scratch trees
    <root>/dev/<recipe>/            `build --dev` state of one recipe, parked between builds:
        tree/ build/ deps/<name>/   the work tree, build directory and FetchContent trees
                                    (moved to src/, work/<recipe>/build, deps/ while it builds)
        scratch/                    the strict export + series the tree is synced from
        state.json                  written after a complete sync (builder/devtree.py)
    <root>/dev-wheels/              dev wheels and their manifest.json (never wheels/)
    <root>/check-result.json        the last stack check of `build`, reused when its inputs
                                    are unchanged (check/cache.py)
    <root>/.sglforge-build.lock     one build per root at a time

Wherever the host keeps it, a sandboxed build sees its root at `SANDBOX_PATH`
(builder/sandbox.py binds it there), so the paths a compiler embeds, the content key and the
provenance do not depend on the host's disk layout. Only an `--unsafe-no-sandbox` build
sees (and records) the host path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# where every sandboxed build sees its build root (also the prefix maps' target)
SANDBOX_PATH = Path("/sglforge-build")


@dataclass(frozen=True)
class BuildRoot:
    path: Path

    def src(self, upstream: str) -> Path:
        return self.path / "src" / upstream

    def dep(self, name: str) -> Path:
        return self.path / "deps" / name

    def work(self, recipe: str) -> Path:
        return self.path / "work" / recipe

    @property
    def tools_dir(self) -> Path:
        """Wrappers, the CUDA gap dir and the ccache config: read-only inside a build."""
        return self.path / "tools"

    @property
    def tools_bin(self) -> Path:
        return self.tools_dir / "bin"

    def sandbox(self, recipe: str) -> Path:
        """Host side of one build step's private HOME and TMP (emptied for every step)."""
        return self.path / "sandbox" / recipe

    @property
    def home(self) -> Path:
        return self.path / "home"

    @property
    def tmp(self) -> Path:
        return self.path / "tmp"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def log(self, wheel: str) -> Path:
        return self.logs / f"{wheel}.log"

    @property
    def staging(self) -> Path:
        return self.path / "out"

    def refresh(self, upstream: str, stage: str | None = None) -> Path:
        """Scratch of `patches refresh`: the rebase tree, or `<upstream>-<stage>` beside it."""
        return self.path / "refresh" / (f"{upstream}-{stage}" if stage else upstream)

    def dev(self, recipe: str) -> Path:
        """`build --dev` state of one recipe (builder/devtree.py)."""
        return self.path / "dev" / recipe

    @property
    def dev_wheels(self) -> Path:
        return self.path / "dev-wheels"

    @property
    def check_result(self) -> Path:
        """The last stack check of `build` and a digest of its inputs (check/cache.py)."""
        return self.path / "check-result.json"

    @property
    def lock(self) -> Path:
        return self.path / ".sglforge-build.lock"
