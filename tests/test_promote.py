"""Receipts and promotion (issue 24, items 5-6), end to end on a local index: a fixture stack
published to the candidate channel, a fixture receipt for exactly its wheels (wheel set from
the real lock, signed with a real `ssh-keygen -Y sign` key), `receipt verify` (a tampered or
foreign wheel fails), and `promote --to stable` copying the same bytes; refusals are clear
errors: wrong digest, failed gate, missing required check, unsigned where a key is required,
publishing straight into stable. Issue 31 item 4: the committed channels.toml's stable
channel takes only a receipt whose signature verifies (unsigned, foreign key, changed after
signing, no allowed-signers file: refused, named); the receipt is read once, so swapping the
file during promote changes nothing; an unsigned promotion where none is required warns."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.qualification import receipt as receipt_module
from sglforge.qualification.receipt import KIND, SCHEMA, wheel_set
from sglforge.wheel import channels
from tests.test_publish import _stack

CHANNELS = """
[candidate]

[stable]
from = "candidate"
require-checks = ["equivalence", "reference"]
require-signature = true
allowed-signers = "keys/allowed_signers"
identity = "qualifier"
"""


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SGLFORGE_PROJECT"}
    return subprocess.run(
        [sys.executable, "-m", "sglforge", "--project", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _receipt(
    root: Path, path: Path, *, checks: list[dict] | None = None, result: str = "pass"
) -> Path:
    checks = (
        checks
        if checks is not None
        else [
            {"name": "equivalence", "passed": True, "enforced": True, "threshold": "identical"},
            {"name": "reference", "passed": True, "enforced": True, "threshold": {"min_top1": 1.0}},
        ]
    )
    ws = wheel_set(root / "lockfiles" / "wheels.lock", (root / "wheels", root / "wheelhouse"))
    data = {
        "kind": KIND,
        "schema": SCHEMA,
        "result": result,
        "failure": None,
        "gates_passed": result == "pass" and all(c["passed"] for c in checks),
        "wheel_set": ws,
        "checks": checks,
        "limitations": ["fixture receipt"],
    }
    path.write_text(json.dumps(data, indent=2))
    return path


def _sign(key: Path, receipt: Path) -> None:
    receipt.with_name(receipt.name + ".sig").unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", "sglforge-receipt", str(receipt)],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def setup(tmp_path: Path):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    root = _stack(tmp_path)
    (root / "channels.toml").write_text(CHANNELS)
    keys = root / "keys"
    keys.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "qualifier", "-f", str(keys / "id")],
        check=True,
    )
    (keys / "allowed_signers").write_text("qualifier " + (keys / "id.pub").read_text())
    dest = tmp_path / "index"
    result = _cli(
        root,
        "publish",
        str(dest),
        "--channel",
        "candidate",
        "--wheelhouse",
        str(root / "wheelhouse"),
    )
    assert result.returncode == 0, result.stderr
    return root, dest, keys


def test_receipt_verify_accepts_exactly_its_wheels_and_rejects_a_tampered_one(
    setup, tmp_path: Path
) -> None:
    root, _, keys = setup
    receipt = _receipt(root, tmp_path / "receipt.json")
    ok = _cli(
        root,
        "receipt",
        "verify",
        str(receipt),
        "--wheels",
        str(root / "wheels"),
        "--wheels",
        str(root / "wheelhouse"),
    )
    assert ok.returncode == 0, ok.stderr
    assert "exactly the 3 wheels" in ok.stdout and "unsigned" in ok.stdout

    tampered = tmp_path / "tampered"
    shutil.copytree(root / "wheels", tampered)
    wheel = next(tampered.glob("sglang-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    bad = _cli(
        root,
        "receipt",
        "verify",
        str(receipt),
        "--wheels",
        str(tampered),
        "--wheels",
        str(root / "wheelhouse"),
    )
    assert bad.returncode == 2
    assert (
        f"{wheel.name}: sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()} is not "
        "the receipt's" in bad.stderr
    )
    assert "Traceback" not in bad.stderr

    missing = _cli(root, "receipt", "verify", str(receipt), "--wheels", str(root / "wheels"))
    assert missing.returncode == 2 and "tinydep==1.0: no wheel with sha256" in missing.stderr

    extra = tmp_path / "extra"
    shutil.copytree(root / "wheels", extra)
    shutil.copy(next((root / "wheelhouse").glob("*.whl")), extra)
    (extra / "other-1.0-py3-none-any.whl").write_bytes(b"x")
    foreign = _cli(root, "receipt", "verify", str(receipt), "--wheels", str(extra))
    assert foreign.returncode == 2
    assert "other-1.0-py3-none-any.whl: not in the receipt's wheel set" in foreign.stderr

    edited = json.loads(receipt.read_text())
    edited["wheel_set"]["wheels"][0]["sha256"] = ["0" * 64]
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    out = _cli(
        root,
        "receipt",
        "verify",
        str(tmp_path / "edited.json"),
        "--wheels",
        str(root / "wheels"),
        "--wheels",
        str(root / "wheelhouse"),
    )
    assert out.returncode == 2 and "is not the lock's pins" in out.stderr

    _sign(keys / "id", receipt)
    signed = _cli(
        root,
        "receipt",
        "verify",
        str(receipt),
        "--wheels",
        str(root / "wheels"),
        "--wheels",
        str(root / "wheelhouse"),
        "--allowed-signers",
        str(keys / "allowed_signers"),
        "--identity",
        "qualifier",
    )
    assert signed.returncode == 0, signed.stderr
    assert "signature by 'qualifier' verified" in signed.stdout
    receipt.write_text(receipt.read_text().replace('"fixture receipt"', '"edited"'))
    forged = _cli(
        root,
        "receipt",
        "verify",
        str(receipt),
        "--wheels",
        str(root / "wheels"),
        "--wheels",
        str(root / "wheelhouse"),
        "--allowed-signers",
        str(keys / "allowed_signers"),
        "--identity",
        "qualifier",
    )
    assert forged.returncode == 2 and "signature does not verify" in forged.stderr


def test_promote_copies_exactly_the_receipts_wheels_and_refuses_otherwise(
    setup, tmp_path: Path
) -> None:
    root, dest, keys = setup
    receipt = _receipt(root, tmp_path / "receipt.json")

    unsigned = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert unsigned.returncode == 2
    assert "unsigned" in unsigned.stderr and "requires a signature" in unsigned.stderr
    assert not (dest / "stable").exists()

    straight = _cli(root, "publish", str(dest), "--channel", "stable")
    assert straight.returncode == 2 and "filled only by `sglforge promote" in straight.stderr

    _sign(keys / "id", receipt)
    done = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert done.returncode == 0, done.stderr
    assert "3 files added" in done.stdout and "signature by 'qualifier' verified" in done.stdout
    candidate = {p.name: p.read_bytes() for p in (dest / "candidate" / "files").iterdir()}
    stable = {p.name: p.read_bytes() for p in (dest / "stable" / "files").iterdir()}
    assert stable == candidate  # the same bytes, every one the receipt names
    kept = list((dest / "stable" / "receipts").glob("*.json"))
    assert [p.read_bytes() for p in kept] == [receipt.read_bytes()]
    again = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert again.returncode == 0 and "0 files added, 3 already there" in again.stdout

    # A failed enforced gate, a missing required check, a failed run: refused, named.
    for checks, result, message in (
        (
            [
                {
                    "name": "equivalence",
                    "passed": False,
                    "enforced": True,
                    "detail": "'x' diverges at position 3",
                },
                {"name": "reference", "passed": True, "enforced": True},
            ],
            "fail",
            "check 'equivalence' failed: 'x' diverges at position 3",
        ),
        (
            [{"name": "equivalence", "passed": True, "enforced": True}],
            "pass",
            "channel 'stable' requires check 'reference'; the receipt has none",
        ),
    ):
        bad = _receipt(root, tmp_path / "bad.json", checks=checks, result=result)
        _sign(keys / "id", bad)
        out = _cli(root, "promote", str(dest), "--receipt", str(bad), "--to", "stable")
        assert out.returncode == 2 and message in out.stderr, out.stderr

    # A receipt for other bytes than the candidate index holds (wrong digest): refused.
    other = _receipt(root, tmp_path / "other.json")
    data = json.loads(other.read_text())
    lock = data["wheel_set"]["lock_text"]
    sglang = next(w for w in data["wheel_set"]["wheels"] if w["name"] == "sglang")
    fake = "1" * 64
    data["wheel_set"]["lock_text"] = lock.replace(sglang["sha256"][0], fake)
    data["wheel_set"]["digest"] = hashlib.sha256(
        data["wheel_set"]["lock_text"].encode()
    ).hexdigest()
    sglang["sha256"] = [fake]
    other.write_text(json.dumps(data))
    _sign(keys / "id", other)
    out = _cli(root, "promote", str(dest), "--receipt", str(other), "--to", "stable")
    assert out.returncode == 2
    assert f"(sha256 {fake}): not in the 'candidate' index" in out.stderr

    # A candidate file changed after publishing: the copy is refused, stable untouched.
    before = {p.name: p.read_bytes() for p in (dest / "stable" / "files").iterdir()}
    wheel = next((dest / "candidate" / "files").glob("sglang_kernel-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert out.returncode == 2 and "the candidate file changed" in out.stderr
    assert {p.name: p.read_bytes() for p in (dest / "stable" / "files").iterdir()} == before


def test_bad_channels_file_is_an_error_naming_the_key(setup) -> None:
    root, dest, _ = setup
    (root / "channels.toml").write_text(
        '[stable]\nfrom = "nowhere"\nrequire-signature = true\ncolour = "blue"\n'
    )
    out = _cli(root, "publish", str(dest), "--channel", "stable")
    assert out.returncode == 2
    assert "from = 'nowhere': no such channel" in out.stderr
    assert "needs allowed-signers" in out.stderr and "'colour' (line 4): unknown key" in out.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "invalid JSON"),
        ('{"kind": "other"}', "not a sglforge-qualification-receipt"),
        (
            '{"kind": "sglforge-qualification-receipt", "schema": 1, "checks": []}',
            "names no wheel set",
        ),
        (
            '{"kind": "sglforge-qualification-receipt", "schema": 1, "checks": [{"name": 1}]}',
            "'checks' must be a list",
        ),
        (
            '{"kind": "sglforge-qualification-receipt", "schema": 1, "checks": [], "wheel_set": '
            '{"digest": "00", "lock_text": "a==1 --hash=sha256:' + "0" * 64 + '", "wheels": []}}',
            "the receipt was edited",
        ),
    ],
)
def test_hostile_receipts_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "receipt.json"
    path.write_text(content)
    root = tmp_path / "p"
    (root / "lockfiles").mkdir(parents=True)
    (root / "lockfiles" / "upstreams.toml").write_text("")
    out = _cli(root, "receipt", "verify", str(path), "--wheels", str(tmp_path))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


# -- issue 31 item 4: the committed channels.toml, signatures, one read of the receipt --------

REPO = Path(__file__).resolve().parents[1]
IDENTITY = "sglforge-qualification"  # the committed [stable] identity
ALL_CHECKS = [
    {"name": n, "passed": True, "enforced": True}
    for n in ("generate", "logprobs", "concurrent", "equivalence", "reference")
]


def _key(keys: Path, name: str) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(keys / name)],
        check=True,
    )
    return keys / name


@pytest.fixture
def committed(tmp_path: Path):
    """The stack, published to candidate, with the repository's own channels.toml and the
    allowed-signers file the operator provides (keys/allowed_signers, as it names)."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    root = _stack(tmp_path)
    shutil.copyfile(REPO / "channels.toml", root / "channels.toml")
    keys = root / "keys"
    keys.mkdir()
    good, foreign = _key(keys, "qualifier"), _key(keys, "foreign")
    (keys / "allowed_signers").write_text(
        f'{IDENTITY} namespaces="sglforge-receipt" ' + (keys / "qualifier.pub").read_text()
    )
    dest = tmp_path / "index"
    result = _cli(
        root,
        "publish",
        str(dest),
        "--channel",
        "candidate",
        "--wheelhouse",
        str(root / "wheelhouse"),
    )
    assert result.returncode == 0, result.stderr
    return root, dest, good, foreign


