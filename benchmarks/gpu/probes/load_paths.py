"""Where the Vulkan fragment GEMM's global loads cost time, and the SM clock each kernel runs at.

Each variant changes only the 16-byte global loads that stage A and B (the uvec4 `VectorCopy`s out of a storage
buffer) or the plan, then times 4096^3 f16 (median of the submits in about 1.5 s, device time) while
`nvidia-smi` samples the SM clock and power. cuBLAS (`torch.matmul`) is timed and sampled the same way.

- memory operands on the loads (Nontemporal, Volatile, Aligned 16), or the read-only bindings decorated Coherent
  or Restrict;
- timing only, wrong answers on purpose: loads from a 32 KB window (L1 hits), from a 4 MB window (L2 hits), or no
  loads at all (the staged words all ones);
- workgroups of two 64x64 subgroups (four resident a multiprocessor instead of two of four subgroups);
- shapes that fill whole waves of workgroups, or take twice the steps a tile (what the last wave and each
  tile's prologue and epilogue cost);
- a touch of each line two steps ahead (one f16 load a thread and operand, summed into a float kept alive), so
  that the staging loads of the step after hit L1;
- workgroups of one parity delayed at their start, to put two that start together out of phase;
- tiles handed out in pairs that share A's rows, to workgroups `distance` apart in launch order, in case those
  run on one multiprocessor (then one's loads of A hit what the other brought into L1), or one tile to both
  (timing only: whether they do share one), or one tile to every workgroup of a multiprocessor, the one in the
  second block of four warp slots started late (SPV_NV_shader_sm_builtins);
- the larger plans of one workgroup a multiprocessor (8 subgroups), and two staged copies of 32-deep steps;
- B's fragments loaded straight from its buffer by column-major cooperative-matrix loads (fed B transposed, so
  the answer is right), only A staged;
- A (or A and B) packed in fragment order (the variant is fed it so) and each lane's fragments loaded into
  registers a k-slice ahead and built element by element, only B staged (or nothing, and no barriers);
- each staged run moved by one OpCopyMemory (global -> shared, no registers between), where its load or its
  store was, to see whether the driver makes it an asynchronous copy. With PROBE_PIPELINE_CACHE=FILE the device's
  pipeline cache is written after each variant, for `vulkan_sass.py`;
- the buffers in device-only memory instead of the device-local memory the host can map;
- timing only: A's and B's words relabelled so that each step tile is one contiguous 16 KB block (page locality);
- timing only: one tile a multiprocessor, the second workgroup held a step (or no step) behind the first by a
  flag it spins on, so that its loads find the first's lines in L1;
- B's loads spread a line a row (a subgroup's lanes on 4 rows of one line each, as A's are);
- every 32-byte sector of the lines two steps ahead touched (one f16 each, held raw), A and B, A or B;
- shapes whose rows are not a power of two bytes apart (A's, or A's and B's).

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/probes/load_paths.py [NAME-SUBSTRING...]
                                                                              (carry .gl and .whl)
NAME-SUBSTRINGs pick variants by name. PROBE_SIZE sets the size (4096); PROBE_TARGET=vulkan-spirv:hopper
only compiles each variant, for a check on a machine without the GPU, and with PROBE_SPIRV_VAL=.venv/bin/spirv-val
also validates each kernel.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

VOLATILE, ALIGNED, NONTEMPORAL = 0x1, 0x2, 0x4  # SPIR-V MemoryAccess bits
RESTRICT, COHERENT = 19, 23  # SPIR-V decorations
SHADER_SM_BUILTINS, WARP_ID, SM_ID = 5373, 5376, 5377  # SPV_NV_shader_sm_builtins: capability, WarpIDNV, SMIDNV
SECONDS = 1.5


@contextlib.contextmanager
def sampled_clocks(into: dict):
    """SM clock (MHz) and board power (W) medians, sampled every 20 ms while the block runs."""
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                "-lms", "20"], stdout=subprocess.PIPE, text=True)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        smi.terminate()
        lines = smi.communicate()[0].splitlines()[5:]  # the first samples see the ramp up
        samples = [[float(x) for x in line.split(",")] for line in lines if line.count(",") == 1]
        if samples:
            into["sm_mhz"] = statistics.median(s[0] for s in samples)
            into["watts"] = statistics.median(s[1] for s in samples)


def timed(row: dict, run) -> dict:
    """`row` with the median of what `run()` returns (seconds a call, a list) over about SECONDS, as `ms`, the
    number of calls, and the SM clock and power sampled meanwhile."""
    seconds = []
    with sampled_clocks(row):
        end_at = time.perf_counter() + SECONDS
        while time.perf_counter() < end_at:
            seconds += run()
    row.update(ms=statistics.median(seconds[3:]) * 1e3, calls=len(seconds))
    return row


def cublas_row(ta, tb) -> dict:
    """torch.matmul (cuBLAS) of two CUDA tensors, timed by CUDA events around each call."""
    import torch

    def run():
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.matmul(ta, tb)
        end.record()
        torch.cuda.synchronize()
        return [begin.elapsed_time(end) / 1e3]
    return timed({"variant": "torch.matmul (cuBLAS)", "flop": 2 * ta.shape[0] * ta.shape[1] * tb.shape[1]}, run)


def report(rows: list, json_name: str, width: int = 45) -> None:
    """A line per row (TFLOP/s, clock, power, error), and $OUT/`json_name` when OUT is set."""
    for row in rows:
        row["tflops"] = row["flop"] / row["ms"] / 1e9
        print(f"{row['variant']:<{width}} {row['ms']:.3f} ms {row['tflops']:6.1f} TFLOP/s"
              f"  SM {row.get('sm_mhz', float('nan')):.0f} MHz {row.get('watts', float('nan')):.0f} W"
              f"  error {row.get('max_error', float('nan')):.1e}", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], json_name), "w") as f:
            json.dump(rows, f, indent=1)


def write_pipeline_cache(device, path: str) -> None:
    """`device`'s Vulkan pipeline cache, as the driver serializes it, into `path`."""
    from retarget_vulkan_spirv.driver import _vk

    vk = _vk()
    size = vk.ffi.new("size_t*")
    vk.lib.vkGetPipelineCacheData(device.handle, device.pipeline_cache, size, vk.ffi.NULL)
    data = vk.ffi.new("char[]", size[0])
    vk.lib.vkGetPipelineCacheData(device.handle, device.pipeline_cache, size, data)
    with open(path, "wb") as f:
        f.write(vk.ffi.buffer(data, size[0]))


