"""Kernel IR -> LLVM IR (llvmlite.ir) -> optimised native object.

Each kernel becomes `void NAME(void **bindings, i64 wg_x, i64 wg_y, i64 wg_z)`:
binding i is param i, and the kernel's `workgroup_vars` are wg_x, wg_y, wg_z in
order. A kernel with scalars (sizes known at run time) finds them in one more
binding: `bindings[len(params)]` points to their i64 values, in `Kernel.scalars`
order; loops whose extents are expressions of them run to a computed bound.
The exported function only reads the binding table and calls the kernel
body, whose buffer arguments are `noalias` (the host program never binds a
dispatch's output over one of its inputs), so LLVM needs no runtime alias checks. Kernels that
differ only in name share one body, compiled once (a model repeats its blocks).
Scalars and loop variables live in allocas (SROA/mem2reg promote them),
`Local` arrays are allocas. `unroll` loops are unrolled here, and short innermost
loops become explicit vector code (`vectorize.py`). f16/bf16 are storage types only: loads extend to f32
and stores round back (round to nearest even), as the vmvx reference does.
Float ops allow reassociation and contraction (so reductions vectorize), but not
`nnan`/`ninf`, so NaN and infinity behave as in numpy.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llvmlite import ir
from retarget.errors import UnsupportedOpError
from retarget.ir.dtypes import DType
from retarget.ir.dtypes import f32 as DTYPE_F32
from retarget.kernel import ir as k
from retarget.kernel.approximations import (
    ATAN_P,
    COS_P,
    ERF_P,
    ERF_Q,
    EXP_P,
    LOG_P,
    PI_4_PARTS,
    SIN_P,
    TAN_3PI_8,
    TAN_PI_8,
    TANH_P,
    TRIG_EXACT_BELOW,
)

from .vectorize import VectorLanes, forget, free_vars, loads_from, vectorizable

FAST = ("reassoc", "contract", "nsz")
I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
MAX_UNROLL = 64  # longer `unroll` loops stay loops, with a full-unroll hint

# Unary float ops that are LLVM intrinsics; the rest call libm (f32 names end in "f").
INTRINSIC_UNARY = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "abs": "llvm.fabs",
                   "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven",
                   "sin": "llvm.sin", "cos": "llvm.cos"}
LIBM_UNARY = {"tanh": "tanh", "erf": "erf", "tan": "tan", "atan": "atan", "log1p": "log1p", "expm1": "expm1"}
LIBM_BINARY = {"atan2": "atan2"}
FLOAT_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def storage_type(dt: DType) -> ir.Type:
    """How an element sits in a buffer."""
    if dt.name == "bf16":
        return I16
    if dt.name == "f16":
        return F16
    if dt.kind == "bool":
        return I8
    return _scalar(dt)


# The elementwise ops `expr_unary` and `expr_binary` compute on integers and booleans, and the bitwise ops they
# do not compute on floats; `support_table` refuses the rest, so placement sends them elsewhere.
INTEGER_UNARY = ("neg", "abs", "not", "sign")
INTEGER_BINARY = ("add", "sub", "mul", "and", "or", "xor", "shr", "div", "rem", "max", "min", "pow")
NOT_ON_FLOATS = ("not", "and", "or", "xor", "shr")


def support_table():
    """What this code generator refuses, as a SupportTable: float math of integers, bitwise ops of floats,
    and no element type (the narrow ones never reach it: `retarget.kernel.narrow`)."""
    from retarget.ir.dtypes import DTYPES
    from retarget.kernel.ir import BINARY_OPS, UNARY_OPS
    from retarget.kernel.narrow import NARROW_TYPES
    from retarget.protocols import SupportTable

    ops = {f"rt.{op}:{kind}": f"llvm-cpu computes {op} of floats only"
           for op in (*UNARY_OPS, *BINARY_OPS) if op not in INTEGER_UNARY + INTEGER_BINARY
           for kind in ("int", "uint", "bool")}
    ops.update({f"rt.{op}:float": "llvm-cpu computes bitwise ops of integers only" for op in NOT_ON_FLOATS})
    held = {"f64", "f32", "f16", "bf16", "i1", *NARROW_TYPES} | {
        name for name, dt in DTYPES.items() if dt.kind in ("int", "uint") and dt.bits in (8, 16, 32, 64)}
    return SupportTable(ops, {name: "llvm-cpu has no such machine type" for name in DTYPES if name not in held})


def compute_type(dt: DType) -> ir.Type:
    """How a value of this dtype is held in registers."""
    if dt.name in ("f16", "bf16"):
        return F32
    return _scalar(dt)


def _scalar(dt: DType) -> ir.Type:
    if dt.name == "f64":
        return F64
    if dt.name == "f32":
        return F32
    if dt.kind == "bool":
        return I1
    if dt.kind in ("int", "uint") and dt.bits in (8, 16, 32, 64):
        return ir.IntType(dt.bits)
    raise UnsupportedOpError(f"llvm-cpu cannot compile element type {dt}", hint="cast it to a supported type first")


class ModuleBuilder:
    """Builds one LLVM module holding many kernels, for one (triple, features)."""

    def __init__(self, name: str, triple: str, features: tuple[str, ...]):
        self.module = ir.Module(name=name)
        self.module.triple = triple
        is_x86 = triple.startswith(("x86_64", "i686", "i386"))
        # Targets without a native half conversion get bit-exact helpers instead of a libcall.
        self.native_half = not is_x86 or "f16c" in features
        self.bodies: dict[str, ir.Function] = {}  # a kernel's text, its name left out -> its body function

    def add(self, kernel: k.Kernel) -> ir.Function:
        """The kernel's entry point. Kernels that differ only in name (a model's repeated blocks) share one
        body, built and optimised once; a shared body is called, not inlined into each entry point."""
        text = _body_key(kernel)
        body = self.bodies.get(text)
        if body is None:
            try:
                body = self.bodies[text] = _KernelBuilder(self, kernel).build()
            finally:
                forget()
        else:
            body.attributes.discard("alwaysinline")
            body.attributes.add("noinline")
        return _entry_point(self.module, kernel, body)

    # -- declarations ---------------------------------------------------------------------------
    def intrinsic(self, name: str, types: list[ir.Type], ret: ir.Type | None = None) -> ir.Function:
        fnty = ir.FunctionType(ret or types[0], [types[0]] * _arity(name))
        if not any(isinstance(t, ir.VectorType) for t in types):
            return self.module.declare_intrinsic(name, types, fnty)
        return self.declare(".".join([name, *map(_mangle, types)]), fnty)

    def masked_load(self, ty: ir.VectorType) -> ir.Function:
        mask = ir.VectorType(I1, ty.count)
        return self.declare(f"llvm.masked.load.{_mangle(ty)}.p0", ir.FunctionType(ty, [PTR, I32, mask, ty]))

    def declare(self, symbol: str, fnty: ir.FunctionType) -> ir.Function:
        fn = self.module.globals.get(symbol)
        return fn if fn is not None else ir.Function(self.module, fnty, symbol)

    def libm(self, name: str, ty: ir.Type, arity: int) -> ir.Function:
        symbol = name + ("f" if ty == F32 else "")
        fn = self.module.globals.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * arity), symbol)
            fn.attributes.add("nounwind")
            fn.attributes.add("readnone")  # errno is never read back
        return fn

    def helper(self, name: str, build) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = build(self.module, name)
        return fn


def _body_key(kernel: k.Kernel) -> str:
    """The kernel's text with its name left out: kernels that differ only in name share one body."""
    return k.print_kernel(kernel).replace(f"@{kernel.name}(", "@(", 1)


