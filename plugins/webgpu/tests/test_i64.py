"""i64 and ui64 on WebGPU. WGSL has no 64-bit integers: the shared renderer computes their data in two u32 words
(`WGSL_I64`, `WGSL_UI64` in retarget.kernel.c_renderer) and indexes in i32. Each op, compare and cast runs on the
adapter (lavapipe on a machine without a GPU) against numpy's int64 and uint64 (the reference, vmvx), at the edges:
the extremes, values that carry between the words, negative quotients and remainders, unsigned values and divisors
past 2^63, shifts by 0 to 64 and beyond, floats past the bounds and NaN, and roundings to f32 that only the bits
below the top 32 decide."""

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from retarget.ir import TensorType, dtypes
from retarget.kernel import ir as k
from retarget.kernel.c_renderer import WGSL, render_module
from retarget.testing.op_cases import elementwise
from retarget.vmvx.kernels import evaluate
from retarget_webgpu import targets
from retarget_webgpu.compile import compile_kernels, render, support
from retarget_webgpu.driver import beyond_32_bit_indices

sys.path.insert(0, str(Path(__file__).parent))
from test_device import _run  # noqa: E402

I64 = dtypes.i64
MIN, MAX = -2**63, 2**63 - 1
A = np.array([0, 1, -1, 7, -7, MAX, MIN, MIN + 1, 2**32 - 1, 2**32, -2**32, 2**31, -2**31 - 1, 2**48 - 1,
              123456789012345, -98765432109876, 3, MAX, MIN, MIN, 2**32 + 1, -(2**63 - 2**32 + 1), -5, 99], np.int64)
B = np.array([3, -1, 2, -2, 2, 2, -1, 7, 1, 2**32 + 5, 3, -2**31, 5, -7, 1000003, 97, 0, MIN, MIN, 1, 2**32 - 1,
              -3, 0, -100000000000], np.int64)
SHIFTED = np.array([-5, 5, MIN, MAX, -1, 12345678901234, -12345678901234, 2**40 + 3, -2**40 - 3, 1, MIN, -2], np.int64)
AMOUNTS = np.array([0, 1, 31, 32, 33, 63, 64, 100, -1, 63, 62, 2**40], np.int64)
# f32 -> i64: NaN, infinities, past 2^63 either way, the largest f32 below 2^63, -2^63 itself, halves, -0
FLOATS = np.array([np.nan, np.inf, -np.inf, 1e19, -1e19, 9.223371e18, -9.223372e18, 2.0**63, 4294967296.0, 3e9,
                   -3e9, 1.5, -1.5, -0.0, 16777217.0, 0.999, -2.0**62, 1e-3], np.float32)
# i64 -> f32, rounded to nearest even: ties at the 24th bit, and a tie broken only by a bit below the top 32
ROUNDED = np.array([MAX, MIN, 2**53 + 1, 2**24 + 1, 2**25 + 2, 2**25 + 6, 2**40 + 2**16, 2**40 + 3 * 2**16,
                    2**40 + 2**16 + 1, -(2**40 + 2**16 + 1), 2**32 + 1, 2**32 - 1, -1, 0, 12345, -(2**63 - 1)],
                   np.int64)
NARROW = ("i32", "ui32", "i16", "i8", "ui16", "ui8", "i1")
DEFAULT = targets.parse("webgpu")


def _reference(op: str, arrays, out_dtype, attrs=None):
    return evaluate(op, attrs or {}, arrays, TensorType((len(arrays[0]),), out_dtype))


def _check(device, kernel, inputs, expected, desc=DEFAULT):
    got = _run(device, kernel, desc, [*inputs, np.empty(len(expected), np.asarray(expected).dtype)])
    if got.dtype == ml_dtypes.bfloat16:
        got, expected = got.astype(np.float32), np.asarray(expected).astype(np.float32)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor"])
