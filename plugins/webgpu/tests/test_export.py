"""`export` and `retarget export`: the folder a web page loads (the loader itself runs in test_js_loader.py)."""

import json
import subprocess
import sys
from importlib.resources import files

import numpy as np
import pytest
import retarget
from retarget.errors import RetargetError
from retarget.testing.graphs import mlp_module
from retarget_webgpu import export


@pytest.fixture(scope="module")
def mlp_artifact():
    return retarget.compile(mlp_module(batch=3, features=20, hidden=5)[0], "webgpu-spirv")


def _slots(fn):
    return [a["slot"] for a in fn["inputs"] + fn["outputs"]] + \
           [b for c in fn["program"] if c["op"] == "dispatch" for b in c["bindings"]]


def test_export_writes_the_loader_and_the_page_beside_the_model(tmp_path, mlp_artifact):
    export(mlp_artifact, tmp_path)
    for name in ("retarget.js", "index.html"):
        assert (tmp_path / name).read_text() == files("retarget_webgpu").joinpath("js", name).read_text()


def test_export_gives_each_input_and_output_its_shape_and_dtype(tmp_path, mlp_artifact):
    fn = json.loads(export(mlp_artifact, tmp_path).read_text())["functions"]["predict"]
    assert fn["inputs"][0]["shape"] == [3, 20] and fn["inputs"][0]["dtype"] == "f32"
    assert fn["outputs"][0]["shape"] == [3, 5] and fn["outputs"][0]["dtype"] == "f32"


def test_a_module_places_every_tensor_at_a_256_byte_boundary(mlp_artifact):
    assert all(offset % 256 == 0 for _, offset, _ in _slots(mlp_artifact.functions["predict"]))


def test_export_moves_the_tensors_of_an_older_64_byte_layout_to_256_byte_boundaries(tmp_path, monkeypatch):
    from retarget.passes import host_program

    monkeypatch.setattr(host_program, "ALIGN", 64)  # what modules made before 2026-11-24 hold
    older = retarget.compile(mlp_module(batch=3, features=20, hidden=5)[0], "webgpu-spirv")
    original = _slots(older.functions["predict"])
    assert any(offset % 256 for _, offset, _ in original)
    fn = json.loads(export(older, tmp_path).read_text())["functions"]["predict"]
    assert all(offset % 256 == 0 for _, offset, _ in _slots(fn))
    assert fn["arena_bytes"] >= max(offset + nbytes for kind, offset, nbytes in _slots(fn) if kind == "arena")


def test_export_moves_the_constants_with_their_bindings(tmp_path, mlp_artifact):
    manifest = json.loads(export(mlp_artifact, tmp_path).read_text())
    spread = np.fromfile(tmp_path / "constants.bin", dtype=np.uint8)
    assert spread.size == manifest["constants"]["size"]
    before, after = _slots(mlp_artifact.functions["predict"]), _slots(manifest["functions"]["predict"])
    pool = np.asarray(mlp_artifact.constants())
    consts = [(old, new) for old, new in zip(before, after) if old[0] == "const"]
    assert len(consts) >= 2
    for (_, old, nbytes), (_, new, _) in consts:
        np.testing.assert_array_equal(spread[new:new + nbytes], pool[old:old + nbytes])


def test_export_refuses_a_module_split_by_fallback(tmp_path):
    art = retarget.compile(mlp_module()[0], "webgpu-spirv", fallback="vmvx", refuse=["rt.max"])
    with pytest.raises(RetargetError, match="split between devices"):
        export(art, tmp_path)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "retarget", *map(str, args)], capture_output=True, text=True)


def test_the_export_command_writes_the_folder(tmp_path, mlp_artifact):
    mlp_artifact.save(tmp_path / "m.rtm")
    result = _cli("export", tmp_path / "m.rtm", "-o", tmp_path / "site", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["target"] == "webgpu-spirv:webgpu"
    assert {"manifest.json", "constants.bin", "retarget.js", "index.html"} <= set(summary["files"])
    assert json.loads((tmp_path / "site" / "manifest.json").read_text())["format"] == "retarget-webgpu-export"


def test_the_export_command_names_what_a_module_without_wgsl_holds(tmp_path):
    retarget.compile(mlp_module()[0], "vmvx").save(tmp_path / "m.rtm")
    result = _cli("export", tmp_path / "m.rtm", "-o", tmp_path / "site")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error:") and "holds vmvx:reference" in line and "webgpu-spirv" in line
