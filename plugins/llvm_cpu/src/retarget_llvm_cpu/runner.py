"""Runs a recorded command buffer's dispatches in native code, on every thread of a local driver at once.

The local drivers call a kernel's workgroups one by one from Python, and hand each stage (the dispatches
between two barriers) to their helper threads through semaphores. A model of 50 dispatches then pays
for ~100 Python calls and, on `local-task`, 50 thread wake-ups, tens of microseconds each, that leave
the second core idle in between. A `Program` instead holds the whole run of stages as tables that a
small native scheduler (`rt_work`, JIT-compiled once per process) walks: every participating thread
calls `rt_work`, claims workgroups of the current stage from an atomic counter, runs them, and the
thread that finishes a stage's last workgroup opens the next one. Threads waiting for a stage spin
briefly, then yield the core. A thread that arrives late joins at the current stage; one that never
arrives costs nothing: the others take all the workgroups.

Each start of a program begins a new epoch, stored in the high 32 bits of the stage counter and of
every claim counter, so a thread still inside the previous run of the same program (it saw the end
late) claims nothing of the new one: its compare-and-swap fails on the epoch and it returns. The
submitting thread's `rt_work` returns when the last stage is done, so `submit` needs to wait for no
one else.

State layout (int64, 64-byte aligned): [0] current = epoch << 32 | stage; for stage s, the claim
counter at [8 + 16 s] and the done counter at [16 + 16 s] (each on its own cache line).
Dispatch table rows: function address, binding table address, gx, gy, first and end index of its
workgroups within the stage. Stage table rows: first dispatch row, dispatch count, workgroups.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

SPINS_BEFORE_YIELD = 2000  # ~50 us of pause instructions, then sched_yield between looks
DISPATCH_FIELDS, STAGE_FIELDS = 6, 3
EPOCHS = 1 << 31

_IR = """
declare i32 @sched_yield()
{pause_decl}

define void @rt_start(ptr %state, i64 %n_stages, i64 %epoch) nounwind {{
entry:
  %tag = shl i64 %epoch, 32
  br label %loop
loop:
  %s = phi i64 [0, %entry], [%s1, %loop]
  %base = mul i64 %s, 16
  %ni = add i64 %base, 8
  %di = add i64 %base, 16
  %np = getelementptr i64, ptr %state, i64 %ni
  %dp = getelementptr i64, ptr %state, i64 %di
  store atomic i64 %tag, ptr %np monotonic, align 8
  store atomic i64 0, ptr %dp monotonic, align 8
  %s1 = add i64 %s, 1
  %more = icmp ult i64 %s1, %n_stages
  br i1 %more, label %loop, label %done
done:
  store atomic i64 %tag, ptr %state release, align 8
  ret void
}}

