"""Probe (2026-11-25, thirteenth session): which instructions NVIDIA's Vulkan driver makes of workgroup-scope
cooperative matrices (VK_NV_cooperative_matrix2). One f16 4096^3 matmul variant of commit 14f7892's schedule (with
tensor-addressing.patch) is checked against float64, timed (median of 20 submits, device timestamps), and the
device's pipeline cache is written to $OUT/NAME.cache; `vulkan_sass.py` decodes it here.

    here:  bash benchmarks/gpu/probes/tensor_addressing.sh prepare     (fills .dbg/probe)
    there: . benchmarks/gpu/preamble.sh; export PYTHONPATH=$PWD/.dbg/probe/core_src:$PWD/.dbg/probe/vk_src:$PYTHONPATH
           python3 benchmarks/gpu/probes/workgroup_scope_sass.py NAME TILE_M TILE_N TILE_K THREADS TENSOR_LOADS
           (TILE_M 0: the subgroup schedule; carry .gl .whl .dbg)
    here:  python3 benchmarks/gpu/probes/vulkan_sass.py NAME.cache NAME.sass
"""

import importlib
import os
import statistics
import sys

import numpy as np
import retarget
import torch
from retarget_vulkan_spirv.driver import _vk

name, tm, tn, tk, threads, tensor = sys.argv[1], *map(int, sys.argv[2:7])
patch = {
    "WORKGROUP_TILES": ((tm, tn, tk, threads),) if tm else (),
    "WORKGROUP_PREFETCH": False,
    "retarget_vulkan_spirv.codegen.TENSOR_LOADS": bool(tensor),
}
for key, value in patch.items():
    place, _, attr = key.rpartition(".")
    setattr(importlib.import_module(place or "retarget.kernel.lower"), attr, value)


class Matmul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


size = 4096
rng = np.random.default_rng(1)
a, b = (rng.standard_normal((size, size)).astype(np.float16) for _ in range(2))
art = retarget.compile(Matmul(), "vulkan-spirv:host", example_inputs=(torch.from_numpy(a), torch.from_numpy(b)))
loaded = retarget.load(art, device="vulkan")
out = loaded.main(a, b)
ref = (torch.from_numpy(a).cuda().double() @ torch.from_numpy(b).cuda().double()).cpu().numpy()
err = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
dev = loaded.device
if hasattr(dev, "time"):
    secs = dev.time(loaded.main.command_buffer, 20)
else:
    secs = [dev.timed_submit(loaded.main.command_buffer) for _ in range(20)]
ms = statistics.median(secs) * 1e3
print(f"{name}: err {err:.1e}, {ms:.3f} ms, {2 * size**3 / ms / 1e9:.1f} TFLOP/s", flush=True)
vk = _vk()
n = vk.ffi.new("size_t*")
vk.lib.vkGetPipelineCacheData(dev.handle, dev.pipeline_cache, n, vk.ffi.NULL)
data = vk.ffi.new("char[]", n[0])
vk.lib.vkGetPipelineCacheData(dev.handle, dev.pipeline_cache, n, data)
open(os.path.join(os.environ["OUT"], name + ".cache"), "wb").write(vk.ffi.buffer(data, n[0]))
