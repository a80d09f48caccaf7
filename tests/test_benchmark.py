"""`retarget benchmark` and `retarget.bench`: what is timed, how it is summarized, and what is reported.

The timing loop is checked on fake runners with a fake clock, so medians are exact. Through the command
line, only shapes, names and correctness are checked: no timing ever appears in an assert.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import retarget
from retarget.bench import Runner, Stats, check_output, interleave, measure
from retarget.bench.report import compare_with_peers
from retarget.cli import app
from retarget.errors import InputError, UnknownDeviceError
from typer.testing import CliRunner

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mlp.mlir"


class FakeClock:
    """A clock that moves only when a fake runner 'works'."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_runner(label: str, clock: FakeClock, costs, log: list, output=None, **kwargs) -> Runner:
    """A runner whose n-th call takes costs[n] seconds (the last cost repeats) and returns `output`."""
    calls = iter(costs)
    last = [costs[0]]

    def call():
        last[0] = next(calls, last[0])
        clock.now += last[0]
        log.append(label)
        return output

    return Runner(label, call, **kwargs)


# -- the timing loop ---------------------------------------------------------------------------------


def test_stats_are_median_min_max_and_count_in_milliseconds():
    assert Stats.of([0.003, 0.001, 0.002, 0.010]) == Stats(2.5, 1.0, 10.0, 4)
    assert Stats.of([]) is None


