"""A driver over many calls and loads (`retarget.testing.leaks`): calling a loaded module thousands of
times, and loading and dropping a module again and again, leave host memory (what tracemalloc traces,
and the resident set), the live threads and the device memory (where the device reports it, through
the optional `Device.memory_in_use()`) where they were."""

from __future__ import annotations

import gc

import pytest

from retarget.testing import leaks
from retarget.testing.conformance import kit
from retarget.testing.conformance.fixtures import *  # noqa: F403

CALLS = 2_000
LOADS = 20
TRACED_PER_CALLS = 64 << 10  # over all the calls: 32 bytes a call; a leaked output array is more
TRACED_PER_LOAD = 2 << 10  # over the second half of the loads: a module left behind holds 10 KB or more
WARMUP_LOADS = 5  # caches (the driver's, its library's, Python's) fill in the first loads
RSS_LIMIT = 8 << 20


def _tiny(device, driver_name):
    import retarget
    from retarget.testing.graphs import mlp_module

    backend, desc = kit.target_for(driver_name, device, prefer_plugin=kit.owner("drivers", driver_name))
    if backend is None:
        pytest.skip(f"no installed target produces code that {device.info.uri} loads")
    module, x, _ = mlp_module()
    return retarget.compile(module, desc), x


def test_two_thousand_calls_leak_no_memory(device, driver_name):
    import retarget

    artifact, x = _tiny(device, driver_name)
    loaded = retarget.load(artifact, device=device.info.uri)
    report = leaks.call_growth(loaded.predict, (x,), CALLS, device=loaded.device)
    assert report["traced"]["total"] < TRACED_PER_CALLS, report
    assert report["threads"]["total"] == 0, report
    assert report["device"]["total"] in (None, 0), report
    assert report["rss"]["total"] is None or report["rss"]["total"] < RSS_LIMIT, report


def test_loading_and_dropping_a_module_twenty_times_leaks_nothing(device, driver_name):
    """Host memory the module's objects hold, device memory, threads. (Not the resident set: a Vulkan
    driver's shader compiler may keep memory per pipeline it made, as lavapipe does.)"""
    import retarget

    artifact, _ = _tiny(device, driver_name)
    report = leaks.load_growth(lambda: retarget.load(artifact, device=device.info.uri), LOADS, device=device,
                               warmup=WARMUP_LOADS)
    assert report["traced"]["second_half"] < LOADS // 2 * TRACED_PER_LOAD, report
    assert report["traced"]["total"] < 2 * LOADS * TRACED_PER_LOAD, report
    assert report["threads"]["total"] == 0, report
    assert report["device"]["total"] in (None, 0), report


def test_device_memory_in_use_comes_back_when_a_buffer_is_dropped(device):
    if not hasattr(device, "memory_in_use"):
        pytest.skip(f"{device.info.uri} does not report its memory in use (memory_in_use() is optional)")
    gc.collect()
    before = leaks.device_bytes(device)
    buffer = device.allocate(4 << 20)
    held = leaks.device_bytes(device)
    del buffer
    gc.collect()
    assert held - before >= 4 << 20, f"a 4 MiB buffer shows as {held - before:,} bytes"
    assert leaks.device_bytes(device) == before


__all__ = [name for name in dir() if name.startswith("test_")]
