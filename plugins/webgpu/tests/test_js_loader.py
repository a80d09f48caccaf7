"""retarget.js, the loader that `export` writes beside a model, run as a page runs it: under Node with Dawn's WebGPU
(the `webgpu` npm package: the implementation in Chrome, validation included), fetching the folder over HTTP from
127.0.0.1. Without a GPU, Dawn runs on Mesa's llvmpipe through OpenGL ES (tests/js/harness.mjs says why not lavapipe).

Needs node (20+) and `npm ci --prefix plugins/webgpu/tests/js` (.ci/run does it); skips, saying why, without them.
The small zoo models run by default, the whole zoo with --retarget-full (minutes on a CPU)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import retarget
from retarget.compiler import import_model
from retarget.testing import zoo
from retarget.testing.numerics import relative_error
from retarget_webgpu import export
from retarget_webgpu.compile import unpack
from retarget_webgpu.driver import WebGpuError, plan_dispatch

torch = pytest.importorskip("torch")

JS = Path(__file__).parent / "js"
HARNESS = JS / "harness.mjs"
README = Path(__file__).parents[1] / "README.md"
SMALL = ("mlp", "small_cnn")


def _node(*args, timeout=600, env=None) -> dict:
    result = subprocess.run(["node", str(HARNESS), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                            env=None if env is None else {**os.environ, **env})
    assert result.returncode == 0, f"node exited with {result.returncode}: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def node():
    """node with the webgpu package installed beside the harness, or a skip that says what to install."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (apt-get install nodejs; Node 20 or newer)")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.skip(f"node {version} is too old for the harness; Node 20 or newer")
    if not (JS / "node_modules" / "webgpu").is_dir():
        pytest.skip(f"the webgpu npm package is not installed: npm ci --prefix {JS}")


@pytest.fixture(scope="session")
def dawn(node) -> dict:
    """The adapter Dawn finds (a GPU's Vulkan, else llvmpipe's OpenGL ES), or a skip that says why there is none."""
    probe = _node("probe", timeout=120)
    if "error" in probe:
        pytest.skip(f"Dawn's WebGPU has no adapter here: {probe['error']}")
    return probe


_compiled = {}


def _model(name: str):
    """(artifact for webgpu-spirv, input, torch's output) of zoo model `name`, compiled once per session."""
    if name not in _compiled:
        model, inputs = zoo.make(name)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        art = retarget.compile(import_model(model, example_inputs=inputs), "webgpu-spirv")
        _compiled[name] = (art, inputs[0].numpy(), expected, model)
    return _compiled[name]


def _run(folder: Path, *calls, function="main", env=None, dtypes=None) -> dict:
    """Each call's inputs (arrays) through `function` of the exported model in `folder`; {"outputs": [[array]]},
    each output read as its entry of `dtypes` (default: all float32)."""
    args = []
    for c, inputs in enumerate(calls):
        files = []
        for i, x in enumerate(inputs):
            files.append(folder.parent / f"call{c}_input{i}.bin")
            np.ascontiguousarray(x).tofile(files[-1])
        args.append(",".join(map(str, files)))
    result = _node("run", folder, function, folder.parent, *args, env=env)
    if "outputs" in result:
        result["outputs"] = [[np.fromfile(f, dtype=dtypes[k] if dtypes else np.float32) for k, f in enumerate(call)]
                             for call in result["outputs"]]
    return result


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_in_the_js_loader_matches_torch(dawn, request, tmp_path, name):
    if name not in SMALL and not request.config.getoption("retarget_full"):
        pytest.skip(f"{name} is slow on a CPU's WebGPU (llvmpipe: 5-60 s a call); run with --retarget-full")
    art, x, expected, _ = _model(name)
    export(art, tmp_path / "model")
    result = _run(tmp_path / "model", [x])
    assert "error" not in result, result
    (out,) = result["outputs"][0]
    assert out.shape == (expected.size,)
    assert relative_error(out, expected.reshape(-1)) <= 1e-4, name


