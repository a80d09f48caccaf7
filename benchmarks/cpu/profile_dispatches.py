"""Time every dispatch of a zoo model on llvm-cpu, single-threaded, and show the slowest.

    .venv/bin/python benchmarks/cpu/profile_dispatches.py mobilenet_v2
    .venv/bin/python benchmarks/cpu/profile_dispatches.py resnet18 --top 20 --dump /tmp/k

The model is compiled for the host CPU and run on `local-sync` (one thread). Each
dispatch's workgroups run back to back; its time is the best of `--repeat` runs.
GFLOP/s counts 2 flops per multiply-add of convolutions and matmuls (other
dispatches show none). `--dump DIR` writes the top kernels' text, LLVM IR before and
after optimisation, and assembly (see retarget_llvm_cpu.debug). Set
RETARGET_CACHE_DIR to a fresh directory after changing code generation, or
cached objects come back.
"""

from __future__ import annotations

import argparse
import math
import time
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
    parser.add_argument("model", nargs="?", default="mobilenet_v2", help="a zoo model name")
    parser.add_argument("--top", type=int, default=15, help="how many dispatches to list")
    parser.add_argument("--repeat", type=int, default=5, help="runs per dispatch; the best counts")
    parser.add_argument("--target", default="llvm-cpu:host")
    parser.add_argument("--dump", metavar="DIR", help="write the top kernels' IR and assembly here")
    args = parser.parse_args()

    import retarget
    from retarget.compiler import import_model
    from retarget.testing import zoo

    model, inputs = zoo.make(args.model)
    module = import_model(model, example_inputs=inputs)
    functions = dispatch_functions(module)
    art = retarget.compile(module, args.target)
    loaded = retarget.load(art, "local-sync")
    loaded.main(*[i.numpy() for i in inputs])  # binds the command buffer

    works = [w for stage in loaded.functions["main"].command_buffer.stages for w in stage]
    entries = art.manifest["executables"][0]["entry_points"]
    program = [c for c in art.functions["main"]["program"] if c["op"] == "dispatch"]
    rows, i = [], 0
    for command in program:
        n = math.prod(entries[command["entry"]]["workgroup_count"])
        mine = works[i:i + n]
        i += n
        best = math.inf
        for _ in range(args.repeat):
            t = time.perf_counter()
            for w in mine:
                w()
            best = min(best, time.perf_counter() - t)
        rows.append((best, command["name"], n))

    total = sum(r[0] for r in rows)
    print(f"{args.model} on {args.target} ({art.manifest['executables'][0]['arch']}), one thread: "
          f"{total * 1e3:.2f} ms over {len(rows)} dispatches")
    print(f"{'ms':>8} {'share':>6} {'GFLOP/s':>8} {'wg':>3}  dispatch")
    for t, name, n in sorted(rows, reverse=True)[:args.top]:
        fn = functions.get(name)
        f = flops(fn) if fn is not None else 0
        rate = f"{f / t / 1e9:8.1f}" if f else f"{'':8}"
        print(f"{t * 1e3:8.3f} {t / total:6.1%} {rate} {n:3}  {name}  {describe(fn) if fn else ''}")
    all_flops = sum(flops(functions[name]) for _, name, _ in rows if name in functions)
    print(f"all dispatches: {all_flops / 1e6:.0f} MFLOP at {all_flops / total / 1e9:.1f} GFLOP/s")

    if args.dump:
        from retarget.compiler import resolve_target
        from retarget.kernel.lower import lower_dispatch
        from retarget_llvm_cpu.debug import dump_kernel

        _, desc, _ = resolve_target(args.target)
        for _, name, _ in sorted(rows, reverse=True)[:args.top]:
            dump_kernel(lower_dispatch(functions[name], desc), desc, args.dump)
        print(f"kernel text, LLVM IR and assembly of the top {args.top} in {args.dump}")


if __name__ == "__main__":
    main()
