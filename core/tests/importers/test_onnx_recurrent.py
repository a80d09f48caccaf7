"""ONNX's RNN, GRU and LSTM, at what ONNX's own node tests (test_onnx_node_tests.py) leave out: each direction with
biases and initial states, batch-major layout, sequence_lens given at run time (uneven, 0 and full), peepholes,
clip, input_forget, linear_before_reset, other activation functions with their alphas and betas, an output alone, a
batch known only at run time, the refusals, and the legacy torch exporter's stacked bidirectional layers. The
reference is onnxruntime (CPU) in the time-major layout, the only one it runs; torch for torch's modules. Then
opset 27's CausalConvWithState and LinearAttention (linear-attention and state-space LLMs) against onnx's
reference, on every importer target: a prefill that continues a past state, in f32 and f16, grouped query heads
and per-key decay."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import retarget  # noqa: E402
from onnx import helper  # noqa: E402
from retarget.errors import InputError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import assert_same, compiled_outputs, graph_of, reference_outputs  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]
ALL_TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32 = np.float32
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")  # in the node's order
SEQ, BATCH, SIZE, HIDDEN = 5, 4, 3, 4
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def arrays(op, directions=1, seed=0, lengths=None, initial=True, peepholes=False):
    """X, W, R and B (and the optional inputs asked for) of one node, time-major, with weights small enough that
    the gates neither saturate nor vanish."""
    rng = np.random.default_rng(seed)
    rows = GATES[op] * HIDDEN

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(F32)

    a = {"X": normal(SEQ, BATCH, SIZE), "W": normal(directions, rows, SIZE, scale=0.6),
         "R": normal(directions, rows, HIDDEN, scale=0.6), "B": normal(directions, 2 * rows, scale=0.5)}
    if lengths is not None:
        a["sequence_lens"] = np.array(lengths, np.int32)
    if initial:
        a["initial_h"] = normal(directions, BATCH, HIDDEN)
        if op == "LSTM":
            a["initial_c"] = normal(directions, BATCH, HIDDEN)
    if peepholes:
        a["P"] = normal(directions, 3 * HIDDEN)
    return a


def outputs_of(op):
    return ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")


def recurrent_model(op, inputs: dict, constants: dict, outputs=None, shapes=None, **attrs):
    """One `op` node reading graph inputs `inputs` and initializers `constants`, by their ONNX names."""
    outputs = outputs or outputs_of(op)
    names = [name if name in inputs or name in constants else "" for name in INPUTS[:8 if op == "LSTM" else 6]]
    while not names[-1]:
        names.pop()
    node = helper.make_node(op, names, list(outputs), hidden_size=HIDDEN, **attrs)
    return graph_of([node], inputs, [o for o in outputs if o], constants, shapes=shapes)


def split(a: dict, at_run_time=("X", "sequence_lens", "initial_h", "initial_c")):
    """The arrays as graph inputs (those named) and initializers (the weights)."""
    return ({k: v for k, v in a.items() if k in at_run_time}, {k: v for k, v in a.items() if k not in at_run_time})


def onnxruntime_outputs(op, a: dict, outputs=None, layout=0, **attrs):
    """onnxruntime's outputs of the node, in `layout` (onnxruntime runs layout 0 only: batch-major outputs are
    its time-major ones transposed)."""
    inputs, constants = split(a)
    expected = reference_outputs(recurrent_model(op, inputs, constants, outputs, **attrs), inputs, onnxruntime=True)
    if not layout:
        return expected
    return [y.transpose(2, 0, 1, 3) if y.ndim == 4 else y.transpose(1, 0, 2) for y in expected]


def batch_major(a: dict) -> dict:
    return {k: v.transpose(1, 0, 2) if k in ("X", "initial_h", "initial_c") else v for k, v in a.items()}


def assert_matches_onnxruntime(op, target, a: dict, outputs=None, **attrs):
    inputs, constants = split(a)
    model = recurrent_model(op, inputs, constants, outputs, **attrs)
    assert_same(compiled_outputs(model, target, *inputs.values()), onnxruntime_outputs(op, a, outputs, **attrs),
                **TOLERANCE)


# -- each op, each direction -------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_each_direction_with_biases_and_initial_states_matches_onnxruntime(op, direction, target):
    a = arrays(op, 2 if direction == "bidirectional" else 1)
    assert_matches_onnxruntime(op, target, a, direction=direction)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_batch_major_layout_is_the_time_major_result_transposed(op, target):
    a = arrays(op, 2, lengths=[5, 2, 0, 3], peepholes=op == "LSTM")
    inputs, constants = split(batch_major(a))
    model = recurrent_model(op, inputs, constants, direction="bidirectional", layout=1)
    expected = onnxruntime_outputs(op, a, direction="bidirectional", layout=1)
    assert_same(compiled_outputs(model, target, *inputs.values()), expected, **TOLERANCE)


# -- sequence_lens -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_sequence_lens_at_run_time_stop_each_element_at_its_length(op, direction, target):
    """Uneven lengths, one empty and one full: Y is 0 past each length, the final states are the last step's (0
    where the length is 0), and the reverse direction starts at each element's own last step."""
    a = arrays(op, 2 if direction == "bidirectional" else 1, lengths=[3, SEQ, 0, 1])
    assert_matches_onnxruntime(op, target, a, direction=direction)


