"""ONNX's signal ops past what ONNX's own node tests (test_onnx_node_tests.py) cover: DFT of complex and real
inputs, inverse and one-sided, truncated and zero-padded, along an inner axis, long enough to take the Cooley-Tukey
split (2048, 3000) and Bluestein's chirp (a prime, 1031), in f16 and f64 and over a batch known only at run time;
STFT with and without a window, one-sided or not, of a complex signal; the windows, periodic and symmetric, in f32
and f16; MelWeightMatrix; a log-mel spectrogram end to end; and what is refused. The reference is numpy.fft in
float64 (onnxruntime and onnx's ReferenceEvaluator where they agree with it); each model is compiled for vmvx and
llvm-cpu and run."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import InputError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.importers.onnx_signal import DIRECT_LIMIT  # noqa: E402
from retarget.testing.onnx_cases import (  # noqa: E402
    assert_same,
    compiled_outputs,
    graph_of,
    model_of,
    reference_outputs,
)
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]
SIGNAL_TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32, I64 = np.float32, np.int64


def as_complex(x: np.ndarray) -> np.ndarray:
    """[..., 1 or 2] in float64 as complex numbers [...]."""
    x = x.astype(np.float64)
    return x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)


def interleaved(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], -1)


def assert_close_to(out: np.ndarray, expected: np.ndarray, dtype=F32, tol=1e-5):
    """Same shape and dtype; every element within `tol` of the largest magnitude of `expected` (in float64)."""
    assert out.shape == expected.shape and out.dtype == dtype, (out.shape, expected.shape, out.dtype)
    error = np.abs(out.astype(np.float64) - expected).max() / np.abs(expected).max()
    assert error <= tol, error


def numpy_dft(x, length, axis, inverse=False, onesided=False):
    """What DFT computes, by numpy.fft in float64."""
    z = as_complex(x)
    if inverse and onesided:
        return np.fft.irfft(z, n=length, axis=axis)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(z, n=length, axis=axis)
    return interleaved(np.take(y, range(length // 2 + 1), axis) if onesided else y)


def dft_model(x, length=None, axis=None, opset=20, **attrs):
    """DFT-20 (axis an input), or DFT-17 (axis an attribute) for opset < 20."""
    constants = {"dft_length": np.array(length, I64) if length else None}
    if opset >= 20 and axis is not None:
        constants["axis"] = np.array(axis, I64)
    elif axis is not None:
        attrs["axis"] = axis
    node = helper.make_node("DFT", ["x"] + [k if v is not None else "" for k, v in constants.items()], ["y"], **attrs)
    return graph_of([node], {"x": x}, ["y"], {k: v for k, v in constants.items() if v is not None}, opset)


# -- DFT ----------------------------------------------------------------------------------------------------------

DFTS = {  # name: (input shape, dft_length (None: the signal's), axis, inverse, onesided)
    "of a complex signal": ((2, 12, 2), None, -2, 0, 0),
    "inverse of a complex signal": ((2, 12, 2), None, -2, 1, 0),
    "one-sided of a real signal": ((2, 13, 1), None, 1, 0, 1),
    "inverse one-sided to an even length": ((2, 7, 2), None, 1, 1, 1),
    "inverse one-sided to an odd length, of half a spectrum too short": ((2, 4, 2), 11, 1, 1, 1),
    "of a real signal truncated to dft_length": ((2, 12, 1), 8, -2, 0, 0),
    "inverse of a complex signal zero-padded to dft_length": ((2, 12, 2), 20, -2, 1, 0),
    "along an inner axis": ((2, 9, 5, 2), None, 1, 0, 0),
    "split, 2048 = 32 x 64": ((2, 2048, 2), None, -2, 0, 0),
    "split, 3000 = 50 x 60, one-sided, of a shorter real signal": ((2, 2900, 1), 3000, -2, 0, 1),
    "split, inverse one-sided to 4096": ((1, 2049, 2), None, -2, 1, 1),
    "Bluestein, of the prime 1031": ((2, 1031, 2), None, -2, 0, 0),
}


@pytest.mark.parametrize("target", SIGNAL_TARGETS)
@pytest.mark.parametrize("case", DFTS)
def test_dft_matches_numpy_fft(case, target):
    shape, length, axis, inverse, onesided = DFTS[case]
    x = np.random.default_rng(len(case)).standard_normal(shape).astype(F32)
    size = shape[axis]
    length = length or (2 * (size - 1) if inverse and onesided else size)
    model = dft_model(x, length if length != size else None, axis, inverse=inverse, onesided=onesided)
    (out,) = compiled_outputs(model, target, x)
    assert_close_to(out, numpy_dft(x, length, axis % len(shape), inverse, onesided))


def test_the_long_cases_take_the_split_and_bluestein_paths():
    """Their constants stay small: none holds a sixteenth of the direct form's N x N matrix."""
    for case in ("split, 2048 = 32 x 64", "Bluestein, of the prime 1031"):
        length = DFTS[case][0][1]
        fn = OnnxImporter().load(dft_model(np.zeros(DFTS[case][0], F32))).functions["main"]
        constants = [op.attrs["value"].array for op in fn.ops if op.name == "rt.constant"]
        assert length > DIRECT_LIMIT and max(c.size for c in constants) < length ** 2 / 16