def validated(art) -> list[str]:
    """What PROBE_SPIRV_VAL (a spirv-val that knows cooperative matrices) says of each kernel of `art`."""
    if not os.environ.get("PROBE_SPIRV_VAL"):
        return []
    import tempfile

    from retarget_vulkan_spirv import container
    said = []
    for exe in art.manifest["executables"]:
        for meta in container.unpack(bytes(art.entries[exe["path"]])):
            with tempfile.NamedTemporaryFile(suffix=".spv") as f:
                f.write(container.words(meta))
                f.flush()
                run = subprocess.run([os.environ["PROBE_SPIRV_VAL"], "--target-env", "vulkan1.3", f.name],
                                     capture_output=True, text=True)
            said.append(f"{meta['name']}: " + ("valid" if run.returncode == 0 else run.stderr.strip()))
    return said


def main():
    import retarget
    import retarget.kernel.ir as kir
    import retarget.kernel.lower as lower
    import torch
    from retarget.ir.dtypes import dtype
    from retarget_vulkan_spirv import codegen, driver, spirv, targets

    # the device enables VK_NV_shader_sm_builtins where it has it, for the variant that reads the SM id
    shipped_links = driver._feature_links
    driver._feature_links = lambda api, extensions: shipped_links(api, extensions) + (
        [("VkPhysicalDeviceShaderSMBuiltinsFeaturesNV", "PHYSICAL_DEVICE_SHADER_SM_BUILTINS_FEATURES_NV",
          "VK_NV_shader_sm_builtins")] if "VK_NV_shader_sm_builtins" in extensions else [])
    driver.ENABLED_FEATURES = (*driver.ENABLED_FEATURES, "shaderSMBuiltins")

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../plugins/cuda/tests"))
    from test_hopper_gemm import matmul_module

    size = int(os.environ.get("PROBE_SIZE", 4096))
    # what a variant may replace (its key -> the owner and attribute), and what ships there
    points = {"copy": (codegen._Codegen, "stmt_vectorcopy"), "word": (codegen._Codegen, "word"),
              "binding": (codegen._Codegen, "binding_variable"), "builtins": (codegen._Codegen, "load_builtins"),
              "plans": (targets, "LARGE_FRAGMENT_PLANS"), "staged": (lower._GpuLowering, "_staged_matmul"),
              "load": (lower._Staged, "load"), "store": (lower._Staged, "store"),
              "fragload": (codegen._Codegen, "stmt_fragmentload"),
              "tile_bytes": (lower.FragmentTiles, "shared_bytes"), "loop": (codegen._Codegen, "stmt_loop"),
              "spread": (lower, "_spread")}
    shipped = {key: getattr(*where) for key, where in points.items()}

    def retiled(tile_of):
        """_staged_matmul with its first statement, `tile = wg`, replaced: tile_of(lowering, wg) gives the
        statements to run first and the tile's expression."""
        def staged(self, op, tiles, *args):
            body = shipped["staged"](self, op, tiles, *args)
            first = body[0]
            assert isinstance(first, kir.Assign) and first.value == kir.Var("wg"), first
            before, tile = tile_of(self, first.value)
            return [*before, kir.Assign(first.var, tile), *body[1:]]
        return staged

    def paired(distance):
        """Workgroups w and w + distance (in blocks of 2 * distance; the last block split in halves) on the two
        tiles of one pair, side by side in a tile row."""
        def tile_of(self, w):
            if self.grid % 2:
                return [], w  # the halves of the last block would not match
            block = 2 * distance
            blk, r = w // block, w % block
            half = kir.minimum((kir.const(self.grid) - blk * block) // 2, kir.const(distance))
            pair = blk * distance + r % half
            return [], kir.minimum(pair * 2 + r // half, kir.const(self.grid - 1))  # for the bounds check's sake
        return retiled(tile_of)

    def same_tile(distance):
        """Workgroups w and w + distance (in blocks of 2 * distance) on one tile, half the tiles left unwritten
        (timing only): if the two share a multiprocessor, the second finds every line in L1."""
        return retiled(lambda self, w: ([], (w // (2 * distance)) * distance + w % distance))

    def with_sm_id(self):
        """load_builtins plus `rt_smid`, the multiprocessor the invocation runs on, and `rt_warpid`, its warp's
        slot on that multiprocessor (SPV_NV_shader_sm_builtins)."""
        shipped["builtins"](self)
        m = self.m
        m.emit("capability", "Capability", SHADER_SM_BUILTINS)
        m.extension("SPV_NV_shader_sm_builtins")
        for name, builtin in (("rt_smid", SM_ID), ("rt_warpid", WARP_ID)):
            var = m.op("global", "Variable", m.pointer("Input", self.t_u32), spirv.STORAGE["Input"])
            m.emit("annotation", "Decorate", var, spirv.DECORATION["BuiltIn"], builtin)
            self.interface.append(var)
            self.builtins[name] = self.op("Bitcast", self.t_i32, self.op("Load", self.t_u32, var))

    # every workgroup of a multiprocessor on one tile (timing only): the most that workgroups sharing a
    # multiprocessor could save by finding each other's lines in L1
    def sm_tile(self, w):
        return kir.maximum(kir.minimum(kir.Var("rt_smid"), kir.const(self.grid - 1)), kir.const(0))

    tile_of_sm = retiled(lambda self, w: ([], sm_tile(self, w)))
    # ... with the workgroup in the second block of four warp slots started late, so that its loads come after
    # the other's lines have landed in L1 (whether L1 serves a line to a second workgroup only once it is there)
    second_slots = lambda w: (kir.Var("rt_warpid") // 4) % 2

    def global_loads(how):
        """stmt_vectorcopy whose loads out of storage buffers are spelled `how(self, pointer, word_type)`."""
        def copy(self, s):
            if self.buffer(s.src)[2] != "StorageBuffer":
                return shipped["copy"](self, s)
            src, dst = self.word(s.src, s.src_index, s.lanes), self.word(s.dst, s.dst_index, s.lanes)
            self.emit("Store", dst, how(self, src, self.words()))
        return copy

    def decorated(decoration):
        """binding_variable with `decoration` on every binding that only reads."""
        def binding(self, slot, element, stride, name):
            var = shipped["binding"](self, slot, element, stride, name)
            if all(q.access == "read" for q, s in zip(self.k.params, self.slots) if s == slot):
                self.m.emit("annotation", "Decorate", var, decoration)
            return var
        return binding

    def staggered(spins, late, tile=lambda self, w: w):
        """Workgroups with late(wg) first spin `spins` dependent multiply-adds and ands (about 8 clocks each), so
        that two workgroups started together on one multiprocessor run out of phase; tile(self, wg) is the tile."""
        def tile_of(self, w):
            x = kir.Var("rt_spin")
            step = kir.Assign(x.name, kir.binary("and", x * 5 + 7, kir.const(0xFFFFF)))
            spin = [kir.Assign(x.name, w),
                    kir.If(kir.Compare("eq", late(w), kir.const(1)), [kir.Loop("rt_spin_i", spins, [step])])]
            # never 0 == -7: the select keeps the spin
            return spin, kir.Select(kir.Compare("eq", x, kir.const(-7)), kir.const(0), tile(self, w))
        return retiled(tile_of)

    line_elements = 64  # f16 elements in a 128-byte cache line

    def prefetched_role(self, operands):
        """"a" or "b" where `self` stages an operand of `operands` in runs out of a strided input, else None."""
        role = "a" if self.k_side == "col" else "b"
        return role if role in operands and self.lanes > 1 and self.layout is not None else None

    def touched(self, operands, step, tk, sizes):
        """(role, buffer, index) of the line a thread touches two steps ahead (A: a row of 64 elements each; B:
        half a row), or None where `self` stages an operand not in `operands`, element by element, or computed."""
        role = prefetched_role(self, operands)
        if role is None:
            return None
        buffer, strides, _ = self.layout
        m, kk, n = sizes
        ahead = kir.minimum(step + 1, kir.const(kk // tk - 1))
        t = kir.Var("tid")
        per_row = max(1, self.cols // line_elements)
        if role == "a":  # rows of the tile are k-runs of tk elements
            row, col = self.origin + t // per_row, ahead * tk + (t % per_row) * line_elements
        else:
            row, col = ahead * tk + t // per_row, self.origin + (t % per_row) * line_elements
        return role, buffer, row * strides[-2] + col * strides[-1]

    def prefetching(operands):
        """_Staged.load that also touches a line per thread two steps ahead (`touched`), summing the elements it
        reads into a float that an impossible test stores (so that nothing removes the loads): the step after,
        the staging loads hit L1."""
        def load(self, step, tk, unguarded, sizes, dt):
            out = shipped["load"](self, step, tk, unguarded, sizes, dt)
            touch = touched(self, operands, step, tk, sizes)
            if touch is None:
                return out
            value = kir.Cast(kir.Load(touch[1], touch[2], dtype("f16")), dtype("f32"))
            return out + [kir.Assign("rt_touch", kir.Var("rt_touch", dtype("f32")) + value)]
        return load

    def held_prefetch(operands, held, touches, copy_out):
        """_Staged.load, _Staged.store and _staged_matmul for a prefetch whose touches land raw in a private array
        `rt_held_<role>` of `held` f16 (nothing computed from them, so nothing waits for them where they are
        issued), used only at the end of the step, after the multiplies, by a copy to the output that a flag read
        from A's first element never lets run (60000 in no test here: standard-normal inputs).
        touches(self, step, tk, sizes, role) gives the statements that fill the array, copy_out(role) the copy."""
        def load(self, step, tk, unguarded, sizes, dt):
            out = shipped["load"](self, step, tk, unguarded, sizes, dt)
            role = prefetched_role(self, operands)
            return out if role is None else out + touches(self, step, tk, sizes, role)

        def store(self, at, dt):
            out = shipped["store"](self, at, dt)
            role = prefetched_role(self, operands)
            if role is None:
                return out
            never = kir.Compare("eq", kir.Var("rt_flag", dtype("f32")), kir.const(60000.0, dtype("f32")))
            return out + [kir.If(never, copy_out(role))]

        def staged(self, op, tiles, *args):
            flag = kir.Assign("rt_flag", kir.Cast(kir.Load("in0", kir.const(0), dtype("f16")), dtype("f32")))
            return [flag, *(kir.Local(f"rt_held_{r}", held, dtype("f16")) for r in operands),
                    *shipped["staged"](self, op, tiles, *args)]
        return {"staged": staged, "load": load, "store": store}

    def late_prefetch(operands):
        """The lines `touched` touches, 16 raw bytes of each: `prefetching` converts each touched f16 at once,
        before the k-slice loop, and the warp waits there for the line's whole trip from L2."""
        def touches(self, step, tk, sizes, role):
            _, buffer, at = touched(self, operands, step, tk, sizes)
            return [kir.VectorCopy(f"rt_held_{role}", kir.const(0), buffer, at, 8)]
        return held_prefetch(operands, 8, touches,
                             lambda role: [kir.VectorCopy("out0", kir.const(0), f"rt_held_{role}", kir.const(0), 8)])

    def sector_touches(self, step, tk, sizes, threads=128):
        """(buffer, indices) of this thread's share of one f16 in every 32-byte sector of the tile that step
        `step + 1` stages (two steps ahead of the multiplies). NVIDIA's L1 fills only the sectors a load asks
        for, so `touched`'s one element a line brought a quarter of each line into L1: the prefetch probes
        before the tenth session never prefetched whole lines."""
        buffer, strides, _ = self.layout
        ahead = kir.minimum(step + 1, kir.const(sizes[1] // tk - 1))
        per_row = self.cols // 16  # 32-byte sectors in a row of the tile (A: tk of k; B: the tile's columns)
        count = self.rows * per_row
        assert count == 4 * threads, (self.rows, self.cols)  # rt_held_* hold 4 (NVIDIA's plan)
        t, at = kir.Var("tid"), []
        for j in range(count // threads):  # a subgroup's lanes on consecutive sectors: 8 lines an instruction
            r, c = (t + j * threads) // per_row, ((t + j * threads) % per_row) * 16
            row, col = (self.origin + r, ahead * tk + c) if self.k_side == "col" else (ahead * tk + r, self.origin + c)
            at.append(row * strides[-2] + col * strides[-1])
        return buffer, at

    def sector_prefetch(operands):
        """held_prefetch with every sector of the step-after-next's lines touched (`sector_touches`), each touch
        a scalar f16 load."""
        def touches(self, step, tk, sizes, role):
            buffer, at = sector_touches(self, step, tk, sizes)
            return [kir.Store(f"rt_held_{role}", kir.const(j), kir.Load(buffer, i, dtype("f16")))
                    for j, i in enumerate(at)]

        def copy_out(role):
            return [kir.Store("out0", kir.const(j), kir.Load(f"rt_held_{role}", kir.const(j), dtype("f16")))
                    for j in range(4)]
        return held_prefetch(operands, 4, touches, copy_out)

    def sinking(self, op, tiles, *args):
        """_staged_matmul with the prefetch's float declared first and stored, if NaN, at the end."""
        return sunk(shipped["staged"](self, op, tiles, *args))

    def sunk(body):
        """`body` with the touches' float declared first and stored, if it is 1e30 (never, but no compiler can
        know), at the end, so that nothing drops the touches. (Until the seventh session the test was `x != x`:
        NVIDIA's compiler assumes no NaN without SignedZeroInfNanPreserve, folded it to false and dropped every
        touch, so the prefetch probes of the fifth and sixth sessions ran the shipped kernel.)"""
        out = next(st.buffer for st in kir.walk_stmts(body) if isinstance(st, kir.Store) and st.buffer == "out0")
        touched = kir.Var("rt_touch", dtype("f32"))
        never = kir.Compare("eq", touched, kir.const(1e30, dtype("f32")))
        return [kir.Assign("rt_touch", kir.const(0.0, dtype("f32"))), *body,
                kir.If(never, [kir.Store(out, kir.const(0), kir.Cast(touched, dtype("f16")))])]

    def direct_b(touch=False, unroll=False):
        """_staged_matmul with B's fragments loaded straight from its buffer (a column-major cooperative-matrix
        load, as if B were stored k-contiguous: the variant is fed B transposed, so its answer is right) and
        only A staged; with `touch`, each thread also touches two lines of its subgroup's B one step ahead
        (so that the fragment loads hit L1); with `unroll`, the k-slices of a step unrolled."""
        def staged(self, op, tiles, setup, compute, epilogue, schedule):
            a, b = op.operands
            buffer = self.strided_operand(b, len(op.result.type.shape))[0]
            kk, tk = a.type.shape[-1], tiles.tile_k
            width = 16  # NVIDIA's 16x16x16 fragments

            def direct(t, step):
                [loop] = compute(t, step)
                sc = next(e for e in kir.walk_exprs(loop.body) if isinstance(e, kir.Var) and e.name.startswith("sc"))
                body, j = [], 0
                for st in loop.body:
                    if isinstance(st, kir.FragmentLoad) and st.buffer == t.b_tile:
                        col = kir.Var(t.n0) + sc + j * width
                        st = kir.FragmentLoad(st.name, buffer, col * kk + step * tk + kir.Var(loop.var) * width, -kk)
                        j += 1
                    body.append(st)
                out = [kir.Loop(loop.var, loop.extent, body, "unroll" if unroll else loop.kind)]
                if touch:
                    ahead = kir.minimum(step + 1, kir.const(kk // tk - 1))
                    for r in (0, 32):
                        row = kir.Var(t.n0) + sc + kir.Var("tid") % 32 + r
                        value = kir.Cast(kir.Load(buffer, row * kk + ahead * tk, dtype("f16")), dtype("f32"))
                        out.append(kir.Assign("rt_touch", kir.Var("rt_touch", dtype("f32")) + value))
                return out

            body = shipped["staged"](self, op, tiles, setup, direct, epilogue, schedule)
            for st in kir.walk_stmts(body):
                if isinstance(st, kir.Local) and st.name == tiles.b_tile:
                    st.size = 8  # nothing staged
            return sunk(body)
        return staged

    def fragments_once(roles):
        """_staged_matmul whose `roles` fragments ("a", "b") are loaded once a step, at its first k-slice, ahead
        of the k-slice loop (timing only: fewer bytes read from shared memory, wrong answers)."""
        def staged(self, op, tiles, setup, compute, epilogue, schedule):
            def hoisted(t, step):
                [loop] = compute(t, step)
                tile = {"a": t.a_tile, "b": t.b_tile}
                once = [st for st in loop.body if isinstance(st, kir.FragmentLoad)
                        and any(st.buffer == tile[r] for r in roles)]
                first = {kir.Var(loop.var): kir.const(0)}
                ahead = [kir.FragmentLoad(st.name, st.buffer, substitute(st.index, first), st.stride) for st in once]
                return ahead + [kir.Loop(loop.var, loop.extent, [st for st in loop.body if st not in once],
                                         loop.kind)]
            return shipped["staged"](self, op, tiles, setup, hoisted, epilogue, schedule)
        return staged

    def substitute(e, table):
        """Expression `e` with the subexpressions that `table` names replaced."""
        if e in table:
            return table[e]
        if isinstance(e, (kir.Const, kir.Var)):
            return e
        fields = {name: substitute(v, table) if isinstance(v, kir.Expr) else v for name, v in vars(e).items()}
        return type(e)(**fields)

    def staged_only(side, method):
        """_Staged.load or .store for the operand whose reduction runs along `side` ("col": A, "row": B); nothing
        for the other."""
        return lambda self, *args: method(self, *args) if self.k_side == side else []

    def column_major(self, s):
        """stmt_fragmentload, column-major where the statement's stride is negative."""
        if s.stride >= 0:
            return shipped["fragload"](self, s)
        _, type_id, var = self.fragment(s.name)
        pointer, stride = self.fragment_pointer(s.buffer, s.index, -s.stride)
        self.emit("Store", var, self.op("CooperativeMatrixLoadKHR", type_id, pointer, self.u32(1), self.u32(stride)))

    # A's copies only: two fit where B takes no shared memory
    a_bytes = property(lambda p: p.stages * p.stage_elements[0] * p.shape.dtype.itemsize
                       + p.subgroups * p.shape.m * p.c_stride * p.shape.acc.itemsize)

    def b_direct(**how):
        return {"staged": direct_b(**how), "load": staged_only("col", shipped["load"]),
                "store": staged_only("col", shipped["store"]), "fragload": column_major, "bt": True}

    def windowed(words):
        """word() with storage-buffer word indices kept below `words` (a power of two)."""
        def word(self, name, index, lanes):
            if self.buffer(name)[2] != "StorageBuffer":
                return shipped["word"](self, name, index, lanes)
            at = self.int_op("IAdd", self.bases[name], self.expr(index))
            w = self.op("ShiftRightArithmetic", self.t_i32, at, self.i32(int(np.log2(lanes))))
            w = self.op("BitwiseAnd", self.t_i32, w, self.i32(words - 1))
            return self.op("AccessChain", self.m.pointer("StorageBuffer", self.words()), self.word_view(name),
                           self.i32(0), w)
        return word

    def paged(page_bytes, keep_words):
        """word() with storage-buffer word indices kept in their page of `page_bytes` but folded onto its first
        `keep_words` words: the pages (and so the address translations) of the shipped loads, the lines of a
        window."""
        page_words = page_bytes // 16

        def word(self, name, index, lanes):
            if self.buffer(name)[2] != "StorageBuffer":
                return shipped["word"](self, name, index, lanes)
            at = self.int_op("IAdd", self.bases[name], self.expr(index))
            w = self.op("ShiftRightArithmetic", self.t_i32, at, self.i32(int(np.log2(lanes))))
            page = self.op("BitwiseAnd", self.t_i32, w, self.i32(-page_words))
            w = self.op("BitwiseOr", self.t_i32, page, self.op("BitwiseAnd", self.t_i32, w, self.i32(keep_words - 1)))
            return self.op("AccessChain", self.m.pointer("StorageBuffer", self.words()), self.word_view(name),
                           self.i32(0), w)
        return word

    def tiled(tiles):
        """word() with A's and B's 16-byte words relabelled so that each workgroup's step tile is one contiguous
        block (`tiles`: buffer -> (rows, words) of a step tile; 4096x4096 f16 only). Timing only: every word is
        still read once a tile row, so the lines and bytes from L2 are shipped's; only their addresses, and so
        the pages, become local (16 KB a tile instead of 128 or 64 rows 8 KB apart)."""
        def word(self, name, index, lanes):
            if self.buffer(name)[2] != "StorageBuffer" or name not in tiles:
                return shipped["word"](self, name, index, lanes)
            assert size == 4096 and lanes == 8, "tiled() relabels 4096x4096 f16 words"
            rows, words = tiles[name]
            lr, lc = int(np.log2(rows)), int(np.log2(words))
            at = self.int_op("IAdd", self.bases[name], self.expr(index))
            w = self.op("ShiftRightArithmetic", self.t_i32, at, self.i32(3))
            base = self.op("BitwiseAnd", self.t_i32, w, self.i32(-(1 << 21)))  # keep what lies past the matrix

            def bits(shift, mask, to):
                v = self.op("BitwiseAnd", self.t_i32, self.op("ShiftRightArithmetic", self.t_i32, w, self.i32(shift)),
                            self.i32(mask))
                return self.op("ShiftLeftLogical", self.t_i32, v, self.i32(to))
            parts = [bits(9 + lr, (1 << (12 - lr)) - 1, 9 + lr),  # tile row
                     bits(lc, (1 << (9 - lc)) - 1, lr + lc),  # tile column
                     bits(9, rows - 1, lc),  # row in the tile
                     bits(0, words - 1, 0)]  # word in the row
            for part in parts:
                base = self.op("BitwiseOr", self.t_i32, base, part)
            return self.op("AccessChain", self.m.pointer("StorageBuffer", self.words()), self.word_view(name),
                           self.i32(0), base)
        return word

    def device_only(device):
        """Storage memory types with those the host can map last: device-local memory outside the BAR, written
        and read through the driver's staging copies (shipped prefers device-local memory the host can map)."""
        return sorted(device.storage_memory_types, key=lambda t: bool(device.memory_flags[t] & driver.HOST_VISIBLE))

    # A follower held a step behind a leader on the same tile and multiprocessor (timing only). The two
    # workgroups of a multiprocessor that run one tile started together or a little apart gained nothing (fifth
    # and sixth sessions): if the one whose loads hit L1 runs faster, it catches up and they miss together again.
    # Here the leader (first block of four warp slots) writes, as it issues step s's loads, s to a flag of its
    # multiprocessor (an element of the output that no tile of this variant writes), and the follower waits, as
    # it issues its own, until the flag reaches s + 1: then the leader's loads of step s are done and their lines
    # are in L1. The wait is a bounded spin, so a pairing that the hardware does not make costs time, not a hang.
    flag_at = lambda: kir.const((size - 5) * size) + kir.maximum(kir.minimum(kir.Var("rt_smid"), kir.const(255)),
                                                                   kir.const(0)) * 64  # a line each
    WAIT_LIMIT, WAIT_BACKOFF = 4096, 16

    def lagged(steps):
        """_Staged.load for `lagged_load`: the follower waits until the leader issues step s + `steps`."""
        def load(self, step, tk, unguarded, sizes, dt):
            out = shipped["load"](self, step, tk, unguarded, sizes, dt)
            if self.k_side != "col":  # once a step, with A's loads
                return out
            role = second_slots(None)
            lead = kir.If(kir.Compare("eq", role, kir.const(0)),
                          [kir.Store("out0", flag_at(), kir.Cast(step, dtype("f16")))])
            follow = kir.If(kir.Compare("eq", role, kir.const(1)), [kir.Loop("rt_wait", step + steps, [])])
            return [lead, follow, *out]
        return load

    def waiting_loop(self, s):
        """stmt_loop, with `rt_wait` spelled as a spin: re-read the flag (a Volatile load) until it reaches the
        loop's extent, at most WAIT_LIMIT times."""
        if s.var != "rt_wait":
            return shipped["loop"](self, s)
        m = self.m
        f16 = m.type_float(16)
        count = self.variable("rt_wait_count", self.t_i32)
        self.emit("Store", count, self.i32(0))
        target = self.expr(kir.Cast(s.extent, dtype("f32")))
        flag_word = self.word("out0", flag_at(), 8)
        header, body, cont, merge = m.id(), m.id(), m.id(), m.id()
        self.emit("Branch", header)
        self.label(header)
        self.emit("LoopMerge", merge, cont, 0)
        self.emit("Branch", body)
        self.label(body)
        word = self.op("Load", self.words(), flag_word, VOLATILE)
        halves = self.op("Bitcast", m.type("TypeVector", f16, 2), self.op("CompositeExtract", self.t_u32, word, 0))
        flag = self.op("FConvert", self.t_f32, self.op("CompositeExtract", f16, halves, 0))
        n = self.op("IAdd", self.t_i32, self.op("Load", self.t_i32, count), self.i32(1))
        backoff = n
        for _ in range(WAIT_BACKOFF):  # about 8 clocks each: fewer polls of the flag's line
            backoff = self.op("BitwiseAnd", self.t_i32, self.op("IAdd", self.t_i32, self.op(
                "IMul", self.t_i32, backoff, self.i32(5)), self.i32(7)), self.i32(0xFFFFF))
        rare = self.op("IEqual", self.t_bool, backoff, self.i32(12345))  # counts a poll twice at times
        n = self.op("IAdd", self.t_i32, n, self.op("Select", self.t_i32, rare, self.i32(1), self.i32(0)))
        self.emit("Store", count, n)
        self.emit("Branch", cont)
        self.label(cont)
        more = self.op("LogicalAnd", self.t_bool, self.op("FOrdLessThan", self.t_bool, flag, target),
                       self.op("SLessThan", self.t_bool, n, self.i32(WAIT_LIMIT)))
        self.emit("BranchConditional", more, header, merge)
        self.label(merge)

    # Contiguous step tiles ran 12% slower than shipped: a load instruction whose 32 lanes read 512 contiguous
    # bytes is slower than one that reads 4 lines 8 KB apart (A's shipped loads), as if the lines of one
    # instruction queued at one L2 slice. B's shipped loads read 2 rows of 256 bytes, 2 pairs of adjacent lines.
    class LineSpread(lower._Spread):
        """Threads over a block wider than a line in line-wide chunks: a subgroup's 32 lanes on 4 rows of one
        line each (8 words of 16 bytes), each element a row further down or, past the last row, the next line
        of the row."""
        def offset(self, e):
            per_pass = self.threads // 8
            chunks = self.rows // per_pass
            return (e % chunks) * per_pass, (e // chunks) * 8

    def line_spread(rows, cols, threads, t, along_rows):
        if along_rows or cols <= 8 or cols % 8 or threads % 8 or rows % (threads // 8):
            return shipped["spread"](rows, cols, threads, t, along_rows)
        return LineSpread(t // 8, t % 8, rows, cols, threads, threads, rows * cols // threads, False)

    spirv.OP.setdefault("CopyMemory", 63)

    def copy_memory(at_load):
        """stmt_vectorcopy with each staged 16-byte run moved from the storage buffer to the shared tile by one
        OpCopyMemory, which a compiler may make an asynchronous copy (LDGSTS, as `cp.async`), with no registers
        between: where its load is (`at_load`; only with two staged copies, so that the copy lands in the one
        not being read) or where its store is (the load dropped; the copy synchronous in the step's store phase)."""
        def run_key(name, index):
            return name, repr(index)

        def copy(self, s):
            src_storage, dst_storage = self.buffer(s.src)[2], self.buffer(s.dst)[2]
            if not hasattr(self, "rt_stores"):  # each staged run's stores, in program order: registers -> (tile, index)
                self.rt_stores, self.rt_loads, self.rt_phase = {}, {}, {}
                for st in kir.walk_stmts(self.k.body):
                    if isinstance(st, kir.VectorCopy) and self.buffer(st.dst)[2] == "Workgroup":
                        self.rt_stores.setdefault(run_key(st.src, st.src_index), []).append((st.dst, st.dst_index))
            key = run_key(s.dst, s.dst_index)
            if src_storage == "StorageBuffer" and key in self.rt_stores:
                done, stored = self.rt_phase.get(key, (0, False))
                done += stored  # the first load after a store goes with the next store
                self.rt_phase[key] = done, False
                if at_load:
                    tile, index = self.rt_stores[key][done]
                    self.emit("CopyMemory", self.word(tile, index, s.lanes), self.word(s.src, s.src_index, s.lanes))
                else:
                    self.rt_loads[key] = s.src, s.src_index
                return
            if dst_storage == "Workgroup" and run_key(s.src, s.src_index) in self.rt_stores:
                done, _ = self.rt_phase.get(run_key(s.src, s.src_index), (0, False))
                self.rt_phase[run_key(s.src, s.src_index)] = done, True
                if not at_load:
                    buffer, index = self.rt_loads[run_key(s.src, s.src_index)]
                    self.emit("CopyMemory", self.word(s.dst, s.dst_index, s.lanes), self.word(buffer, index, s.lanes))
                return
            return shipped["copy"](self, s)
        return copy

    # A packed in fragment order ([16-row block][k-slice][lane][element], the element order NVIDIA's driver gives a
    # 16x16 f16 fragment, read off the H100 by a_in_registers.py): each lane loads its whole A fragment, 16 bytes,
    # into a ring of private words one k-slice ahead, and the fragment is built from them element by element; B is
    # staged as shipped. A FragmentLoad of stride 0 from the ring marks such a build for the codegen.
    spirv.OP.setdefault("CompositeInsert", 82)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from a_in_registers import A_COLS, A_ROWS, packed  # the driver's element order, read off the H100 there

    def fragment_packed(x):
        """x in fragment order (a_in_registers.packed). B's lane 4n + c holds column n (then n + 8) at the rows
        that A's lane 4g + c holds as columns of row g, so B is packed the same way from B transposed."""
        return packed(x, A_ROWS, A_COLS)

    def in_registers(roles):
        """_staged_matmul with the `roles` operands' fragments ("a", "b") loaded from the operand packed in
        fragment order (the variant is fed it so: A by [row block][k-slice], B by [column block][k-slice]), a
        k-slice ahead, into a ring of private words, and those operands not staged. With both, nothing is staged
        and the reduction loop has no barriers."""
        def staged(self, op, tiles, setup, compute, epilogue, schedule):
            kk, tk, width = op.operands[0].type.shape[-1], tiles.tile_k, 16
            slices, names = kk // width, {}
            rank = len(op.result.type.shape)
            buffers = {r: self.strided_operand(x, rank)[0] for r, x in zip("ab", op.operands)}
            def packed_index(role, slice_, i):
                start, offset = (tiles.m0, "sr") if role == "a" else (tiles.n0, "sc")  # named by _staged_matmul
                block = (kir.Var(start) + kir.Var(names[offset])) // width + i
                return ((block * slices + slice_) * 32 + kir.Var(names["lane"])) * 8

            def copies(role, slice_):
                return [kir.VectorCopy(f"rt_ring_{role}", kir.const(8 * i), buffers[role],
                                       packed_index(role, slice_, i), 8) for i in range(names[role])]

            def ring_setup(t):
                body = setup(t)
                for st in body:
                    if isinstance(st, kir.Assign) and st.var.startswith(("sr", "sc", "lane")):
                        names[next(p for p in ("sr", "sc", "lane") if st.var.startswith(p))] = st.var
                for role in "ab":
                    names[role] = sum(1 for st in body if isinstance(st, kir.Fragment) and st.role == role)
                # 8 elements of padding: the bounds check sees a fragment build as a 16-element read
                return body + [kir.Local(f"rt_ring_{r}", 8 * names[r] + 8, dtype("f16")) for r in roles] + [
                    c for r in roles for c in copies(r, kir.const(0))]

            def from_ring(t, step):
                [loop] = compute(t, step)
                ahead = kir.minimum(step * (tk // width) + kir.Var(loop.var) + 1, kir.const(slices - 1))
                tile = {"a": t.a_tile, "b": t.b_tile}
                body, built = [], dict.fromkeys(roles, 0)
                for st in loop.body:
                    role = next((r for r in roles if isinstance(st, kir.FragmentLoad) and st.buffer == tile[r]), None)
                    if role is None:
                        body.append(st)
                        continue
                    body.append(kir.FragmentLoad(st.name, f"rt_ring_{role}", kir.const(8 * built[role]), 0))
                    built[role] += 1
                    if built[role] == names[role]:  # every fragment built: the ring takes the next slice's
                        body += copies(role, ahead)
                return [kir.Loop(loop.var, loop.extent, body, loop.kind)]

            body = shipped["staged"](self, op, tiles, ring_setup, from_ring, epilogue, schedule)
            unstaged = {tiles.a_tile if r == "a" else tiles.b_tile for r in roles}
            for st in kir.walk_stmts(body):
                if isinstance(st, kir.Local) and st.name in unstaged:
                    st.size = 8  # nothing staged
            if roles == "ab":  # nothing in shared memory before the epilogue: no barriers around the steps
                body = drop_step_barriers(body)
            return body
        return staged

    def drop_step_barriers(body):
        """`body` without the barrier before the reduction loop and those inside it."""
        out = []
        for i, st in enumerate(body):
            following = body[i + 1] if i + 1 < len(body) else None
            if isinstance(st, kir.Barrier) and isinstance(following, kir.Loop) and following.var.startswith("kt"):
                continue
            if isinstance(st, kir.Loop) and st.var.startswith("kt"):
                st = kir.Loop(st.var, st.extent, [x for x in st.body if not isinstance(x, kir.Barrier)], st.kind)
            elif isinstance(st, kir.If):
                st = kir.If(st.cond, drop_step_barriers(st.body))
            out.append(st)
        return out

    def built_from_words(self, s):
        """stmt_fragmentload; for a load of stride 0 from the ring, the fragment built from its 16-byte word."""
        if s.stride != 0 or not s.buffer.startswith("rt_ring"):
            return shipped["fragload"](self, s)
        _, type_id, var = self.fragment(s.name)
        word = self.op("Load", self.words(), self.word(s.buffer, s.index, 8))
        half = self.m.type_float(16)
        halves2 = self.m.type("TypeVector", half, 2)
        value = self.op("Load", type_id, var)
        for w in range(4):
            pair = self.op("Bitcast", halves2, self.op("CompositeExtract", self.t_u32, word, w))
            for e in range(2):
                element = self.op("CompositeExtract", half, pair, e)
                value = self.op("CompositeInsert", type_id, element, value, 2 * w + e)
        self.emit("Store", var, value)

    a_packed = {"staged": in_registers("a"), "load": staged_only("row", shipped["load"]),
                "store": staged_only("row", shipped["store"]),
                "fragload": built_from_words, "pack_a": fragment_packed}
    both_packed = {"staged": in_registers("ab"), "load": lambda self, *args: [], "store": lambda self, *args: [],
                   "fragload": built_from_words, "pack_a": fragment_packed,
                   "pack_b": lambda b: fragment_packed(np.ascontiguousarray(b.T))}
    # B's copies only: the larger plans fit where A takes no shared memory
    b_bytes = property(lambda p: p.stages * p.stage_elements[1] * p.shape.dtype.itemsize
                       + p.subgroups * p.shape.m * p.c_stride * p.shape.acc.itemsize)

    def no_load(self, pointer, t):
        word = self.op("Bitcast", self.t_u32, self.i32(0x3C003C00))  # staged words made of ones
        return self.op("CompositeConstruct", t, word, word, word, word)

    variants = [
        ("shipped", {}),
        ("loads Nontemporal", {"copy": global_loads(lambda self, p, t: self.op("Load", t, p, NONTEMPORAL))}),
        ("loads Volatile", {"copy": global_loads(lambda self, p, t: self.op("Load", t, p, VOLATILE))}),
        ("inputs Coherent", {"binding": decorated(COHERENT)}),
        ("inputs Restrict", {"binding": decorated(RESTRICT)}),
        ("loads Aligned 16", {"copy": global_loads(lambda self, p, t: self.op("Load", t, p, ALIGNED, 16))}),
        ("loads from a 32 KB window (timing only)", {"word": windowed(2048)}),
        ("loads from a 64 KB window (timing only)", {"word": windowed(4096)}),
        ("loads from a 128 KB window (timing only)", {"word": windowed(8192)}),
        ("loads from a 256 KB window (timing only)", {"word": windowed(16384)}),
        ("loads from a 4 MB window (timing only)", {"word": windowed(1 << 18)}),
        ("loads in their own 64 KB page, its first line (timing only)", {"word": paged(1 << 16, 8)}),
        ("loads in their own 64 KB page, its first 8 KB (timing only)", {"word": paged(1 << 16, 512)}),
        ("loads in their own 2 MB page, its first line (timing only)", {"word": paged(1 << 21, 8)}),
        ("loads in their own 2 MB page, its first 8 KB (timing only)", {"word": paged(1 << 21, 512)}),
        ("no global loads (timing only)", {"copy": global_loads(no_load)}),
        ("wide rows loaded a line a row (B: 4 rows of one line an instruction)", {"spread": line_spread}),
        ("step tiles contiguous, 16 KB each (timing only)", {"word": tiled({"in0": (128, 8), "in1": (64, 16)})}),
        ("buffers in device-only memory (not host-visible)", {"memory": device_only}),
        ("2 subgroups of 64x64 (128x64), tile_k 32", {"plans": {"NVIDIA": [(2, 1, 4, 4, 2)]}}),
        ("2 subgroups of 64x64 (64x128), tile_k 32", {"plans": {"NVIDIA": [(1, 2, 4, 4, 2)]}}),
        ("2 subgroups of 64x64 (128x64), tile_k 64", {"plans": {"NVIDIA": [(2, 1, 4, 4, 4)]}}),
        ("8 subgroups of 64x64 (128x256), tile_k 32", {"plans": {"NVIDIA": [(2, 4, 4, 4, 2)]}}),
        ("8 subgroups of 64x64 (256x128), tile_k 32", {"plans": {"NVIDIA": [(4, 2, 4, 4, 2)]}}),
        ("4 subgroups of 64x64 (128x128), tile_k 32, 2 copies", {"plans": {"NVIDIA": [(2, 2, 4, 4, 2)]}}),
        ("A packed in fragment order, built in registers a k-slice ahead; B staged", a_packed),
        ("A and B packed, both built in registers, no staging and no barriers", both_packed),
        ("A packed ..., 8 subgroups (256x128), tile_k 64",
         {**a_packed, "plans": {"NVIDIA": [(4, 2, 4, 4, 4)]}, "tile_bytes": b_bytes}),
        ("A packed ..., 8 subgroups (128x256), tile_k 64",
         {**a_packed, "plans": {"NVIDIA": [(2, 4, 4, 4, 4)]}, "tile_bytes": b_bytes}),
        ("A packed ..., 4 subgroups (128x128), B in 2 copies (one barrier a step)",
         {**a_packed, "tile_bytes": b_bytes}),
        ("A packed ..., 8 subgroups (256x128), tile_k 32",
         {**a_packed, "plans": {"NVIDIA": [(4, 2, 4, 4, 2)]}, "tile_bytes": b_bytes}),
        ("copy memory at the store (1 copy of 64)", {"copy": copy_memory(at_load=False)}),
        ("copy memory at the load, tile_k 32, 2 copies",
         {"copy": copy_memory(at_load=True), "plans": {"NVIDIA": [(2, 2, 4, 4, 2)]}}),
        ("copy memory at the load, tile_k 16, 2 copies",
         {"copy": copy_memory(at_load=True), "plans": {"NVIDIA": [(2, 2, 4, 4, 1)]}}),
        ("tiles in pairs, workgroups 132 apart", {"staged": paired(132)}),
        ("tiles in pairs, workgroups 66 apart", {"staged": paired(66)}),
        ("tiles in pairs, workgroups 1 apart", {"staged": paired(1)}),
        ("one tile for workgroups 132 apart (timing only)", {"staged": same_tile(132)}),
        ("one tile for workgroups 1 apart (timing only)", {"staged": same_tile(1)}),
        ("one tile a multiprocessor (SM id; timing only)", {"staged": tile_of_sm, "builtins": with_sm_id}),
        ("one tile a multiprocessor, second slots a step behind the first (SM id; timing only)",
         {"staged": tile_of_sm, "builtins": with_sm_id, "load": lagged(1), "loop": waiting_loop}),
        ("one tile a multiprocessor, second slots no later than the first (SM id; timing only)",
         {"staged": tile_of_sm, "builtins": with_sm_id, "load": lagged(0), "loop": waiting_loop}),
        ("one tile a multiprocessor, second slots spin 200 (SM id; timing only)",
         {"staged": staggered(200, second_slots, sm_tile), "builtins": with_sm_id}),
        ("one tile a multiprocessor, second slots spin 600 (SM id; timing only)",
         {"staged": staggered(600, second_slots, sm_tile), "builtins": with_sm_id}),
        ("B fragments from the buffer (k-contiguous B), A staged", b_direct()),
        ("B from the buffer, touched a step ahead", b_direct(touch=True)),
        ("B from the buffer, touched a step ahead, k-slices unrolled", b_direct(touch=True, unroll=True)),
        ("B from the buffer, touched a step ahead, A in 2 copies", {**b_direct(touch=True), "tile_bytes": a_bytes}),
        ("B from the buffer, A in 2 copies, k-slices unrolled",
         {**b_direct(touch=True, unroll=True), "tile_bytes": a_bytes}),
        ("A fragments loaded once a step (timing only)", {"staged": fragments_once("a")}),
        ("B fragments loaded once a step (timing only)", {"staged": fragments_once("b")}),
        ("A and B fragments loaded once a step (timing only)", {"staged": fragments_once("ab")}),
        ("prefetch A and B two steps ahead", {"staged": sinking, "load": prefetching("ab")}),
        ("prefetch A two steps ahead", {"staged": sinking, "load": prefetching("a")}),
        ("prefetch A and B two steps ahead, used at the step's end", late_prefetch("ab")),
        ("prefetch A two steps ahead, used at the step's end", late_prefetch("a")),
        ("prefetch B two steps ahead, used at the step's end", late_prefetch("b")),
        ("prefetch every sector of A and B two steps ahead, held raw", sector_prefetch("ab")),
        ("prefetch every sector of A two steps ahead, held raw", sector_prefetch("a")),
        ("prefetch every sector of B two steps ahead, held raw", sector_prefetch("b")),
        ("stagger: odd workgroups spin 200", {"staged": staggered(200, lambda w: w % 2)}),
        ("stagger: odd 132-blocks spin 100", {"staged": staggered(100, lambda w: w // 132 % 2)}),
        ("stagger: odd 132-blocks spin 200", {"staged": staggered(200, lambda w: w // 132 % 2)}),
        ("stagger: odd 132-blocks spin 400", {"staged": staggered(400, lambda w: w // 132 % 2)}),
        ("shape 4224x4096x4096: 1056 tiles, 4 whole waves", {"mnk": (size + 128, size, size)}),
        ("shape 4096x4096x8192: twice the steps a tile", {"mnk": (size, size, 2 * size)}),
        ("shape 4096x4096x2048: half the steps a tile", {"mnk": (size, size, size // 2)}),
        ("shape 4096x4096x4160: A's rows 8320 bytes apart (not a power of two)", {"mnk": (size, size, size + 64)}),
        ("shape 4096x4224x4224: A's and B's rows 8448 bytes apart, 1056 tiles",
         {"mnk": (size, size + 128, size + 128)}),
        ("shipped again", {}),
    ]
    wanted = sys.argv[1:]
    variants = [v for v in variants if not wanted or any(w in v[0] for w in wanted)]
    cuda = torch.cuda.is_available()
    operands = {}

    def problem(m, n, kk):
        """(A, B, A @ B in float64) for an m x n x kk matmul, made once."""
        if (m, n, kk) not in operands:
            rng = np.random.default_rng(0)
            a, b = (rng.standard_normal(s).astype(np.float16) for s in ((m, kk), (kk, n)))
            ta, tb = (torch.from_numpy(x).double() for x in (a, b))
            ta, tb = (ta.cuda(), tb.cuda()) if cuda else (ta, tb)
            operands[(m, n, kk)] = a, b, (ta @ tb).cpu().numpy()
        return operands[(m, n, kk)]

    rows = []

    def torch_row():
        a, b, _ = problem(size, size, size)
        return cublas_row(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())

    if cuda:
        rows.append(torch_row())
    for name, change in variants:
        for key, where in points.items():
            setattr(*where, change.get(key, shipped[key]))
        m, n, kk = change.get("mnk", (size, size, size))
        a, b, expected = problem(m, n, kk)
        try:
            art = retarget.compile(matmul_module(m, n, kk), os.environ.get("PROBE_TARGET", "vulkan-spirv:host"))
            if "PROBE_TARGET" in os.environ:  # compile only; PROBE_SPIRV_VAL names a spirv-val to check each kernel
                print(name, "compiles", *validated(art), flush=True)
                continue
        finally:
            for key, where in points.items():
                setattr(*where, shipped[key])
        allocate = driver.VulkanDevice.allocate
        if "memory" in change:  # the module's buffers from other memory types
            driver.VulkanDevice.allocate = lambda self, nbytes, types=change["memory"]: driver.VulkanBuffer(
                self, nbytes, types(self), driver.STORAGE_USAGE)
        try:
            loaded = retarget.load(art, device="vulkan")
            fed_a = change["pack_a"](a) if "pack_a" in change else a
            fed_b = change["pack_b"](b) if "pack_b" in change else np.ascontiguousarray(b.T) if change.get("bt") else b
            out = loaded.main(fed_a, fed_b).astype(np.float64)
        finally:
            driver.VulkanDevice.allocate = allocate
        if "memory" in change:  # the memory type each first tries, as the device dump names its flags
            named = loaded.device.physical.details["memory_types"]
            print(name, "memory types", named[change["memory"](loaded.device)[0]]["flags"],
                  "shipped", named[loaded.device.storage_memory_types[0]]["flags"])
        error = float(np.abs(out - expected).max() / np.abs(expected).max())
        rows.append(timed({"variant": name, "flop": 2 * m * n * kk, "max_error": error},
                          lambda device=loaded.device, buffer=loaded.main.command_buffer: device.time(buffer, 10)))
        if os.environ.get("PROBE_PIPELINE_CACHE"):  # the device's pipelines so far, for vulkan_sass.py
            write_pipeline_cache(loaded.device, os.environ["PROBE_PIPELINE_CACHE"])
        del loaded
    if cuda:
        rows.append(torch_row())
    report(rows, "load_paths.json")


if __name__ == "__main__":
    main()
