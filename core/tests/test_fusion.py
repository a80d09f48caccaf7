"""Dispatch formation: which ops share a kernel, and that fused code computes the same thing."""

import numpy as np
import retarget
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.passes.conv_folding import fold_conv_scales
from retarget.passes.dispatch import form_dispatches
from retarget.vmvx.interpreter import run_function

rng = np.random.default_rng(0)


def _conv_bn_relu6():
    x = Value(TensorType((1, 3, 8, 8), dtypes.f32))
    fn = Function("f", [x])
    b = Builder(fn)
    w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = b.op("rt.conv2d", [x, w], {"pad": (1, 1, 1, 1)})
    y = b.op("rt.mul", [y, b.constant(rng.uniform(0.5, 2, (1, 4, 1, 1)).astype(np.float32))])
    y = b.op("rt.add", [y, b.constant(rng.standard_normal((1, 4, 1, 1)).astype(np.float32))])
    y = b.op("rt.min", [b.op("rt.max", [y, b.constant(np.float32(0))]), b.constant(np.float32(6))])
    fn.returns = [y]
    return Module({"f": fn}), rng.standard_normal((1, 3, 8, 8)).astype(np.float32)


def test_batch_norm_scale_folds_into_the_conv_filter():
    module, x = _conv_bn_relu6()
    expected = run_function(module.functions["f"], [x])[0]
    fold_conv_scales(module)
    assert "rt.mul" not in [op.name for op in module.functions["f"].ops]
    np.testing.assert_allclose(run_function(module.functions["f"], [x])[0], expected, rtol=1e-5, atol=1e-6)


def test_conv_bias_relu6_is_one_dispatch():
    module, x = _conv_bn_relu6()
    fold_conv_scales(module)
    dispatches = form_dispatches(module.functions["f"])
    assert [[op.name for op in d.function.ops if op.name != "rt.constant"] for d in dispatches] == [
        ["rt.conv2d", "rt.add", "rt.max", "rt.min"]]


def test_compiled_conv_block_matches_the_unfused_reference():
    module, x = _conv_bn_relu6()
    expected = run_function(module.functions["f"], [x])[0]
    art = retarget.compile(module, "vmvx")
    assert len(art.manifest["executables"][0]["entry_points"]) == 1
    np.testing.assert_allclose(retarget.load(art, "local-sync").f(x), expected, rtol=1e-5, atol=1e-6)


def test_reduction_takes_its_elementwise_prologue_but_not_a_broadcast_epilogue():
    x = Value(TensorType((4, 16), dtypes.f32))
    fn = Function("softmax", [x])
    b = Builder(fn)
    peak = b.op("rt.reduce", [x], {"kind": "max", "axes": (1,), "keepdims": True})
    e = b.op("rt.exp", [b.op("rt.sub", [x, peak])])
    total = b.op("rt.reduce", [e], {"kind": "sum", "axes": (1,), "keepdims": True})
    fn.returns = [b.op("rt.div", [e, total])]
    groups = [[op.name for op in d.function.ops] for d in form_dispatches(fn)]
    assert groups == [["rt.reduce"], ["rt.sub", "rt.exp"], ["rt.reduce"], ["rt.div"]]


def test_a_value_used_twice_is_not_fused_into_either_user():
    x = Value(TensorType((8,), dtypes.f32))
    fn = Function("f", [x])
    b = Builder(fn)
    e = b.op("rt.exp", [x])
    fn.returns = [b.op("rt.add", [e, b.op("rt.neg", [e])])]
    groups = [[op.name for op in d.function.ops] for d in form_dispatches(fn)]
    assert groups == [["rt.exp"], ["rt.neg", "rt.add"]]


def test_no_kernel_binds_more_buffers_than_the_limit_and_the_result_is_unchanged():
    from retarget.passes.dispatch import MAX_KERNEL_BUFFERS, kernel_buffers
    from retarget.testing.conformance.kit import prepare
    from retarget.testing.graphs import wide_module

    module, xs, expected = wide_module(count=3 * MAX_KERNEL_BUFFERS)
    prepared_module = prepare(module)
    dispatches = form_dispatches(prepared_module.functions["main"])
    assert max(kernel_buffers(d.ops) for d in dispatches) <= MAX_KERNEL_BUFFERS
    assert max(len(d.inputs) + len(d.outputs) for d in dispatches) <= MAX_KERNEL_BUFFERS
    concats = [op for op in prepared_module.functions["main"].ops if op.name == "rt.concat"]
    assert len(concats) > 1 and max(len(op.operands) for op in concats) < MAX_KERNEL_BUFFERS
    np.testing.assert_allclose(retarget.load(retarget.compile(module, "vmvx"), "local-sync").main(*xs), expected,
                               rtol=1e-6, atol=1e-5)


def _conv_then(epilogue):
    """A conv whose result `epilogue(builder, y)` reads (several times), compiled and interpreted."""
    x = Value(TensorType((1, 4, 8, 8), dtypes.f32))
    fn = Function("f", [x])
    b = Builder(fn)
    y = b.op("rt.conv2d", [x, b.constant(rng.standard_normal((6, 4, 3, 3)).astype(np.float32))], {"pad": (1, 1, 1, 1)})
    fn.returns = list(epilogue(b, y))
    return Module({"f": fn}), rng.standard_normal((1, 4, 8, 8)).astype(np.float32)


def _leaky_relu(b, y):  # as the importers write it: max(y, 0) + 0.1 * min(y, 0)
    zero = b.constant(np.float32(0))
    yield b.op("rt.add", [b.op("rt.max", [y, zero]), b.op("rt.mul", [b.op("rt.min", [y, zero]),
                                                                     b.constant(np.float32(0.1))])])


