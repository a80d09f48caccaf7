"""Runs llvm-cpu objects in this process, for the `local-sync`/`local-task` drivers.

MCJIT links the object into executable memory (resolving libm calls against this
process), then each kernel is a ctypes function. ctypes drops the GIL during
the call, so `local-task` runs the workgroups of one dispatch in parallel. Each
bound dispatch also says where its code and binding table are (`run.native`), so
that the drivers can run whole command buffers through `runner.py` instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np
from retarget.protocols import ExecutableBinary, TargetDesc

from . import FORMAT

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
FAMILIES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

_lock = threading.Lock()
_libraries_loaded = False


def _family(triple_or_machine: str) -> str:
    first = triple_or_machine.split("-", 1)[0].lower()
    return FAMILIES.get(first, first)


def _load_libraries():
    """Make libm's symbols visible to the JIT linker (tanhf, erff, fmodf, ...)."""
    global _libraries_loaded
    import llvmlite.binding as llvm

    if not _libraries_loaded:
        for name in ("m", "gcc_s"):
            path = ctypes.util.find_library(name)
            if path:
                llvm.load_library_permanently(path)
        _libraries_loaded = True


class LoadedObject:
    """Keeps the JIT engine (and so the code) alive as long as a kernel refers to it."""

    def __init__(self, binary: ExecutableBinary):
        import llvmlite.binding as llvm

        from .codegen import _init

        _init()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        with _lock:
            _load_libraries()
            tm = llvm.Target.from_default_triple().create_target_machine(jit=True)
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(binary.data))
            self.engine.finalize_object()
        self.functions, self.addresses = {}, {}
        for e in binary.entry_points:
            address = self.engine.get_function_address(e.name)
            if not address:
                raise RuntimeError(f"{FORMAT}: the object has no kernel named '{e.name}'")
            self.functions[e.name] = KERNEL_TYPE(address)
            self.addresses[e.name] = address


class LlvmCpuLoader:
    format = FORMAT

    @property
    def native_runner(self):
        """Runs recorded dispatches of these kernels without returning to Python between them (runner.py)."""
        from .runner import RUNNER

        return RUNNER

    def can_load(self, target: TargetDesc) -> str | None:
        import llvmlite.binding as llvm

        triple = target.extra.get("triple", "")
        host_family = _family(llvm.get_process_triple())
        if _family(triple) != host_family:
            return (f"the object is for {_family(triple)} ({target.arch}) and this CPU is {host_family}; "
                    "recompile with --target llvm-cpu:host")
        host = {k for k, on in llvm.get_host_cpu_features().items() if on}
        missing = sorted(set(target.features) - host)
        if missing:
            return (f"this CPU ({llvm.get_host_cpu_name()}) lacks {', '.join(missing)}, which the "
                    f"{target.arch} object may use; recompile with --target llvm-cpu:host")
        return None

    def load(self, binary: ExecutableBinary):
        obj = LoadedObject(binary)
        return [_kernel(obj, obj.functions[e.name], len(e.bindings), len(e.scalars), obj.addresses[e.name])
                for e in binary.entry_points]


def _kernel(obj: LoadedObject, fn, n_bindings: int, n_scalars: int = 0, address: int = 0):
    def bind(views, scalars=()):
        if len(views) != n_bindings:
            raise ValueError(f"kernel takes {n_bindings} bindings, got {len(views)}")
        if len(scalars) != n_scalars:
            raise ValueError(f"kernel takes {n_scalars} scalars, got {len(scalars)}")
        for v in views:
            if not v.flags.c_contiguous:
                raise ValueError("llvm-cpu kernels need C-contiguous bindings")
        # the scalars (sizes known at run time) follow the buffers, as one more binding of i64 values
        values = np.array(scalars, dtype=np.int64)
        addresses = [v.ctypes.data for v in views] + ([values.ctypes.data] if n_scalars else [])
        pointers = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        args = ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p))
        keep = (obj, views, pointers, values)  # the engine, the memory and the pointer array outlive `run`

        def run(workgroup):
            x, y, z = workgroup
            fn(args, x, y, z)

        run.keep = keep
        run.native = (address, ctypes.addressof(pointers))  # for the drivers' native programs (protocols.py)
        return run

    return bind