def test_a_second_call_returns_the_outputs_of_its_own_inputs(dawn, tmp_path):
    art, x, expected, model = _model("mlp")
    export(art, tmp_path / "model")
    x2 = (x * -2 + 1).astype(np.float32)
    with torch.no_grad():
        expected2 = model(torch.from_numpy(x2)).numpy()
    first, second = _run(tmp_path / "model", [x], [x2])["outputs"]
    assert relative_error(first[0], expected.reshape(-1)) <= 1e-4
    assert relative_error(second[0], expected2.reshape(-1)) <= 1e-4


def test_a_device_of_your_own_requested_with_the_models_descriptor_runs_it(dawn, tmp_path):
    art, x, expected, _ = _model("mlp")
    export(art, tmp_path / "model")
    (out,) = _run(tmp_path / "model", [x], env={"HARNESS_OWN_DEVICE": "1"})["outputs"][0]
    assert relative_error(out, expected.reshape(-1)) <= 1e-4


class _Sum(torch.nn.Module):
    """A constant plus nine inputs: one kernel of 11 buffers, more than WebGPU's default 8 a stage, so it is packed,
    and its f32 group spans the constants and the arena (gathered into a scratch buffer around the dispatch)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.arange(100, dtype=torch.float32) / 7)

    def forward(self, *xs):
        y = self.c
        for x in xs:
            y = y + x
        return y


@pytest.fixture(scope="module")
def packed():
    xs = tuple(torch.randn(100, generator=torch.Generator().manual_seed(i)) for i in range(9))
    art = retarget.compile(import_model(_Sum(), example_inputs=xs), "webgpu-spirv")
    return art, [x.numpy() for x in xs]


def test_a_packed_kernel_across_the_constants_and_the_arena_computes(dawn, tmp_path, packed):
    art, xs = packed
    manifest = json.loads(export(art, tmp_path / "model").read_text())
    assert [k["packed"] for k in manifest["kernels"]] == [True]
    (out,) = _run(tmp_path / "model", xs)["outputs"][0]
    np.testing.assert_allclose(out, np.arange(100, dtype=np.float32) / 7 + np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)


def _plan_cases(art, alignment: int, max_binding: int = 1 << 27):
    """Every dispatch of `art`'s functions as planDispatch's inputs: the kernels, and per dispatch its bindings with
    the sizes of the buffers the runtime would allocate (the module's own layout, not export's)."""
    exe = next(e for e in art.manifest["executables"] if e["format"] == "wgsl")
    kernels = [{**meta, "params": entry["bindings"]}
               for meta, entry in zip(unpack(bytes(art.entries[exe["path"]])), exe["entry_points"])]
    cases = []
    for fn in art.functions.values():
        sizes = {"arena": max(4, -(-fn["arena_bytes"] // 4) * 4), "const": max(4, -(-art.constants().size // 4) * 4)}
        cases += [{"entry": c["entry"], "bindings": [[kind, at, n, sizes[kind]] for kind, at, n in c["bindings"]]}
                  for c in fn["program"] if c["op"] == "dispatch"]
    return {"kernels": kernels, "cases": cases, "alignment": alignment, "max_binding": max_binding}


def _python_plan(spec: dict, case: dict) -> dict:
    kernel = spec["kernels"][case["entry"]]
    try:
        return plan_dispatch(kernel, [p["access"] == "write" for p in kernel["params"]], case["bindings"],
                             spec["alignment"], spec["max_binding"], kernel["name"])
    except WebGpuError as e:
        return {"error": str(e)}


@pytest.mark.parametrize("alignment", [256, 16])
def test_the_binding_plan_is_the_python_drivers(node, tmp_path, packed, alignment):
    export(packed[0], tmp_path)  # for its retarget.js
    cnn, sum10, too_large = (_plan_cases(_model("small_cnn")[0], alignment), _plan_cases(packed[0], alignment),
                             _plan_cases(packed[0], alignment, max_binding=512))
    plans = {}
    for k, spec in enumerate((cnn, sum10, too_large)):
        (tmp_path / f"cases{k}.json").write_text(json.dumps(spec))
        js = _node("plan", tmp_path, tmp_path / f"cases{k}.json")["plans"]
        python = [_python_plan(spec, case) for case in spec["cases"]]
        if spec is too_large:
            assert all("exceeds" in plan["error"] for plan in python + js)
        else:
            assert js == python
        plans[k] = python
    assert any(plan["scratch"] and plan["before"] and plan["after"] for plan in plans[1])  # the packed path
    # the runtime's 256-byte layout: each unpacked binding is exactly its tensor, so no element base is needed
    assert not any(any(plan["bases"]) for plan in plans[0])


def _page_block() -> str:
    return re.search(r"```html\n(.*?)```", README.read_text(), re.S).group(1)


def test_the_readme_shows_the_page_that_export_writes(tmp_path, packed):
    export(packed[0], tmp_path)
    assert _page_block() == (tmp_path / "index.html").read_text()


def test_the_example_page_runs_the_model_and_shows_its_outputs(dawn, tmp_path):
    art, x, _, model = _model("mlp")
    export(art, tmp_path / "model")
    log = _node("page", tmp_path / "model")["log"]
    line = next(line for line in log.splitlines() if line.startswith("main output 0 [8,10]"))
    shown = np.array(line.split(": ", 1)[1].split(), dtype=np.float32)
    x = (np.sin(np.arange(x.size, dtype=np.float64)) * 2).astype(np.float32).reshape(x.shape)  # what the page feeds
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy().reshape(-1)[:10]
    assert relative_error(shown, expected) <= 1e-4


@pytest.fixture
def mlp_folder(tmp_path) -> Path:
    export(_model("mlp")[0], tmp_path / "model")
    return tmp_path / "model"


def test_token_ids_argmax_and_masks_in_the_js_loader_match_torch(dawn, tmp_path, tokens_and_masks):
    """i64 and bool tensors (BigInt64Array and Uint8Array in JS), held by the kernels in 32-bit words (an i64 in
    two)."""
    model, ids = tokens_and_masks
    with torch.no_grad():
        expected = [t.numpy() for t in model(ids)]
    export(retarget.compile(import_model(model, example_inputs=(ids,)), "webgpu-spirv"), tmp_path / "model")
    result = _run(tmp_path / "model", [ids.numpy()], dtypes=[e.dtype for e in expected])
    got = result["outputs"][0]
    np.testing.assert_allclose(got[0], expected[0].ravel(), rtol=1e-5, atol=1e-6)
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_array_equal(g, e.ravel())


def test_int64_past_32_bits_in_the_js_loader_matches_torch(dawn, tmp_path, wide_integers):
    """BigInt64Arrays in and out hold whole 64-bit values, which the kernels compute in pairs of u32 words."""
    model, x = wide_integers
    with torch.no_grad():
        expected = [t.numpy() for t in model(x)]
    export(retarget.compile(import_model(model, example_inputs=(x,)), "webgpu-spirv"), tmp_path / "model")
    result = _run(tmp_path / "model", [x.numpy()], dtypes=[e.dtype for e in expected])
    assert "error" not in result, result
    for g, e in zip(result["outputs"][0], expected, strict=True):
        np.testing.assert_array_equal(g, e.ravel())


def test_an_input_outside_a_range_the_manifest_records_is_refused(dawn, tmp_path, wide_integers):
    """A target may hold a type only within a range (`SupportTable.ranges`; webgpu-spirv holds all of i64 now): the
    module records it on the inputs, and the loader checks a call against it, BigInts included."""
    model, x = wide_integers
    export(retarget.compile(import_model(model, example_inputs=(x,)), "webgpu-spirv"), tmp_path / "model")
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    manifest["functions"]["main"]["inputs"][0]["range"] = [-2**31, 2**31 - 1, "a test target holds i64 in 32 bits"]
    (tmp_path / "model" / "manifest.json").write_text(json.dumps(manifest))
    refused = _run(tmp_path / "model", [np.full(x.shape, -2**40)])
    assert refused["name"] == "RetargetError"
    assert ("input 0 ('x') of main holds -1099511627776, outside [-2147483648, 2147483647]: a test target holds i64 "
            "in 32 bits") in refused["error"]
    assert "error" not in _run(tmp_path / "model", [np.full(x.shape, -2**31)])


def test_a_uint8_image_and_8_and_16_bit_integers_in_the_js_loader_match_torch(dawn, tmp_path, image_bytes):
    """A Uint8Array in (a canvas's pixels); Int8Array and Int16Array out, held by the kernels in 32-bit words."""
    model, image = image_bytes
    with torch.no_grad():
        expected = [t.numpy() for t in model(image)]
    export(retarget.compile(import_model(model, example_inputs=(image,)), "webgpu-spirv"), tmp_path / "model")
    got = _run(tmp_path / "model", [image.numpy()], dtypes=[e.dtype for e in expected])["outputs"][0]
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_array_equal(g, e.ravel())


def test_an_input_of_the_wrong_size_is_refused_with_the_shape(dawn, mlp_folder):
    result = _run(mlp_folder, [np.zeros(100, np.float32)])
    assert result["name"] == "RetargetError"
    assert "input 0 ('input') of main must hold 512 elements (shape [8,64]" in result["error"]


def test_a_model_that_needs_more_than_the_adapter_has_is_refused_with_the_fix(dawn, mlp_folder):
    manifest = json.loads((mlp_folder / "manifest.json").read_text())
    manifest["limits"]["max-compute-workgroup-storage-size"] = 1 << 40
    feature = "shader-f16" if "shader-f16" not in dawn["features"] else "retarget-test-feature"
    manifest["features"].append(feature)
    (mlp_folder / "manifest.json").write_text(json.dumps(manifest))
    error = _run(mlp_folder, [np.zeros(512, np.float32)])["error"]
    assert f"maxComputeWorkgroupStorageSize {1 << 40} >" in error and f"feature {feature}" in error
    assert "compile for webgpu-spirv:webgpu" in error


def test_wgsl_the_device_rejects_is_an_error_naming_the_kernel(dawn, mlp_folder):
    wgsl = sorted((mlp_folder / "kernels").glob("*.wgsl"))[0]
    wgsl.write_text(wgsl.read_text().replace("fn ", "fn fn ", 1))
    error = _run(mlp_folder, [np.zeros(512, np.float32)])["error"]
    assert f"rejected the WGSL of kernel {wgsl.stem} (kernels/{wgsl.name})" in error


def test_a_missing_file_is_an_error_naming_its_url(dawn, mlp_folder):
    (mlp_folder / "constants.bin").unlink()
    error = _run(mlp_folder, [np.zeros(512, np.float32)])["error"]
    assert re.search(r"cannot fetch http://127\.0\.0\.1:\d+/constants\.bin: 404", error)


def test_two_bindings_of_a_dispatch_over_the_same_bytes_are_refused_naming_the_kernel(dawn, mlp_folder):
    manifest = json.loads((mlp_folder / "manifest.json").read_text())
    dispatch = next(c for c in manifest["functions"]["main"]["program"] if c["op"] == "dispatch")
    arena = [b for b in dispatch["bindings"] if b[0] == "arena"]
    arena[-1][1] = arena[0][1]  # its output over its input: WebGPU forbids it for writable storage, Dawn checks
    (mlp_folder / "manifest.json").write_text(json.dumps(manifest))
    error = _run(mlp_folder, [np.zeros(512, np.float32)])["error"]
    kernel = manifest["kernels"][dispatch["entry"]]["name"]
    assert f"kernel {kernel} binds overlapping bytes of the arena buffer" in error
