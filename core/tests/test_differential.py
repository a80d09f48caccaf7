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
from retarget.testing.differential import FAMILIES, _compare, check, make_model  # noqa: E402

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
    names = " ".join(" ".join(make_model(seed)[2]) for seed in range(200))
    for kind in ("conv2d", "conv1d", "conv_transpose2d", "pixel_shuffle", "pixel_unshuffle", "linear", "max_pool2d",
                 "avg_pool2d", "ceil_mode=True", "count_include_pad=True", "adaptive_avg_pool2d((",
                 "adaptive_max_pool2d", "batch_norm", "softmax", "log_softmax", "logsumexp", "cumsum", "layer_norm",
                 "group_norm", "instance_norm", "affine=False", "permute", "transpose(", "flip", "roll", "repeat",
                 "tril", "triu", "topk", "sort", "stack", "einsum", "bmm", "cat(dim", "cat(x, y, x", "pad", "where",
                 "masked_fill", "sum", "amax", "amin", ".values", "[...", "attention", "index_select", "embedding",
                 "var", "chunk", "expand", "argmax", "argmin", "(bool)", "(i64)", "ties to even",
                 "interpolate(nearest", "interpolate(bilinear", "clamp(", "leaky_relu(", "elu(alpha", "x.shape[",
                 "index_add", "index_copy", "scatter_add", "scatter_reduce", "index_put", "grid_sample(bilinear",
                 "grid_sample(bicubic"):
        assert kind in names, kind


def test_integer_graphs_draw_every_integer_op_kind_and_dtype_over_a_few_seeds():
    names = " ".join(" ".join(make_model(seed, "int", dtype)[2]) for seed in range(150) for dtype in ("i8", "i64"))
    for kind in ("x // -", "remainder(x, -", "fmod(x, ", "rounding_mode=trunc", "x >> ", "x << ", "x & ", "x ^ ",
                 "~x", "abs", "neg", "clamp(", "to(int8)", "to(uint8)", "to(f32)", "to(bool)", "sum(dim",
                 "dtype=x.dtype",
                 "cumsum", "count_nonzero", "argmax", "argmin", "x // y", "remainder(x, y)", "x < y (bool)",
                 "x << (y & 7)", "x >> (y & 7)",
                 "where(x > y", "permute", "cat("):
        assert kind in names, kind
    _, (x,), _ = make_model(3, "int", "ui8")
    assert x.dtype == torch.uint8


def test_a_family_refuses_a_dtype_it_does_not_take():
    with pytest.raises(ValueError, match="the int family takes i8, ui8, i16, i32, i64, not f32"):
        make_model(0, "int", "f32")
    result = subprocess.run([sys.executable, "-m", "retarget.testing.differential", "--family", "gemm", "--dtype",
                             "i8"], capture_output=True, text=True)
    assert result.returncode == 2 and "--family gemm takes --dtype f32, f16" in result.stderr


def test_a_short_integer_run_on_vmvx_is_exact():
    report = check(range(12), VMVX, "int", "i8")
    assert report.outcomes == {"ok": 12} and report.worst[VMVX[0][0] + "=" + VMVX[0][1]] == 0.0, report.summary()


def _outputs(seeds, dtype="f32"):
    """seed -> (the model's output in `dtype`, its output in float64)."""
    outputs = {}
    for seed in seeds:
        model, inputs, _ = make_model(seed, dtype=dtype)
        with torch.no_grad():
            outputs[seed] = model(*inputs), model.double()(*[x.double() for x in inputs])
    return outputs


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_index_and_mask_outputs_do_not_depend_on_the_float_dtype(dtype):
    """They are computed from values float16, float32 and float64 hold alike, so the reference is exact."""
    outputs = _outputs(range(60), dtype)
    discrete = {seed: (out, ref) for seed, (out, ref) in outputs.items() if not out.dtype.is_floating_point}
    assert {out.dtype for out, _ in discrete.values()} >= {torch.int64, torch.bool}
    for seed, (out, ref) in discrete.items():
        assert out.dtype == ref.dtype and torch.equal(out, ref), seed


