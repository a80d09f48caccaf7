"""Hand-built kernels, compiled for this machine, run through the loader, compared with numpy."""

import math

import ml_dtypes
import numpy as np
import pytest
from retarget.ir.dtypes import DTYPES, bf16, f16, f32, i1, i32, i64
from retarget.kernel import ir as k

f64 = DTYPES["f64"]

rng = np.random.default_rng(0)


def elementwise(n, expr, dtype=f32, kind="vector", inputs=("x",)):
    i = k.Var("i")
    params = [k.Param(name, dtype, n, "read") for name in inputs] + [k.Param("y", dtype, n, "write")]
    body = [k.Loop("i", n, [k.Store("y", i, expr(*[k.Load(name, i, dtype) for name in inputs]))], kind=kind)]
    return k.Kernel("ew", params, body)


def test_a_vector_loop_computes_an_elementwise_expression(run_kernel):
    n = 1000  # not a multiple of any vector width: the remainder loop runs too
    kern = elementwise(n, lambda x, b: k.maximum(k.Binary("add", x, b), k.const(0, f32)), inputs=("x", "b"))
    x, b = rng.standard_normal((2, n), dtype=np.float32)
    y = np.zeros(n, np.float32)
    run_kernel(kern, [x, b, y])
    np.testing.assert_array_equal(y, np.maximum(x + b, 0))


@pytest.mark.parametrize("op, ref", [
    ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh), ("erf", np.vectorize(math.erf)),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("rsqrt", lambda x: 1 / np.sqrt(x)), ("round", np.round),
    ("floor", np.floor), ("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("atan", np.arctan), ("sign", np.sign),
    ("abs", np.abs),
])
def test_unary_math_matches_numpy(op, ref, run_kernel):
    n = 257
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    if op in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + 0.1
    y = np.zeros(n, np.float32)
    run_kernel(elementwise(n, lambda a: k.Unary(op, a)), [x, y])
    np.testing.assert_allclose(y, ref(x.astype(np.float64)).astype(np.float32), rtol=2e-6, atol=1e-6)


def test_max_and_min_propagate_nan_as_numpy_does(run_kernel):
    x = np.array([np.nan, 1, -np.inf, 2], np.float32)
    b = np.array([0, np.nan, 1, np.inf], np.float32)
    y = np.zeros(4, np.float32)
    run_kernel(elementwise(4, lambda a, c: k.Binary("max", a, c), inputs=("x", "b")), [x, b, y])
    np.testing.assert_array_equal(y, np.maximum(x, b))
    run_kernel(elementwise(4, lambda a, c: k.Binary("min", a, c), inputs=("x", "b")), [x, b, y])
    np.testing.assert_array_equal(y, np.minimum(x, b))


def test_a_reduction_into_a_local_accumulator_sums_each_row(run_kernel):
    rows, cols = 8, 1000
    r, c = k.Var("r"), k.Var("c")
    acc = k.Load("acc", k.const(0), f32)
    body = [k.Loop("r", rows, [
        k.Local("acc", 1, f32),
        k.Store("acc", k.const(0), k.const(0, f32)),
        k.Loop("c", cols, [k.Store("acc", k.const(0), k.Binary("add", acc, k.Load("x", r * cols + c, f32)))],
               kind="vector"),
        k.Store("y", r, acc),
    ])]
    kern = k.Kernel("rowsum", [k.Param("x", f32, rows * cols, "read"), k.Param("y", f32, rows, "write")], body)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    y = np.zeros(rows, np.float32)
    run_kernel(kern, [x, y])
    np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_a_scalar_accumulator_reduction_takes_the_max(run_kernel):
    n = 999
    i = k.Var("i")
    m = k.Var("m", f32)
    body = [
        k.Assign("m", k.const(-np.inf, f32)),
        k.Loop("i", n, [k.Assign("m", k.maximum(m, k.Load("x", i, f32)))], kind="vector"),
        k.Store("y", k.const(0), m),
    ]
    kern = k.Kernel("maxred", [k.Param("x", f32, n, "read"), k.Param("y", f32, 1, "write")], body)
    x = rng.standard_normal(n, dtype=np.float32)
    y = np.zeros(1, np.float32)
    run_kernel(kern, [x, y])
    assert y[0] == x.max()


