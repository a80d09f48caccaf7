import json
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import retarget
from retarget.errors import ModuleFormatError
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.module_format import ALIGN, FORMAT_VERSION, FORMAT_VERSION_SINGLE, read


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
    assert m["format_version"] == FORMAT_VERSION_SINGLE  # one device: the format every reader reads
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
    with pytest.raises(ModuleFormatError, match=r"functions\['predict'\]\.program\[0\]\.bindings\[0\] reaches byte"):
        read(bad)


def test_a_plain_zip_is_not_a_module(tmp_path):
    path = tmp_path / "x.rtm"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(ModuleFormatError, match="not a retarget module"):
        read(path)


def test_loading_and_calling_a_module_runs_none_of_its_contents_as_python(mlp_rtm, tmp_path):
    """Python's audit hooks see every exec, eval, compile and unpickling; loading and calling a module
    (one that even carries a pickle, to tempt a regression) must cause none of them."""
    path, x, _ = mlp_rtm
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("evil.pkl", pickle.dumps(_Tripwire()))
    script = f"""
import sys, numpy as np, retarget
x = np.load({str(tmp_path / "x.npy")!r})
retarget.load({str(path)!r}, "local-sync").predict(x)  # warm up: lazy imports compile and exec our own code
seen = []
sys.addaudithook(lambda event, args: seen.append(event) if event in
                 ("exec", "compile", "pickle.find_class", "marshal.loads", "os.system", "subprocess.Popen") else None)
retarget.load({str(path)!r}, "local-sync").predict(x)
print(seen)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert not (tmp_path / "tripped").exists()


class _Tripwire:
    def __reduce__(self):
        return (open, ("tripped", "w"))


# -- the manifest is checked field by field before anything uses it ----------------------------------------


def _edit(src, dst, manifest=None, entries=None):
    """Rewrite module `src` to `dst` with `manifest(m)` and `entries(e)` applied, checksums recomputed
    (as someone who edits a module on purpose would)."""
    art = read(src)
    art.manifest = json.loads(json.dumps(art.manifest))
    art.entries = {name: bytes(np.asarray(data)) for name, data in art.entries.items()}
    if manifest:
        manifest(art.manifest)
    if entries:
        entries(art.entries)
    return art.save(dst)


def _set(path, value):
    def change(m):
        *parents, last = path
        for key in parents:
            m = m[key]
        m[last] = value

    return change


@pytest.mark.parametrize("field, value, message", [
    (("functions", "predict", "arena_bytes"), "128", r"functions\['predict'\]\.arena_bytes is not an integer"),
    (("functions", "predict", "arena_bytes"), True, r"functions\['predict'\]\.arena_bytes is not an integer"),
    (("functions", "predict", "inputs", 0, "slot"), ["const", 0, 64], r"inputs\[0\]\.slot does not hold a tensor<2x8x"),
    (("functions", "predict", "inputs", 0, "type"), "tensor<?x8xf32>", "is not a tensor type of static shape"),
    (("functions", "predict", "inputs", 0, "type"), "tensor<2x8xf32> garbage", "is not a type"),
    (("functions", "predict", "program", 0, "entry"), 99, r"program\[0\]\.entry is 99, and executables\[0\] has 1"),
    (("functions", "predict", "program", 0, "op"), "exec", r"program\[0\]\.op is not 'dispatch' or 'barrier'"),
    (("executables", 0, "entry_points", 0, "workgroup_count"), [65536, 65536, 2], "more than 4,294,967,296 workgroups"),
    (("executables", 0, "entry_points", 0, "workgroup_size"), [0, 1, 1], r"workgroup_size is not an integer from 1"),
    (("executables", 0, "target", "fp16"), "yes", r"target\.fp16 is not a bool"),
    (("executables", 0, "target", "subgroup_size"), 1.5, r"target\.subgroup_size is not a int \| None"),
    (("executables", 0, "target", "exec"), "x", "target has unknown fields exec"),
    (("executables", 0, "path"), "../../etc/passwd", "which is not an entry of the module"),
    (("executables",), [], "holds no code"),
    (("constants", "items", 0, "offset"), 1 << 20, r"constants\.items\[0\] lies outside constants\.bin"),
])
def test_a_manifest_field_of_the_wrong_kind_is_named(mlp_rtm, tmp_path, field, value, message):
    bad = _edit(mlp_rtm[0], tmp_path / "bad.rtm", manifest=_set(field, value))
    with pytest.raises(ModuleFormatError, match=message):
        read(bad)


def test_a_manifest_nested_past_the_json_parser_is_rejected(mlp_rtm, tmp_path):
    bad = tmp_path / "deep.rtm"
    _rewrite(mlp_rtm[0], bad, lambda n, d: b"[" * 200_000 + b"]" * 200_000 if n == "manifest.json" else d)
    with pytest.raises(ModuleFormatError, match="manifest.json is not valid JSON"):
        read(bad)


def test_a_compressed_entry_is_rejected(mlp_rtm, tmp_path):
    bad = tmp_path / "deflated.rtm"
    with zipfile.ZipFile(mlp_rtm[0]) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    with pytest.raises(ModuleFormatError, match="entry 'manifest.json' is compressed or encrypted"):
        read(bad)


def test_a_vmvx_function_that_does_not_match_its_entry_point_is_rejected_at_load(mlp_rtm, tmp_path):
    def transpose_output(m):
        m["executables"][0]["entry_points"][0]["bindings"][-1]["type"] = "tensor<4x2xf32>"  # as many bytes

    bad = _edit(mlp_rtm[0], tmp_path / "bad.rtm", manifest=transpose_output)
    with pytest.raises(ModuleFormatError, match="takes and returns .* but its entry point binds"):
        retarget.load(bad, "local-sync")


def test_a_vmvx_entry_point_runs_as_one_workgroup(mlp_rtm, tmp_path):
    bad = _edit(mlp_rtm[0], tmp_path / "bad.rtm",
                manifest=_set(("executables", 0, "entry_points", 0, "workgroup_count"), [65535, 1, 1]))
    with pytest.raises(ModuleFormatError, match=r"asks for \[65535, 1, 1\] workgroups; a vmvx function runs as one"):
        retarget.load(bad, "local-sync")


def test_an_edited_module_that_is_still_well_formed_loads(mlp_rtm, tmp_path):
    """The checks refuse what is wrong, not what is unusual: a renamed function still loads and runs."""
    path, x, expected = mlp_rtm

    def rename(m):
        m["functions"]["renamed"] = m["functions"].pop("predict")

    edited = _edit(path, tmp_path / "renamed.rtm", manifest=rename)
    np.testing.assert_allclose(retarget.load(edited, "local-sync").renamed(x), expected, rtol=1e-5)


def test_modules_are_reproducible_no_dates_and_constants_in_program_order(tmp_path):
    """The same model compiles to the same bytes: every zip entry carries one fixed date (not the time of
    the build), and constants are laid out in the order the program first reads them (not a set's order,
    which changes from process to process)."""
    rng = np.random.default_rng(0)
    x = Value(TensorType((2, 8), dtypes.f32))
    fn = Function("predict", [x])
    b, h = Builder(fn), x
    for _ in range(3):  # three layers: three dispatches, six constants
        h = b.op("rt.matmul", [h, b.constant(rng.standard_normal((8, 8)).astype(np.float32))])
        h = b.op("rt.tanh", [b.op("rt.add", [h, b.constant(rng.standard_normal(8).astype(np.float32))])])
    fn.returns = [h]
    path = retarget.compile(Module({"predict": fn}), "vmvx").save(tmp_path / "m.rtm")
    with zipfile.ZipFile(path) as zf:
        assert {info.date_time for info in zf.infolist()} == {(2020, 1, 1, 0, 0, 0)}
        manifest = json.loads(zf.read("manifest.json"))
    program = manifest["functions"]["predict"]["program"]
    first_reads = [slot[1] for command in program if command["op"] == "dispatch"
                   for slot in command["bindings"] if slot[0] == "const"]
    order = list(dict.fromkeys(first_reads))
    assert len(order) == 6 and order == sorted(order)
