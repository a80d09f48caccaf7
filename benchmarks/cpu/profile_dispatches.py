"""Time every dispatch of a zoo model on llvm-cpu, and show the slowest.

    .venv/bin/python benchmarks/cpu/profile_dispatches.py mobilenet_v2
    .venv/bin/python benchmarks/cpu/profile_dispatches.py mobilenet_v2 --device local-sync --device local-task
    .venv/bin/python benchmarks/cpu/profile_dispatches.py resnet18 --top 20 --dump /tmp/k

The model is compiled for the host CPU and loaded on each `--device` (default: local-sync,
one thread). Each dispatch is recorded alone into a command buffer and submitted, the
dispatches taking turns (`retarget.bench.per_dispatch`); its time is the median of
`--repeat` submits, so it includes the driver's cost of running its workgroups. The
whole function's time is shown beside the sum. GFLOP/s counts 2 flops per multiply-add
of convolutions and matmuls (other dispatches show none). `--dump DIR` writes the top
kernels' text, LLVM IR before and after optimisation, and assembly (see
retarget_llvm_cpu.debug). Set RETARGET_CACHE_DIR to a fresh directory after changing
code generation, or cached objects come back.
"""

from __future__ import annotations

import argparse
import warnings


def dispatch_functions(module):
    """The dispatch graph functions, by name, as the compiler forms them."""
    from retarget.compiler import GRAPH_PASSES
    from retarget.passes.dispatch import form_dispatches

    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    return {d.name: d.function for fn in module.functions.values() for d in form_dispatches(fn)}


def flops(fn) -> int:
    total = 0
    for op in fn.ops:
        if op.name == "rt.conv2d":
            _, cg, kh, kw = op.operands[1].type.shape
            total += 2 * op.result.type.num_elements * cg * kh * kw
        elif op.name == "rt.matmul":
            total += 2 * op.result.type.num_elements * op.operands[0].type.shape[-1]
    return total


def describe(fn) -> str:
    for op in fn.ops:
        if op.name == "rt.conv2d":
            w = op.operands[1].type.shape
            kind = "dw" if op.attrs.get("groups", 1) > 1 else ""
            s = op.attrs.get("strides", (1, 1))[0]
            return (f"conv{kind} {w[2]}x{w[3]}/s{s} {op.operands[0].type.shape[1]}->{w[0]} "
                    f"@{op.result.type.shape[2]}x{op.result.type.shape[3]}")
        if op.name == "rt.matmul":
            return f"matmul {op.operands[0].type.shape}x{op.operands[1].type.shape}"
    return ""


def main():
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="mobilenet_v2",
                        help="a zoo model name, or a .onnx file of static input shapes (random inputs)")
    parser.add_argument("--top", type=int, default=15, help="how many dispatches to list")
    parser.add_argument("--repeat", type=int, default=20, help="submits per dispatch; the median counts")
    parser.add_argument("--device", action="append", help="local-sync (default) or local-task; repeat for both")
    parser.add_argument("--stat", choices=("median", "min"), default="median",
                        help="which statistic of the submits to show (min: the least disturbed by other load)")
    parser.add_argument("--target", default="llvm-cpu:host")
    parser.add_argument("--dump", metavar="DIR", help="write the top kernels' IR and assembly here")
    args = parser.parse_args()
    devices = args.device or ["local-sync"]

    import retarget
    from retarget.bench import per_dispatch
    from retarget.compiler import import_model
    from retarget.testing import zoo

    if args.model.endswith(".onnx"):
        from retarget.bench.module import random_inputs

        module = import_model(args.model)
        art = retarget.compile(module, args.target)
        arrays = random_inputs(retarget.load(art, devices[0]).main)
    else:
        model, inputs = zoo.make(args.model)
        module = import_model(model, example_inputs=inputs)
        art = retarget.compile(module, args.target)
        arrays = [i.numpy() for i in inputs]
    functions = dispatch_functions(module)
    reports = {d: per_dispatch(retarget.load(art, d).main, arrays, repeats=args.repeat, inner=1) for d in devices}

    first = reports[devices[0]]
    key = f"{args.stat}_ms"
    print(f"{args.model} on {args.target} ({art.manifest['executables'][0]['arch']}), "
          f"{len(first['dispatches'])} dispatches, {args.stat} of {args.repeat} submits each")
    for d, r in reports.items():
        total = sum(row[key] for row in r["dispatches"])
        print(f"  {d}: sum of dispatches {total:.2f} ms, whole function {r['whole'][key]:.2f} ms ({args.stat}s)")
    head = "".join(f"{d + ' ms':>16}{'GFLOP/s':>8}" for d in devices)
    print(f"{head} {'wg':>3}  dispatch")
    rows = sorted(range(len(first["dispatches"])), key=lambda i: -first["dispatches"][i][key])
    for i in rows[:args.top]:
        row = first["dispatches"][i]
        fn = functions.get(row["name"])
        f = flops(fn) if fn is not None else 0
        cells = ""
        for d in devices:
            ms = reports[d]["dispatches"][i][key]
            cells += f"{ms:16.3f}" + (f"{f / ms / 1e6:8.1f}" if f else f"{'':8}")
        print(f"{cells} {row['workgroups'][0]:3}  {row['name']}  {describe(fn) if fn else ''}")
    all_flops = sum(flops(functions[r["name"]]) for r in first["dispatches"] if r["name"] in functions)
    for d, r in reports.items():
        total = sum(row[key] for row in r["dispatches"])
        print(f"all dispatches on {d}: {all_flops / 1e6:.0f} MFLOP at {all_flops / total / 1e6:.1f} GFLOP/s")

    if args.dump:
        from retarget.compiler import resolve_target
        from retarget.kernel.lower import lower_dispatch
        from retarget_llvm_cpu.debug import dump_kernel

        _, desc, _ = resolve_target(args.target)
        for i in rows[:args.top]:
            dump_kernel(lower_dispatch(functions[first["dispatches"][i]["name"]], desc), desc, args.dump)
        print(f"kernel text, LLVM IR and assembly of the top {args.top} in {args.dump}")


if __name__ == "__main__":
    main()