@pytest.mark.parametrize("dtype", [i32, i64])
def test_integer_div_and_rem_truncate_toward_zero(dtype, run_kernel):
    a = np.array([7, -7, 7, -7, 0, 5, 3], dtype.np_dtype)
    b = np.array([2, 2, -2, -2, 3, 0, 7], dtype.np_dtype)
    q = np.zeros_like(a)
    r = np.zeros_like(a)
    i = k.Var("i")
    x, y = k.Load("a", i, dtype), k.Load("b", i, dtype)
    body = [k.Loop("i", len(a), [k.Store("q", i, k.Binary("div", x, y)), k.Store("r", i, k.Binary("rem", x, y))])]
    params = [k.Param("a", dtype, len(a), "read"), k.Param("b", dtype, len(a), "read"),
              k.Param("q", dtype, len(a), "write"), k.Param("r", dtype, len(a), "write")]
    run_kernel(k.Kernel("divrem", params, body), [a, b, q, r])
    np.testing.assert_array_equal(q[:5], [3, -3, -3, 3, 0])
    np.testing.assert_array_equal(r[:5], [1, -1, 1, -1, 0])
    assert q[5] == 5 and r[5] == 0  # division by zero does not trap; it gives what the vmvx reference gives
    assert q[6] == 0 and r[6] == 3


def test_a_select_guarded_load_pads_out_of_range_elements(run_kernel):
    n, pad = 16, 3
    i = k.Var("i")
    src = i - pad
    inside = k.Binary("and", k.Compare("ge", src, k.const(0)), k.Compare("lt", src, k.const(n)))
    safe = k.Select(inside, src, k.const(0))  # never reads out of bounds
    value = k.Select(inside, k.Load("x", safe, f32), k.const(-1, f32))
    kern = k.Kernel("pad", [k.Param("x", f32, n, "read"), k.Param("y", f32, n + 2 * pad, "write")],
                    [k.Loop("i", n + 2 * pad, [k.Store("y", i, value)], kind="vector")])
    x = rng.standard_normal(n, dtype=np.float32)
    y = np.zeros(n + 2 * pad, np.float32)
    run_kernel(kern, [x, y])
    np.testing.assert_array_equal(y, np.pad(x, pad, constant_values=-1))


@pytest.mark.parametrize("target", ["host", "x86-64"])  # x86-64 has no f16c: the bit-exact helpers run
def test_f16_is_computed_in_f32_and_rounded_once_on_store(target, run_kernel):
    n = 300
    x = (rng.standard_normal(n) * 100).astype(np.float16)
    x[:6] = [np.inf, -np.inf, np.nan, 6e-8, -0.0, 65504]
    b = rng.standard_normal(n).astype(np.float16)
    y = np.zeros(n, np.float16)
    kern = elementwise(n, lambda a, c: k.Binary("mul", k.Binary("add", a, c), k.const(1.5, f16)),
                       dtype=f16, inputs=("x", "b"))
    run_kernel(kern, [x, b, y], target=target)
    with np.errstate(over="ignore"):  # 65504 * 1.5 overflows to inf, in the kernel too
        expected = ((x.astype(np.float32) + b.astype(np.float32)) * np.float32(1.5)).astype(np.float16)
    np.testing.assert_array_equal(y, expected)


def test_bf16_is_computed_in_f32_and_rounded_to_nearest_even(run_kernel):
    n = 300
    x = (rng.standard_normal(n) * 100).astype(ml_dtypes.bfloat16)
    x[:3] = [np.inf, np.nan, -0.0]
    y = np.zeros(n, ml_dtypes.bfloat16)
    run_kernel(elementwise(n, lambda a: k.Binary("mul", a, k.const(1.1, bf16)), dtype=bf16), [x, y])
    expected = (x.astype(np.float32) * np.float32(float(ml_dtypes.bfloat16(1.1)))).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.view(np.uint16)[3:], expected.view(np.uint16)[3:])
    assert np.isinf(y[0]) and np.isnan(y[1])


