"""The torch.export frontend: what it accepts, how it names things, each op family's numerics,
and the errors it raises."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from retarget.errors import InputError, RetargetError, UnsupportedOpError  # noqa: E402
from retarget.importers.torch_export import HANDLERS, TorchImporter, to_numpy  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.torch_cases import module_of, randn  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402


def run_both(fn, *inputs, tol=1e-5):
    """Import `fn` (a function or module) both ways, as torch.export's training IR (where it imports as it
    stands) and decomposed to core ATen, run each on vmvx, and compare every output with torch.
    Returns the first."""
    model = (fn if isinstance(fn, torch.nn.Module) else module_of(fn)).eval()
    program = torch.export.export(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    modules = [verify(TorchImporter().load(program, decompose=decompose)) for decompose in (False, True)]
    for module in modules:
        outs = run_function(module.functions["main"], [to_numpy(x) for x in inputs])
        assert len(outs) == len(expected)
        for out, ref in zip(outs, expected, strict=False):
            ref = to_numpy(ref)
            assert out.shape == ref.shape and out.dtype == ref.dtype
            if ref.dtype.kind == "f":
                scale = max(float(np.abs(ref).max()), 1e-6)
                assert np.abs(out - ref).max() / scale <= tol
            else:
                np.testing.assert_array_equal(out, ref)
    return modules[0]


def test_accepts_modules_programs_and_pt2_paths():
    imp = TorchImporter()
    assert imp.accepts(torch.nn.Linear(2, 2))
    assert imp.accepts("model.pt2")
    assert not imp.accepts("model.onnx")
    assert not imp.accepts(np.zeros(3))


def test_accepts_does_not_import_torch_for_other_sources():
    code = ("import sys; from retarget.importers.torch_export import TorchImporter as T; "
            "print(T().accepts('m.onnx'), T().accepts(object()), T().accepts('m.pt2'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "True", "False"]


def test_user_inputs_become_named_arguments_and_weights_constants():
    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, image, mask):
            return self.lin(image) * mask

    module = run_both(TwoInputs(), randn(2, 4), randn(2, 3, seed=1))
    fn = module.functions["main"]
    assert fn.arg_names == ["image", "mask"]
    assert sum(op.name == "rt.constant" for op in fn.ops) >= 2


def test_non_persistent_buffers_and_tensor_literals_become_constants():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((3,), 2.0), persistent=False)  # in the program's constants

        def forward(self, x):
            return x * self.scale + torch.tensor([1.0, 2.0, 3.0])  # a lifted constant

    fn = run_both(Scaled(), randn(2, 3)).functions["main"]
    assert [op.name for op in fn.ops].count("rt.constant") == 2


def test_saved_pt2_archive_loads(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).eval()
    x = randn(1, 4)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    module = TorchImporter().load(path)
    (out,) = run_function(module.functions["main"], [x.numpy()])
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_conv_groups_dilation_padding_stride_and_1d():
    w, b, w1 = randn(8, 2, 3, 3), randn(8), randn(6, 3, 5)
    run_both(lambda x: F.conv2d(x, w, b, stride=2, padding=(2, 1), dilation=2, groups=2), randn(1, 4, 11, 9))
    run_both(lambda x: F.conv1d(x, w1, None, padding=2), randn(2, 3, 16))


def test_pools_and_adaptive_pool():
    x = randn(2, 3, 13, 13)
    run_both(lambda x: F.max_pool2d(x, 3, 2, 1), x)
    run_both(lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), x)
    run_both(lambda x: F.avg_pool2d(x, 3, 2, 1), x)
    run_both(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), x)
    run_both(lambda x: F.adaptive_avg_pool2d(x[..., :12, :12], 4), x)


def test_activations():
    x = randn(4, 33) * 4
    run_both(lambda x: (F.relu(x), F.relu6(x), F.gelu(x), F.gelu(x, approximate="tanh"), torch.sigmoid(x),
                        torch.tanh(x), F.silu(x), F.hardswish(x), F.hardsigmoid(x), F.leaky_relu(x, 0.1),
                        F.elu(x)), x)


def test_normalizations_and_softmax():
    x = randn(2, 5, 16)
    run_both(torch.nn.LayerNorm(16).eval(), x)
    run_both(lambda x: (torch.softmax(x, -1), torch.log_softmax(x, 1)), x)
    bn = torch.nn.BatchNorm2d(3).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    run_both(bn, randn(2, 3, 4, 4))


def test_matmul_family():
    a, b = randn(3, 4, 5), randn(3, 5, 6, seed=1)
    run_both(lambda a, b: (a @ b, torch.bmm(a, b), a[0] @ b[0], a[0, 0] @ b[0], torch.addmm(b[0, 0], a[0], b[0])), a, b)
    run_both(torch.nn.Linear(5, 7).eval(), a)


def test_views_and_data_movement():
    x = randn(2, 3, 4, 5)
    run_both(lambda x: (x.permute(0, 2, 3, 1).reshape(2, -1), x.transpose(1, 3).contiguous(), x.flatten(1),
                        x[:, None].squeeze(1), x.unsqueeze(-1).expand(2, 3, 4, 5, 2).clone(),
                        x[:, 1], x[..., 1:4:2], torch.cat([x, x * 2], dim=1), x.split([1, 2], dim=1)[1],
                        x.chunk(2, dim=-1)[0], F.pad(x, (1, 2, 0, 1))), x)


def test_elementwise_with_scalars_and_reductions():
    x, y = randn(3, 4), randn(3, 4, seed=1)
    run_both(lambda x, y: (x + 2, 3 - x, x * y, x / (y.abs() + 1), x - y * 0.5, x.pow(2), (x.abs() + 0.1).rsqrt(),
                           x.mean(dim=1), x.sum(dim=0, keepdim=True), x.amax(dim=-1), x.amin(0), x.max(dim=1).values,
                           torch.where(x > y, x, y), x.clamp(-0.5, 0.5), x.var(dim=1), x.argmax(-1)), x, y)


def test_nan_and_infinity_tests():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -2.0, 3e38])
    run_both(lambda x: (torch.isnan(x), torch.isinf(x),
                        torch.where(torch.isnan(x) | torch.isinf(x), torch.zeros_like(x), x)), x)


def test_integer_division_rounding_modes():
    a, b = torch.tensor([7, -7, 6, -6, 5]), torch.tensor([2, 2, -4, 4, 5])
    run_both(lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
                           a // b), a, b)


def test_remainder_takes_the_divisors_sign_and_fmod_the_dividends():
    """torch.remainder is Python's %; it imported as C's fmod, wrong wherever the signs differ."""
    a, b = torch.tensor([7, -7, 6, -6, 5, 0]), torch.tensor([2, 2, -4, 4, -3, -3])
    run_both(lambda a, b: (torch.remainder(a, b), torch.remainder(a, -3), a % 4, torch.fmod(a, b),
                           torch.remainder(a.float() * 0.5, b.float())), a, b)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
def test_shifts_by_numbers_and_tensors_as_torch_shifts(dtype):
    """Right shifts are arithmetic for signed types; past the width they leave the sign (or 0); left shifts wrap."""
    x = torch.tensor([0, 1, 5, 100, 127, -1, -100, -128], dtype=torch.int64).to(dtype)
    y = torch.tensor([0, 1, 2, 3, 7, 1, 20, 4], dtype=torch.int64).to(dtype)
    run_both(lambda x, y: (x >> 2, x << 3, x >> 9, x << 9, x >> y, x << y, torch.bitwise_right_shift(x, 1),
                           torch.bitwise_left_shift(x, y)), x, y)


def test_a_negative_number_with_unsigned_bytes_wraps_as_in_torch():
    x = torch.tensor([10, 7, 0, 255, 254], dtype=torch.uint8)
    run_both(lambda x: (x // -2, x + (-1), torch.remainder(x, -3)), x)


def test_embedding_and_index_select():
    table = randn(10, 6)
    idx = torch.tensor([[1, 3, 9], [0, 0, 2]])
    run_both(lambda i: (F.embedding(i, table), table.index_select(0, i[0])), idx)


def test_scaled_dot_product_attention_with_and_without_causal_mask():
    q, k, v = randn(2, 4, 8, 16), randn(2, 4, 8, 16, seed=1), randn(2, 4, 8, 16, seed=2)
    run_both(lambda q, k, v: (F.scaled_dot_product_attention(q, k, v),
                              F.scaled_dot_product_attention(q, k, v, is_causal=True)), q, k, v)


@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("spelled", ["positional", "keyword"])
def test_variance_of_the_training_ir_imports_as_it_stands(unbiased, spelled):
    from retarget.importers import torch_training_ir

    if spelled == "keyword":
        fn = module_of(lambda x: torch.var(x, dim=[0, 2], unbiased=unbiased, keepdim=True))
    else:
        fn = module_of(lambda x: torch.var(x, [0, 2], unbiased, True))
    x = randn(3, 4, 5)
    assert torch_training_ir.plan(torch.export.export(fn, (x,))).reason is None
    run_both(fn, x)


def _interpolate_case_id(v):
    return v if isinstance(v, str) else "-".join(f"{k}={w}" for k, w in v.items())


@pytest.mark.parametrize("mode, kwargs", [
    ("nearest", {"scale_factor": 2}), ("nearest", {"scale_factor": 1.7}), ("nearest", {"size": (5, 7)}),
    ("nearest", {"scale_factor": 2.1}), ("nearest", {"scale_factor": 1.2}), ("bilinear", {"scale_factor": 1.2}),
    ("bilinear", {"scale_factor": 2, "align_corners": False}),
    ("bilinear", {"scale_factor": 0.5, "align_corners": False}), ("bilinear", {"scale_factor": 1.7}),
    ("bilinear", {"size": (5, 9), "align_corners": True}), ("bilinear", {"size": (11, 3), "align_corners": False}),
    ("nearest-exact", {"scale_factor": 2}), ("nearest-exact", {"scale_factor": 1.7}),
    ("nearest-exact", {"scale_factor": 0.5}), ("nearest-exact", {"scale_factor": 2.1}),
    ("nearest-exact", {"size": (5, 7)}), ("nearest-exact", {"size": (13, 3)}), ("nearest-exact", {"size": (6, 9)}),
], ids=_interpolate_case_id)
def test_interpolate_matches_torch(mode, kwargs):
    """upsample_nearest2d, _upsample_nearest_exact2d and upsample_bilinear2d: gathers of ATen's own positions
    (decomposed, nearest-exact is `aten.index.Tensor` of positions that torch computes)."""
    run_both(lambda x: F.interpolate(x, mode=mode, **kwargs), randn(2, 3, 6, 4), tol=2e-6)


@pytest.mark.parametrize("mode, kwargs", [
    ("bilinear", {"size": (5, 3)}), ("bicubic", {"size": (5, 3)}), ("bicubic", {"scale_factor": 0.37}),
    ("bilinear", {"scale_factor": 0.45, "align_corners": True}), ("bicubic", {"size": (9, 7), "align_corners": True}),
    ("bicubic", {"size": (23, 2)}),
], ids=_interpolate_case_id)
def test_antialiased_interpolate_matches_torch(mode, kwargs):
    """_upsample_bilinear2d_aa and _upsample_bicubic2d_aa, as they stand and decomposed: ATen's own weights along
    each axis; 17 -> 3 rows reads 12 taps an output (bicubic), more than compose.MAX_GATHERED_TAPS: a matmul."""
    run_both(lambda x: F.interpolate(x, mode=mode, antialias=True, **kwargs), randn(2, 3, 17, 11), tol=2e-6)


def test_an_antialiased_resize_of_a_one_pixel_wide_image_filters_each_row_on_its_own():
    """ATen's antialiased kernels give every output row the first row's weights when the image is one pixel wide
    (torch 2.13: 7 rows to 3 reads [0.86, 0.86, 0.86] for rows 0..6); ours reads as a two-pixel-wide image does."""
    rows = torch.arange(7.0).reshape(1, 1, 7, 1)
    model = module_of(lambda x: F.interpolate(x, size=(3, 1), mode="bilinear", antialias=True)).eval()
    module = verify(TorchImporter().load(torch.export.export(model, (rows,))))
    (out,) = run_function(module.functions["main"], [rows.numpy()])
    wide = F.interpolate(rows.expand(1, 1, 7, 2), size=(3, 2), mode="bilinear", antialias=True)[..., :1]
    np.testing.assert_allclose(out, wide.numpy(), rtol=1e-6)
    assert len(set(np.round(out.reshape(-1), 4))) == 3


@pytest.mark.parametrize("mode, kwargs", [
    ("nearest", {"scale_factor": 2}), ("nearest", {"scale_factor": 2.1}), ("nearest", {"size": 4}),
    ("nearest-exact", {"scale_factor": 2}), ("nearest-exact", {"scale_factor": 1.5}),
    ("nearest-exact", {"scale_factor": 0.4}), ("nearest-exact", {"size": 11}), ("nearest-exact", {"size": 3}),
], ids=_interpolate_case_id)
def test_interpolate_1d_matches_torch(mode, kwargs):
    run_both(lambda x: F.interpolate(x, mode=mode, **kwargs), randn(2, 3, 7))


@pytest.mark.parametrize("spatial", [1, 2])
def test_nearest_exact_positions_match_aten_at_every_size(spatial):
    """ATen's 1-D and 2-D kernels round the source position differently (the 1-D one once, with a fused
    multiply-add): at 2 -> 41 in 1-D, position 20 is 1, in 2-D 0. Every size to 48 and factor, both ways."""
    from retarget.importers.torch_export import _torch_positions

    for size_in in range(1, 25):
        rows = torch.arange(size_in, dtype=torch.float32).reshape(1, 1, size_in, *(1,) * (spatial - 1))
        rows = rows.expand(1, 1, *(size_in,) * spatial)  # each row holds its index
        for size, factor in [(size, None) for size in range(1, 49)] + [(None, f / 10) for f in range(3, 50)]:
            if int(size_in * (factor or 1)) == 0:
                continue
            kwargs = {"size": (size,) * spatial} if size else {"scale_factor": factor}
            out = F.interpolate(rows, mode="nearest-exact", **kwargs)[0, 0]
            expected = (out if spatial == 1 else out[:, 0]).numpy().astype(np.int64)
            positions = _torch_positions(size_in, len(expected), factor, False, "nearest-exact", spatial)
            positions = np.arange(size_in) if positions is None else positions
            assert np.array_equal(positions, expected), (size_in, kwargs)


@pytest.mark.parametrize("shape, kwargs", [
    ((1, 2, 5, 3), {"mode": "nearest-exact", "scale_factor": 1.5}), ((1, 2, 5), {"mode": "nearest-exact", "size": 8}),
    ((1, 2, 5), {"mode": "nearest", "size": 8}),
], ids=lambda v: _interpolate_case_id(v) if isinstance(v, dict) else f"{len(v) - 2}d")
def test_interpolate_nearest_modes_import_without_decomposition(monkeypatch, shape, kwargs):
    def refuse(*args, **kw):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", refuse)
    x, model = randn(*shape), module_of(lambda x: F.interpolate(x, **kwargs))
    module = verify(TorchImporter().load(torch.export.export(model, (x,))))
    (out,) = run_function(module.functions["main"], [to_numpy(x)])
    np.testing.assert_array_equal(out, to_numpy(model(x)))


INDEXING = {  # name: (function, inputs); index tensors given as inputs are the model's inputs
    "one dim, constant, negative": (lambda x: x[torch.tensor([0, 2, -1, -3])], (randn(3, 4, 5),)),
    "none then index": (lambda x, i: x[:, i], (randn(3, 4, 5), torch.tensor([[0, 3], [-1, 2]]))),
    "last dim, negative": (lambda x, i: x[..., i], (randn(3, 4, 5), torch.tensor([-5, 4, -1, 0, 0]))),
    "adjacent dims broadcast": (lambda x, i, j: x[:, i, j], (randn(3, 4, 5), torch.tensor([[0], [3], [-2]]),
                                                              torch.tensor([4, -1]))),
    "separated dims to the front": (lambda x, i, j: x[i, :, j], (randn(3, 4, 5), torch.tensor([[2, -3]]),
                                                                  torch.tensor([[1], [-1], [0]]))),
    "every dim, i32 and i64": (lambda x, i, j, k: x[i, j, k], (randn(3, 4, 5), torch.tensor([2, 0], dtype=torch.int32),
                                                                torch.tensor([-1, 1]), torch.tensor([[4], [0]]))),
    "scalar index": (lambda x: x[:, torch.tensor(-2)], (randn(3, 4, 5),)),
    "integer data": (lambda x, i: x[i, :, i], (torch.arange(60).reshape(3, 4, 5), torch.tensor([1, -1]))),
}


@pytest.mark.parametrize("name", INDEXING)
def test_integer_indexing_matches_torch(name):
    """aten.index.Tensor: x[i], x[:, i], x[i, :, j], ... with constant or input index tensors, as one gather."""
    fn, inputs = INDEXING[name]
    run_both(fn, *inputs)


@pytest.mark.parametrize("target", ["vmvx", "llvm-cpu"])
def test_indexing_and_nearest_exact_compile_and_run(target):
    """Every indexing form and nearest-exact interpolation, in one module compiled (constants folded) for a target."""
    import retarget

    skip_unless_runs(target)
    x, i, j = randn(4, 4, 5), torch.tensor([[0], [3], [-2]]), torch.tensor([4, -1])
    image, signal = randn(2, 3, 6, 4, seed=1), randn(2, 3, 7, seed=2)

    def every_form(x, i, j, image, signal):
        return (x[torch.tensor([0, 2, -1])], x[:, i], x[:, i, j], x[i, :, j], x[..., j],
                F.interpolate(image, scale_factor=1.7, mode="nearest-exact"),
                F.interpolate(image, size=(13, 3), mode="nearest-exact"),
                F.interpolate(signal, scale_factor=1.5, mode="nearest-exact"))

    inputs = (x, i, j, image, signal)
    module = TorchImporter().load(module_of(every_form), example_inputs=inputs)
    outs = retarget.load(retarget.compile(module, target), device="local-task").main(*[t.numpy() for t in inputs])
    for out, ref in zip(outs, every_form(*inputs), strict=True):
        np.testing.assert_array_equal(out, ref.numpy())


def test_unsupported_op_names_aten_op_node_and_source_line():
    class Bessel(torch.nn.Module):
        def forward(self, x):
            return torch.special.i0(x)

    model = Bessel()
    with pytest.raises(UnsupportedOpError) as info:
        TorchImporter().load(model, example_inputs=(randn(2, 3),))
    err = info.value
    assert "aten.i0" in err.message and "i0" in err.message
    assert err.location and __file__.rsplit("/", 1)[-1] in err.location
    assert "supported aten ops" in err.hint and "convolution" in err.hint


def test_module_without_example_inputs_is_an_input_error():
    with pytest.raises(InputError, match="example_inputs"):
        TorchImporter().load(torch.nn.Linear(2, 2))


def test_untraceable_model_is_a_retarget_error():
    def data_dependent(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(RetargetError, match="torch.export"):
        TorchImporter().load(module_of(data_dependent), example_inputs=(randn(3),))


def test_missing_pt2_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        TorchImporter().load(tmp_path / "absent.pt2")


def test_supported_op_table_covers_the_zoo_ops():
    for op in ("convolution", "addmm", "_native_batch_norm_legit_no_training", "hardtanh", "native_layer_norm",
               "_softmax", "max_pool2d_with_indices", "avg_pool2d", "mean", "split_with_sizes", "bmm", "gelu"):
        assert op in HANDLERS


def test_sums_of_bools_and_integers_count_in_int64_and_their_dtype_is_kept():
    """torch reduces in the result's type: counts of a mask in int64 (they came out 0 or 1, reduced in i1), and
    `dtype=` before the sum (an f16 sum of 4000 values asked for in f32 came out infinite). Found by
    `retarget.testing.differential` (seed 409)."""
    run_both(lambda x: ((x > 0.25).sum(1), (x > 0).sum(dim=1, dtype=torch.int32), (x > -3).prod(1),
                        (x > 0).long().sum(0), torch.sum(x.half() * 40, 1, dtype=torch.float32),
                        torch.mean(x.half() * 40, 1, dtype=torch.float32)), randn(4, 4000), tol=1e-5)


@pytest.mark.parametrize("affine", [False, True])
def test_half_float_statistics_are_taken_in_f32(affine):
    """mean, var and layer norm of f16 values whose sums pass f16's 65504: each sum is taken and divided in f32 and
    rounded once, as torch does (they came out infinite, NaN or zero; differential seed 91)."""
    norm = torch.nn.LayerNorm(2000, elementwise_affine=affine).half()
    x = (randn(3, 2000) * 8 + 40).half()
    run_both(lambda x: (x.var(-1), x.mean(-1), x.var(-1, keepdim=True, correction=0), norm(x)), x, tol=1e-3)
