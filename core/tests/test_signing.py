"""Signed modules: `retarget compile --sign KEY`, `retarget.load(..., trusted_keys=...)`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import retarget
from retarget.errors import InputError, SignatureError
from retarget.module_format import read

pytest.importorskip("cryptography")
from retarget.signing import generate_key  # noqa: E402


@pytest.fixture
def keys(tmp_path):
    """(private key path, public key path)."""
    return generate_key(tmp_path / "key")


@pytest.fixture
def signed(tmp_path, mlp, keys):
    module, x, expected = mlp
    path = retarget.compile(module, "vmvx").save(tmp_path / "signed.rtm", signing_key=keys[0])
    return path, x, expected


def test_a_signed_module_loads_with_its_public_key(signed, keys):
    path, x, expected = signed
    loaded = retarget.load(path, "local-sync", trusted_keys=[keys[1]])
    np.testing.assert_allclose(loaded.predict(x), expected, rtol=1e-5)


def test_a_signed_module_loads_without_trusted_keys_too(signed):
    path, x, expected = signed
    np.testing.assert_allclose(retarget.load(path, "local-sync").predict(x), expected, rtol=1e-5)


def test_trusted_keys_may_be_pem_bytes_or_the_raw_key(signed, keys):
    from retarget.signing import public_key_bytes

    pem = keys[1].read_bytes()
    raw = public_key_bytes(pem)
    for key in (pem, raw, raw.hex(), str(keys[1])):
        read(signed[0], trusted_keys=[key])


def test_an_unsigned_module_is_refused_when_keys_are_given(mlp_rtm, keys):
    with pytest.raises(SignatureError, match="is not signed, and trusted keys were given"):
        retarget.load(mlp_rtm[0], "local-sync", trusted_keys=[keys[1]])


def test_an_empty_list_of_trusted_keys_trusts_no_one(signed):
    with pytest.raises(SignatureError, match="which is not a trusted key"):
        read(signed[0], trusted_keys=[])


def test_a_module_signed_by_another_key_is_refused(signed, tmp_path):
    _, other = generate_key(tmp_path / "other")
    with pytest.raises(SignatureError, match="signed by key [0-9a-f]{16}\\.\\.\\., which is not a trusted key"):
        read(signed[0], trusted_keys=[other])


def test_a_module_changed_after_signing_is_refused(signed, keys, tmp_path):
    """A constant changed and its checksum recomputed passes the checksums, but not the signature."""
    import hashlib

    path = signed[0]
    tampered = tmp_path / "tampered.rtm"
    with zipfile.ZipFile(path) as zin:
        entries = {n: zin.read(n) for n in zin.namelist()}
    constants = bytearray(entries["constants.bin"])
    constants[0] ^= 0x40
    entries["constants.bin"] = bytes(constants)
    manifest = json.loads(entries["manifest.json"])
    manifest["entries"]["constants.bin"]["sha256"] = hashlib.sha256(constants).hexdigest()
    entries["manifest.json"] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    with zipfile.ZipFile(tampered, "w", zipfile.ZIP_STORED) as zout:
        for name, data in entries.items():
            zout.writestr(name, data)
    read(tampered)  # without keys, the edit is invisible: checksums find corruption, not intent
    with pytest.raises(SignatureError, match="the signature does not match the module's contents"):
        read(tampered, trusted_keys=[keys[1]])


def test_a_malformed_signature_entry_is_refused(signed, keys, tmp_path):
    bad = tmp_path / "bad.rtm"
    with zipfile.ZipFile(signed[0]) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        for name in zin.namelist():
            zout.writestr(name, b"{not json" if name == "signature.json" else zin.read(name))
    with pytest.raises(SignatureError, match="signature.json is malformed"):
        read(bad, trusted_keys=[keys[1]])


def test_an_artifact_in_memory_has_no_signature_to_check(mlp, keys):
    with pytest.raises(InputError, match="an Artifact in memory has none"):
        retarget.load(retarget.compile(mlp[0], "vmvx"), "local-sync", trusted_keys=[keys[1]])


def test_keygen_writes_a_private_key_only_its_owner_can_read(tmp_path):
    private, public = generate_key(tmp_path / "k")
    assert os.stat(private).st_mode & 0o777 == 0o600
    assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    with pytest.raises(FileExistsError):
        generate_key(tmp_path / "k")


def test_a_public_key_is_not_a_signing_key(mlp, keys, tmp_path):
    with pytest.raises(SignatureError, match="is not an unencrypted PEM private key"):
        retarget.compile(mlp[0], "vmvx").save(tmp_path / "m.rtm", signing_key=keys[1])


def test_the_cli_signs_and_checks(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "retarget", *map(str, args)], capture_output=True, text=True,
                              cwd=tmp_path)

    assert cli("keygen", "k").returncode == 0
    assert cli("keygen", "k").returncode == 2  # never overwrites a key
    mlir = tmp_path / "add.mlir"
    mlir.write_text("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                    "  %0 = arith.addf %a, %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n")
    assert cli("compile", mlir, "-t", "vmvx", "-o", "s.rtm", "--sign", "k").returncode == 0
    assert cli("compile", mlir, "-t", "vmvx", "-o", "u.rtm").returncode == 0
    ok = cli("run", "s.rtm", "--trusted-key", "k.pub", "--input", "2xf32=1 2", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["results"][0]["values"] == [2.0, 4.0]
    refused = cli("run", "u.rtm", "--trusted-key", "k.pub", "--input", "2xf32=1 2")
    assert refused.returncode == 2 and "error: u.rtm is not signed" in refused.stderr
