"""The core's fragment matmul on a CUDA GPU (wmma 16x16x16, f16/bf16 inputs, f32 accumulators): numerics
against torch, and speed against torch.matmul.

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/check_fragments.py [--size 4096] [--repeats 20]

NVRTC needs crt/mma.h for wmma: the nvidia-cuda-crt wheel (carry it in .whl: `prepare-carry.sh
"nvidia-cuda-crt==<the image's NVRTC version>.*"`) or a CUDA toolkit under $CUDA_HOME. The script says
which include directories it found before compiling.

1. Numerics, numpy in and out, `cuda:host`: an f16 GEMM 512x512x512, the same with a bias + relu
   epilogue fused, and a bf16 GEMM (where the arch lists bf16 wmma). Each is compared with torch on the
   GPU (fp16/bf16 inputs, fp32 accumulation: reduced-precision reductions off) and with a float64 numpy
   product of the same inputs, as max|out - ref| / max|ref|; the limit is 4e-3 (f16) or 3e-2 (bf16), a
   few units of the output type's rounding. The kernel must have taken the fragment schedule.
2. Speed, a `--size`^3 f16 GEMM: the retarget kernel's GPU time (events around one launch, no copies,
   `device.timed_submit`) against torch.matmul (CUDA events), medians of `--repeats` after warm-up, in
   ms and TFLOP/s, and the two results against each other.

Writes $OUT/fragments.json when $OUT is set; prints a short table last. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np
import retarget
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.kernel.lower import lower_dispatch
from retarget.passes.dispatch import form_dispatches
from retarget.testing.numerics import relative_error

LIMITS = {"f16": 4e-3, "bf16": 3e-2}


def gemm(m: int, k: int, n: int, dt: str, bias_relu: bool = False, seed: int = 0):
    """(module, a, b, bias or None): y = a @ b (+ bias, relu)."""
    dtype = dtypes.DTYPES[dt]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype.np_dtype)
    b = rng.standard_normal((k, n)).astype(dtype.np_dtype)
    args = [Value(TensorType(a.shape, dtype)), Value(TensorType(b.shape, dtype))]
    fn = Function("main", args, arg_names=["a", "b"])
    bld = Builder(fn)
    y = bld.op("rt.matmul", args)
    bias = None
    if bias_relu:
        bias = rng.standard_normal(n).astype(dtype.np_dtype)
        y = bld.op("rt.max", [bld.op("rt.add", [y, bld.constant(bias)]), bld.constant(np.zeros((), dtype.np_dtype))])
    fn.returns = [y]
    return Module({"main": fn}), a, b, bias


def torch_reference(a, b, bias, dt: str):
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    ta, tb = (torch.from_numpy(x.astype(np.float32)).to("cuda", tdt) for x in (a, b))
    y = ta @ tb
    if bias is not None:
        y = torch.relu(y + torch.from_numpy(bias.astype(np.float32)).to("cuda", tdt))
    return y.float().cpu().numpy()


def check(name: str, m: int, k: int, n: int, dt: str, bias_relu: bool) -> dict:
    module, a, b, bias = gemm(m, k, n, dt, bias_relu)
    art = retarget.compile(module, "cuda:host")
    (exe,) = art.manifest["executables"]
    kernels = exe["entry_points"]
    out = retarget.load(art, device="cuda").main(a, b).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        exact = np.maximum(exact + bias.astype(np.float64), 0)
    row = {"case": name, "arch": exe["arch"], "workgroup_sizes": [kn["workgroup_size"] for kn in kernels],
           "error_vs_torch": relative_error(out, torch_reference(a, b, bias, dt)),
           "error_vs_float64": relative_error(out, exact), "limit": LIMITS[dt]}
    row["ok"] = max(row["error_vs_torch"], row["error_vs_float64"]) <= row["limit"]
    return row


def fragment_schedule(fn, desc) -> dict:
    kernel = lower_dispatch(fn, desc)
    return {key: value for key, value in kernel.schedule.items() if isinstance(value, (int, str))}


def speed(size: int, repeats: int) -> dict:
    import torch
    from retarget_cuda import targets
    from retarget_cuda.compile import compile_kernels
    from retarget_cuda.driver import CUDA

    module, a, b, _ = gemm(size, size, size, "f16")
    (d,) = form_dispatches(module.functions["main"])
    desc = targets.parse("host")
    kernel = lower_dispatch(d.function, desc)
    schedule = {key: value for key, value in kernel.schedule.items() if isinstance(value, (int, str))}
    if "fragments" not in kernel.schedule:
        raise AssertionError(f"the {size}^3 f16 GEMM did not take the fragment schedule on {desc.arch}: {schedule}")
    device = CUDA.create(next(d for d in CUDA.enumerate() if d.available).id)
    exe = device.load_executable(compile_kernels([kernel], desc))
    nbytes = [a.nbytes, b.nbytes, size * size * 2]
    buffers = [device.allocate(n) for n in nbytes]
    device.write(buffers[0], 0, a)
    device.write(buffers[1], 0, b)
    cb = device.command_buffer(mode="direct")
    cb.dispatch(exe, 0, [(buf, 0, n) for buf, n in zip(buffers, nbytes)])
    cb.end()
    for _ in range(3):
        device.timed_submit(cb)
    ours = [device.timed_submit(cb) * 1e3 for _ in range(repeats)]
    out = device.read(buffers[2], 0, nbytes[2]).view(np.float16).reshape(size, size).astype(np.float32)

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    ta, tb = (torch.from_numpy(x).to("cuda") for x in (a, b))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        expected = ta @ tb
    theirs = []
    for _ in range(repeats):
        start.record()
        expected = ta @ tb
        end.record()
        torch.cuda.synchronize()
        theirs.append(start.elapsed_time(end))
    flops = 2.0 * size ** 3
    ms_ours, ms_torch = statistics.median(ours), statistics.median(theirs)
    return {"case": f"f16 gemm {size}^3 speed", "arch": desc.arch, "schedule": schedule,
            "retarget_ms": ms_ours, "torch_ms": ms_torch,
            "retarget_tflops": flops / ms_ours / 1e9, "torch_tflops": flops / ms_torch / 1e9,
            "retarget_min_ms": min(ours), "torch_min_ms": min(theirs),
            "error_vs_torch": relative_error(out, expected.float().cpu().numpy()), "limit": LIMITS["f16"],
            "ok": relative_error(out, expected.float().cpu().numpy()) <= LIMITS["f16"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from retarget_cuda import targets
    from retarget_cuda.compile import include_dirs, nvrtc_version, wmma_headers

    dirs = include_dirs()
    has_crt = wmma_headers()
    desc = targets.parse("host")
    print(f"NVRTC {nvrtc_version()}, include dirs {dirs}, crt/mma.h {'found' if has_crt else 'MISSING'}; "
          f"cuda:host is {desc.arch}, fragments {desc.extra.get('fragments')}")
    cases = [("f16 gemm 512^3", 512, 512, 512, "f16", False),
             ("f16 gemm 512^3 + bias, relu", 512, 512, 512, "f16", True)]
    if any(f["a"] == "bf16" for f in desc.extra.get("fragments") or ()):
        cases.append(("bf16 gemm 512^3", 512, 512, 512, "bf16", False))
    rows = []
    for name, m, k, n, dt, bias_relu in cases:
        try:
            module, *_ = gemm(m, k, n, dt, bias_relu)
            (d,) = form_dispatches(module.functions["main"])
            row = {**check(name, m, k, n, dt, bias_relu), "schedule": fragment_schedule(d.function, desc)}
            row["ok"] = row["ok"] and "fragments" in row["schedule"]
        except Exception as e:  # report and go on: one failure should not hide the others
            row = {"case": name, "ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        rows.append(row)
    try:
        start = time.perf_counter()
        rows.append({**speed(args.size, args.repeats), "wall_s": time.perf_counter() - start})
    except Exception as e:
        rows.append({"case": f"f16 gemm {args.size}^3 speed", "ok": False, "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()})
    if os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "fragments.json")
        with open(path, "w") as f:
            json.dump({"device": desc.arch, "nvrtc": nvrtc_version(), "include_dirs": dirs, "wmma_headers": has_crt,
                       "rows": rows}, f, indent=1)
        print(f"wrote {path}")
    for row in rows:
        if "error" in row:
            print(row["traceback"])
    columns = [("error_vs_torch", "err vs torch", ".2e"), ("error_vs_float64", "err vs f64", ".2e"),
               ("retarget_ms", "ms ours", ".3f"), ("torch_ms", "ms torch", ".3f"),
               ("retarget_tflops", "TFLOP/s ours", ".1f"), ("torch_tflops", "TFLOP/s torch", ".1f")]
    print(f"{'case':34} {'ok':>4} " + " ".join(f"{title:>13}" for _, title, _ in columns))
    for row in rows:
        cells = [format(row[key], spec) if key in row else "-" for key, _, spec in columns]
        note = f"  {row['error']}" if "error" in row else ""
        print(f"{row['case']:34} {'yes' if row['ok'] else 'NO':>4} " + " ".join(f"{c:>13}" for c in cells) + note)
    if not has_crt:
        print("check_fragments: crt/mma.h is missing, so these kernels ran the portable expansion, not wmma: "
              "carry the nvidia-cuda-crt wheel of the image's NVRTC version, or set CUDA_HOME")
    return 0 if has_crt and all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
