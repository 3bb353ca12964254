"""`<dist-info>/sglforge-build.json`: what a wheel was built from. The one owner of the format.

The build writes it (`normalize.postprocess` stamps the wheel's version in); the smoke reads it
from wheel files (`wheel.wheelset`) and from installed dist-info directories
(`smoke.environment`); tests fabricate it through the same type. The file, not the manifest's
copy, is the authority.

Every reader relies on `REQUIRED`; the rest is what a build records besides (absent in wheels
fabricated by hand). Keys this version does not know are kept as they are (`extra`), so a
newer build's wheel still loads and its provenance is reported whole. Bad input is an
SglforgeError naming the wheel (or file) and the key, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglforge.base.errors import SglforgeError
from sglforge.wheel.members import read_member

PROVENANCE_FILE = "sglforge-build.json"
FORMAT = 2  # 2: the wheel carries an SBOM (wheel/sbom.py); its entries name their sources
REQUIRED = ("upstream", "commit", "version", "cuda_archs", "requires_torch", "toolchain")
_OPTIONAL_STR = (
    "generated_by",
    "wheel",
    "url",
    "subdir",
    "series_sha256",
    "recipe_sha256",
    "build_root",
    "content_key",
    "tree",
    "sha256",
    "sdist",
    "target",
    "unsandboxed",
)
_OPTIONAL_INT = ("format", "source_date_epoch")
_OPTIONAL_OBJECT_LISTS = ("sources", "patches", "embeds", "substitutes")
_OPTIONAL_BOOL = ("dev",)


@dataclass(frozen=True)
class Provenance:
    # what every reader relies on
    upstream: str
    commit: str  # the pinned commit; an archive upstream: "sha256:<hex>"
    version: str  # the wheel's version; the build leaves it "" until post-processing stamps it
    cuda_archs: tuple[str, ...]
    requires_torch: str | None  # the exact torch the wheel is ABI-bound to
    toolchain: dict[str, str | None]
    # what `sglforge build` records besides (None: not recorded)
    format: int | None = None
    generated_by: str | None = None
    wheel: str | None = None  # the recipe
    url: str | None = None
    subdir: str | None = None
    sources: tuple[dict[str, Any], ...] | None = None  # pinned children: name, commit, sha256,
    #                                                     tree (the tree the build used)
    patches: tuple[dict[str, Any], ...] | None = None  # series entries: name, sha256
    series_sha256: str | None = None
    # the upstream's `git write-tree` after the series: what was compiled (builder/verify.py
    # checks it; a peer re-derives it with git alone)
    tree: str | None = None
    sha256: str | None = None  # an archive upstream's sha256 (then `commit` is sha256:<hex>)
    sdist: str | None = None  # an sdist upstream: "name==version" from the package index
    embeds: tuple[dict[str, Any], ...] | None = None  # an archive's embedded trees (claims)
    target: str | None = None  # the build target (targets/<name>.toml); None: the product
    recipe_sha256: str | None = None
    build_requires: dict[str, str | None] | None = None
    source_date_epoch: int | None = None
    build_root: str | None = None
    content_key: str | None = None
    removed: tuple[str, ...] | None = None  # build litter dropped by post-processing
    dev: bool | None = None  # True: `build --dev` (incremental; verify and the smoke refuse it)
    # [substitutes]: pinned inputs built from a local directory instead (sources/substitute.py):
    # name, pinned, url, tree, path, reason; such a wheel never leaves the host
    substitutes: tuple[dict[str, Any], ...] | None = None
    # "--unsafe-no-sandbox": upstream build code ran without the sandbox (builder/sandbox.py)
    unsandboxed: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    # -- JSON ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None and f.name not in REQUIRED):
                continue
            if isinstance(value, tuple):
                value = [dict(v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                value = dict(value)
            out[f.name] = value
        return out

    def dumps(self) -> bytes:
        """The file's bytes (stable: sorted keys, so equal provenance gives equal wheels)."""
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: Any, where: str) -> Provenance:
        """Validate a parsed sglforge-build.json; `where` names the wheel or file in errors."""
        if not isinstance(data, dict):
            raise SglforgeError(
                f"{where}: {PROVENANCE_FILE} must be a JSON object, got {type(data).__name__}"
            )
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise SglforgeError(
                f"{where}: provenance lacks {', '.join(missing)}",
                hint="not written by `sglforge build`; rebuild the wheel",
            )

        def bad(key: str, what: str) -> SglforgeError:
            return SglforgeError(
                f"{where}: provenance key '{key}' must be {what}, got {json.dumps(data[key])[:80]}"
            )

        for key in ("upstream", "commit", "version", *_OPTIONAL_STR):
            if (
                key in data
                and not isinstance(data[key], str)
                and (key in REQUIRED or data[key] is not None)
            ):
                raise bad(key, "a string")
        for key in _OPTIONAL_INT:
            if data.get(key) is not None and (
                not isinstance(data[key], int) or isinstance(data[key], bool)
            ):
                raise bad(key, "an integer")
        for key in _OPTIONAL_BOOL:
            if data.get(key) is not None and not isinstance(data[key], bool):
                raise bad(key, "true or false")
        for key in ("cuda_archs", "removed"):
            if (key in REQUIRED or data.get(key) is not None) and not _str_list(data[key]):
                raise bad(key, "a list of strings")
        if data["requires_torch"] is not None and not isinstance(data["requires_torch"], str):
            raise bad("requires_torch", "a string or null")
        for key in ("toolchain", "build_requires"):
            if (key in REQUIRED or data.get(key) is not None) and not _str_map(data[key]):
                raise bad(key, "an object of strings (or nulls)")
        for key in _OPTIONAL_OBJECT_LISTS:
            if data.get(key) is not None and not (
                isinstance(data[key], list) and all(isinstance(v, dict) for v in data[key])
            ):
                raise bad(key, "a list of objects")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values = {k: data.get(k) for k in known}
        for key in ("cuda_archs", "removed", *_OPTIONAL_OBJECT_LISTS):
            if values[key] is not None:
                values[key] = tuple(values[key])
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    # -- files --------------------------------------------------------------------------------

    @staticmethod
    def member(dist_info: str) -> str:
        """The file's path inside a wheel whose dist-info directory is `dist_info`."""
        return f"{dist_info}/{PROVENANCE_FILE}"

    def write(self, members: dict[str, bytes], dist_info: str) -> None:
        """Stamp this provenance into a wheel's member map (name -> bytes)."""
        members[self.member(dist_info)] = self.dumps()


