"""A driver under threads: a loaded module called from 16 threads at once gives every caller its own
answer, whether the threads share one loaded module (its functions run one call at a time each, calls
of different functions overlap) or each thread loads its own copy on the same device (everything
overlaps: loading, recording, writes, submits, waits and reads). Answers are compared with vmvx."""

from __future__ import annotations

import sys
import threading

import pytest

from retarget.testing.conformance import kit
from retarget.testing.conformance.fixtures import *  # noqa: F403

THREADS = 16
ROUNDS = 3  # calls per thread, each with its own inputs
SWITCH_INTERVAL_S = 1e-6  # Python switches threads as often as it can (default 5 ms): more interleavings


def _module():
    """One module of three functions (an elementwise add, an MLP, two chained matmuls), and per function
    its inputs."""
    from retarget.ir.core import Module
    from retarget.testing.graphs import add_module, chain_module, mlp_module

    functions, inputs = {}, {}
    for name, (module, args, _) in (("add", add_module(n=1000)), ("mlp", mlp_module(batch=3)),
                                    ("chain", chain_module())):
        (fn,) = module.functions.values()
        fn.name = name
        functions[name], inputs[name] = fn, args if isinstance(args, tuple) else (args,)
    return Module(functions), inputs


def _work(device, driver_name):
    """(artifact for the device, [(function, inputs, vmvx's answer)] for each thread and round)."""
    import retarget

    backend, desc = kit.target_for(driver_name, device, prefer_plugin=kit.owner("drivers", driver_name))
    if backend is None:
        pytest.skip(f"no installed target produces code that {device.info.uri} loads")
    module, inputs = _module()
    artifact = retarget.compile(module, desc)
    reference = retarget.load(retarget.compile(module, "vmvx"), device=kit.REFERENCE_DRIVER)
    names = list(inputs)
    calls = []
    for t in range(THREADS):
        name = names[t % len(names)]
        mine = []
        for r in range(ROUNDS):
            args = kit.varied(inputs[name], t * ROUNDS + r)
            mine.append((name, args, reference.function(name)(*args)))
        calls.append(mine)
    return artifact, calls


def _run_threads(calls, module_for) -> list[str]:
    """Every thread makes its calls, all released together at each round; returns what went wrong."""
    start = threading.Barrier(THREADS)
    problems: list[str] = []

    def worker(t: int) -> None:
        try:
            module = module_for(t)
            for r, (name, args, expected) in enumerate(calls[t]):
                start.wait(timeout=120)
                got = module.function(name)(*args)
                try:
                    kit.assert_matches(got, expected, f"thread {t}, call {r + 1} of {name}")
                except AssertionError as e:
                    problems.append(str(e))
        except threading.BrokenBarrierError:
            problems.append(f"thread {t}: another thread failed, so the rounds stopped")
        except Exception as e:  # reported in the main thread with the thread's name
            start.abort()
            problems.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,), name=f"conformance-{t}") for t in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads), "a thread hung: a deadlock in the driver?"
    return problems


def test_sixteen_threads_sharing_one_loaded_module_get_their_own_answers(device, driver_name):
    import retarget

    artifact, calls = _work(device, driver_name)
    shared = retarget.load(artifact, device=device.info.uri)
    problems = _run_threads(calls, lambda t: shared)
    assert not problems, f"{len(problems)} problems, first: " + "; ".join(problems[:3])


def test_sixteen_threads_each_loading_the_module_on_one_device_get_their_own_answers(device, driver_name):
    import retarget

    artifact, calls = _work(device, driver_name)
    problems = _run_threads(calls, lambda t: retarget.load(artifact, device=device.info.uri))
    assert not problems, f"{len(problems)} problems, first: " + "; ".join(problems[:3])


__all__ = [name for name in dir() if name.startswith("test_")]
