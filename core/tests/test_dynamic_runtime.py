"""One module, many input sizes: binding symbols per call, bounds, memory plans, the shape cache,
signatures, the .rtm format and the CLI, on the vmvx reference and the local drivers."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import retarget
from retarget.errors import InputError, ModuleFormatError
from retarget.importers.mlir import import_mlir
from retarget.module_format import read

# y = reshape(x @ w + b, [2n, 4]); z = x[:, 0:4] + t (t shares x's symbol n)
GRAPH = """
func.func @main(%x: tensor<?x8xf32> {rt.name = "x"}, %t: tensor<?x4xf32> {rt.name = "t"},
                %w: tensor<8x8xf32> {rt.name = "w"}) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %0 = "rt.matmul"(%x, %w) : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %1 = "rt.tanh"(%0) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %2 = "rt.reshape"(%1) {shape = ["2*x_dim0", 4]} : (tensor<?x8xf32>) -> tensor<?x4xf32>
  %3 = "rt.slice"(%x) {start = array<i64: 0, 0>, limit = ["x_dim0", 4], stride = array<i64: 1, 1>}
      : (tensor<?x8xf32>) -> tensor<?x4xf32>
  %4 = "rt.add"(%3, %t) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %2, %4 : tensor<?x4xf32>, tensor<?x4xf32>
}"""


def _graph():
    return import_mlir(GRAPH)  # x's `?` is x_dim0; t's, unified with it by the add


def _inputs(n, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal((n, 8)).astype(np.float32), g.standard_normal((n, 4)).astype(np.float32),
            g.standard_normal((8, 8)).astype(np.float32)]


def _expected(x, t, w):
    return np.tanh(x @ w).reshape(-1, 4), x[:, :4] + t


@pytest.fixture(scope="module")
def unbounded():
    return retarget.compile(_graph(), "vmvx")


@pytest.fixture(scope="module")
def bounded():
    return retarget.compile(_graph(), "vmvx", dims={"x_dim0": (1, 16)})


@pytest.mark.parametrize("device", ["local-sync", "local-task"])
def test_one_module_runs_at_several_sizes(unbounded, device):
    fn = retarget.load(unbounded, device=device).main
    for n in (1, 5, 2):
        args = _inputs(n, seed=n)
        for got, want in zip(fn(*args), _expected(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_input_outside_the_declared_bounds_names_the_argument_and_the_bound(bounded):
    fn = retarget.load(bounded, device="local-sync").main
    with pytest.raises(InputError, match=r"input 0 \('x'\).*size 17 along axis 0 \('x_dim0'\), outside its range 1.."):
        fn(*_inputs(17))


def test_inputs_sharing_a_symbol_must_agree(unbounded):
    fn = retarget.load(unbounded, device="local-sync").main
    x, t, w = _inputs(3)
    with pytest.raises(InputError, match=r"input 1 \('t'\) of main has size 2 .* input 0 \('x'\) has 3 .* 'x_dim0'"):
        fn(x, t[:2], w)


def test_a_static_size_of_a_dynamic_function_is_still_checked(unbounded):
    fn = retarget.load(unbounded, device="local-sync").main
    x, t, w = _inputs(3)
    with pytest.raises(InputError, match=r"input 2 \('w'\) .* must have shape \[8, 8\]"):
        fn(x, t, w[:4])


def test_recorded_shapes_are_cached_least_recently_used_first_out(unbounded, monkeypatch):
    monkeypatch.setenv("RETARGET_SHAPE_CACHE", "2")
    fn = retarget.load(unbounded, device="local-sync").main
    for n in (1, 2, 1, 3):
        fn(*_inputs(n))
    assert fn.cached_shapes == [{"x_dim0": 1}, {"x_dim0": 3}]


def test_bounded_symbols_share_one_arena_planned_at_the_bounds(bounded):
    plan = bounded.functions["main"]
    assert plan["arena_bytes"] >= 16 * 8 * 4
    fn = retarget.load(bounded, device="local-sync").main
    arenas = {id(fn.use({"x_dim0": n}).arena) for n in (1, 7, 16)}
    assert arenas == {id(fn.bounded_arena)}


def test_unbounded_shapes_take_arenas_by_size_class(unbounded):
    fn = retarget.load(unbounded, device="local-sync").main
    small, close, large = (fn.use({"x_dim0": n}) for n in (100, 101, 400))
    assert small.arena is close.arena and large.arena is not small.arena


def test_dims_bound_a_symbol_and_a_single_value_makes_it_static():
    art = retarget.compile(_graph(), "vmvx", dims={"x_dim0": "2..8"})
    assert art.functions["main"]["symbols"]["x_dim0"]["range"] == "2..8"
    static = retarget.compile(_graph(), "vmvx", dims={"x_dim0": 3})
    assert "symbols" not in static.functions["main"]
    assert static.functions["main"]["inputs"][0]["type"] == "tensor<3x8xf32>"


def test_dims_reaching_past_the_models_range_are_cut_to_it_and_say_so():
    from retarget.passes.dynamic_plan import apply_dims

    module = apply_dims(_graph(), {"x_dim0": "2..8"})  # the model's own range, as torch.export's Dim(min=2, max=8)
    said = []
    apply_dims(module, {"x_dim0": "1..64"}, said.append)
    assert str(module.functions["main"].symbols["x_dim0"]) == "2..8"
    assert said == ["--dim x_dim0=1..64 reaches past the model's range 2..8: compiling for x_dim0=2..8; "
                    "calls outside it are refused"]
    said.clear()
    apply_dims(module, {"x_dim0": "2..4"}, said.append)  # inside: nothing to say
    assert said == [] and str(module.functions["main"].symbols["x_dim0"]) == "2..4"


def test_dims_naming_an_unknown_symbol_lists_the_known_ones():
    with pytest.raises(InputError, match="no symbolic dimension 'batch'") as info:
        retarget.compile(_graph(), "vmvx", dims={"batch": (1, 4)})
    assert "x_dim0" in info.value.hint


def test_signature_shows_symbolic_dimensions_and_their_ranges(bounded):
    sig = retarget.load(bounded, device="local-sync").main.signature
    assert str(sig) == ("main(x: tensor<x_dim0x8xf32>, t: tensor<x_dim0x4xf32>, w: tensor<8x8xf32>) -> "
                        "(tensor<(2*x_dim0)x4xf32>, tensor<x_dim0x4xf32>) with x_dim0=1..16")
    data = sig.to_json()
    assert data["inputs"][0]["shape"] == ["x_dim0", 8] and data["symbols"] == {"x_dim0": "1..16"}


def test_dynamic_module_round_trips_through_an_rtm_file(bounded, tmp_path):
    bounded.save(tmp_path / "m.rtm")
    fn = retarget.load(tmp_path / "m.rtm", device="local-sync").main
    args = _inputs(4)
    np.testing.assert_allclose(fn(*args)[1], _expected(*args)[1], rtol=1e-6)


def test_manifest_check_refuses_a_size_of_an_undeclared_symbol(bounded, tmp_path):
    path = bounded.save(tmp_path / "m.rtm")
    import zipfile

    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    manifest["functions"]["main"]["buffers"][0] = "4*batch"
    art = retarget.module_format.Artifact(manifest, {k: v for k, v in bounded.entries.items()})
    art.save(tmp_path / "bad.rtm")
    with pytest.raises(ModuleFormatError, match="uses batch, which it does not declare"):
        read(tmp_path / "bad.rtm")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "retarget", *map(str, args)], capture_output=True, text=True)


def test_cli_compiles_with_dim_and_runs_any_size(tmp_path):
    source = tmp_path / "m.mlir"
    source.write_text(GRAPH)
    compiled = _cli("compile", source, "--target", "vmvx", "--dim", "x_dim0=1..8", "-o", tmp_path / "m.rtm")
    assert compiled.returncode == 0, compiled.stderr
    assert "x_dim0=1..8" in str(retarget.load(tmp_path / "m.rtm", device="local-sync").main.signature)
    ran = _cli("run", tmp_path / "m.rtm", "--input", "3x8xf32=0.5", "--input", "3x4xf32=1", "--input", "8x8xf32=0",
               "--json")
    assert ran.returncode == 0, ran.stderr
    results = json.loads(ran.stdout)["results"]
    assert results[0]["shape"] == [6, 4] and results[1]["values"][2] == [1.5] * 4


def test_inputs_too_small_for_a_derived_dimension_are_refused():
    from retarget.testing import dynamic

    fn = retarget.load(retarget.compile(dynamic.module("conv_batch_image"), "vmvx"), device="local-sync").main
    x = np.zeros((1, 3, 2, 9), np.float32)  # a 2-row image: the 2x2 pool after the stride-2 conv has 0 rows
    with pytest.raises(InputError, match=r"at n=1, m=2, k=9, .* dimension \(\(m \+ 1\) // 2\) - 1 = 0"):
        fn(x)


def test_list_functions_shows_the_symbols_and_their_ranges(bounded, tmp_path):
    listed = _cli("run", bounded.save(tmp_path / "m.rtm"), "--list-functions", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["functions"]
    assert row["symbols"] == {"x_dim0": "1..16"} and row["inputs"][0]["shape"][0] == "x_dim0"


def test_per_dispatch_timing_runs_at_the_shape_of_its_inputs(unbounded):
    from retarget.bench.timing import per_dispatch

    fn = retarget.load(unbounded, device="local-sync").main
    report = per_dispatch(fn, _inputs(3), repeats=1, warmup=0)
    assert fn.cached_shapes == [{"x_dim0": 3}] and len(report["dispatches"]) == len(fn.plan["program"]) - sum(
        c["op"] == "barrier" for c in fn.plan["program"])


@pytest.mark.parametrize("target, device", [("vmvx", "local-sync"), ("llvm-cpu", "local-task")])
def test_a_size_only_inside_a_kernel_reaches_it(target, device):
    """The mean over a symbolic axis counts its elements as a reduction of a broadcast, so one kernel has that
    size only inside it: its arguments and result are static. Found by the differential tester's --dynamic."""
    from retarget.testing.devices import skip_unless_runs

    torch = pytest.importorskip("torch")
    skip_unless_runs(target, device)

    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean(0)

    batch = torch.export.Dim("batch", min=1, max=16)
    art = retarget.compile(Mean(), target, example_inputs=(torch.ones(3, 5),), dynamic_shapes=({0: batch},))
    fn = retarget.load(art, device=device).main
    for n in (1, 4, 9):
        x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
        np.testing.assert_allclose(fn(x), x.mean(0), rtol=1e-5, atol=1e-6)


