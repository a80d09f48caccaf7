"""Small hand-written kernel-IR kernels for backend codegen and device tests: one thread per element, and
workgroup memory with a barrier."""

from ..ir import dtypes
from ..kernel import ir as k

THREADS = 64


def sum_kernel(name: str, inputs: int, n: int, dt=dtypes.f32) -> k.Kernel:
    """out0[i] = in0[i] + in1[i] + ... over `n` elements, one thread per element."""
    gid = k.Var("gid")
    total = k.Load("in0", gid, dt)
    for j in range(1, inputs):
        total = k.Binary("add", total, k.Load(f"in{j}", gid, dt))
    params = [k.Param(f"in{j}", dt, n, "read") for j in range(inputs)] + [k.Param("out0", dt, n, "write")]
    body = [k.Assign("gid", k.Var("wg") * THREADS + k.Var("tid")),
            k.If(k.Compare("lt", gid, k.const(n)), [k.Store("out0", gid, total)])]
    return k.Kernel(name, params, body, (-(-n // THREADS), 1, 1), ("wg",), (THREADS, 1, 1), ("tid",))


def shared_kernel(name: str, size: int) -> k.Kernel:
    """Writes through a workgroup array of `size` f32, with a barrier."""
    tid = k.Var("tid")
    body = [k.Local("part", size, dtypes.f32, shared=True),
            k.Store("part", tid, k.Load("in0", tid, dtypes.f32)),
            k.Barrier(),
            k.Store("out0", tid, k.Load("part", k.const(THREADS - 1) - tid, dtypes.f32))]
    params = [k.Param("in0", dtypes.f32, THREADS, "read"), k.Param("out0", dtypes.f32, THREADS, "write")]
    return k.Kernel(name, params, body, (1, 1, 1), ("wg",), (THREADS, 1, 1), ("tid",))
