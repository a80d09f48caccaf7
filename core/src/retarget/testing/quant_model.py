"""A numpy model of retarget's quantization, written apart from the compiler's (`passes/quantize.py`) so
that tests check the compiler, its kernels and every backend against it rather than against themselves.

    w_hat = dequantized(w, "int4-g32")                 # the weight the quantized layer computes with
    y = linear(x, w, "int4-g32")                       # x @ w_hat^T, w as [out, in]
    y = linear(x, w, "8da4w-g32")                      # int8 activations per row, exact integer group sums

Per output channel (or group of `group` inputs), in f32: symmetric scale = max|w| / (2^(bits-1) - 1) and
q = clip(rint(w / scale)); asymmetric scale = (max(w, 0) - min(w, 0)) / (2^bits - 1), zero =
clip(rint(-min(w, 0) / scale)), q = clip(rint(w / scale) + zero) - zero; a zero channel or group has scale 1.
Activations (8da): s = max|x| / 127 per row (1 for a zero row), xq = clip(rint(x / s), -127, 127).
"""

from __future__ import annotations

import re

import numpy as np

SCHEME = re.compile(r"^(?:(?P<da>8da)(?P<wbits>[48])w|int(?P<bits>[48]))(?:-g(?P<group>\d+))?(?P<asym>-asym)?$")


def parse(scheme: str) -> dict:
    """'int4-g32-asym' -> {"bits": 4, "group": 32, "symmetric": False, "dynamic": False}."""
    m = SCHEME.match(scheme)
    if m is None:
        raise ValueError(f"not a quantization scheme: {scheme}")
    return {"bits": int(m["wbits"] or m["bits"]), "group": int(m["group"]) if m["group"] else None,
            "symmetric": not m["asym"], "dynamic": bool(m["da"])}


def _groups(w: np.ndarray, group: int | None):
    """w [rows, cols] -> list of column slices, one per group (the whole row when group is None)."""
    cols = w.shape[1]
    size = cols if group is None else group
    return [slice(start, min(start + size, cols)) for start in range(0, cols, size)]


