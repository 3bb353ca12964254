"""What the export's tree check costs (issue 32, item 3): for each bare repository given, its
HEAD checked out three times the way `export_source` does it (a repository borrowing the
cache's objects, `git checkout --detach`), then checked against the commit's tree
(sources/exportcheck.py: every file read and hashed back). Prints JSON; the committed
figures are bench/export-check.json.

    python -m bench.export_check /path/to/repo.git [...] --work /tmp/excost
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from sglforge.base.git import git, git_out
from sglforge.sources.exportcheck import check_exported_tree, checkout_pin


def _size(repo: Path, commit: str) -> tuple[int, int]:
    listing = git_out("ls-tree", "-r", "-l", "--end-of-options", commit, git_dir=repo)
    sizes = [line.split()[3] for line in listing.splitlines()]
    return len(sizes), sum(int(s) for s in sizes if s != "-")


def measure(repo: Path, work: Path, runs: int = 3) -> dict:
    commit = git_out("rev-parse", "HEAD", git_dir=repo)
    tree = git_out("rev-parse", f"{commit}^{{tree}}", git_dir=repo)
    checkout, check = [], []
    for i in range(runs):
        dest = work / f"wt{i}"
        shutil.rmtree(dest, ignore_errors=True)
        git("init", "--quiet", "--", str(dest))
        (dest / ".git/objects/info/alternates").write_text(str(repo / "objects") + "\n")
        start = time.perf_counter()
        said = checkout_pin(repo.name, dest, commit)
        middle = time.perf_counter()
        check_exported_tree(
            repo.name, dest / ".git", dest, commit, tree, cache_git_dir=repo, git_said=said
        )
        checkout.append(round(middle - start, 3))
        check.append(round(time.perf_counter() - middle, 3))
        shutil.rmtree(dest)
    files, size = _size(repo, commit)
    return {
        "repo": str(repo),
        "commit": commit,
        "files": files,
        "bytes": size,
        "checkout_s": checkout,
        "check_s": check,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="+", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sglforge-export-check"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(json.dumps([measure(r, args.work) for r in args.repos], indent=1))


if __name__ == "__main__":
    main()
