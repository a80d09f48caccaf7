"""Kernel IR -> one SPIR-V compute module (Vulkan, SPIR-V 1.3, GLSL.std.450).

The semantics are those of `retarget.kernel.c_renderer` (and so of vmvx): f16/bf16 are stored
as such and computed in f32; float max/min propagate NaN; integer div/rem truncate, x/0 is x,
x%0 is 0, MIN/-1 is MIN; float to int casts saturate (NaN -> 0); integers narrower than 32
bits wrap after each op. GLSL.std.450 leaves some inputs undefined (Pow of a negative base,
Tanh's overflow, FSign of NaN); those ops are composed here so that every input has the
reference's answer on every driver.

Shape of the code. Every scalar variable and private array is a Function variable (the
driver's compiler promotes them to registers); loops are structured (OpLoopMerge) and `unroll`
loops are unrolled here, so a register tile's indices are constants. Index arithmetic (i64 in
the kernel IR) is computed in 32 bits, as on every GPU (`retarget.kernel.index32` tells it from
data before this runs): each buffer must hold fewer than 2^31 elements. i64 and ui64 tensors are
stored and computed as 64-bit integers (the Int64 capability), so their sums and products wrap
where numpy's do, not at 2^31.

Nothing here depends on the subgroup size: workgroups combine partial results through
workgroup memory and barriers, never subgroup operations. So a module runs on any subgroup
size a driver picks (IREE's Vulkan MobileNetV2 computed wrong numbers when it did not).

Binding model: see container.py (binding i = param i; push constant i = its element base; after
them, one push constant per scalar, the kernel's sizes known at run time).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
from retarget.errors import UnsupportedOpError
from retarget.ir.dtypes import DTYPES, DType
from retarget.kernel import ir as k
from retarget.kernel.approximations import (
    ATAN_P,
    COS_P,
    ERF_P,
    ERF_Q,
    EXP_P,
    EXPM1_NEAR,
    LOG1P_NEAR,
    LOG_P,
    PI_4_PARTS,
    SIN_P,
    TAN_3PI_8,
    TAN_PI_8,
    TANH_P,
    TRIG_EXACT_BELOW,
)
from retarget.kernel.index32 import as_i32, narrow_indices
from retarget.kernel.narrow import NARROW_TYPES
from retarget.kernel.portable import expand_fragments, vector_copy_elements

from . import spirv
from .spirv import GLSL, Module

F32 = DTYPES["f32"]
I32 = DTYPES["i32"]
I64 = DTYPES["i64"]
F64 = DTYPES["f64"]
UNROLL_LIMIT = 64  # `unroll` loops up to this many iterations are unrolled here; longer ones get the hint
# (storage bits, capability) of each buffer element type other than the 32-bit ones.
STORAGE_CAPABILITY = {
    "f16": (16, "StorageBuffer16BitAccess"), "bf16": (16, "StorageBuffer16BitAccess"),
    "i16": (16, "StorageBuffer16BitAccess"), "ui16": (16, "StorageBuffer16BitAccess"),
    "i8": (8, "StorageBuffer8BitAccess"), "ui8": (8, "StorageBuffer8BitAccess"), "i1": (8, "StorageBuffer8BitAccess"),
    "i64": (64, "Int64"), "ui64": (64, "Int64"), "f64": (64, "Float64"),
}
# Floats keep NaN, infinities and signed zeros as IEEE has them (f32, where the target's device says so): Vulkan
# otherwise lets a driver assume there are none, and NVIDIA's compiler does fold `x != x` (benchmarks/NOTES.md).
PRESERVE_NAN = "SignedZeroInfNanPreserve"
INDEX_LIMIT = 2**31
# The elementwise ops `expr_unary` and `expr_binary` compute, by compute kind (integers compute as i32,
# so unsigned ones as "int"; halves as f32); and the float math they compute in f64 (the rest of
# GLSL.std.450's is 32-bit only). `support_table` refuses the others, so --fallback takes them.
UNARY_BY_KIND = {"float": set(k.UNARY_OPS) - {"not"}, "int": {"neg", "abs", "not", "sign"},
                 "bool": {"abs", "not", "sign"}}
BINARY_BY_KIND = {"float": set(k.BINARY_OPS) - {"and", "or", "xor", "shr"}, "int": set(k.BINARY_OPS) - {"atan2"},
                  "bool": {"and", "or", "xor", "max", "min", "add", "mul"}}
F64_MATH = ("neg", "abs", "sign", "floor", "ceil", "round", "sqrt", "reciprocal", "exp", "log",  # exp, log: ours
            "add", "sub", "mul", "div", "rem", "max", "min", "pow")
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # fdlibm's: n * LN2_HI is exact


@dataclass(frozen=True)
class SpirvKernel:
    name: str
    binary: bytes
    capabilities: tuple[str, ...]
    shared_bytes: int
    slots: tuple[int, ...]  # the binding of each param (see container.py)
    required_subgroup_size: int | None = None  # cooperative matrices need their subgroups whole
    extensions: tuple[str, ...] = ()  # the module's OpExtensions


def support_table(features):
    """What this code generator cannot compute for a target with SPIR-V capabilities `features`, as a
    SupportTable: the ops outside UNARY_BY_KIND / BINARY_BY_KIND / F64_MATH, f64 without Float64, i4,
    and buffers of the types whose storage capability (STORAGE_CAPABILITY) the target lacks."""
    from retarget.protocols import SupportTable

    ops = {}
    for kind in ("float", "int", "uint", "bool"):
        compute = "int" if kind == "uint" else kind
        for op in (*k.UNARY_OPS, *k.BINARY_OPS):
            allowed = UNARY_BY_KIND if op in k.UNARY_OPS else BINARY_BY_KIND
            if op not in allowed[compute]:
                ops[f"rt.{op}:{kind}"] = f"the SPIR-V code generator has no {op} of {kind} values"
    for op in (*k.UNARY_OPS, *k.BINARY_OPS):
        if op in UNARY_BY_KIND["float"] | BINARY_BY_KIND["float"] and op not in F64_MATH:
            ops[f"rt.{op}:f64"] = "GLSL.std.450 computes it in 32 bits only; cast the model to f32"
    dtypes = {} if "Float64" in features else {
        "f64": "needs the SPIR-V capability Float64, which the target does not have"}
    buffers = {name: f"needs the SPIR-V capability {cap}, which the target does not have"
               for name, (_, cap) in STORAGE_CAPABILITY.items() if cap not in features}
    if "ui8" in buffers:  # the narrow types are bytes by then (`retarget.kernel.narrow`)
        buffers.update({name: buffers["ui8"] for name in NARROW_TYPES})
    return SupportTable(ops, dtypes, buffers)


def compute_dtype(dt: DType) -> DType:
    """The type a value of `dt` is computed in: f32 for halves, i64 for the 64-bit integers (data: index
    arithmetic is i32 by then, `narrow_indices`), i32 for the other integer kinds."""
    if dt.name in ("f16", "bf16"):
        return F32
    if dt.kind in ("int", "uint"):
        return I64 if dt.bits == 64 else I32
    return dt


def binding_slots(kernel: k.Kernel, max_bindings: int) -> tuple[int, ...]:
    """Binding i for param i, or, past the device's storage buffers per stage, one binding per element type
    that all params of that type share (each still finds its tensor through its element base)."""
    if len(kernel.params) <= max_bindings:
        return tuple(range(len(kernel.params)))
    order = list(dict.fromkeys(p.dtype.name for p in kernel.params))
    if len(order) > max_bindings:
        raise UnsupportedOpError(f"vulkan-spirv: kernel {kernel.name} has buffers of {len(order)} element types; "
                                 f"the target binds at most {max_bindings} storage buffers per stage",
                                 hint="compile for a target with more (vulkan-spirv:host), or split the dispatch")
    return tuple(order.index(p.dtype.name) for p in kernel.params)


def generate(kernel: k.Kernel, features, max_bindings: int = 1 << 20) -> SpirvKernel:
    """`kernel` as a SPIR-V module; `features` are the SPIR-V capabilities the target allows. Fragment
    statements become KHR cooperative matrices where the target has them (SPIR-V 1.6, and the kernel then
    requires subgroups of the fragments' width), else the core's portable expansion."""
    native = k.has_fragments(kernel.body) and "CooperativeMatrixKHR" in features
    loaded = {s.buffer for s in k.walk_stmts(kernel.body) if isinstance(s, k.FragmentLoad)}
    if k.has_fragments(kernel.body) and not native:
        kernel = expand_fragments(kernel)
    slots = binding_slots(kernel, max_bindings)
    # index arithmetic becomes i32 (the driver refuses a binding of 2^31 elements or more at each call, so a kernel
    # whose sizes have no bound narrows too); what stays i64 is data, computed in 64 bits
    kernel = narrow_indices(kernel, assume_fits=True)
    gen = _Codegen(kernel, set(features), slots, (1, 6) if native else (1, 3), loaded)
    binary = gen.run()
    return SpirvKernel(kernel.name, binary, tuple(sorted(gen.m.capabilities)), gen.shared_bytes, slots,
                       gen.fragment_width, tuple(sorted(gen.m.extensions)))


class _Codegen:
    def __init__(self, kernel: k.Kernel, features: set[str], slots: tuple[int, ...], version=(1, 3),
                 fragment_arrays: set[str] = frozenset()):
        self.k, self.features, self.slots = kernel, features, slots
        self.m = m = Module(version)
        m.capability("Shader")
        self.glsl = m.op("import", "ExtInstImport", None, spirv.string_words("GLSL.std.450"))
        if version >= (1, 4) and k.has_fragments(kernel.body):  # cooperative matrices need the Vulkan memory model
            m.capability("VulkanMemoryModel")
            m.emit("memory_model", "MemoryModel", spirv.ADDRESSING_LOGICAL, spirv.MEMORY_MODEL_VULKAN)
        else:
            m.emit("memory_model", "MemoryModel", spirv.ADDRESSING_LOGICAL, spirv.MEMORY_MODEL_GLSL450)
        self.void = m.type("TypeVoid")
        self.t_bool = m.type_bool()
        self.t_i32 = m.type_int(32)
        self.t_u32 = m.type_int(32, signed=False)
        self.t_f32 = m.type_float(32)
        self.buffers: dict[str, tuple[DType, int, str]] = {}  # name -> (dtype, variable, storage class)
        self.param_index: dict[str, int] = {}
        self.variables: dict[tuple[str, int], int] = {}  # (name, type id) -> Function variable
        self.constants: dict[str, int] = {}  # unrolled loop variables -> their constant id
        self.builtins: dict[str, int] = {}  # workgroup and thread variables -> their i32 value
        self.bases: dict[str, int] = {}  # param -> its element base (push constant), as an i32 value
        self.shared_bytes = 0
        self.interface: list[int] = []  # the entry point's: Input variables, and from SPIR-V 1.4 every global
        self.fragments: dict[str, tuple[k.Fragment, int, int]] = {}  # name -> (declaration, type, variable)
        self.fragment_width: int | None = None
        # f16 arrays that hold f16 rather than their compute type: with native fragments, the workgroup arrays (a
        # cooperative matrix loads its own type); where the target has Float16, the workgroup arrays that fragments
        # load (expanded or not: the schedule sized them so), and the private arrays that only move elements (the
        # staging registers: copies need no conversion).
        self.half_arrays: set[str] = set()
        self.native_fragments = version >= (1, 4) and k.has_fragments(kernel.body)
        self.fragment_arrays = fragment_arrays if "Float16" in features else set()
        self.half_copies = k.copy_arrays(kernel) if "Float16" in features else set()
        self.wide_arrays = self._wide_arrays(kernel)
        self.wide_views: dict[int, int] = {}  # binding slot -> its variable seen as 16-byte words
        self.t_words = None  # uvec4, declared on first use

    VECTOR_BYTES = 16  # a VectorCopy of this many bytes moves one uvec4

    def _wide_arrays(self, kernel: k.Kernel) -> dict[str, int]:
        """Local arrays kept as 16-byte words (uvec4), name -> elements per word: those that `VectorCopy`s of 16
        bytes move and that nothing reads or writes element by element (cooperative matrices load and store
        them as words, their rows a whole number of words apart)."""
        locals_ = {s.name: s for s in k.walk_stmts(kernel.body) if isinstance(s, k.Local)}
        lanes: dict[str, int] = {}
        for s in k.walk_stmts(kernel.body):
            if isinstance(s, k.VectorCopy):
                for name in (s.dst, s.src):
                    if name in locals_ and locals_[name].dtype.itemsize * s.lanes == self.VECTOR_BYTES:
                        lanes[name] = s.lanes
        scalar = {s.buffer for s in k.walk_stmts(kernel.body) if isinstance(s, k.Store)}
        scalar |= {e.buffer for e in k.walk_exprs(kernel.body) if isinstance(e, k.Load)}
        for s in k.walk_stmts(kernel.body):
            if isinstance(s, k.VectorCopy):
                scalar |= {name for name in (s.dst, s.src) if lanes.get(name, s.lanes) != s.lanes}
            elif isinstance(s, (k.FragmentLoad, k.FragmentStore)) and s.buffer in lanes:
                if not self.native_fragments or s.stride % lanes[s.buffer]:
                    scalar.add(s.buffer)
        wide = {name: n for name, n in lanes.items() if name not in scalar
                and isinstance(locals_[name].size, int) and locals_[name].size % n == 0}
        # A copy moves one word only where both sides are words (`word`); else it copies element by element, and
        # an array on either side must then hold elements too (which may unmake another copy's words).
        params = {p.name: p.dtype for p in kernel.params}
        copies = [s for s in k.walk_stmts(kernel.body) if isinstance(s, k.VectorCopy)]

        def words(name: str, n: int) -> bool:
            return wide.get(name) == n if name in locals_ else params[name].itemsize * n == self.VECTOR_BYTES

        unmade = True
        while unmade:
            unmade = [name for s in copies if not (words(s.dst, s.lanes) and words(s.src, s.lanes))
                      for name in (s.dst, s.src) if name in wide]
            for name in unmade:
                wide.pop(name, None)
        return wide

    def fail(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"vulkan-spirv: {what} (kernel {self.k.name})",
                                  hint="lower it differently, or use another target")

    def need(self, capability: str, why: str) -> None:
        if capability not in self.features:
            raise UnsupportedOpError(
                f"vulkan-spirv: kernel {self.k.name} needs the SPIR-V capability {capability} ({why}), which the "
                "target does not have", hint="compile for vulkan-spirv:host on a device that has it, or cast the "
                                              "model to f32/i32")
        self.m.capability(capability)

    # -- types ------------------------------------------------------------------------------------
    def type_of(self, dt: DType) -> int:
        """The SPIR-V type of a value computed in `compute_dtype(dt)`."""
        c = compute_dtype(dt)
        if c.kind == "bool":
            return self.t_bool
        if c.name == "f64":
            self.need("Float64", "an f64 value")
            return self.m.type_float(64)
        if c.kind == "float":
            return self.t_f32
        if c.bits == 64:
            self.need("Int64", "a 64-bit integer value")
            return self.m.type_int(64)
        return self.t_i32

    def unsigned_type(self, dt: DType) -> int:
        """The unsigned integer type of `dt`'s compute width (UDiv, UMod and ConvertFToU take it)."""
        return self.m.type_int(64, signed=False) if compute_dtype(dt).bits == 64 else self.t_u32

    def storage_type(self, dt: DType) -> int:
        """The SPIR-V type of one buffer element of `dt`."""
        if dt.name in ("f32",):
            return self.t_f32
        if dt.name in ("i32", "ui32"):
            return self.t_i32
        bits, capability = STORAGE_CAPABILITY.get(dt.name, (None, None))
        if bits is None:
            raise self.fail(f"buffers of {dt} are not supported")
        self.need(capability, f"a {dt} buffer")
        if dt.name == "f16":
            return self.m.type_float(16)
        if dt.name == "f64":
            return self.m.type_float(64)
        return self.m.type_int(bits)

    def const(self, value, dt: DType) -> int:
        c = compute_dtype(dt)
        if c.kind == "bool":
            return self.m.constant(self.t_bool, bool(value), 1, "bool")
        if c.kind == "float":
            v = float(np.array(value, dtype=dt.np_dtype)) if dt.name in ("f16", "bf16") else float(value)
            return self.m.constant(self.type_of(dt), v, c.bits, "float")
        v = int(value)
        if c.bits == 64:
            return self.m.constant(self.type_of(dt), v, 64, "int")
        if dt.kind == "uint" and dt.bits == 32:
            v &= 0xFFFFFFFF
        return self.m.constant(self.t_i32, v, 32, "int")

    def i32(self, value: int) -> int:
        return self.m.constant(self.t_i32, value, 32, "int")

    def u32(self, value: int) -> int:
        return self.m.constant(self.t_u32, value, 32, "int")

    def f32(self, value: float) -> int:
        return self.m.constant(self.t_f32, value, 32, "float")

    # -- instructions in the function body --------------------------------------------------------
    def op(self, opcode: str, result_type: int, *operands) -> int:
        return self.m.op("function", opcode, result_type, *operands)

    def ext(self, name: str, result_type: int, *operands) -> int:
        return self.op("ExtInst", result_type, self.glsl, GLSL[name], *operands)

    def emit(self, opcode: str, *operands) -> None:
        self.m.emit("function", opcode, *operands)

    def label(self, lid: int) -> None:
        self.emit("Label", lid)

    def select(self, cond: int, a: int, b: int, type_id: int) -> int:
        if cond in self.m.constant_values:
            return a if self.m.constant_values[cond] else b
        return self.op("Select", type_id, cond, a, b)

    # -- the module -------------------------------------------------------------------------------
    def run(self) -> bytes:
        m, kn = self.m, self.k
        if len(kn.workgroup_vars) > 3 or len(kn.thread_vars) > 3:
            raise self.fail("more than three grid axes")
        for p in kn.params:
            if isinstance(p.size, int) and p.size >= INDEX_LIMIT:
                raise self.fail(f"buffer %{p.name} has {p.size} elements; indices are 32-bit, so at most 2^31 - 1")
        self.declare_params()
        fn_type = m.type("TypeFunction", self.void)
        main = m.id()
        m.emit("function_head", "Function", self.void, main, 0, fn_type)
        m.emit("function_head", "Label", m.id())
        self.load_builtins()
        self.stmts(kn.body)
        self.emit("Return")
        self.emit("FunctionEnd")
        m.emit("entry_point", "EntryPoint", spirv.EXECUTION_MODEL_GLCOMPUTE, main, spirv.string_words(kn.name),
               *self.interface)
        m.emit("execution_mode", "ExecutionMode", main, spirv.EXECUTION_MODE_LOCAL_SIZE, *kn.workgroup_size)
        if PRESERVE_NAN in self.features:  # else a driver may assume no NaN or infinity and fold the tests for them
            m.capability(PRESERVE_NAN)
            m.emit("execution_mode", "ExecutionMode", main, spirv.EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE, 32)
        m.name(main, kn.name)
        return m.assemble()

    def binding_variable(self, slot: int, element: int, stride: int, name: str) -> int:
        """A variable for binding `slot` (descriptor set 0): a runtime array of `element`s `stride` bytes apart,
        NonWritable when every param sharing the slot is read-only."""
        m = self.m
        array = m.type("TypeRuntimeArray", element, unique=False)
        m.decorate(array, "ArrayStride", stride)
        block = m.type("TypeStruct", array, unique=False)
        m.decorate(block, "Block")
        m.member_decorate(block, 0, "Offset", 0)
        var = m.op("global", "Variable", m.pointer("StorageBuffer", block), spirv.STORAGE["StorageBuffer"])
        self.global_variable(var)
        m.decorate(var, "DescriptorSet", 0)
        m.decorate(var, "Binding", slot)
        if all(q.access == "read" for q, s in zip(self.k.params, self.slots) if s == slot):
            m.decorate(var, "NonWritable")
        m.name(var, name)
        return var

    def declare_params(self) -> None:
        m = self.m
        variables: dict[int, int] = {}
        for i, (p, slot) in enumerate(zip(self.k.params, self.slots)):
            if slot not in variables:
                sharing = sum(s == slot for s in self.slots)
                variables[slot] = self.binding_variable(
                    slot, self.storage_type(p.dtype), p.dtype.itemsize if p.dtype.name != "i1" else 1,
                    p.name if sharing == 1 else f"rt_mem_{p.dtype.name}")
            self.buffers[p.name] = (p.dtype, variables[slot], "StorageBuffer")
            self.param_index[p.name] = i
        words = len(self.k.params) + len(self.k.scalars)
        if not words:
            return
        block = m.type("TypeStruct", *[self.t_i32] * words, unique=False)
        m.decorate(block, "Block")
        for i in range(words):
            m.member_decorate(block, i, "Offset", 4 * i)
        pointer = m.pointer("PushConstant", block)
        self.push_constants = m.op("global", "Variable", pointer, spirv.STORAGE["PushConstant"])
        self.global_variable(self.push_constants)
        m.name(self.push_constants, "rt_bases")

    def load_builtins(self) -> None:
        m, kn = self.m, self.k
        uvec3 = m.type("TypeVector", self.t_u32, 3)
        for builtin, names in (("WorkgroupId", kn.workgroup_vars), ("LocalInvocationId", kn.thread_vars)):
            if not names:
                continue
            var = m.op("global", "Variable", m.pointer("Input", uvec3), spirv.STORAGE["Input"])
            m.decorate(var, "BuiltIn", spirv.BUILTIN[builtin])
            self.interface.append(var)
            vector = self.op("Load", uvec3, var)
            for axis, name in enumerate(names):
                component = self.op("CompositeExtract", self.t_u32, vector, axis)
                self.builtins[name] = self.op("Bitcast", self.t_i32, component)
        ptr = m.pointer("PushConstant", self.t_i32)
        for name, i in self.param_index.items():
            member = self.op("AccessChain", ptr, self.push_constants, self.i32(i))
            self.bases[name] = self.op("Load", self.t_i32, member)
        for j, symbol in enumerate(kn.scalars):  # sizes known at run time, after the bases
            member = self.op("AccessChain", ptr, self.push_constants, self.i32(len(kn.params) + j))
            self.builtins[k.symbol_var(symbol).name] = self.op("Load", self.t_i32, member)

    def global_variable(self, var: int) -> None:
        if self.m.version >= (1, 4):
            self.interface.append(var)

    def variable(self, name: str, type_id: int) -> int:
        key = (name, type_id)
        if key not in self.variables:
            var = self.m.op("function_vars", "Variable", self.m.pointer("Function", type_id), spirv.STORAGE["Function"])
            self.m.name(var, name)
            self.variables[key] = var
        return self.variables[key]

    # -- statements -------------------------------------------------------------------------------
    def stmts(self, body: list) -> None:
        for s in body:
            method = getattr(self, "stmt_" + type(s).__name__.lower(), None)
            if method is None:
                raise self.fail(f"statement {type(s).__name__} is not supported")
            method(s)

    def stmt_assign(self, s: k.Assign) -> None:
        value = self.expr(s.value)
        self.emit("Store", self.variable(s.var, self.type_of(s.value.dtype)), value)

    def stmt_store(self, s: k.Store) -> None:
        dt, _, _ = self.buffer(s.buffer)
        v = s.value
        if isinstance(v, k.Load) and v.dtype == dt and self.holds_halves(s.buffer) and self.holds_halves(v.buffer):
            half = self.m.type_float(16)
            self.emit("Store", self.element(s.buffer, s.index), self.op("Load", half, self.element(v.buffer, v.index)))
            return
        value = self.convert(self.expr(s.value), s.value.dtype, dt)
        self.emit("Store", self.element(s.buffer, s.index), self.to_storage(value, dt, s.buffer))

    def stmt_local(self, s: k.Local) -> None:
        m = self.m
        if s.name in self.wide_arrays:  # moved and loaded only as 16-byte words
            array = m.type("TypeArray", self.words(), self.i32(s.size // self.wide_arrays[s.name]))
            if s.shared:
                var = m.op("global", "Variable", m.pointer("Workgroup", array), spirv.STORAGE["Workgroup"])
                self.global_variable(var)
                self.shared_bytes += s.size * s.dtype.itemsize
            else:
                var = self.variable(s.name, array)
            self.buffers[s.name] = (s.dtype, var, "Workgroup" if s.shared else "Function")
            m.name(var, s.name)
            return
        half = s.dtype.name == "f16" and (s.shared and (self.native_fragments or s.name in self.fragment_arrays)
                                          or not s.shared and s.name in self.half_copies)
        if half:
            self.need("Float16", "f16 arrays for matrix fragments")
            self.half_arrays.add(s.name)
        element = m.type_float(16) if half else self.type_of(s.dtype)
        array = m.type("TypeArray", element, self.i32(s.size))
        if s.shared:
            var = m.op("global", "Variable", m.pointer("Workgroup", array), spirv.STORAGE["Workgroup"])
            self.global_variable(var)
            self.shared_bytes += s.size * (2 if half else max(4, compute_dtype(s.dtype).itemsize))
            self.buffers[s.name] = (s.dtype, var, "Workgroup")
        else:
            var = self.variable(s.name, array)
            self.buffers[s.name] = (s.dtype, var, "Function")
        m.name(var, s.name)

    def stmt_barrier(self, s: k.Barrier) -> None:
        scope = self.u32(spirv.SCOPE_WORKGROUP)
        self.emit("ControlBarrier", scope, scope, self.u32(spirv.SEMANTICS_ACQUIRE_RELEASE_WORKGROUP))

    def stmt_if(self, s: k.If) -> None:
        cond = self.expr(s.cond)
        if cond in self.m.constant_values:  # decided while unrolling
            if self.m.constant_values[cond]:
                self.stmts(s.body)
            return
        then, merge = self.m.id(), self.m.id()
        self.emit("SelectionMerge", merge, 0)
        self.emit("BranchConditional", cond, then, merge)
        self.label(then)
        self.stmts(s.body)
        self.emit("Branch", merge)
        self.label(merge)

    def stmt_loop(self, s: k.Loop) -> None:
        if s.kind not in ("serial", "unroll", "vector"):
            raise self.fail(f"loops of kind '{s.kind}' are not supported; bind threads with Kernel.thread_vars")
        if isinstance(s.extent, int) and s.extent <= 0:
            return
        if s.kind == "unroll" and isinstance(s.extent, int) and s.extent <= UNROLL_LIMIT:
            outer = self.constants.get(s.var)
            for i in range(s.start, s.start + s.extent):
                self.constants[s.var] = self.i32(i)
                self.stmts(s.body)
            if outer is None:
                del self.constants[s.var]
            else:
                self.constants[s.var] = outer
            return
        m = self.m
        var = self.variable(s.var, self.t_i32)
        self.emit("Store", var, self.i32(s.start))
        header, body, cont, merge = m.id(), m.id(), m.id(), m.id()
        self.emit("Branch", header)
        self.label(header)
        i = self.op("Load", self.t_i32, var)
        end = self.i32(s.start + s.extent) if isinstance(s.extent, int) else self.expr(as_i32(s.extent + s.start))
        more = self.op("SLessThan", self.t_bool, i, end)
        self.emit("LoopMerge", merge, cont, spirv.LOOP_CONTROL["unroll" if s.kind == "unroll" else "none"])
        self.emit("BranchConditional", more, body, merge)
        self.label(body)
        shadowed = self.constants.pop(s.var, None)
        self.stmts(s.body)
        if shadowed is not None:
            self.constants[s.var] = shadowed
        self.emit("Branch", cont)
        self.label(cont)
        i = self.op("Load", self.t_i32, var)
        self.emit("Store", var, self.op("IAdd", self.t_i32, i, self.i32(1)))
        self.emit("Branch", header)
        self.label(merge)

    # -- fragments: KHR cooperative matrices ------------------------------------------------------
    def fragment_type(self, f: k.Fragment) -> int:
        element = f.element
        if element.name == "f16":
            self.need("Float16", "f16 cooperative matrices")
            component = self.m.type_float(16)
        elif element.name == "f32":
            component = self.t_f32
        else:
            raise self.fail(f"cooperative matrices of {element} are not supported")
        self.need("CooperativeMatrixKHR", "matrix fragments")
        return self.m.type("TypeCooperativeMatrixKHR", component, self.u32(spirv.SCOPE_SUBGROUP), self.u32(f.rows),
                           self.u32(f.cols), self.u32(spirv.COOPERATIVE_MATRIX_USE[f.role]))

    def fragment(self, name: str) -> tuple[k.Fragment, int, int]:
        if name not in self.fragments:
            raise self.fail(f"fragment %{name} is used before it is declared")
        return self.fragments[name]

    def stmt_fragment(self, s: k.Fragment) -> None:
        if self.fragment_width not in (None, s.width):
            raise self.fail("fragments of different subgroup widths in one kernel")
        self.fragment_width = s.width
        type_id = self.fragment_type(s)
        var = self.variable(s.name, type_id)
        self.fragments[s.name] = (s, type_id, var)
        if s.fill is not None:
            fill = (self.m.constant(self.m.type_float(16), s.fill, 16, "float") if s.element.name == "f16"
                    else self.const(s.fill, s.element))
            self.emit("Store", var, self.op("CompositeConstruct", type_id, fill))

    def fragment_pointer(self, buffer: str, index: k.Expr, stride: int) -> tuple[int, int]:
        """(pointer, stride) for a cooperative matrix load or store: in 16-byte words for an array kept as them."""
        lanes = self.wide_arrays.get(buffer)
        if lanes:
            return self.word(buffer, index, lanes), stride // lanes
        return self.element(buffer, index), stride

    def stmt_fragmentload(self, s: k.FragmentLoad) -> None:
        _, type_id, var = self.fragment(s.name)
        pointer, stride = self.fragment_pointer(s.buffer, s.index, s.stride)
        value = self.op("CooperativeMatrixLoadKHR", type_id, pointer, self.u32(spirv.ROW_MAJOR), self.u32(stride))
        self.emit("Store", var, value)

    def stmt_fragmentmma(self, s: k.FragmentMma) -> None:
        a, b, c = (self.fragment(name) for name in (s.a, s.b, s.c))
        _, d_type, d_var = self.fragment(s.d)
        loaded = [self.op("Load", type_id, var) for _, type_id, var in (a, b, c)]
        self.emit("Store", d_var, self.op("CooperativeMatrixMulAddKHR", d_type, *loaded))

    def stmt_fragmentstore(self, s: k.FragmentStore) -> None:
        _, type_id, var = self.fragment(s.name)
        pointer, stride = self.fragment_pointer(s.buffer, s.index, s.stride)
        self.emit("CooperativeMatrixStoreKHR", pointer, self.op("Load", type_id, var), self.u32(spirv.ROW_MAJOR),
                  self.u32(stride))

    # -- memory -----------------------------------------------------------------------------------
    def buffer(self, name: str) -> tuple[DType, int, str]:
        if name not in self.buffers:
            raise self.fail(f"buffer %{name} is not a parameter or a local array")
        return self.buffers[name]

    def holds_halves(self, name: str) -> bool:
        """Whether buffer or array `name` holds f16 elements as such (an f16 buffer, or a half array)."""
        dt, _, storage = self.buffer(name)
        return dt.name == "f16" and (storage == "StorageBuffer" or name in self.half_arrays)

    def words(self) -> int:
        if self.t_words is None:
            self.t_words = self.m.type("TypeVector", self.t_u32, 4)
        return self.t_words

    def word_view(self, name: str) -> int:
        """Parameter `name`'s binding seen as an array of 16-byte words (a second variable of the same binding)."""
        slot = self.slots[self.param_index[name]]
        if slot not in self.wide_views:
            self.wide_views[slot] = self.binding_variable(slot, self.words(), self.VECTOR_BYTES, f"rt_words_{slot}")
        return self.wide_views[slot]

    def word(self, name: str, index: k.Expr, lanes: int) -> int | None:
        """A pointer to the 16-byte word of buffer or array `name` that starts at element `index` (a multiple of
        `lanes`, which fill the word), or None where `name` is not kept or seen as words."""
        dt, var, storage = self.buffer(name)
        shift = int(math.log2(lanes))
        if storage == "StorageBuffer":
            if dt.itemsize * lanes != self.VECTOR_BYTES or 1 << shift != lanes:
                return None
            at = self.int_op("IAdd", self.bases[name], self.index_value(index))  # bases are 256-byte aligned
            word = self.op("ShiftRightArithmetic", self.t_i32, at, self.i32(shift))
            return self.op("AccessChain", self.m.pointer(storage, self.words()), self.word_view(name), self.i32(0),
                           word)
        if self.wide_arrays.get(name) != lanes or 1 << shift != lanes:
            return None
        word = self.op("ShiftRightArithmetic", self.t_i32, self.index_value(index), self.i32(shift))
        return self.op("AccessChain", self.m.pointer(storage, self.words()), var, word)

    def stmt_vectorcopy(self, s: k.VectorCopy) -> None:
        src, dst = self.word(s.src, s.src_index, s.lanes), self.word(s.dst, s.dst_index, s.lanes)
        if src is not None and dst is not None:
            self.emit("Store", dst, self.op("Load", self.words(), src))
            return
        self.stmts([vector_copy_elements(s, self.buffer(s.src)[0])])  # element by element

    def index_value(self, index: k.Expr) -> int:
        """An element index as an i32: index arithmetic is i32 already; an index read from i64 data (a gather's,
        clamped by the lowering to the buffer) is 64-bit here and truncated, which keeps it."""
        i = self.expr(index)
        return self.op("SConvert", self.t_i32, i) if compute_dtype(index.dtype).bits == 64 else i

    def element(self, name: str, index: k.Expr) -> int:
        """A pointer to element `index` of buffer or local array `name`."""
        dt, var, storage = self.buffer(name)
        i = self.index_value(index)
        if storage == "StorageBuffer":
            i = self.int_op("IAdd", self.bases[name], i)
            return self.op("AccessChain", self.m.pointer(storage, self.storage_type(dt)), var, self.i32(0), i)
        element = self.m.type_float(16) if name in self.half_arrays else self.type_of(dt)
        return self.op("AccessChain", self.m.pointer(storage, element), var, i)

    def from_storage(self, raw: int, dt: DType) -> int:
        """A loaded buffer element of `dt` as a value of its compute type."""
        name = dt.name
        if name in ("f32", "i32", "ui32", "f64", "i64", "ui64"):
            return raw
        if name == "f16":
            return self.op("FConvert", self.t_f32, raw)
        wide = self.op("SConvert", self.t_i32, raw)
        if name == "bf16":
            bits = self.op("ShiftLeftLogical", self.t_i32, wide, self.i32(16))
            return self.op("Bitcast", self.t_f32, bits)
        if name == "i1":
            return self.op("INotEqual", self.t_bool, wide, self.i32(0))
        if dt.kind == "uint" and dt.bits < 32:
            return self.op("BitwiseAnd", self.t_i32, wide, self.i32((1 << dt.bits) - 1))
        return wide  # i8, i16 sign-extend

    def to_storage(self, value: int, dt: DType, buffer: str) -> int:
        """A compute value of `dt` as one element of a buffer (or local array) of `dt`."""
        if buffer in self.half_arrays:
            return self.op("FConvert", self.m.type_float(16), value)
        if self.buffers[buffer][2] != "StorageBuffer":
            return value
        name = dt.name
        if name in ("f32", "i32", "ui32", "f64", "i64", "ui64"):
            return value
        target = self.storage_type(dt)
        if name == "f16":
            return self.op("FConvert", target, value)
        if name == "bf16":
            value = self.bf16_bits(value)
        elif name == "i1":
            value = self.select(value, self.i32(1), self.i32(0), self.t_i32)
        return self.op("SConvert", target, value)

    def bf16_bits(self, value: int) -> int:
        """f32 -> its bf16 bits (in an i32), rounded to nearest even; NaN stays a quiet NaN."""
        bits = self.op("Bitcast", self.t_i32, value)
        high = self.op("ShiftRightLogical", self.t_i32, bits, self.i32(16))
        odd = self.op("BitwiseAnd", self.t_i32, high, self.i32(1))
        rounded = self.op("IAdd", self.t_i32, self.op("IAdd", self.t_i32, bits, self.i32(0x7FFF)), odd)
        rounded = self.op("ShiftRightLogical", self.t_i32, rounded, self.i32(16))
        quiet = self.op("BitwiseOr", self.t_i32, high, self.i32(0x40))
        return self.select(self.op("IsNan", self.t_bool, value), quiet, rounded, self.t_i32)

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, e: k.Expr) -> int:
        method = getattr(self, "expr_" + type(e).__name__.lower(), None)
        if method is None:
            raise self.fail(f"expression {type(e).__name__} is not supported")
        return method(e)

    def expr_const(self, e: k.Const) -> int:
        return self.const(e.value, e.dtype)

    def expr_var(self, e: k.Var) -> int:
        if e.name in self.constants:
            return self.constants[e.name]
        if e.name in self.builtins:
            return self.builtins[e.name]
        type_id = self.type_of(e.dtype)
        if (e.name, type_id) not in self.variables:
            raise self.fail(f"variable %{e.name} is read before it is assigned")
        return self.op("Load", type_id, self.variables[(e.name, type_id)])

    def expr_load(self, e: k.Load) -> int:
        dt, _, storage = self.buffer(e.buffer)
        pointer = self.element(e.buffer, e.index)
        if storage == "StorageBuffer":
            value = self.from_storage(self.op("Load", self.storage_type(dt), pointer), dt)
        elif e.buffer in self.half_arrays:
            value = self.op("FConvert", self.t_f32, self.op("Load", self.m.type_float(16), pointer))
        else:
            value = self.op("Load", self.type_of(dt), pointer)
        return self.convert(value, dt, e.dtype)

    def expr_select(self, e: k.Select) -> int:
        # Both sides are computed: the lowering clamps every index, so no load of either side is out of bounds.
        return self.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b), self.type_of(e.dtype))

    def expr_cast(self, e: k.Cast) -> int:
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def expr_compare(self, e: k.Compare) -> int:
        dt = compute_dtype(e.a.dtype)
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.kind == "bool":
            if e.op in ("eq", "ne"):
                return self.op("LogicalEqual" if e.op == "eq" else "LogicalNotEqual", self.t_bool, a, b)
            a, b = (self.select(x, self.i32(1), self.i32(0), self.t_i32) for x in (a, b))
            dt = DTYPES["ui32"]
        if dt.kind == "float":
            opcode = {"eq": "FOrdEqual", "ne": "FUnordNotEqual", "lt": "FOrdLessThan", "le": "FOrdLessThanEqual",
                      "gt": "FOrdGreaterThan", "ge": "FOrdGreaterThanEqual"}[e.op]
            return self.op(opcode, self.t_bool, a, b)
        known = self.m.constant_values
        if a in known and b in known and e.a.dtype.kind == "int" and dt.bits == 32:
            x, y = known[a], known[b]
            x, y = (v - (1 << 32) if v >= 1 << 31 else v for v in (x, y))
            result = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[e.op]
            return self.m.constant(self.t_bool, result, 1, "bool")
        sign = "U" if e.a.dtype.kind in ("uint", "bool") else "S"
        opcode = {"eq": "IEqual", "ne": "INotEqual", "lt": f"{sign}LessThan", "le": f"{sign}LessThanEqual",
                  "gt": f"{sign}GreaterThan", "ge": f"{sign}GreaterThanEqual"}[e.op]
        return self.op(opcode, self.t_bool, a, b)

    # -- integer helpers --------------------------------------------------------------------------
    def int_op(self, opcode: str, a: int, b: int) -> int:
        """An i32 op, folded when both sides are constants (unrolled loops make many)."""
        known = self.m.constant_values
        if a in known and b in known:
            x, y = (v - (1 << 32) if v >= 1 << 31 else v for v in (known[a], known[b]))
            folded = {"IAdd": lambda: x + y, "ISub": lambda: x - y, "IMul": lambda: x * y}.get(opcode)
            if folded is not None:
                return self.i32(folded())
        if opcode == "IAdd" and known.get(b) == 0:
            return a
        if opcode == "IAdd" and known.get(a) == 0:
            return b
        return self.op(opcode, self.t_i32, a, b)

    def wrap(self, value: int, dt: DType) -> int:
        """An i32 holding a result of the narrower integer type `dt`, wrapped as numpy does."""
        if dt.kind not in ("int", "uint") or dt.bits >= 32:
            return value
        if dt.kind == "uint":
            return self.op("BitwiseAnd", self.t_i32, value, self.i32((1 << dt.bits) - 1))
        shift = self.i32(32 - dt.bits)
        return self.op("ShiftRightArithmetic", self.t_i32, self.op("ShiftLeftLogical", self.t_i32, value, shift), shift)

    # -- unary ops --------------------------------------------------------------------------------
    def expr_unary(self, e: k.Unary) -> int:
        dt = e.dtype
        c = compute_dtype(dt)
        x = self.expr(e.a)
        t = self.type_of(dt)
        kind = c.kind
        if e.op == "neg":
            if kind == "float":
                return self.op("FNegate", t, x)
            if kind == "int":
                return self.wrap(self.op("SNegate", t, x), dt)
        elif e.op == "abs":
            if kind == "float":
                return self.ext("FAbs", t, x)
            if kind == "int":
                return x if dt.kind == "uint" else self.wrap(self.ext("SAbs", t, x), dt)
            return x
        elif e.op == "not":
            if kind == "bool":
                return self.op("LogicalNot", t, x)
            if kind == "int":
                return self.wrap(self.op("Not", t, x), dt)
        elif e.op == "sign":
            if kind == "bool":
                return x
            if kind == "int" and dt.kind == "uint":
                zero = self.const(0, c)
                return self.select(self.op("INotEqual", self.t_bool, x, zero), self.const(1, c), zero, t)
            zero, one = self.const(0, c), self.const(1, c)
            lt, gt = ("FOrdLessThan", "FOrdGreaterThan") if kind == "float" else ("SLessThan", "SGreaterThan")
            minus = self.const(-1, c)
            below = self.select(self.op(lt, self.t_bool, x, zero), minus, x, t)  # NaN and zeros stay
            return self.select(self.op(gt, self.t_bool, x, zero), one, below, t)
        elif kind == "float":
            return self.float_unary(e.op, x, t, c)
        raise self.fail(f"unary op '{e.op}' on {dt} is not supported")

    def float_unary(self, op: str, x: int, t: int, c: DType) -> int:
        if c.bits == 64 and op not in F64_MATH:
            raise self.fail(f"{op} on f64: GLSL.std.450 computes it in 32 bits only; cast the model to f32")
        # Vulkan lets Sin, Cos, Tan be off by 2^-11 and Atan by 4096 ulp, and Tanh inherits exp's overflow and
        # cancellation: those are computed here (Cephes' single-precision algorithms), the same on every driver.
        if c.bits == 64 and op in ("exp", "log"):
            return self.exp_f64(x) if op == "exp" else self.log_f64(x)
        direct = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "rsqrt": "InverseSqrt", "floor": "Floor",
                  "ceil": "Ceil", "round": "RoundEven"}
        one = self.const(1, c)
        if op in direct:
            return self.ext(direct[op], t, x)
        if op in ("sin", "cos"):
            return self.sin_cos(x, op)
        if op == "tan":
            return self.op("FDiv", t, self.sin_cos(x, "sin"), self.sin_cos(x, "cos"))
        if op == "atan":
            return self.atan(x)
        if op == "reciprocal":
            return self.op("FDiv", t, one, x)
        if op == "sigmoid":  # exp(-x) overflows to inf for x < -88: 1 / inf is the right 0
            return self.op("FDiv", t, one, self.op("FAdd", t, one, self.ext("Exp", t, self.op("FNegate", t, x))))
        if op == "tanh":
            return self.tanh(x)
        if op == "erf":
            return self.erf(x, t, c)
        if op == "log1p":  # a polynomial near 0 (`approximations`), Goldberg's trick away from it
            u = self.op("FAdd", t, one, x)
            ratio = self.op("FDiv", t, x, self.op("FSub", t, u, one))
            general = self.select(self.special(u), self.ext("Log", t, u),
                                  self.op("FMul", t, self.ext("Log", t, u), ratio), t)
            z = self.fmul(x, x)
            near = self.fadd(x, self.op("FSub", t, self.fmul(self.fmul(x, z), self.fpoly(x, LOG_P)),
                                        self.fmul(self.f32(0.5), z)))
            inside = self.op("LogicalAnd", self.t_bool, self.fless(self.f32(LOG1P_NEAR[0]), x),
                             self.fless(x, self.f32(LOG1P_NEAR[1])))
            return self.select(inside, near, general, t)
        if op == "expm1":  # a polynomial near 0, Kahan's trick away from it
            u = self.ext("Exp", t, x)
            um1 = self.op("FSub", t, u, one)
            general = self.op("FMul", t, um1, self.op("FDiv", t, x, self.ext("Log", t, u)))  # (u - 1) x overflows
            general = self.select(self.op("FOrdEqual", self.t_bool, um1, self.const(-1, c)), self.const(-1, c),
                                  general, t)
            general = self.select(self.special(u), u, general, t)
            near = self.fadd(x, self.fmul(self.fmul(x, x), self.fpoly(x, EXP_P)))
            inside = self.fless(self.ext("FAbs", t, x), self.f32(EXPM1_NEAR))
            return self.select(inside, near, general, t)
        raise self.fail(f"unary op '{op}' on {c} is not supported")

    def exp_f64(self, x: int) -> int:
        """e^x in f64 (GLSL.std.450's Exp is 32-bit only): x = n ln2 + r, |r| <= ln2 / 2, with ln2 in two parts;
        e^r by Taylor's series to r^13 (its remainder below 1e-17); 2^n by Ldexp, kept within its defined range.
        Within 1 ulp.
        inf past 709.78, 0 below -745.13 (results below 2^-1022 may be flushed to 0, as Ldexp allows)."""
        t, tb, c = self.m.type_float(64), self.t_bool, F64
        clamped = self.ext("FClamp", t, x, self.const(-746, c), self.const(710, c))
        n = self.ext("RoundEven", t, self.op("FMul", t, clamped, self.const(1 / math.log(2), c)))
        r = self.op("FSub", t, clamped, self.op("FMul", t, n, self.const(LN2_HI, c)))
        r = self.op("FSub", t, r, self.op("FMul", t, n, self.const(LN2_LO, c)))
        p = self.const(1 / math.factorial(13), c)
        for power in range(12, -1, -1):
            p = self.op("FAdd", t, self.op("FMul", t, p, r), self.const(1 / math.factorial(power), c))
        whole = self.op("ConvertFToS", self.t_i32, n)
        y = self.ext("Ldexp", t, p, self.op("ISub", self.t_i32, whole, self.i32(1)))  # 2^(n - 1) stays defined at
        y = self.op("FMul", t, y, self.const(2, c))  # n = 1024 (e^709.7 = 0.9 * 2^1024 is finite)
        y = self.select(self.op("FOrdGreaterThan", tb, x, self.const(709.782712893384, c)), self.const(math.inf, c),
                        y, t)
        y = self.select(self.op("FOrdLessThan", tb, x, self.const(-745.1332191019412, c)), self.const(0, c), y, t)
        return self.select(self.op("IsNan", tb, x), x, y, t)

    def log_f64(self, x: int) -> int:
        """log(x) in f64: x = m 2^e (FrexpStruct), m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m - 1) /
        (m + 1), |s| < 0.172, by its odd series to s^23 in fdlibm's arrangement; e ln2 in two parts. Within 1 ulp,
        subnormal x too; log(0) = -inf, log(inf) = inf, NaN below 0."""
        t, tb, c = self.m.type_float(64), self.t_bool, F64
        subnormal = self.op("FOrdLessThan", tb, x, self.const(2.0 ** -1022, c))  # scaled up first: drivers' Frexp
        scaled = self.select(subnormal, self.op("FMul", t, x, self.const(2.0 ** 54, c)), x, t)  # may flush them
        parts = self.ext("FrexpStruct", self.m.type("TypeStruct", t, self.t_i32), scaled)
        m = self.op("CompositeExtract", t, parts, 0)
        e = self.op("CompositeExtract", self.t_i32, parts, 1)
        e = self.select(subnormal, self.op("ISub", self.t_i32, e, self.i32(54)), e, self.t_i32)
        low = self.op("FOrdLessThan", tb, m, self.const(math.sqrt(0.5), c))
        m = self.select(low, self.op("FMul", t, m, self.const(2, c)), m, t)
        e = self.select(low, self.op("ISub", self.t_i32, e, self.i32(1)), e, self.t_i32)
        f = self.op("FSub", t, m, self.const(1, c))
        s = self.op("FDiv", t, f, self.op("FAdd", t, m, self.const(1, c)))
        z = self.op("FMul", t, s, s)
        series = self.const(2 / 23, c)  # R = 2 (z/3 + z^2/5 + ...)
        for odd in range(21, 1, -2):
            series = self.op("FAdd", t, self.op("FMul", t, series, z), self.const(2 / odd, c))
        r = self.op("FMul", t, z, series)
        half_square = self.op("FMul", t, self.const(0.5, c), self.op("FMul", t, f, f))  # fdlibm's arrangement:
        correction = self.op("FMul", t, s, self.op("FAdd", t, half_square, r))  # f - (f^2/2 - s (f^2/2 + R))
        log_m = self.op("FSub", t, f, self.op("FSub", t, half_square, correction))
        ef = self.op("ConvertSToF", t, e)
        y = self.op("FAdd", t, self.op("FMul", t, ef, self.const(LN2_HI, c)),
                    self.op("FAdd", t, log_m, self.op("FMul", t, ef, self.const(LN2_LO, c))))
        y = self.select(self.op("FOrdEqual", tb, x, self.const(math.inf, c)), x, y, t)
        y = self.select(self.op("FOrdEqual", tb, x, self.const(0, c)), self.const(-math.inf, c), y, t)
        return self.select(self.op("FUnordLessThan", tb, x, self.const(0, c)), self.const(math.nan, c), y, t)

    # f32 arithmetic helpers for the math below
    def fadd(self, a: int, b: int) -> int:
        return self.op("FAdd", self.t_f32, a, b)

    def fmul(self, a: int, b: int) -> int:
        return self.op("FMul", self.t_f32, a, b)

    def fpoly(self, z: int, coefficients) -> int:
        """c0 * z^n + c1 * z^(n-1) + ... + cn, by Horner."""
        acc = self.f32(coefficients[0])
        for coefficient in coefficients[1:]:
            acc = self.fadd(self.fmul(acc, z), self.f32(coefficient))
        return acc

    def fless(self, a: int, b: int) -> int:
        return self.op("FOrdLessThan", self.t_bool, a, b)

    def sin_cos(self, x: int, which: str) -> int:
        """Cephes sinf/cosf: reduce by pi/4 in three parts (exact for |x| < 8192), then a polynomial on
        [-pi/4, pi/4]. Beyond 8192 this would lose digits: there the driver's Sin/Cos answers (within [-1, 1],
        but not to 1e-5: a Payne-Hanek reduction is not written yet)."""
        t, tb = self.t_f32, self.t_bool
        ax = self.ext("FAbs", t, x)
        j = self.op("ConvertFToS", self.t_i32, self.fmul(ax, self.f32(4 / math.pi)))
        j = self.op("IAdd", self.t_i32, j, self.op("BitwiseAnd", self.t_i32, j, self.i32(1)))  # to even
        y = self.op("ConvertSToF", t, j)
        octant = self.op("BitwiseAnd", self.t_i32, j, self.i32(7))
        r = ax
        for part in PI_4_PARTS:
            r = self.op("FSub", t, r, self.fmul(y, self.f32(part)))
        z = self.fmul(r, r)
        sin_r = self.fadd(r, self.fmul(self.fmul(r, z), self.fpoly(z, SIN_P)))
        cos_r = self.fadd(self.op("FSub", t, self.f32(1), self.fmul(self.f32(0.5), z)),
                          self.fmul(self.fmul(z, z), self.fpoly(z, COS_P)))
        quadrant = self.op("BitwiseAnd", self.t_i32, octant, self.i32(3))  # 0 or 2 after rounding j to even
        swap = self.op("IEqual", tb, quadrant, self.i32(2))
        upper = self.op("SGreaterThan", tb, octant, self.i32(3))
        if which == "sin":
            value = self.select(swap, cos_r, sin_r, t)
            negative = self.op("LogicalNotEqual", tb, upper, self.fless(x, self.f32(0)))
        else:
            value = self.select(swap, sin_r, cos_r, t)
            negative = self.op("LogicalNotEqual", tb, upper, swap)
        value = self.select(negative, self.op("FNegate", t, value), value, t)
        far = self.fless(self.f32(TRIG_EXACT_BELOW), ax)  # past exact reduction (and i32 octants): the driver's own
        value = self.select(far, self.ext("Sin" if which == "sin" else "Cos", t, x), value, t)
        return self.select(self.special(x), self.f32(math.nan), value, t)

    def atan(self, x: int) -> int:
        """Cephes atanf: reduce to |x| <= tan(pi/8), then an odd polynomial; within 2 ulp, NaN stays NaN."""
        t, tb = self.t_f32, self.t_bool
        ax = self.ext("FAbs", t, x)
        big = self.fless(self.f32(TAN_3PI_8), ax)
        mid = self.fless(self.f32(TAN_PI_8), ax)
        reduced = self.select(mid, self.op("FDiv", t, self.op("FSub", t, ax, self.f32(1)), self.fadd(ax, self.f32(1))),
                              ax, t)
        reduced = self.select(big, self.op("FDiv", t, self.f32(-1), ax), reduced, t)
        offset = self.select(big, self.f32(math.pi / 2), self.select(mid, self.f32(math.pi / 4), self.f32(0), t), t)
        z = self.fmul(reduced, reduced)
        poly = self.fpoly(z, ATAN_P)
        value = self.fadd(offset, self.fadd(self.fmul(self.fmul(poly, z), reduced), reduced))
        value = self.select(self.fless(x, self.f32(0)), self.op("FNegate", t, value), value, t)
        return self.select(self.op("IsNan", tb, x), x, value, t)

    def atan2(self, y: int, x: int) -> int:
        """numpy's arctan2, quadrants, signed zeros, infinities and NaN included."""
        t, tb = self.t_f32, self.t_bool
        pi = self.f32(math.pi)
        y_negative = self.op("SLessThan", tb, self.op("Bitcast", self.t_i32, y), self.i32(0))  # -0 too
        x_negative = self.op("SLessThan", tb, self.op("Bitcast", self.t_i32, x), self.i32(0))
        signed_pi = self.select(y_negative, self.op("FNegate", t, pi), pi, t)
        value = self.atan(self.op("FDiv", t, y, x))
        value = self.select(self.fless(x, self.f32(0)), self.fadd(value, signed_pi), value, t)
        half_pi = self.select(y_negative, self.f32(-math.pi / 2), self.f32(math.pi / 2), t)
        value = self.select(self.op("FOrdEqual", tb, x, self.f32(0)), half_pi, value, t)  # y / -0 has the wrong sign
        # both zero: +-0 for x = +0, +-pi for x = -0; both infinite: +-pi/4 or +-3pi/4
        zeros = self.op("LogicalAnd", tb, self.op("FOrdEqual", tb, x, self.f32(0)),
                        self.op("FOrdEqual", tb, y, self.f32(0)))
        value = self.select(zeros, self.select(x_negative, signed_pi, y, t), value, t)
        infinite = self.op("LogicalAnd", tb, self.op("IsInf", tb, x), self.op("IsInf", tb, y))
        corner = self.select(x_negative, self.f32(3 * math.pi / 4), self.f32(math.pi / 4), t)
        corner = self.select(y_negative, self.op("FNegate", t, corner), corner, t)
        value = self.select(infinite, corner, value, t)
        nan = self.op("LogicalOr", tb, self.op("IsNan", tb, x), self.op("IsNan", tb, y))
        return self.select(nan, self.f32(math.nan), value, t)

    def tanh(self, x: int) -> int:
        """Cephes tanhf: an odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above (1 once exp overflows)."""
        t, tb = self.t_f32, self.t_bool
        ax = self.ext("FAbs", t, x)
        z = self.fmul(x, x)
        poly = self.fpoly(z, TANH_P)
        small = self.fadd(x, self.fmul(self.fmul(x, z), poly))
        e = self.ext("Exp", t, self.fadd(ax, ax))
        large = self.op("FSub", t, self.f32(1), self.op("FDiv", t, self.f32(2), self.fadd(e, self.f32(1))))
        large = self.select(self.fless(x, self.f32(0)), self.op("FNegate", t, large), large, t)
        value = self.select(self.fless(ax, self.f32(0.625)), small, large, t)
        return self.select(self.op("IsNan", tb, x), x, value, t)

    def special(self, x: int) -> int:
        """x is inf or NaN."""
        return self.op("LogicalOr", self.t_bool, self.op("IsNan", self.t_bool, x), self.op("IsInf", self.t_bool, x))

    def erf(self, x: int, t: int, c: DType) -> int:
        """Eigen's and XLA's rational erf on [-4, 4], within 5e-7 of erf."""
        clamped = self.ext("FClamp", t, x, self.const(-4, c), self.const(4, c))
        x2 = self.op("FMul", t, clamped, clamped)

        def horner(coefficients):
            acc = self.const(coefficients[0], c)
            for coefficient in coefficients[1:]:
                acc = self.op("FAdd", t, self.op("FMul", t, acc, x2), self.const(coefficient, c))
            return acc

        value = self.op("FMul", t, clamped, self.op("FDiv", t, horner(ERF_P), horner(ERF_Q)))  # x * (P / Q):
        # (x * P) / Q would flush a subnormal x
        return self.select(self.op("IsNan", self.t_bool, x), x, value, t)

    # -- binary ops -------------------------------------------------------------------------------
    def expr_binary(self, e: k.Binary) -> int:
        dt = e.dtype
        c = compute_dtype(dt)
        if c.kind == "float" and e.op == "pow" and isinstance(e.b, k.Const):
            special = self.pow_const(e.a, float(e.b.value), c)
            if special is not None:
                return special
        a, b = self.expr(e.a), self.expr(e.b)
        t = self.type_of(dt)
        if c.kind == "float":
            return self.float_binary(e.op, a, b, t, c)
        if c.kind == "bool":
            logical = {"and": "LogicalAnd", "or": "LogicalOr", "xor": "LogicalNotEqual", "max": "LogicalOr",
                       "min": "LogicalAnd", "add": "LogicalOr", "mul": "LogicalAnd"}.get(e.op)
            if logical is None:
                raise self.fail(f"binary op '{e.op}' on {dt} is not supported")
            return self.op(logical, t, a, b)
        return self.int_binary(e, a, b, dt)

    def float_binary(self, op: str, a: int, b: int, t: int, c: DType) -> int:
        plain = {"add": "FAdd", "sub": "FSub", "mul": "FMul", "div": "FDiv", "rem": "FRem"}
        if op == "rem":  # FRem takes the dividend's sign, as C's fmod; drivers lower it as a - b * trunc(a / b),
            # which is NaN for an infinite b, where fmod(a, +-inf) is a for every finite a
            tb = self.t_bool
            finite_a = self.op("LogicalNot", tb, self.op("LogicalOr", tb, self.op("IsNan", tb, a),
                                                          self.op("IsInf", tb, a)))
            keep = self.op("LogicalAnd", tb, self.op("IsInf", tb, b), finite_a)
            return self.select(keep, a, self.op("FRem", t, a, b), t)
        if op == "div" and c.bits == 32:
            return self.rounded_div(a, b, t)
        if op in plain:
            return self.op(plain[op], t, a, b)
        if op in ("max", "min"):  # NaN wins, as numpy's maximum
            picked = self.ext("FMax" if op == "max" else "FMin", t, a, b)
            picked = self.select(self.op("IsNan", self.t_bool, b), b, picked, t)
            return self.select(self.op("IsNan", self.t_bool, a), a, picked, t)
        if op == "atan2":
            if c.bits == 64:
                raise self.fail("atan2 on f64 is not supported; cast the model to f32")
            return self.atan2(a, b)
        if op == "pow":
            return self.pow(a, b, t, c)
        raise self.fail(f"binary op '{op}' on {c} is not supported")

    def rounded_div(self, a: int, b: int, t: int) -> int:
        """a / b rounded correctly. Vulkan lets OpFDiv be 2.5 ulp off, and NVIDIA's is: a quotient on a rounding
        tie moved to the other side of it (DynamicQuantizeLinear's x / scale gave 128 for 127.5). One Newton step
        of fused multiply-adds corrects it; where that step is NaN (b zero or infinite) the quotient stands."""
        q = self.op("FDiv", t, a, b)
        residual = self.ext("Fma", t, self.op("FNegate", t, q), b, a)
        refined = self.ext("Fma", t, residual, self.op("FDiv", t, self.f32(1.0), b), q)
        return self.select(self.op("IsNan", self.t_bool, refined), q, refined, t)

    def pow_const(self, base: k.Expr, exponent: float, c: DType) -> int | None:
        """x ** 1, 2, 3, 0.5 and -1 exactly, as models write them (variance, RMS norm)."""
        if exponent not in (1.0, 2.0, 3.0, 0.5, -1.0):
            return None
        x = self.expr(base)
        t = self.type_of(base.dtype)
        if exponent == 1.0:
            return x
        if exponent == 0.5:  # pow(-0, 0.5) is +0 and pow(-inf, 0.5) is inf; Sqrt gives -0 and NaN
            root = self.ext("Sqrt", t, x)
            inf = self.const(math.inf, c)
            root = self.select(self.op("FOrdEqual", self.t_bool, x, self.const(-math.inf, c)), inf, root, t)
            return self.select(self.op("FOrdEqual", self.t_bool, x, self.const(0, c)), self.const(0, c), root, t)
        if exponent == -1.0:
            return self.op("FDiv", t, self.const(1, c), x)
        square = self.op("FMul", t, x, x)
        return square if exponent == 2.0 else self.op("FMul", t, square, x)

    def pow(self, x: int, y: int, t: int, c: DType) -> int:
        """C's pow: GLSL's Pow is undefined for x < 0 and for x = 0, y <= 0; those cases are built here."""
        zero, one = self.const(0, c), self.const(1, c)
        magnitude = self.ext("Pow", t, self.ext("FAbs", t, x), y)
        integral = self.op("FOrdEqual", self.t_bool, self.ext("Floor", t, y), y)
        odd = self.op("FOrdEqual", self.t_bool, self.op("FRem", t, self.ext("FAbs", t, y), self.const(2, c)), one)
        negative = self.select(odd, self.op("FNegate", t, magnitude), magnitude, t)
        negative = self.select(integral, negative, self.const(math.nan, c), t)
        out = self.select(self.op("FOrdLessThan", self.t_bool, x, zero), negative, magnitude, t)
        at_zero = self.select(self.op("FOrdLessThan", self.t_bool, y, zero), self.const(math.inf, c), zero, t)
        out = self.select(self.op("FOrdEqual", self.t_bool, x, zero), at_zero, out, t)
        nan = self.op("LogicalOr", self.t_bool, self.op("IsNan", self.t_bool, x), self.op("IsNan", self.t_bool, y))
        out = self.select(nan, self.const(math.nan, c), out, t)  # some drivers' Pow drops NaN
        unit = self.op("LogicalOr", self.t_bool, self.op("FOrdEqual", self.t_bool, y, zero),
                       self.op("FOrdEqual", self.t_bool, x, one))
        return self.select(unit, one, out, t)

    def int_binary(self, e: k.Binary, a: int, b: int, dt: DType) -> int:
        t = self.type_of(dt)
        op, unsigned = e.op, dt.kind == "uint"
        if op in ("add", "sub", "mul"):
            opcode = {"add": "IAdd", "sub": "ISub", "mul": "IMul"}[op]
            return self.op(opcode, t, a, b) if dt.bits == 64 else self.wrap(self.int_op(opcode, a, b), dt)
        if op in ("and", "or", "xor"):
            return self.op({"and": "BitwiseAnd", "or": "BitwiseOr", "xor": "BitwiseXor"}[op], t, a, b)
        if op == "shr":  # values narrower than 32 bits sit sign- or zero-extended, so either shift keeps them
            return self.op("ShiftRightLogical" if unsigned else "ShiftRightArithmetic", t, a, b)
        if op in ("max", "min"):
            return self.ext(("U" if unsigned else "S") + ("Max" if op == "max" else "Min"), t, a, b)
        if op in ("div", "rem"):
            return self.int_divide(op, a, b, dt)
        if op == "pow":
            return self.int_pow(a, b, dt)
        raise self.fail(f"binary op '{op}' on {dt} is not supported")

    def unsigned(self, opcode: str, a: int, b: int, dt: DType = I32) -> int:
        """UDiv/UMod on the bits of `dt`'s compute type: their operands and result are unsigned integers."""
        u = self.unsigned_type(dt)
        ua, ub = (self.op("Bitcast", u, x) for x in (a, b))
        return self.op("Bitcast", self.type_of(dt), self.op(opcode, u, ua, ub))

    def int_divide(self, op: str, a: int, b: int, dt: DType) -> int:
        """C's truncating division and remainder, x / 0 = x, x % 0 = 0, MIN / -1 = MIN. Vulkan leaves OpSRem
        undefined for negative operands, so a remainder is a - b * (a / b), or |a| mod |b| with a's sign."""
        t = self.type_of(dt)
        known = self.m.constant_values.get(b) if compute_dtype(dt).bits == 32 else None
        if dt.kind == "uint":
            if known is not None and known != 0:
                return self.unsigned("UDiv" if op == "div" else "UMod", a, b, dt)
            zero_c = self.const(0, dt)
            zero = self.op("IEqual", self.t_bool, b, zero_c)
            safe = self.select(zero, self.const(1, dt), b, t)
            if op == "div":
                return self.select(zero, a, self.unsigned("UDiv", a, safe, dt), t)
            return self.select(zero, zero_c, self.unsigned("UMod", a, safe, dt), t)
        if known is not None and known not in (0, 0xFFFFFFFF):  # a constant divisor cannot trap or overflow
            quotient = self.op("SDiv", t, a, b)
            return quotient if op == "div" else self.op("ISub", t, a, self.op("IMul", t, quotient, b))
        zero_c = self.const(0, dt)
        zero = self.op("IEqual", self.t_bool, b, zero_c)
        minus_one = self.op("IEqual", self.t_bool, b, self.const(-1, dt))
        trivial = self.op("LogicalOr", self.t_bool, zero, minus_one)
        safe = self.select(trivial, self.const(1, dt), b, t)
        if op == "div":  # x / -1 is -x, and MIN / -1 wraps to MIN
            quotient = self.op("SDiv", t, a, safe)
            quotient = self.select(minus_one, self.wrap(self.op("SNegate", t, a), dt), quotient, t)
            return self.select(zero, a, quotient, t)
        magnitude = self.unsigned("UMod", self.ext("SAbs", t, a), self.ext("SAbs", t, safe), dt)  # |MIN|: unsigned
        negative = self.op("SLessThan", self.t_bool, a, zero_c)
        remainder = self.select(negative, self.op("SNegate", t, magnitude), magnitude, t)
        return self.select(trivial, zero_c, remainder, t)

    def int_pow(self, a: int, b: int, dt: DType) -> int:
        """Square and multiply over the exponent's bits, straight-line; wraps as numpy's power."""
        t, one, zero = self.type_of(dt), self.const(1, dt), self.const(0, dt)
        result, base, exponent = one, a, b
        for _ in range(dt.bits - (dt.kind == "int")):
            odd = self.op("INotEqual", self.t_bool, self.op("BitwiseAnd", t, exponent, one), zero)
            result = self.select(odd, self.wrap(self.op("IMul", t, result, base), dt), result, t)
            base = self.wrap(self.op("IMul", t, base, base), dt)
            exponent = self.op("ShiftRightLogical", t, exponent, one)
        if dt.kind == "uint":
            return result
        # a negative exponent: 1 for a == 1, +-1 for a == -1, else 0 (integer 1 / a**|b|)
        minus_one = self.const(-1, dt)
        parity = self.select(self.op("INotEqual", self.t_bool, self.op("BitwiseAnd", t, b, one), zero),
                             minus_one, one, t)
        negative = self.select(self.op("IEqual", self.t_bool, a, minus_one), parity, zero, t)
        negative = self.select(self.op("IEqual", self.t_bool, a, one), one, negative, t)
        return self.select(self.op("SLessThan", self.t_bool, b, zero), negative, result, t)

    # -- conversions ------------------------------------------------------------------------------
    def convert(self, value: int, src: DType, dst: DType) -> int:
        """`value` (computed in `src`'s compute type) as a value of `dst`."""
        if src == dst:
            return value
        cs, cd = compute_dtype(src), compute_dtype(dst)
        if dst.name in ("f16", "bf16"):  # round to the half type once, then compute in f32 again
            wide = self.convert(value, src, F32)
            if dst.name == "bf16":
                bits = self.op("ShiftLeftLogical", self.t_i32, self.bf16_bits(wide), self.i32(16))
                return self.op("Bitcast", self.t_f32, bits)
            # never as FConvert to f16 and back: NVIDIA's driver (580) drops that pair, so values past 65504 stayed
            # finite and no element was rounded (found by test_numerics on an H100)
            return self.round_to_f16(wide)
        if cd.kind == "bool":
            if cs.kind == "float":
                return self.op("FUnordNotEqual", self.t_bool, value, self.const(0, cs))
            return self.op("INotEqual", self.t_bool, value, self.const(0, src))
        if cs.kind == "bool":
            return self.select(value, self.const(1, dst), self.const(0, dst), self.type_of(dst))
        if cs.kind == "float" and cd.kind == "float":
            return value if cs == cd else self.op("FConvert", self.type_of(dst), value)
        if cs.kind == "float":
            return self.float_to_int(value, cs, dst)
        if cd.kind == "float":
            return self.op("ConvertUToF" if src.kind == "uint" else "ConvertSToF", self.type_of(dst), value)
        if cs.bits != cd.bits:  # to 64 bits sign- or zero-extended as the source is; to 32 truncated, as numpy wraps
            if src.kind == "uint" and cd.bits > cs.bits:  # UConvert's result is unsigned: then seen as signed
                value = self.op("Bitcast", self.type_of(dst), self.op("UConvert", self.unsigned_type(dst), value))
            else:
                value = self.op("SConvert", self.type_of(dst), value)
        return self.wrap(value, dst)  # narrow types wrap, wider ones are already there

    def round_to_f16(self, x: int) -> int:
        """f32 `x` rounded to the nearest f16 (ties to even) in f32 arithmetic, on every target (see `convert`):
        |x| scaled by its f16 ulp (2^(max(e, -14) - 10), from the exponent bits) is rounded to a whole number, which is
        exact, powers of two; 65520 and past are infinite; NaN stays NaN, and the sign (-0 too) is x's."""
        t, tb, i = self.t_f32, self.t_bool, self.t_i32
        a = self.ext("FAbs", t, x)
        exponent = self.op("ISub", i, self.op("ShiftRightLogical", i, self.op("Bitcast", i, a), self.i32(23)),
                           self.i32(127))
        ulp = self.ext("SMax", i, exponent, self.i32(-14))  # then less 10: -24 to 5, normal f32 powers of two
        scale = self.op("Bitcast", t, self.op("ShiftLeftLogical", i, self.op("ISub", i, self.i32(137), ulp),
                                              self.i32(23)))  # 1 / ulp
        r = self.op("FDiv", t, self.ext("RoundEven", t, self.op("FMul", t, a, scale)), scale)
        r = self.select(self.op("FOrdGreaterThanEqual", tb, a, self.f32(65520.0)), self.f32(math.inf), r, t)
        r = self.select(self.op("IsNan", tb, x), a, r, t)
        sign = self.op("BitwiseAnd", i, self.op("Bitcast", i, x), self.i32(-(2**31)))
        return self.op("Bitcast", t, self.op("BitwiseOr", i, self.op("Bitcast", i, r), sign))

    def float_to_int(self, x: int, src: DType, dst: DType) -> int:
        """Saturating, NaN -> 0, as llvm's fptosi.sat; bounds are powers of two, exact in floats."""
        bits = dst.bits
        t, tf = self.type_of(dst), self.type_of(src)
        if dst.kind == "uint":
            lo, hi = 0, 2**bits
        else:
            lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1)
        below_hi = float(np.nextafter(np.array(hi, dtype=src.np_dtype), np.array(0, dtype=src.np_dtype)))
        inside = self.ext("FClamp", tf, x, self.const(lo, src), self.const(below_hi, src))
        if dst.kind == "uint":
            converted = self.op("Bitcast", t, self.op("ConvertFToU", self.unsigned_type(dst), inside))
        else:
            converted = self.op("ConvertFToS", t, inside)
        top, low, zero = self.const(hi - 1, dst), self.const(lo, dst), self.const(0, dst)
        out = self.select(self.op("FOrdGreaterThanEqual", self.t_bool, x, self.const(hi, src)), top, converted, t)
        out = self.select(self.op("FOrdLessThanEqual", self.t_bool, x, self.const(lo, src)), low, out, t)
        return self.select(self.op("IsNan", self.t_bool, x), zero, out, t)


def words_of(binary: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(binary) // 4}I", binary))