def test_runners_warm_up_then_take_turns_each_round_in_a_new_order():
    clock, log = FakeClock(), []
    runners = [fake_runner(name, clock, [0.001], log) for name in "abc"]
    interleave(runners, repeats=60, warmup=1, clock=clock)
    assert "".join(log[:3]) == "abc"
    rounds = ["".join(log[i:i + 3]) for i in range(3, len(log), 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds) and len(rounds) == 60
    timed = "".join(rounds)
    followers = {(x, y) for x, y in zip(timed, timed[1:]) if x != y}
    assert followers == {(x, y) for x in "abc" for y in "abc" if x != y}  # no runner always follows the same one
    assert max(timed.count(x + "c") for x in "ab") < 0.8 * timed.count("c")  # nor mostly


def test_samples_exclude_warm_ups_and_give_exact_medians():
    clock, log = FakeClock(), []
    slow_start = fake_runner("a", clock, [1.0, 0.5, 0.125, 0.25], log)  # binary fractions: exact sums
    steady = fake_runner("b", clock, [0.0625], log)
    a, b = interleave([slow_start, steady], repeats=3, warmup=1, clock=clock)
    assert a.wall == Stats(250.0, 125.0, 500.0, 3)
    assert b.wall == Stats(62.5, 62.5, 62.5, 3)


def test_a_runner_that_raises_leaves_the_rotation_and_the_others_go_on():
    clock, log = FakeClock(), []
    state = {"calls": 0}

    def flaky():
        state["calls"] += 1
        if state["calls"] == 3:
            raise RuntimeError("device lost")

    good = fake_runner("good", clock, [0.001], log)
    bad, ok = interleave([Runner("bad", flaky), good], repeats=5, warmup=1, clock=clock)
    assert bad.error == "RuntimeError: device lost" and len(bad.samples_s) == 1
    assert ok.error is None and ok.wall.count == 5


def test_device_time_is_sampled_beside_the_wall_clock_when_a_runner_has_it():
    clock, log = FakeClock(), []
    runner = fake_runner("gpu", clock, [0.002], log, device_time=lambda: 0.0005)
    (m,) = interleave([runner], repeats=4, warmup=0, clock=clock)
    assert m.wall.median_ms == pytest.approx(2.0) and m.device == Stats(0.5, 0.5, 0.5, 4)


def test_measure_checks_each_result_and_still_times_a_wrong_one():
    clock, log = FakeClock(), []
    expected = np.array([1.0, 2.0], np.float32)
    right = fake_runner("right", clock, [0.001], log, output=expected + 1e-7)
    wrong = fake_runner("wrong", clock, [0.001], log, output=expected * 2)
    r, w = measure([right, wrong], expected, repeats=2, warmup=0, clock=clock)
    assert r.correct is True and r.relative_error < 1e-6
    assert w.correct is False and w.relative_error == pytest.approx(1.0) and w.wall.count == 2


def test_outputs_of_the_wrong_shape_are_incorrect():
    assert check_output(np.zeros(3), np.zeros(4)) == (float("inf"), False)
    assert check_output((np.ones(2), np.ones(3)), (np.ones(2), np.ones(3))) == (0.0, True)


def test_the_baseline_is_the_fastest_correct_peer_of_the_same_model_and_place():
    rows = [
        {"model": "m", "place": "cpu", "runner": "retarget", "kind": "retarget", "median_ms": 2.0, "correct": True},
        {"model": "m", "place": "cpu", "runner": "fast but wrong", "kind": "peer", "median_ms": 0.5, "correct": False},
        {"model": "m", "place": "cpu", "runner": "ort", "kind": "peer", "median_ms": 4.0, "correct": True},
        {"model": "m", "place": "gpu", "runner": "retarget gpu", "kind": "retarget", "median_ms": 1.0, "correct": True},
    ]
    compare_with_peers(rows)
    assert [r["baseline"] for r in rows] == ["ort", "ort", "ort", "retarget gpu"]
    assert [r["vs_best_peer"] for r in rows] == [0.5, 0.125, 1.0, 1.0]


# -- one module through the command line -----------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_rtm(tmp_path_factory):
    """examples/mlp.mlir for llvm-cpu (when installed) and vmvx, which the benchmark uses as the reference."""
    targets = [t for t in ("llvm-cpu", "vmvx") if t in retarget.targets()]
    path = tmp_path_factory.mktemp("bench") / "mlp.rtm"
    retarget.compile(EXAMPLE, targets).save(path)
    return path


def invoke(*args):
    result = CliRunner().invoke(app, ["benchmark", *map(str, args)])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


def cli(*args):
    return subprocess.run([sys.executable, "-m", "retarget", "benchmark", *map(str, args)],
                          capture_output=True, text=True)


def assert_one_line_error(result, phrase):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and phrase in lines[0], result.stderr


def test_module_json_reports_stats_machine_versions_and_correctness(mlp_rtm):
    report = json.loads(invoke(mlp_rtm, "--device", "local-sync", "--function", "predict", "--repeats", "3",
                               "--json").stdout)
    assert report["function"] == "predict" and report["devices"][0]["device"] == "local-sync:0"
    assert {"platform", "cpu", "cores"} <= set(report["machine"])
    assert report["versions"]["retarget"] == retarget.__version__
    (row,) = report["results"]
    assert row["count"] == 3 and len(row["samples_ms"]) == 3
    assert row["min_ms"] <= row["median_ms"] <= row["max_ms"]
    if "llvm-cpu" in retarget.targets():  # checked against the module's own vmvx variant
        assert row["target"].startswith("llvm-cpu") and "vmvx" in report["settings"]["reference"]
        assert row["correct"] is True and row["relative_error"] < 1e-4


def test_module_result_is_checked_against_expected_values(mlp_rtm, tmp_path):
    x = np.load(EXAMPLE.parent / "x.npy").astype(np.float32).reshape(1, 16)
    y = retarget.load(mlp_rtm, device="local-sync").predict(x)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y * 2)
    wrong = cli(mlp_rtm, "--device", "local-sync", "--input", f"@{tmp_path / 'x.npy'}",
                "--expected", f"@{tmp_path / 'y.npy'}", "--repeats", "1", "--json")
    report = json.loads(wrong.stdout)  # the report still comes, for a script to read, and the exit says it failed
    assert report["settings"]["reference"] == "--expected"
    assert report["results"][0]["correct"] is False
    assert wrong.returncode == 1 and "differ from the reference (--expected)" in wrong.stderr


