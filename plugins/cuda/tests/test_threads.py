"""The cuda driver under threads and over loads, on a stand-in for the CUDA driver API (fake_cuda.py): graphs
are captured on a stream of their own, so another thread's copies and waits never land in a capture; a wait
keeps the host arrays of copies issued after it began; a dropped module frees what it made. (On a GPU the
conformance suite's 16-thread and leak tests run too: benchmarks/gpu/run_reliability.sh.)"""

import gc
import threading

import fake_cuda  # on the path through conftest.py
import numpy as np
import retarget
from retarget.ir import Module
from retarget.testing.graphs import add_module, chain_module, mlp_module


def _two_functions():
    add, _, _ = add_module(n=64)
    chain, _, _ = chain_module()
    module = Module({"add": add.functions["main"], "chain": chain.functions["main"]})
    module.functions["add"].name, module.functions["chain"].name = "add", "chain"
    return module


def test_graphs_are_captured_on_a_stream_of_their_own(cu):
    module, x, _ = mlp_module()
    loaded = retarget.load(retarget.compile(module, "cuda:sm_90"), device="cuda")
    loaded.predict(x)
    (stream, recorded), = cu.captured.items()
    assert stream != loaded.device.stream and stream == loaded.device.capture_stream
    assert recorded and set(recorded) == {"launch"} and not cu.errors


def test_another_thread_s_copies_and_waits_never_land_in_a_capture(cu, monkeypatch):
    """One thread's first call captures its graph, slowly; meanwhile another thread calls another function."""
    monkeypatch.setattr(fake_cuda, "CAPTURE_LAUNCH_S", 0.02)
    loaded = retarget.load(retarget.compile(_two_functions(), "cuda:sm_90"), device="cuda")
    chain_inputs = [np.ones(s, np.float32) for s in ((4, 16), (16, 8), (8, 4))]
    loaded.chain(*chain_inputs)  # its graph is made: from here on its calls copy, launch and wait
    capturing = threading.Thread(target=loaded.add, args=(np.ones(64, np.float32), np.ones(64, np.float32)))
    capturing.start()
    while capturing.is_alive():
        loaded.chain(*chain_inputs)
    capturing.join()
    assert not cu.errors, cu.errors[:3]


def test_a_wait_keeps_the_host_arrays_of_copies_issued_after_it_began(cu, monkeypatch):
    from retarget_cuda.driver import CUDA

    device = CUDA.create("0")
    buffer = device.allocate(64)
    first, second = np.arange(16, dtype=np.float32), np.ones(16, dtype=np.float32)
    device.write(buffer, 0, first)
    synchronize = cu.cuStreamSynchronize

    def another_thread_writes_meanwhile(stream):
        device.write(buffer, 0, second)
        return synchronize(stream)

    monkeypatch.setattr(cu, "cuStreamSynchronize", another_thread_writes_meanwhile, raising=False)
    device.wait()
    assert len(device.pending) == 1 and np.shares_memory(device.pending[0], second)


def test_a_dropped_module_frees_its_memory_modules_graphs_and_streams(cu):
    module, x, _ = mlp_module()
    artifact = retarget.compile(module, "cuda:sm_90")
    before, retains = cu.alive(), cu.retains
    for _ in range(3):
        loaded = retarget.load(artifact, device="cuda")
        loaded.predict(x)
        assert cu.alive()["modules"] == before["modules"] + 1 and cu.alive()["graphs"] > before["graphs"]
        del loaded
        gc.collect()
    assert cu.alive() == before
    assert cu.retains == retains + 3  # a collected device keeps its retain of the primary context (see close)
