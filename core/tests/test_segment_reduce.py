"""rt.segment_reduce: its numpy reference, its kernel on every target (a loop whose extent is read from buffers),
and embedding_bag composed from it: linear in the rows, with offsets as inputs and sizes known only at run time."""

from __future__ import annotations

import numpy as np
import pytest
import retarget
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.kernel import lower
from retarget.kernel.bounds import check_kernel
from retarget.passes.dispatch import form_dispatches
from retarget.testing.torch_cases import compile_and_compare, importer_targets, randn, run_compiled
from retarget.vmvx.kernels import KERNELS

torch = pytest.importorskip("torch")

KINDS = ("sum", "prod", "max", "min")
COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "max": np.maximum, "min": np.minimum}
IDENTITY = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf}


def one_at_a_time(values, starts, ends, kind):
    """The semantics, written as the loop they describe."""
    wide = values.astype(np.float64) if values.dtype.kind == "f" else values.astype(np.int64)
    out = []
    for lo, hi in zip(starts, ends):
        acc = np.full(values.shape[1:], IDENTITY[kind] if values.dtype.kind == "f" or kind in ("sum", "prod") else
                      (np.iinfo(values.dtype).min if kind == "max" else np.iinfo(values.dtype).max), wide.dtype)
        for i in range(max(lo, 0), min(hi, len(values))):
            acc = COMBINE[kind](acc, wide[i])
        out.append(acc)
    return np.array(out).astype(values.dtype)


# Segments: ordinary, empty (3 to 3), reversed (5 to 2: empty), reaching past both ends (-4 to 2, 9 to 40), all
BOUNDS = (np.array([0, 3, 3, 5, -4, 9, 0], np.int64), np.array([3, 6, 3, 2, 2, 40, 12], np.int64))


