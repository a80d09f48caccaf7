"""The native runner: stages of dispatches run in order by any number of threads, each run once per start."""

import threading

import numpy as np
from retarget.ir.dtypes import f32
from retarget.kernel import ir as k
from retarget_llvm_cpu import targets
from retarget_llvm_cpu.compile import compile_kernels
from retarget_llvm_cpu.loader import LlvmCpuLoader

N, GROUPS = 4096, 16  # each of the kernel's 16 workgroups adds one to its 256 elements


def _add_one():
    wg, j = k.Var("wg"), k.Var("j")
    at = wg * (N // GROUPS) + j
    body = [k.Loop("j", N // GROUPS, [k.Store("y", at, k.Binary("add", k.Load("x", at, f32), k.const(1.0, f32)))],
                   kind="vector")]
    kernel = k.Kernel("add_one", [k.Param("x", f32, N, "read"), k.Param("y", f32, N, "write")], body,
                      workgroup_count=(GROUPS, 1, 1), workgroup_vars=("wg",))
    loader = LlvmCpuLoader()
    return loader, loader.load(compile_kernels([kernel], targets.parse("host")))[0]


def _ping_pong(stages: int):
    """A program of `stages` dependent stages, each adding one: a -> b, b -> a, ..."""
    loader, bind = _add_one()
    a, b = np.zeros(N, np.float32), np.zeros(N, np.float32)
    runs = [bind([a, b]) if s % 2 == 0 else bind([b, a]) for s in range(stages)]
    program = loader.native_runner.program([[(*run.native, (GROUPS, 1, 1))] for run in runs])
    return program, (a, b), runs  # the runs keep their binding tables alive


def test_stages_run_in_order_whichever_threads_take_their_workgroups():
    program, (a, b), _keep = _ping_pong(20)
    for run in range(1, 6):
        epoch = program.start()
        helpers = [threading.Thread(target=program.work, args=(epoch,)) for _ in range(3)]
        for t in helpers:
            t.start()
        program.work(epoch)
        for t in helpers:
            t.join()
        np.testing.assert_array_equal(a, np.full(N, 20 * run, np.float32))  # 20 stages: the last wrote a


def test_a_thread_of_an_earlier_run_takes_nothing_from_the_next():
    program, (a, b), _keep = _ping_pong(2)
    first = program.start()
    program.work(first)
    np.testing.assert_array_equal(a, np.full(N, 2, np.float32))
    program.start()
    program.work(first)  # arrives late, with the old epoch: must leave the new run's workgroups alone
    np.testing.assert_array_equal(b, np.full(N, 1, np.float32))
    np.testing.assert_array_equal(a, np.full(N, 2, np.float32))
