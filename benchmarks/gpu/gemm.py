"""GEMMs on one GPU target beside torch.matmul (cuBLAS): correctness at small sizes (with a bias+ReLU
epilogue), then device time at large ones. retarget's time is the device's own (timestamps or events around
one submit of the recorded function), torch's is CUDA events around torch.matmul; both are medians. f32
runs with TF32 off in torch (retarget never uses it), f16 on the matrix units where the target has them.

    python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan [--dtype f16] [--sizes 1024 4096]
        [--repeats 20] [--variants]
(writes $OUT/gemm-<device>-<dtype>.json if OUT is set). `--variants` also times each size with other
register-tile plans of the GPU lowering (`retarget.kernel.lower.REGISTER_TILE_PLANS`; none: the split-reduction
schedule) for f32; for f16 on a cuda target, the wgmma schedule's plans (`retarget_cuda.hopper_gemm`) and the
core's wmma one, elsewhere the loops as the core spells them (`retarget_vulkan_spirv.targets.LOOP_SPELLING`), other
fragment-matmul plans (`LARGE_FRAGMENT_PLANS`) and staging element by element.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def main():
    import retarget
    import torch
    from retarget.testing.numerics import relative_error

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="vulkan-spirv:host")
    parser.add_argument("--device", default="vulkan")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--bias", action="store_true", help="a linear layer: a @ b + bias (torch: addmm)")
    args = parser.parse_args()
    dt = np.float16 if args.dtype == "f16" else np.float32
    torch.backends.cuda.matmul.allow_tf32 = False
    variants = [("default", {})]
    if args.variants and args.dtype == "f16" and args.target.startswith("cuda"):  # Hopper's wgmma schedule
        wmma = {"retarget_cuda.hopper_gemm.MIN_WAVES": float("inf")}
        plans = "retarget_cuda.targets.LARGE_FRAGMENT_PLANS"
        variants += [("wgmma 128x128, 6 stages", {"retarget_cuda.hopper_gemm.PLANS": ((128, 6),)}),
                     ("wgmma 128x256, 3 stages", {"retarget_cuda.hopper_gemm.PLANS": ((256, 3),)}),
                     ("wgmma, tiles in row order", {"retarget_cuda.hopper_gemm.GROUP_M": 1}),
                     ("wmma schedule (the core's, NVIDIA's plans)", wmma),
                     ("wmma, loops as the core spells them", {**wmma, "retarget_cuda.targets.LOOP_SPELLING": {}}),
                     ("wmma, staged element by element", {**wmma, "VECTOR_STAGING": False}),
                     ("wmma, the core's own plans (8 warps of 64x32)", {**wmma, plans: []}),
                     ("wmma, 4 warps of 64x64, tile_k 32", {**wmma, plans: [(2, 2, 4, 4, 2)]})]
    elif args.variants and args.dtype == "f16":  # the tiled fragment matmul's plans and loops (NVIDIA's, for Vulkan)
        plans = "retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS"
        loops = "retarget_vulkan_spirv.targets.LOOP_SPELLING"
        variants += [("loops as the core spells them (last step inside, k-slices unrolled)", {loops: {}}),
                     ("staged element by element", {"VECTOR_STAGING": False}),
                     ("the core's plans (8 warps of 64x32)", {plans: {}}),
                     ("128x128, 4 warps of 64x64, tile_k 32, 2 copies", {plans: {"NVIDIA": [(2, 2, 4, 4, 2)]}})]
    elif args.variants:
        variants += [("runs of 1", {"REGISTER_TILE_PLANS": ((16, 16, 8, 8, 8, 1), (16, 16, 4, 4, 16, 1))}),
                     ("tile_k 16", {"REGISTER_TILE_PLANS": ((16, 16, 8, 8, 16, 4), (16, 16, 4, 4, 16, 4))}),
                     ("8x4 a thread", {"REGISTER_TILE_PLANS": ((16, 32, 8, 4, 8, 4), (16, 16, 4, 4, 16, 4))}),
                     ("split reduction", {"REGISTER_TILE_PLANS": ()})]

    def device_ms(loaded, fn) -> float:
        device = loaded.device
        if hasattr(device, "time"):
            seconds = device.time(fn.command_buffer, args.repeats)
        else:
            seconds = [device.timed_submit(fn.command_buffer) for _ in range(args.repeats)]
        return statistics.median(seconds) * 1e3

    def compiled(module, inputs, patch):
        """Compiled with constants of the GPU lowering (`NAME`) or of a plugin's module (`package.module.NAME`)
        set to other values."""
        import importlib

        def owner(key):
            place, _, name = key.rpartition(".")
            return importlib.import_module(place or "retarget.kernel.lower"), name

        saved = {key: getattr(*owner(key)) for key in patch}
        for key, value in patch.items():
            setattr(*owner(key), value)
        try:
            return retarget.compile(module, args.target, example_inputs=inputs)
        finally:
            for key, value in saved.items():
                setattr(*owner(key), value)

    def kernels(art) -> list[str]:
        """Each SPIR-V kernel's workgroup size and extensions (which schedule a variant took); [] elsewhere."""
        out = []
        for exe in art.manifest["executables"]:
            if exe["backend"] == "vulkan-spirv":
                from retarget_vulkan_spirv import container

                out += [f"{kn['name']} {'x'.join(map(str, kn['workgroup_size']))} {'+'.join(kn.get('extensions', []))}"
                        for kn in container.unpack(bytes(art.entries[exe["path"]]))]
        return out

    class MatmulBiasRelu(torch.nn.Module):
        def forward(self, a, b, bias):
            return torch.relu(a @ b + bias)

    class Matmul(torch.nn.Module):
        def __init__(self, bias=None):
            super().__init__()
            self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, a, b):
            return a @ b if self.bias is None else a @ b + self.bias

    rng = np.random.default_rng(0)
    rows = []
    for m, n, kk in ((512, 512, 512), (70, 200, 96)):  # correctness, awkward shapes included
        a, b, bias = (rng.standard_normal(s).astype(dt) for s in ((m, kk), (kk, n), (n,)))
        art = retarget.compile(MatmulBiasRelu(), args.target, example_inputs=tuple(map(torch.from_numpy, (a, b, bias))))
        out = retarget.load(art, device=args.device).main(a, b, bias)
        expected = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32), 0)
        err = relative_error(out.astype(np.float32), expected)
        rows.append({"check": f"{m}x{n}x{kk} +bias relu", "relative_error": float(err)})
        print(f"check {m}x{n}x{kk}: relative error {err:.1e}", flush=True)
    for size in args.sizes:
        a, b = (rng.standard_normal((size, size)).astype(dt) for _ in range(2))
        cuda = torch.cuda.is_available()
        ta, tb = (torch.from_numpy(x).cuda() if cuda else torch.from_numpy(x) for x in (a, b))
        bias = rng.standard_normal(size).astype(dt) if args.bias else None
        tbias = None if bias is None else torch.from_numpy(bias).to(ta.device)
        expected = (ta.double() @ tb.double()).cpu().numpy()
        if bias is not None:  # as the graph computes it: the product in the output's type, plus the bias
            expected = expected.astype(dt).astype(np.float64) + bias
        torch_ms = [float("nan")] * 4
        for _ in range(args.repeats + 3 if cuda else 0):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            torch.matmul(ta, tb) if tbias is None else torch.addmm(tbias, ta, tb)
            end.record()
            torch.cuda.synchronize()
            torch_ms.append(begin.elapsed_time(end))
        theirs = statistics.median(torch_ms[3:])  # nan without CUDA (a local dry run)
        flop = 2 * size**3
        for variant, env in variants:
            start = time.perf_counter()
            model = Matmul(None if bias is None else torch.from_numpy(bias))
            art = compiled(model, (torch.from_numpy(a), torch.from_numpy(b)), env)
            compile_s = time.perf_counter() - start
            loaded = retarget.load(art, device=args.device)
            fn = loaded.main
            out = fn(a, b)
            err = relative_error(out.astype(np.float64), expected)
            ours = device_ms(loaded, fn)
            row = {"size": size, "dtype": args.dtype, "bias": args.bias, "variant": variant, "retarget_ms": ours,
                   "kernels": kernels(art),
                   "torch_ms": theirs,
                   "retarget_tflops": flop / ours / 1e9, "torch_tflops": flop / theirs / 1e9,
                   "relative_error": float(err), "compile_s": compile_s}
            rows.append(row)
            label = f"{args.dtype}{' +bias' if args.bias else ''} ({variant})"
            print(f"gemm {size}^3 {label}: retarget {ours:.3f} ms ({row['retarget_tflops']:.1f} "
                  f"TFLOP/s), torch {theirs:.3f} ms ({row['torch_tflops']:.1f} TFLOP/s), "
                  f"ratio {theirs / ours:.2f}x, rel err {err:.1e} {row['kernels']}", flush=True)
    if os.environ.get("OUT"):
        name = f"gemm-{args.device.partition(':')[0]}-{args.dtype}{'-bias' if args.bias else ''}.json"
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump({"target": args.target, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