def test_casts_and_compares_produce_bools_and_integers(run_kernel):
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, np.nan], np.float32)
    isneg = np.zeros(6, np.bool_)
    trunc = np.zeros(6, np.int32)
    i = k.Var("i")
    v = k.Load("x", i, f32)
    body = [k.Loop("i", 6, [k.Store("neg", i, k.Compare("lt", v, k.const(0, f32))),
                            k.Store("t", i, k.Cast(v, i32))])]
    params = [k.Param("x", f32, 6, "read"), k.Param("neg", i1, 6, "write"), k.Param("t", i32, 6, "write")]
    run_kernel(k.Kernel("casts", params, body), [x, isneg, trunc])
    np.testing.assert_array_equal(isneg, x < 0)
    np.testing.assert_array_equal(trunc[:5], [-2, 0, 0, 0, 2])


def test_each_workgroup_of_a_grid_writes_its_own_tile(run_kernel):
    rows, cols, tile = 6, 64, 16
    wx, wy, j = k.Var("wx"), k.Var("wy"), k.Var("j")
    idx = wy * cols + wx * tile + j
    body = [k.Loop("j", tile, [k.Store("y", idx, k.Binary("add", k.Load("x", idx, f32),
                                                           k.Cast(wy * 1000 + wx, f32)))], kind="vector")]
    kern = k.Kernel("grid", [k.Param("x", f32, rows * cols, "read"), k.Param("y", f32, rows * cols, "write")], body,
                    workgroup_count=(cols // tile, rows, 1), workgroup_vars=("wx", "wy"))
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    y = np.zeros((rows, cols), np.float32)
    run_kernel(kern, [x, y])
    offsets = np.arange(rows)[:, None] * 1000 + (np.arange(cols) // tile)[None, :]
    np.testing.assert_array_equal(y, x + offsets.astype(np.float32))


def test_an_unrolled_loop_and_an_if_run_like_their_serial_form(run_kernel):
    n = 8
    i = k.Var("i")
    body = [k.Loop("i", n, [k.If(k.Compare("eq", i % 2, k.const(0)), [k.Store("y", i, k.Load("x", i, f32))])],
                   kind="unroll")]
    kern = k.Kernel("evens", [k.Param("x", f32, n, "read"), k.Param("y", f32, n, "write")], body)
    x = rng.standard_normal(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    run_kernel(kern, [x, y])
    np.testing.assert_array_equal(y, np.where(np.arange(n) % 2 == 0, x, 0))


def test_index_arithmetic_repeated_after_its_variable_changes_uses_the_new_value(run_kernel):
    t, i = k.Var("t"), k.Var("i")
    at = t * 2 + 1  # the same expression object, emitted again after each change of t
    body = [k.Assign("t", k.const(0)), k.Store("y", at, k.const(1.0, f32)),
            k.Assign("t", k.const(1)), k.Store("y", at, k.const(2.0, f32)),
            k.Loop("i", 2, [k.Assign("t", i + 2), k.Store("y", at, k.Load("x", at, f32))], kind="unroll")]
    kern = k.Kernel("reuse", [k.Param("x", f32, 8, "read"), k.Param("y", f32, 8, "write")], body)
    x = rng.standard_normal(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    run_kernel(kern, [x, y])
    np.testing.assert_array_equal(y, [0, 1, 0, 2, 0, x[5], 0, x[7]])


def test_kernels_that_differ_only_in_name_share_one_compiled_body():
    from retarget_llvm_cpu import codegen, targets
    from retarget_llvm_cpu.compile import compile_kernels
    from retarget_llvm_cpu.loader import LlvmCpuLoader

    twins = [k.Kernel(name, [k.Param("x", f32, 16, "read"), k.Param("y", f32, 16, "write")],
                      [k.Loop("i", 16, [k.Store("y", k.Var("i"), k.Unary("exp", k.Load("x", k.Var("i"), f32)))],
                              kind="vector")]) for name in ("first", "second")]
    desc = targets.parse("host")
    text = codegen.llvm_ir(twins, desc.extra["triple"], desc.features)
    assert text.count('define internal void @"first.body"') == 1 and "second.body" not in text
    for bind in LlvmCpuLoader().load(compile_kernels(twins, desc)):  # one object, an entry point each
        x, y = rng.standard_normal(16, dtype=np.float32), np.zeros(16, np.float32)
        bind([x, y])((0, 0, 0))
        np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)


def test_vector_constants_shared_between_stores_keep_the_sign_of_zero(run_kernel):
    # the vector code makes one constant per type and value: -0.0 == 0.0 in Python, yet they differ
    i = k.Var("i")
    x = k.Load("x", i, f32)
    body = [k.Loop("i", 16, [k.Store("y", i, k.Binary("mul", x, k.const(-0.0, f32))),
                             k.Store("z", i, k.Binary("mul", x, k.const(0.0, f32)))], kind="vector")]
    kern = k.Kernel("zeros", [k.Param("x", f32, 16, "read"), k.Param("y", f32, 16, "write"),
                              k.Param("z", f32, 16, "write")], body)
    x, y, z = np.abs(rng.standard_normal(16, dtype=np.float32)) + 1, np.ones(16, np.float32), np.ones(16, np.float32)
    run_kernel(kern, [x, y, z])
    assert np.all(y == 0) and np.all(np.signbit(y)) and np.all(z == 0) and not np.any(np.signbit(z))


def test_a_module_built_in_groups_links_into_one_object_with_every_kernel(monkeypatch):
    # groups are built and optimised apart (one on a thread while the next is built) and linked; twins (kernels
    # that differ only in name) stay in one group, where they share one body
    from retarget_llvm_cpu import codegen, targets
    from retarget_llvm_cpu.compile import compile_kernels
    from retarget_llvm_cpu.loader import LlvmCpuLoader

    ops = {"exp": np.exp, "tanh": np.tanh, "neg": np.negative, "abs": np.abs, "exp2": np.exp}
    kernels = [k.Kernel(name, [k.Param("x", f32, 64, "read"), k.Param("y", f32, 64, "write")],
                        [k.Loop("i", 64, [k.Store("y", k.Var("i"), k.Unary(name.rstrip("2"), k.Load("x", k.Var("i"),
                                                                                                     f32)))],
                                kind="vector")]) for name in ops]
    monkeypatch.setattr(codegen, "GROUP_TEXT", 1)
    groups = codegen._groups(kernels)
    assert [[kn.name for kn in g] for g in groups] == [["exp", "exp2"], ["tanh"], ["neg"], ["abs"]]
    binary = compile_kernels(kernels, targets.parse("host"), use_cache=False)
    for (name, ref), bind in zip(ops.items(), LlvmCpuLoader().load(binary)):
        x, y = rng.standard_normal(64, dtype=np.float32), np.zeros(64, np.float32)
        bind([x, y])((0, 0, 0))
        np.testing.assert_allclose(y, ref(x), rtol=2e-6, err_msg=name)


def test_a_cast_to_f16_rounds_even_when_the_value_stays_in_registers(run_kernel):
    x = np.array([1.0001, 3.14159, 1e-6, 70000.0], np.float32)
    y = np.zeros(4, np.float32)
    run_kernel(elementwise(4, lambda a: k.Cast(k.Cast(a, f16), f32)), [x, y])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("dtype", [f32, f64])
@pytest.mark.parametrize("op, ref", [("rem", np.fmod), ("pow", np.power), ("atan2", np.arctan2), ("div", np.divide)])
def test_float_binary_math_matches_numpy(op, ref, dtype, run_kernel):
    n = 100
    x = (rng.standard_normal(n) * 4).astype(dtype.np_dtype)
    b = (rng.standard_normal(n) + 3).astype(dtype.np_dtype)
    if op == "pow":
        x = np.abs(x)
    y = np.zeros(n, dtype.np_dtype)
    run_kernel(elementwise(n, lambda a, c: k.Binary(op, a, c), dtype=dtype, inputs=("x", "b")), [x, b, y])
    np.testing.assert_allclose(y, ref(x, b), rtol=1e-6 if dtype == f32 else 1e-14)


@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "log", "log1p", "expm1"])
def test_exp_log_and_their_kin_of_f32_vectors_call_no_libm(op):
    """LLVM lowers llvm.exp of a vector to an expf call a lane: `exp_f32` and `tanh_f32` are vector code instead
    (an LSTM's gates took 3.4x the time)."""
    from retarget_llvm_cpu import codegen, targets

    i = k.Var("i")
    kern = k.Kernel("f", [k.Param("x", f32, 64, "read"), k.Param("y", f32, 64, "write")],
                    [k.Loop("i", 64, [k.Store("y", i, k.Unary(op, k.Load("x", i, f32)))], kind="vector")])
    desc = targets.parse("host")
    text = codegen.llvm_ir([kern], desc.extra["triple"], desc.features)
    assert "<64 x float>" in text  # the whole loop is one vector (LLVM splits it into the machine's)
    libm = ("expf", "tanhf", "logf", "log1pf", "expm1f", "llvm.exp.v", "llvm.log.v")
    assert not any(f"@{name}" in text for name in libm)


@pytest.mark.parametrize("src, dst, store", [("f32", "i32", "i32"), ("f32", "i64", "i64"), ("f64", "i32", "i32"),
                                             ("f32", "i8", "i32"), ("f32", "ui8", "i32"), ("f32", "ui32", "i64"),
                                             ("f64", "ui64", "f64")])
def test_float_to_int_casts_of_vectors_are_vector_code_saturating_with_nan_to_zero(src, dst, store, run_kernel):
    """A float -> int cast of a vector is a vector convert and two selects (it was `fptosi.sat` a lane, which x86's
    backend keeps scalar even for a vector: six times a Floor's time): out-of-range values saturate and NaN becomes
    0, as the scalar form. (Stored as `store`, a type vector loops write.)"""
    from retarget.ir import dtypes
    from retarget_llvm_cpu import codegen, targets

    s, d, out = dtypes.DTYPES[src], dtypes.DTYPES[dst], dtypes.DTYPES[store]
    i = k.Var("i")
    kern = k.Kernel("f", [k.Param("x", s, 64, "read"), k.Param("y", out, 64, "write")],
                    [k.Loop("i", 64, [k.Store("y", i, k.Cast(k.Cast(k.Load("x", i, s), d), out))], kind="vector")])
    desc = targets.parse("host")
    text = codegen.llvm_ir([kern], desc.extra["triple"], desc.features)
    assert ".sat." not in text and ("fptosi <64" in text or "fptoui <64" in text)  # a lane at a time, scalarized
    x = (rng.standard_normal(64) * 1e3).astype(s.np_dtype)
    x[:9] = [np.nan, np.inf, -np.inf, 1e30, -1e30, 2.9, -2.9, 255.5, -0.0]
    y = np.zeros(64, out.np_dtype)
    run_kernel(kern, [x, y])
    info = np.iinfo(d.np_dtype)
    with np.errstate(invalid="ignore"):
        expected = np.clip(np.trunc(x.astype(np.float64)), info.min, info.max)
    assert np.array_equal(y.astype(np.float64), np.where(np.isnan(x), 0.0, expected))  # (2^63 - 1 is 2^63 here)


@pytest.mark.parametrize("op", ["sin", "cos", "tan", "atan"])
def test_trig_of_f32_vectors_is_vector_code_with_libm_only_past_exact_reduction(op, run_kernel):
    """`sin_cos_f32` and `atan_f32`: Cephes' algorithms in vector code; sin, cos and tan call libm on a branch for
    the lanes at or past 8192 (inf and NaN too), which a vector takes only when it holds one. Either way numpy's
    answers, the far lanes, infinities and NaN included."""
    from retarget_llvm_cpu import codegen, targets

    i = k.Var("i")
    kern = k.Kernel("f", [k.Param("x", f32, 64, "read"), k.Param("y", f32, 64, "write")],
                    [k.Loop("i", 64, [k.Store("y", i, k.Unary(op, k.Load("x", i, f32)))], kind="vector")])
    desc = targets.parse("host")
    text = codegen.llvm_ir([kern], desc.extra["triple"], desc.features)
    label, calls = None, []
    for line in text.splitlines():  # every libm call sits in the op's `.far` block
        if line.endswith(":") and not line.startswith(" "):
            label = line[:-1].strip('"')
        if f'@"{op}f"(' in line and not line.startswith("declare"):
            calls.append(label)
    assert calls if op != "atan" else not calls
    assert all(label.startswith(f"{op}.far") for label in calls), calls
    x = (rng.standard_normal(64) * 30).astype(np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 8192.0, -1e6, 3e38, 8191.5, -0.0]
    y = np.zeros(64, np.float32)
    run_kernel(kern, [x, y])
    with np.errstate(invalid="ignore"):
        expected = getattr(np, {"atan": "arctan"}.get(op, op))(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-6, equal_nan=True)
