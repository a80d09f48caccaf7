"""The cuda backend's own schedule for large half-precision matmuls on Hopper (sm_90a): warpgroup MMA
(wgmma) fed by the Tensor Memory Accelerator (TMA), which the core's portable fragment matmul cannot
spell (its fragments are warp-sized and staged through registers).

One thread block computes a `tile_m` x `tile_n` tile of C = A @ B:

- a producer warpgroup, of which one thread issues TMA copies of the next A (tile_m x 64) and B
  (64 x tile_n) tiles into a ring of `stages` shared-memory slots, in the 128-byte swizzled layout
  wgmma reads, each slot guarded by a "full" and an "empty" mbarrier;
- two consumer warpgroups, each multiplying 64 rows of the tile out of the slots with
  `wgmma.mma_async` m64nNk16 (f32 accumulators in registers, one wgmma group kept in flight), then
  writing their rows of C straight from the accumulators.

TMA zero-fills past the matrices' edges, so any M, N and K run; rows of A and B must be 16-byte aligned
(K and N multiples of 8). B is read where it lies, row-major, which wgmma reads as N-major. The driver
builds the two tensor maps when it records the dispatch, from `LaunchInfo` (`compile.py` stores it in
the executable's header).

`plan(fn, desc)` says whether a dispatch takes this schedule: a dispatch that is only the matmul, or the
matmul plus a bias along its rows (a linear layer; any other epilogue keeps the core's schedule), f16 or
bf16 operands, and enough tiles to fill the GPU. The bias is added as the graph says: to the product
rounded to the output's type, then rounded again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from retarget.protocols import Binding, EntryPoint

TILE_K = 64  # one 128-byte swizzle row of halves
CONSUMERS = 2  # warpgroups multiplying; each owns 64 rows of the tile
THREADS = 128 * (1 + CONSUMERS)
# (tile_n, stages), widest first: a plan is taken when its tiles give every multiprocessor MIN_WAVES of them
# (fewer: the core's wmma schedule, whose smaller tiles spread further, runs the matmul)
PLANS = ((256, 4), (128, 6))
MIN_WAVES = 1.0
GROUP_M = 8  # tile rows walked together, so that neighbouring blocks share B tiles in L2
REGISTERS = (40, 232)  # setmaxnreg: the producer gives its registers to the consumers

OPERAND_TYPES = ("f16", "bf16")  # as PTX spells them too
OUTPUT_TYPES = {"f16": ("__half2", "__floats2half2_rn"), "bf16": ("__nv_bfloat162", "__floats2bfloat162_rn"),
                "f32": ("float2", "make_float2")}
C_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
TO_FLOAT = {"f16": "__half2float({})", "bf16": "__bfloat162float({})", "f32": "{}"}
ROUNDED = {"f16": "__half2float(__float2half_rn({}))", "bf16": "__bfloat162float(__float2bfloat16_rn({}))", "f32": "{}"}
TMA_DTYPES = {"f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"}


@dataclass(frozen=True)
class TensorMap:
    """A 2-D TMA descriptor the driver encodes for binding `binding` when it records a dispatch: `dims`
    and `box` innermost first, `row_bytes` between rows, 128-byte swizzle."""

    binding: int
    dtype: str
    dims: tuple[int, int]
    row_bytes: int
    box: tuple[int, int]

    def to_json(self) -> dict:
        return {"binding": self.binding, "dtype": self.dtype, "dims": list(self.dims), "row_bytes": self.row_bytes,
                "box": list(self.box)}

    @classmethod
    def from_json(cls, d: dict) -> TensorMap:
        return cls(int(d["binding"]), d["dtype"], tuple(d["dims"]), int(d["row_bytes"]), tuple(d["box"]))


@dataclass(frozen=True)
class LaunchInfo:
    """What a native kernel needs at launch beyond its buffers: dynamic shared memory, and tensor maps
    passed after the buffer addresses."""

    shared_bytes: int = 0
    tensor_maps: tuple[TensorMap, ...] = ()

    def to_json(self) -> dict:
        return {"shared_bytes": self.shared_bytes, "tensor_maps": [t.to_json() for t in self.tensor_maps]}

    @classmethod
    def from_json(cls, d: dict) -> LaunchInfo:
        return cls(int(d.get("shared_bytes", 0)), tuple(TensorMap.from_json(t) for t in d.get("tensor_maps", ())))


@dataclass(frozen=True)
class GemmPlan:
    m: int
    n: int
    k: int
    dtype: str  # of A and B
    out: str  # of C
    a_arg: int  # which dispatch argument A and B are
    b_arg: int
    tile_n: int
    stages: int
    bias_arg: int | None = None  # the argument added to each row of the product, if any
    tile_m: int = 64 * CONSUMERS  # 64 rows a consumer

    @property
    def tiles(self) -> tuple[int, int]:
        return -(-self.m // self.tile_m), -(-self.n // self.tile_n)

    @property
    def stage_bytes(self) -> tuple[int, int]:
        return self.tile_m * TILE_K * 2, TILE_K * self.tile_n * 2

    @property
    def shared_bytes(self) -> int:
        """The ring of slots, 1024 bytes for aligning it (the swizzle repeats every 1024), the mbarriers."""
        return self.stages * sum(self.stage_bytes) + 1024 + 16 * self.stages

    def schedule(self) -> str:
        return (f"wgmma m64n{self.tile_n}k16 {self.dtype}->f32, TMA, tile {self.tile_m}x{self.tile_n}x{TILE_K}, "
                f"{self.stages} stages, 1 producer + {CONSUMERS} consumer warpgroups"
                + (", bias" if self.bias_arg is not None else ""))


@dataclass
class NativeKernel:
    """A kernel the backend wrote itself: its CUDA C, entry point and launch needs."""

    name: str
    source: str
    entry: EntryPoint
    launch: LaunchInfo = field(default_factory=LaunchInfo)


def plan(fn, desc) -> GemmPlan | None:
    """The plan for dispatch `fn` on `desc`, or None where the core's schedule runs it."""
    if desc.extra.get("sm") != "90a":  # wgmma and setmaxnreg are sm_90a's own: no PTX for newer GPUs has them
        return None
    ops = fn.ops
    if not 1 <= len(ops) <= 2 or ops[0].name != "rt.matmul" or len(fn.returns) != 1 \
            or fn.returns[0] is not ops[-1].result:
        return None
    matmul = ops[0]
    a, b = matmul.operands
    where = {id(x): i for i, x in reversed(list(enumerate(fn.args)))}  # Values compare by value, not identity
    if id(a) not in where or id(b) not in where or a.type.rank != 2 or b.type.rank != 2:
        return None
    bias = None
    if len(ops) == 2:  # a linear layer's bias: matmul + a vector of N (or 1 x N) along its rows, the same type
        add = ops[1]
        others = [x for x in add.operands if x is not matmul.result]
        if add.name != "rt.add" or len(others) != 1 or id(others[0]) not in where \
                or add.result.type != matmul.result.type or others[0].type.dtype != add.result.type.dtype \
                or tuple(others[0].type.shape) not in ((b.type.shape[1],), (1, b.type.shape[1])):
            return None
        bias = where[id(others[0])]
    dt, out = a.type.dtype.name, matmul.result.type.dtype.name
    if dt not in OPERAND_TYPES or b.type.dtype.name != dt or out not in OUTPUT_TYPES \
            or f"wgmma.m64nNk16.{dt}" not in desc.matrix_units:
        return None
    m, k = a.type.shape
    n = b.type.shape[1]
    if not all(isinstance(d, int) for d in (m, n, k)) or k % 8 or n % 8 or k < TILE_K:
        return None  # TMA needs 16-byte rows; sizes known at run time keep the core's schedule
    multiprocessors = desc.extra.get("multiprocessors") or 132
    shared = desc.extra.get("shared_memory_optin_bytes") or 0
    for tile_n, stages in PLANS:
        p = GemmPlan(m, n, k, dt, out, where[id(a)], where[id(b)], tile_n, stages, bias)
        tiles_m, tiles_n = p.tiles
        if p.shared_bytes <= shared and tiles_m * tiles_n >= MIN_WAVES * multiprocessors:
            return p
    return None