def test_a_short_run_with_index_and_mask_outputs_on_vmvx_is_exact():
    seeds = {1: torch.bool, 64: torch.bool, 15: torch.int64}  # ones the importer takes
    assert {seed: out.dtype for seed, (out, _) in _outputs(seeds).items()} == seeds
    report = check(seeds, VMVX)
    assert report.outcomes == {"ok": 3} and report.worst["vmvx=local-sync"] == 0.0, report.summary()


def test_a_short_run_on_vmvx_is_right():
    report = check(range(6), VMVX)
    assert report.models == 6 and report.outcomes["ok"] == 6 and not report.findings, report.summary()
    assert report.by_pair == {"vmvx=local-sync": {"ok": 6}}
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


def test_bisect_names_the_first_op_whose_prefix_is_wrong(monkeypatch):
    from retarget.testing.differential import bisect

    seed = next(s for s in range(20) if len(make_model(s)[2]) >= 3)
    _patched_load(monkeypatch, lambda out: out + 1e-3 * np.abs(out).max())  # wrong from the first op on
    (finding,) = check([seed], VMVX).findings
    n, first = bisect(finding, "graph", "f32")
    assert n == 1 and first.ops == finding.ops[:1] and first.kind == "wrong"


def test_through_onnx_an_export_that_onnxruntime_computes_differently_is_the_exporters_not_a_finding():
    from retarget.testing.differential import _ExportError, _import

    class Shift(torch.nn.Module):
        def forward(self, x):
            return x >> 3  # torch's exporter writes a division, which rounds -85 >> 3 toward zero

    x = torch.tensor([-85, 85, -8, 7], dtype=torch.int32)
    with pytest.raises(_ExportError, match="onnxruntime computes the exported model differently"):
        _import(Shift(), (x,), "onnx", [((x,), (x >> 3).numpy())], 0.0, dynamic=False)
    report = check(range(8), VMVX, importer="onnx")  # graphs through ONNX: right, or the exporter's refusal
    assert report.outcomes["ok"] >= 6 and not report.findings, report.summary()
    assert all(why.startswith("torch.onnx.export") for why in report.refusals)


def test_a_dynamic_run_compiles_once_and_checks_each_batch_size(monkeypatch):
    from retarget.testing.differential import dynamic_sizes

    sizes, compiles = [], []
    real_compile = retarget.compile
    monkeypatch.setattr(retarget, "compile", lambda *a, **k: compiles.append(1) or real_compile(*a, **k))
    _patched_load(monkeypatch, lambda out: sizes.append(out.shape) or out)
    seeds = [s for s in range(40) if make_model(s)[1][0].shape[0] == 3 and len(make_model(s)[1][0].shape) == 4][:2]
    report = check(seeds, VMVX, dynamic=True)
    assert not report.findings, report.summary()
    assert all(why.startswith("the importer: torch.export could not trace") for why in report.refusals)
    runs = report.outcomes["ok"]
    assert runs and len(compiles) == runs and len(sizes) == runs * len(dynamic_sizes(3)) == runs * 3
    assert dynamic_sizes(3) == [1, 3, 6] and dynamic_sizes(1) == [1, 4]


class _WrongAtBatch1:
    """retarget.load's result, answering wrong only when its input's batch is 1."""

    def __init__(self, loaded):
        self.loaded = loaded

    def main(self, x):
        out = np.asarray(self.loaded.main(x))
        return out + 1e-2 * np.abs(out).max() if x.shape[0] == 1 else out


def test_a_dynamic_finding_names_the_batch_and_repeats_with_dynamic(monkeypatch):
    seed = next(s for s in range(40) if not check([s], VMVX, dynamic=True).refusals)
    monkeypatch.setattr(retarget, "load", lambda *a, **k: _WrongAtBatch1(REAL_LOAD(*a, **k)))
    (finding,) = check([seed], VMVX, dynamic=True).findings
    assert "at batch 1" in finding.detail and finding.dynamic
    assert finding.command("graph", "f32").endswith("--dynamic --show")