def segment_case(dtype, tail=(), rows=12, seed=0):
    rng = np.random.default_rng(seed)
    shape = (rows, *tail)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-3, 4, shape).astype(dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_the_reference_combines_each_segment_in_order_clipped_to_the_rows(kind, dtype):
    values = segment_case(dtype, (3,))
    out = KERNELS["rt.segment_reduce"]({"kind": kind}, values, *BOUNDS)
    np.testing.assert_allclose(out, one_at_a_time(values, *BOUNDS, kind), rtol=1e-6)
    assert out.dtype == values.dtype and out.shape == (7, 3)


def test_the_reference_keeps_nan_in_a_max_and_sums_halves_in_f32():
    values = np.array([[1.0], [np.nan], [3.0]], np.float32)
    out = KERNELS["rt.segment_reduce"]({"kind": "max"}, values, np.array([0, 2]), np.array([3, 3]))
    assert np.isnan(out[0, 0]) and out[1, 0] == 3.0
    halves = np.full((3000, 1), 1.0, np.float16)  # 2049 is not an f16: a running f16 sum would stop at 2048
    out = KERNELS["rt.segment_reduce"]({"kind": "sum"}, halves, np.array([0]), np.array([3000]))
    assert out[0, 0] == np.float16(3000)


def segment_module(values_type: TensorType, kind: str) -> Module:
    """rt.segment_reduce of values (negated first: a producer fused into its read) between two bound inputs."""
    values, starts, ends = Value(values_type), Value(TensorType((7,), dtypes.i64)), Value(TensorType((7,), dtypes.i32))
    fn = Function("main", [values, starts, ends])
    b = Builder(fn)
    fn.returns = [b.op("rt.segment_reduce", [b.op("rt.neg", [values]), starts, ends], {"kind": kind})]
    return Module({"main": fn})


@pytest.mark.parametrize("tail", [(), (5,), (2, 3)], ids=["elements", "rows", "planes"])
@pytest.mark.parametrize("target", importer_targets())
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_the_kernel_matches_the_reference_on_every_target(target, dtype, tail):
    values = segment_case(dtypes.DTYPES[dtype].np_dtype, tail)
    starts, ends = BOUNDS[0], BOUNDS[1].astype(np.int32)
    for kind in KINDS:
        module = segment_module(TensorType(values.shape, dtypes.DTYPES[dtype]), kind)
        out, = run_compiled(module, target, [torch.from_numpy(a) for a in (values, starts, ends)])
        np.testing.assert_allclose(out, one_at_a_time(-values, starts, ends, kind), rtol=1e-6, err_msg=kind)


@pytest.mark.parametrize("target", ["llvm-cpu", "vulkan-spirv", "webgpu-spirv", "cuda:sm_90"])
def test_the_kernel_is_proved_in_bounds_whatever_the_bounds_read(target):
    """The loop's extent is data; the clamps to the rows and the guard on each row are what prove its reads."""
    if target.split(":")[0] not in retarget.targets():
        pytest.skip(f"target {target} is not installed")
    from retarget.compiler import resolve_target

    _, desc, _ = resolve_target(target)
    dispatch, = form_dispatches(segment_module(TensorType((1000, 4), dtypes.f32), "sum").functions["main"])
    assert check_kernel(lower.lower_dispatch(dispatch.function, desc)) > 0


def test_embedding_bag_is_one_kernel_a_result_reading_only_its_rows():
    """The gather of the weights and the bounds (slices of the offsets) fuse into the segment kernel."""
    from retarget.compiler import import_model

    def bags(i, o, w):
        return torch.nn.functional.embedding_bag(i, w, o, mode="sum")

    inputs = (torch.randint(0, 50, (4000,)), torch.arange(0, 4000, 40), randn(50, 8))
    from retarget.testing.torch_cases import module_of

    module = import_model(module_of(bags), example_inputs=inputs)
    groups = [[op.name for op in d.ops] for d in form_dispatches(module.functions["main"])]
    segment, = [g for g in groups if "rt.segment_reduce" in g]
    assert "rt.gather" in segment and "rt.slice" in segment
    assert not any("rt.scatter" in g or "rt.reduce" in g for g in groups)


@pytest.mark.parametrize("target", importer_targets())
def test_an_embedding_bag_of_rows_known_only_at_run_time_matches_torch(target):
    """Bags of a number of rows and offsets that torch.export leaves symbolic: compiled once, run at two sizes."""
    from retarget.compiler import import_model
    from retarget.testing.devices import skip_unless_runs
    from retarget.testing.torch_cases import device_of, module_of

    skip_unless_runs(target, device_of(target))

    def bags(i, o, w):
        return (torch.nn.functional.embedding_bag(i, w, o, mode="mean", padding_idx=3),
                torch.nn.functional.embedding_bag(i, w, o, mode="max"))

    weight = randn(20, 6)
    rows, count = torch.export.Dim("rows"), torch.export.Dim("bags")
    example = (torch.randint(0, 20, (30,)), torch.tensor([0, 4, 4, 11, 29]), weight)
    module = import_model(module_of(bags), example_inputs=example,
                          dynamic_shapes=(({0: rows}, {0: count}, None),))  # one entry: module_of takes *args
    fn = retarget.load(retarget.compile(module, target), device=device_of(target)).main
    generator = torch.Generator().manual_seed(3)
    for n, offsets in ((30, [0, 4, 4, 11, 29]), (7, [0, 2, 6])):
        indices = torch.randint(0, 20, (n,), generator=generator)
        offsets = torch.tensor(offsets)
        for got, want in zip(fn(indices.numpy(), offsets.numpy(), weight.numpy()), bags(indices, offsets, weight),
                             strict=True):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_large_embedding_bag_matches_torch_on_the_cpu():
    """100000 rows into 2048 bags of 16 wide (3.3 billion comparisons, had each bag compared every row): empty bags,
    a padding index and per-sample weights."""
    generator = torch.Generator().manual_seed(4)
    indices = torch.randint(0, 5000, (100000,), generator=generator)
    offsets = torch.sort(torch.randint(0, 100000, (2048,), generator=generator)).values
    offsets[0] = 0
    offsets[5:9] = offsets[4]  # empty bags
    weight = randn(5000, 16)

    def bags(i, o, w, ps):
        return (torch.nn.functional.embedding_bag(i, w, o, mode="mean", padding_idx=7),
                torch.nn.functional.embedding_bag(i, w, o, mode="max"),
                torch.nn.functional.embedding_bag(i, w, o, mode="sum", per_sample_weights=ps))

    compile_and_compare(bags, (indices, offsets, weight, randn(100000, seed=5)), "llvm-cpu", tol=1e-4)
