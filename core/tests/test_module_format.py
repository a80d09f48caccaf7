import json
import zipfile

import numpy as np
import pytest
import retarget
from retarget.errors import ModuleFormatError
from retarget.module_format import ALIGN, FORMAT_VERSION, read


def _rewrite(src, dst, change):
    """Copy a module, letting `change(name, data)` return new bytes for an entry."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, change(info.filename, zin.read(info.filename)))


def test_module_round_trips_through_a_file(mlp_rtm):
    path, x, expected = mlp_rtm
    np.testing.assert_allclose(retarget.load(path, "local-sync").predict(x), expected, rtol=1e-5)


def test_entries_are_stored_uncompressed_and_constants_aligned(mlp_rtm):
    path, _, _ = mlp_rtm
    art = read(path)
    with zipfile.ZipFile(path) as zf:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    constants = art.constants()
    assert isinstance(constants, np.memmap)
    assert constants.offset % ALIGN == 0


def test_manifest_records_versions_and_checksums(mlp_rtm):
    art = read(mlp_rtm[0])
    m = art.manifest
    assert m["format_version"] == FORMAT_VERSION
    assert m["producer"]["retarget"] == retarget.__version__
    assert set(m["entries"]) == {"constants.bin", "executables/vmvx-reference.bin"}
    assert all(len(e["sha256"]) == 64 for e in m["entries"].values())


def test_truncated_module_is_rejected(mlp_rtm, tmp_path):
    data = mlp_rtm[0].read_bytes()
    bad = tmp_path / "cut.rtm"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModuleFormatError, match="truncated"):
        read(bad)


def test_tampered_constant_is_rejected(mlp_rtm, tmp_path):
    bad = tmp_path / "tampered.rtm"
    _rewrite(mlp_rtm[0], bad, lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n == "constants.bin" else d)
    with pytest.raises(ModuleFormatError, match="checksum mismatch in entry 'constants.bin'"):
        read(bad)


def test_newer_format_asks_for_an_upgrade(mlp_rtm, tmp_path):
    def bump(name, data):
        if name != "manifest.json":
            return data
        m = json.loads(data)
        m["format_version"] = FORMAT_VERSION + 1
        return json.dumps(m).encode()

    bad = tmp_path / "newer.rtm"
    _rewrite(mlp_rtm[0], bad, bump)
    with pytest.raises(ModuleFormatError, match="upgrade retarget"):
        read(bad)


def test_out_of_bounds_binding_is_rejected(mlp_rtm, tmp_path):
    def stretch(name, data):
        if name != "manifest.json":
            return data
        m = json.loads(data)
        m["functions"]["predict"]["program"][0]["bindings"][0][1] = 1 << 40
        return json.dumps(m).encode()

    bad = tmp_path / "oob.rtm"
    _rewrite(mlp_rtm[0], bad, stretch)
    with pytest.raises(ModuleFormatError, match="binds bytes outside its buffers"):
        read(bad)


def test_a_plain_zip_is_not_a_module(tmp_path):
    path = tmp_path / "x.rtm"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(ModuleFormatError, match="not a retarget module"):
        read(path)


def test_loading_never_unpickles(mlp_rtm):
    """The format has no pickled entry: every entry is JSON, raw constants or executable text."""
    with zipfile.ZipFile(mlp_rtm[0]) as zf:
        for info in zf.infolist():
            assert not zf.read(info.filename).startswith(b"\x80")  # pickle protocol marker