def test_committed_channels_toml_requires_a_signature_for_stable(tmp_path):
    stable = channels.load_channels(REPO / "channels.toml", tmp_path)["stable"]
    assert stable.require_signature and stable.identity == IDENTITY
    # an operator-provided path, not a key committed with the project
    assert stable.allowed_signers == tmp_path / "keys" / "allowed_signers"
    assert not (REPO / "keys" / "allowed_signers").exists()


def _refused(out: subprocess.CompletedProcess, dest: Path, *messages: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    for message in messages:
        assert message in out.stderr, out.stderr
    assert not (dest / "stable").exists()


def test_committed_stable_refuses_an_unsigned_receipt(committed, tmp_path):
    root, dest, _, _ = committed
    receipt = _receipt(root, tmp_path / "receipt.json", checks=ALL_CHECKS)  # hand-written
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    _refused(
        out,
        dest,
        f"{receipt}: unsigned (no receipt.json.sig beside it)",
        "channel 'stable' requires a signature",
    )


def test_committed_stable_refuses_a_receipt_signed_by_a_foreign_key(committed, tmp_path):
    root, dest, _, foreign = committed
    receipt = _receipt(root, tmp_path / "receipt.json", checks=ALL_CHECKS)
    _sign(foreign, receipt)  # a valid signature, by a key allowed_signers does not hold
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    _refused(out, dest, f"{receipt}.sig: signature does not verify for '{IDENTITY}'")


def test_committed_stable_refuses_a_receipt_changed_after_signing(committed, tmp_path):
    root, dest, good, _ = committed
    receipt = _receipt(root, tmp_path / "receipt.json", checks=ALL_CHECKS)
    _sign(good, receipt)
    receipt.write_text(receipt.read_text().replace('"fixture receipt"', '"edited later"'))
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    _refused(out, dest, "signature does not verify", "changed after it was signed")


def test_committed_stable_without_the_allowed_signers_file_names_what_is_missing(
    committed, tmp_path
):
    root, dest, good, _ = committed
    (root / "keys" / "allowed_signers").unlink()
    receipt = _receipt(root, tmp_path / "receipt.json", checks=ALL_CHECKS)
    _sign(good, receipt)
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    _refused(
        out,
        dest,
        "channel 'stable' requires a signed receipt",
        f"the allowed-signers file {root / 'keys' / 'allowed_signers'} does not exist",
        "the operator provides it",
        "--allowed-signers FILE",
    )
    (root / "keys" / "allowed_signers").write_text("# to be filled by the operator\n")
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    _refused(out, dest, "names no signer")


def test_committed_stable_takes_a_valid_signature_and_copies_exactly_the_bytes(committed, tmp_path):
    root, dest, good, _ = committed
    receipt = _receipt(root, tmp_path / "receipt.json", checks=ALL_CHECKS)
    _sign(good, receipt)
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "stable")
    assert out.returncode == 0, out.stderr
    assert f"signature by '{IDENTITY}' verified" in out.stdout
    assert "unsigned" not in (out.stdout + out.stderr).lower()
    candidate = {p.name: p.read_bytes() for p in (dest / "candidate" / "files").iterdir()}
    assert {p.name: p.read_bytes() for p in (dest / "stable" / "files").iterdir()} == candidate
    digest = hashlib.sha256(receipt.read_bytes()).hexdigest()
    kept = dest / "stable" / "receipts" / f"{digest}.json"
    assert kept.read_bytes() == receipt.read_bytes()
    assert (
        kept.with_name(kept.name + ".sig").read_bytes()
        == receipt.with_name("receipt.json.sig").read_bytes()
    )