def _mangle(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_mangle(ty.element)}"
    return ty.intrinsic_name


def _arity(name: str) -> int:
    return 3 if name == "llvm.fma" else 2 if name in ("llvm.pow", "llvm.maximum", "llvm.minimum") else 1


def _entry_point(module: ir.Module, kernel: k.Kernel, body: ir.Function) -> ir.Function:
    """`NAME(void **bindings, wg_x, wg_y, wg_z)`: reads the binding table, calls the body."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, I64]), kernel.name)
    fn.attributes.add("nounwind")
    bindings, *wg = fn.args
    bindings.name = "bindings"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    pointers = []
    for i, p in enumerate(kernel.params):
        slot = b.gep(bindings, [ir.Constant(I64, i)], inbounds=True, source_etype=PTR)
        pointers.append(b.load(slot, name=p.name, typ=PTR))
    scalars = []
    if kernel.scalars:
        slot = b.gep(bindings, [ir.Constant(I64, len(kernel.params))], inbounds=True, source_etype=PTR)
        table = b.load(slot, name="scalars", typ=PTR)
        for j, symbol in enumerate(kernel.scalars):
            at = b.gep(table, [ir.Constant(I64, j)], inbounds=True, source_etype=I64)
            scalars.append(b.load(at, name=k.symbol_var(symbol).name, typ=I64))
    b.call(body, [*pointers, *scalars, *wg])
    b.ret_void()
    return fn


class _KernelBuilder:
    def __init__(self, mb: ModuleBuilder, kernel: k.Kernel):
        self.mb = mb
        self.kernel = kernel
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(kernel.params) + [I64] * len(kernel.scalars) + [I64] * 3)
        self.fn = ir.Function(mb.module, fnty, kernel.name + ".body")
        self.fn.linkage = "internal"
        self.fn.attributes.add("nounwind")
        self.fn.attributes.add("alwaysinline")
        for arg in self.fn.args[:len(kernel.params)]:
            arg.add_attribute("noalias")
            arg.add_attribute("captures(none)")
        self.entry = self.fn.append_basic_block("allocas")  # allocas only, so SROA promotes them all
        self.alloca_builder = ir.IRBuilder(self.entry)
        self.start = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.start)
        self.buffers: dict[str, tuple[ir.Value, DType, bool]] = {}  # name -> (pointer, dtype, is_local)
        self.vars: dict[str, tuple[ir.Value, ir.Type]] = {}  # scalar name -> (alloca, type)
        self.index_vars: dict[str, ir.Value] = {}
        self.lanes: VectorLanes | None = None  # set while emitting a loop as vector code
        # values already emitted in this block, for `recall`: key -> (value, block, versions of its variables)
        self.computed: dict = {}
        self.versions: dict[str, int] = {}  # bumped whenever a variable may take another value
        self.read_only = frozenset(p.name for p in kernel.params if p.access == "read")  # never stored to
        # id(loop) -> (loop, whether it is vector code): an unrolled loop's body is emitted once an iteration,
        # and asking again for each inner loop was a quarter of a large model's code generation
        self.vector_loops: dict[int, tuple[k.Loop, bool]] = {}

    def build(self) -> ir.Function:
        n = len(self.kernel.params)
        scalars = self.fn.args[n:n + len(self.kernel.scalars)]
        for symbol, arg in zip(self.kernel.scalars, scalars):
            arg.name = k.symbol_var(symbol).name
            self.index_vars[arg.name] = arg
        wg = self.fn.args[n + len(scalars):]
        for name, arg in zip(("wg_x", "wg_y", "wg_z"), wg):
            arg.name = name
        for var, arg in zip(self.kernel.workgroup_vars, wg):
            self.index_vars[var] = arg
        for p, arg in zip(self.kernel.params, self.fn.args):
            arg.name = p.name
            self.buffers[p.name] = (arg, p.dtype, False)
        self.stmts(self.kernel.body)
        self.b.ret_void()
        self.alloca_builder.branch(self.start)
        return self.fn

    # -- helpers --------------------------------------------------------------------------------
    @staticmethod
    def element_type(dt: DType, local: bool) -> ir.Type:
        return compute_type(dt) if local else storage_type(dt)

    def alloca(self, ty: ir.Type, name: str, count: int | None = None) -> ir.Value:
        # an array is `count` elements, so that it is element-indexed like a buffer
        return self.alloca_builder.alloca(ty, size=ir.Constant(I64, count) if count else None, name=name)

    # -- statements -----------------------------------------------------------------------------
    def stmts(self, body: list) -> None:
        for s in body:
            getattr(self, "stmt_" + type(s).__name__.lower())(s)

    def stmt_loop(self, s: k.Loop) -> None:
        if isinstance(s.extent, int) and s.extent <= 0:
            return
        if self.lanes is None and self.vectorizable(s):
            # power-of-two pieces (28 = 16 + 8 + 4): odd widths legalize into shuffles and spills
            start, left = s.start, s.extent
            while left:
                n = 1 << (left.bit_length() - 1)
                self.lanes = VectorLanes(self, s.var, start, n)
                try:
                    for store in s.body:
                        self.lanes.store(store)
                finally:
                    self.lanes = None
                start, left = start + n, left - n
            return
        if s.kind == "unroll" and isinstance(s.extent, int) and s.extent <= MAX_UNROLL:
            saved = self.index_vars.get(s.var)
            for i in range(s.start, s.start + s.extent):
                self.index_vars[s.var] = ir.Constant(I64, i)
                self.changed(s.var)
                self.stmts(s.body)
            if saved is None:
                self.index_vars.pop(s.var, None)
            else:
                self.index_vars[s.var] = saved
            self.changed(s.var)
            return
        b = self.b
        iv = self.alloca(I64, s.var)
        saved = self.index_vars.get(s.var)
        b.store(ir.Constant(I64, s.start), iv)
        header = self.fn.append_basic_block(f"{s.var}.header")
        body = self.fn.append_basic_block(f"{s.var}.body")
        latch = self.fn.append_basic_block(f"{s.var}.latch")
        exit_ = self.fn.append_basic_block(f"{s.var}.exit")
        b.branch(header)
        b.position_at_end(header)
        i = b.load(iv, name=s.var, typ=I64)
        end = ir.Constant(I64, s.start + s.extent) if isinstance(s.extent, int) else self.expr(s.extent + s.start)
        b.cbranch(b.icmp_signed("<", i, end), body, exit_)
        b.position_at_end(body)
        self.index_vars[s.var] = i
        self.changed(s.var)
        self.stmts(s.body)
        b.branch(latch)
        b.position_at_end(latch)
        b.store(b.add(b.load(iv, typ=I64), ir.Constant(I64, 1), flags=("nsw",)), iv)
        back = b.branch(header)
        hints = self.loop_hints(s)
        if hints:
            md = self.mb.module.add_metadata([ir.MetaDataString(self.mb.module, "retarget.loop")])
            md.operands = (md, *hints)  # a loop id refers to itself
            back.set_metadata("llvm.loop", md)
        b.position_at_end(exit_)
        if saved is None:
            self.index_vars.pop(s.var, None)
        else:
            self.index_vars[s.var] = saved
        self.changed(s.var)

    def vectorizable(self, s: k.Loop) -> bool:
        hit = self.vector_loops.get(id(s))
        if hit is None or hit[0] is not s:
            hit = self.vector_loops[id(s)] = (s, vectorizable(s, self.buffers))
        return hit[1]

    def loop_hints(self, s: k.Loop) -> list:
        m = self.mb.module
        # "vector" loops get no forced-vectorize hint: LLVM vectorizes them (or SLP-vectorizes them once
        # unrolled) on its own, and a forced hint only adds warnings where it chooses otherwise.
        if s.kind == "unroll":
            return [m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.full")])]
        return []

    def changed(self, var: str) -> None:
        self.versions[var] = self.versions.get(var, 0) + 1

    def stmt_assign(self, s: k.Assign) -> None:
        self.changed(s.var)
        value = self.expr(s.value)
        slot = self.vars.get(s.var)
        if slot is None or slot[1] != value.type:
            slot = (self.alloca(value.type, s.var), value.type)
            self.vars[s.var] = slot
        self.b.store(value, slot[0])

    def stmt_store(self, s: k.Store) -> None:
        ptr, dt, local = self.buffers[s.buffer]
        value = self.convert(self.expr(s.value), s.value.dtype, dt, round_half=local)
        elem = compute_type(dt) if local else storage_type(dt)
        addr = self.b.gep(ptr, [self.expr(s.index)], inbounds=True, source_etype=elem)
        self.b.store(value if local else self.to_storage(value, dt), addr)

    def stmt_if(self, s: k.If) -> None:
        then = self.fn.append_basic_block("if.then")
        done = self.fn.append_basic_block("if.end")
        self.b.cbranch(self.expr(s.cond), then, done)
        self.b.position_at_end(then)
        self.stmts(s.body)
        self.b.branch(done)
        self.b.position_at_end(done)

    def stmt_local(self, s: k.Local) -> None:
        arr = self.alloca(compute_type(s.dtype), s.name, s.size)
        arr.type = PTR  # opaque, as LLVM's own pointers are: vector code loads <n x T> through it
        self.buffers[s.name] = (arr, s.dtype, True)

    def stmt_barrier(self, s: k.Barrier) -> None:
        """A CPU workgroup is one invocation: there is nothing to wait for."""

    # -- expressions ----------------------------------------------------------------------------
    def expr(self, e: k.Expr) -> ir.Value:
        if self.lanes is not None:
            return self.lanes.expr(e)
        if type(e) is k.Binary and e.dtype == k.INDEX:
            return self.index_expr(e)
        return getattr(self, "expr_" + type(e).__name__.lower())(e)

    def index_expr(self, e: k.Binary) -> ir.Value:
        """Index arithmetic, emitted once per block while the variables it reads keep their values: the
        taps of an unrolled tile repeat most of their address arithmetic (LLVM would merge it anyway, but
        building and parsing it costs compile time)."""
        value = self.recall(e)
        if value is None:
            value = self.expr_binary(e)
            if not loads_from(e):
                self.remember(e, e, value)
        return value

    def recall(self, key) -> ir.Value | None:
        """The value remembered for `key` in this block, if the variables it read still hold the same values."""
        hit = self.computed.get(key)
        if hit is not None and hit[1] is self.b.block and all(self.versions.get(v, 0) == n for v, n in hit[2]):
            return hit[0]
        return None

    def remember(self, key, e: k.Expr, value: ir.Value) -> None:
        """`value` (of expression `e`, emitted in the current block) for `recall`."""
        self.computed[key] = (value, self.b.block, tuple((v, self.versions.get(v, 0)) for v in free_vars(e)))

    @staticmethod
    def expr_type(dt: DType) -> ir.Type:
        return compute_type(dt)

    def expr_const(self, e: k.Const) -> ir.Value:
        ty = compute_type(e.dtype)
        if e.dtype.is_float:
            return ir.Constant(ty, float(np.array(e.value, dtype=e.dtype.np_dtype).astype(np.float64)))
        if e.dtype.kind == "bool":
            return ir.Constant(I1, int(bool(e.value)))
        return ir.Constant(ty, int(e.value))

    def expr_var(self, e: k.Var) -> ir.Value:
        if e.name in self.index_vars:
            return self.index_vars[e.name]
        if e.name in self.vars:
            slot, ty = self.vars[e.name]
            return self.b.load(slot, name=e.name, typ=ty)
        raise UnsupportedOpError(f"kernel {self.kernel.name}: variable %{e.name} is read before it is defined")

    def expr_load(self, e: k.Load) -> ir.Value:
        ptr, dt, local = self.buffers[e.buffer]
        elem = compute_type(dt) if local else storage_type(dt)
        addr = self.b.gep(ptr, [self.expr(e.index)], inbounds=True, source_etype=elem)
        raw = self.b.load(addr, typ=elem)
        value = raw if local else self.from_storage(raw, dt)
        return self.convert(value, dt, e.dtype)

    def expr_cast(self, e: k.Cast) -> ir.Value:
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def expr_select(self, e: k.Select) -> ir.Value:
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def expr_compare(self, e: k.Compare) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        if dt.is_float:
            op = FLOAT_CMP[e.op]
            # numpy: NaN compares unequal to everything, so `ne` is the one unordered compare.
            if e.op == "ne":
                return self.b.fcmp_unordered(op, a, b)
            return self.b.fcmp_ordered(op, a, b)
        if dt.kind in ("uint", "bool"):
            return self.b.icmp_unsigned(FLOAT_CMP[e.op], a, b)
        return self.b.icmp_signed(FLOAT_CMP[e.op], a, b)

    def expr_unary(self, e: k.Unary) -> ir.Value:
        x = self.expr(e.a)
        dt, b, op = e.a.dtype, self.b, e.op
        if dt.is_float:
            ty = x.type
            one = ir.Constant(ty, 1.0)
            if op == "neg":
                return b.fneg(x, flags=FAST)
            single = (ty.element if isinstance(ty, ir.VectorType) else ty) == F32
            if single and op in ("exp", "sigmoid", "tanh", "log", "log1p", "expm1", "sin", "cos", "tan", "atan"):
                if op in ("sin", "cos", "tan"):  # vector code, not libm a lane
                    return self.sin_cos_f32(x, op)
                if op == "atan":
                    return self.atan_f32(x)
                if op == "exp":
                    return self.exp_f32(x)
                if op == "log":
                    return self.log_f32(x)
                if op in ("log1p", "expm1"):
                    return self.log1p_f32(x) if op == "log1p" else self.expm1_f32(x)
                if op == "sigmoid":
                    return b.fdiv(one, b.fadd(one, self.exp_f32(b.fneg(x))))
                return self.tanh_f32(x)
            if op in INTRINSIC_UNARY:
                return b.call(self.mb.intrinsic(INTRINSIC_UNARY[op], [ty]), [x], fastmath=FAST)
            if op == "erf" and (ty.element if isinstance(ty, ir.VectorType) else ty) == F32:
                return self.erf_f32(x)
            if op in LIBM_UNARY:
                return self.per_lane(lambda v: b.call(self.mb.libm(LIBM_UNARY[op], v.type, 1), [v]), x)
            if op == "rsqrt":
                return b.fdiv(one, b.call(self.mb.intrinsic("llvm.sqrt", [ty]), [x], fastmath=FAST), flags=FAST)
            if op == "reciprocal":
                return b.fdiv(one, x, flags=FAST)
            if op == "sigmoid":
                e_ = b.call(self.mb.intrinsic("llvm.exp", [ty]), [b.fneg(x, flags=FAST)], fastmath=FAST)
                return b.fdiv(one, b.fadd(one, e_, flags=FAST), flags=FAST)
            if op == "sign":
                zero = ir.Constant(ty, 0.0)
                neg = b.select(b.fcmp_ordered("<", x, zero), ir.Constant(ty, -1.0), x)
                return b.select(b.fcmp_ordered(">", x, zero), one, neg)
        else:
            ty = x.type
            if op == "neg":
                return b.neg(x)
            if op == "abs" and dt.kind == "int":
                return b.call(self.mb.module.declare_intrinsic("llvm.abs", [ty], ir.FunctionType(ty, [ty, I1])),
                              [x, ir.Constant(I1, 0)])
            if op == "abs":
                return x
            if op == "not":
                return b.not_(x)
            if op == "sign":
                zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
                if dt.kind == "bool":
                    return x
                cmp = b.icmp_unsigned if dt.kind == "uint" else b.icmp_signed
                neg = b.select(cmp("<", x, zero), ir.Constant(ty, -1), zero)
                return b.select(cmp(">", x, zero), one, neg)
        raise UnsupportedOpError(f"llvm-cpu: unary op '{op}' on {dt} is not supported")

    def expr_binary(self, e: k.Binary) -> ir.Value:
        a, c = self.expr(e.a), self.expr(e.b)
        dt, b, op = e.a.dtype, self.b, e.op
        if dt.is_float:
            ty = a.type
            simple = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv, "rem": b.frem}
            if op in simple:
                return simple[op](a, c, flags=FAST)
            if op in ("max", "min", "pow"):
                # llvm.maximum/minimum propagate NaN, as np.maximum does.
                name = {"max": "llvm.maximum", "min": "llvm.minimum", "pow": "llvm.pow"}[op]
                return b.call(self.mb.intrinsic(name, [ty]), [a, c], fastmath=FAST)
            if op in LIBM_BINARY:
                return b.call(self.mb.libm(LIBM_BINARY[op], ty, 2), [a, c])
        else:
            ty = a.type
            unsigned = dt.kind in ("uint", "bool")
            simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "and": b.and_, "or": b.or_, "xor": b.xor}
            if op in simple:
                return simple[op](a, c)
            if op == "shr":
                return b.lshr(a, c) if unsigned else b.ashr(a, c)
            if op in ("div", "rem"):
                # x / 0 is x and x % 0 is 0 (as the reference), never a trap; so is MIN / -1.
                zero = b.icmp_unsigned("==", c, ir.Constant(ty, 0))
                safe = b.select(zero, ir.Constant(ty, 1), c)
                if not unsigned:
                    overflow = b.and_(b.icmp_signed("==", a, ir.Constant(ty, -(1 << (ty.width - 1)))),
                                      b.icmp_signed("==", c, ir.Constant(ty, -1)))
                    safe = b.select(overflow, ir.Constant(ty, 1), safe)
                    if op == "div":
                        q = b.sdiv(a, safe)
                        return q  # MIN / -1 wraps to MIN, as numpy's does
                    r = b.srem(a, safe)
                    return b.select(overflow, ir.Constant(ty, 0), r)
                return b.udiv(a, safe) if op == "div" else b.urem(a, safe)
            if op in ("max", "min"):
                cmp = b.icmp_unsigned if unsigned else b.icmp_signed
                return b.select(cmp(">" if op == "max" else "<", a, c), a, c)
            if op == "pow":
                return self.integer_pow(a, c, unsigned)
        raise UnsupportedOpError(f"llvm-cpu: binary op '{op}' on {dt} is not supported")

    def integer_pow(self, base: ir.Value, exponent: ir.Value, unsigned: bool) -> ir.Value:
        """base ** exponent, wrapping as numpy's does: square-and-multiply over the exponent's bits, with no branch
        (a select a bit), so that it stays straight-line code. A negative exponent gives 1 for 1, +-1 for -1 by
        its parity, and 0 for any other base (as the reference and the C-like targets compute it)."""
        b, ty = self.b, base.type
        one, zero = ir.Constant(ty, 1), ir.Constant(ty, 0)
        result, power = one, base
        for bit in range(ty.width if unsigned else ty.width - 1):
            if bit:
                power = b.mul(power, power)
            taken = b.icmp_unsigned("!=", b.and_(exponent, ir.Constant(ty, 1 << bit)), zero)
            result = b.select(taken, b.mul(result, power), result)
        if unsigned:
            return result
        odd = b.icmp_unsigned("!=", b.and_(exponent, one), zero)
        minus_one = ir.Constant(ty, -1)
        reciprocal = b.select(b.icmp_signed("==", base, one), one,
                              b.select(b.icmp_signed("==", base, minus_one), b.select(odd, minus_one, one), zero))
        return b.select(b.icmp_signed("<", exponent, zero), reciprocal, result)

    def erf_f32(self, x: ir.Value) -> ir.Value:
        """erf as a rational function of x clamped to [-4, 4] (Eigen's and XLA's float erf; within
        5e-7 of erf), so that it vectorizes instead of calling erff per lane; NaN stays NaN."""
        b, ty = self.b, x.type
        clamp = [self.mb.intrinsic(n, [ty]) for n in ("llvm.maximum", "llvm.minimum")]
        x = b.call(clamp[1], [b.call(clamp[0], [x, ir.Constant(ty, -4.0)]), ir.Constant(ty, 4.0)])
        x2 = b.fmul(x, x, flags=FAST)

        def horner(coefficients):
            acc = ir.Constant(ty, coefficients[0])
            for c in coefficients[1:]:
                acc = b.fadd(b.fmul(acc, x2, flags=FAST), ir.Constant(ty, c), flags=FAST)
            return acc

        p = b.fmul(x, horner(ERF_P), flags=FAST)
        return b.fdiv(p, horner(ERF_Q), flags=FAST)

    def sin_cos_f32(self, x: ir.Value, which: str) -> ir.Value:
        """Cephes' sinf or cosf in vector code (as the SPIR-V emitter's), or tan as their ratio: x reduced by pi/4 in
        three parts, exact while |x| < TRIG_EXACT_BELOW, then polynomials on [-pi/4, pi/4]; within 2 ulp (tan 3).
        Lanes past that (and inf, NaN) take libm's, on a branch taken only when a vector holds one, so that the
        common case stays vector code."""
        b, ty = self.b, x.type
        vector = isinstance(ty, ir.VectorType)
        ity = ir.VectorType(I32, ty.count) if vector else I32

        def f(v):
            return ir.Constant(ty, v)

        def i(v):
            return ir.Constant(ity, v)

        magnitude = b.call(self.mb.intrinsic("llvm.fabs", [ty]), [x])
        far = b.fcmp_unordered("uge", magnitude, f(TRIG_EXACT_BELOW))  # NaN too
        reduced = b.select(far, f(0.0), magnitude)  # (fptosi of a far lane would be poison)
        j = b.fptosi(b.fmul(reduced, f(4 / math.pi)), ity)
        j = b.add(j, b.and_(j, i(1)))  # to even
        y = b.sitofp(j, ty)
        octant = b.and_(j, i(7))
        r = reduced
        for part in PI_4_PARTS:
            r = b.fsub(r, b.fmul(y, f(part)))
        z = b.fmul(r, r)

        def poly(coefficients):
            acc = f(coefficients[0])
            for c in coefficients[1:]:
                acc = b.fadd(b.fmul(acc, z), f(c))
            return acc

        sin_r = b.fadd(r, b.fmul(b.fmul(r, z), poly(SIN_P)))
        cos_r = b.fadd(b.fsub(f(1.0), b.fmul(f(0.5), z)), b.fmul(b.fmul(z, z), poly(COS_P)))
        swap = b.icmp_signed("==", b.and_(octant, i(3)), i(2))  # octants 2 and 6 (j is even)
        upper = b.icmp_signed(">", octant, i(3))
        below = b.fcmp_ordered("<", x, f(0.0))
        if which == "sin":
            value = b.select(swap, cos_r, sin_r)
            negative = b.xor(upper, below)
        elif which == "cos":
            value = b.select(swap, sin_r, cos_r)
            negative = b.xor(upper, swap)
        else:  # tan: sin / cos, whose signs agree in octants 0 and 4 and differ in 2 and 6
            value = b.fdiv(b.select(swap, cos_r, sin_r), b.select(swap, sin_r, cos_r))
            negative = b.xor(swap, below)
        fast = b.select(negative, b.fneg(value), value)
        mask = ir.VectorType(I1, ty.count) if vector else I1
        any_far = b.call(self.mb.declare(f"llvm.vector.reduce.or.{_mangle(mask)}", ir.FunctionType(I1, [mask])),
                         [far]) if vector else far
        before = b.block
        slow_block = self.fn.append_basic_block(f"{which}.far")
        done = self.fn.append_basic_block(f"{which}.done")
        b.cbranch(any_far, slow_block, done)
        b.position_at_end(slow_block)
        libm = self.per_lane(lambda v: b.call(self.mb.libm(which, v.type, 1), [v]), x)
        slow = b.select(far, libm, fast)
        slow_end = b.block
        b.branch(done)
        b.position_at_end(done)
        out = b.phi(ty)
        out.add_incoming(fast, before)
        out.add_incoming(slow, slow_end)
        return out

    def atan_f32(self, x: ir.Value) -> ir.Value:
        """Cephes' atanf in vector code (as the SPIR-V emitter's): |x| reduced to [0, tan(pi/8)], an odd polynomial,
        the reduction's angle added back; within 2 ulp, +-inf give +-pi/2, NaN stays NaN."""
        b, ty = self.b, x.type

        def f(v):
            return ir.Constant(ty, v)

        magnitude = b.call(self.mb.intrinsic("llvm.fabs", [ty]), [x])
        big = b.fcmp_ordered(">", magnitude, f(TAN_3PI_8))
        mid = b.fcmp_ordered(">", magnitude, f(TAN_PI_8))
        reduced = b.select(mid, b.fdiv(b.fsub(magnitude, f(1.0)), b.fadd(magnitude, f(1.0))), magnitude)
        reduced = b.select(big, b.fdiv(f(-1.0), magnitude), reduced)
        offset = b.select(big, f(math.pi / 2), b.select(mid, f(math.pi / 4), f(0.0)))
        z = b.fmul(reduced, reduced)
        poly = f(ATAN_P[0])
        for c in ATAN_P[1:]:
            poly = b.fadd(b.fmul(poly, z), f(c))
        value = b.fadd(offset, b.fadd(b.fmul(b.fmul(poly, z), reduced), reduced))
        value = b.select(b.fcmp_ordered("<", x, f(0.0)), b.fneg(value), value)
        return b.select(b.fcmp_unordered("uno", x, x), x, value)

    def exp_f32(self, x: ir.Value) -> ir.Value:
        """exp in f32 that vectorizes (LLVM turns llvm.exp of a vector into an expf call a lane): x = n ln2 + r with
        |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), Cephes' polynomial for e^r, times 2^n built from its bits, in
        two halves so that results below the normal range come out subnormal. Within 2 ulp of exp; 0 below -104,
        inf past 88.8, NaN stays NaN."""
        b, ty = self.b, x.type
        ity = ir.VectorType(I32, ty.count) if isinstance(ty, ir.VectorType) else I32
        fma = self.mb.intrinsic("llvm.fma", [ty])
        clamped = b.call(self.mb.intrinsic("llvm.minimum", [ty]),
                         [b.call(self.mb.intrinsic("llvm.maximum", [ty]), [x, ir.Constant(ty, -104.0)]),
                          ir.Constant(ty, 88.8)])
        n = b.call(self.mb.intrinsic("llvm.roundeven", [ty]), [b.fmul(clamped, ir.Constant(ty, 1.4426950408889634))])
        r = b.call(fma, [n, ir.Constant(ty, -0.693359375), clamped])
        r = b.call(fma, [n, ir.Constant(ty, 2.12194440e-4), r])
        poly = ir.Constant(ty, EXP_P[0])
        for c in EXP_P[1:]:
            poly = b.call(fma, [poly, r, ir.Constant(ty, c)])
        y = b.fadd(b.call(fma, [poly, b.fmul(r, r), r]), ir.Constant(ty, 1.0))
        nan = b.fcmp_unordered("uno", x, x)
        whole = b.fptosi(b.select(nan, ir.Constant(ty, 0.0), n), ity)  # (fptosi of NaN would be poison)
        half = b.ashr(whole, ir.Constant(ity, 1))

        def power_of_two(e):  # 2^e for e in [-126, 127]
            return b.bitcast(b.shl(b.add(e, ir.Constant(ity, 127)), ir.Constant(ity, 23)), ty)

        y = b.fmul(b.fmul(y, power_of_two(half)), power_of_two(b.sub(whole, half)))
        return b.select(nan, x, y)

    def log_f32(self, x: ir.Value) -> ir.Value:
        """Cephes' logf in vector code: x = m 2^e with m in [sqrt(1/2), sqrt(2)) read from its bits (subnormal x
        scaled by 2^23 first), a polynomial in m - 1, and e ln2 in two parts. Within 1 ulp of log; log(0) = -inf,
        log(inf) = inf, NaN below 0."""
        b, ty = self.b, x.type
        ity = ir.VectorType(I32, ty.count) if isinstance(ty, ir.VectorType) else I32

        def f(v):
            return ir.Constant(ty, v)

        def i(v):
            return ir.Constant(ity, v)

        subnormal = b.fcmp_ordered("<", x, f(1.1754943508222875e-38))
        scaled = b.select(subnormal, b.fmul(x, f(8388608.0)), x)
        bits = b.bitcast(scaled, ity)
        exponent = b.sub(b.lshr(bits, i(23)), b.select(subnormal, i(126 + 23), i(126)))
        m = b.bitcast(b.or_(b.and_(bits, i(0x007FFFFF)), i(0x3F000000)), ty)  # in [0.5, 1)
        low = b.fcmp_ordered("<", m, f(0.707106781186547524))
        exponent = b.sub(exponent, b.zext(low, ity))
        m = b.fsub(b.select(low, b.fadd(m, m), m), f(1.0))
        e = b.sitofp(exponent, ty)
        z = b.fmul(m, m)
        poly = f(LOG_P[0])
        for c in LOG_P[1:]:
            poly = b.fadd(b.fmul(poly, m), f(c))
        y = b.fmul(b.fmul(m, z), poly)
        y = b.fadd(y, b.fmul(e, f(-2.12194440e-4)))
        y = b.fsub(y, b.fmul(z, f(0.5)))
        y = b.fadd(b.fadd(m, y), b.fmul(e, f(0.693359375)))
        y = b.select(b.fcmp_ordered("==", x, f(math.inf)), x, y)
        y = b.select(b.fcmp_ordered("==", x, f(0.0)), f(-math.inf), y)
        return b.select(b.fcmp_unordered("ult", x, f(0.0)), f(math.nan), y)  # below 0, or NaN

    def log1p_f32(self, x: ir.Value) -> ir.Value:
        """Goldberg's log1p: log(u) * x / (u - 1) with u = 1 + x (exact where 1 + x rounds), x itself where u is 1,
        log(u) where u is inf or NaN. (GPU targets take a polynomial near 0, where a driver's log is not accurate
        enough; `log_f32` is within 1 ulp there.)"""
        b, ty = self.b, x.type
        one = ir.Constant(ty, 1.0)
        u = b.fadd(one, x)
        log_u = self.log_f32(u)
        y = b.fmul(log_u, b.fdiv(x, b.fsub(u, one)))
        y = b.select(b.fcmp_ordered("==", u, one), x, y)
        return b.select(self.not_finite(u), log_u, y)

    def expm1_f32(self, x: ir.Value) -> ir.Value:
        """Kahan's expm1: (u - 1) * (x / log(u)) with u = e^x, x itself where u is 1, u where it is inf or NaN, -1 where
        u - 1 is (GPU targets, as `log1p_f32` says, take a polynomial near 0)."""
        b, ty = self.b, x.type
        one = ir.Constant(ty, 1.0)
        u = self.exp_f32(x)
        y = b.fmul(b.fsub(u, one), b.fdiv(x, self.log_f32(u)))  # x / log(u) first: (u - 1) x overflows past 85
        y = b.select(b.fcmp_ordered("==", b.fsub(u, one), ir.Constant(ty, -1.0)), ir.Constant(ty, -1.0), y)
        y = b.select(b.fcmp_ordered("==", u, one), x, y)
        return b.select(self.not_finite(u), u, y)

    def not_finite(self, u: ir.Value) -> ir.Value:
        """u is inf or NaN: u - u is NaN."""
        difference = self.b.fsub(u, u)
        return self.b.fcmp_unordered("uno", difference, difference)

    def tanh_f32(self, x: ir.Value) -> ir.Value:
        """Cephes' tanhf: an odd polynomial below 0.625 in magnitude, 1 - 2 / (e^2|x| + 1) (`exp_f32`) above; NaN
        stays NaN, +-inf give +-1."""
        b, ty = self.b, x.type
        magnitude = b.call(self.mb.intrinsic("llvm.fabs", [ty]), [x])
        z = b.fmul(x, x)
        poly = ir.Constant(ty, TANH_P[0])
        for c in TANH_P[1:]:
            poly = b.fadd(b.fmul(poly, z), ir.Constant(ty, c))
        small = b.fadd(x, b.fmul(b.fmul(x, z), poly))
        e = self.exp_f32(b.fadd(magnitude, magnitude))
        large = b.fsub(ir.Constant(ty, 1.0), b.fdiv(ir.Constant(ty, 2.0), b.fadd(e, ir.Constant(ty, 1.0))))
        large = b.select(b.fcmp_ordered("<", x, ir.Constant(ty, 0.0)), b.fneg(large), large)
        return b.select(b.fcmp_ordered("<", magnitude, ir.Constant(ty, 0.625)), small, large)

    def per_lane(self, fn, x: ir.Value) -> ir.Value:
        """`fn` (scalar -> scalar) applied to each lane of a vector, or to a scalar."""
        if not isinstance(x.type, ir.VectorType):
            return fn(x)
        out = ir.Constant(x.type, ir.Undefined)
        for i in range(x.type.count):
            lane = ir.Constant(I32, i)
            out = self.b.insert_element(out, fn(self.b.extract_element(x, lane)), lane)
        return out

    # -- conversions ----------------------------------------------------------------------------
    def convert(self, x: ir.Value, src: DType, dst: DType, round_half: bool = True) -> ir.Value:
        """A value of dtype `src` as `dst`. A cast to f16/bf16 rounds (the value is then held in
        f32); `round_half=False` leaves that to a store, which rounds anyway."""
        if round_half and dst.name in ("f16", "bf16") and src.name != dst.name:
            x = self.convert(x, src, DTYPE_F32)
            return self.from_storage(self.to_storage(x, dst), dst)
        b = self.b
        to = compute_type(dst)
        lanes = x.type.count if isinstance(x.type, ir.VectorType) else 0
        have = x.type.element if lanes else x.type
        if have == to and src.kind == dst.kind:
            return x
        if lanes:  # vectorize.py admits no cast to bool or from or to a half type here
            vto = ir.VectorType(to, lanes)
            if src.is_float and dst.is_float:
                return b.fpext(x, vto) if have == F32 and to == F64 else b.fptrunc(x, vto)
            if src.is_float:
                return _saturating_vector_cast(b, x, vto, dst)
            if dst.is_float:
                return b.uitofp(x, vto) if src.kind in ("uint", "bool") else b.sitofp(x, vto)
            if have.width == to.width:
                return x
            if have.width > to.width:
                return b.trunc(x, vto)
            return b.zext(x, vto) if src.kind in ("uint", "bool") else b.sext(x, vto)
        if dst.kind == "bool":
            if src.is_float:
                return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
            return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
        if src.is_float and dst.is_float:
            if x.type == to:
                return x
            return b.fpext(x, to) if x.type == F32 and to == F64 else b.fptrunc(x, to)
        if src.is_float:
            name = "llvm.fptoui.sat" if dst.kind == "uint" else "llvm.fptosi.sat"
            fn = self.mb.module.declare_intrinsic(name, [to, x.type], ir.FunctionType(to, [x.type]))
            return b.call(fn, [x])
        if dst.is_float:
            return b.uitofp(x, to) if src.kind in ("uint", "bool") else b.sitofp(x, to)
        if x.type.width == to.width:
            return x
        if x.type.width > to.width:
            return b.trunc(x, to)
        return b.zext(x, to) if src.kind in ("uint", "bool") else b.sext(x, to)

    def from_storage(self, raw: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        if dt.name == "bf16":
            return b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
        if dt.name == "f16":
            if self.mb.native_half:
                return b.fpext(raw, F32)
            return b.call(self.mb.helper("retarget.f16_to_f32", _f16_to_f32), [b.bitcast(raw, I16)])
        if dt.kind == "bool":
            return b.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
        return raw

    def to_storage(self, x: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        if dt.name == "bf16":
            return b.call(self.mb.helper("retarget.f32_to_bf16", _f32_to_bf16), [x])
        if dt.name == "f16":
            if self.mb.native_half:
                return b.fptrunc(x, F16)
            return b.bitcast(b.call(self.mb.helper("retarget.f32_to_f16", _f32_to_f16), [x]), F16)
        if dt.kind == "bool":
            return b.zext(x, I8)
        return x


# -- half-precision helpers (bit-exact, round to nearest even) -----------------------------------


def _helper(module, name, ret, arg):
    fn = ir.Function(module, ir.FunctionType(ret, [arg]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    return fn, ir.IRBuilder(fn.append_basic_block("entry")), fn.args[0]


def _c(ty, v):
    return ir.Constant(ty, v)


def _saturating_vector_cast(b: ir.IRBuilder, x: ir.Value, vto: ir.VectorType, dst: DType) -> ir.Value:
    """Float lanes to `dst` as `llvm.fptosi.sat` does (out-of-range values saturate, NaN becomes 0), which x86's
    backend scalarizes, a convert and two compares a lane: a plain vector convert of the lanes in range instead, and
    two selects. The bounds are powers of two, exact in any float type."""
    info = np.iinfo(dst.np_dtype)
    fty, n = x.type, vto.count
    low, high = (_c(fty, float(v)) for v in (info.min, info.max + 1))
    low_ok = b.fcmp_ordered(">=" if info.min else ">", x, low if info.min else _c(fty, -1.0))
    ok = b.and_(low_ok, b.fcmp_ordered("<", x, high))
    safe = b.select(ok, x, _c(fty, [0.0] * n))
    cast = b.fptoui(safe, vto) if dst.kind == "uint" else b.fptosi(safe, vto)
    out = b.select(b.fcmp_ordered(">=", x, high), _c(vto, [info.max] * n), cast)
    return b.select(b.fcmp_ordered("<", x, low), _c(vto, [info.min] * n), out) if info.min else out


def _f32_to_bf16(module, name):
    fn, b, x = _helper(module, name, I16, F32)
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, _c(I32, 16)), _c(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(_c(I32, 0x7FFF), lsb)), _c(I32, 16))
    quiet = b.or_(b.lshr(bits, _c(I32, 16)), _c(I32, 0x40))
    isnan = b.fcmp_unordered("uno", x, x)
    b.ret(b.trunc(b.select(isnan, quiet, rounded), I16))
    return fn


def _f16_to_f32(module, name):
    fn, b, h = _helper(module, name, F32, I16)
    h32 = b.zext(h, I32)
    sign = b.shl(b.and_(h32, _c(I32, 0x8000)), _c(I32, 16))
    exp = b.and_(b.lshr(h32, _c(I32, 10)), _c(I32, 0x1F))
    man = b.and_(h32, _c(I32, 0x3FF))
    # normal: rebias; inf/nan: all-ones exponent; subnormal/zero: exact via float math
    normal = b.or_(b.shl(b.add(exp, _c(I32, 112)), _c(I32, 23)), b.shl(man, _c(I32, 13)))
    special = b.or_(_c(I32, 0x7F800000), b.shl(man, _c(I32, 13)))
    sub = b.fmul(b.uitofp(man, F32), _c(F32, 2.0 ** -24))
    sub_bits = b.bitcast(sub, I32)
    mag = b.select(b.icmp_unsigned("==", exp, _c(I32, 0x1F)), special, normal)
    mag = b.select(b.icmp_unsigned("==", exp, _c(I32, 0)), sub_bits, mag)
    b.ret(b.bitcast(b.or_(sign, mag), F32))
    return fn


def _f32_to_f16(module, name):
    fn, b, x = _helper(module, name, I16, F32)
    bits = b.bitcast(x, I32)
    sign = b.and_(b.lshr(bits, _c(I32, 16)), _c(I32, 0x8000))
    absbits = b.and_(bits, _c(I32, 0x7FFFFFFF))
    absf = b.bitcast(absbits, F32)
    # subnormal results (|x| < 2^-14): round |x| * 2^24 to an integer, nearest even
    small = b.fptoui(b.call(module.declare_intrinsic("llvm.roundeven", [F32]), [b.fmul(absf, _c(F32, 2.0 ** 24))]), I32)
    # normal results: rebias and round the 13 dropped mantissa bits to nearest even
    lsb = b.and_(b.lshr(absbits, _c(I32, 13)), _c(I32, 1))
    normal = b.lshr(b.sub(b.add(absbits, b.add(_c(I32, 0xFFF), lsb)), _c(I32, 112 << 23)), _c(I32, 13))
    normal = b.select(b.icmp_unsigned(">=", normal, _c(I32, 0x7C00)), _c(I32, 0x7C00), normal)  # overflow -> inf
    nan = b.or_(_c(I32, 0x7E00), b.and_(b.lshr(absbits, _c(I32, 13)), _c(I32, 0x3FF)))
    out = b.select(b.icmp_unsigned("<", absbits, _c(I32, 113 << 23)), small, normal)
    out = b.select(b.icmp_unsigned(">", absbits, _c(I32, 0x7F800000)), nan, out)
    b.ret(b.trunc(b.or_(sign, out), I16))
    return fn


# -- optimise and emit ---------------------------------------------------------------------------

_initialized = False


def _init():
    global _initialized
    if not _initialized:
        import llvmlite.binding as llvm

        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


def target_machine(triple: str, cpu: str, features: tuple[str, ...], *, jit: bool = False):
    import llvmlite.binding as llvm

    _init()
    target = llvm.Target.from_triple(triple)
    flat = ",".join("+" + f for f in features)
    # The large code model: MCJIT maps code and data sections wherever it finds memory, and in a big
    # process they can land more than 2 GB apart, where the small model's 32-bit relocations overflow
    # and LLVM aborts the whole process.
    return target.create_target_machine(cpu=cpu, features=flat, opt=3, reloc="pic", codemodel="large", jit=jit)


def llvm_ir(kernels: list[k.Kernel], triple: str, features: tuple[str, ...], name: str = "retarget") -> str:
    mb = ModuleBuilder(name, triple, features)
    for kernel in kernels:
        mb.add(kernel)
    return str(mb.module)


def optimize(text: str, tm):
    import llvmlite.binding as llvm

    mod = llvm.parse_assembly(text)
    mod.triple = tm.triple if hasattr(tm, "triple") else mod.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


GROUP_TEXT = 24_000  # characters of printed kernels a group of a large module gets (see emit_object)
MAX_GROUPS = 8


def emit_object(kernels: list[k.Kernel], triple: str, cpu: str, features: tuple[str, ...]) -> bytes:
    """Kernels -> one relocatable object for (triple, cpu, features).

    A large module is built and optimised in groups of kernels, each its own LLVM module, linked before the
    object is emitted: while LLVM optimises one group on a thread (its native code runs without the GIL),
    Python builds the next, so that building and optimising overlap (ResNet-18: 1.2 s and 1.4 s)."""
    tm = target_machine(triple, cpu, features)
    groups = _groups(kernels)
    if len(groups) == 1:
        return tm.emit_object(optimize(llvm_ir(kernels, triple, features), tm))
    with ThreadPoolExecutor(1) as llvm:  # one: llvmlite lets one thread into LLVM at a time
        optimized = [llvm.submit(optimize, llvm_ir(group, triple, features, f"retarget.{i}"), tm)
                     for i, group in enumerate(groups)]
        modules = [future.result() for future in optimized]
    linked = modules[0]
    for module in modules[1:]:
        linked.link_in(module)
    return tm.emit_object(linked)


def _groups(kernels: list[k.Kernel]) -> list[list[k.Kernel]]:
    """Kernels in groups of about GROUP_TEXT printed characters (at most MAX_GROUPS), in order; kernels that
    differ only in name stay in one group, where they share one body."""
    bodies: dict[str, list[k.Kernel]] = {}
    for kernel in kernels:
        bodies.setdefault(_body_key(kernel), []).append(kernel)
    total = sum(len(text) for text in bodies)
    size = max(GROUP_TEXT, -(-total // MAX_GROUPS))
    groups, filled = [[]], 0
    for text, twins in bodies.items():
        if filled >= size:
            groups.append([])
            filled = 0
        groups[-1] += twins
        filled += len(text)
    return groups


def assembly(kernels: list[k.Kernel], triple: str, cpu: str, features: tuple[str, ...]) -> str:
    """The optimised kernels as assembly text, for reading what LLVM made of them."""
    tm = target_machine(triple, cpu, features)
    return tm.emit_assembly(optimize(llvm_ir(kernels, triple, features), tm))
