"""What the CPU lowering makes of convolutions: the structure that their speed rests on."""

from __future__ import annotations

import numpy as np
from retarget.compiler import resolve_target
from retarget.ir import Builder, Function, TensorType, Value, dtypes
from retarget.kernel import ir as k
from retarget.kernel.lower import lower_dispatch


def _lowered(weight_shape, attrs, image, target="llvm-cpu:x86-64-v3"):
    x = Value(TensorType(image, dtypes.f32))
    fn = Function("conv", [x])
    b = Builder(fn)
    fn.returns = [b.op("rt.conv2d", [x, b.constant(np.ones(weight_shape, np.float32))], attrs)]
    return lower_dispatch(fn, resolve_target(target)[1])


def _loops(body):
    for s in body:
        if isinstance(s, k.Loop):
            yield s
            yield from _loops(s.body)
        elif isinstance(s, k.If):
            yield from _loops(s.body)


def test_the_interior_chunks_of_a_padded_depthwise_conv_read_the_image_without_bounds_tests():
    kernel = _lowered((8, 1, 3, 3), {"pad": (1, 1, 1, 1), "groups": 8}, (1, 8, 40, 40))
    interior_rows = [lp for lp in _loops(kernel.body) if lp.start == 1 and lp.extent == 38]  # rows 1..38
    assert len(interior_rows) == 1
    # loops over tiles start with a tile's accumulators; the chunk loop is the innermost of them
    tile_loops = [lp for lp in _loops(interior_rows[0].body) if isinstance(lp.body[0], k.Local)]
    chunk_loops = [lp for lp in tile_loops if not any(inner in tile_loops for inner in _loops(lp.body))]
    assert len(chunk_loops) == 1
    exprs = list(k.walk_exprs(chunk_loops[0].body))
    assert not any(isinstance(e, k.Select) for e in exprs)
    assert sum(isinstance(e, k.Load) and e.buffer == "in0" for e in exprs) == 9  # the whole window, unrolled


def test_a_depthwise_tile_holds_one_channel_and_a_dense_conv_tile_several():
    depthwise = _lowered((8, 1, 3, 3), {"pad": (1, 1, 1, 1), "groups": 8}, (1, 8, 16, 16))
    dense = _lowered((8, 4, 3, 3), {"pad": (1, 1, 1, 1)}, (1, 4, 16, 16))
    assert depthwise.schedule["tile_channels"] == 1
    assert dense.schedule["tile_channels"] > 1


def test_a_tile_never_reads_more_weight_rows_in_one_cache_set_than_the_set_has_ways():
    """1024 input channels x 3x3 put a conv's weight rows 36 KB apart, a multiple of 4 KB: every row in one set
    of the first-level cache. A tile of more channels than its 8 ways evicted its own weights at every step."""
    from retarget.kernel.lower import L1_WAYS

    avx512 = "llvm-cpu:x86-64-v4"  # 32 vector registers: room for tiles of 12 channels
    deep = _lowered((32, 1024, 3, 3), {"pad": (1, 1, 1, 1)}, (1, 1024, 13, 13), avx512)
    shallow = _lowered((32, 768, 3, 3), {"pad": (1, 1, 1, 1)}, (1, 768, 13, 13), avx512)
    assert deep.schedule["tile_channels"] <= L1_WAYS < shallow.schedule["tile_channels"]
