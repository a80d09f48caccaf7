"""A's fragments built in registers from global loads, only B staged: does it lift the Vulkan f16 GEMM?

Each 64-deep step of the shipped schedule moves A and B through registers into workgroup memory (16-byte loads,
stores, two barriers) and reads both back as fragments. The sixth session found the step's bytes through each
multiprocessor's L1/shared data path part of its cost (A's fragment reads taken out: +11% a clock). Here A skips
workgroup memory: each invocation loads its own elements of the A fragments (8 bytes a row and k-slice, a
permutation of k inside each k-slice making them adjacent; B's rows staged under the same permutation), a ring of
RING k-slices ahead, and puts them into the fragments element by element. B alone is staged, in one copy (two
barriers a step, as shipped) or two (one barrier). The element order a fragment holds is the driver's: the layout
probe reads it off the device first, and every variant is checked against float64.

Read from A as it lies (row-major), each such load touches 8 rows and so 8 cache lines for 256 bytes, and the
variants cost what staging costs. The `A packed` variants read A packed by the harness in the order the lanes
load it (256 contiguous bytes a load); the `A and B packed` ones read both operands as whole 16-byte fragments and
use no workgroup memory at all.

The kernels are hand-written GLSL (`a_in_registers.comp`, built by glslangValidator into `build/`), put in
place of retarget's matmul kernel and run as `warp_specialized.py` runs its own; the same schedule written in
GLSL with A staged is the baseline to compare with (glslang's code for the shipped schedule runs below our
emitter's).

    python3 benchmarks/gpu/probes/a_in_registers.py --build          (here: needs glslangValidator)
    . benchmarks/gpu/preamble.sh; RETARGET_VULKAN_PIPELINE_STATISTICS=1 \\
        python3 benchmarks/gpu/probes/a_in_registers.py [NAME-SUBSTRING...]
                                                     (carry .gl, .whl and benchmarks/gpu/probes/build)
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import warp_specialized  # noqa: E402

SOURCE = "a_in_registers.comp"
LAYOUT = dict(SOURCE=SOURCE, LAYOUT_PROBE=1)
VARIANTS = {
    "glsl: shipped schedule (A and B staged, 1 copy of 64)": dict(PRODUCERS=0, COPIES=1, TK=64),
    "A in registers, ring of 2, B 1 copy of 64": dict(SOURCE=SOURCE, RING=2, BCOPIES=1, TK=64),
    "A in registers, ring of 2, B 2 copies of 64": dict(SOURCE=SOURCE, RING=2, BCOPIES=2, TK=64),
    "A in registers, ring of 4, B 2 copies of 64": dict(SOURCE=SOURCE, RING=4, BCOPIES=2, TK=64),
    "A in registers, ring of 2, B 2 copies of 32": dict(SOURCE=SOURCE, RING=2, BCOPIES=2, TK=32),
    "A in registers, ring of 1, B 2 copies of 64": dict(SOURCE=SOURCE, RING=1, BCOPIES=2, TK=64),
    "A in registers, ring of 1, B 1 copy of 64": dict(SOURCE=SOURCE, RING=1, BCOPIES=1, TK=64),
    "A in registers, ring of 2, B 1 copy of 32": dict(SOURCE=SOURCE, RING=2, BCOPIES=1, TK=32),
    "A and B packed in fragment order, no workgroup memory, ring of 2": dict(SOURCE=SOURCE, PACKED_BOTH=1, RING=2),
    "A and B packed in fragment order, no workgroup memory, ring of 1": dict(SOURCE=SOURCE, PACKED_BOTH=1, RING=1),
    "A and B packed in fragment order, no workgroup memory, ring of 4": dict(SOURCE=SOURCE, PACKED_BOTH=1, RING=4),
    "A and B packed in fragment order, no workgroup memory, ring of 2, loads after the multiplies":
        dict(SOURCE=SOURCE, PACKED_BOTH=1, RING=2, LOAD_AFTER=1),
    "A and B packed in fragment order, no workgroup memory, ring of 4, loads after the multiplies":
        dict(SOURCE=SOURCE, PACKED_BOTH=1, RING=4, LOAD_AFTER=1),
    "A in registers, ring of 2, B 1 copy of 64, A packed":
        dict(SOURCE=SOURCE, RING=2, BCOPIES=1, TK=64, PACKED_A=1),
    "A in registers, ring of 1, B 1 copy of 64, A packed":
        dict(SOURCE=SOURCE, RING=1, BCOPIES=1, TK=64, PACKED_A=1),
}


# (row, column) of each lane's 8 elements in NVIDIA's 16x16 f16 fragments (read off the H100 by `fragment_layout`)
LANE, ELEMENT = np.meshgrid(np.arange(32), np.arange(8), indexing="ij")
A_ROWS = LANE // 4 + 8 * (ELEMENT // 4)
A_COLS = 2 * (LANE % 4) + ELEMENT % 2 + 8 * (ELEMENT // 2 % 2)
# B's lane 4n + c holds column n (then n + 8) at the rows that A's lane 4g + c holds as columns of row g: B
# transposed packs in A's order


def packed(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """x's 16x16 blocks, each as 32 lanes x 8 elements in fragment order; blocks [block row][block column]."""
    blocks = x.reshape(x.shape[0] // 16, 16, x.shape[1] // 16, 16).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(blocks[:, :, rows, cols]).reshape(x.shape)


def fragment_order(defines: dict, a: np.ndarray, b: np.ndarray):
    """A and B as a variant reads them: PACKED_BOTH reads A's fragments by (row block, k-slice) and B's by
    (column block, k-slice), so B is packed transposed."""
    if defines.get("PACKED_A"):
        # [64-row block][k-slice][i][h][g][c][j] holds row 64 block + 16 i + 8 h + g, column 16 slice + 4 c + j
        m, kk = a.shape
        blocks = a.reshape(m // 64, 4, 2, 8, kk // 16, 4, 4).transpose(0, 4, 1, 2, 3, 5, 6)
        return np.ascontiguousarray(blocks).reshape(a.shape), b
    if defines.get("PACKED_BOTH"):
        return packed(a, A_ROWS, A_COLS), packed(np.ascontiguousarray(b.T), A_ROWS, A_COLS)
    return a, b


def fragment_layout() -> None:
    """Which (row, column) of a 16x16 tile each lane's A and B fragment elements hold, on this device."""
    import retarget
    from test_hopper_gemm import matmul_module

    size = warp_specialized.SIZE
    tile = np.zeros((size, size), np.float16)
    tile[:16, :16] = np.arange(256).reshape(16, 16)
    art = retarget.compile(matmul_module(size, size, size), "vulkan-spirv:host")
    with open(warp_specialized.spv_path(LAYOUT), "rb") as f:
        art = warp_specialized.with_kernel(art, f.read(), 128)
    out = retarget.load(art, device="vulkan").main(tile, tile).reshape(-1)[:512].astype(int)
    for use, values in (("A", out[:256]), ("B", out[256:])):
        print(f"{use} fragment, lane: (row, column) of each element")
        for lane in range(0, 32, 1):
            print(f"  {lane:2d}: " + " ".join(f"({v // 16:2d},{v % 16:2d})" for v in values[lane * 8:lane * 8 + 8]))


if __name__ == "__main__":
    if "--build" in sys.argv:
        warp_specialized.build({"layout": LAYOUT, **VARIANTS})
    else:
        sys.path.insert(0, os.path.join(HERE, "../../../plugins/cuda/tests"))
        fragment_layout()
        warp_specialized.main(VARIANTS, "a_in_registers.json", fragment_order)
