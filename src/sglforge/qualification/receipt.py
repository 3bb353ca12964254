"""A qualification receipt (issue 24): what one smoke run proved, bound to the exact wheels.

Every smoke run writes `receipt.json` beside its report: the wheel set (the hash-pinned lock's
text and its sha256, every pinned wheel with its sha256), the host (GPUs with compute
capability, driver, CUDA, the NUMA layout the servers were bound to), the profile and its
sha256, the model's identity (identity.py), every check with its threshold, value and result,
the duration, and explicit limitations (the profile's own, plus those the run knows: a tiny
random model, an environment not bound to a lock, a failed or skipped check).

`receipt.json` may be signed with an SSH key (`ssh-keygen -Y sign`, namespace
`sglforge-receipt`, no network): `receipt.json.sig` beside it. Where no ssh-keygen is installed
(the H200 image has none) an Ed25519 key signs through the `cryptography` library instead,
writing the very same SSHSIG armour (PROTOCOL.sshsig: sha512, this namespace), so
`ssh-keygen -Y verify` and `verify_signature` below read both alike.

`verify_receipt` answers "does this receipt belong to exactly these wheels?": its lock text
hashes to its wheel-set digest, its wheel list is that lock's pins, every pin has a wheel in
the given directories whose sha256 the pin allows, and no wheel there is foreign to the
receipt or carries other bytes than the pin allows (a tampered wheel). With allowed signers,
the signature must verify too. `promote` (wheel/channels.py) builds on it.

A receipt and its signature are each read once (`load_receipt`): the bytes the signature is
verified over are the bytes parsed, judged and kept by promote; nothing reads the files again,
so replacing them meanwhile changes nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.fs import atomic_write_text, read_capped, sha256_file
from sglforge.base.requirements import PinnedRequirement, parse_pinned

RECEIPT_NAME = "receipt.json"
KIND = "sglforge-qualification-receipt"
SCHEMA = 1
NAMESPACE = "sglforge-receipt"  # ssh-keygen -Y namespace: a receipt signature is for receipts
MAX_RECEIPT_BYTES = 16 << 20
MAX_SIGNATURE_BYTES = 64 << 10  # an SSHSIG armour is well under 1 KiB


# -- writing ---------------------------------------------------------------------------------


def wheel_set(lock: Path | None, wheel_dirs: tuple[Path, ...] = ()) -> dict[str, Any] | None:
    """The receipt's wheel set: the lock's text, its sha256, and per pin the allowed sha256s
    and (where one of `wheel_dirs` holds it) the file."""
    if lock is None:
        return None
    data = lock.read_bytes()
    pins, problems = parse_pinned(data.decode("utf-8", errors="replace"))
    if problems:
        raise ConfigErrors(lock, problems)
    files = _wheels_in(wheel_dirs)
    wheels = []
    for pin in pins:
        entry: dict[str, Any] = {
            "name": pin.name,
            "version": pin.version,
            "sha256": list(pin.hashes),
        }
        found = [f for f in files if f.project == pin.name and f.sha256 in pin.hashes]
        if found:
            entry["file"] = found[0].path.name
        wheels.append(entry)
    return {
        "lock": lock.name,
        "digest": hashlib.sha256(data).hexdigest(),
        "lock_text": data.decode("utf-8", errors="replace"),
        "wheels": wheels,
    }


def check_entry(result: Any) -> dict[str, Any]:  # a checks.CheckResult
    return {
        "name": result.name,
        "passed": result.passed,
        "enforced": getattr(result, "enforced", True),
        "threshold": getattr(result, "threshold", None),
        "value": getattr(result, "value", None),
        "detail": result.detail,
        "seconds": result.seconds,
    }


def gates_passed(checks: list[dict[str, Any]], result: str) -> bool:
    return result == "pass" and all(c["passed"] or not c["enforced"] for c in checks)


def build_receipt(
    *,
    report: Any,
    profile: Any,
    wheels: dict | None,
    model: dict | None,
    host: dict,
    duration: float,
    limitations: list[str],
    stack_origins: dict | None = None,
    substituted: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    checks = [check_entry(c) for c in report.checks]
    profile_bytes = Path(profile.path).read_bytes() if Path(profile.path).is_file() else b""
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "started": report.started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "duration_s": round(duration, 3),
        "result": report.result,
        "gates_passed": gates_passed(checks, report.result),
        "failure": report.failure.message if report.failure else None,
        "wheel_set": wheels,
        "stack": report.versions,
        "stack_origins": stack_origins,
        "host": host,
        "profile": {
            "name": profile.name,
            "path": str(profile.path),
            "sha256": hashlib.sha256(profile_bytes).hexdigest(),
        },
        "model": model,
        "checks": checks,
        "limitations": limitations,
        # distribution -> pins built from [substitutes] directories (promotion refuses them)
        "substituted": substituted or {},
    }


def write_receipt(run_dir: Path, receipt: dict[str, Any], sign_key: Path | None = None) -> Path:
    path = run_dir / RECEIPT_NAME
    for stale in (path, path.with_name(path.name + ".sig")):
        stale.unlink(missing_ok=True)
    atomic_write_text(path, json.dumps(receipt, indent=2, default=str) + "\n")
    if sign_key is not None:
        sign(path, sign_key)
    return path


def sign(path: Path, key: Path, namespace: str = NAMESPACE) -> Path:
    """`ssh-keygen -Y sign -n NAMESPACE`: PATH.sig beside it (no network, no agent needed);
    without ssh-keygen, the same signature made with `cryptography` (Ed25519 keys). A receipt
    is signed for `sglforge-receipt`, a bundle's anchor (wheel/bundle.py) for
    `sglforge-bundle`: a signature made for one is never valid as the other."""
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        if importlib.util.find_spec("cryptography") is not None:
            return sign_sshsig(path, key, namespace)
        raise SglforgeError(
            "ssh-keygen not found and the `cryptography` library is not "
            f"importable: cannot sign {path.name}",
            hint="install openssh-client or cryptography, or run without --sign-key",
        )
    out = subprocess.run(
        [keygen, "-Y", "sign", "-f", str(key), "-n", namespace, str(path)],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    sig = path.with_name(path.name + ".sig")
    if out.returncode != 0 or not sig.is_file():
        raise SglforgeError(
            f"signing {path} with {key} failed: {(out.stderr or out.stdout).strip()[:300]}"
        )
    return sig


SSHSIG_MAGIC = b"SSHSIG"
SSHSIG_HASH = "sha512"  # ssh-keygen's default


def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def sign_sshsig(path: Path, key: Path, namespace_name: str = NAMESPACE) -> Path:
    """`ssh-keygen -Y sign -n sglforge-receipt` without ssh-keygen: an OpenSSH Ed25519 private
    key (unencrypted) signs through `cryptography`; RECEIPT.sig holds the SSHSIG armour
    ssh-keygen writes (PROTOCOL.sshsig)."""
    import base64

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        private = serialization.load_ssh_private_key(key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SglforgeError(
            f"signing {path}: cannot read the OpenSSH private key {key}: {exc}"
        ) from None
    if not isinstance(private, Ed25519PrivateKey):
        raise SglforgeError(
            f"signing {path} without ssh-keygen: {key} is not an Ed25519 key",
            hint="use an ed25519 key (ssh-keygen -t ed25519), or install openssh-client",
        )
    public_line = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    public_blob = base64.b64decode(public_line.split()[1])
    message = hashlib.new(SSHSIG_HASH, path.read_bytes()).digest()
    namespace = namespace_name.encode()
    signed = (
        SSHSIG_MAGIC
        + _ssh_string(namespace)
        + _ssh_string(b"")
        + _ssh_string(SSHSIG_HASH.encode())
        + _ssh_string(message)
    )
    signature = _ssh_string(b"ssh-ed25519") + _ssh_string(private.sign(signed))
    blob = (
        SSHSIG_MAGIC
        + (1).to_bytes(4, "big")
        + _ssh_string(public_blob)
        + _ssh_string(namespace)
        + _ssh_string(b"")
        + _ssh_string(SSHSIG_HASH.encode())
        + _ssh_string(signature)
    )
    text = base64.b64encode(blob).decode()
    lines = [text[i : i + 70] for i in range(0, len(text), 70)]  # ssh-keygen wraps at 70
    sig = path.with_name(path.name + ".sig")
    atomic_write_text(
        sig,
        "-----BEGIN SSH SIGNATURE-----\n" + "\n".join(lines) + "\n-----END SSH SIGNATURE-----\n",
    )
    return sig


def write_ed25519_key(path: Path, comment: str = "sglforge") -> str:
    """An unencrypted OpenSSH Ed25519 key pair made with `cryptography` (`ssh-keygen -t ed25519
    -N ""` where ssh-keygen is missing): PATH and PATH.pub; returns the public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    public = (
        private.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    line = f"{public} {comment}\n"
    path.with_name(path.name + ".pub").write_text(line)
    return line


# -- reading and verifying -------------------------------------------------------------------


@dataclass(frozen=True)
class WheelFile:
    path: Path
    project: str
    version: str
    sha256: str


def _wheels_in(dirs: tuple[Path, ...]) -> list[WheelFile]:
    from sglforge.wheel.index import check_filename

    found = []
    for directory in dirs:
        for path in sorted(directory.glob("*.whl")):
            project, version = check_filename(path.name)
            found.append(WheelFile(path, project, version, sha256_file(path)))
    return found


@dataclass(frozen=True)
class Receipt:
    path: Path
    data: dict[str, Any]
    pins: tuple[PinnedRequirement, ...]
    signature: Path | None  # where the signature was read from (None: unsigned)
    raw: bytes = b""  # the receipt's bytes, read once: what `data` was parsed from
    signature_bytes: bytes | None = None  # the signature's bytes, read with them

    @property
    def signed(self) -> bool:
        return self.signature_bytes is not None

    @property
    def digest(self) -> str:
        return self.data["wheel_set"]["digest"]

    def check(self, name: str) -> dict[str, Any] | None:
        return next((c for c in self.data["checks"] if c.get("name") == name), None)


def load_receipt(path: Path) -> Receipt:
    """Read a receipt and check it is self-consistent: its lock text hashes to its digest and
    its wheel list is exactly that lock's pins."""

    def bad(what: str) -> SglforgeError:
        return SglforgeError(f"{path}: {what}")

    raw = read_capped(path, MAX_RECEIPT_BYTES, "receipt")  # the only read of the receipt
    sig = path.with_name(path.name + ".sig")
    signature = None
    if os.path.lexists(sig):  # read now, with the receipt, never again
        signature = read_capped(sig, MAX_SIGNATURE_BYTES, "receipt signature")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise bad(f"invalid JSON ({str(exc).split(';')[0]})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise bad(f"not a {KIND}")
    if data.get("schema") != SCHEMA:
        raise bad(f"schema {data.get('schema')!r}; this sglforge reads {SCHEMA}")
    if not isinstance(data.get("checks"), list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("passed"), bool)
        for c in data["checks"]
    ):
        raise bad("'checks' must be a list of {name, passed, ...}")
    subs = data.get("substituted")
    if subs is not None and not (
        isinstance(subs, dict)
        and all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in subs.values())
    ):
        raise bad("'substituted' must map distribution names to lists of pin names")
    ws = data.get("wheel_set")
    if ws is None:
        raise bad("names no wheel set (the run was not given a lock): it qualifies no wheels")
    if (
        not isinstance(ws, dict)
        or not all(isinstance(ws.get(k), str) for k in ("digest", "lock_text"))
        or not isinstance(ws.get("wheels"), list)
    ):
        raise bad("'wheel_set' needs 'digest', 'lock_text' and 'wheels'")
    actual = hashlib.sha256(ws["lock_text"].encode()).hexdigest()
    if actual != ws["digest"]:
        raise bad(
            f"wheel_set.lock_text hashes to {actual}, not the recorded digest "
            f"{ws['digest']}: the receipt was edited"
        )
    pins, problems = parse_pinned(ws["lock_text"])
    if problems:
        raise ConfigErrors(f"{path}: wheel_set.lock_text", problems)
    listed = {
        (w.get("name"), w.get("version"), tuple(w.get("sha256") or ()))
        for w in ws["wheels"]
        if isinstance(w, dict)
    }
    pinned = {(p.name, p.version, tuple(p.hashes)) for p in pins}
    if listed != pinned:
        raise bad("wheel_set.wheels is not the lock's pins (the receipt was edited)")
    return Receipt(
        path=path,
        data=data,
        pins=tuple(pins),
        signature=sig if signature is not None else None,
        raw=raw,
        signature_bytes=signature,
    )


