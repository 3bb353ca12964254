"""Issue 37, item 3: a receipt is signed on a host without ssh-keygen (the H200 image) through
the `cryptography` library, in the same SSHSIG format, verified by ssh-keygen and by
`verify_receipt` unchanged. Ed25519 signatures are deterministic, so the bytes are even
ssh-keygen's own."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from sglforge.base.errors import SglforgeError
from sglforge.qualification import receipt

needs_crypto = pytest.mark.skipif(
    importlib.util.find_spec("cryptography") is None, reason="needs the cryptography library"
)
needs_keygen = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None, reason="needs ssh-keygen to compare with"
)


@needs_crypto
@needs_keygen
def test_signature_is_ssh_keygens_and_verifies(tmp_path: Path) -> None:
    key = tmp_path / "key"
    line = receipt.write_ed25519_key(key, "h200-qualifier")
    assert line.startswith("ssh-ed25519 ") and line.endswith(" h200-qualifier\n")
    ours = tmp_path / "ours" / "receipt.json"
    theirs = tmp_path / "theirs" / "receipt.json"
    for path in (ours, theirs):
        path.parent.mkdir()
        path.write_text('{"kind": "x"}\n')
    receipt.sign_sshsig(ours, key)
    subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", receipt.NAMESPACE, str(theirs)],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    assert (ours.parent / "receipt.json.sig").read_bytes() == (
        theirs.parent / "receipt.json.sig"
    ).read_bytes()
    signers = tmp_path / "allowed_signers"
    signers.write_text(
        f'sglforge-qualification namespaces="{receipt.NAMESPACE}" {" ".join(line.split()[:2])}\n'
    )
    with open(ours, "rb") as message:
        check = subprocess.run(
            [
                "ssh-keygen",
                "-Y",
                "verify",
                "-f",
                str(signers),
                "-I",
                "sglforge-qualification",
                "-n",
                receipt.NAMESPACE,
                "-s",
                str(ours) + ".sig",
            ],
            stdin=message,
            capture_output=True,
            text=True,
            check=False,
        )
    assert check.returncode == 0, check.stderr
    ours.write_text('{"kind": "y"}\n')  # changed after signing
    with open(ours, "rb") as message:
        check = subprocess.run(
            [
                "ssh-keygen",
                "-Y",
                "verify",
                "-f",
                str(signers),
                "-I",
                "sglforge-qualification",
                "-n",
                receipt.NAMESPACE,
                "-s",
                str(ours) + ".sig",
            ],
            stdin=message,
            capture_output=True,
            text=True,
            check=False,
        )
    assert check.returncode != 0


@needs_crypto
def test_sign_falls_back_to_cryptography_without_ssh_keygen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "key"
    receipt.write_ed25519_key(key)
    path = tmp_path / "receipt.json"
    path.write_text("{}\n")
    monkeypatch.setattr(receipt.shutil, "which", lambda name: None)
    sig = receipt.sign(path, key)
    text = sig.read_text()
    assert text.startswith("-----BEGIN SSH SIGNATURE-----\n")
    assert text.endswith("-----END SSH SIGNATURE-----\n")


@needs_crypto
def test_only_ed25519_keys_sign_without_ssh_keygen(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = tmp_path / "ecdsa"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    path = tmp_path / "receipt.json"
    path.write_text("{}\n")
    with pytest.raises(SglforgeError, match="not an Ed25519 key"):
        receipt.sign_sshsig(path, key)
    (tmp_path / "junk").write_text("not a key")
    with pytest.raises(SglforgeError, match="cannot read the OpenSSH private key"):
        receipt.sign_sshsig(path, tmp_path / "junk")


def test_no_signer_at_all_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receipt.shutil, "which", lambda name: None)
    monkeypatch.setattr(receipt.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SglforgeError, match="ssh-keygen not found and the `cryptography`"):
        receipt.sign(tmp_path / "receipt.json", tmp_path / "key")