def test_binary_ops_match_numpy_int64(webgpu_device, op):
    """Wrapping add, sub and mul with carries between the words; div and rem truncated (x / 0 is x, x % 0 is 0,
    MIN / -1 is MIN, as the reference)."""
    kernel = elementwise(f"i64_{op}", lambda a, b: k.Binary(op, a, b), [I64, I64], I64, len(A))
    _check(webgpu_device, kernel, [A, B], _reference(f"rt.{op}", [A, B], I64))


@pytest.mark.parametrize("op", ["neg", "abs", "sign", "not"])
def test_unary_ops_match_numpy_int64(webgpu_device, op):
    kernel = elementwise(f"i64_{op}", lambda a: k.Unary(op, a), [I64], I64, len(A))
    _check(webgpu_device, kernel, [A], _reference(f"rt.{op}", [A], I64))


def test_a_right_shift_is_arithmetic_and_fills_with_the_sign_past_63(webgpu_device):
    kernel = elementwise("i64_shr", lambda a, b: k.Binary("shr", a, b), [I64, I64], I64, len(SHIFTED))
    _check(webgpu_device, kernel, [SHIFTED, AMOUNTS], _reference("rt.shr", [SHIFTED, AMOUNTS], I64))


def test_integer_powers_wrap_and_negative_powers_follow_the_other_integers(webgpu_device):
    base = np.array([3, -3, 2, 7, 0, 1, -1, 2**32 + 1, 5, 1, -1, -1, 5], np.int64)
    power = np.array([40, 41, 63, 30, 0, 99, 7, 3, 0, -3, -3, -4, -1], np.int64)
    expected = np.concatenate([_reference("rt.pow", [base[:9], power[:9]], I64), [1, -1, 1, 0]])  # numpy refuses b < 0
    kernel = elementwise("i64_pow", lambda a, b: k.Binary("pow", a, b), [I64, I64], I64, len(base))
    _check(webgpu_device, kernel, [base, power], expected)


@pytest.mark.parametrize("pred", k.COMPARE_OPS)
def test_compares_are_signed_across_both_words(webgpu_device, pred):
    kernel = elementwise(f"i64_cmp_{pred}", lambda a, b: k.Compare(pred, a, b), [I64, I64], dtypes.i1, len(A))
    _check(webgpu_device, kernel, [A, B], _reference("rt.cmp", [A, B], dtypes.i1, {"predicate": pred}))


def test_select_picks_whole_values(webgpu_device):
    kernel = elementwise("i64_select", lambda a, b: k.Select(k.Compare("lt", a, b), a, b), [I64, I64], I64, len(A))
    _check(webgpu_device, kernel, [A, B], np.where(A < B, A, B))


@pytest.mark.parametrize("name", [*NARROW, "f32", "bf16"])
def test_casts_from_i64_wrap_or_round_as_numpy(webgpu_device, name):
    dt = dtypes.DTYPES[name]
    values = np.concatenate([A, ROUNDED])
    kernel = elementwise(f"i64_to_{name}", lambda a: k.Cast(a, dt), [I64], dt, len(values))
    _check(webgpu_device, kernel, [values], _reference("rt.cast", [values], dt, {"dtype": name}))


@pytest.mark.parametrize("name", [*NARROW, "f32", "bf16"])
def test_casts_to_i64_extend_and_saturate_as_numpy(webgpu_device, name):
    """Signed types extend their sign, unsigned ones zeros; floats saturate at the i64 bounds, NaN is 0."""
    dt = dtypes.DTYPES[name]
    values = FLOATS.astype(dt.np_dtype) if dt.is_float else A.astype(dt.np_dtype)
    # bf16 widens to f32 exactly; the reference's own cast of bf16 does not saturate (numpy sees no float in it)
    exact = values.astype(np.float32) if name == "bf16" else values
    kernel = elementwise(f"{name}_to_i64", lambda a: k.Cast(a, I64), [dt], I64, len(values))
    _check(webgpu_device, kernel, [values], _reference("rt.cast", [exact], I64, {"dtype": "i64"}))


