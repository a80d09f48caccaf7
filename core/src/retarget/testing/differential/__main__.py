"""`python -m retarget.testing.differential`: random models on several targets, checked against float64.

Each --pair is TARGET=DEVICE (default: vmvx=local-sync and llvm-cpu=local-task, where installed). Model SEED of
a family is the same on every run, so a finding's seed reproduces it; --show prints each model's ops and every
pair's error. The exit code is 1 if anything was wrong or raised something other than a RetargetError.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..devices import unavailable
from . import FAMILIES, FAMILY_DTYPES, IMPORTERS, ONNX_OPSET, bisect, check


def _pair(text: str) -> tuple[str, str]:
    target, sep, device = text.partition("=")
    if not sep or not target or not device:
        raise argparse.ArgumentTypeError(f"{text!r}: write TARGET=DEVICE, for example vulkan-spirv=vulkan")
    return target, device


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retarget.testing.differential", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", type=_pair, action="append", default=None, metavar="TARGET=DEVICE",
                        help="a target and the device to run it on (repeat for several)")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="graph",
                        help="graph: chains of 2-7 float ops; gemm: one matmul, linear, bmm or convolution; int: "
                             "chains of integer ops, compared exactly with torch (default graph)")
    parser.add_argument("--dtype", choices=sorted({d for ds in FAMILY_DTYPES.values() for d in ds}), default=None,
                        help="the model's element type: f32 or f16 for graph and gemm (default f32), i8, ui8, i16, "
                             "i32 or i64 for int (default i8)")
    parser.add_argument("--seed", type=int, default=0, help="the first model's seed (default 0)")
    parser.add_argument("--count", type=int, default=50, help="models to check (default 50)")
    parser.add_argument("--max-size", type=int, default=256, help="largest matmul side of the gemm family (256)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="relative error allowed (default: TOLERANCE, by family and dtype)")
    parser.add_argument("--show", action="store_true",
                        help="print each model's ops and each pair's error (or refusal) as it is checked")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--importer", choices=IMPORTERS, default="torch",
                        help="how models reach retarget: torch.export (default), or the ONNX file torch.onnx.export "
                             f"writes (opset {ONNX_OPSET}), which tests the ONNX importer")
    parser.add_argument("--dynamic", action="store_true",
                        help="export the input's first dimension as a symbol (1 to 32), compile once, and run at "
                             "batch 1, the model's own and 3 more")
    parser.add_argument("--bisect", action="store_true",
                        help="for each finding, rerun the model's first 1, 2, ... ops and name the op it starts at")
    args = parser.parse_args(argv)
    args.dtype = args.dtype or FAMILY_DTYPES[args.family][0]
    if args.dtype not in FAMILY_DTYPES[args.family]:
        parser.error(f"--family {args.family} takes --dtype {', '.join(FAMILY_DTYPES[args.family])}")

    import retarget

    installed = retarget.targets()
    pairs = args.pair or [(t, d) for t, d in (("vmvx", "local-sync"), ("llvm-cpu", "local-task")) if t in installed]
    for target, device in pairs:
        if why := unavailable(target, device):
            parser.error(why)
    show = (lambda line: print(line, file=sys.stderr, flush=True)) if args.show else None
    report = check(range(args.seed, args.seed + args.count), pairs, args.family, args.dtype, args.max_size,
                   args.tolerance, progress=show, importer=args.importer, dynamic=args.dynamic)
    if args.json:
        print(json.dumps({"family": args.family, "dtype": args.dtype, "importer": args.importer,
                          "dynamic": args.dynamic,
                          "pairs": [f"{t}={d}" for t, d in pairs],
                          "models": report.models, "outcomes": dict(report.outcomes), "by_pair": report.by_pair,
                          "largest_error": report.worst, "refusals": dict(report.refusals),
                          "seconds": round(report.seconds, 1),
                          "findings": [{**vars(f), "command": f.command(args.family, args.dtype)}
                                       for f in report.findings]}, indent=1))
    else:
        print(report.summary())
        for f in report.findings:
            print(f"\nseed {f.seed} on {f.target}={f.device}: {f.kind}: {f.detail.rstrip()}\n  ops: "
                  f"{' -> '.join(f.ops)}\n  again: {f.command(args.family, args.dtype)}")
            if args.bisect:
                n, first = bisect(f, args.family, args.dtype, args.max_size)
                print(f"  starts at op {n}, {f.ops[n - 1]}: the first {n} ops give {first.kind}: "
                      f"{first.detail.rstrip().splitlines()[-1]}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