def _signed_pair(root: Path, tmp_path: Path, key: Path) -> tuple[Path, bytes, bytes]:
    """A second, validly signed receipt (of a failed run): its bytes and its signature's."""
    path = tmp_path / "other" / "receipt.json"
    path.parent.mkdir()
    _receipt(
        root,
        path,
        checks=[dict(c, passed=c["name"] != "reference") for c in ALL_CHECKS],
        result="fail",
    )
    _sign(key, path)
    return path, path.read_bytes(), path.with_name("receipt.json.sig").read_bytes()


def test_receipt_swapped_after_verifying_does_not_change_what_is_kept(
    committed, tmp_path, monkeypatch
):
    root, dest, good, _ = committed
    receipt = _receipt(root, tmp_path / "receipt.json", checks=ALL_CHECKS)
    _sign(good, receipt)
    verified = receipt.read_bytes()
    _, swapped, swapped_sig = _signed_pair(root, tmp_path, good)
    real = receipt_module.verify_signature

    def verify_then_swap(*args, **kwargs):
        signer = real(*args, **kwargs)
        receipt.write_bytes(swapped)  # between the verification and the copy
        receipt.with_name("receipt.json.sig").write_bytes(swapped_sig)
        return signer

    monkeypatch.setattr(receipt_module, "verify_signature", verify_then_swap)
    path = root / "channels.toml"
    done = channels.promote(dest, receipt, "stable", channels.load_channels(path, root), path)
    assert done.signed_by == IDENTITY
    assert done.receipt_copy.read_bytes() == verified  # what was verified, not the swap
    kept = sorted((dest / "stable" / "receipts").iterdir())
    assert [p.read_bytes() for p in kept if p.suffix == ".json"] == [verified]
    assert swapped_sig not in [p.read_bytes() for p in kept]