def weight_integers(w: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(integer weights q - zero [rows, cols] as int64, scale per column [rows, cols] as f32)."""
    p = parse(scheme)
    w = np.asarray(w, np.float32)
    q = np.zeros(w.shape, np.int64)
    scales = np.zeros(w.shape, np.float32)
    for cols in _groups(w, p["group"]):
        block = w[:, cols]
        if p["symmetric"]:
            top = np.float32(2 ** (p["bits"] - 1) - 1)
            scale = np.abs(block).max(axis=1) / top
            scale[scale == 0] = 1
            values = np.clip(np.rint(block / scale[:, None]), -top, top)
        else:
            top = np.float32(2 ** p["bits"] - 1)
            lo, hi = np.minimum(block.min(axis=1), 0), np.maximum(block.max(axis=1), 0)
            scale = (hi - lo) / top
            scale[scale == 0] = 1
            zero = np.clip(np.rint(-lo / scale), 0, top)
            values = np.clip(np.rint(block / scale[:, None]) + zero[:, None], 0, top) - zero[:, None]
        q[:, cols] = values.astype(np.int64)
        scales[:, cols] = scale[:, None]
    return q, scales


def dequantized(w: np.ndarray, scheme: str) -> np.ndarray:
    """The f32 weight a layer quantized with `scheme` computes with."""
    q, scales = weight_integers(w, scheme)
    return (q * scales.astype(np.float64)).astype(np.float32)


def activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(xq as int64, per-row scale [..., 1] as f32) of 8-bit dynamic per-row quantization."""
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    return np.clip(np.rint(x / scale), -127, 127).astype(np.int64), scale


def linear(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    """x @ w^T ([..., in] x [out, in]) as a layer quantized with `scheme` computes it, in f64."""
    p = parse(scheme)
    if not p["dynamic"]:
        return np.asarray(x, np.float64) @ dequantized(w, scheme).astype(np.float64).T
    xq, xs = activations(x)
    q, scales = weight_integers(w, scheme)
    out = np.zeros(xq.shape[:-1] + (w.shape[0],), np.float64)
    for cols in _groups(np.asarray(w), p["group"]):
        exact = xq[..., cols] @ q[:, cols].T  # integers, exactly
        out += exact * scales[:, cols.start].astype(np.float64)
    return out * xs.astype(np.float64)


# -- small layers for every backend's tests ---------------------------------------------------------------------

def linear_layer(m: int, k: int, n: int, seed: int = 0):
    """y = x @ w^T + b as a graph module (w stored as the [k, n] constant importers produce); returns
    (module, x, w [n, k], b)."""
    from ..ir import dtypes
    from ..ir.core import Builder, Function, Module, TensorType, Value

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    arg = Value(TensorType((m, k), dtypes.f32))
    fn = Function("main", [arg], arg_names=["x"])
    bl = Builder(fn)
    fn.returns = [bl.op("rt.add", [bl.op("rt.matmul", [arg, bl.constant(np.ascontiguousarray(w.T))]), bl.constant(b)])]
    return Module({"main": fn}), x, w, b


def pointwise_conv(n: int, c: int, o: int, hw: int, seed: int = 0):
    """y = conv1x1(x, w) (NCHW, [o, c, 1, 1]); returns (module, x, w [o, c])."""
    from ..ir import dtypes
    from ..ir.core import Builder, Function, Module, TensorType, Value

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((o, c)).astype(np.float32)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    arg = Value(TensorType(x.shape, dtypes.f32))
    fn = Function("main", [arg], arg_names=["x"])
    bl = Builder(fn)
    fn.returns = [bl.op("rt.conv2d", [arg, bl.constant(w.reshape(o, c, 1, 1))])]
    return Module({"main": fn}), x, w


def conv_reference(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    """conv1x1 of NCHW x with w [o, c] quantized with `scheme`: `linear` over pixels."""
    n, c, h, wd = x.shape
    pixels = np.asarray(x).reshape(n, c, h * wd).transpose(0, 2, 1)
    return linear(pixels, w, scheme).transpose(0, 2, 1).reshape(n, w.shape[0], h, wd)


# (name, builder) -> (module, inputs, expected): layers whose loops differ: a batch-1 linear layer (a GEMV),
# one with more rows than a GPU's word-by-word matmul takes, a row length that is not a whole number of
# words, and a 1x1 convolution.
def cases(scheme: str) -> dict:
    out = {}
    for name, (m, k, n) in {"gemv": (1, 256, 48), "rows12": (12, 64, 40), "ragged": (3, 70, 24)}.items():
        module, x, w, b = linear_layer(m, k, n, seed=len(name))
        out[name] = (module, (x,), linear(x, w, scheme) + b)
    module, x, w = pointwise_conv(1, 32, 24, 5)
    out["conv1x1"] = (module, (x,), conv_reference(x, w, scheme))
    return out


# Schemes that together take every loop of `retarget.kernel.quant` (per channel and grouped, 8 and 4 bits,
# symmetric and not, float and int8 activations): what each backend's tests run.
BACKEND_SCHEMES = ("int8", "int4-g32-asym", "8da8w", "8da4w-g64")
# Relative error that rounding to the compute type explains.
PRECISION_TOLERANCE = {None: 1e-5, "f32": 1e-5, "f16": 3e-3, "bf16": 2e-2}


def check(target: str, device: str, scheme: str, case: str, precision: str | None = None) -> None:
    """Compile case `case` of `cases(scheme)` for `target` (computing in `precision`), run it on `device`,
    and assert that it matches the model within what the precision's rounding explains (relative to the
    largest output)."""
    import retarget

    from .numerics import relative_error

    tolerance = PRECISION_TOLERANCE[precision]
    module, inputs, expected = cases(scheme)[case]
    art = retarget.compile(module, target, quantize=scheme, precision=precision)
    got = retarget.load(art, device=device).main(*inputs)
    assert got.shape == expected.shape
    error = relative_error(got, expected)
    assert error <= tolerance, f"{scheme} {case} on {target}: relative error {error:.2e}"
