"""torch.export's training IR imports as it stands when every node of it can (`torch_training_ir.plan`), and
is decomposed to core ATen first otherwise: in-place writes to inputs, to views, or after a view was taken,
and ops in training mode. Either way the result is torch's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from retarget.importers.torch_export import TorchImporter, to_numpy  # noqa: E402
from retarget.importers.torch_training_ir import plan  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402


class ConvThen(torch.nn.Module):
    """A convolution (a new tensor), then `then(y, x)`."""

    def __init__(self, then):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.then = then

    def forward(self, x):
        return self.then(self.conv(x), x)


def _export_and_check(then, x=None):
    """Export ConvThen(then), import it, and check every output against torch; returns the program."""
    torch.manual_seed(0)
    model = ConvThen(then).eval()
    x = torch.randn(1, 3, 6, 6) if x is None else x
    program = torch.export.export(model, (x.clone(),))
    with torch.no_grad():
        expected = model(x.clone())
    expected = expected if isinstance(expected, tuple) else (expected,)
    outs = run_function(TorchImporter().load(program).functions["main"], [x.numpy()])
    assert len(outs) == len(expected)
    for out, ref in zip(outs, expected, strict=True):
        np.testing.assert_allclose(out, to_numpy(ref), rtol=1e-5, atol=1e-5)
    return program


def test_inplace_op_on_a_new_tensor_imports_as_the_functional_op(decompositions):
    program = _export_and_check(lambda y, x: (y.relu_(), y + 1))  # y + 1 reads what relu_ wrote
    assert plan(program).reason is None and not decompositions


def test_a_read_of_the_written_tensor_by_its_old_node_sees_the_write():
    torch.manual_seed(0)
    model, x = ConvThen(lambda y, x: (y.relu_(), y + 1)).eval(), torch.randn(1, 3, 6, 6)
    program = torch.export.export(model, (x,))
    # torch.export names the tensor by the in-place op's node after the write; a graph may also use the old one
    nodes = {str(n.target): n for n in program.graph.nodes}
    nodes["aten.add.Tensor"].replace_input_with(nodes["aten.relu_.default"], nodes["aten.conv2d.default"])
    program.graph_module.recompile()
    expected = [t.detach().numpy() for t in program.module()(x)]
    outs = run_function(TorchImporter().load(program).functions["main"], [x.numpy()])
    np.testing.assert_allclose(outs[1], expected[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(expected[1], expected[0] + 1, rtol=1e-6)  # torch too reads what relu_ wrote


def test_inplace_op_after_a_view_was_taken_is_decomposed_and_matches_torch(decompositions):
    def view_then_write(y, x):
        flat = y.view(-1)
        y.relu_()
        return flat * 2  # the view sees the write

    program = _export_and_check(view_then_write)
    assert "views 'conv2d' before 'relu_' writes to it" in plan(program).reason
    assert decompositions == [program]


def test_inplace_op_on_a_view_is_decomposed_and_matches_torch(decompositions):
    def write_through_view(y, x):
        y.view(-1).relu_()
        return y * 2

    program = _export_and_check(write_through_view)
    assert "writes to 'view', which may alias another tensor" in plan(program).reason
    assert decompositions == [program]


def test_inplace_op_on_a_user_input_is_decomposed_and_matches_torch(decompositions):
    program = _export_and_check(lambda y, x: (y, x.add_(1) * 2))
    assert "writes to the user input 'x'" in plan(program).reason
    assert decompositions == [program]


def test_a_view_taken_after_the_last_inplace_write_imports_as_it_stands(decompositions):
    program = _export_and_check(lambda y, x: y.relu_().flatten(1))
    assert plan(program).reason is None and not decompositions


def test_batch_norm_with_batch_statistics_is_decomposed():
    model = torch.nn.BatchNorm2d(4, track_running_stats=False).eval()  # normalizes by the batch's statistics
    program = torch.export.export(model, (torch.randn(2, 4, 3, 3),))
    assert "is not in inference mode with running statistics" in plan(program).reason


def test_training_mode_batch_norm_updating_its_buffers_is_decomposed():
    model = torch.nn.BatchNorm2d(4).train()
    program = torch.export.export(model, (torch.randn(2, 4, 3, 3),))
    assert "writes to the buffer" in plan(program).reason  # the running statistics are updated in place


def test_decompose_option_always_decomposes(decompositions):
    program = torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    assert plan(program).reason is None
    TorchImporter().load(program, decompose=True)
    assert decompositions == [program]