define void @rt_work(ptr %dispatches, ptr %stages, i64 %n_stages, ptr %state, i64 %epoch) nounwind {{
entry:
  %stage.a = alloca i64
  %spins.a = alloca i64
  %tag = shl i64 %epoch, 32
  store i64 0, ptr %stage.a
  br label %wait.start

wait.start:
  store i64 0, ptr %spins.a
  br label %wait
wait:
  %cur = load atomic i64, ptr %state acquire, align 8
  %cur.epoch = lshr i64 %cur, 32
  %same = icmp eq i64 %cur.epoch, %epoch
  br i1 %same, label %wait.check, label %exit
wait.check:
  %open = and i64 %cur, 4294967295
  %mine = load i64, ptr %stage.a
  %ready = icmp uge i64 %open, %mine
  br i1 %ready, label %enter, label %spin
spin:
  %n = load i64, ptr %spins.a
  %n1 = add i64 %n, 1
  store i64 %n1, ptr %spins.a
  %long = icmp ugt i64 %n1, {spins}
  br i1 %long, label %yield, label %pause
pause:
  {pause_call}
  br label %wait
yield:
  %ignored = call i32 @sched_yield()
  br label %wait

enter:
  store i64 %open, ptr %stage.a
  %finished = icmp uge i64 %open, %n_stages
  br i1 %finished, label %exit, label %claim

claim:
  %s = load i64, ptr %stage.a
  %srow = mul i64 %s, {stage_fields}
  %tot.i = add i64 %srow, 2
  %tot.p = getelementptr i64, ptr %stages, i64 %tot.i
  %total = load i64, ptr %tot.p
  %cbase = mul i64 %s, 16
  %next.i = add i64 %cbase, 8
  %done.i = add i64 %cbase, 16
  %next.p = getelementptr i64, ptr %state, i64 %next.i
  %done.p = getelementptr i64, ptr %state, i64 %done.i
  %v = load atomic i64, ptr %next.p monotonic, align 8
  %v.epoch = lshr i64 %v, 32
  %v.same = icmp eq i64 %v.epoch, %epoch
  br i1 %v.same, label %claim.count, label %exit
claim.count:
  %w = and i64 %v, 4294967295
  %left = icmp ult i64 %w, %total
  br i1 %left, label %claim.try, label %advance
claim.try:
  %v1 = add i64 %v, 1
  %pair = cmpxchg ptr %next.p, i64 %v, i64 %v1 acq_rel monotonic
  %won = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %won, label %find, label %claim

find:
  %first.p = getelementptr i64, ptr %stages, i64 %srow
  %first = load i64, ptr %first.p
  br label %find.loop
find.loop:
  %d = phi i64 [%first, %find], [%d1, %find.next]
  %drow = mul i64 %d, {dispatch_fields}
  %end.i = add i64 %drow, 5
  %end.p = getelementptr i64, ptr %dispatches, i64 %end.i
  %end = load i64, ptr %end.p
  %past = icmp uge i64 %w, %end
  br i1 %past, label %find.next, label %run
find.next:
  %d1 = add i64 %d, 1
  br label %find.loop

run:
  %fn.p = getelementptr i64, ptr %dispatches, i64 %drow
  %fn.i = load i64, ptr %fn.p
  %fn = inttoptr i64 %fn.i to ptr
  %b.i = add i64 %drow, 1
  %b.p = getelementptr i64, ptr %dispatches, i64 %b.i
  %b.v = load i64, ptr %b.p
  %bindings = inttoptr i64 %b.v to ptr
  %gx.i = add i64 %drow, 2
  %gx.p = getelementptr i64, ptr %dispatches, i64 %gx.i
  %gx = load i64, ptr %gx.p
  %gy.i = add i64 %drow, 3
  %gy.p = getelementptr i64, ptr %dispatches, i64 %gy.i
  %gy = load i64, ptr %gy.p
  %start.i = add i64 %drow, 4
  %start.p = getelementptr i64, ptr %dispatches, i64 %start.i
  %start = load i64, ptr %start.p
  %i = sub i64 %w, %start
  %x = urem i64 %i, %gx
  %i.gx = udiv i64 %i, %gx
  %y = urem i64 %i.gx, %gy
  %z = udiv i64 %i.gx, %gy
  call void %fn(ptr %bindings, i64 %x, i64 %y, i64 %z)
  %before = atomicrmw add ptr %done.p, i64 1 acq_rel, align 8
  %after = add i64 %before, 1
  %last = icmp eq i64 %after, %total
  br i1 %last, label %publish, label %claim
publish:
  %s.next = add i64 %s, 1
  %opened = or i64 %tag, %s.next
  store atomic i64 %opened, ptr %state release, align 8
  br label %claim

advance:
  %s.after = add i64 %s, 1
  store i64 %s.after, ptr %stage.a
  br label %wait.start

exit:
  ret void
}}
"""

_PAUSE = {  # a spin-wait hint, where the architecture has one
    "x86_64": ("declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"),
    "aarch64": ("declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"),
}


class _Scheduler:
    """`rt_start` and `rt_work`, compiled for this process's CPU (the engine keeps the code alive)."""

    def __init__(self):
        import llvmlite.binding as llvm

        from .codegen import _init

        _init()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        decl, call = _PAUSE.get(triple.split("-", 1)[0], ("", ""))
        text = _IR.format(pause_decl=decl, pause_call=call, spins=SPINS_BEFORE_YIELD,
                          stage_fields=STAGE_FIELDS, dispatch_fields=DISPATCH_FIELDS)
        mod = llvm.parse_assembly(text)
        mod.triple = triple
        mod.verify()
        tm = llvm.Target.from_triple(triple).create_target_machine(opt=2, jit=True)
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.start = ctypes.CFUNCTYPE(None, ptr, i64, i64)(self.engine.get_function_address("rt_start"))
        self.work = ctypes.CFUNCTYPE(None, ptr, ptr, i64, ptr, i64)(self.engine.get_function_address("rt_work"))


_lock = threading.Lock()


@functools.cache
def _scheduler() -> _Scheduler:
    with _lock:
        return _Scheduler()


def _aligned(count: int) -> np.ndarray:
    raw = np.zeros(count + 8, dtype=np.int64)
    start = (-raw.ctypes.data % 64) // 8
    return raw[start:start + count]


class Program:
    """Stages of native dispatches, run by `work` from any number of threads (see the module docstring)."""

    def __init__(self, stages):
        rows, table = [], []
        for stage in stages:
            first, count = len(rows), 0
            for function, bindings, (gx, gy, gz) in stage:
                rows.append((function, bindings, gx, gy, count, count + gx * gy * gz))
                count += gx * gy * gz
            table.append((first, len(stage), count))
        self.dispatches = np.array(rows, dtype=np.int64).reshape(-1, DISPATCH_FIELDS)
        self.stages = np.array(table, dtype=np.int64).reshape(-1, STAGE_FIELDS)
        self.state = _aligned(8 + 16 * len(table) + 8)
        self.epoch = 0
        self.scheduler = _scheduler()
        # the arrays' addresses, read once: numpy builds a ctypes object at each `.ctypes` (2 us of a 17 us call)
        self.addresses = (self.dispatches.ctypes.data, self.stages.ctypes.data, len(self.stages),
                          self.state.ctypes.data)

    def start(self) -> int:
        """Opens the first stage of a new run; returns its epoch, for `work`. One run at a time."""
        self.epoch = self.epoch % (EPOCHS - 1) + 1
        self.scheduler.start(self.addresses[3], self.addresses[2], self.epoch)
        return self.epoch

    def work(self, epoch: int) -> None:
        """Takes workgroups of run `epoch` until it is done (or over). ctypes drops the GIL meanwhile."""
        self.scheduler.work(*self.addresses, epoch)


class NativeRunner:
    """The loader's `native_runner` (retarget.protocols.ExecutableLoader): `Program`s of this plugin's
    dispatches. The addresses they hold stay valid while the command buffer that made them lives: it
    keeps the bound dispatches, and they keep their binding tables, buffers and code."""

    def program(self, stages) -> Program:
        return Program(stages)


RUNNER = NativeRunner()
