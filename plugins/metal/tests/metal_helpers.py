"""Helpers of the metal plugin's tests (a unique module name: every plugin's tests share sys.path)."""

import numpy as np
from retarget.ir import dtypes
from retarget.ir.core import Builder, Function, Module, TensorType, Value
from retarget.kernel import ir as k

ZOO_TARGET = "metal-spirv:apple-m1"  # Apple7 with simdgroup matrices: the zoo's matmuls take that schedule
rng = np.random.default_rng(7)


def simple_kernel(name: str, dt, n: int = 100, shared: int = 0, params: int = 2) -> k.Kernel:
    """out0[i] = in0[i] (+ in1[i] ...) over `n` elements, 64 threads a group; `shared` floats of threadgroup memory."""
    gid = k.Var("gid")
    total = k.Load("in0", gid, dt)
    for j in range(1, params - 1):
        total = k.Binary("add", total, k.Load(f"in{j}", gid, dt))
    body = [k.Assign("gid", k.Var("wg") * 64 + k.Var("tid")),
            k.If(k.Compare("lt", gid, k.const(n)), [k.Store("out0", gid, total)])]
    if shared:
        body = [k.Local("part", shared, dtypes.f32, shared=True), *body]
    ps = [k.Param(f"in{j}", dt, n, "read") for j in range(params - 1)] + [k.Param("out0", dt, n, "write")]
    return k.Kernel(name, ps, body, (-(-n // 64), 1, 1), ("wg",), (64, 1, 1), ("tid",))


def matmul_module(a_shape, b_shape, dt=dtypes.f32, transpose_b=False, bias_relu=False):
    """y = a @ b (b given transposed when `transpose_b`), then + bias and relu when `bias_relu`."""
    args = [Value(TensorType(a_shape, dt)), Value(TensorType(b_shape[:-2] + b_shape[-2:][::-1] if transpose_b
                                                             else b_shape, dt))]
    fn = Function("main", args, arg_names=["a", "b"])
    bld = Builder(fn)
    b = args[1]
    if transpose_b:
        perm = list(range(len(b_shape) - 2)) + [len(b_shape) - 1, len(b_shape) - 2]
        b = bld.op("rt.transpose", [b], {"perm": perm})
    y = bld.op("rt.matmul", [args[0], b])
    if bias_relu:
        bias = rng.standard_normal(y.type.shape[-1]).astype(dt.np_dtype)
        y = bld.op("rt.max", [bld.op("rt.add", [y, bld.constant(bias)]), bld.constant(np.zeros((), dt.np_dtype))])
    fn.returns = [y]
    return Module({"main": fn})
