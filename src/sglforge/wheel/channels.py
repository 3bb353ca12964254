"""Channels and promotion without rebuild (issue 24).

An index root holds one PEP 503 index per channel (`DEST/<channel>/simple`, `.../files`,
written by wheel/index.py). `channels.toml` in the project says what each channel is:

    [candidate]                  # an entry channel: `sglforge publish DEST --channel candidate`

    [stable]
    from = "candidate"           # filled only by `sglforge promote`, from this channel
    require-checks = ["equivalence", "reference"]   # must be in the receipt, and passed
    require-signature = true     # the receipt's .sig must verify ...
    allowed-signers = "keys/allowed_signers"        # ... against this file (project-relative)
    identity = "sglforge-qualification"

`promote --receipt R --to stable` copies exactly the wheels receipt R names from the `from`
channel's index into the target channel's index: the same bytes (each sha256 is checked
against the receipt while copying), only if the receipt passed (result pass, every enforced
check passed) and has every check the channel requires, and is signed where a key is required.
The target index stays append-only (wheel/index.py refuses other bytes under a published
name); the receipt itself is kept beside it (`receipts/<sha256>.json`), so what made a wheel
stable can be read back. Promotion works on local index directories.

Signatures (issue 31 item 4). Where the channel has `require-signature = true`, or the caller
names `--allowed-signers FILE`, the receipt must carry a signature that verifies against that
file for the channel's `identity`: an unsigned receipt ("unsigned"), a signature by a key the
file does not allow, a receipt changed after signing, and a missing or empty allowed-signers
file are refused. Elsewhere an unsigned receipt is promoted with a warning that says so (and a
signed one is still verified where the allowed-signers file exists). The receipt and its
signature are read once: the bytes verified are the bytes judged and kept; the files are not
read again (a file swapped meanwhile changes nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from sglforge.base.errors import ConfigErrors, SglforgeError
from sglforge.base.tomlfile import Problems, TableReader, key_line, load_toml
from sglforge.wheel import index

CHANNELS_FILE = "channels.toml"
_CHANNEL = re.compile(r"[a-z][a-z0-9-]{0,39}")
RECEIPTS = "receipts"


@dataclass(frozen=True)
class Channel:
    name: str
    promote_from: str | None  # None: an entry channel that `publish --channel` writes
    require_checks: tuple[str, ...] = ()
    require_signature: bool = False
    allowed_signers: Path | None = None
    identity: str = "sglforge"


def load_channels(path: Path, project_root: Path) -> dict[str, Channel]:
    data, text = load_toml(path)
    problems = Problems(path)
    channels: dict[str, Channel] = {}
    for name, table in data.items():
        if not _CHANNEL.fullmatch(name):
            problems.add(f"[{name}]: a channel name is lowercase letters, digits and '-'")
            continue
        start = next(
            (
                i
                for i, line in enumerate(text.splitlines(), 1)
                if re.match(r"^\s*\[\s*" + re.escape(name) + r"\s*\]", line)
            ),
            1,
        )
        if not isinstance(table, dict):
            problems.add(f"{name}: expected a [{name}] table")
            continue
        r = TableReader(table, problems, f"[{name}]", lambda key, s=start: key_line(text, s, key))
        signers = r.str("allowed-signers")
        channel = Channel(
            name=name,
            promote_from=r.str("from"),
            require_checks=tuple(r.str_list("require-checks") or []),
            require_signature=r.bool("require-signature", default=False),
            allowed_signers=project_root / signers if signers else None,
            identity=r.str("identity") or "sglforge",
        )
        if channel.require_signature and channel.allowed_signers is None:
            r.error("require-signature", 'needs allowed-signers = "FILE" to verify against')
        r.finish()
        channels[name] = channel
    for channel in channels.values():
        if channel.promote_from is not None and channel.promote_from not in channels:
            problems.add(
                f"[{channel.name}] from = {channel.promote_from!r}: no such channel "
                f"(known: {', '.join(sorted(channels))})"
            )
        if channel.promote_from == channel.name:
            problems.add(f"[{channel.name}] from = itself")
    if not channels:
        problems.add("defines no channel")
    problems.raise_if_any()
    return channels


def channel_named(channels: dict[str, Channel], name: str, path: Path) -> Channel:
    if name not in channels:
        raise SglforgeError(
            f"no channel {name!r} in {path}", hint=f"known: {', '.join(sorted(channels))}"
        )
    return channels[name]


def publish_dest(dest: str, channels: dict[str, Channel], name: str, path: Path) -> str:
    """Where `publish --channel NAME` writes; a promoted channel is refused (its wheels come
    only through `promote`, with a receipt)."""
    channel = channel_named(channels, name, path)
    if channel.promote_from is not None:
        raise SglforgeError(
            f"channel {name!r} is filled only by `sglforge promote --receipt R "
            f"--to {name}` (from {channel.promote_from!r}, {path}); publish "
            f"to {channel.promote_from!r} instead"
        )
    return dest.rstrip("/") + "/" + name


@dataclass(frozen=True)
class Promoted:
    channel: str
    published: index.Published
    receipt_copy: Path
    signed_by: str | None
    warnings: tuple[str, ...] = ()  # e.g. the receipt is unsigned (where none is required)
    signed: bool = False  # the receipt carried a signature (verified or not: signed_by)


def judge_receipt(receipt, channel: Channel) -> list[str]:
    """Why `receipt` may not enter `channel` (empty: it may)."""
    data = receipt.data
    problems = []
    if data.get("result") != "pass":
        problems.append(
            f"the smoke run's result is {data.get('result')!r}, not 'pass'"
            + (f" ({data.get('failure')})" if data.get("failure") else "")
        )
    substituted = data.get("substituted") or {}
    if substituted:
        problems.append(
            "the qualified stack holds wheels built with substituted inputs ("
            + "; ".join(
                f"{name}: {', '.join(map(str, subs))}" for name, subs in sorted(substituted.items())
            )
            + "): local use only"
        )
    failed = [c for c in data["checks"] if not c["passed"] and c.get("enforced", True)]
    problems += [f"check {c['name']!r} failed: {str(c.get('detail', ''))[:200]}" for c in failed]
    for name in channel.require_checks:
        check = receipt.check(name)
        if check is None:
            problems.append(
                f"channel {channel.name!r} requires check {name!r}; the receipt has none"
            )
        elif not check["passed"]:
            if check.get("enforced", True):
                continue  # already named above
            problems.append(
                f"channel {channel.name!r} requires check {name!r} to pass; it "
                f"failed (not enforced by the profile): "
                f"{str(check.get('detail', ''))[:200]}"
            )
    return problems


def _local_only(wheel: Path) -> str | None:
    """Why an sglforge wheel must not be promoted (built with [substitutes]), or None; a wheel
    without sglforge provenance (a third-party pin) is not ours to judge."""
    from sglforge.sources.substitute import substitute_problem
    from sglforge.wheel.provenance import read_json

    if not wheel.name.endswith(".whl"):
        return None
    try:
        data = read_json(wheel)
    except SglforgeError:
        return None
    return substitute_problem(
        data.get("substitutes") if isinstance(data, dict) else None, str(wheel)
    )


def promote(
    root: Path,
    receipt_path: Path,
    to: str,
    channels: dict[str, Channel],
    channels_path: Path,
    allowed_signers: Path | None = None,
) -> Promoted:
    from sglforge.base.fs import atomic_write_bytes, sha256_file
    from sglforge.qualification.receipt import load_receipt

    channel = channel_named(channels, to, channels_path)
    if channel.promote_from is None:
        raise SglforgeError(
            f"channel {to!r} has no `from` in {channels_path}: it is written by "
            "`publish --channel`, not promoted into"
        )
    receipt = load_receipt(receipt_path)  # read once: these bytes are verified and kept
    signed_by, warnings = _check_signature(receipt, channel, channels_path, allowed_signers)
    problems = judge_receipt(receipt, channel)
    if problems:
        raise ConfigErrors(f"{receipt_path}: not promoted to {to!r}", problems)
    source = index.LocalTarget(root / channel.promote_from)
    target = index.LocalTarget(root / to)
    files: list[index.IndexFile] = []
    missing = []
    for pin in receipt.pins:
        known = [f for f in index.existing_files(source, pin.name) if f.sha256 in pin.hashes]
        if not known:
            missing.append(
                f"{pin.name}=={pin.version} (sha256 {pin.hashes[0]}): not in the "
                f"{channel.promote_from!r} index {source.root}"
            )
            continue
        for f in known:
            path = source.root / index.FILES / f.filename
            if not path.is_file():
                missing.append(
                    f"{f.filename}: listed by {source.root}/simple but not in {index.FILES}/"
                )
                continue
            digest = sha256_file(path)
            if digest != f.sha256:
                missing.append(
                    f"{path}: sha256 {digest}, the receipt and index say "
                    f"{f.sha256}: the candidate file changed; not promoted"
                )
                continue
            if problem := _local_only(path):  # whatever the receipt says of it
                missing.append(problem)
                continue
            files.append(
                index.IndexFile(
                    filename=f.filename,
                    project=f.project,
                    sha256=f.sha256,
                    requires_python=f.requires_python,
                    source=path,
                )
            )
    if missing:
        raise ConfigErrors(f"{receipt_path}: not promoted to {to!r}", missing)
    raw = receipt.raw  # the bytes verified and judged, not the file as it is now
    copy = target.root / RECEIPTS / f"{sha256(raw).hexdigest()}.json"
    with target.locked():
        published = index.write_index(target, files)  # copies with the sha256 checked
        if not copy.exists():
            atomic_write_bytes(copy, raw)
            if receipt.signature_bytes is not None:
                atomic_write_bytes(copy.with_name(copy.name + ".sig"), receipt.signature_bytes)
    return Promoted(
        channel=to,
        published=published,
        receipt_copy=copy,
        signed_by=signed_by,
        warnings=tuple(warnings),
        signed=receipt.signed,
    )


def _check_signature(
    receipt, channel: Channel, channels_path: Path, allowed_signers: Path | None
) -> tuple[str | None, list[str]]:
    """The verified signer (None: not verified) and the warnings to print."""
    from sglforge.qualification.receipt import check_allowed_signers, verify_signature

    signers = allowed_signers or channel.allowed_signers
    required = channel.require_signature or allowed_signers is not None
    if required:
        assert signers is not None  # load_channels: require-signature needs allowed-signers
        where = (
            "--allowed-signers"
            if allowed_signers is not None
            else f"[{channel.name}] allowed-signers in {channels_path}"
        )
        check_allowed_signers(
            signers, f"channel {channel.name!r} requires a signed receipt; {where}"
        )
        why = (
            f"channel {channel.name!r} requires a signature ({channels_path})"
            if channel.require_signature
            else "--allowed-signers requires a signature"
        )
        return verify_signature(receipt, signers, channel.identity, why), []
    if not receipt.signed:
        return None, [
            (
                f"{receipt.path} is unsigned: promoted to {channel.name!r} without any "
                f"signature, since {channels_path} does not set require-signature for "
                f"[{channel.name}]; nothing shows who made this receipt"
            )
        ]
    if signers is not None and signers.exists():  # signed: a bad signature is still refused
        return verify_signature(receipt, signers, channel.identity), []
    return None, [
        (
            f"{receipt.path} is signed, but its signature was not verified (no "
            f"allowed-signers for [{channel.name}]); pass --allowed-signers FILE"
        )
    ]
