"""ONNX's own backend node tests, for every op the onnx importer claims, run on the vmvx interpreter.

The cases come from `onnx.backend.test` (generated in memory: this onnx wheel ships no
`data/node` directory). A case is selected when every op in its graph is in
`SUPPORTED_OPS`; that includes the `_expanded` variants, which spell an op in simpler ones.
Outputs are compared as onnx's runner does: same shape, same dtype, allclose with the
case's rtol/atol. Cases that fail for a documented reason are in `EXPECTED_FAILURES`.
"""

from __future__ import annotations

import functools
import re
import warnings

import numpy as np
import pytest
from retarget.errors import RetargetError
from retarget.importers.onnx import SHAPE_OPERANDS, SUPPORTED_OPS, OnnxImporter, op_key
from retarget.importers.onnx_legacy import reads

onnx = pytest.importorskip("onnx")

# why a case fails -> the case names (regular expressions, matched in full)
EXPECTED_FAILURES = {
    "string tensors are not supported: the graph IR holds numbers only":
        r"test_equal_string\w*|test_ai_onnx_ml_label_encoder_\w*",
    "optional and sequence types are not supported: the graph IR holds tensors only":
        r"test_identity_(opt|sequence)|test_if_(opt|seq)|test_loop(13_seq|16_seq_none)",
    "the expected outputs are onnx's reference evaluator's, whose numpy MatMul of bf16 returns f32 (never rounded "
    "to the declared bf16) and whose ReduceSum accumulates in bf16; vmvx rounds each op's result to its declared "
    "bf16 once, so a few elements are one bf16 ulp (0.0078) apart, past rtol 1e-2":
        r"test_attention_4d_(causal_|causal_padded_kv_|padded_kv_)bf16(_expanded)?",
    "the inverse DFT's expected outputs are numpy's ifft of complex64 input, computed in single precision: parts "
    "that are exactly 0 come out as 1.9e-7, past the case's atol of 1e-7 (the importer's are within 1e-14 of 0; "
    "onnxruntime fails these cases too)": r"test_dft_inverse(_opset19)?",
    "MaxUnpool with an output_shape larger than the inferred one: onnx's reference scatters in the inferred shape "
    "and pads its end; onnxruntime and torch (and the importer) scatter into output_shape, where MaxPool numbered "
    "the indices (onnx/onnx#2398)": r"test_maxunpool_export_with_output_shape",
}


@functools.cache
def node_cases():
    """(name, TestCase) for each node test whose ops are all claimed, sorted by name."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    claimed = set(SUPPORTED_OPS)
    selected = {}
    for case in cases:
        ops = {op_key(n) for n in case.model.graph.node}
        opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), None)
        read = all(reads(n.op_type, opset) for n in case.model.graph.node if n.domain in ("", "ai.onnx"))
        if ops and ops <= claimed and read:  # each op's version at the case's opset (onnx_legacy)
            selected[case.name] = case
    return sorted(selected.items())


def claimed_op(case) -> str:
    """The op a case is about: the single op of its graph, else the op named by the case."""
    ops = [op_key(n) for n in case.model.graph.node]
    if len(set(ops)) == 1:
        return ops[0]
    name = case.name.removeprefix("test_").replace("_", "").lower()
    return max((op for op in SUPPORTED_OPS if name.startswith(op.lower())), key=len, default=ops[-1])


def expected_failure(name: str) -> str | None:
    for reason, pattern in EXPECTED_FAILURES.items():
        if re.fullmatch(pattern, name):
            return reason
    return None


def _array(x):
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


def shape_operand_inputs(model) -> set[str]:
    """Graph inputs that an operand which must be static (a Reshape's shape, Slice's starts, ...) is
    computed from, directly or through other nodes (an expanded function's Sub, Cast, Concat).

    Node tests pass those as runtime inputs; a static-shape compiler specializes them, as
    IREE's ONNX import does, so the harness binds them to the data set's values."""
    graph_inputs = {i.name for i in model.graph.input}
    producer = {out: node for node in model.graph.node for out in node.output}
    wanted = [node.input[i] for node in model.graph.node for i in SHAPE_OPERANDS.get(node.op_type, ())
              if i < len(node.input) and node.input[i]]
    bound, seen = set(), set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph_inputs:
            bound.add(name)
        elif name in producer:
            wanted += [i for i in producer[name].input if i]
    return bound


def run_case(case, target: str | None = None, device: str | None = None) -> None:
    """Import, run and compare one node test; raises on any difference. With no target, the imported graph runs on
    vmvx's interpreter; with one, it is compiled for `target` and run on `device`."""
    for inputs, expected in case.data_sets:
        inputs, expected = [_array(x) for x in inputs], [_array(x) for x in expected]
        initialized = {t.name for t in case.model.graph.initializer}
        names = [i.name for i in case.model.graph.input if i.name not in initialized]
        bound = shape_operand_inputs(case.model)
        binding = {n: x for n, x in zip(names, inputs, strict=False) if n in bound}
        arguments = [x for n, x in zip(names, inputs, strict=False) if n not in bound]
        if target is None:
            from retarget.vmvx.interpreter import run_function

            outputs = run_function(OnnxImporter().load(case.model, bind_inputs=binding).functions["main"], arguments)
        else:
            import retarget

            loaded = retarget.load(retarget.compile(case.model, target, bind_inputs=binding), device=device)
            outputs = loaded.main(*arguments)
            outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        assert len(outputs) == len(expected)
        for i, (out, ref) in enumerate(zip(outputs, expected, strict=False)):
            ref = np.asarray(ref)
            assert out.shape == ref.shape, f"output {i}: shape {out.shape} != {ref.shape}"
            assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype} != {ref.dtype}"
            if ref.dtype.kind in "fc" or ref.dtype.name.startswith(("bfloat16", "float")):  # ml_dtypes floats too
                rtol = max(case.rtol, 1e-2) if ref.dtype.name == "bfloat16" else case.rtol
                np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=case.atol,
                                           err_msg=f"output {i}")
            else:
                np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")


def _params():
    params = []
    for name, case in node_cases():
        reason = expected_failure(name)
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        params.append(pytest.param(case, id=name, marks=marks))
    return params


@pytest.mark.parametrize("case", _params())
def test_onnx_node(case):
    with np.errstate(all="ignore"):
        run_case(case)


def test_unsupported_case_raises_retarget_error_not_bare_exception():
    """Cases whose ops are not claimed fail with a RetargetError naming the op."""
    from onnx import TensorProto, helper

    node = helper.make_node("TfIdfVectorizer", ["a"], ["c"], name="tfidf")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(RetargetError, match="TfIdfVectorizer"):
        OnnxImporter().load(model)