def test_expected_values_of_the_wrong_shape_are_a_clear_error(mlp_rtm):
    assert_one_line_error(cli(mlp_rtm, "--device", "local-sync", "--expected", "1x3xf32=0", "--repeats", "1"),
                          "--expected 0 has shape [1, 3]; result 0 of @predict is tensor<1x10xf32>")


def test_per_dispatch_times_every_dispatch_of_the_function(mlp_rtm):
    report = json.loads(invoke(mlp_rtm, "--device", "local-sync", "--function", "predict", "--repeats", "3",
                               "--per-dispatch", "--json").stdout)
    program = retarget.load(mlp_rtm, device="local-sync").predict.plan["program"]
    breakdown = report["per_dispatch"]
    assert [d["name"] for d in breakdown["dispatches"]] == [c["name"] for c in program if c["op"] == "dispatch"]
    assert all(d["count"] == 3 and d["workgroups"] for d in breakdown["dispatches"])
    assert sum(d["share"] for d in breakdown["dispatches"]) == pytest.approx(1.0)


def test_per_dispatch_table_names_each_dispatch(mlp_rtm):
    output = invoke(mlp_rtm, "--device", "local-sync", "--repeats", "2", "--per-dispatch").stdout
    assert "predict_dispatch_0" in output and "predict_dispatch_1" in output and "share" in output


def test_a_missing_module_is_a_one_line_error(tmp_path):
    assert_one_line_error(cli(tmp_path / "nope.rtm", "--device", "local-sync"), "no such module file")


def test_an_unknown_function_is_a_one_line_error(mlp_rtm):
    assert_one_line_error(cli(mlp_rtm, "--device", "local-sync", "--function", "predcit"), "no function 'predcit'")


@pytest.mark.parametrize("args, phrase", [
    ((), "give either a module to benchmark or --suite"),
    (("--suite", "zoo", "--function", "main"), "--function goes with a module"),
    (("--suite", "zoo", "--models", "mlpp"), "no model 'mlpp'"),
    (("--suite", "zoo", "--peers", "tensorflow"), "unknown peer 'tensorflow'"),
    (("--suite", "zooo"), "no suite 'zooo'"),
])
def test_misused_flags_raise_a_clear_input_error(args, phrase):
    result = CliRunner().invoke(app, ["benchmark", *args])
    assert isinstance(result.exception, InputError) and phrase in result.exception.oneline()


def test_an_unknown_suite_device_names_the_closest():
    from retarget.bench.suite import select_devices

    with pytest.raises(UnknownDeviceError, match="unknown device 'local-snyc'") as info:
        select_devices(["local-snyc"])
    assert "local-sync" in info.value.oneline()


# -- the zoo suite ----------------------------------------------------------------------------------------


def test_suite_writes_json_with_retarget_and_the_installed_peers(tmp_path):
    pytest.importorskip("torch")
    peers = ["torch"] + (["onnxruntime"] if importlib.util.find_spec("onnxruntime") else [])
    png = importlib.util.find_spec("matplotlib") is not None
    args = ["--suite", "zoo", "--models", "mlp", "--devices", "local-sync", "--repeats", "2", "--warmup", "1",
            "--peers", ",".join(peers), "--json-out", tmp_path / "zoo.json"]
    output = invoke(*args, *(["--png", tmp_path / "zoo.png"] if png else [])).stdout
    report = json.loads((tmp_path / "zoo.json").read_text())
    assert report["suite"] == "zoo" and {"machine", "versions", "devices", "settings", "skipped"} <= set(report)
    assert [d["device"] for d in report["devices"]] == ["local-sync:0"]
    runners = {r["runner"]: r for r in report["results"]}
    expected = {"torch eager cpu"} | ({"onnxruntime cpu"} if "onnxruntime" in peers else set())
    assert expected <= set(runners) and any(r["kind"] == "retarget" for r in runners.values())
    for r in runners.values():
        assert r["model"] == "mlp" and r["count"] == 2 and r["correct"] is True, r
        assert r["vs_best_peer"] is not None and r["baseline"] in expected
    assert "mlp" in output and "vs best peer" in output
    if png:
        assert (tmp_path / "zoo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