RUN_TIME_SIZES = {  # models that need a size known only at run time: as data, as a sort's stride, as a scan's length
    "x * n": lambda x: x * x.shape[0],
    "sum / n": lambda x: x.sum(0) / x.shape[0],
    "x + (3n) // 2": lambda x: x + (x.shape[0] * 3) // 2,
    "roll along n": lambda x: x.roll(-4, 0),  # torch indexes with (n - shift) % n
    "roll flattened": lambda x: x.roll(3),
    "var over n": lambda x: x.var(dim=(0, 1)),
    "var over n alone": lambda x: x.var(dim=0),  # NaN at n = 1, as torch's
    "ones(n, int64).sum()": lambda x: x + torch_ones_sum(x),  # a running sum of ones: i64 data, not an index
    "topk along a static axis": lambda x: x.topk(2, dim=1).values,
    "sort along a static axis before n": lambda x: x.t().sort(dim=0).values,  # its gather's stride is n
    "cumsum along n (at most 16)": lambda x: x.cumsum(0),
    "flip along n": lambda x: x.flip(0, 1),  # n - 1 - iota
}


def torch_ones_sum(x):
    import torch

    return torch.ones(x.shape[0], dtype=torch.int64).sum() * 2


@pytest.mark.parametrize("target, device", [("vmvx", "local-sync"), ("llvm-cpu", "local-task")])
@pytest.mark.parametrize("name", sorted(RUN_TIME_SIZES))
def test_models_that_need_a_size_at_run_time(name, target, device):
    from retarget.testing.devices import skip_unless_runs

    torch = pytest.importorskip("torch")
    skip_unless_runs(target, device)

    class Model(torch.nn.Module):
        def forward(self, x):
            return RUN_TIME_SIZES[name](x)

    batch = torch.export.Dim("batch", min=1, max=16)
    art = retarget.compile(Model(), target, example_inputs=(torch.ones(3, 5),), dynamic_shapes=({0: batch},))
    fn = retarget.load(art, device=device).main
    for n in (1, 4, 9):
        x = torch.randn(n, 5, generator=torch.Generator().manual_seed(n))
        np.testing.assert_allclose(fn(x.numpy()), Model()(x.double()).numpy(), rtol=1e-5, atol=1e-5)


