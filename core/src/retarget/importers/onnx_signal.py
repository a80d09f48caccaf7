"""ONNX's signal ops (opset 17 and later): DFT, STFT, HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix,
composed from graph ops, so every target runs them.

- DFT is matrix products with constant cos/sin matrices, built in float64 (the angle 2 pi (n k mod N) / N reduced
  exactly) and rounded once to the type it computes in. Complex values stay interleaved ([..., 2]), so a transform
  along the last-but-one axis is a reshape, one matmul and a reshape; another axis is moved there and back.
  Up to `DIRECT_LIMIT` points that one matmul is the whole transform. A longer length N splits as N = N1 * N2
  (Cooley-Tukey: DFTs of N1 points, a constant twiddle multiply, DFTs of N2 points, each factor done the same
  way), so the constants hold O(N1^2 + N2^2 + N) numbers and the work is O(N (N1 + N2)) a signal, not O(N^2);
  a long length with no such split (a prime) is Bluestein's chirp transform, a convolution done by DFTs of a
  power-of-two length. In f32 every form is within ~1e-6 of the largest magnitude of numpy.fft's result in
  float64 (lengths up to 4096 checked, primes included).
  Supported: DFT-17's `axis` attribute and DFT-20's `axis` input (known at import time), `inverse`, `onesided`
  (forward: the first N // 2 + 1 bins, as onnx's reference keeps them, of a complex input too; inverse: a real
  signal from half a spectrum, as numpy's irfft), `dft_length` (known at import time: the signal is truncated or
  zero-padded to it), real (last axis 1) and complex (last axis 2) inputs. f16 and bf16 compute in f32.
- STFT frames the signal with a constant gather, multiplies each frame by the window (data, known or not) and
  takes its DFT as above. `frame_step` and `frame_length` must be known at import time.
- The windows and MelWeightMatrix are constants: onnx's reference's formulas, in float64, rounded once to
  `output_datatype` (the reference computes Hann and Hamming windows in that type); their inputs must be known at
  import time.
The transformed axis must have a static size; other axes (a batch) may be known only at run time.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..ir.core import Builder, Value
from ..ir.symbolic import Sym
from . import compose as C
from .onnx import SHAPE_OPERANDS, _dtype, handles

# The longest DFT done as one matmul. Past it the split's two small matmuls win: on llvm-cpu, 256 rows of 512
# points take 3x less time split (16 x 32) than as one matmul, 1024 complex points 28x less.
DIRECT_LIMIT = 256

# operands that size a result or make a constant: known at import time (ONNX's node tests bind them there)
SHAPE_OPERANDS.update({"DFT": (1, 2), "STFT": (1, 3), "HannWindow": (0,), "HammingWindow": (0,),
                       "BlackmanWindow": (0,), "MelWeightMatrix": (0, 1, 2, 3, 4)})

def _known(n, i: int, what: str) -> np.ndarray:
    """Input `i` (the op's `what`) as an array known at import time, else a refusal that names it."""
    v = n.cv.env[n.node.input[i]]
    if isinstance(v, Value) or v.dtype == object:
        raise UnsupportedOpError(f"{n.node.op_type}'s {what} ('{n.node.input[i]}') must be known at import time",
                                 hint=f"make it a constant or an initializer, or bind the graph input with "
                                      f"bind_inputs={{'{n.node.input[i]}': value}}")
    return np.asarray(v)


def _known_int(n, i: int, what: str) -> int:
    v = _known(n, i, what)
    if v.size != 1:
        raise InputError(f"{n.node.op_type}'s {what} must be a scalar, got shape {list(v.shape)}")
    return int(v.reshape(-1)[0])


def _static_size(n, x: Value, axis: int, what: str) -> int:
    size = x.type.shape[axis]
    if isinstance(size, Sym):
        raise UnsupportedOpError(f"{n.node.op_type} of {x.type}: the {what} ({size}) is known only at run time",
                                 hint="give the signal a static length (input_shapes= at import)")
    return size


# -- the DFT as matrix products ---------------------------------------------------------------------------------

def _dft_matrix(length: int, inputs: int, outputs: int, inverse: bool, complex_in: bool, complex_out: bool = True,
                row_weights: np.ndarray | None = None) -> np.ndarray:
    """[inputs * c_in, outputs * c_out] in float64: value n (its real part, then its imaginary part where complex)
    to bin k (likewise) of the DFT of `length` points, e^(-+2 pi i n k / length) (and 1 / length when inverse)."""
    n, k = np.arange(inputs)[:, None], np.arange(outputs)[None, :]
    angle = 2 * np.pi * (n * k % length) / length  # reduced in integers: exact for long transforms
    scale = (1 / length if inverse else 1) * (1 if row_weights is None else row_weights[:, None])
    cos, sin = np.cos(angle) * scale, np.sin(angle) * scale * (1 if inverse else -1)
    # (re + i im)(cos + i sin) = (re cos - im sin) + i (re sin + im cos)
    matrix = np.stack([np.stack([cos, sin], -1), np.stack([-sin, cos], -1)], 1)  # [n, re|im in, k, re|im out]
    matrix = matrix[:, :2 if complex_in else 1, :, :2 if complex_out else 1]
    return matrix.reshape(inputs * matrix.shape[1], outputs * matrix.shape[3])


def _apply(b: Builder, x: Value, matrix: np.ndarray, outputs: int) -> Value:
    """x [..., L, c] times `matrix` [L * c, outputs * c'] over its last two axes, as one 2-D matmul:
    [..., outputs, c']."""
    lead = x.type.shape[:-2]
    flat = b.op("rt.reshape", [x], {"shape": (math.prod(lead), matrix.shape[0])})
    y = b.op("rt.matmul", [flat, b.constant(matrix.astype(x.type.dtype.np_dtype))])
    return b.op("rt.reshape", [y], {"shape": lead + (outputs, matrix.shape[1] // outputs)})


def _rotate(b: Builder, x: Value, phase: np.ndarray) -> Value:
    """x [..., c] times the constant complex `phase` (its shape x's last axes but c): complex, [..., 2]."""
    dtype = x.type.dtype.np_dtype
    if x.type.shape[-1] == 1:  # real: re * phase
        return b.op("rt.mul", [x, b.constant(np.stack([phase.real, phase.imag], -1).astype(dtype))])
    # (re + i im)(p + i q) = [re, im] * [p, p] + [im, re] * [-q, q]
    swapped = b.op("rt.gather", [x, b.constant(np.array([1, 0], np.int32))], {"axis": x.type.rank - 1})
    same = b.op("rt.mul", [x, b.constant(np.stack([phase.real, phase.real], -1).astype(dtype))])
    cross = b.op("rt.mul", [swapped, b.constant(np.stack([-phase.imag, phase.imag], -1).astype(dtype))])
    return b.op("rt.add", [same, cross])


def _swap_last_axes(b: Builder, x: Value) -> Value:
    """[..., A, B, c] to [..., B, A, c]."""
    rank = x.type.rank
    perm = tuple(range(rank - 3)) + (rank - 2, rank - 3, rank - 1)
    return b.op("rt.transpose", [x], {"perm": perm})


def _resized(b: Builder, x: Value, size: int) -> Value:
    """x [..., L, c] truncated or zero-padded to `size` along axis -2."""
    rank, length = x.type.rank, x.type.shape[-2]
    if length >= size:
        return C.slice_axis(b, x, rank - 2, 0, size)
    high = tuple(size - length if d == rank - 2 else 0 for d in range(rank))
    return b.op("rt.pad", [x], {"low": (0,) * rank, "high": high, "value": 0})


def _nearest_factor(length: int) -> int:
    """The divisor of `length` nearest its square root from below (1 for a prime)."""
    return next(d for d in range(math.isqrt(length), 0, -1) if length % d == 0)


def _transform(b: Builder, x: Value, length: int, outputs: int, inverse: bool) -> Value:
    """The first `outputs` bins of the DFT of `length` points along axis -2 of x [..., L, c] (L <= length: zero-padded
    to it): [..., outputs, 2]."""
    if length <= DIRECT_LIMIT:
        matrix = _dft_matrix(length, x.type.shape[-2], outputs, inverse, complex_in=x.type.shape[-1] == 2)
        return _apply(b, x, matrix, outputs)
    if _nearest_factor(length) > 1:
        return _split(b, x, length, outputs, inverse)
    return _bluestein(b, x, length, outputs, inverse)


def _phase(exponents: np.ndarray, length: int, inverse: bool) -> np.ndarray:
    """e^(-+2 pi i exponents / length), the exponents reduced exactly first."""
    return np.exp((1j if inverse else -1j) * 2 * np.pi * (exponents % length) / length)


def _split(b: Builder, x: Value, length: int, outputs: int, inverse: bool) -> Value:
    """Cooley-Tukey: n = second * n1 + n2 and k = k1 + first * k2, so X[k] = sum over n2 of
    w_second^(n2 k2) * w_length^(n2 k1) * (sum over n1 of w_first^(n1 k1) x[n])."""
    first = _nearest_factor(length)
    second = length // first
    lead = x.type.shape[:-2]
    x = _resized(b, x, length)
    x = b.op("rt.reshape", [x], {"shape": lead + (first, second, x.type.shape[-1])})
    x = _transform(b, _swap_last_axes(b, x), first, first, inverse)  # [..., n2, k1, 2]
    x = _rotate(b, x, _phase(np.arange(second)[:, None] * np.arange(first)[None, :], length, inverse))
    blocks = -(-outputs // first)  # only the k2 that hold a wanted bin
    x = _swap_last_axes(b, _transform(b, _swap_last_axes(b, x), second, blocks, inverse))  # [..., k2, k1, 2]
    x = b.op("rt.reshape", [x], {"shape": lead + (blocks * first, 2)})
    return _resized(b, x, outputs)


def _bluestein(b: Builder, x: Value, length: int, outputs: int, inverse: bool) -> Value:
    """Bluestein: with the chirp c(m) = e^(-+i pi m^2 / length), 2 n k = n^2 + k^2 - (k - n)^2 makes
    X[k] = c(k) * sum over n of (x[n] c(n)) * conj(c(k - n)), a convolution done by DFTs of a power of two points
    (at least L + outputs - 1, so that it does not wrap)."""
    size = x.type.shape[-2]
    span = 1 << (size + outputs - 2).bit_length()

    def chirp(m):
        return _phase(m * m, 2 * length, inverse)

    kernel = np.zeros(span, complex)  # conj(c(m)) at m = k - n, negative m wrapped to the end
    kernel[:outputs] = np.conj(chirp(np.arange(outputs)))
    kernel[span - size + 1:] = np.conj(chirp(np.arange(size - 1, 0, -1)))
    y = _transform(b, _rotate(b, x, chirp(np.arange(size))), span, span, inverse=False)
    y = _transform(b, _rotate(b, y, np.fft.fft(kernel)), span, outputs, inverse=True)
    return _rotate(b, y, chirp(np.arange(outputs)) / (length if inverse else 1))


def _real_signal(b: Builder, x: Value, length: int) -> Value:
    """The real signal of `length` points whose spectrum's first half is x [..., L, c] (numpy's irfft: the bins past
    L are 0, the imaginary parts of bin 0 and, for even lengths, of bin length / 2 are ignored): [..., length, 1]."""
    half = length // 2 + 1
    x = _resized(b, x, min(x.type.shape[-2], half))
    bins = np.arange(x.type.shape[-2])
    if length <= DIRECT_LIMIT:  # the other half's bins are the conjugates of these: counted twice
        weights = np.where((bins == 0) | (2 * bins == length), 1.0, 2.0)
        matrix = _dft_matrix(length, bins.size, length, True, x.type.shape[-1] == 2, complex_out=False,
                             row_weights=weights)
        return _apply(b, x, matrix, length)
    k = np.arange(length)
    mirrored = k > length // 2  # bin k is conj(bin length - k)
    x = b.op("rt.gather", [_resized(b, x, half), b.constant(np.where(mirrored, length - k, k).astype(np.int32))],
             {"axis": x.type.rank - 2})
    if x.type.shape[-1] == 2:
        imaginary = np.where(mirrored, -1.0, 1.0) * ((k != 0) & (2 * k != length))
        x = b.op("rt.mul", [x, b.constant(np.stack([np.ones(length), imaginary], -1).astype(x.type.dtype.np_dtype))])
    y = _transform(b, x, length, length, inverse=True)
    return C.slice_axis(b, y, y.type.rank - 1, 0, 1)


def _moved(b: Builder, x: Value, source: int, destination: int) -> Value:
    if source == destination:
        return x
    perm = [d for d in range(x.type.rank) if d != source]
    perm.insert(destination, source)
    return b.op("rt.transpose", [x], {"perm": tuple(perm)})


def _check_values_axis(n, x: Value) -> None:
    if x.type.shape[-1] not in (1, 2):
        raise InputError(f"{n.node.op_type} of {x.type}: the last axis holds a real value (1) or a complex one "
                         "(real and imaginary parts: 2)")


@handles("DFT")
def _dft(n):
    x, b = n(0), n.b
    rank = x.type.rank
    _check_values_axis(n, x)
    axis = (_known_int(n, 2, "axis") if n.has(2) else -2) if n.opset >= 20 else n.attr("axis", 1)
    if not (-rank <= axis <= rank - 2 and axis != -1):
        raise InputError(f"DFT of {x.type} along axis {axis}: the axis must be in [{-rank}, -2] or [0, {rank - 2}] "
                         "(the last one holds the real and imaginary parts)")
    axis %= rank
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    size = _static_size(n, x, axis, f"signal's length (axis {axis})")
    irfft = inverse and onesided
    length = _known_int(n, 1, "dft_length") if n.has(1) else 2 * (size - 1) if irfft else size
    if length < 1:
        raise InputError(f"DFT of {x.type} along axis {axis} with dft_length {length}: the length must be positive")
    y = _moved(b, C.widen(b, x), axis, rank - 2)
    if irfft:
        y = _real_signal(b, y, length)
    else:
        y = _transform(b, _resized(b, y, min(size, length)), length, length // 2 + 1 if onesided else length, inverse)
    y = _moved(b, y, rank - 2, axis)
    return y if y.type.dtype == x.type.dtype else b.op("rt.cast", [y], {"dtype": x.type.dtype.name})


@handles("STFT")
def _stft(n):
    """Frames [batch, frames, frame_length, c] by one gather, times the window, then their DFT."""
    signal, b = n(0), n.b
    if signal.type.rank != 3:
        raise InputError(f"STFT of {signal.type}: the signal is [batch, length, 1 or 2]")
    _check_values_axis(n, signal)
    size = _static_size(n, signal, 1, "signal's length")
    step = _known_int(n, 1, "frame_step")
    window = n(2) if n.has(2) else None
    if window is not None and window.type.rank != 1:
        raise InputError(f"STFT with a window of {window.type}: the window is 1-D")
    frame_length = (_known_int(n, 3, "frame_length") if n.has(3)
                    else _static_size(n, window, 0, "window's length") if window is not None else size)
    if window is not None and window.type.shape[0] != frame_length:
        raise InputError(f"STFT with a window of {window.type} and frame_length {frame_length}: they differ")
    if step < 1 or not 1 <= frame_length <= size:
        raise InputError(f"STFT of {signal.type} with frame_step {step} and frame_length {frame_length}: the step "
                         f"must be positive and the frame from 1 to the signal's length")
    starts = np.arange((size - frame_length) // step + 1) * step
    frames = b.op("rt.gather", [C.widen(b, signal), b.constant(
        (starts[:, None] + np.arange(frame_length)[None, :]).astype(np.int32))], {"axis": 1})
    if window is not None:
        weights = b.op("rt.reshape", [C.widen(b, window)], {"shape": (frame_length, 1)})
        if weights.type.dtype != frames.type.dtype:
            weights = b.op("rt.cast", [weights], {"dtype": frames.type.dtype.name})
        frames = b.op("rt.mul", [frames, weights])
    bins = frame_length // 2 + 1 if n.attr("onesided", 1) else frame_length
    y = _transform(b, frames, frame_length, bins, inverse=False)
    return y if y.type.dtype == signal.type.dtype else b.op("rt.cast", [y], {"dtype": signal.type.dtype.name})


# -- constants ----------------------------------------------------------------------------------------------------

WINDOWS = {  # op: its value at n = 0 .. size - 1 over the period N (size, or size - 1 when symmetric), in float64
    "HannWindow": lambda n, period: np.sin(n * np.pi / period) ** 2,
    "HammingWindow": lambda n, period: 25 / 46 - np.cos(n * np.pi * 2 / period) * (21 / 46),
    "BlackmanWindow": lambda n, period: (np.cos(n * (np.pi * 2) / period) * -0.5
                                         + np.cos(n * (np.pi * 4) / period) * 0.08 + 0.42),
}


def _output_type(n) -> np.dtype:
    return _dtype(n.attr("output_datatype", 1), f"{n.node.op_type}'s output_datatype").np_dtype


@handles(*WINDOWS)
def _window(n):
    size = _known_int(n, 0, "size")
    if size < 0:
        raise InputError(f"{n.node.op_type} of size {size}: the size must not be negative")
    period = size if n.attr("periodic", 1) else size - 1
    with np.errstate(all="ignore"):  # a symmetric window of one point is 0 / 0: NaN, as onnx's reference has it
        return WINDOWS[n.node.op_type](np.arange(size, dtype=np.float64), period).astype(_output_type(n))


@handles("MelWeightMatrix")
def _mel_weight_matrix(n):
    """[dft_length // 2 + 1, num_mel_bins]: triangles of peak 1 between mel-spaced bins, as onnx's reference."""
    mels, dft_length, sample_rate = (_known_int(n, i, what) for i, what in
                                     enumerate(("num_mel_bins", "dft_length", "sample_rate")))
    low, high = (_known(n, i, what).reshape(()) for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    spectrum_bins = dft_length // 2 + 1
    if mels < 1 or dft_length < 1 or sample_rate < 1:
        raise InputError(f"MelWeightMatrix of {mels} mel bins, dft_length {dft_length} and sample_rate "
                         f"{sample_rate}: each must be positive")

    def mel(hertz):  # the reference's numpy operations, in its order and types
        return 2595 * np.log1p(hertz / 700) / np.log(10)

    step = (mel(high) - mel(low)) / (mels + 2)
    hertz = 700 * np.expm1((np.arange(mels + 2) * step + mel(low)) / 2595 * np.log(10))
    edges = ((dft_length + 1) * hertz // sample_rate).astype(int)
    if edges.min() < 0 or edges[:-1].max() >= spectrum_bins or edges.max() > spectrum_bins:  # the reference fails
        raise InputError(f"MelWeightMatrix from {float(low)} Hz to {float(high)} Hz at sample_rate {sample_rate}: "
                         f"the bands fall outside the {spectrum_bins} bins of a {dft_length}-point spectrum",
                         hint="keep the edges from 0 to sample_rate / 2")
    out = np.zeros((spectrum_bins, mels))
    for i, (left, center, right) in enumerate(zip(edges, edges[1:], edges[2:])):
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return out.astype(_output_type(n))
