"""No leaks on local-task, at the issue's figures: 10,000 calls, and 100 loads of a module dropped again
(`retarget.testing.leaks`; the conformance suite runs shorter versions on every driver)."""

import retarget
from retarget.testing import leaks
from retarget.testing.graphs import mlp_module

DEVICE = "local-task"


def test_ten_thousand_calls_on_local_task_leak_no_memory():
    module, x, _ = mlp_module()
    loaded = retarget.load(retarget.compile(module, "vmvx"), device=DEVICE)
    report = leaks.call_growth(loaded.predict, (x,), 10_000)
    assert report["traced"]["total"] < 64 << 10, report  # under 7 bytes a call
    assert report["threads"]["total"] == 0, report
    assert report["rss"]["total"] is None or report["rss"]["total"] < 8 << 20, report


def test_a_hundred_loads_of_a_module_on_local_task_leak_nothing():
    """The module's buffers, executables and command buffers go with it; the device's worker threads stay."""
    module, _, _ = mlp_module()
    artifact = retarget.compile(module, "vmvx")
    report = leaks.load_growth(lambda: retarget.load(artifact, device=DEVICE), 100)
    assert report["traced"]["total"] < 100 << 10, report  # a module left behind holds 12 KB
    assert report["threads"]["total"] == 0, report
    assert report["rss"]["total"] is None or report["rss"]["total"] < 8 << 20, report