@pytest.mark.parametrize("target", TARGETS)
def test_dft_17_takes_its_axis_as_an_attribute_and_agrees_with_onnxruntime(target):
    x = np.random.default_rng(0).standard_normal((3, 10, 4, 1)).astype(F32)
    model = dft_model(x, axis=2, opset=17, onesided=1)
    (out,) = compiled_outputs(model, target, x)
    assert_close_to(out, numpy_dft(x, 4, 2, onesided=True))
    assert_same([out], reference_outputs(model, {"x": x}, onnxruntime=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-3), (np.float64, 1e-12)])
def test_dft_of_half_and_double_floats_keeps_their_type(dtype, tol, target):
    """f16 is summed in f32 and rounded once; f64 computes in f64."""
    x = np.random.default_rng(1).standard_normal((2, 300, 2)).astype(dtype)
    (out,) = compiled_outputs(dft_model(x, inverse=1), target, x)
    assert_close_to(out, numpy_dft(x, 300, 1, inverse=True), dtype, tol)


@pytest.mark.parametrize("target", TARGETS)
def test_a_dft_over_a_batch_known_only_at_run_time(target):
    x = np.zeros((1, 16, 1), F32)
    model = dft_model(x, onesided=1)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 16, 1)).astype(F32)
        (out,) = compiled_outputs(model, target, x, dims={"batch": (1, 4)})
        assert_close_to(out, numpy_dft(x, 16, 1, onesided=True))


# -- STFT ---------------------------------------------------------------------------------------------------------