def test_f16_casts_to_and_from_i64(webgpu_device):
    desc = targets.parse("host")
    if "shader-f16" not in desc.features:
        pytest.skip(f"{webgpu_device.info.name} has no shader-f16")
    f16 = dtypes.f16
    values = np.array([np.nan, np.inf, -np.inf, 65504, -65504, 1.5, -2.5, 0.0, 1000.0], np.float16)
    _check(webgpu_device, elementwise("f16_to_i64", lambda a: k.Cast(a, I64), [f16], I64, len(values)), [values],
           _reference("rt.cast", [values], I64, {"dtype": "i64"}), desc)
    ints = np.array([0, 1, -1, 2049, 65519, 65520, -70000, 2**40, MIN], np.int64)
    _check(webgpu_device, elementwise("i64_to_f16", lambda a: k.Cast(a, f16), [I64], f16, len(ints)), [ints],
           _reference("rt.cast", [ints], f16, {"dtype": "f16"}), desc)


def _fold(name: str, combine, init, n: int) -> k.Kernel:
    """out0[0] = combine(... combine(init, in0[0]) ..., in0[n - 1]) in one loop."""
    acc = k.Var("acc", I64)
    body = [k.Assign("acc", k.const(init, I64)),
            k.Loop("i", n, [k.Assign("acc", combine(acc, k.Load("in0", k.Var("i"), I64)))]),
            k.Store("out0", k.const(0), acc)]
    return k.Kernel(name, [k.Param("in0", I64, n, "read"), k.Param("out0", I64, 1, "write")], body)


@pytest.mark.parametrize("kind, init", [("add", 0), ("mul", 1), ("max", MIN), ("min", MAX)])
def test_reductions_over_i64_match_numpy(webgpu_device, kind, init):
    values = np.array([2**40 + 7, -3, 2**33, -(2**35) - 1, 5, 2**31, 3, -2**62, 11], np.int64)
    kernel = _fold(f"i64_{kind}", lambda acc, x: k.Binary(kind, acc, x), init, len(values))
    with np.errstate(over="ignore"):
        want = {"add": np.sum, "mul": np.prod, "max": np.max, "min": np.min}[kind](values)
    _check(webgpu_device, kernel, [values], np.array([want], np.int64))


def test_argmax_answers_an_i64_index_from_the_i32_loop_counter(webgpu_device):
    values = np.array([2**40, -1, 2**40 + 1, 2**32, 2**40 + 1, MIN], np.int64)
    best, arg, i = k.Var("best", I64), k.Var("arg", I64), k.Var("i")
    load = k.Load("in0", i, I64)
    body = [k.Assign("best", k.Load("in0", k.const(0), I64)), k.Assign("arg", k.const(0, I64)),
            k.Loop("i", len(values), [k.Assign("arg", k.Select(k.Compare("gt", load, best), i, arg)),
                                      k.Assign("best", k.Select(k.Compare("gt", load, best), load, best))]),
            k.Store("out0", k.const(0), arg)]
    kernel = k.Kernel("i64_argmax", [k.Param("in0", I64, len(values), "read"), k.Param("out0", I64, 1, "write")], body)
    _check(webgpu_device, kernel, [values], np.array([np.argmax(values)], np.int64))


def test_i64_data_indexes_a_buffer_and_an_index_becomes_i64_data(webgpu_device):
    """A gather's index is i64 data (its low word indexes: it is in bounds), and an iota past 2^32 is data made
    from the i32 loop counter."""
    n = 8
    table = np.arange(100, dtype=np.float32) * 0.5
    ids = np.array([3, 99, 0, 42, 42, 7, 64, 1], np.int64)
    i = k.Var("i")
    gather = k.Kernel("i64_gather", [k.Param("in0", I64, n, "read"), k.Param("in1", dtypes.f32, 100, "read"),
                                     k.Param("out0", dtypes.f32, n, "write")],
                      [k.Loop("i", n, [k.Store("out0", i, k.Load("in1", k.Load("in0", i, I64), dtypes.f32))])])
    _check(webgpu_device, gather, [ids, table], table[ids])
    iota = k.Kernel("i64_iota", [k.Param("out0", I64, n, "write")],
                    [k.Loop("i", n, [k.Store("out0", i, k.Binary("sub", k.Binary("mul", i, k.const(2**33)),
                                                                           k.const(5)))])])
    _check(webgpu_device, iota, [], np.arange(n, dtype=np.int64) * 2**33 - 5)