@dataclass
class Verified:
    receipt: Receipt
    files: list[WheelFile] = field(default_factory=list)  # the wheels the receipt names
    signed_by: str | None = None


def check_allowed_signers(path: Path, what: str) -> None:
    """`path` must be an ssh-keygen allowed_signers file holding at least one signer; `what`
    says where it was named (for the message)."""
    if not path.exists():
        raise SglforgeError(
            f"{what}: the allowed-signers file {path} does not exist, so no signature can be "
            "verified: refused",
            hint="the operator provides it (it is not committed): one line per trusted "
            'qualification key, `<identity> namespaces="sglforge-receipt" <public key>` '
            "(ssh-keygen ALLOWED SIGNERS format), or pass --allowed-signers FILE",
        )
    text = read_capped(path, 1 << 20, "allowed-signers file").decode("utf-8", "replace")
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        raise SglforgeError(
            f"{what}: the allowed-signers file {path} names no signer: refused",
            hint="add the qualification host's public key to it",
        )


def verify_signature(
    receipt: Receipt, allowed_signers: Path, identity: str, what: str = "a signature is required"
) -> str:
    """Verify the receipt's signature over exactly `receipt.raw` (the bytes parsed), as read
    by load_receipt: the files on disk are not read again. The signer's identity, or an
    SglforgeError (unsigned: the message says "unsigned"; forged or changed: "does not
    verify")."""
    if receipt.signature_bytes is None:
        raise SglforgeError(
            f"{receipt.path}: unsigned (no {receipt.path.name}.sig beside it), and {what}: refused",
            hint="sign receipts on the qualification host: `sglforge smoke "
            "--sign-key KEY` (ssh-keygen -Y sign)",
        )
    check_allowed_signers(allowed_signers, str(receipt.path))
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise SglforgeError("ssh-keygen not found: cannot verify the receipt's signature")
    with tempfile.TemporaryDirectory(prefix="sglforge-sig-") as tmp:
        sig = Path(tmp) / "receipt.sig"
        sig.write_bytes(receipt.signature_bytes)
        out = subprocess.run(
            [
                keygen,
                "-Y",
                "verify",
                "-f",
                str(allowed_signers),
                "-I",
                identity,
                "-n",
                NAMESPACE,
                "-s",
                str(sig),
            ],
            input=receipt.raw,
            capture_output=True,
            check=False,
        )
    if out.returncode != 0:
        said = (out.stderr or out.stdout).decode("utf-8", "replace").strip()[:300]
        raise SglforgeError(
            f"{receipt.signature}: signature does not verify for {identity!r} "
            f"with {allowed_signers}: refused (made by a key that file does not "
            f"allow for {identity!r}, or the receipt changed after it was "
            f"signed): {said}"
        )
    return identity


