"""The differential tester's own behaviour (`retarget.testing.differential`), on vmvx alone.

The cross-target runs are in tests/test_differential_targets.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.errors import RetargetError  # noqa: E402
from retarget.testing.differential import FAMILIES, check, make_model  # noqa: E402

VMVX = [("vmvx", "local-sync")]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_model_seed_is_the_same_on_every_call_and_leaves_torch_random_state_alone(family):
    before = torch.random.get_rng_state()
    (m1, in1, ops1), (m2, in2, ops2) = make_model(7, family), make_model(7, family)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert ops1 == ops2 and ops1
    assert all(torch.equal(a, b) for a, b in zip(in1, in2))
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    with torch.no_grad():
        assert torch.equal(m1(*in1), m2(*in2))
    assert make_model(8, family)[2] != ops1 or not torch.equal(make_model(8, family)[1][0], in1[0])


def test_graphs_draw_every_op_kind_over_a_few_seeds():
    names = " ".join(" ".join(make_model(seed)[2]) for seed in range(100))
    for kind in ("conv2d", "conv1d", "linear", "pool", "batch_norm", "softmax", "layer_norm", "permute", "cat", "pad",
                 "where", "sum", "amax", "[...", "attention", "index_select", "var", "chunk", "expand", "argmax",
                 "ties to even", "interpolate(nearest", "interpolate(bilinear"):
        assert kind in names, kind


def test_a_short_run_on_vmvx_is_right():
    report = check(range(6), VMVX)
    assert report.models == 6 and report.outcomes["ok"] == 6 and not report.findings, report.summary()
    assert 0 < report.worst["vmvx=local-sync"] <= 1e-4


class _Wrapped:
    """retarget.load's result with main's answer passed through `change`."""

    def __init__(self, loaded, change):
        self.loaded, self.change = loaded, change

    def main(self, *args):
        return self.change(np.asarray(self.loaded.main(*args)))


REAL_LOAD = retarget.load


def _patched_load(monkeypatch, change):
    monkeypatch.setattr(retarget, "load", lambda *a, **k: _Wrapped(REAL_LOAD(*a, **k), change))


def test_a_slightly_wrong_answer_is_a_finding_with_the_command_that_repeats_it(monkeypatch):
    _patched_load(monkeypatch, lambda out: out + 1e-3 * np.abs(out).max())
    report = check(range(2), VMVX)
    assert report.outcomes["wrong"] == 2 and [f.kind for f in report.findings] == ["wrong", "wrong"]
    f = report.findings[0]
    assert "relative error" in f.detail and f.ops == make_model(0)[2]
    assert "--seed 0 --count 1 --pair vmvx=local-sync" in f.command("graph", "f32")


def test_a_wrong_shape_is_a_finding(monkeypatch):
    _patched_load(monkeypatch, lambda out: out.reshape(-1)[:-1])
    report = check(range(1), VMVX)
    assert report.findings and "shape" in report.findings[0].detail


def test_an_exception_is_a_finding_and_a_refusal_is_not(monkeypatch):
    def crash(out):
        raise IndexError("a backend bug")
    _patched_load(monkeypatch, crash)
    report = check(range(1), VMVX)
    assert report.findings[0].kind == "error" and "IndexError: a backend bug" in report.findings[0].detail

    def refuse(out):
        raise RetargetError("this target refuses that op")
    _patched_load(monkeypatch, refuse)
    report = check(range(1), VMVX)
    assert report.outcomes["refused"] == 1 and not report.findings


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "retarget.testing.differential", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_json_report_and_exit_code():
    run = _cli("--count", "2", "--pair", "vmvx=local-sync", "--family", "gemm", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["models"] == 2 and report["outcomes"] == {"ok": 2} and report["findings"] == []
    assert report["pairs"] == ["vmvx=local-sync"] and report["family"] == "gemm"


@pytest.mark.parametrize("pair, message", [("vmvx", "write TARGET=DEVICE"), ("nosuch=local-sync", "not installed")])
def test_cli_bad_pair_is_one_clear_line(pair, message):
    run = _cli("--pair", pair)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr


def test_nan_and_infinities_must_be_where_float64_has_them():
    from retarget.testing.differential import _error

    expected = np.array([1.0, np.nan, -np.inf, 2.0])
    assert _error(np.array([1.0, np.nan, -np.inf, 2.0]), expected) == 0.0
    assert _error(np.array([1.0, 0.5, -np.inf, 2.0]), expected) == float("inf")  # a number for NaN
    assert _error(np.array([1.0, np.nan, np.inf, 2.0]), expected) == float("inf")  # the infinity's sign
    assert _error(np.array([np.nan, np.nan, -np.inf, 2.0]), expected) == float("inf")  # NaN for a number
    assert _error(np.array([1.0, np.nan, -np.inf, 2.5]), expected) == pytest.approx(0.25)


def test_a_nan_for_a_number_is_reported_as_such(monkeypatch):
    def poison(out):
        out = out.astype(np.float32).copy()
        out.flat[0] = np.nan
        return out
    _patched_load(monkeypatch, poison)
    report = check(range(1), VMVX)
    assert report.findings[0].kind == "wrong" and "NaN or an infinity" in report.findings[0].detail