@pytest.mark.parametrize("target", TARGETS)
def test_rnn_sequence_lens_known_at_import_time(target):
    a = arrays("RNN", 2, lengths=[2, 4, 1, SEQ])
    inputs, constants = split(a, at_run_time=("X",))
    model = recurrent_model("RNN", inputs, constants, direction="bidirectional")
    assert_same(compiled_outputs(model, target, a["X"]), onnxruntime_outputs("RNN", a, direction="bidirectional"),
                **TOLERANCE)


def test_full_lengths_known_at_import_time_need_no_mask():
    a = arrays("LSTM", lengths=[SEQ] * BATCH)
    inputs, constants = split(a, at_run_time=("X",))
    fn = OnnxImporter().load(recurrent_model("LSTM", inputs, constants)).functions["main"]
    assert not any(op.name == "rt.select" for op in fn.ops)


# -- each op's own attributes and inputs ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_peepholes_clip_and_input_forget(input_forget, target):
    a = arrays("LSTM", 2, lengths=[4, 2, 5, 1], peepholes=True)
    assert_matches_onnxruntime("LSTM", target, a, direction="bidirectional", clip=0.8, input_forget=input_forget)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset_with_clip(linear_before_reset, target):
    a = arrays("GRU", 2)
    assert_matches_onnxruntime("GRU", target, a, direction="bidirectional", clip=0.9,
                               linear_before_reset=linear_before_reset)


