"""Kernel IR to C-like source: one renderer, and one `Dialect` table per language.

C99 (for tests on the CPU), CUDA, HIP, OpenCL C, MSL and WGSL differ only in data: the
type spellings, how a kernel and its buffers are declared, how workgroup and
thread ids are spelled, the barrier, the shared-memory prefix, a table from op
to expression template, and helper functions for what a language lacks. A new
language costs a table (`dataclasses.replace` of a close one), not code.

Semantics follow `retarget.vmvx.kernels` (numpy) and the llvm-cpu backend:
f16/bf16 are stored as such and computed in f32; float max/min propagate NaN;
integer div/rem truncate, and x/0 is x, x%0 is 0, MIN/-1 is MIN; float to int
casts saturate (NaN -> 0); integers narrower than 32 bits wrap after each op.

Fragments (the matrix-multiply-accumulate intrinsic, see `ir.Fragment`) are data too: a dialect
whose hardware has them spells them with a `FragmentSpelling` (MSL: simdgroup_matrix; CUDA:
nvcuda::wmma), for the shapes and types it lists. A kernel with any other fragment, and every
kernel in a dialect without a spelling (C99, OpenCL, HIP, WGSL), gets the portable expansion
(`portable.expand_fragments`: per-thread register arrays and multiply-add loops), never a refusal.
A dialect without threads (C99) runs a workgroup with barriers as loops over its threads, split
at the barriers (`portable.serialize_threads`).

Templates: op templates use `str.format` fields `{0}`, `{1}` (operands), `{T}`
(the C type), `{s}` (the dtype name, for helper names) and `{f}` (the libm
suffix of f32: `expf` in C and CUDA, `exp` in OpenCL and MSL). Helper bodies
are C braces-heavy, so they use `string.Template` (`$T`, `$s`, `$f`, `$Q`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from string import Template

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.dtypes import DTYPES, DType
from . import ir as k
from .approximations import ERF_P, ERF_Q, EXP_P, EXPM1_NEAR, LOG1P_NEAR, LOG_P, TANH_P
from .index32 import I32, as_i32, fits, narrow_indices
from .narrow import NARROW_TYPES
from .portable import expand_fragments, expand_vector_copies, serialize_threads, vector_copy_elements

F32 = DTYPES["f32"]
HALVES = ("f16", "bf16")  # stored as such, computed in f32
XYZ = "xyz"
CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}  # C's `!=` is true for NaN, as numpy's

# Op templates, looked up as `op.kind` (kind: float, int, uint, bool; uint and bool fall back to
# `op.int`), then `op`. What is missing for a dtype's kind is unsupported there.
C_OPS = {
    "neg": "(-{0})",
    "abs.float": "fabs{f}({0})", "abs.int": "rt_abs_{s}({0})", "abs.uint": "{0}", "abs.bool": "{0}",
    **{f"{op}.float": f"{op}{{f}}({{0}})" for op in
       ("exp", "log", "sqrt", "tanh", "floor", "ceil", "sin", "cos", "tan", "atan", "erf", "log1p", "expm1")},
    "rsqrt.float": "(({T})1 / sqrt{f}({0}))",
    "reciprocal.float": "(({T})1 / {0})",
    "sigmoid.float": "rt_sigmoid_{s}({0})",
    "round.float": "rint{f}({0})",  # rounds half to even in the default rounding mode, as np.round
    "sign.float": "rt_sign_{s}({0})", "sign.int": "rt_sign_{s}({0})", "sign.uint": "(({T})({0} != 0))",
    "sign.bool": "{0}",
    "not.int": "(~{0})", "not.bool": "(!{0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
    "div.float": "({0} / {1})", "div.int": "rt_div_{s}({0}, {1})",
    "rem.float": "fmod{f}({0}, {1})", "rem.int": "rt_rem_{s}({0}, {1})",
    "pow.float": "pow{f}({0}, {1})", "pow.int": "rt_pow_{s}({0}, {1})",
    "max": "rt_max_{s}({0}, {1})", "min": "rt_min_{s}({0}, {1})",
    "and.int": "({0} & {1})", "or.int": "({0} | {1})", "xor.int": "({0} ^ {1})",
    "shr.int": "({0} >> {1})",  # arithmetic for signed types (every C compiler we target), logical for unsigned
    "atan2.float": "atan2{f}({0}, {1})",
}
# Where a language lacks a libm function, these helpers stand in (MSL has no erf, log1p, expm1).
FALLBACK_OPS = {"erf.float": "rt_erf_{s}({0})", "log1p.float": "rt_log1p_{s}({0})",
                "expm1.float": "rt_expm1_{s}({0})"}

# Helpers, instantiated per dtype of a kind: (name, kinds, body). Only those a module calls are emitted.


def _horner(coefficients, var: str = "x2") -> str:
    out = f"($T){coefficients[0]!r}"
    for c in coefficients[1:]:
        out = f"({out} * {var} + ($T){c!r})"
    return out


HELPERS = [
    ("rt_max_$s", ("float",), "$Q $T rt_max_$s($T a, $T b) { return a != a ? a : b != b ? b : a > b ? a : b; }"),
    ("rt_min_$s", ("float",), "$Q $T rt_min_$s($T a, $T b) { return a != a ? a : b != b ? b : a < b ? a : b; }"),
    ("rt_max_$s", ("int", "uint", "bool"), "$Q $T rt_max_$s($T a, $T b) { return a > b ? a : b; }"),
    ("rt_min_$s", ("int", "uint", "bool"), "$Q $T rt_min_$s($T a, $T b) { return a < b ? a : b; }"),
    ("rt_sign_$s", ("float", "int"), "$Q $T rt_sign_$s($T x) { return x > ($T)0 ? ($T)1 : x < ($T)0 ? ($T)-1 : x; }"),
    ("rt_sigmoid_$s", ("float",), "$Q $T rt_sigmoid_$s($T x) { return ($T)1 / (($T)1 + exp$f(-x)); }"),
    ("rt_abs_$s", ("int",), "$Q $T rt_abs_$s($T x) { return x < 0 ? ($T)-x : x; }"),
    # truncating, as C; x / 0 is x and MIN / -1 is MIN (the reference's answers, never a trap)
    ("rt_div_$s", ("int",),
     "$Q $T rt_div_$s($T a, $T b) { return b == 0 || (b == -1 && a == $min) ? a : ($T)(a / b); }"),
    ("rt_rem_$s", ("int",), "$Q $T rt_rem_$s($T a, $T b) { return b == 0 || b == -1 ? ($T)0 : ($T)(a % b); }"),
    ("rt_div_$s", ("uint", "bool"), "$Q $T rt_div_$s($T a, $T b) { return b == 0 ? a : ($T)(a / b); }"),
    ("rt_rem_$s", ("uint", "bool"), "$Q $T rt_rem_$s($T a, $T b) { return b == 0 ? ($T)0 : ($T)(a % b); }"),
    ("rt_pow_$s", ("int", "uint"),
     "$Q $T rt_pow_$s($T a, $T b) {\n  $T r = 1;\n  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;\n"
     "  for (; b > 0; b >>= 1) { if (b & 1) r = ($T)(r * a); a = ($T)(a * a); }\n  return r;\n}"),
    ("rt_erf_$s", ("float",),  # Eigen's and XLA's rational erf, within 5e-7 of erf
     "$Q $T rt_erf_$s($T x) {\n  x = x != x ? x : x < ($T)-4 ? ($T)-4 : x > ($T)4 ? ($T)4 : x;\n  $T x2 = x * x;\n"
     f"  return x * ({_horner(ERF_P)} / {_horner(ERF_Q)});\n}}"),
    # log1p and expm1 near 0 are polynomials (`approximations`), where a driver's log is not accurate enough; away
    # from 0, Goldberg's and Kahan's tricks (exact where 1 + x or e^x rounds)
    ("rt_log1p_$s", ("float",),
     f"$Q $T rt_log1p_$s($T x) {{\n  if (x > ($T){LOG1P_NEAR[0]!r} && x < ($T){LOG1P_NEAR[1]!r}) {{\n"
     f"    $T x2 = x * x;\n    return x + (x * x2 * {_horner(LOG_P, 'x')} - ($T)0.5 * x2);\n  }}\n"
     "  $T u = ($T)1 + x;\n  if (u - u != ($T)0) return log$f(u);  /* inf or NaN */\n"
     "  return log$f(u) * (x / (u - ($T)1));\n}"),
    ("rt_expm1_$s", ("float",),
     f"$Q $T rt_expm1_$s($T x) {{\n  if (x > ($T)-{EXPM1_NEAR!r} && x < ($T){EXPM1_NEAR!r}) "
     f"return x + x * x * {_horner(EXP_P, 'x')};\n"
     "  $T u = exp$f(x);\n  if (u - u != ($T)0) return u;  /* inf or NaN */\n"
     "  if (u - ($T)1 == ($T)-1) return ($T)-1;\n"
     "  return (u - ($T)1) * (x / log$f(u));  /* (u - 1) * x overflows past 85 */\n}"),
]
# float -> integer casts saturate (NaN -> 0), as llvm's fptosi.sat; bounds are powers of two, exact in floats.
CAST_HELPER = ("$Q $D rt_cast_${s}_$d($T x) "
               "{ return x != x ? ($D)0 : x <= ($T)$lo ? $dmin : x >= ($T)$hi ? $dmax : ($D)x; }")
BF16_HELPERS = (  # for languages without a bf16 type: bits, converted with round to nearest even
    ("rt_bf16_to_f32", "$Q float rt_bf16_to_f32($U16 x) { return $bits_to_float; }"),
    ("rt_f32_to_bf16",
     "$Q $U16 rt_f32_to_bf16(float f) {\n  $U32 b = $float_to_bits;\n"
     "  if ((b & 0x7fffffffu) > 0x7f800000u) return ($U16)((b >> 16) | 0x40u);  /* NaN stays a quiet NaN */\n"
     "  return ($U16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);\n}"),
)


@dataclass(frozen=True)
class FragmentSpelling:
    """How a language spells the fragment intrinsics natively; data only.

    Templates' fields: {T} the element's storage type, {m} {n} {k} the multiply-accumulate's shape,
    {name} a fragment, {pointer} the address of a buffer element, {stride} the row stride, {value}
    a fill value, {d} {a} {b} {c} the operands of d = a x b + c."""

    shapes: tuple  # (m, n, k, A/B type, accumulator type) spelled natively; others are expanded
    width: int  # threads that hold one fragment together (the SIMD-group, the warp)
    include: str  # added to the preamble of a module that uses them
    types: dict  # role -> the fragment's type
    fill: str
    load: dict  # role -> template
    mma: str
    store: str
    array: str = ""  # a workgroup array that fragments load or store (alignment); fields of Dialect.shared_array


@dataclass(frozen=True)
class Emulated:
    """A type a language lacks, computed in one it has by helper functions (WGSL's i64: a vec2<u32> of its low
    and high words); data only. The dialect's `types` spells it, and everything it computes is here: nothing
    falls back to the templates of its kind, so what is missing is unsupported. Templates take {0} and {1}, {T}
    (the type's spelling) and {s} (its dtype name); helper bodies `$T` and `$s`."""

    ops: dict  # unary and binary op -> template
    compare: dict  # predicate -> template
    const: str  # a value, from {lo} and {hi}: its low and high 32-bit words, as unsigned numbers
    cast_from: dict  # the language's type of a value {0} -> template making it a value of this type
    cast_to: dict  # the language's type -> template making a value {0} of this type one of that (else: unsupported)
    helpers: tuple = ()  # (name, body), a helper after those it calls; emitted where a kernel calls them


@dataclass(frozen=True)
class Dialect:
    """Everything that differs between C-like languages; data only."""

    name: str
    types: dict  # dtype name -> compute type; f16/bf16 compute in f32, so they appear in `storage` only
    storage: dict  # dtype name -> buffer element type where it differs from `types`
    from_storage: dict  # dtype name -> template turning a stored element `{0}` into its compute type
    to_storage: dict  # dtype name -> template turning a compute value `{0}` into a stored element
    kernel: str  # the signature; fields {name}, {params}, {threads}, {wx}, {wy}, {wz}
    param: str  # one buffer parameter; fields {const}, {T}, {name}, {i}
    extra_params: tuple = ()  # after the buffers (MSL's id attributes)
    prologue: str = ""  # per buffer, at the top of the body (C99 reads its binding table); same fields
    group_id: str = ""  # workgroup id on axis {n} ({x}: x, y, z)
    thread_id: str | None = None  # thread id inside the workgroup; None: no threads, the kernel loops over them
    barrier: str | None = None
    shared: str | None = None  # prefix of workgroup arrays; None: none
    ops: dict = field(default_factory=lambda: dict(C_OPS))
    f32_suffix: str = "f"
    qualifier: str = "static inline"  # of helper functions
    unroll: str = ""  # pragma line before an unrolled loop; field {n}, the extent
    inf: str = "INFINITY"  # of type float; {T} casts it
    nan: str = "NAN"
    long_suffix: str = "LL"  # integer literals beyond 32 bits
    as_float: str = ""  # bit casts, for the bf16 helpers; "" when bf16 is native
    as_uint: str = ""
    preamble: str = ""
    # Declaration syntax, for languages that do not spell it as C does (WGSL: `var x: f32 = ...;`).
    declare: str = "{T} {name} = {value};"  # a mutable scalar
    declare_const: str = "const {T} {name} = {value};"  # the workgroup and thread ids
    loop: str = "for ({T} {var} = {start}; {var} < {end}; {var}++)"
    array: str = "{T} {name}[{size}];"  # a private array
    # A `VectorCopy` of 16 bytes between two element lvalues {dst} and {src} as one move, and the private arrays such
    # moves touch (aligned for them); "": element by element (`portable.expand_vector_copies`).
    vector_copy: str = ""
    vector_array: str = ""
    shared_array: str = "{shared} {T} {name}[{size}];"  # a workgroup array
    shared_global: bool = False  # workgroup arrays are declared at module scope, before the kernel
    global_param: str = ""  # per buffer, at module scope before the kernel (WGSL's bindings); fields of `param`
    element: str = "{name}[{index}]"  # element {index} of buffer parameter {name} (storage type {T})
    cast: str = "(({T}){0})"
    # a signed remainder by a divisor that cannot trap (a constant other than 0 and -1, or a size)
    trapless_rem: str = "({0} % {1})"
    special_float: str = "({sign}({T}){0})"  # `inf` or `nan` ({0}) as a value of type {T}
    select: str = "({0} ? {1} : {2})"
    unsigned_suffix: str = "U"
    # every unsigned literal suffixed: WGSL types an unsuffixed one as i32 where nothing else fixes it (`select(2, 1,
    # c) & 0xffu` is invalid); C converts it where it meets an unsigned value
    suffix_every_unsigned: bool = False
    helpers: tuple = ()  # (name, kinds, body) replacing `HELPERS`; empty: the C helpers
    cast_helper: str = ""  # replacing `CAST_HELPER`
    # A test of {0} (f32) for NaN on its bits, for a language whose compilers may assume no float is NaN (WGSL): float
    # compares then say so themselves (`x != x` would fold to false). "": the language's own `!=`.
    is_nan: str = ""
    fragments: FragmentSpelling | None = None  # None: the portable expansion
    index32: bool = False  # index arithmetic in 32 bits where the kernel's buffers allow (see index32.py)
    # ... in every kernel, whatever its sizes: the target's runtime refuses a buffer of 2^31 elements or more at each
    # call (WebGPU's does), so a kernel whose sizes have no bound narrows too. Needed where i64 is `emulated`.
    index32_assume_fits: bool = False
    # A kernel's scalars (sizes known at run time, `Kernel.scalars`): a parameter each, after the buffers,
    # and/or a statement each at the top of the body; fields {T} (the index type), {name} (`dim_<symbol>`),
    # {j} (the scalar's number), {n} (the number of buffers), {i} (n + j).
    scalar_param: str = ""
    scalar_prologue: str = ""
    # Types a language cannot store, kept several to a 32-bit word: dtype -> {"per_word", "word", "atomic_word",
    # "atomic_load", "load", "bits", "store"}. The buffer is an array of `word` (written ones of `atomic_word`,
    # since threads may write other parts of one word); `load` turns a word {0} and the element's part {1}
    # (0 to per_word - 1) into the compute type; `bits` is the element's bits, low in a word, from a value {0}
    # of the compute type; `store` writes bits {value} into part {part} of the word at {pointer}.
    word_parts: dict = field(default_factory=dict)
    # Types a language lacks, computed in one it has by helpers: dtype -> `Emulated` (WGSL's i64). Stored as the type
    # that computes them (an i64 buffer of WGSL is an array of vec2<u32>).
    emulated: dict = field(default_factory=dict)
    # Narrow integer types a language computes in a wider one (WGSL: i8 and i16 in i32): dtype -> how a value {0}
    # of the wide type wraps to the narrow one, as C's cast to the narrow type does. Absent: `cast`.
    wrap: dict = field(default_factory=dict)


C99 = Dialect(
    name="c99",
    types={"f64": "double", "f32": "float", "i64": "int64_t", "i32": "int32_t", "i16": "int16_t", "i8": "int8_t",
           "ui64": "uint64_t", "ui32": "uint32_t", "ui16": "uint16_t", "ui8": "uint8_t", "i1": "bool"},
    storage={"f16": "_Float16", "bf16": "uint16_t"},
    from_storage={"f16": "((float){0})", "bf16": "rt_bf16_to_f32({0})"},
    to_storage={"f16": "((_Float16){0})", "bf16": "rt_f32_to_bf16({0})"},
    kernel="void {name}(void **bindings, int64_t wg_x, int64_t wg_y, int64_t wg_z)",
    param="",
    prologue="{const}{T} *restrict {name} = ({const}{T} *)bindings[{i}];",
    scalar_prologue="const {T} {name} = ((const int64_t *)bindings[{n}])[{j}];",  # as llvm-cpu: one more binding
    group_id="wg_{x}",
    unroll="#pragma GCC unroll {n}",
    as_float="rt_as_float({0})", as_uint="rt_as_uint({0})",
    preamble=("#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n"
              "static inline float rt_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }\n"
              "static inline uint32_t rt_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }"),
)

_CUDA_INTS = {"i64": "long long", "i32": "int", "i16": "short", "i8": "signed char", "ui64": "unsigned long long",
              "ui32": "unsigned int", "ui16": "unsigned short", "ui8": "unsigned char", "i1": "bool"}

CUDA = Dialect(
    name="cuda",
    types={"f64": "double", "f32": "float", **_CUDA_INTS},
    storage={"f16": "__half", "bf16": "__nv_bfloat16"},
    from_storage={"f16": "__half2float({0})", "bf16": "__bfloat162float({0})"},
    to_storage={"f16": "__float2half_rn({0})", "bf16": "__float2bfloat16_rn({0})"},
    kernel='extern "C" __global__ void __launch_bounds__({threads}) {name}({params})',
    param="{const}{T} *__restrict__ {name}",
    scalar_param="const {T} {name}",
    group_id="blockIdx.{x}",
    thread_id="threadIdx.{x}",
    barrier="__syncthreads();",
    shared="__shared__",
    qualifier="static __device__ __forceinline__",
    unroll="#pragma unroll",
    inf="__int_as_float(0x7f800000)",
    nan="__int_as_float(0x7fffffff)",
    preamble="#include <cuda_fp16.h>\n#include <cuda_bf16.h>",
    index32=True,
    shared_array="{shared} __align__(16) {T} {name}[{size}];",  # 16-byte aligned: runs of 4 words load as one
    vector_copy="*reinterpret_cast<uint4*>(&{dst}) = *reinterpret_cast<const uint4*>(&{src});",
    vector_array="__align__(16) {T} {name}[{size}];",
    # wmma (sm_70 and newer; bf16 from sm_80): the target advertises only what its arch has.
    fragments=FragmentSpelling(
        shapes=((16, 16, 16, "f16", "f32"), (16, 16, 16, "bf16", "f32")),
        width=32,
        include="#include <mma.h>",
        types={"a": "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, {m}, {n}, {k}, {T}, nvcuda::wmma::row_major>",
               "b": "nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, {m}, {n}, {k}, {T}, nvcuda::wmma::row_major>",
               "acc": "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, {m}, {n}, {k}, {T}>"},
        fill="nvcuda::wmma::fill_fragment({name}, {value});",
        load={"a": "nvcuda::wmma::load_matrix_sync({name}, {pointer}, {stride});",
              "b": "nvcuda::wmma::load_matrix_sync({name}, {pointer}, {stride});",
              "acc": "nvcuda::wmma::load_matrix_sync({name}, {pointer}, {stride}, nvcuda::wmma::mem_row_major);"},
        mma="nvcuda::wmma::mma_sync({d}, {a}, {b}, {c});",
        store="nvcuda::wmma::store_matrix_sync({pointer}, {name}, {stride}, nvcuda::wmma::mem_row_major);",
        array="{shared} __align__(32) {T} {name}[{size}];",  # wmma pointers are 256-bit aligned
    ),
)

HIP = replace(
    CUDA,
    name="hip",
    storage={"f16": "__half", "bf16": "__hip_bfloat16"},
    from_storage={"f16": "__half2float({0})", "bf16": "__bfloat162float({0})"},
    to_storage={"f16": "__float2half({0})", "bf16": "__float2bfloat16({0})"},
    inf="__builtin_huge_valf()",
    nan="__builtin_nanf(\"\")",
    preamble="#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>\n#include <hip/hip_bf16.h>",
    shared_array=Dialect.shared_array,
    fragments=None,  # until HIP spells rocWMMA/MFMA: the portable expansion
)

_CL_INTS = {"i64": "long", "i32": "int", "i16": "short", "i8": "char", "ui64": "ulong", "ui32": "uint",
            "ui16": "ushort", "ui8": "uchar"}

OPENCL = Dialect(
    name="opencl",
    types={"f64": "double", "f32": "float", **_CL_INTS, "i1": "bool"},
    # bool may not cross the kernel boundary in OpenCL C; bf16 has no type, so it is bits
    storage={"f16": "half", "bf16": "ushort", "i1": "uchar"},
    from_storage={"f16": "((float){0})", "bf16": "rt_bf16_to_f32({0})", "i1": "({0} != 0)"},
    to_storage={"f16": "convert_half_rte({0})", "bf16": "rt_f32_to_bf16({0})", "i1": "((uchar){0})"},
    kernel="__kernel __attribute__((reqd_work_group_size({wx}, {wy}, {wz}))) void {name}({params})",
    param="__global {const}{T} *restrict {name}",
    scalar_param="const {T} {name}",
    group_id="get_group_id({n})",
    thread_id="get_local_id({n})",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    shared="__local",
    f32_suffix="",
    qualifier="inline",
    unroll="__attribute__((opencl_unroll_hint))",
    long_suffix="L",
    as_float="as_float({0})", as_uint="as_uint({0})",
    preamble=("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"  # half arithmetic and convert_half_rte
              "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"),
    index32=True,
)

MSL = Dialect(
    name="msl",
    types={"f32": "float", **_CL_INTS, "i1": "bool"},  # Metal has no double
    storage={"f16": "half", "bf16": "bfloat"},  # bfloat: Metal 3.1
    from_storage={"f16": "float({0})", "bf16": "float({0})"},
    to_storage={"f16": "half({0})", "bf16": "bfloat({0})"},
    kernel="kernel void {name}({params})",
    param="device {const}{T} *{name} [[buffer({i})]]",
    scalar_param="constant {T} &{name} [[buffer({i})]]",
    extra_params=("uint3 rt_group [[threadgroup_position_in_grid]]",
                  "uint3 rt_thread [[thread_position_in_threadgroup]]"),
    group_id="long(rt_group.{x})",
    thread_id="long(rt_thread.{x})",
    barrier="threadgroup_barrier(mem_flags::mem_threadgroup);",
    shared="threadgroup",
    ops={**C_OPS, **FALLBACK_OPS},
    f32_suffix="",
    qualifier="static inline",
    unroll="#pragma unroll",
    long_suffix="L",
    preamble="#include <metal_stdlib>\nusing namespace metal;",
    index32=True,
    # SIMD-group matrices (Apple7 and newer): 8x8, f32 or f16 inputs (mixed with an f32 accumulator).
    fragments=FragmentSpelling(
        shapes=((8, 8, 8, "f32", "f32"), (8, 8, 8, "f16", "f32")),
        width=32,
        include="#include <metal_simdgroup_matrix>",
        types={"a": "simdgroup_{T}8x8", "b": "simdgroup_{T}8x8", "acc": "simdgroup_{T}8x8"},
        fill="{name} = make_filled_simdgroup_matrix<{T}, 8, 8>({value});",
        load={role: "simdgroup_load({name}, {pointer}, {stride});" for role in k.FRAGMENT_ROLES},
        mma="simdgroup_multiply_accumulate({d}, {a}, {b}, {c});",
        store="simdgroup_store({name}, {pointer}, {stride});",
    ),
)

# WGSL (WebGPU): the same statements with Rust-like declarations, builtins instead of libm, `select`
# instead of `?:`, and helpers written in WGSL. Buffers are module-scope bindings, workgroup arrays
# module-scope `var<workgroup>`. WGSL has no 64-bit types: index arithmetic (the kernel IR's i64) is narrowed to
# i32 in every kernel (`index32_assume_fits`: the target's runtime refuses a buffer of 2^31 elements or more), and
# i64 data is a vec2<u32> (low word, high word), computed exactly by helpers (`WGSL_I64`) and stored so: an i64
# buffer is an array of them, numpy's bytes. There is no f64. f16 needs `enable f16;` (the shader-f16 feature),
# which the target adds when it has it.
# WGSL lets a compiler assume that no float is NaN or infinite, and naga and the drivers under it do fold `x != x`
# and return numbers from atan, sign, pow and max of NaN: so NaN and infinity are told apart on the bits.
_WGSL_NAN = "((bitcast<u32>({0}) & 0x7fffffffu) > 0x7f800000u)"
_WGSL_FINITE = "((bitcast<u32>({0}) & 0x7f800000u) != 0x7f800000u)"
WGSL_OPS = {
    "neg": "(-{0})",
    "abs": "abs({0})", "abs.uint": "{0}", "abs.bool": "{0}",
    **{f"{op}.float": f"{op}({{0}})" for op in ("exp", "log", "sqrt", "floor", "ceil", "sin", "cos", "tan")},
    "tanh.float": "rt_tanh_{s}({0})",
    "rsqrt.float": "inverseSqrt({0})",
    "reciprocal.float": "({T}(1) / {0})",
    "sigmoid.float": "rt_sigmoid_{s}({0})",
    "round.float": "round({0})",  # half to even, as np.round
    "sign.float": f"select(sign({{0}}), {{0}}, {_WGSL_NAN.format('{0}')})",
    "sign.int": "sign({0})", "sign.uint": "{T}({0} != 0u)", "sign.bool": "{0}",
    "atan.float": f"select(atan({{0}}), {{0}}, {_WGSL_NAN.format('{0}')})",
    "not.int": "(~{0})", "not.bool": "(!{0})", "neg.uint": "(0u - {0})",  # WGSL has no unary - of u32
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
    "div.float": "rt_fdiv_{s}({0}, {1})", "div.int": "rt_div_{s}({0}, {1})",
    "rem.float": "rt_fmod_{s}({0}, {1})",
    "rem.int": "rt_rem_{s}({0}, {1})",
    "pow.float": "rt_pow_{s}({0}, {1})", "pow.int": "rt_pow_{s}({0}, {1})",
    "max": "rt_max_{s}({0}, {1})", "min": "rt_min_{s}({0}, {1})",
    "and.int": "({0} & {1})", "or.int": "({0} | {1})", "xor.int": "({0} ^ {1})",
    "xor.bool": "({0} != {1})",  # WGSL's ^ takes integers only
    "shr.int": "({0} >> u32({1}))",
    "atan2.float": (f"select(atan2({{0}}, {{1}}), {{0}} + {{1}}, "
                    f"{_WGSL_NAN.format('{0}')} || {_WGSL_NAN.format('{1}')})"),
    **FALLBACK_OPS,  # no erf, log1p, expm1 in WGSL
}


def _wgsl_horner(coefficients, var: str = "x2") -> str:
    out = f"$T({coefficients[0]!r})"
    for c in coefficients[1:]:
        out = f"({out} * {var} + $T({c!r}))"
    return out


WGSL_HELPERS = (
    ("rt_bf16_half", ("float",),  # element `odd` (0 or 1) of a word of two bf16, as f32
     "fn rt_bf16_half(word: u32, odd: i32) -> f32 {\n"
     "  return bitcast<f32>(((word >> (u32(odd) * 16u)) & 0xffffu) << 16u);\n}"),
    ("rt_f32_to_bf16", ("float",),  # round to nearest even; NaN stays a quiet NaN
     "fn rt_f32_to_bf16(f: f32) -> u32 {\n  let b = bitcast<u32>(f);\n"
     "  if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }\n"
     "  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;\n}"),
    # f32 rounded to the nearest f16 (ties to even) in f32 arithmetic, for kernels without shader-f16: the value
    # scaled by its f16 ulp is rounded to a whole number (exactly: powers of two), past 65504 it is infinite
    ("rt_round_f16", ("float",),
     "fn rt_round_f16(x: f32) -> f32 {\n  let a = abs(x);\n"
     "  if (!(a < 65520.0f)) { return select(x, x * rt_inf(), a >= 65520.0f); }  // NaN stays NaN\n"
     "  let ulp = ldexp(1.0f, max(frexp(a).exp - 1, -14) - 10);\n"
     "  let r = round(a / ulp) * ulp;\n  return select(r, -r, (bitcast<u32>(x) >> 31u) != 0u);  // -0 too\n}"),
    ("rt_max_$s", ("float",),
     f"fn rt_max_$s(a: $T, b: $T) -> $T {{ return select(select(select(b, a, a > b), b, {_WGSL_NAN.format('b')}), a, "
     f"{_WGSL_NAN.format('a')}); }}"),
    ("rt_min_$s", ("float",),
     f"fn rt_min_$s(a: $T, b: $T) -> $T {{ return select(select(select(b, a, a < b), b, {_WGSL_NAN.format('b')}), a, "
     f"{_WGSL_NAN.format('a')}); }}"),
    ("rt_max_$s", ("int", "uint"), "fn rt_max_$s(a: $T, b: $T) -> $T { return select(b, a, a > b); }"),
    ("rt_min_$s", ("int", "uint"), "fn rt_min_$s(a: $T, b: $T) -> $T { return select(b, a, a < b); }"),
    ("rt_max_$s", ("bool",), "fn rt_max_$s(a: $T, b: $T) -> $T { return a || b; }"),  # WGSL orders no bools
    ("rt_min_$s", ("bool",), "fn rt_min_$s(a: $T, b: $T) -> $T { return a && b; }"),
    ("rt_sigmoid_$s", ("float",), "fn rt_sigmoid_$s(x: $T) -> $T { return $T(1) / ($T(1) + exp(-x)); }"),
    # a / b rounded correctly: WGSL lets `/` be 2.5 ulp off, and NVIDIA's is, which moved quotients across rounding
    # ties (DynamicQuantizeLinear's x / scale); one Newton step of fused multiply-adds corrects it, and where that
    # step is NaN (b zero or infinite) the quotient stands
    ("rt_fdiv_$s", ("float",),
     "fn rt_fdiv_$s(a: $T, b: $T) -> $T {\n  let q = a / b;\n  let refined = fma(fma(-q, b, a), $T(1) / b, q);\n"
     f"  return select(refined, q, {_WGSL_NAN.format('refined')});\n}}"),
    ("rt_tanh_$s", ("float",),  # Cephes tanhf: drivers' tanh, (e^2x - 1) / (e^2x + 1), loses digits near 0 (1e-3 of
     # Mish's tanh(softplus(-10)) on lavapipe), so an odd polynomial below 0.625, 1 - 2 / (e^2|x| + 1) above
     "fn rt_tanh_$s(x: $T) -> $T {\n  let a = abs(x);\n  if (a < $T(0.625)) {\n    let z = x * x;\n"
     f"    return x + x * z * {_wgsl_horner(TANH_P).replace('x2', 'z')};\n"
     "  }\n  let r = $T(1) - $T(2) / (exp(a + a) + $T(1));\n  return select(r, -r, x < $T(0));\n}"),
    ("rt_fmod_$s", ("float",),  # WGSL's % is a - b * trunc(a / b): NaN for an infinite b, where fmod keeps a
     f"fn rt_fmod_$s(a: $T, b: $T) -> $T {{\n  if ({_WGSL_FINITE.format('a')} && !{_WGSL_FINITE.format('b')} && "
     f"!{_WGSL_NAN.format('b')}) {{ return a; }}\n  return a % b;\n}}"),
    ("rt_div_$s", ("int",),
     "fn rt_div_$s(a: $T, b: $T) -> $T { if (b == 0 || (b == -1 && a == $min)) { return a; } return a / b; }"),
    ("rt_rem_$s", ("int",),  # not `%`: on NVIDIA's Vulkan driver, wgpu's i32 `%` gave the unsigned remainder
     "fn rt_rem_$s(a: $T, b: $T) -> $T { if (b == 0 || b == -1) { return $T(0); } return a - b * (a / b); }"),
    ("rt_div_$s", ("uint",), "fn rt_div_$s(a: $T, b: $T) -> $T { if (b == 0u) { return a; } return a / b; }"),
    ("rt_rem_$s", ("uint",), "fn rt_rem_$s(a: $T, b: $T) -> $T { if (b == 0u) { return 0u; } return a % b; }"),
    ("rt_pow_$s", ("int",),
     "fn rt_pow_$s(a0: $T, b0: $T) -> $T {\n  var a = a0;\n  var b = b0;\n  var r: $T = 1;\n"
     "  if (b < 0) { if (a == 1) { return 1; } if (a == -1) { return select(1, -1, (b & 1) != 0); } return 0; }\n"
     "  for (; b > 0; b = b >> 1u) { if ((b & 1) != 0) { r = r * a; } a = a * a; }\n  return r;\n}"),
    ("rt_pow_$s", ("uint",),
     "fn rt_pow_$s(a0: $T, b0: $T) -> $T {\n  var a = a0;\n  var b = b0;\n  var r: $T = 1u;\n"
     "  for (; b > 0u; b = b >> 1u) { if ((b & 1u) != 0u) { r = r * a; } a = a * a; }\n  return r;\n}"),
    ("rt_pow_$s", ("float",),  # C's powf: pow(x, 0) = pow(1, y) = 1, NaN else NaN, negative bases to integer powers
     "fn rt_pow_$s(a: $T, b: $T) -> $T {\n"
     f"  if (b == $T(0) || a == $T(1)) {{ return $T(1); }}\n"
     f"  if ({_WGSL_NAN.format('a')} || {_WGSL_NAN.format('b')}) {{ return a + b; }}\n"
     "  let m = abs(a);\n"
     f"  if (!{_WGSL_FINITE.format('b')}) {{\n"
     "    if (m == $T(1)) { return $T(1); }\n    return select($T(0), rt_inf(), (m > $T(1)) == (b > $T(0)));\n  }\n"
     f"  var r = select(select($T(0), rt_inf(), b > $T(0)), select(rt_inf(), $T(0), b > $T(0)), m == $T(0));\n"
     f"  if (m != $T(0) && {_WGSL_FINITE.format('m')}) {{ r = pow(m, b); }}\n"
     "  if ((bitcast<u32>(a) & 0x80000000u) != 0u) {  // -0 and -inf to a non-integer power are +0 or +inf\n"
     f"    if (floor(b) != b) {{ return select(r, rt_nan(), m != $T(0) && {_WGSL_FINITE.format('m')}); }}\n"
     "    if (abs(b) < $T(16777216) && fract(b * $T(0.5)) != $T(0)) { r = -r; }\n  }\n  return r;\n}"),
    ("rt_erf_$s", ("float",),  # Eigen's and XLA's rational erf, within 5e-7 of erf
     f"fn rt_erf_$s(x0: $T) -> $T {{\n  let x = select(clamp(x0, $T(-4), $T(4)), x0, {_WGSL_NAN.format('x0')});\n"
     "  let x2 = x * x;\n"
     f"  return x * {_wgsl_horner(ERF_P)} / {_wgsl_horner(ERF_Q)};\n}}"),
    ("rt_log1p_$s", ("float",),  # as the C helper
     f"fn rt_log1p_$s(x: $T) -> $T {{\n  if (x > $T({LOG1P_NEAR[0]!r}) && x < $T({LOG1P_NEAR[1]!r})) {{\n"
     f"    let x2 = x * x;\n    return x + (x * x2 * {_wgsl_horner(LOG_P, 'x')} - $T(0.5) * x2);\n  }}\n"
     f"  let u = $T(1) + x;\n  if (!{_WGSL_FINITE.format('u')}) {{ return log(u); }}\n"
     "  return log(u) * (x / (u - $T(1)));\n}"),
    ("rt_expm1_$s", ("float",),
     f"fn rt_expm1_$s(x: $T) -> $T {{\n  if (x > $T({-EXPM1_NEAR!r}) && x < $T({EXPM1_NEAR!r})) {{ "
     f"return x + x * x * {_wgsl_horner(EXP_P, 'x')}; }}\n"
     f"  let u = exp(x);\n  if (!{_WGSL_FINITE.format('u')}) {{ return u; }}\n"
     "  if (u - $T(1) == $T(-1)) { return $T(-1); }\n  return (u - $T(1)) * (x / log(u));\n}"),
)


def _wgsl_word_parts(width: int, load: str, bits: str) -> dict:
    """`Dialect.word_parts` for elements of `width` bits: a store is an atomicAnd that clears the element's bits
    and an atomicOr that sets them, since other threads may write the word's other parts."""
    mask = f"0x{(1 << width) - 1:x}u"
    store = ("{{ let rt_word = &{pointer}; let rt_shift = u32({part}) * " + f"{width}u; atomicAnd(rt_word, ~({mask} "
             "<< rt_shift)); atomicOr(rt_word, {value} << rt_shift); }}")
    return {"per_word": 32 // width, "word": "u32", "atomic_word": "atomic<u32>", "atomic_load": "atomicLoad(&{0})",
            "load": load, "bits": bits, "store": store}


def _wgsl_narrow_ints() -> tuple[dict, dict]:
    """(word_parts, wrap) for WGSL's i8, ui8, i16 and ui16, computed in i32 and u32: a signed element is read
    by shifting it to the top of the word and back (arithmetic), an unsigned one by a shift and a mask."""
    parts, wrap = {}, {}
    for bits in (8, 16):
        mask = f"0x{(1 << bits) - 1:x}u"
        top = 32 - bits
        parts[f"i{bits}"] = _wgsl_word_parts(
            bits, load=f"(bitcast<i32>(({{0}}) << ({top}u - u32({{1}}) * {bits}u)) >> {top}u)",
            bits=f"(bitcast<u32>({{0}}) & {mask})")
        parts[f"ui{bits}"] = _wgsl_word_parts(bits, load=f"((({{0}}) >> (u32({{1}}) * {bits}u)) & {mask})",
                                              bits=f"(({{0}}) & {mask})")
        wrap[f"i{bits}"] = f"((({{0}}) << {top}u) >> {top}u)"
        wrap[f"ui{bits}"] = f"(({{0}}) & {mask})"
    return parts, wrap


_WGSL_NARROW_PARTS, _WGSL_WRAP = _wgsl_narrow_ints()

# i64 as two's complement in a vec2<u32>: x the low word, y the high. Semantics as the C helpers' (and vmvx's):
# wrapping add, sub, mul and neg; truncated div and rem, x / 0 is x, x % 0 is 0, MIN / -1 is MIN; shr arithmetic,
# by 63 where the amount is 64 or more or negative (numpy's); f32 -> i64 saturating, NaN -> 0; i64 -> f32 rounded
# to nearest even (as C's cast), from the top 32 bits of the magnitude and a sticky bit for the rest.
_I64_HELPERS = (
    ("rt_add_$s", "fn rt_add_$s(a: $T, b: $T) -> $T { let lo = a.x + b.x; return $T(lo, a.y + b.y + "
                  "select(0u, 1u, lo < a.x)); }"),
    ("rt_sub_$s", "fn rt_sub_$s(a: $T, b: $T) -> $T { return $T(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x)); }"),
    ("rt_neg_$s", "fn rt_neg_$s(a: $T) -> $T { return rt_sub_$s($T(0u), a); }"),
    ("rt_mul32_$s",  # the whole product of two u32, from four 16-bit partial products
     "fn rt_mul32_$s(a: u32, b: u32) -> $T {\n  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; "
     "let b1 = b >> 16u;\n  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0;\n"
     "  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);\n"
     "  return $T((p00 & 0xffffu) | (mid << 16u), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));\n}"),
    ("rt_mul_$s", "fn rt_mul_$s(a: $T, b: $T) -> $T { let p = rt_mul32_$s(a.x, b.x); "
                  "return $T(p.x, p.y + a.x * b.y + a.y * b.x); }"),
    ("rt_lt_$s", "fn rt_lt_$s(a: $T, b: $T) -> bool { let ah = bitcast<i32>(a.y); let bh = bitcast<i32>(b.y); "
                 "return ah < bh || (ah == bh && a.x < b.x); }"),
    ("rt_max_$s", "fn rt_max_$s(a: $T, b: $T) -> $T { return select(b, a, rt_lt_$s(b, a)); }"),
    ("rt_min_$s", "fn rt_min_$s(a: $T, b: $T) -> $T { return select(b, a, rt_lt_$s(a, b)); }"),
    ("rt_abs_$s", "fn rt_abs_$s(a: $T) -> $T { return select(a, rt_neg_$s(a), bitcast<i32>(a.y) < 0); }"),
    ("rt_sign_$s", "fn rt_sign_$s(a: $T) -> $T { if (bitcast<i32>(a.y) < 0) { return $T(0xffffffffu); } "
                   "return $T(select(0u, 1u, any(a != $T(0u))), 0u); }"),
    ("rt_shr_$s",
     "fn rt_shr_$s(a: $T, b: $T) -> $T {\n  let n = select(63u, b.x, b.y == 0u && b.x < 63u);\n"
     "  let hi = bitcast<i32>(a.y);\n  if (n == 0u) { return a; }\n"
     "  if (n < 32u) { return $T((a.x >> n) | (a.y << (32u - n)), bitcast<u32>(hi >> n)); }\n"
     "  return $T(bitcast<u32>(hi >> (n - 32u)), bitcast<u32>(hi >> 31u));\n}"),
    ("rt_udivrem_$s",  # unsigned n and d (d not 0): the quotient in xy, the remainder in zw (i64's magnitudes, ui64)
     "fn rt_udivrem_$s(n: $T, d: $T) -> vec4<u32> {\n"
     "  if (n.y == 0u && d.y == 0u) { return vec4<u32>(n.x / d.x, 0u, n.x % d.x, 0u); }\n"
     "  var q = n;\n  var r = $T(0u);\n  for (var i = 0u; i < 64u; i++) {  // restoring division, a bit a step\n"
     "    let carry = r.y >> 31u;  // r < d, so 2r + 1 overflows only where d is past 2^63\n"
     "    r = $T((r.x << 1u) | (q.y >> 31u), (r.y << 1u) | (r.x >> 31u));\n"
     "    q = $T(q.x << 1u, (q.y << 1u) | (q.x >> 31u));\n"
     "    if (carry != 0u || r.y > d.y || (r.y == d.y && r.x >= d.x)) { r = rt_sub_$s(r, d); q.x = q.x | 1u; }\n"
     "  }\n  return vec4<u32>(q, r);\n}"),
    ("rt_div_$s",
     "fn rt_div_$s(a: $T, b: $T) -> $T {\n  if (all(b == $T(0u))) { return a; }\n"
     "  let q = rt_udivrem_$s(rt_abs_$s(a), rt_abs_$s(b)).xy;\n"
     "  return select(q, rt_neg_$s(q), ((a.y ^ b.y) >> 31u) != 0u);\n}"),
    ("rt_rem_$s",
     "fn rt_rem_$s(a: $T, b: $T) -> $T {\n  if (all(b == $T(0u))) { return $T(0u); }\n"
     "  let r = rt_udivrem_$s(rt_abs_$s(a), rt_abs_$s(b)).zw;\n"
     "  return select(r, rt_neg_$s(r), bitcast<i32>(a.y) < 0);\n}"),
    ("rt_pow_$s",
     "fn rt_pow_$s(a0: $T, b0: $T) -> $T {\n  if (bitcast<i32>(b0.y) < 0) {\n"
     "    if (all(a0 == $T(1u, 0u))) { return a0; }\n"
     "    if (all(a0 == $T(0xffffffffu))) { return select($T(1u, 0u), a0, (b0.x & 1u) != 0u); }\n"
     "    return $T(0u);\n  }\n  var a = a0;\n  var b = b0;\n  var r = $T(1u, 0u);\n"
     "  while (any(b != $T(0u))) {\n    if ((b.x & 1u) != 0u) { r = rt_mul_$s(r, a); }\n    a = rt_mul_$s(a, a);\n"
     "    b = $T((b.x >> 1u) | (b.y << 31u), b.y >> 1u);\n  }\n  return r;\n}"),
    ("rt_${s}_from_i32", "fn rt_${s}_from_i32(x: i32) -> $T { return $T(bitcast<u32>(x), select(0u, 0xffffffffu, "
                         "x < 0)); }"),
    ("rt_f32_from_$s",
     "fn rt_f32_from_$s(a: $T) -> f32 {\n  let negative = bitcast<i32>(a.y) < 0;\n"
     "  let m = select(a, rt_neg_$s(a), negative);\n  var f = f32(m.x);\n  if (m.y != 0u) {\n"
     "    let s = countLeadingZeros(m.y);\n    let top = select((m.y << s) | (m.x >> (32u - s)), m.y, s == 0u);\n"
     "    f = ldexp(f32(top | select(0u, 1u, (m.x << s) != 0u)), i32(32u - s));\n  }\n"
     "  return select(f, -f, negative);\n}"),
    ("rt_cast_f32_$s",
     f"fn rt_cast_f32_$s(x: f32) -> $T {{\n  if ({_WGSL_NAN.format('x')}) {{ return $T(0u); }}\n"
     "  if (x <= -9223372036854775808.0f) { return $T(0u, 0x80000000u); }\n"
     "  if (x >= 9223372036854775808.0f) { return $T(0xffffffffu, 0x7fffffffu); }\n"
     "  let t = trunc(abs(x));\n  let hi = floor(t / 4294967296.0f);  // exact: t is a whole number below 2^63\n"
     "  let m = $T(u32(t - hi * 4294967296.0f), u32(hi));\n  return select(m, rt_neg_$s(m), x < 0.0f);\n}"),
)
WGSL_I64 = Emulated(
    ops={"neg": "rt_neg_{s}({0})", "abs": "rt_abs_{s}({0})", "sign": "rt_sign_{s}({0})", "not": "(~{0})",
         **{op: f"rt_{op}_{{s}}({{0}}, {{1}})" for op in ("add", "sub", "mul", "div", "rem", "pow", "max", "min",
                                                          "shr")},
         "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})"},
    compare={"eq": "all({0} == {1})", "ne": "any({0} != {1})", "lt": "rt_lt_{s}({0}, {1})",
             "gt": "rt_lt_{s}({1}, {0})", "le": "(!rt_lt_{s}({1}, {0}))", "ge": "(!rt_lt_{s}({0}, {1}))"},
    const="{T}({lo}u, {hi}u)",
    cast_from={"i32": "rt_{s}_from_i32({0})", "u32": "{T}({0}, 0u)", "bool": "{T}(select(0u, 1u, {0}), 0u)",
               "f32": "rt_cast_f32_{s}({0})"},
    cast_to={"i32": "bitcast<i32>(({0}).x)", "u32": "({0}).x", "bool": "any(({0}) != {T}(0u))",
             "f32": "rt_f32_from_{s}({0})"},
    helpers=_I64_HELPERS,
)

# ui64 in the same two words: i64's helpers where the bits are the same (add, sub, neg, mul, from i32), unsigned
# ones where they differ (the division loop carries the bit shifted out of the remainder, for numbers past 2^63); a
# shift by 64 or more is 0 (numpy's); f32 -> ui64 saturates at 0 and 2^64 - 1, NaN -> 0.
_I64_SHARED = ("rt_add_$s", "rt_sub_$s", "rt_neg_$s", "rt_mul32_$s", "rt_mul_$s", "rt_udivrem_$s",
               "rt_${s}_from_i32")
_UI64_HELPERS = (
    *(h for h in _I64_HELPERS if h[0] in _I64_SHARED),
    ("rt_lt_$s", "fn rt_lt_$s(a: $T, b: $T) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }"),
    ("rt_max_$s", "fn rt_max_$s(a: $T, b: $T) -> $T { return select(b, a, rt_lt_$s(b, a)); }"),
    ("rt_min_$s", "fn rt_min_$s(a: $T, b: $T) -> $T { return select(b, a, rt_lt_$s(a, b)); }"),
    ("rt_sign_$s", "fn rt_sign_$s(a: $T) -> $T { return $T(select(0u, 1u, any(a != $T(0u))), 0u); }"),
    ("rt_shr_$s",
     "fn rt_shr_$s(a: $T, b: $T) -> $T {\n  if (b.y != 0u || b.x >= 64u) { return $T(0u); }\n  let n = b.x;\n"
     "  if (n == 0u) { return a; }\n  if (n < 32u) { return $T((a.x >> n) | (a.y << (32u - n)), a.y >> n); }\n"
     "  return $T(a.y >> (n - 32u), 0u);\n}"),
    ("rt_div_$s", "fn rt_div_$s(a: $T, b: $T) -> $T { if (all(b == $T(0u))) { return a; } "
                  "return rt_udivrem_$s(a, b).xy; }"),
    ("rt_rem_$s", "fn rt_rem_$s(a: $T, b: $T) -> $T { if (all(b == $T(0u))) { return $T(0u); } "
                  "return rt_udivrem_$s(a, b).zw; }"),
    ("rt_pow_$s",
     "fn rt_pow_$s(a0: $T, b0: $T) -> $T {\n  var a = a0;\n  var b = b0;\n  var r = $T(1u, 0u);\n"
     "  while (any(b != $T(0u))) {\n    if ((b.x & 1u) != 0u) { r = rt_mul_$s(r, a); }\n    a = rt_mul_$s(a, a);\n"
     "    b = $T((b.x >> 1u) | (b.y << 31u), b.y >> 1u);\n  }\n  return r;\n}"),
    ("rt_f32_from_$s",
     "fn rt_f32_from_$s(m: $T) -> f32 {\n  if (m.y == 0u) { return f32(m.x); }\n  let s = countLeadingZeros(m.y);\n"
     "  let top = select((m.y << s) | (m.x >> (32u - s)), m.y, s == 0u);\n"
     "  return ldexp(f32(top | select(0u, 1u, (m.x << s) != 0u)), i32(32u - s));\n}"),
    ("rt_cast_f32_$s",
     f"fn rt_cast_f32_$s(x: f32) -> $T {{\n  if ({_WGSL_NAN.format('x')} || x <= 0.0f) {{ return $T(0u); }}\n"
     "  if (x >= 18446744073709551616.0f) { return $T(0xffffffffu); }\n"
     "  let t = trunc(x);\n  let hi = floor(t / 4294967296.0f);  // exact: t is a whole number below 2^64\n"
     "  return $T(u32(t - hi * 4294967296.0f), u32(hi));\n}"),
)
WGSL_UI64 = replace(WGSL_I64, ops={**WGSL_I64.ops, "abs": "{0}"}, helpers=_UI64_HELPERS)  # i64's names, the
# helpers behind them unsigned

WGSL = Dialect(
    name="wgsl",
    # i64 and ui64 in two u32 words (`emulated`); i8 and i16 in i32, wrapped after each op (`wrap`)
    types={"f32": "f32", "i32": "i32", "ui32": "u32", "i1": "bool", "i64": "vec2<u32>", "ui64": "vec2<u32>",
           "i16": "i32", "i8": "i32",
           "ui16": "u32", "ui8": "u32"},
    storage={"f16": "f16"},
    from_storage={"f16": "f32({0})", "bf16": "bitcast<f32>(({0}) << 16u)"},
    to_storage={"f16": "f16({0})", "bf16": "rt_f32_to_bf16({0})"},  # bf16: its bits, in the low half of a u32
    # WGSL has no 8- or 16-bit types in buffers and no shareable bool: bf16, i16 and ui16 buffers are u32 words of
    # two elements, bool, i8 and ui8 buffers of four (numpy's bytes), low part first
    word_parts={"bf16": _wgsl_word_parts(16, load="rt_bf16_half({0}, {1})", bits="rt_f32_to_bf16({0})"),
                "i1": _wgsl_word_parts(8, load="(((({0}) >> (u32({1}) * 8u)) & 0xffu) != 0u)",
                                       bits="select(0u, 1u, {0})"),
                **_WGSL_NARROW_PARTS},
    emulated={"i64": WGSL_I64, "ui64": WGSL_UI64},
    index32=True,
    index32_assume_fits=True,
    wrap=_WGSL_WRAP,
    kernel="@compute @workgroup_size({wx}, {wy}, {wz})\nfn {name}({params})",
    param="",
    global_param="@group(0) @binding({i}) var<storage, read_write> {name}: array<{T}>;",
    extra_params=("@builtin(workgroup_id) rt_group: vec3<u32>", "@builtin(local_invocation_id) rt_thread: vec3<u32>"),
    group_id="i32(rt_group.{x})",
    thread_id="i32(rt_thread.{x})",
    barrier="workgroupBarrier();",
    shared="var<workgroup>",
    shared_global=True,
    ops=WGSL_OPS,
    f32_suffix="",
    qualifier="",
    long_suffix="",
    unsigned_suffix="u",
    suffix_every_unsigned=True,
    inf="rt_inf()",
    nan="rt_nan()",
    special_float="({sign}{T}({0}))",
    declare="var {name}: {T} = {value};",
    declare_const="let {name}: {T} = {value};",
    loop="for (var {var}: {T} = {start}; {var} < {end}; {var}++)",
    array="var {name}: array<{T}, {size}>;",
    shared_array="{shared} {name}: array<{T}, {size}>;",
    cast="{T}({0})",
    trapless_rem="({0} - {1} * ({0} / {1}))",  # not `%`, whose i32 form NVIDIA's driver took as unsigned (rt_rem)
    select="select({2}, {1}, {0})",
    helpers=WGSL_HELPERS,
    cast_helper=(f"fn rt_cast_${{s}}_$d(x: $T) -> $D {{ if ({_WGSL_NAN.format('x')}) {{ return $D(0); }} "
                 "if (x <= $T($lo)) { return $dmin; } if (x >= $T($hi)) { return $dmax; } return $D(x); }"),
    is_nan=_WGSL_NAN,
    # A runtime value, so that no constant expression is infinite or NaN (WGSL rejects those).
    preamble=("fn rt_inf() -> f32 { var bits = 0x7f800000u; return bitcast<f32>(bits); }\n"
              "fn rt_nan() -> f32 { var bits = 0x7fc00000u; return bitcast<f32>(bits); }"),
)

DIALECTS = {d.name: d for d in (C99, CUDA, HIP, OPENCL, MSL, WGSL)}


def render_kernel(kernel: k.Kernel, dialect: Dialect) -> str:
    """One kernel function in `dialect` (without the preamble; see `render_module`)."""
    return _Renderer(kernel, dialect).render()


def support_table(dialect: Dialect):
    """What `dialect` cannot compute, read off its tables, as a `SupportTable` for a target's
    `support(desc)`: an elementwise op of a kind with no template (`exp` of integers) or whose
    template calls a helper missing for that kind (`rt_pow` of booleans), and an element type the
    dialect cannot spell (`i4`; f64 in MSL; a half type it neither stores nor keeps two to a word).
    A target adds its own refusals (buffers, extensions)."""
    from ..protocols import SupportTable

    helpers = dialect.helpers or HELPERS
    ops = {}
    for op in (*k.UNARY_OPS, *k.BINARY_OPS):
        for kind in KINDS:
            keys = [f"{op}.{kind}"] + ([f"{op}.int"] if kind in ("uint", "bool") else []) + [op]
            template = next((dialect.ops[key] for key in keys if key in dialect.ops), None)
            helper = re.search(r"\b(rt_\w+?)_\{s\}", template or "")
            if template is None:
                ops[f"rt.{op}:{kind}"] = f"{dialect.name} renderer: no {op} of {kind} values"
            elif helper and not any(name == f"{helper.group(1)}_$s" and kind in kinds for name, kinds, _ in helpers):
                ops[f"rt.{op}:{kind}"] = f"{dialect.name} renderer: no {helper.group(1)} helper for {kind} values"
    for name, table in dialect.emulated.items():  # an emulated type computes only what its table lists
        ops.update({f"rt.{op}:{name}": f"{dialect.name} renderer: no {op} of {name} values"
                    for op in (*k.UNARY_OPS, *k.BINARY_OPS)
                    if op not in table.ops and f"rt.{op}:{DTYPES[name].kind}" not in ops})
    dtypes = {name: f"{dialect.name} renderer: no {name} type" for name in DTYPES if name not in NARROW_TYPES
              if (F32.name if name in HALVES else name) not in dialect.types
              or (name in HALVES and name not in dialect.storage and name not in dialect.word_parts)}
    return SupportTable(ops, dtypes)


KINDS = ("float", "int", "uint", "bool")


def render_module(kernels, dialect: Dialect) -> str:
    """The preamble (with the fragment header when a kernel uses native fragments), the helpers the
    kernels call, and every kernel."""
    renderers = [_Renderer(kn, dialect) for kn in kernels]
    text = "\n\n".join(r.render() for r in renderers)
    helpers, calls = [], text
    for name, code in reversed(_helpers(dialect)):  # callers before callees: a chosen helper's calls count too
        if re.search(rf"\b{name}\(", calls):
            helpers.insert(0, code)
            calls += code
    preamble = dialect.preamble
    if any(r.native_fragments for r in renderers):
        preamble = "\n".join(p for p in (preamble, dialect.fragments.include) if p)
    return "\n\n".join(p for p in [preamble, "\n".join(helpers), text] if p) + "\n"


# -- helpers ------------------------------------------------------------------------------------


def _helpers(d: Dialect) -> list[tuple[str, str]]:
    """(name, code) of every helper `d` can emit, in dependency order."""
    out = []
    if d.as_float and "ui16" in d.types:
        fields = dict(Q=d.qualifier, U16=d.types["ui16"], U32=d.types["ui32"],
                      bits_to_float=d.as_float.format(f"({d.types['ui32']})x << 16"),
                      float_to_bits=d.as_uint.format("f"))
        out += [(name, Template(code).substitute(fields)) for name, code in BF16_HELPERS]
    native = {name: ctype for name, ctype in d.types.items() if name not in d.emulated}
    for name, kinds, body in d.helpers or HELPERS:
        for dt_name, ctype in native.items():
            dt = DTYPES[dt_name]
            if dt.kind in kinds:
                fields = dict(Q=d.qualifier, T=ctype, s=dt_name, f=_suffix(dt, d), min=_int_min(dt, d))
                out.append((Template(name).substitute(fields), Template(body).substitute(fields)))
    for src in ("f32", "f64"):
        for dst, dctype in native.items():
            dt = DTYPES[dst]
            if src in d.types and dt.kind in ("int", "uint"):
                lo, hi = (-(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1)) if dt.kind == "int" else (0, 2 ** dt.bits)
                fields = dict(Q=d.qualifier, T=d.types[src], D=dctype, s=src, d=dst, lo=f"{float(lo)!r}",
                              hi=f"{float(hi)!r}", dmin=_int_literal(lo, dt, d), dmax=_int_literal(hi - 1, dt, d))
                out.append((f"rt_cast_{src}_{dst}", Template(d.cast_helper or CAST_HELPER).substitute(fields)))
    for dt_name, table in d.emulated.items():
        fields = dict(T=d.types[dt_name], s=dt_name)
        out += [(Template(name).substitute(fields), Template(body).substitute(fields)) for name, body in table.helpers]
    return out


def _suffix(dt: DType, d: Dialect) -> str:
    return d.f32_suffix if dt.name == "f32" else ""


def _int_min(dt: DType, d: Dialect) -> str:
    return _int_literal(-(2 ** (dt.bits - 1)), dt, d) if dt.kind == "int" else "0"


def _int_literal(v: int, dt: DType, d: Dialect) -> str:
    if dt.bits == 64 and v == -(2 ** 63):  # -9223372036854775808 is `-` applied to a literal too large
        return f"({-(2 ** 63) + 1}{d.long_suffix} - 1)"
    text = str(v)
    if not -(2 ** 31) <= v < 2 ** 31:
        text += (d.unsigned_suffix if dt.kind == "uint" else "") + d.long_suffix
    elif dt.kind == "uint" and d.suffix_every_unsigned:
        text += d.unsigned_suffix
    return f"({text})" if v < 0 else text


# -- the renderer ---------------------------------------------------------------------------------


class _Renderer:
    def __init__(self, kernel: k.Kernel, dialect: Dialect):
        self.k, self.d = kernel, dialect
        self.buffers: dict[str, tuple[DType, bool]] = {p.name: (p.dtype, True) for p in kernel.params}  # is param
        self.stored: set[str] = set()  # arrays in their storage type (those native fragments load and store)
        self.param_storage: dict[str, str] = {}  # buffer parameter -> its declared element type
        self.native_fragments = False
        self.vector_arrays: set[str] = set()  # private arrays that 16-byte vector copies touch
        self.fragment_decls: dict[str, k.Fragment] = {}
        self.scopes: list[dict[str, str]] = [{}]  # variable -> C type, innermost last
        self.lines: list[str] = []
        self.globals: list[str] = []  # module-scope declarations this kernel needs (WGSL)
        self.indent = 1

    def fail(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.d.name} renderer: {what} (kernel {self.k.name})",
                                  hint="lower it differently, or use a backend that supports it")

    # -- types ------------------------------------------------------------------------------------
    @staticmethod
    def compute(dt: DType) -> DType:
        return F32 if dt.name in HALVES else dt

    def ctype(self, dt: DType) -> str:
        dt = self.compute(dt)
        if dt.name not in self.d.types:
            raise self.fail(f"element type {dt} is not supported by dialect {self.d.name}")
        return self.d.types[dt.name]

    def storage_type(self, dt: DType) -> str:
        if dt.name in HALVES and dt.name not in self.d.storage:
            raise self.fail(f"element type {dt} is not supported by dialect {self.d.name}")
        return self.d.storage.get(dt.name) or self.ctype(dt)

    # -- the kernel -------------------------------------------------------------------------------
    def render(self) -> str:
        kn, d = self.k if self.d.vector_copy else expand_vector_copies(self.k), self.d
        self.vector_arrays = {name for s in k.walk_stmts(kn.body) if isinstance(s, k.VectorCopy)
                              for name in (s.dst, s.src)}
        if k.has_fragments(kn.body):
            self.native_fragments = self.spells_fragments(kn)
            if self.native_fragments:
                moves = (k.FragmentLoad, k.FragmentStore)
                self.stored = {s.buffer for s in k.walk_stmts(kn.body) if isinstance(s, moves)}
            else:  # arrays that fragments load keep halves as halves all the same: the schedule sized them so
                loaded = {s.buffer for s in k.walk_stmts(kn.body) if isinstance(s, k.FragmentLoad)}
                self.stored = {s.name for s in k.walk_stmts(kn.body) if isinstance(s, k.Local) and s.name in loaded
                               and s.dtype.name in HALVES and s.dtype.name in d.storage}
                kn = expand_fragments(kn)
        if d.thread_id is None and kn.thread_vars and _has(kn.body, (k.Barrier,), shared=True):
            kn = serialize_threads(kn)  # a workgroup is one call here: its threads become loops, cut at barriers
        index_dt = k.INDEX
        if d.index32 and (d.index32_assume_fits or fits(kn)):
            kn, index_dt = narrow_indices(kn, assume_fits=d.index32_assume_fits), I32
        elif k.INDEX.name in d.emulated:
            raise self.fail(f"{k.INDEX} is emulated, so every kernel's indices must be narrowed (index32_assume_fits)")
        self.index_ctype = self.ctype(index_dt)
        self.k = kn
        # Half arrays that only move elements (a matmul's staging registers) keep them as stored: no conversions.
        self.stored |= {name for name in k.copy_arrays(kn)
                        if _local_type(kn, name).name in HALVES and _local_type(kn, name).name in d.storage
                        and _local_type(kn, name).name not in d.word_parts}
        threads = list(zip(kn.thread_vars, kn.workgroup_size))
        params = []
        for i, p in enumerate(kn.params):
            parts = d.word_parts.get(p.dtype.name)
            storage = (parts["atomic_word"] if p.access == "write" else parts["word"]) if parts else \
                self.storage_type(p.dtype)
            self.param_storage[p.name] = storage
            fields = dict(const="const " if p.access == "read" else "", T=storage, name=p.name, i=i, D=p.dtype.name)
            if d.param:
                params.append(d.param.format(**fields))
            if d.global_param:
                self.globals.append(d.global_param.format(**fields))
            if d.prologue:
                self.emit(d.prologue.format(**fields))
        for j, symbol in enumerate(kn.scalars):
            if not (d.scalar_param or d.scalar_prologue):
                raise self.fail("sizes known only at run time are not supported by this dialect")
            n, name = len(kn.params), k.symbol_var(symbol).name
            narrowed = index_dt != k.INDEX  # the argument stays 64-bit; the kernel computes with a 32-bit copy
            fields = dict(T=self.ctype(k.INDEX), name=f"{name}_arg" if narrowed else name, j=j, n=n, i=n + j)
            if d.scalar_param:
                params.append(d.scalar_param.format(**fields))
            if d.scalar_prologue:
                self.emit(d.scalar_prologue.format(**fields))
            if narrowed:
                self.emit(d.declare_const.format(T=self.index_ctype, name=name,
                                                 value=self.convert(fields["name"], k.INDEX, index_dt)))
        index = self.index_ctype
        for n, var in enumerate(kn.workgroup_vars):
            self.emit(d.declare_const.format(T=index, name=var, value=d.group_id.format(n=n, x=XYZ[n])))
        loops = []
        if d.thread_id is not None:
            for n, (var, _) in enumerate(threads):
                self.emit(d.declare_const.format(T=index, name=var, value=d.thread_id.format(n=n, x=XYZ[n])))
        else:  # no threads in the language: each workgroup loops over its threads
            loops = threads
        for var, extent in reversed(loops):
            self.emit(d.loop.format(T=index, var=var, start=0, end=extent) + " {")
            self.indent += 1
        self.stmts(kn.body)
        for _ in loops:
            self.indent -= 1
            self.emit("}")
        wx, wy, wz = kn.workgroup_size
        head = d.kernel.format(name=kn.name, params=", ".join([*params, *d.extra_params]), threads=wx * wy * wz,
                               wx=wx, wy=wy, wz=wz)
        return "\n".join([*self.globals, head + " {", *self.lines, "}"])

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    # -- statements -------------------------------------------------------------------------------
    def stmts(self, body: list) -> None:
        for s in body:
            method = getattr(self, "stmt_" + type(s).__name__.lower(), None)
            if method is None:
                raise self.fail(f"statement {type(s).__name__} is not supported")
            method(s)

    def block(self, head: str, body: list) -> None:
        self.emit(head + " {")
        self.indent += 1
        self.scopes.append({})
        self.stmts(body)
        self.scopes.pop()
        self.indent -= 1
        self.emit("}")

    def stmt_loop(self, s: k.Loop) -> None:
        if s.kind not in k.LOOP_KINDS:
            raise self.fail(f"loop kind '{s.kind}' is not supported")
        if s.kind == "thread" and self.d.thread_id is not None:
            raise self.fail("loops of kind 'thread' are not supported; bind threads with Kernel.thread_vars")
        if isinstance(s.extent, int) and s.extent <= 0:
            return
        if s.kind == "unroll" and self.d.unroll and isinstance(s.extent, int):
            self.emit(self.d.unroll.format(n=min(s.extent, 65534)))
        index = self.index_ctype
        end = s.start + s.extent if isinstance(s.extent, int) else self.expr(self.extent(s.extent + s.start))
        self.block(self.d.loop.format(T=index, var=s.var, start=s.start, end=end), s.body)

    def stmt_if(self, s: k.If) -> None:
        self.block(f"if ({self.expr(s.cond)})", s.body)

    def stmt_assign(self, s: k.Assign) -> None:
        ctype = self.ctype(s.value.dtype)
        value = self.expr(s.value)
        declared = next((scope[s.var] for scope in reversed(self.scopes) if s.var in scope), None)
        if declared == ctype:
            self.emit(f"{s.var} = {value};")
        elif declared is not None:  # a C variable has one type; shadowing it would drop the update
            raise self.fail(f"variable %{s.var} changes type from {declared} to {ctype}")
        else:
            self.scopes[-1][s.var] = ctype
            self.emit(self.d.declare.format(T=ctype, name=s.var, value=value))

    def stmt_store(self, s: k.Store) -> None:
        dt, is_param = self.buffer(s.buffer)
        v = s.value
        parts = self.d.word_parts.get(dt.name) if is_param else None
        if parts:
            index, n = self.subscript(s.index), parts["per_word"]
            bits = parts["bits"].format(self.convert(self.expr(v), v.dtype, self.compute(dt)))
            self.emit(parts["store"].format(pointer=self.element(s.buffer, f"(({index}) / {n})"),
                                            part=f"(({index}) % {n})", value=bits))
            return
        if isinstance(v, k.Load) and dt.name in HALVES and self.stored_as_is(s.buffer) and \
                self.stored_as_is(v.buffer) and self.buffer(v.buffer)[0] == v.dtype == dt:
            self.emit(f"{self.element(s.buffer, self.subscript(s.index))} = "
                      f"{self.element(v.buffer, self.subscript(v.index))};")
            return
        value = self.convert(self.expr(s.value), s.value.dtype, dt)
        if (is_param or s.buffer in self.stored) and dt.name in self.d.to_storage:
            value = self.d.to_storage[dt.name].format(value)
        self.emit(f"{self.element(s.buffer, self.subscript(s.index))} = {value};")

    def stmt_local(self, s: k.Local) -> None:
        stored = s.name in self.stored
        fields = dict(T=self.storage_type(s.dtype) if stored else self.ctype(s.dtype), name=s.name, size=s.size,
                      shared=self.d.shared)
        self.buffers[s.name] = (s.dtype, False)
        if not s.shared:
            aligned = s.name in self.vector_arrays and self.d.vector_array
            self.emit((aligned or self.d.array).format(**fields))
        elif self.d.shared is None:
            raise self.fail("shared (workgroup) arrays are not supported")
        elif self.d.shared_global:
            self.globals.append(self.d.shared_array.format(**fields))
        else:
            native = stored and self.native_fragments and self.d.fragments.array
            self.emit((native or self.d.shared_array).format(**fields))

    # -- native fragments (see FragmentSpelling) ---------------------------------------------------------
    def spells_fragments(self, kn: k.Kernel) -> bool:
        """Whether the dialect spells every fragment of `kn`, each loaded from and stored to arrays of its
        own element type; else the kernel takes the portable expansion."""
        spelling = self.d.fragments
        if spelling is None:
            return False
        fragments = {s.name: s for s in k.walk_stmts(kn.body) if isinstance(s, k.Fragment)}
        if any((f.m, f.n, f.k, f.dtype.name, f.acc.name) not in spelling.shapes or f.width != spelling.width
               or f.role not in spelling.types for f in fragments.values()):
            return False
        types = {p.name: p.dtype for p in kn.params}
        types.update({s.name: s.dtype for s in k.walk_stmts(kn.body) if isinstance(s, k.Local)})
        stmts = list(k.walk_stmts(kn.body))
        moves = [s for s in stmts if isinstance(s, (k.FragmentLoad, k.FragmentStore))]
        if not all(s.name in fragments and types.get(s.buffer) == fragments[s.name].element for s in moves):
            return False
        roles = [(s.name, "acc") for s in moves if isinstance(s, k.FragmentStore)]
        roles += [(name, role) for s in stmts if isinstance(s, k.FragmentMma)
                  for name, role in ((s.d, "acc"), (s.a, "a"), (s.b, "b"), (s.c, "acc"))]
        return all(name in fragments and fragments[name].role == role for name, role in roles)

    def fragment_fields(self, f: k.Fragment) -> dict:
        return dict(T=self.storage_type(f.element), m=f.m, n=f.n, k=f.k)

    def stmt_fragment(self, s: k.Fragment) -> None:
        spelling, fields = self.d.fragments, self.fragment_fields(s)
        self.fragment_decls[s.name] = s
        self.emit(f"{spelling.types[s.role].format(**fields)} {s.name};")
        if s.fill is not None:
            self.emit(spelling.fill.format(name=s.name, value=self.expr(k.const(s.fill, s.element)), **fields))

    def pointer(self, buffer: str, index: k.Expr) -> str:
        return "&" + self.element(buffer, self.subscript(index))

    def stmt_fragmentload(self, s: k.FragmentLoad) -> None:
        role = self.fragment_decls[s.name].role
        self.emit(self.d.fragments.load[role].format(name=s.name, pointer=self.pointer(s.buffer, s.index),
                                                     stride=s.stride))

    def stmt_fragmentmma(self, s: k.FragmentMma) -> None:
        self.emit(self.d.fragments.mma.format(d=s.d, a=s.a, b=s.b, c=s.c))

    def stmt_fragmentstore(self, s: k.FragmentStore) -> None:
        self.emit(self.d.fragments.store.format(name=s.name, pointer=self.pointer(s.buffer, s.index),
                                                stride=s.stride))

    def stmt_barrier(self, s: k.Barrier) -> None:
        if self.d.barrier is None:  # no threads: a workgroup is one invocation, nothing to wait for
            self.emit("/* barrier: one invocation per workgroup */")
        else:
            self.emit(self.d.barrier)

    def buffer(self, name: str) -> tuple[DType, bool]:
        if name not in self.buffers:
            raise self.fail(f"buffer %{name} is not a parameter or a local array")
        return self.buffers[name]

    def stmt_vectorcopy(self, s: k.VectorCopy) -> None:
        """One 16-byte move where both sides hold the elements as stored, else element by element."""
        dt = self.buffer(s.src)[0]
        if dt.itemsize * s.lanes == 16 and self.buffer(s.dst)[0] == dt and \
                all(self.stored_as_is(n) and not (self.buffer(n)[1] and self.in_words(dt))
                    for n in (s.dst, s.src)):
            self.emit(self.d.vector_copy.format(dst=self.element(s.dst, self.subscript(s.dst_index)),
                                                src=self.element(s.src, self.subscript(s.src_index))))
        else:
            self.stmts([vector_copy_elements(s, dt)])

    def stored_as_is(self, name: str) -> bool:
        """Whether `name`'s elements are in their storage type (a parameter, or an array kept so)."""
        return self.buffer(name)[1] or name in self.stored

    def in_words(self, dt: DType) -> bool:
        """Whether a parameter of `dt` is kept several to a 32-bit word (`Dialect.word_parts`)."""
        return dt.name in self.d.word_parts

    def element(self, name: str, index: str) -> str:
        dt, is_param = self.buffer(name)
        if not is_param:
            return f"{name}[{index}]"
        storage = self.param_storage[name] if self.in_words(dt) else self.storage_type(dt)
        return self.d.element.format(name=name, index=index, T=storage, D=dt.name)

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, e: k.Expr) -> str:
        method = getattr(self, "expr_" + type(e).__name__.lower(), None)
        if method is None:
            raise self.fail(f"expression {type(e).__name__} is not supported")
        return method(e)

    def expr_const(self, e: k.Const) -> str:
        dt = self.compute(e.dtype)
        ctype = self.ctype(dt)
        if dt.kind == "bool":
            return "true" if e.value else "false"
        if dt.name in self.d.emulated:
            bits = int(e.value) & (2 ** 64 - 1)
            return self.d.emulated[dt.name].const.format(lo=bits & 0xFFFFFFFF, hi=bits >> 32, T=ctype)
        if dt.is_float:
            v = float(np.array(e.value, dtype=e.dtype.np_dtype))  # a half constant is rounded to its type once
            if math.isnan(v):
                return self.d.special_float.format(self.d.nan, T=ctype, sign="")
            if math.isinf(v):
                return self.d.special_float.format(self.d.inf, T=ctype, sign="-" if v < 0 else "")
            text = repr(v) + ("f" if dt.name == "f32" else "")  # repr round-trips: the nearest float is v
            return f"({text})" if v < 0 or text.startswith("-") else text
        return _int_literal(int(e.value), dt, self.d)

    def expr_var(self, e: k.Var) -> str:
        return e.name

    def expr_load(self, e: k.Load) -> str:
        dt, is_param = self.buffer(e.buffer)
        parts = self.d.word_parts.get(dt.name) if is_param else None
        if parts:
            index, n = self.subscript(e.index), parts["per_word"]
            word = self.element(e.buffer, f"(({index}) / {n})")
            if self.param_storage[e.buffer] == parts["atomic_word"]:
                word = parts["atomic_load"].format(word)
            return self.convert(parts["load"].format(word, f"(({index}) % {n})"), dt, e.dtype)
        text = self.element(e.buffer, self.subscript(e.index))
        if (is_param or e.buffer in self.stored) and dt.name in self.d.from_storage:
            text = self.d.from_storage[dt.name].format(text)
        return self.convert(text, dt, e.dtype)

    def template(self, kind: str, op: str, dt: DType) -> str:
        dt = self.compute(dt)
        if dt.name in self.d.emulated:
            template = self.d.emulated[dt.name].ops.get(op)
        else:
            keys = [f"{op}.{dt.kind}"] + ([f"{op}.int"] if dt.kind in ("uint", "bool") else []) + [op]
            template = next((self.d.ops[key] for key in keys if key in self.d.ops), None)
        if template is None or op not in (k.UNARY_OPS if kind == "unary" else k.BINARY_OPS):
            raise self.fail(f"{kind} op '{op}' on {dt} is not supported by dialect {self.d.name}")
        return template

    def apply(self, template: str, dt: DType, *args: str) -> str:
        c = self.compute(dt)
        text = template.format(*args, T=self.ctype(c), s=c.name, f=_suffix(c, self.d))
        if c.kind in ("int", "uint") and c.bits < 32:  # C computes these in int: wrap back, as numpy does
            text = self.narrow(text, c)
        return text

    def narrow(self, text: str, dt: DType) -> str:
        """`text`, computed in a type at least as wide as `dt`'s (an int), as a value of `dt`: wrapped."""
        if dt.name in self.d.wrap:
            return self.d.wrap[dt.name].format(text)
        return self.d.cast.format(text, T=self.ctype(dt))

    def expr_unary(self, e: k.Unary) -> str:
        return self.apply(self.template("unary", e.op, e.dtype), e.dtype, self.expr(e.a))

    def expr_binary(self, e: k.Binary) -> str:
        if e.op in ("div", "rem") and e.dtype.kind == "int" and e.dtype.name not in self.d.emulated and (
                (isinstance(e.b, k.Const) and e.b.value not in (0, -1)) or k.is_size(e.b)):
            # index arithmetic: a constant divisor, or a size known at run time, cannot trap, so C's `/` and `%`
            template = "({0} / {1})" if e.op == "div" else self.d.trapless_rem
            return self.apply(template, e.dtype, self.expr(e.a), self.expr(e.b))
        return self.apply(self.template("binary", e.op, e.dtype), e.dtype, self.expr(e.a), self.expr(e.b))

    def expr_compare(self, e: k.Compare) -> str:
        if e.op not in CMP:
            raise self.fail(f"compare predicate '{e.op}' is not supported by dialect {self.d.name}")
        a, b = self.expr(e.a), self.expr(e.b)
        if (dt := e.a.dtype).name in self.d.emulated:
            return self.d.emulated[dt.name].compare[e.op].format(a, b, T=self.ctype(dt), s=dt.name)
        if self.d.is_nan and e.a.dtype.kind == "float" and e.op in ("eq", "ne"):
            if e.a == e.b:  # `x != x` is how isnan reaches a kernel
                return self.d.is_nan.format(a) if e.op == "ne" else f"(!{self.d.is_nan.format(a)})"
            if isinstance(e.b, k.Const) and math.isinf(e.b.value):  # isinf: on the bits, as NaN
                bits = "0x7f800000u" if e.b.value > 0 else "0xff800000u"
                return f"(bitcast<u32>({a}) {CMP[e.op]} {bits})"
            if e.op == "ne":  # true where either side is NaN, as C's `!=`
                return f"(({a} != {b}) || {self.d.is_nan.format(a)} || {self.d.is_nan.format(b)})"
        return f"({a} {CMP[e.op]} {b})"

    def expr_select(self, e: k.Select) -> str:
        return self.d.select.format(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def expr_cast(self, e: k.Cast) -> str:
        if e.dtype.name in self.d.emulated and isinstance(e.a, k.Const) and e.a.dtype.kind in ("int", "uint"):
            return self.expr_const(k.Const(int(e.a.value), e.dtype))  # a narrowed constant, as one of i64 data
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def convert(self, text: str, src: DType, dst: DType) -> str:
        """`text`, a value of `src` (in its compute type), as a value of `dst`."""
        if src == dst:
            return text
        cs, cd = self.compute(src), self.compute(dst)
        if dst.name in HALVES:  # round to the half type once, then compute in f32 again
            if dst.name not in self.d.word_parts:
                self.storage_type(dst)
            inner = self.convert(text, src, F32)
            return self.d.from_storage[dst.name].format(self.d.to_storage[dst.name].format(inner))
        if cs == cd:
            return text
        if cs.name in self.d.emulated or cd.name in self.d.emulated:
            return self.convert_emulated(text, cs, cd)
        if cd.kind == "bool":
            return f"({text} != 0)"
        if cs.is_float and cd.kind in ("int", "uint"):
            self.ctype(cd)
            return f"rt_cast_{cs.name}_{cd.name}({text})"
        if cd.name in self.d.wrap and cs.kind != "bool":  # to a narrow type computed in a wide one: wrap
            return self.narrow(self.d.cast.format(text, T=self.ctype(cd)), cd)
        return self.d.cast.format(text, T=self.ctype(cd))

    def convert_emulated(self, text: str, src: DType, dst: DType) -> str:
        """`text` of compute type `src` as `dst`, one of them emulated (`Dialect.emulated`): the emulated side's
        template for the other's spelling (i8 is cast as the i32 it is computed in, then wrapped)."""
        from_emulated = src.name in self.d.emulated
        emulated, other = (src, dst) if from_emulated else (dst, src)
        table = self.d.emulated[emulated.name]
        template = None if other.name in self.d.emulated else \
            (table.cast_to if from_emulated else table.cast_from).get(self.ctype(other))
        if template is None:
            raise self.fail(f"a cast from {src} to {dst} is not supported by dialect {self.d.name}")
        out = template.format(text, T=self.ctype(emulated), s=emulated.name)
        return self.narrow(out, dst) if dst.name in self.d.wrap else out

    # Where the IR's index type is emulated (WGSL's i64), every kernel's indices are narrowed to i32 (`render`), and
    # what the IR still types i64 where an index is wanted is made i32 too: a loop's extent of sizes known at run time
    # (index arithmetic that `narrow_indices` leaves alone) and data used as a subscript (a gather's index, in bounds).
    def extent(self, e: k.Expr) -> k.Expr:
        return as_i32(e) if e.dtype.name in self.d.emulated else e

    def subscript(self, e: k.Expr) -> str:
        text = self.expr(e)
        return self.convert(text, e.dtype, I32) if e.dtype.name in self.d.emulated else text


def _local_type(kernel: k.Kernel, name: str) -> DType:
    return next(s.dtype for s in k.walk_stmts(kernel.body) if isinstance(s, k.Local) and s.name == name)


def _has(stmts, types, shared: bool = False) -> bool:
    """Whether `stmts` hold a statement of `types` (or, with `shared`, a shared Local)."""
    for s in stmts:
        if isinstance(s, types) or (shared and isinstance(s, k.Local) and s.shared):
            return True
        if isinstance(s, (k.Loop, k.If)) and _has(s.body, types, shared):
            return True
    return False