def kernel(p: GemmPlan, name: str, fn) -> NativeKernel:
    """The CUDA C of plan `p` as kernel `name` of dispatch `fn`, with its entry point and launch needs."""
    bindings = tuple([Binding(x.type, "read") for x in fn.args] + [Binding(r.type, "write") for r in fn.returns])
    tiles_m, tiles_n = p.tiles
    entry = EntryPoint(name, bindings, (THREADS, 1, 1), (tiles_m * tiles_n, 1, 1))
    a_map = TensorMap(p.a_arg, p.dtype, (p.k, p.m), p.k * 2, (TILE_K, p.tile_m))
    b_map = TensorMap(p.b_arg, p.dtype, (p.n, p.k), p.n * 2, (64, TILE_K))  # tile_n / 64 boxes a slot
    source = _source(p, name, [x.type.dtype.name for x in fn.args])
    return NativeKernel(name, source, entry, LaunchInfo(p.shared_bytes, (a_map, b_map)))


# -- the CUDA C ---------------------------------------------------------------------------------------------

_HELPERS = r"""
#ifndef RT_HOPPER_GEMM_HELPERS
#define RT_HOPPER_GEMM_HELPERS
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct __align__(64) rt_tensor_map { unsigned long long opaque[16]; };  // a CUtensorMap, encoded by the driver

static __device__ __forceinline__ unsigned rt_shared(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void rt_bar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
static __device__ __forceinline__ void rt_bar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void rt_bar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
static __device__ __forceinline__ void rt_bar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
static __device__ __forceinline__ void rt_tma_load(unsigned dst, const rt_tensor_map* map, int x, int y, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"((unsigned long long)map), "r"(x), "r"(y), "r"(bar) : "memory");
}
// A wgmma shared-memory descriptor: 128-byte swizzle, offsets in 16-byte units
static __device__ __forceinline__ unsigned long long rt_wgmma_desc(unsigned address, unsigned leading,
                                                                   unsigned stride) {
  return (unsigned long long)((address & 0x3FFFF) >> 4) | ((unsigned long long)(leading >> 4) << 16)
       | ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}
#endif
"""


