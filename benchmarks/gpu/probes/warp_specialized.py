"""A producer subgroup that stages while four others only multiply: does it lift the Vulkan f16 GEMM?

The shipped schedule (4 subgroups of 64x64, one 64-deep staged copy) makes every subgroup load the next step
into 64 registers, multiply, wait at a barrier, store, wait again. Warp specialization as Hopper kernels do it,
in Vulkan terms: a fifth subgroup loads and stores into two copies of 32-deep steps while the four others only
multiply, one barrier a step. A Vulkan pipeline has one register count for all its invocations, so the producer
holds its loads in the accumulators' elements (which it does not otherwise use): both roles fit about 180
registers, two workgroups a multiprocessor.

The kernels are hand-written GLSL (`warp_specialized.comp`, built with glslangValidator on any machine into
`build/`), put in place of retarget's matmul kernel in a compiled module (same bindings and push constants), run
through retarget's Vulkan driver, checked against float64 and timed as `load_paths.py` times (median of the
submits in 1.5 s, device time, SM clock sampled); cuBLAS before and after.

    python3 benchmarks/gpu/probes/warp_specialized.py --build          (here: needs glslangValidator)
    . benchmarks/gpu/preamble.sh; RETARGET_VULKAN_PIPELINE_STATISTICS=1 \\
        python3 benchmarks/gpu/probes/warp_specialized.py [NAME-SUBSTRING...]
                                                     (carry .gl, .whl and benchmarks/gpu/probes/build)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "build")
SIZE = int(os.environ.get("PROBE_SIZE", 4096))
ENTRY = "main_dispatch_0_matmul"  # the matmul module's one kernel

# name -> the defines of warp_specialized.comp
VARIANTS = {
    "glsl: shipped schedule (every subgroup stages, 1 copy of 64)": dict(PRODUCERS=0, COPIES=1, TK=64),
    "glsl: shipped schedule, k-slices unrolled": dict(PRODUCERS=0, COPIES=1, TK=64, KS_UNROLL=1),
    "1 producer, 2 copies of 32, held in accumulators": dict(PRODUCERS=1, COPIES=2, TK=32),
    "1 producer, 2 copies of 32, held in accumulators, k-slices unrolled":
        dict(PRODUCERS=1, COPIES=2, TK=32, KS_UNROLL=1),
    "1 producer, 2 copies of 32, held in own registers": dict(PRODUCERS=1, COPIES=2, TK=32, STAGE_IN_ACC=0),
    "1 producer, 3 copies of 16, held in accumulators": dict(PRODUCERS=1, COPIES=3, TK=16),
    "1 producer, 4 copies of 16, held in accumulators": dict(PRODUCERS=1, COPIES=4, TK=16),
    "2 producers, 2 copies of 32, held in accumulators": dict(PRODUCERS=2, COPIES=2, TK=32),
    "1 producer, 2 copies of 32, loaded and stored between two barriers, in accumulators":
        dict(PRODUCERS=1, COPIES=2, TK=32, SAME_STEP=1),
    "1 producer, 2 copies of 32, loaded and stored between two barriers, own registers":
        dict(PRODUCERS=1, COPIES=2, TK=32, SAME_STEP=1, STAGE_IN_ACC=0),
    "2 producers, 2 copies of 32, loaded and stored between two barriers, in accumulators":
        dict(PRODUCERS=2, COPIES=2, TK=32, SAME_STEP=1),
    "1 producer, 3 copies of 16, loaded and stored between two barriers, in accumulators":
        dict(PRODUCERS=1, COPIES=3, TK=16, SAME_STEP=1),
    "1 producer doing nothing, 2 copies of 32 (timing only)": dict(PRODUCERS=1, COPIES=2, TK=32, NO_STAGING=1),
}


def source(defines: dict) -> str:
    return defines.get("SOURCE", "warp_specialized.comp")


def spv_path(defines: dict) -> str:
    flags = "-".join(f"{k}{v}" for k, v in sorted(defines.items()) if k != "SOURCE")
    return os.path.join(BUILD, f"{os.path.splitext(source(defines))[0]}-{SIZE}-{flags}.spv")


def threads(defines: dict) -> int:
    return 128 + 32 * defines.get("PRODUCERS", 0)


def build(variants: dict) -> None:
    """Each variant's SPIR-V into build/, by glslangValidator (GLSLANG names it)."""
    glslang = os.environ.get("GLSLANG", shutil.which("glslangValidator") or "glslangValidator")
    os.makedirs(BUILD, exist_ok=True)
    for defines in variants.values():
        flags = [f"-D{k}={v}" for k, v in {**defines, "SIZE": SIZE}.items() if k != "SOURCE"]
        subprocess.run([glslang, "-V", "--target-env", "vulkan1.3", "-e", ENTRY, "--source-entrypoint", "main", *flags,
                        os.path.join(HERE, source(defines)), "-o", spv_path(defines)],
                       check=True, stdout=subprocess.DEVNULL)
        print("built", spv_path(defines))


def with_kernel(art, spirv: bytes, workgroup: int):
    """`art` (a compiled single-matmul module) with its Vulkan kernel's SPIR-V replaced."""
    from retarget_vulkan_spirv import container

    [key] = [k for k in art.entries if k.startswith("executables/")]
    doc = json.loads(art.entries[key])
    [kernel] = doc["kernels"]
    assert kernel["name"] == ENTRY, kernel["name"]
    kernel.update(spirv=container.encode_words(spirv), workgroup_size=[workgroup, 1, 1])
    art.entries[key] = json.dumps(doc).encode()
    return art


def main(variants: dict = VARIANTS, json_name: str = "warp_specialized.json", inputs=lambda defines, a, b: (a, b)):
    """Each variant checked and timed beside retarget's own kernel and cuBLAS; `inputs(defines, a, b)` gives what
    a variant's kernel is called with (A and B, or a layout of them that it reads)."""
    if "--build" in sys.argv:
        build(variants)
        return
    import retarget
    import torch

    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "../../../plugins/cuda/tests"))
    from load_paths import cublas_row, report, timed
    from test_hopper_gemm import matmul_module

    wanted = sys.argv[1:]
    names = [n for n in variants if not wanted or any(w in n for w in wanted)]
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((SIZE, SIZE)).astype(np.float16) for _ in range(2))
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    expected = (ta.double() @ tb.double()).cpu().numpy()
    rows = [cublas_row(ta, tb)]
    for name in ["shipped (retarget's own kernel)", *names, "shipped again"]:
        art = retarget.compile(matmul_module(SIZE, SIZE, SIZE), "vulkan-spirv:host")
        if name in variants:
            with open(spv_path(variants[name]), "rb") as f:
                art = with_kernel(art, f.read(), threads(variants[name]))
        print(name, flush=True)
        try:
            loaded = retarget.load(art, device="vulkan")
            out = loaded.main(*(inputs(variants[name], a, b) if name in variants else (a, b))).astype(np.float64)
        except Exception as e:  # a variant the driver refuses: say so and go on
            print(f"  failed: {type(e).__name__}: {e}", flush=True)
            continue
        error = float(np.abs(out - expected).max() / np.abs(expected).max())
        rows.append(timed({"variant": name, "flop": 2 * SIZE ** 3, "max_error": error},
                          lambda device=loaded.device, buffer=loaded.main.command_buffer: device.time(buffer, 10)))
        del loaded  # its pipelines go before the next variant's
    rows.append(cublas_row(ta, tb))
    report(rows, json_name, width=78)


if __name__ == "__main__":
    main()