def match_wheels(receipt: Receipt, files: list[WheelFile], where: str) -> list[WheelFile]:
    """The files that are the receipt's wheels; anything else there is a problem."""
    problems = []
    by_project = {p.name: p for p in receipt.pins}
    chosen: list[WheelFile] = []
    for f in files:
        pin = by_project.get(f.project)
        if pin is None:
            problems.append(f"{f.path.name}: not in the receipt's wheel set")
        elif f.version != pin.version and not _same_version(f.version, pin.version):
            problems.append(f"{f.path.name}: version {f.version}, the receipt pins {pin.version}")
        elif f.sha256 not in pin.hashes:
            problems.append(
                f"{f.path.name}: sha256 {f.sha256} is not the receipt's "
                f"({', '.join(pin.hashes)}): not the qualified bytes"
            )
        else:
            chosen.append(f)
    have = {f.project for f in chosen}
    problems += [
        f"{p.name}=={p.version}: no wheel with sha256 {p.hashes[0]} in {where}"
        for p in receipt.pins
        if p.name not in have
    ]
    if problems:
        raise ConfigErrors(f"{receipt.path} against {where}", problems)
    return chosen


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return False


def verify_receipt(
    path: Path,
    wheel_dirs: tuple[Path, ...],
    *,
    allowed_signers: Path | None = None,
    identity: str | None = None,
) -> Verified:
    receipt = load_receipt(path)
    signed_by = None
    if allowed_signers is not None:
        signed_by = verify_signature(receipt, allowed_signers, identity or "sglforge")
    for directory in wheel_dirs:
        if not directory.is_dir():
            raise SglforgeError(f"--wheels {directory}: not a directory")
    where = ", ".join(map(str, wheel_dirs))
    files = match_wheels(receipt, _wheels_in(wheel_dirs), where)
    return Verified(receipt=receipt, files=files, signed_by=signed_by)
