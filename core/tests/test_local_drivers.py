"""The local drivers' use of a loader's `native_runner`: runs of native stages become programs, run in order
with the other commands; and the helper threads' shares."""

from __future__ import annotations

import threading

import pytest
from retarget.ir import TensorType, dtypes
from retarget.local_drivers import LocalDevice, LocalExecutable, _Team
from retarget.protocols import Binding, DeviceInfo, EntryPoint


class FakeRunner:
    """Programs whose 'function addresses' are keys of `functions`: Python callables of (x, y, z)."""

    def __init__(self):
        self.functions, self.programs = {}, []

    def program(self, stages):
        runner = self

        class Program:
            def __init__(self):
                self.stages, self.lock, self.ran = stages, threading.Lock(), 0

            def start(self):
                self.ran += 1
                return self.ran

            def work(self, epoch):
                with self.lock:  # the first thread to come runs the whole run; later ones find it done
                    if getattr(self, "done", 0) == epoch:
                        return
                    for stage in self.stages:
                        for function, _, (gx, gy, gz) in stage:
                            for i in range(gx * gy * gz):
                                runner.functions[function]((i % gx, i // gx % gy, i // (gx * gy)))
                    self.done = epoch

        self.programs.append(Program())
        return self.programs[-1]


def _executable(log: list, runner: FakeRunner | None, name: str, native: bool = True) -> LocalExecutable:
    entry = EntryPoint(name, (Binding(TensorType((4,), dtypes.f32), "write"),), workgroup_count=(2, 1, 1))

    def bind(views):
        def run(workgroup):
            log.append((name, workgroup[0]))

        if native:
            run.native = (len(runner.functions), 0)
            runner.functions[len(runner.functions)] = run
        return run

    return LocalExecutable([entry], [bind], runner if native else None)


@pytest.mark.parametrize("workers", [1, 2])
def test_native_stages_become_programs_that_run_in_order_with_the_other_commands(workers):
    device = LocalDevice(DeviceInfo("local-test", "0", "cpu"), workers)
    log, runner = [], FakeRunner()
    buffer = device.allocate(16)
    binding = [(buffer, 0, 16)]
    cb = device.command_buffer()
    cb.dispatch(_executable(log, runner, "a"), 0, binding)
    cb.barrier()
    cb.dispatch(_executable(log, runner, "b"), 0, binding)
    cb.barrier()
    cb.dispatch(_executable(log, runner, "python", native=False), 0, binding)
    cb.barrier()
    cb.dispatch(_executable(log, runner, "c"), 0, binding)
    cb.end()
    assert [(start, stop) for start, (_, stop, _) in cb.programs.items()] == [(0, 2), (3, 4)]
    for _ in range(2):
        log.clear()
        device.submit(cb)
        assert [name for name, _ in log] == ["a", "a", "b", "b", "python", "python", "c", "c"]
    device.close()


def test_a_helper_handed_shares_while_busy_runs_each_once():
    team = _Team(1)
    ran, release = [], threading.Event()
    team.launch(lambda: (release.wait(), ran.append("launched")))
    threading.Timer(0.05, release.set).start()
    team.run([lambda: ran.append("main"), lambda: ran.append("helper")])  # queued behind the launched work
    team.run([lambda: ran.append("main 2"), lambda: ran.append("helper 2")])
    assert sorted(ran) == sorted(["launched", "main", "helper", "main 2", "helper 2"])
    team.close()


def test_reads_lend_recycled_memory_only_once_an_earlier_result_is_gone():
    """A large read's array comes from memory a dropped result gave back (no page faults on every call), and never
    from memory that an array the caller keeps (or a view of it) still holds."""
    import gc

    import numpy as np
    from retarget.local_drivers import READ_POOL

    device = LocalDevice(DeviceInfo("local-test", "0", "cpu"), 1)
    nbytes = 4 * READ_POOL.SMALLEST
    buffer = device.allocate(nbytes)
    buffer.data[:] = np.arange(nbytes) % 251
    kept = device.read(buffer, 0, nbytes)
    view = kept.view(np.float32)[::2]
    del kept
    gc.collect()
    second = device.read(buffer, 0, nbytes)
    assert second.ctypes.data != view.base.ctypes.data  # the view still holds the first block
    address = second.ctypes.data
    del second
    gc.collect()
    third = device.read(buffer, 0, nbytes)
    assert third.ctypes.data == address and third.flags.writeable
    np.testing.assert_array_equal(third, np.arange(nbytes) % 251)
    third[:] = 0  # the caller's own: writing it leaves the device's buffer alone
    assert buffer.data[1] == 1