def _silu(b, y):
    yield b.op("rt.mul", [y, b.op("rt.sigmoid", [y])])


def _two_results(b, y):  # relu(y) and 2 * y both returned: two epilogues, so the conv keeps its own kernel
    yield b.op("rt.max", [y, b.constant(np.float32(0))])
    yield b.op("rt.mul", [y, b.constant(np.float32(2))])


def test_a_conv_result_that_one_epilogue_reads_several_times_is_one_dispatch():
    for epilogue, kernels in ((_leaky_relu, 1), (_silu, 1), (_two_results, 3)):
        module, x = _conv_then(epilogue)
        expected = run_function(module.functions["f"], [x])
        assert len(form_dispatches(module.functions["f"])) == kernels, epilogue.__name__
        for target, device in (("vmvx", "local-sync"), ("llvm-cpu", "local-task")):
            art = retarget.compile(module, target)
            assert len(art.manifest["executables"][0]["entry_points"]) == kernels
            got = retarget.load(art, device).f(x)
            for out, want in zip(got if isinstance(got, (list, tuple)) else [got], expected, strict=True):
                np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_a_reduction_or_a_viewed_result_keeps_its_own_kernel_under_a_shared_epilogue():
    """Only a conv's or matmul's result takes an epilogue that reads it twice: a reduction's stays a buffer (its
    kernel reads the sum once, where it is complete), and so does a result a view reads too."""
    x = Value(TensorType((4, 16), dtypes.f32))
    fn = Function("f", [x])
    b = Builder(fn)
    s = b.op("rt.reduce", [x], {"kind": "sum", "axes": (1,), "keepdims": True})
    fn.returns = [b.op("rt.mul", [b.op("rt.add", [s, b.constant(np.float32(1))]), b.op("rt.exp", [s])])]
    assert [[op.name for op in d.function.ops if op.name != "rt.constant"] for d in form_dispatches(fn)] == [
        ["rt.reduce"], ["rt.add", "rt.exp", "rt.mul"]]
    module, x_value = Module({"f": fn}), rng.standard_normal((4, 16)).astype(np.float32)
    for target, device in (("vmvx", "local-sync"), ("llvm-cpu", "local-task")):
        got = retarget.load(retarget.compile(module, target), device).f(x_value)
        np.testing.assert_allclose(got, run_function(fn, [x_value])[0], rtol=1e-5)

    module, x_value = _conv_then(lambda b, y: [b.op("rt.mul", [y, b.op("rt.sigmoid", [y])]),
                                               b.op("rt.reshape", [y], {"shape": (6, 64)})])
    assert len(form_dispatches(module.functions["f"])) == 2


def _chain_then_gather(ops: int):
    """`ops` elementwise ops on i32 indices [64], then a gather of [16, 3] rows at them: each index read 3 times."""
    ids = Value(TensorType((64,), dtypes.i32))
    fn = Function("f", [ids])
    b = Builder(fn)
    at = ids
    for step in range(ops):  # a walk of sorts: each op single-use, the value kept in [0, 16)
        at = b.op("rt.rem", [b.op("rt.add", [at, b.constant(np.int32(step + 1))]), b.constant(np.int32(16))]) \
            if step % 2 else b.op("rt.abs", [at])
    table = b.constant(rng.standard_normal((16, 3)).astype(np.float32))
    fn.returns = [b.op("rt.reduce", [b.op("rt.gather", [table, at], {"axis": 0})],
                       {"kind": "sum", "axes": (1,), "keepdims": False})]
    return Module({"f": fn}), rng.integers(0, 16, 64).astype(np.int32)


def test_a_costly_chain_that_a_gather_reads_per_row_keeps_its_own_kernel():
    """A gather of [16, 3] rows reads each index 3 times: a chain of a few ops is fused and recomputed, a longer
    one (a tree ensemble's step) is a kernel of its own, and the results are the same."""
    for ops, kernels in ((4, 1), (12, 2)):
        module, ids = _chain_then_gather(ops)
        names = [[op.name for op in d.function.ops if op.name != "rt.constant"]
                 for d in form_dispatches(module.functions["f"])]
        assert len(names) == kernels, names
        assert names[-1][-2:] == ["rt.gather", "rt.reduce"]
        expected = run_function(module.functions["f"], [ids])[0]
        for target, device in (("vmvx", "local-sync"), ("llvm-cpu", "local-task")):
            np.testing.assert_array_equal(retarget.load(retarget.compile(module, target), device).f(ids), expected)


def test_an_elementwise_kernel_of_many_ops_spreads_over_workgroups_sooner():
    """The CPU schedule's threshold for several workgroups counts an elementwise kernel's ops: 64K elements of one
    add stay in one workgroup, 64K elements of a chain of 12 ops do not."""
    from retarget.kernel.lower import lower_dispatch
    from retarget.protocols import TargetDesc

    cpu = TargetDesc("c", "c99", "c-source", extra={"vector_bits": 256, "cores": 2})
    for ops, groups in ((1, 1), (12, 2)):
        x = Value(TensorType((256, 256), dtypes.f32))
        fn = Function("f", [x])
        b = Builder(fn)
        y = x
        for _ in range(ops):
            y = b.op("rt.add", [y, b.constant(np.float32(1))])
        fn.returns = [y]
        (d,) = form_dispatches(fn)
        assert lower_dispatch(d.function, cpu).workgroup_count[0] == groups
