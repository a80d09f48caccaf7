"""Matmuls on SIMD-group matrices, through the core's fragment intrinsics and its tiled fragment matmul:
which dispatches take it on metal-spirv, that the MSL spells the fragments as simdgroup matrices, and that
it computes the right numbers (through the metal driver on fake_metal: the MSL runs on the CPU) for edges
that are not multiples of the tiles, batches with broadcasting, fused prologues and epilogues, and f16."""

import dataclasses

import numpy as np
import pytest
import retarget
from metal_helpers import matmul_module
from retarget.ir import dtypes
from retarget.kernel.lower import lower_dispatch as lower
from retarget.kernel.lower import matmul_fragments
from retarget.passes.dispatch import form_dispatches
from retarget_metal import targets
from retarget_metal.compile import render_source, unpack

M1 = targets.parse("apple-m1")
rng = np.random.default_rng(7)


def _run(module, inputs, target="metal-spirv:m1"):
    art = retarget.compile(module, target)
    (exe,) = art.manifest["executables"]
    kernels = unpack(bytes(art.entries[exe["path"]]))["kernels"]
    return retarget.load(art, device="metal").main(*inputs), kernels


def _dispatch(module):
    (d,) = form_dispatches(module.functions["main"])
    return d.function


def test_every_row_advertises_8x8_simdgroup_matrices_as_fragment_shapes():
    shapes = {(f["m"], f["n"], f["k"], f["a"], f["acc"], f["width"]) for f in M1.extra["fragments"]}
    assert shapes == {(8, 8, 8, "f32", "f32", 32), (8, 8, 8, "f16", "f32", 32)}


def test_a_float_matmul_takes_the_simdgroup_schedule():
    kernel = lower(_dispatch(matmul_module((64, 48), (48, 40))), M1)
    assert kernel.schedule["fragments"] == "8x8x8.f32.f32" and kernel.workgroup_size == (128, 1, 1)
    assert (kernel.schedule["tile_m"], kernel.schedule["tile_n"]) == (32, 32)
    assert kernel.workgroup_count == (2 * 2, 1, 1)


def test_a_matmul_of_at_most_16_rows_takes_a_wide_tile():
    kernel = lower(_dispatch(matmul_module((8, 64), (64, 128))), M1)
    assert (kernel.schedule["tile_m"], kernel.schedule["tile_n"]) == (16, 64) and kernel.workgroup_count == (2, 1, 1)


@pytest.mark.parametrize("a_shape, b_shape, dt, why", [
    ((1, 64), (64, 64), dtypes.f32, "a matrix-vector product"),
    ((64, 4), (4, 64), dtypes.f32, "a reduction shorter than a fragment"),
    ((32, 32), (32, 32), dtypes.i32, "integers"),
])
def test_other_matmuls_keep_the_core_lowering(a_shape, b_shape, dt, why):
    fn = _dispatch(matmul_module(a_shape, b_shape, dt))
    assert matmul_fragments(fn, M1) is None, why
    assert "fragments" not in lower(fn, M1).schedule


def test_a_target_without_fragment_shapes_keeps_the_core_lowering():
    plain = dataclasses.replace(M1, extra={**M1.extra, "fragments": []})
    assert matmul_fragments(_dispatch(matmul_module((64, 64), (64, 64))), plain) is None


def test_the_msl_spells_fragments_as_simdgroup_matrices():
    f16 = dtypes.DTYPES["f16"]
    source = render_source([lower(_dispatch(matmul_module((32, 32), (32, 32), f16)), M1)], M1)
    assert "#include <metal_simdgroup_matrix>" in source and "threadgroup half " in source
    assert "simdgroup_half8x8 " in source and "simdgroup_float8x8 " in source
    assert "simdgroup_load(" in source and "simdgroup_multiply_accumulate(" in source and "simdgroup_store(" in source


@pytest.mark.parametrize("a_shape, b_shape", [
    ((37, 29), (29, 45)),  # no edge a multiple of a tile, K not of the 16-wide step
    ((8, 64), (64, 130)),  # the 16x64 tile, N over two tiles
    ((3, 20, 24), (24, 17)),  # a batch, the right operand broadcast over it
    ((2, 1, 16, 8), (3, 8, 12)),  # batches broadcast against each other
])
def test_simdgroup_matmuls_compute(fake_metal, a_shape, b_shape):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in (a_shape, b_shape))
    out, kernels = _run(matmul_module(a_shape, b_shape), (a, b))
    assert "fragments" in kernels[0]["schedule"]
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b), rtol=1e-5, atol=1e-5)


def test_a_bias_relu_epilogue_fuses_into_the_simdgroup_kernel(fake_metal):
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 33)).astype(np.float32)
    module = matmul_module((40, 24), (24, 33), bias_relu=True)
    bias = module.functions["main"].ops[1].attrs["value"].array
    out, kernels = _run(module, (a, b))
    assert len(kernels) == 1 and "fragments" in kernels[0]["schedule"]
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5)


def test_an_operand_s_prologue_is_inlined_into_the_staging(fake_metal):
    """The core's fusion gives a matmul no prologue today; the schedule handles one (here a transpose)."""
    from retarget_metal.compile import compile_kernels
    from retarget_metal.driver import METAL

    fn = matmul_module((40, 24), (24, 33), transpose_b=True).functions["main"]  # the whole function, one kernel
    fn.name = "transposed_matmul"  # a kernel may not be called main: MSL is C++
    kernel = lower(fn, M1)
    assert "fragments" in kernel.schedule
    a, bt = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((33, 24)).astype(np.float32)
    device = METAL.create("0")
    exe = device.load_executable(compile_kernels([kernel], M1))
    buffers = [device.allocate(x.nbytes) for x in (a, bt)] + [device.allocate(40 * 33 * 4)]
    for buf, x in zip(buffers, (a, bt)):
        device.write(buf, 0, x)
    cb = device.command_buffer()
    cb.dispatch(exe, 0, [(buf, 0, buf.nbytes) for buf in buffers])
    cb.end()
    device.submit(cb)
    device.wait()
    out = device.read(buffers[2], 0, 40 * 33 * 4).view(np.float32).reshape(40, 33)
    np.testing.assert_allclose(out, a @ bt.T, rtol=1e-5, atol=1e-5)


def test_f16_matmuls_accumulate_in_f32(fake_metal):
    f16 = dtypes.DTYPES["f16"]
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((24, 200), (200, 20)))
    out, kernels = _run(matmul_module((24, 200), (200, 20), f16), (a, b))
    assert out.dtype == np.float16 and kernels[0]["schedule"]["fragments"] == "8x8x8.f16.f32"
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3)
