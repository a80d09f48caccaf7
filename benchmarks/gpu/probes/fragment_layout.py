"""Timing only, wrong answers on purpose: does the Vulkan fragment GEMM pay for loading fragments from its
row-major staged tiles (B's fragments are then transposed loads)? Each variant loads the A or B fragments
column-major from a small bank-conflict-free block instead, with the in-loop staging kept or removed (the
prologue's copy stays, so every load reads staged memory).

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/probes/fragment_layout.py      (carry .gl and .whl)
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

COLUMN_MAJOR = 1  # CooperativeMatrixLayout ColumnMajorKHR
BLOCK_STRIDE = 24  # elements: 48-byte columns put a fragment's 8 columns in different banks


def main():
    import retarget
    import retarget.kernel.lower as lower
    from retarget_vulkan_spirv import codegen

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../plugins/cuda/tests"))
    from test_hopper_gemm import matmul_module

    shipped_load = codegen._Codegen.stmt_fragmentload
    shipped_staging = lower._Staged.load, lower._Staged.store

    def column_major(role):
        def load(self, s):
            f, type_id, var = self.fragment(s.name)
            if f.role != role:
                return shipped_load(self, s)
            pointer, stride = self.fragment_pointer(s.buffer, s.index, BLOCK_STRIDE)
            self.emit("Store", var, self.op("CooperativeMatrixLoadKHR", type_id, pointer, self.u32(COLUMN_MAJOR),
                                            self.u32(stride)))
        return load

    def first_call_only(method):  # the prologue's copy, none in the loop
        def patched(self, *args, **kwargs):
            calls = getattr(self, "_probe_calls_" + method.__name__, 0)
            setattr(self, "_probe_calls_" + method.__name__, calls + 1)
            return method(self, *args, **kwargs) if calls == 0 else []
        return patched

    a = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float16)
    for name, in_loop, role in [("shipped", True, None), ("B column-major", True, "b"), ("A column-major", True, "a"),
                                ("no staging in the loop", False, None),
                                ("no staging in the loop, B column-major", False, "b"),
                                ("no staging in the loop, A column-major", False, "a"), ("shipped again", True, None)]:
        if not in_loop:
            lower._Staged.load, lower._Staged.store = (first_call_only(m) for m in shipped_staging)
        codegen._Codegen.stmt_fragmentload = column_major(role) if role else shipped_load
        try:
            art = retarget.compile(matmul_module(4096, 4096, 4096), "vulkan-spirv:host")
        finally:
            lower._Staged.load, lower._Staged.store = shipped_staging
            codegen._Codegen.stmt_fragmentload = shipped_load
        loaded = retarget.load(art, device="vulkan")
        loaded.main(a, a)
        ms = statistics.median(loaded.device.time(loaded.main.command_buffer, 20)) * 1e3
        print(f"{name}: {ms:.3f} ms, {2 * 4096 ** 3 / ms / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