# each op's functions, per direction (they differ between the two), with alphas and betas taken in order
ACTIVATIONS = {
    "RNN": {"activations": ["LeakyRelu", "ThresholdedRelu"], "activation_alpha": [0.2, 0.3]},
    "GRU": {"activations": ["HardSigmoid", "Softsign", "Sigmoid", "ScaledTanh"], "activation_alpha": [0.3, 0.9],
            "activation_beta": [0.4, 1.5]},
    "LSTM": {"activations": ["Elu", "Affine", "Softplus", "Sigmoid", "Relu", "Tanh"], "activation_alpha": [0.7, 0.5],
             "activation_beta": [0.1]},
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_activation_functions_with_their_alphas_and_betas(op, target):
    a = arrays(op, 2, lengths=[5, 3, 1, 4])
    assert_matches_onnxruntime(op, target, a, direction="bidirectional", **ACTIVATIONS[op])


@pytest.mark.parametrize("activation, defaults", [
    ("ThresholdedRelu", {"activation_alpha": [1.0]}), ("Affine", {"activation_alpha": [1.0], "activation_beta": [0.0]}),
    ("ScaledTanh", {"activation_alpha": [1.0], "activation_beta": [1.0]}), ("LeakyRelu", {"activation_alpha": [0.01]}),
])
def test_missing_alphas_and_betas_are_the_onnx_operators_defaults(activation, defaults):
    """onnxruntime takes 0 where ThresholdedRelu's, Affine's and ScaledTanh's are missing; the spec, and the
    importer, those of the ONNX operator: the same as giving them."""
    a = arrays("RNN")
    inputs, constants = split(a)
    model = recurrent_model("RNN", inputs, constants, activations=[activation])
    expected = onnxruntime_outputs("RNN", a, activations=[activation], **defaults)
    assert_same(compiled_outputs(model, "vmvx", *inputs.values()), expected, **TOLERANCE)


# -- outputs and shapes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_only_y_h_asked_for_computes_no_y(target):
    a = arrays("LSTM", lengths=[5, 2, 3, 4])
    outputs = ("", "Y_h")
    inputs, constants = split(a)
    model = recurrent_model("LSTM", inputs, constants, outputs)
    fn = OnnxImporter().load(model).functions["main"]
    assert not any(op.name == "rt.concat" for op in fn.ops)  # no step's output is gathered into Y
    assert_same(compiled_outputs(model, target, *inputs.values()), onnxruntime_outputs("LSTM", a, outputs),
                **TOLERANCE)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_a_batch_known_only_at_run_time(op):
    """One module runs any batch size, each element to its own length."""
    art = None
    for batch, lengths in ((BATCH, [3, 5, 0, 2]), (2, [1, 4])):
        a = arrays(op, 2, lengths=lengths)
        a = {k: (v[:, :batch] if k in ("X", "initial_h", "initial_c") else v) for k, v in a.items()}
        inputs, constants = split(a)
        if art is None:
            shapes = {"X": [SEQ, "batch", SIZE], "sequence_lens": ["batch"], "initial_h": [2, "batch", HIDDEN],
                      "initial_c": [2, "batch", HIDDEN]}
            model = recurrent_model(op, inputs, constants, shapes=shapes, direction="bidirectional")
            art = retarget.compile(model, "llvm-cpu")
        outs = retarget.load(art, device="local-task").main(*inputs.values())
        assert_same(list(outs), onnxruntime_outputs(op, a, direction="bidirectional"), **TOLERANCE)


# -- refusals -------------------------------------------------------------------------------------------------------

def test_a_sequence_length_known_only_at_run_time_is_refused():
    inputs, constants = split(arrays("LSTM", initial=False))
    model = recurrent_model("LSTM", inputs, constants, shapes={"X": ["seq", BATCH, SIZE]})
    with pytest.raises(UnsupportedOpError, match="sequence of length seq, known only at run time"):
        OnnxImporter().load(model)


def test_an_unknown_activation_function_is_refused():
    inputs, constants = split(arrays("RNN", initial=False))
    with pytest.raises(UnsupportedOpError, match="'Gelu' is not one of ONNX's"):
        OnnxImporter().load(recurrent_model("RNN", inputs, constants, activations=["Gelu"]))


def test_one_list_of_activations_for_two_directions_is_refused():
    inputs, constants = split(arrays("GRU", 2, initial=False))
    with pytest.raises(InputError, match="4 for its 2 direction"):
        OnnxImporter().load(recurrent_model("GRU", inputs, constants, direction="bidirectional",
                                            activations=["Sigmoid", "Tanh"]))


# -- torch's legacy (TorchScript) exporter ------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("module", ["LSTM", "GRU"])
def test_torch_exported_two_layer_bidirectional_module_matches_torch(module, target):
    torch = pytest.importorskip("torch")
    import io
    import warnings

    torch.manual_seed(0)
    rnn = getattr(torch.nn, module)(SIZE, HIDDEN, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = torch.randn(2, SEQ, SIZE)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation, and its note on batch sizes
        torch.onnx.export(rnn, (x,), buffer, dynamo=False, opset_version=14)
    with torch.no_grad():
        y, state = rnn(x)
    expected = [t.numpy() for t in (y, *(state if module == "LSTM" else (state,)))]
    assert_same(compiled_outputs(onnx.load_from_string(buffer.getvalue()), target, x.numpy()), expected,
                **TOLERANCE)


# -- opset 27: CausalConvWithState and LinearAttention ------------------------------------------------------------


def normal(*shape, scale=1.0, seed=0, dtype=F32):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_causal_conv_with_state_continues_its_past_state(dtype, target):
    x, weight = normal(2, 6, 5, dtype=dtype), normal(6, 1, 4, scale=0.5, seed=1, dtype=dtype)
    bias, past = normal(6, seed=2, dtype=dtype), normal(2, 6, 3, seed=3, dtype=dtype)
    inputs = {"x": x, "weight": weight, "bias": bias, "past": past}
    model = graph_of([helper.make_node("CausalConvWithState", list(inputs), ["y", "present"], activation="silu")],
                     inputs, ["y", "present"], opset=27)
    tolerance = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else TOLERANCE
    assert_same(compiled_outputs(model, target, *inputs.values()), reference_outputs(model, inputs), **tolerance)


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("rule, per_key_decay", [("gated_delta", False), ("gated_delta", True), ("delta", False),
                                                 ("gated", True), ("linear", False)])
def test_linear_attention_prefill_after_a_past_state(rule, per_key_decay, target):
    """6 query heads on 2 key-value heads, d_k 4, d_v 3, 5 steps after a past state (Gated DeltaNet's layout)."""
    batch, steps, q_heads, kv_heads, d_k, d_v = 2, 5, 6, 2, 4, 3
    keys = normal(batch, steps, kv_heads * d_k, seed=1)
    keys /= np.linalg.norm(keys.reshape(batch, steps, kv_heads, d_k), axis=-1).repeat(d_k, -1)  # the delta rule's
    inputs = {"q": normal(batch, steps, q_heads * d_k), "k": keys, "v": normal(batch, steps, kv_heads * d_v, seed=2),
              "past": normal(batch, kv_heads, d_k, d_v, scale=0.3, seed=3)}
    if rule in ("gated", "gated_delta"):
        inputs["decay"] = -np.abs(normal(batch, steps, kv_heads * (d_k if per_key_decay else 1), scale=0.5, seed=4))
    if rule in ("delta", "gated_delta"):
        inputs["beta"] = 1 / (1 + np.exp(-normal(batch, steps, kv_heads, seed=5)))
    names = [name if name in inputs else "" for name in ("q", "k", "v", "past", "decay", "beta")]
    names = names[:max(i for i, name in enumerate(names) if name) + 1]  # an absent input past the last is dropped
    node = helper.make_node("LinearAttention", names, ["y", "present"], q_num_heads=q_heads, kv_num_heads=kv_heads,
                            update_rule=rule)
    model = graph_of([node], inputs, ["y", "present"], opset=27)
    assert_same(compiled_outputs(model, target, *inputs.values()), reference_outputs(model, inputs), **TOLERANCE)


def test_linear_attention_refuses_a_rule_without_its_inputs_and_heads_that_do_not_divide():
    q, k, v = normal(1, 3, 8), normal(1, 3, 8), normal(1, 3, 8)
    inputs = {"q": q, "k": k, "v": v}
    for attrs, message in ((dict(q_num_heads=2, kv_num_heads=2), "needs decay"),
                           (dict(q_num_heads=3, kv_num_heads=2, update_rule="linear"), "multiple of kv_num_heads"),
                           (dict(q_num_heads=2, kv_num_heads=2, update_rule="fast"), "update_rule 'fast'")):
        node = helper.make_node("LinearAttention", list(inputs), ["y"], **attrs)
        with pytest.raises((InputError, UnsupportedOpError), match=message):
            OnnxImporter().load(graph_of([node], inputs, ["y"], opset=27))