def _wgmma(p: GemmPlan) -> str:
    """The m64nNk16 wgmma of `p`'s types as an inline function over the consumer's accumulators."""
    regs = p.tile_n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    places = ", ".join(f"%{i}" for i in range(regs))
    return (f"static __device__ __forceinline__ void rt_wgmma_{p.dtype}_n{p.tile_n}"
            f"(float* d, unsigned long long da, unsigned long long db) {{\n"
            f'  asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{p.tile_n}k16.f32.{p.dtype}.{p.dtype} "\n'
            f'    "{{{places}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, 1; }}"\n'
            f'    : {outs}\n    : "l"(da), "l"(db), "r"(1));\n}}\n')


def _source(p: GemmPlan, name: str, arg_types: list[str]) -> str:
    pair, convert = OUTPUT_TYPES[p.out]
    out_c = C_TYPES[p.out]
    a_bytes, b_bytes = p.stage_bytes
    tiles_m, tiles_n = p.tiles
    regs = p.tile_n // 2
    mma = f"rt_wgmma_{p.dtype}_n{p.tile_n}"
    args = [f"const {C_TYPES[t]}* __restrict__ in{i}" for i, t in enumerate(arg_types)]
    if p.bias_arg is None:
        values = "d[i], d[i + 1]"
    else:  # the product rounded to the output's type, plus the bias, as the graph computes it
        bias = f"in{p.bias_arg}"
        values = ", ".join(f"{ROUNDED[p.out].format(f'd[i + {j}]')} + {TO_FLOAT[p.out].format(f'{bias}[c + {j}]')}"
                           for j in (0, 1))
    # B: tile_n / 64 boxes of 64 K-rows x 128 bytes (N-major; the descriptor's leading offset steps from box
    # to box along N, its stride from 8 rows of K to the next); the next k16 is 16 rows (2048 bytes) down
    b_loads = (f"for (int j = 0; j < {p.tile_n // 64}; ++j) "
               f"rt_tma_load(b_slot + j * {64 * TILE_K * 2}, &map_b, n0 + j * 64, k0, full);")
    b_desc = f"rt_wgmma_desc(b_slot + ks * 2048, {64 * TILE_K * 2}, 1024)"
    steps = -(-p.k // TILE_K)
    return f"""{_HELPERS}
{_wgmma(p)}
// schedule: {p.schedule()}
extern "C" __global__ void __launch_bounds__({THREADS}, 1) {name}(
    {", ".join(args)}, {out_c}* __restrict__ out,
    const __grid_constant__ rt_tensor_map map_a, const __grid_constant__ rt_tensor_map map_b) {{
  extern __shared__ __align__(1024) unsigned char raw[];
  const unsigned base = (rt_shared(raw) + 1023) & ~1023u;  // the swizzle repeats every 1024 bytes
  const unsigned a_ring = base, b_ring = base + {p.stages * a_bytes};
  const unsigned bars = b_ring + {p.stages * b_bytes};  // full[s] at bars + 8s, empty[s] at bars + 8 (stages + s)
  // tiles walked {GROUP_M} tile rows at a time, so that blocks running together share tiles of B in L2
  const int group = blockIdx.x / ({GROUP_M} * {tiles_n});
  const int first = group * {GROUP_M};
  const int rows = min({tiles_m} - first, {GROUP_M});
  const int in_group = blockIdx.x % ({GROUP_M} * {tiles_n});
  const int m0 = (first + in_group % rows) * {p.tile_m}, n0 = (in_group / rows) * {p.tile_n};
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {{
    for (int s = 0; s < {p.stages}; ++s) {{
      rt_bar_init(bars + 8 * s, 1);
      rt_bar_init(bars + 8 * ({p.stages} + s), {CONSUMERS});
    }}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  __syncthreads();
  if (wg == 0) {{  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 {REGISTERS[0]};");
    if (threadIdx.x == 0) {{
      for (int kt = 0; kt < {steps}; ++kt) {{
        const int s = kt % {p.stages};
        if (kt >= {p.stages}) rt_bar_wait(bars + 8 * ({p.stages} + s), ((kt / {p.stages}) + 1) & 1);
        const unsigned full = bars + 8 * s, a_slot = a_ring + s * {a_bytes}, b_slot = b_ring + s * {b_bytes};
        const int k0 = kt * {TILE_K};
        rt_bar_expect(full, {a_bytes + b_bytes});
        rt_tma_load(a_slot, &map_a, k0, m0, full);
        {b_loads}
      }}
    }}
  }} else {{  // consumer: rows (wg - 1) * 64 of the tile
    asm volatile("setmaxnreg.inc.sync.aligned.u32 {REGISTERS[1]};");
    float d[{regs}];
#pragma unroll
    for (int i = 0; i < {regs}; ++i) d[i] = 0.0f;
    for (int kt = 0; kt < {steps}; ++kt) {{
      const int s = kt % {p.stages};
      rt_bar_wait(bars + 8 * s, (kt / {p.stages}) & 1);
      const unsigned a_slot = a_ring + s * {a_bytes} + (wg - 1) * {64 * TILE_K * 2}, b_slot = b_ring + s * {b_bytes};
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < {TILE_K // 16}; ++ks)
        {mma}(d, rt_wgmma_desc(a_slot + ks * 32, 16, 1024), {b_desc});
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // the previous step's group is done
      if (kt > 0 && threadIdx.x % 128 == 0) rt_bar_arrive(bars + 8 * ({p.stages} + (kt - 1) % {p.stages}));
    }}
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    // accumulator i of thread t: row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (t % 4) + i % 2
    const int t = threadIdx.x % 128;
    const int row = m0 + (wg - 1) * 64 + (t / 32) * 16 + (t % 32) / 4;
    const int col = n0 + (t % 4) * 2;
#pragma unroll
    for (int i = 0; i < {regs}; i += 2) {{
      const int r = row + 8 * ((i / 2) % 2), c = col + 8 * (i / 4);
      if (r < {p.m} && c < {p.n})
        *reinterpret_cast<{pair}*>(out + (long long)r * {p.n} + c) = {convert}({values});
    }}
  }}
}}
"""
