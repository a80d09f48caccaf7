"""The `vmvx` target: dispatches kept as graph IR and run by numpy.

It is the reference every other backend is compared with, so it favours being
obviously right over being fast.
"""

from __future__ import annotations

from ..errors import ModuleFormatError, UnknownTargetError, suggestion
from ..ir.core import Function, Module
from ..ir.parser import parse_module
from ..ir.printer import print_module
from ..protocols import Binding, EntryPoint, ExecutableBinary, TargetDesc
from .interpreter import run_function

FORMAT = "vmvx-graph"
REFERENCE = TargetDesc(backend="vmvx", arch="reference", format=FORMAT, spec="vmvx")
SPELLINGS = ("reference", "host", "default")


class VmvxTarget:
    name = "vmvx"
    drivers = ("local-task", "local-sync")

    def names(self):
        return SPELLINGS

    def parse(self, spec: str) -> TargetDesc:
        if spec in ("",) + SPELLINGS:
            return REFERENCE
        raise UnknownTargetError(f"vmvx has no architecture '{spec}'", hint=f"{suggestion(spec, SPELLINGS)}; "
                                 "vmvx has one architecture, so --target vmvx is enough")

    def default(self):
        return REFERENCE, None  # one architecture: nothing to announce

    def describe(self, device) -> TargetDesc:
        return REFERENCE

    def compile(self, dispatches: list[Function], desc: TargetDesc) -> ExecutableBinary:
        module = Module({fn.name: fn for fn in dispatches})
        entries = [
            EntryPoint(fn.name, tuple([Binding(a.type, "read") for a in fn.args] +
                                      [Binding(r.type, "write") for r in fn.returns]),
                       scalars=tuple(sorted(fn.symbols_used())))
            for fn in dispatches
        ]
        return ExecutableBinary(FORMAT, desc, print_module(module).encode(), entries)


class VmvxLoader:
    format = FORMAT

    def can_load(self, target: TargetDesc) -> str | None:
        return None

    def load(self, binary: ExecutableBinary):
        try:
            text = binary.data.decode()
        except UnicodeDecodeError as e:
            raise ModuleFormatError(f"the {FORMAT} executable is not UTF-8 text (byte {e.start})",
                                    hint="the module is corrupt; recompile it") from None
        module = parse_module(text, filename=f"<{FORMAT} executable>")
        return [_kernel(_entry_function(module, e, binary.target)) for e in binary.entry_points]


def _entry_function(module: Module, entry: EntryPoint, target: TargetDesc) -> Function:
    """The function that runs `entry`, whose arguments and results must be the entry's bindings."""
    if target.backend == "vmvx":
        hint = "the module is corrupt; recompile it"
    else:  # another target produced vmvx code: the fault is most likely its compile, not the file
        hint = (f"target '{target.backend}' produced this {FORMAT} code: its compile must give each dispatch's "
                "function and entry point as retarget.vmvx.VmvxTarget().compile does (one workgroup, the "
                "function's arguments and result as bindings); fix the target, then recompile")
    fn = module.functions.get(entry.name)
    if fn is None:
        raise ModuleFormatError(f"the {FORMAT} executable has no function @{entry.name}", hint=hint)
    if tuple(entry.workgroup_count) != (1, 1, 1):
        raise ModuleFormatError(f"the {FORMAT} entry point {entry.name} asks for {list(entry.workgroup_count)} "
                                "workgroups; a vmvx function runs as one", hint=hint)
    signature = [a.type for a in fn.args] + [r.type for r in fn.returns]
    if signature != [b.type for b in entry.bindings]:
        raise ModuleFormatError(
            f"the {FORMAT} function @{entry.name} takes and returns ({', '.join(map(str, signature))}), but its "
            f"entry point binds ({', '.join(str(b.type) for b in entry.bindings)})", hint=hint)
    return fn


def _kernel(fn: Function):
    n_in = len(fn.args)
    symbols = sorted(fn.symbols_used())  # the order of the entry point's scalars

    def bind(views, scalars=()):
        sizes = dict(zip(symbols, scalars))

        def run(workgroup):
            for out, value in zip(views[n_in:], run_function(fn, views[:n_in], sizes)):
                out[...] = value

        return run

    return bind