def test_an_importer_crash_is_a_finding_on_every_pair(monkeypatch):
    import retarget.compiler

    def crash(*a, **k):
        raise TypeError("an importer bug")
    monkeypatch.setattr(retarget.compiler, "import_model", crash)
    report = check(range(1), VMVX)
    (finding,) = report.findings
    assert finding.kind == "error" and "the importer" in finding.detail
    assert "TypeError: an importer bug" in finding.detail


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
    assert report["by_pair"] == {"vmvx=local-sync": {"ok": 2}} and report["dynamic"] is False


@pytest.mark.parametrize("pair, message", [("vmvx", "write TARGET=DEVICE"), ("nosuch=local-sync", "not installed")])
def test_cli_bad_pair_is_one_clear_line(pair, message):
    run = _cli("--pair", pair)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr


def test_nan_and_infinities_must_be_where_float64_has_them():
    expected = np.array([1.0, np.nan, -np.inf, 2.0])
    assert _compare(np.array([1.0, np.nan, -np.inf, 2.0]), expected)[0] == 0.0
    assert _compare(np.array([1.0, 0.5, -np.inf, 2.0]), expected)[0] == float("inf")  # a number for NaN
    assert _compare(np.array([1.0, np.nan, np.inf, 2.0]), expected)[0] == float("inf")  # the infinity's sign
    assert _compare(np.array([np.nan, np.nan, -np.inf, 2.0]), expected)[0] == float("inf")  # NaN for a number
    assert _compare(np.array([np.inf, np.nan, -np.inf, 2.0]), expected)[0] == float("inf")  # overflow, as f16's
    assert _compare(np.array([1.0, np.nan, -np.inf, 2.5]), expected)[0] == pytest.approx(0.25)


def test_an_exact_zero_against_float64_rounding_noise_is_right_and_a_small_wrong_answer_is_not():
    """Seed 163 (instance norm of equal values): float64 gives 5e-14 where float32 gives exactly 0."""
    noise = np.array([5e-14, -3e-14, 0.0])
    assert _compare(np.zeros(3, np.float32), noise)[0] < 1e-7
    assert _compare(np.array([0.0, 0.0, 1e-3], np.float32), noise)[0] > 100


def test_integers_and_bools_must_be_equal_and_of_the_reference_dtype():
    expected = np.array([[0, 3], [2, 1]], dtype=np.int64)
    assert _compare(expected.copy(), expected) == (0.0, "equal")
    error, what = _compare(np.array([[0, 3], [1, 1]], dtype=np.int64), expected)
    assert error == float("inf") and what == "1 of 4 elements differ, the first at (1, 0): 1, expected 2"
    assert _compare(expected.astype(np.int32), expected) == (float("inf"), "dtype int32, expected int64")
    assert _compare(expected.astype(np.float32), expected)[0] == float("inf")  # a float for an index
    mask = np.array([True, False])
    assert _compare(mask, mask)[0] == 0.0 and _compare(~mask, mask)[0] == float("inf")
    assert _compare(mask.astype(np.uint8), mask) == (float("inf"), "dtype uint8, expected bool")
    assert _compare(np.array(3), np.array(3)) == (0.0, "equal")  # a 0-d index (argmax of everything)
    assert _compare(np.array(2), np.array(3))[1] == "1 of 1 elements differ, the first at (): 2, expected 3"


def test_a_nan_for_a_number_is_reported_as_such(monkeypatch):
    def poison(out):
        out = out.astype(np.float32).copy()
        out.flat[0] = np.nan
        return out
    _patched_load(monkeypatch, poison)
    report = check(range(1), VMVX)
    assert report.findings[0].kind == "wrong" and "NaN or an infinity" in report.findings[0].detail
