"""Small ONNX models built in code, run through retarget and compared with a reference, for the ONNX importer's tests
(core and plugins alike): `model_of` one node or `graph_of` several, `compiled_outputs` on a target,
`reference_outputs` from onnx's ReferenceEvaluator or onnxruntime, `assert_same`."""

from __future__ import annotations

import numpy as np

import retarget

from .devices import skip_unless_runs
from .torch_cases import device_of


def graph_of(nodes, inputs: dict, outputs, constants: dict | None = None, opset: int = 21, shapes=None):
    """A model of `nodes` reading graph inputs `inputs` (name -> example array) and `constants` (name -> array; an
    empty name is skipped). `shapes` overrides an input's declared shape (symbolic sizes)."""
    from onnx import helper, numpy_helper

    declared = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype),
                                              (shapes or {}).get(name, x.shape)) for name, x in inputs.items()]
    graph = helper.make_graph(nodes, "g", declared, [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items() if k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def model_of(op, inputs: dict, constants: dict | None = None, opset=21, outputs=("y",), shapes=None, **attrs):
    """One `op` node reading graph inputs `inputs` then `constants` (an empty name is a skipped optional input)."""
    from onnx import helper

    constants = constants or {}
    node = helper.make_node(op, [*inputs, *constants], list(outputs), **attrs)
    return graph_of([node], inputs, outputs, constants, opset, shapes)


def compiled_outputs(model, target, *inputs, **compile_options) -> list[np.ndarray]:
    """The model compiled for `target` and run on its device (skipped, saying why, where it cannot run here: no
    such device, or a WebGPU adapter without shader-f16 for a model of halves)."""
    from retarget.passes.placement import PlacementError

    device = device_of(target)
    skip_unless_runs(target, device)
    try:
        compiled = retarget.compile(model, target, **compile_options)
    except PlacementError as e:
        if "shader-f16" not in str(e):
            raise
        import pytest

        pytest.skip(f"{target} computes no f16 on this adapter: {e.oneline()}")
    outs = retarget.load(compiled, device=device).main(*inputs)
    return list(outs) if isinstance(outs, (tuple, list)) else [outs]


def reference_outputs(model, inputs: dict, onnxruntime: bool = False) -> list[np.ndarray]:
    """onnx's ReferenceEvaluator's outputs, or onnxruntime's (CPU) where that evaluator is wrong or too slow."""
    if not onnxruntime:
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, inputs)
    import pytest

    ort = pytest.importorskip("onnxruntime")
    model.ir_version = min(model.ir_version, 8)  # what onnxruntime 1.31 reads
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def assert_same(outs, expected, rtol=1e-6, atol=0.0):
    """Same count, shapes and dtypes; floats within rtol/atol, everything else exact."""
    assert len(outs) == len(expected)
    for k, (out, ref) in enumerate(zip(outs, expected, strict=True)):
        ref = np.asarray(ref)
        assert out.shape == ref.shape and out.dtype == ref.dtype, (k, out.shape, ref.shape, out.dtype, ref.dtype)
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(out, ref, err_msg=f"output {k}")


def matches_reference(model, target, inputs: dict, rtol=1e-6, atol=0.0, onnxruntime: bool = False):
    assert_same(compiled_outputs(model, target, *inputs.values()), reference_outputs(model, inputs, onnxruntime),
                rtol, atol)