def test_receipt_swapped_after_reading_is_not_what_the_signature_vouches_for(
    committed, tmp_path, monkeypatch
):
    """A hand-made passing receipt read, then a validly signed (failing) one put in its
    place before the signature is checked: the check must be over the bytes read."""
    root, dest, good, _ = committed
    _, signed, signed_sig = _signed_pair(root, tmp_path, good)
    receipt = tmp_path / "receipt.json"
    receipt.write_text(
        signed.decode()
        .replace('"result": "fail"', '"result": "pass"')
        .replace('"passed": false', '"passed": true')
    )
    receipt.with_name("receipt.json.sig").write_bytes(signed_sig)
    real = receipt_module.load_receipt

    def load_then_swap(path):
        loaded = real(path)
        path.write_bytes(signed)  # the file now holds what the signature is for
        return loaded

    monkeypatch.setattr(receipt_module, "load_receipt", load_then_swap)
    path = root / "channels.toml"
    with pytest.raises(SglforgeError, match="signature does not verify"):
        channels.promote(dest, receipt, "stable", channels.load_channels(path, root), path)
    assert not (dest / "stable").exists()


UNSIGNED_OK = """
[candidate]

[beta]
from = "candidate"
require-checks = ["equivalence", "reference"]
require-signature = false
"""


def test_unsigned_receipt_where_none_is_required_is_promoted_with_a_warning(setup, tmp_path):
    root, dest, keys = setup
    (root / "channels.toml").write_text(UNSIGNED_OK)
    receipt = _receipt(root, tmp_path / "receipt.json")
    # naming --allowed-signers asks for a signature, whatever the channel says
    out = _cli(
        root,
        "promote",
        str(dest),
        "--receipt",
        str(receipt),
        "--to",
        "beta",
        "--allowed-signers",
        str(keys / "allowed_signers"),
    )
    _refused(out, dest, "unsigned", "--allowed-signers requires a signature")
    assert not (dest / "beta").exists()
    out = _cli(root, "promote", str(dest), "--receipt", str(receipt), "--to", "beta")
    assert out.returncode == 0, out.stderr
    assert f"promote: WARNING: {receipt} is unsigned: promoted to 'beta'" in out.stderr
    assert "receipt UNSIGNED" in out.stdout and "3 files added" in out.stdout