def dev_build_problem(provenance: Provenance | dict, where: str) -> str | None:
    """Why a wheel may not be treated as a release build (verify, the smoke), or None."""
    dev = (
        provenance.dev
        if isinstance(provenance, Provenance)
        else (provenance.get("dev") if isinstance(provenance, dict) else None)
    )
    if dev is True:
        return (
            f"{where} is a dev build (`sglforge build --dev`: incremental, not "
            "reproducible); rebuild it without --dev"
        )
    return None


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) or v is None for v in value.values())


def read_json(wheel: Path) -> Any:
    """The parsed sglforge-build.json of a wheel file, not yet validated."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(f".dist-info/{PROVENANCE_FILE}")
            ]
            if not names:
                raise SglforgeError(
                    f"{wheel}: no <name>-<version>.dist-info/{PROVENANCE_FILE}; "
                    "not a wheel built by sglforge",
                    hint="rebuild it with `nox -s build`",
                )
            text = read_member(archive, names[0], wheel, PROVENANCE_FILE)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise SglforgeError(f"{wheel}: not a valid wheel ({exc})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SglforgeError(f"{wheel}: {PROVENANCE_FILE} is not valid JSON: {exc}") from None


def read(wheel: Path) -> Provenance:
    """The validated provenance of a wheel file."""
    return Provenance.from_json(read_json(wheel), str(wheel))
