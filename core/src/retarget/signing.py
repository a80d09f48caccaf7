"""Ed25519 signatures for .rtm modules, through the `cryptography` package (`pip install 'retarget[sign]'`).

A signed module holds `signature.json`: the signer's public key and its signature of the
exact bytes of `manifest.json`. The manifest holds the SHA-256 of every other entry, so the
signature covers the whole module. `retarget.load(path, trusted_keys=[...])` refuses a
module that is unsigned, signed by a key not in the list, or changed after signing.

Keys are PEM files as OpenSSL writes them: the private key PKCS#8 and unencrypted
(`-----BEGIN PRIVATE KEY-----`), the public key SubjectPublicKeyInfo
(`-----BEGIN PUBLIC KEY-----`). `retarget keygen NAME` writes NAME and NAME.pub;
`openssl genpkey -algorithm ed25519 -out NAME` and `openssl pkey -in NAME -pubout` work too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import RetargetError, SignatureError

SIGNATURE = "signature.json"
ALGORITHM = "ed25519"


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise RetargetError("signing modules needs the 'cryptography' package",
                            hint="pip install 'retarget[sign]'") from None
    return serialization, ed25519


def generate_key(path: str | os.PathLike) -> tuple[Path, Path]:
    """Write a new private key to `path` (readable by its owner only) and its public key to `path`.pub."""
    serialization, ed25519 = _crypto()
    path = Path(path)
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    pub = path.with_name(path.name + ".pub")
    pub.write_bytes(public)
    return path, pub


def load_private_key(key):
    """A private key: an Ed25519PrivateKey, or the path or bytes of a PEM file."""
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    data, what = _read(key, "private key")
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise SignatureError(f"{what} is not an unencrypted PEM private key ({e})",
                             hint="make one with `retarget keygen NAME`") from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise SignatureError(f"{what} is a {type(loaded).__name__}, not an Ed25519 key",
                             hint="make one with `retarget keygen NAME`")
    return loaded


def public_key_bytes(key) -> bytes:
    """The 32 raw bytes of a public key given as an Ed25519PublicKey, the path or bytes of a PEM file,
    the 32 raw bytes, or their 64 hex digits."""
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    if isinstance(key, bytes) and len(key) == 32:
        return key
    if isinstance(key, str) and len(key) == 64 and all(c in "0123456789abcdefABCDEF" for c in key):
        return bytes.fromhex(key)
    data, what = _read(key, "public key")
    try:
        loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise SignatureError(f"{what} is not a PEM public key ({e})",
                             hint="give the .pub file that `retarget keygen` wrote") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise SignatureError(f"{what} is a {type(loaded).__name__}, not an Ed25519 key")
    return loaded.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _read(key, what: str) -> tuple[bytes, str]:
    if isinstance(key, bytes):
        return key, f"the {what}"
    if isinstance(key, (str, os.PathLike)):
        try:
            return Path(key).read_bytes(), f"{what} file {key}"
        except OSError as e:
            raise SignatureError(f"cannot read {what} file {key}: {e.strerror}", hint="check the path") from None
    raise SignatureError(f"a {what} must be a path, PEM bytes or a key object, not a {type(key).__name__}")


def sign(manifest: bytes, key) -> bytes:
    """The `signature.json` entry for `manifest`, signed with private `key`."""
    serialization, _ = _crypto()
    private = load_private_key(key)
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    record = {"algorithm": ALGORITHM, "public_key": public.hex(), "signature": private.sign(manifest).hex()}
    return json.dumps(record, indent=1).encode()


def verify(manifest: bytes, signature: bytes | None, trusted_keys, where: str) -> bytes:
    """Check that `signature` (the `signature.json` entry, None if there is none) is a trusted key's
    signature of `manifest`; returns the signer's public key. Raises SignatureError saying why not."""
    _, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    trusted = {public_key_bytes(k) for k in trusted_keys}
    if signature is None:
        raise SignatureError(f"{where} is not signed, and trusted keys were given",
                             hint="sign it with `retarget compile --sign KEY`, or load it without trusted_keys")
    try:
        record = json.loads(signature)
        algorithm = record["algorithm"]
        public, sig = bytes.fromhex(record["public_key"]), bytes.fromhex(record["signature"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SignatureError(f"{where}: {SIGNATURE} is malformed ({type(e).__name__}: {e})",
                             hint="the module is corrupt or was tampered with") from None
    if algorithm != ALGORITHM:
        raise SignatureError(f"{where} is signed with '{algorithm}', and retarget checks only {ALGORITHM}")
    if public not in trusted:
        raise SignatureError(f"{where} is signed by key {public.hex()[:16]}..., which is not a trusted key",
                             hint="pass its public key in trusted_keys (--trusted-key) if you trust the signer")
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public).verify(sig, manifest)
    except (InvalidSignature, ValueError):
        raise SignatureError(f"{where}: the signature does not match the module's contents",
                             hint="the module was changed after it was signed; do not run it") from None
    return public
