"""Scalar-op test cases shared by every backend's tests: one small kernel per op and dtype, with inputs
that hit NaN, infinities, signed zeros, wrap-around and saturation, and the reference's answer
(`retarget.vmvx.kernels.evaluate`). A kernel is one serial loop over its elements (no threads), so any
backend runs it as one workgroup of one invocation."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..ir import TensorType, dtypes
from ..kernel import ir as k
from ..vmvx.kernels import evaluate

# (86: e^86 is finite, 86 (e^86 - 1) is not: expm1 as (u - 1) * x / log(u) overflowed there)
F32_EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 1e-3, -1e-4, 0.75, 3.0, -7.25,
                      20.0, -20.0, 1e30, 0.3, 86.0], dtype=np.float32)
# pairs for binary ops: NaN on either side and both, infinities (a finite number by an infinite one: fmod keeps it,
# where a - b * trunc(a / b) is NaN), equal values, signs
F32_A = np.array([np.nan, 1.0, np.nan, np.inf, -np.inf, 2.0, -3.5, 7.0, -7.0, 0.5, 3.0, 1e-3, 4.0, 5.5, -3.0, np.inf],
                 dtype=np.float32)
F32_B = np.array([1.0, np.nan, np.nan, 3.0, 2.0, 2.0, 1.5, -2.0, 2.0, 0.25, -2.0, 5.0, 0.5, np.inf, -np.inf, np.inf],
                 dtype=np.float32)
I32_X = np.array([0, 1, -1, 7, -7, 100, -128, 2147483647, -2147483647], dtype=np.int32)
I32_A = np.array([7, -7, 7, -7, 5, 0, -8, 9, 3, -2147483647 - 1, 12, -3], dtype=np.int32)
I32_B = np.array([2, 2, -2, -2, 0, 3, 3, 4, 3, -1, 5, 0], dtype=np.int32)
INT_UNARY = ("neg", "abs", "sign", "not")
INT_BINARY = ("add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor")
NARROW_INTS = ("i8", "ui8", "i16", "ui16")
FLOAT_UNARY = [op for op in k.UNARY_OPS if op != "not"]
FLOAT_BINARY = [op for op in k.BINARY_OPS if op not in ("and", "or", "xor", "shr")]


def elementwise(name: str, body, in_dtypes, out_dtype, n: int) -> k.Kernel:
    """out0[i] = body(in0[i], in1[i], ...)"""
    i = k.Var("i")
    loads = [k.Load(f"in{j}", i, dt) for j, dt in enumerate(in_dtypes)]
    params = [k.Param(f"in{j}", dt, n, "read") for j, dt in enumerate(in_dtypes)]
    params.append(k.Param("out0", out_dtype, n, "write"))
    return k.Kernel(name, params, [k.Loop("i", n, [k.Store("out0", i, body(*loads))])])


def op_cases() -> dict:
    """name -> (kernel, inputs, expected)."""
    f32, i32, i1 = dtypes.f32, dtypes.i32, dtypes.i1
    cases = {}

    def add(name, body, inputs, out_dtype, expected):
        kern = elementwise("op_" + name, body, [dtypes.from_numpy(x.dtype) for x in inputs], out_dtype, len(inputs[0]))
        cases[name] = (kern, inputs, expected)

    def ref(op, inputs, out_dtype, attrs=None):
        return evaluate(op, attrs or {}, inputs, TensorType((len(inputs[0]),), out_dtype))

    for op in FLOAT_UNARY:
        add(f"f32_{op}", lambda a, op=op: k.Unary(op, a), [F32_EDGES], f32, ref(f"rt.{op}", [F32_EDGES], f32))
    for op in FLOAT_BINARY:
        add(f"f32_{op}", lambda a, b, op=op: k.Binary(op, a, b), [F32_A, F32_B], f32,
            ref(f"rt.{op}", [F32_A, F32_B], f32))
    # tanh near 0, scaled up so that a relative error shows past the comparisons' absolute tolerance: drivers' own
    # tanh, (e^2x - 1) / (e^2x + 1), is 1e-3 off there (Mish's tanh(softplus(-10)) on lavapipe)
    small = np.array([4.54e-5, -1e-4, 3e-3, 1e-6, 0.01, -0.3, 0.6, -0.7], dtype=np.float32)
    add("f32_tanh_near_zero", lambda a: k.Binary("mul", k.Unary("tanh", a), k.const(1e4, f32)), [small], f32,
        (np.tanh(small.astype(np.float64)) * 1e4).astype(np.float32))
    # log1p and expm1 near 0, scaled up in the same way: through a driver's log, accurate near 1 only to 2^-22
    # absolutely, log1p(4.5e-5) was 0.5% off on NVIDIA's Vulkan (Mish of -10)
    near = np.array([4.54e-5, -1e-4, 3e-3, 1e-6, 0.01, -0.2, 0.3, 0.4, -0.29, 0.34, -0.34, 0.5], dtype=np.float32)
    for op, exact in (("log1p", np.log1p), ("expm1", np.expm1)):
        add(f"f32_{op}_near_zero", lambda a, op=op: k.Binary("mul", k.Unary(op, a), k.const(1e4, f32)), [near], f32,
            (exact(near.astype(np.float64)) * 1e4).astype(np.float32))
    for op in INT_UNARY:
        add(f"i32_{op}", lambda a, op=op: k.Unary(op, a), [I32_X], i32, ref(f"rt.{op}", [I32_X], i32))
    for op in INT_BINARY:
        add(f"i32_{op}", lambda a, b, op=op: k.Binary(op, a, b), [I32_A, I32_B], i32,
            ref(f"rt.{op}", [I32_A, I32_B], i32))
    # by a constant the renderers take the trapless path (no test for 0 and -1), for negative dividends too
    for c in (3, -3, 64):
        for op in ("div", "rem"):
            add(f"i32_{op}_by_{c}".replace("-", "minus_"), lambda a, op=op, c=c: k.Binary(op, a, k.const(c, i32)),
                [I32_A], i32, ref(f"rt.{op}", [I32_A, np.full_like(I32_A, c)], i32))
    # shifts by 0 .. bits - 1: arithmetic for signed integers, logical for unsigned (packed weights' words)
    words = np.array([-8, 7, -2147483647 - 1, 255, 0x7FFFFFFF], np.int32)
    amounts = np.array([1, 0, 31, 4, 28], np.int32)
    add("i32_shr", lambda a, b: k.Binary("shr", a, b), [words, amounts], i32, ref("rt.shr", [words, amounts], i32))
    u, ua = words.view(np.uint32), amounts.view(np.uint32)
    add("ui32_shr", lambda a, b: k.Binary("shr", a, b), [u, ua], dtypes.DTYPES["ui32"],
        ref("rt.shr", [u, ua], dtypes.DTYPES["ui32"]))
    base, exponent = np.array([2, -3, 5, 0, 1, -1, 7], np.int32), np.array([10, 3, 0, 4, 9, 5, 2], np.int32)
    add("i32_pow", lambda a, b: k.Binary("pow", a, b), [base, exponent], i32, ref("rt.pow", [base, exponent], i32))
    for pred in k.COMPARE_OPS:
        for dt, a, b in (("f32", F32_A, F32_B), ("i32", I32_A, I32_B)):
            add(f"{dt}_cmp_{pred}", lambda x, y, pred=pred: k.Compare(pred, x, y), [a, b], i1,
                ref("rt.cmp", [a, b], i1, {"predicate": pred}))
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    for op in ("and", "or", "xor", "max", "min"):  # max and min of bools: ONNX's ReduceMax of a mask
        add(f"i1_{op}", lambda a, b, op=op: k.Binary(op, a, b), [p, q], i1, ref(f"rt.{op}", [p, q], i1))
    add("i1_not", lambda a: k.Unary("not", a), [p], i1, ref("rt.not", [p], i1))
    add("select", lambda c, a, b: k.Select(c, a, b), [p, F32_A[:4], F32_B[:4]], f32, np.where(p, F32_A[:4], F32_B[:4]))
    # half types are stored as such and computed in f32, rounded once on the way out
    for half in (np.float16, ml_dtypes.bfloat16):
        a, b = F32_A.astype(half), F32_B.astype(half)
        out = dtypes.from_numpy(half)
        add(f"{out}_mul_add", lambda x, y: k.Binary("add", k.Binary("mul", x, y), y), [a, b], out,
            ((a.astype(np.float32) * b.astype(np.float32)) + b.astype(np.float32)).astype(half))
        with np.errstate(over="ignore"):  # 1e30 is inf in f16
            add(f"{out}_cast_from_f32", lambda x, out=out: k.Cast(x, out), [F32_EDGES], out, F32_EDGES.astype(half))
    # float -> int casts saturate, and NaN becomes 0 (as llvm-cpu's fptosi.sat)
    wide = np.array([np.nan, 1e10, -1e10, 2.9, -2.9, 127.5, 0.0], dtype=np.float32)
    i8 = dtypes.i8
    add("f32_to_i32", lambda x: k.Cast(x, i32), [wide], i32, np.array([0, 2**31 - 1, -2**31, 2, -2, 127, 0], np.int32))
    add("f32_to_i8", lambda x: k.Cast(x, i8), [wide], i8, np.array([0, 127, -128, 2, -2, 127, 0], np.int8))
    # i8 arithmetic wraps after each op, although C computes it in int
    x8 = np.array([100, -100, 127, 5], np.int8)
    add("i8_add_wraps", lambda a: k.Binary("div", k.Binary("add", a, a), k.const(2, dtypes.i8)), [x8], dtypes.i8,
        ((x8 + x8) // 2).astype(np.int8) + (((x8 + x8) % 2 != 0) & ((x8 + x8) < 0)))
    for name in NARROW_INTS:  # every op of the 8- and 16-bit integers, at their bounds (WGSL computes them in 32 bits)
        dt = dtypes.DTYPES[name]
        info = np.iinfo(dt.np_dtype)
        a = np.concatenate([I32_A, [info.min, info.max, info.max, info.min]]).astype(dt.np_dtype)  # wrapped
        b = np.concatenate([I32_B, [-1, 1, 2, 3]]).astype(dt.np_dtype)
        for op in INT_UNARY:
            add(f"{name}_{op}", lambda x, op=op: k.Unary(op, x), [a], dt, ref(f"rt.{op}", [a], dt))
        for op in INT_BINARY:
            add(f"{name}_{op}", lambda x, y, op=op: k.Binary(op, x, y), [a, b], dt, ref(f"rt.{op}", [a, b], dt))
        amounts = (np.arange(len(a)) % dt.bits).astype(dt.np_dtype)
        add(f"{name}_shr", lambda x, y: k.Binary("shr", x, y), [a, amounts], dt, ref("rt.shr", [a, amounts], dt))
        add(f"{name}_to_i32", lambda x: k.Cast(x, i32), [a], i32, a.astype(np.int32))
        add(f"i32_to_{name}", lambda x, dt=dt: k.Cast(x, dt), [I32_X], dt, I32_X.astype(dt.np_dtype))
        add(f"f32_to_{name}", lambda x, dt=dt: k.Cast(x, dt), [wide], dt, ref("rt.cast", [wide], dt, {"dtype": name}))
    cases.update(_narrow_cases(ref))
    return cases


# f32 -> narrow: ties to even at each type's top and bottom, past the largest value, NaN, infinities, f32 subnormals,
# negatives that round to zero (they keep their sign). Not -0.0 itself, which becomes +0 (`kernel.narrow`).
NARROW_FROM = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0, 0.3, -2.7, 448.0, 464.0, 480.0, -500.0, 240.0, 248.0,
                        57344.0, 61440.0, 1e6, 6.0, 7.0, 5.0, 0.25, 0.75, 2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -10,
                        2.0 ** -16, 1.5 * 2.0 ** -16, 2.0 ** -17, -1e-9, 1e-40, 3.3, -100.5, 9.0, -9.0, 127.5, 1.75],
                       dtype=np.float32)
NARROW_INTS_FROM = np.array([0, 1, -1, 7, -8, 8, -9, 15, 16, 100, -100, 3, -2, 2147483647], dtype=np.int32)


def _e8m0_bounds() -> np.ndarray:
    """f32 -> E8M0 (2^-127 .. 2^127): each power of two, the ties at 1.5 times it and the f32s either side of both; the
    subnormals around 2^-127 (past it rounds up); past the largest; 0, -0, negatives, infinities and NaN (all NaN)."""
    powers = 2.0 ** np.arange(-127, 128)
    with np.errstate(over="ignore"):
        edges = np.concatenate([powers, 1.5 * powers]).astype(np.float32)
    others = [2.0 ** -149, 2.0 ** -128, 2.0 ** -126 - 2.0 ** -149, 3.4e38, np.inf, 0.0, -0.0, -1.0, -2.0 ** -127,
              -np.inf, np.nan, -np.nan]
    return np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf)),
                           np.array(others, np.float32)])


E8M0_FROM = _e8m0_bounds()


def _no_subnormals(x: np.ndarray) -> np.ndarray:
    """`x` without f32 subnormals: NVIDIA's Vulkan and WebGPU read them as 0, and a kernel's cast to E8M0 (codes 0 and
    1 near 2^-127, and 0 itself NaN) then differs. ONNX's Cast decides them from the bits instead (importers/onnx.py),
    which its tests check on every target."""
    return x[~((np.abs(x) < 2.0 ** -126) & (x != 0))]


def _narrow_cases(ref) -> dict:
    """Every code of each narrow type decoded to f32 (or i32), and f32 (and i32) values encoded, compared as bytes:
    what `kernel.narrow` makes of a cast, on each backend (the kernels come expanded, as `lower_dispatch` gives them
    to a backend)."""
    from ..kernel.narrow import FORMATS, ScaleFormat, expand_narrow_types

    cases = {}

    def add(name, inputs, out, expected):
        kern = elementwise("op_" + name, lambda x: k.Cast(x, out), [dtypes.from_numpy(x.dtype) for x in inputs], out,
                           len(inputs[0]))
        cases[name] = (expand_narrow_types(kern), inputs,
                       np.asarray(expected).view(np.uint8) if out.name in FORMATS else expected)

    for name in FORMATS:
        dt = dtypes.DTYPES[name]
        codes = np.arange(1 << min(dt.bits, 8), dtype=np.uint8).view(dt.np_dtype)
        wide = dtypes.f32 if dt.is_float else dtypes.i32
        add(f"{name}_to_{wide}", [codes], wide, codes.astype(wide.np_dtype))
        scale = isinstance(FORMATS[name], ScaleFormat)
        x = _no_subnormals(NARROW_FROM) if scale else NARROW_FROM
        add(f"f32_to_{name}", [x], dt, ref("rt.cast", [x], dt, {"dtype": name}))
        if scale:
            x = _no_subnormals(E8M0_FROM)
            add(f"f32_to_{name}_at_its_bounds", [x], dt, ref("rt.cast", [x], dt, {"dtype": name}))
        if not dt.is_float:
            add(f"i32_to_{name}", [NARROW_INTS_FROM], dt, ref("rt.cast", [NARROW_INTS_FROM], dt, {"dtype": name}))
    return cases