def test_constants_of_every_i64_value_are_spelled_as_their_two_words():
    kernel = elementwise("i64_constants", lambda a: k.Binary("add", k.Binary("max", a, k.const(MIN, I64)),
                                                             k.const(-(2**40) - 1, I64)), [I64], I64, 4)
    wgsl = render(kernel, DEFAULT)["wgsl"]
    assert "vec2<u32>(0u, 2147483648u)" in wgsl  # -2^63
    assert f"vec2<u32>({2**32 - 1}u, {2**32 - 2**8 - 1}u)" in wgsl  # -2^40 - 1


def test_a_kernel_without_i64_data_calls_no_i64_helper_and_one_with_some_only_those_it_needs():
    f32 = dtypes.f32
    plain = render_module([elementwise("f32_add", lambda a, b: k.Binary("add", a, b), [f32, f32], f32, 8)], WGSL)
    assert "vec2<u32>" not in plain and "_i64" not in plain
    adds = render_module([elementwise("i64_add", lambda a, b: k.Binary("add", a, b), [I64, I64], I64, 8)], WGSL)
    assert "fn rt_add_i64(" in adds and "fn rt_mul_i64(" not in adds
    divides = render_module([elementwise("i64_div", lambda a, b: k.Binary("div", a, b), [I64, I64], I64, 8)], WGSL)
    assert all(f"fn {helper}(" in divides for helper in ("rt_div_i64", "rt_udivrem_i64", "rt_abs_i64", "rt_neg_i64",
                                                        "rt_sub_i64"))  # and those the helpers call


def test_every_i64_kernel_here_validates_in_naga(webgpu_device):
    """Each op's WGSL together, validated once: naga's message names the first kernel it cannot take."""
    ops = [elementwise(f"v_{op}", lambda a, b, op=op: k.Binary(op, a, b), [I64, I64], I64, 4)
           for op in k.BINARY_OPS if op != "atan2"]
    ops += [elementwise(f"v_{op}", lambda a, op=op: k.Unary(op, a), [I64], I64, 4) for op in ("neg", "abs", "sign",
                                                                                             "not")]
    for meta in json.loads(compile_kernels(ops, DEFAULT).data)["kernels"]:
        webgpu_device.shader_module(meta["wgsl"], meta["name"])


def test_a_binding_past_2_31_elements_is_refused_at_dispatch_not_indexed_wrong():
    """Kernels index in i32 even where their sizes have no bound (the renderer narrows every WGSL kernel on this
    promise), so the driver refuses each dispatch whose binding reaches element 2^31: its base in the bound range
    counts, in words for the types kept several to a word, whose own elements count too."""
    i8, f32, i64 = dtypes.i8, dtypes.f32, dtypes.i64
    assert beyond_32_bit_indices("k", [i8, f32, i64], [0, 0, 0], [4, 4, 8], [2**31, 2**33, 2**34]) is None
    assert beyond_32_bit_indices("k", [f32], [2], [4], [2**33]) == (
        "k: binding 0 spans 2147483650 elements of f32; WebGPU kernels index in 32 bits, so at most 2147483648")
    assert "binding 1 spans 2147483649 elements of i8" in beyond_32_bit_indices("k", [f32, i8], [0, 0], [4, 4],
                                                                                [8, 2**31 + 1])
    assert "binding 0 spans 2147483649 elements of i64" in beyond_32_bit_indices("k", [i64], [1], [8], [2**34])


