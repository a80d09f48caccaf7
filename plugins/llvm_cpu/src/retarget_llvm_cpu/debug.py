"""Files for reading what LLVM made of a kernel: the kernel text, the LLVM IR before and
after optimisation, and the assembly.

    from retarget_llvm_cpu.debug import dump_kernel
    dump_kernel(kernel, desc, "/tmp/k")   # /tmp/k/NAME.kernel, .ll, .opt.ll, .s
"""

from __future__ import annotations

from pathlib import Path

from retarget.kernel.ir import Kernel, print_kernel
from retarget.protocols import TargetDesc

from . import codegen


def dump_kernel(kernel: Kernel, desc: TargetDesc, directory: str | Path) -> dict[str, Path]:
    """Writes the four files for `kernel` compiled for `desc`; returns their paths by suffix."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    triple, cpu, features = desc.extra["triple"], desc.extra["cpu"], desc.features
    tm = codegen.target_machine(triple, cpu, features)
    text = codegen.llvm_ir([kernel], triple, features, kernel.name)
    optimized = codegen.optimize(text, tm)
    contents = {"kernel": print_kernel(kernel), "ll": text, "opt.ll": str(optimized),
                "s": tm.emit_assembly(optimized)}
    paths = {}
    for suffix, body in contents.items():
        paths[suffix] = d / f"{kernel.name}.{suffix}"
        paths[suffix].write_text(body)
    return paths