def numpy_stft(signal, step, window, length, onesided):
    starts = range(0, signal.shape[1] - length + 1, step)
    frames = np.stack([as_complex(signal)[:, s:s + length] for s in starts], 1) * window
    spectrum = np.fft.fft(frames, axis=-1)
    return interleaved(spectrum[..., :length // 2 + 1] if onesided else spectrum)


STFTS = {  # name: (signal's last axis, with a window, frame_length given, onesided)
    "windowed, one-sided": (1, True, False, 1),
    "windowed and frame_length given, both sides": (1, True, True, 0),
    "rectangular, frame_length given, one-sided": (1, False, True, 1),
    "of a complex signal, windowed, both sides": (2, True, False, 0),
}


@pytest.mark.parametrize("target", SIGNAL_TARGETS)
@pytest.mark.parametrize("case", STFTS)
def test_stft_matches_numpy(case, target):
    parts, windowed, length_given, onesided = STFTS[case]
    rng = np.random.default_rng(len(case))
    signal = rng.standard_normal((2, 100, parts)).astype(F32)
    window = rng.uniform(0, 1, 24).astype(F32)
    inputs = {"signal": signal, "window": window} if windowed else {"signal": signal}
    constants = {"frame_step": np.array(7, I64), **({"frame_length": np.array(24, I64)} if length_given else {})}
    node = helper.make_node("STFT", ["signal", "frame_step", "window" if windowed else "",
                                     "frame_length" if length_given else ""], ["y"], onesided=onesided)
    model = graph_of([node], inputs, ["y"], constants, opset=17)
    out = compiled_outputs(model, target, *inputs.values())[0]
    assert_close_to(out, numpy_stft(signal, 7, window if windowed else 1, 24, onesided))


# -- windows and MelWeightMatrix: constants -----------------------------------------------------------------------

def numpy_window(op, size, periodic):
    """numpy's windows (Hamming with ONNX's 25/46, not numpy's 0.54): a periodic one is a symmetric one a point
    longer, less its last point."""
    n = size + 1 if periodic else size
    if op == "HammingWindow":
        window = 25 / 46 - 21 / 46 * np.cos(2 * np.pi * np.arange(n) / (n - 1))
    else:
        window = {"HannWindow": np.hanning, "BlackmanWindow": np.blackman}[op](n)
    return window[:size]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("periodic", [1, 0])
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows_are_computed_in_float64_and_rounded_once(op, periodic, target):
    """f32 and f16 outputs, both rounded from float64 (onnx's reference computes f16 windows in f16)."""
    size = {"size": np.array(10, I64)}
    f32_window = model_of(op, {}, size, opset=17, periodic=periodic)
    f16_window = model_of(op, {}, size, opset=17, periodic=periodic, output_datatype=onnx.TensorProto.FLOAT16)
    expected = numpy_window(op, 10, periodic)
    assert_same(compiled_outputs(f32_window, target), [expected.astype(F32)], rtol=0, atol=1e-7)
    assert_same(compiled_outputs(f16_window, target), [expected.astype(np.float16)], rtol=0)
    assert_same(compiled_outputs(f32_window, target), reference_outputs(f32_window, {}, onnxruntime=True),
                rtol=1e-6, atol=2e-7)


MEL = {"num_mel_bins": np.array(10, I64), "dft_length": np.array(64, I64), "sample_rate": np.array(16000, I64),
       "lower_edge_hertz": np.array(125, F32), "upper_edge_hertz": np.array(7600, F32)}


@pytest.mark.parametrize("output_datatype", [onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE])
def test_mel_weight_matrix_is_onnxs_reference_exactly(output_datatype):
    model = model_of("MelWeightMatrix", {}, MEL, opset=17, output_datatype=output_datatype)
    (out,) = compiled_outputs(model, "vmvx")
    assert_same([out], reference_outputs(model, {}), rtol=0)
    assert_same([out], reference_outputs(model, {}, onnxruntime=True), rtol=0)
    assert out.shape == (33, 10) and out.max() == 1


@pytest.mark.parametrize("target", SIGNAL_TARGETS)
def test_a_log_mel_spectrogram_end_to_end(target):
    """HannWindow -> STFT -> magnitude -> MatMul by MelWeightMatrix -> Log, against numpy in float64."""
    nodes = [helper.make_node("HannWindow", ["n_fft"], ["window"]),
             helper.make_node("STFT", ["audio", "hop", "window"], ["spectrum"]),
             helper.make_node("Mul", ["spectrum", "spectrum"], ["squares"]),
             helper.make_node("ReduceSum", ["squares", "last"], ["power"], keepdims=0),
             helper.make_node("Sqrt", ["power"], ["magnitude"]),
             helper.make_node("MelWeightMatrix", ["mels", "n_fft", "rate", "low", "high"], ["filters"]),
             helper.make_node("MatMul", ["magnitude", "filters"], ["mel"]),
             helper.make_node("Add", ["mel", "floor"], ["floored"]),
             helper.make_node("Log", ["floored"], ["y"])]
    constants = {"n_fft": np.array(64, I64), "hop": np.array(16, I64), "last": np.array([-1], I64),
                 "mels": np.array(10, I64), "rate": np.array(16000, I64), "low": np.array(0, F32),
                 "high": np.array(8000, F32), "floor": np.array(1e-6, F32)}
    audio = np.sin(np.arange(1000) * 0.3)[None, :, None] + np.random.default_rng(0).normal(0, 0.1, (2, 1000, 1))
    audio = audio.astype(F32)
    model = graph_of(nodes, {"audio": audio}, ["y"], constants, opset=18)
    (out,) = compiled_outputs(model, target, audio)
    filters = reference_outputs(model_of("MelWeightMatrix", {}, dict(zip(MEL, (constants[k] for k in (
        "mels", "n_fft", "rate", "low", "high"))))), {})[0].astype(np.float64)
    magnitude = np.abs(numpy_stft(audio, 16, np.hanning(65)[:64], 64, True) @ [1, 1j])
    assert_close_to(out, np.log(magnitude @ filters + 1e-6), tol=2e-5)


# -- refusals -----------------------------------------------------------------------------------------------------

def load(model):
    return OnnxImporter().load(model)


def test_a_signal_length_known_only_at_run_time_is_refused():
    model = dft_model(np.zeros((2, 8, 1), F32))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "samples"
    with pytest.raises(UnsupportedOpError, match="signal's length .* known only at run time"):
        load(model)


@pytest.mark.parametrize("op, inputs, constants, what", [
    ("DFT", {"x": np.zeros((2, 8, 1), F32), "dft_length": np.array(8, I64)}, {}, "dft_length"),
    ("STFT", {"x": np.zeros((1, 8, 1), F32), "frame_step": np.array(2, I64)}, {}, "frame_step"),
    ("HannWindow", {"size": np.array(8, I64)}, {}, "size"),
    ("MelWeightMatrix", {"num_mel_bins": np.array(4, I64)}, dict(list(MEL.items())[1:]), "num_mel_bins"),
])
def test_a_size_known_only_at_run_time_is_refused_by_name(op, inputs, constants, what):
    with pytest.raises(UnsupportedOpError, match=f"{op}'s {what} .* must be known at import time"):
        load(model_of(op, inputs, constants, opset=17))


def test_the_values_axis_as_dft_axis_is_refused():
    with pytest.raises(InputError, match="axis must be in"):
        load(dft_model(np.zeros((2, 8, 2), F32), axis=-1))


def test_mel_bands_past_the_nyquist_frequency_are_refused():
    constants = {**MEL, "upper_edge_hertz": np.array(12000, F32)}
    with pytest.raises(InputError, match="outside the 33 bins"):
        load(model_of("MelWeightMatrix", {}, constants, opset=17))