def test_a_large_convolution_with_a_dynamic_batch_compiles_for_llvm_cpu():
    """At the batch's bound, the multiply-adds that decide the split into workgroups (90M an image x 32) pass 2^31;
    that product was formed in 32-bit index arithmetic, and the kernel's proof refused it."""
    from retarget.testing.devices import skip_unless_runs

    torch = pytest.importorskip("torch")
    skip_unless_runs("llvm-cpu")
    conv = torch.nn.Conv2d(135, 128, 3, padding=1).eval()
    batch = torch.export.Dim("batch", min=1, max=32)
    art = retarget.compile(conv, "llvm-cpu", example_inputs=(torch.ones(2, 135, 24, 24),), dynamic_shapes=({0: batch},))
    fn = retarget.load(art, device="local-task").main
    for n in (1, 3):
        x = torch.randn(n, 135, 24, 24, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            np.testing.assert_allclose(fn(x.numpy()), conv(x).numpy(), rtol=1e-4, atol=1e-4)


def test_top_k_along_a_dynamic_axis_needs_k_elements_at_its_smallest():
    torch = pytest.importorskip("torch")
    from retarget.errors import UnsupportedOpError

    class Top2(torch.nn.Module):
        def forward(self, x):
            return x.topk(2, dim=0).values

    def compiled(lowest):
        batch = torch.export.Dim("batch", min=lowest, max=16)
        return retarget.compile(Top2(), "vmvx", example_inputs=(torch.ones(4, 3),), dynamic_shapes=({0: batch},))

    with pytest.raises(UnsupportedOpError, match="fewer than k") as info:
        compiled(1)
    assert "lower bound to 2" in info.value.hint
    fn = retarget.load(compiled(2), device="local-sync").main
    for n in (2, 5):
        x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        np.testing.assert_array_equal(fn(x.numpy()), Top2()(x).numpy())