def test_i64_and_ui64_need_no_range_and_compute_every_integer_op():
    table = support(DEFAULT)
    assert table.ranges == {} and "ui64" not in table.buffers and "i64" not in table.buffers
    assert not [op for op in table.ops if op.endswith((":i64", ":ui64"))]  # every op of the integers, they have too


# ui64: the same words, read unsigned. Values past 2^63 (where an i64 is negative), divisors past 2^63 (the
# remainder's carry), shifts past 63
UI64 = dtypes.DTYPES["ui64"]
UA = np.array([0, 1, 2**64 - 1, 2**63, 2**63 - 1, 2**63 + 5, 2**32 - 1, 2**32, 7, 18446744073709551557, 2**40 + 3,
               123456789012345678, 2**64 - 2, 5, 99, 2**63 + 2**62], np.uint64)
UB = np.array([3, 2**64 - 1, 2, 2**63 + 1, 5, 2**63, 1, 2**32 + 1, 0, 2**63 + 7, 97, 1000003, 2**64 - 1, 2**62, 0,
               2**63 - 1], np.uint64)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "pow"])
def test_ui64_binary_ops_match_numpy_uint64(webgpu_device, op):
    """Unsigned across both words: compares and max/min past 2^63, division by divisors past 2^63 (x / 0 is x,
    x % 0 is 0, as the reference), wrapping powers."""
    b = np.minimum(UB, 70).astype(np.uint64) if op == "pow" else UB
    kernel = elementwise(f"ui64_{op}", lambda x, y: k.Binary(op, x, y), [UI64, UI64], UI64, len(UA))
    with np.errstate(over="ignore"):
        _check(webgpu_device, kernel, [UA, b], _reference(f"rt.{op}", [UA, b], UI64))


@pytest.mark.parametrize("pred", k.COMPARE_OPS)
def test_ui64_compares_are_unsigned(webgpu_device, pred):
    kernel = elementwise(f"ui64_cmp_{pred}", lambda a, b: k.Compare(pred, a, b), [UI64, UI64], dtypes.i1, len(UA))
    _check(webgpu_device, kernel, [UA, UB], _reference("rt.cmp", [UA, UB], dtypes.i1, {"predicate": pred}))


def test_ui64_shifts_are_logical_and_zero_past_63(webgpu_device):
    amounts = np.array([0, 1, 31, 32, 33, 63, 64, 100, 2**40, 63, 62, 7, 0, 1, 2, 3], np.uint64)
    kernel = elementwise("ui64_shr", lambda a, b: k.Binary("shr", a, b), [UI64, UI64], UI64, len(UA))
    _check(webgpu_device, kernel, [UA, amounts], np.where(amounts < 64, UA >> np.minimum(amounts, 63), 0))


@pytest.mark.parametrize("name", ["f32", "i32", "ui32", "ui8", "i1"])
def test_ui64_casts_both_ways_match_numpy(webgpu_device, name):
    """To f32 rounded to nearest even (bits below the top 32 break ties), and from f32 saturating at 0 and
    2^64 - 1, NaN as 0; the integers wrap or extend as numpy's."""
    dt = dtypes.DTYPES[name]
    kernel = elementwise(f"ui64_to_{name}", lambda a: k.Cast(a, dt), [UI64], dt, len(UA))
    _check(webgpu_device, kernel, [UA], _reference("rt.cast", [UA], dt, {"dtype": name}))
    values = (np.array([np.nan, np.inf, -np.inf, 1.9e19, -5.0, 3e9, 1.5, 2.0**63, 2.0**64, 1e19, 0.5, 7.0], np.float32)
              if dt.is_float else UA.astype(dt.np_dtype))
    kernel = elementwise(f"{name}_to_ui64", lambda a: k.Cast(a, UI64), [dt], UI64, len(values))
    _check(webgpu_device, kernel, [values], _reference("rt.cast", [values], UI64, {"dtype": "ui64"}))
