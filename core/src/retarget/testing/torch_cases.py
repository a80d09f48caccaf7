"""What the torch importer's tests share: a function as a module to export, and seeded inputs."""

from __future__ import annotations


def module_of(fn, *, as_tuple: bool = False):
    """An `nn.Module` whose forward is `fn` (its results as a tuple with `as_tuple`: torch.export keeps the named
    tuples of sort and topk, which its own saved programs then fail to load)."""
    import torch

    class Fn(torch.nn.Module):
        def forward(self, *args):
            out = fn(*args)
            return tuple(out) if as_tuple else out

    return Fn()


def randn(*shape, seed: int = 0):
    """A float32 tensor of standard normals, the same for the same shape and seed on every machine."""
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def scatter_cases() -> dict:
    """The scatters' shared cases, {name: (function, inputs)}: indices repeat a position (the last write wins, as
    torch's CPU kernel) and reach only part of x. The importer's tests run them as composed; the scatter kernel's
    tests run them with every scatter forced through `rt.scatter`."""
    import torch
    import torch.nn.functional as F

    def ints(shape, seed):
        return torch.randint(-9, 9, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)

    rows_of_three = torch.tensor([[0, 1, 1], [2, 2, 4], [4, 0, 3]])
    return {
        "scatter of a tensor and of a number, and scatter_add, along each dim": (
            lambda x, i, rows, src: (x.scatter(1, i, src), x.scatter(0, rows, src), x.scatter(1, i, 2.5),
                                     x.scatter_add(1, i, src), x.scatter_add(0, rows, src), x.scatter(-1, i, src),
                                     x.scatter(1, i, src, reduce="multiply")),
            (randn(3, 5), rows_of_three, torch.tensor([[0, 2, 2], [1, 2, 0]]), randn(3, 4, seed=1))),
        "scatter_reduce: sum, prod, mean, amax, amin, with and without self": (
            lambda x, i, src: tuple(x.scatter_reduce(1, i, src, r, include_self=s)
                                    for r in ("sum", "prod", "mean", "amax", "amin") for s in (True, False)),
            (randn(3, 5), rows_of_three, randn(3, 3, seed=1))),
        "scatter_reduce of integers": (
            lambda x, i, src: tuple(x.scatter_reduce(0, i, src, r, include_self=s)
                                    for r in ("sum", "prod", "amax", "amin") for s in (True, False)),
            (ints((4, 3), 0), torch.tensor([[0, 3, 3], [0, 1, 2]]), ints((2, 3), 1))),
        # bag 1 is empty (zeros in every mode); index 2 is the padding index of the fourth result
        "embedding_bag: sum, mean, max, padding_idx, include_last_offset, per_sample_weights, 2-D bags": (
            lambda i, o, w, ps, b2: (F.embedding_bag(i, w, o, mode="sum"), F.embedding_bag(i, w, o, mode="mean"),
                                     F.embedding_bag(i, w, o, mode="max"), F.embedding_bag(i, w, o, padding_idx=2),
                                     F.embedding_bag(i, w, torch.cat([o, torch.tensor([8])]), mode="mean",
                                                     include_last_offset=True),
                                     F.embedding_bag(i, w, o, mode="sum", per_sample_weights=ps),
                                     F.embedding_bag(b2, w, mode="max")),
            (torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 2, 2, 5]), randn(10, 4), randn(8, seed=1),
             torch.tensor([[1, 2, 3], [3, 4, 0]]))),
    }


# The importer tests compile for these targets; RETARGET_IMPORTER_TARGETS="cuda vulkan-spirv webgpu-spirv" runs the
# same cases on a GPU machine (benchmarks/gpu/confirm.sh's `importers` step).
DEFAULT_TARGETS = ("vmvx", "llvm-cpu")
DEVICE_OF = {"cuda": "cuda", "vulkan-spirv": "vulkan", "webgpu-spirv": "webgpu", "opencl": "opencl",
             "metal-spirv": "metal", "rocm": "hip"}  # a target's device; the CPU targets run on local-task


def importer_targets() -> list[str]:
    import os

    return os.environ.get("RETARGET_IMPORTER_TARGETS", " ".join(DEFAULT_TARGETS)).split()


def device_of(target: str) -> str:
    return DEVICE_OF.get(target.split(":")[0], "local-task")


def assert_matches(outs, expected, tol: float = 1e-5) -> None:
    """Each output has torch's shape and dtype; floats within `tol` of the largest magnitude (0: exact), the rest
    equal."""
    import numpy as np

    from ..importers.torch_export import to_numpy

    assert len(outs) == len(expected), (len(outs), len(expected))
    for k, (out, ref) in enumerate(zip(outs, expected, strict=True)):
        ref = to_numpy(ref)
        assert out.shape == ref.shape and out.dtype == ref.dtype, (k, out.shape, ref.shape, out.dtype, ref.dtype)
        if ref.dtype.kind == "f" and tol:
            scale = max(float(np.abs(ref).max(initial=0)), 1e-6)
            assert np.abs(out - ref).max(initial=0) / scale <= tol, k
        else:
            np.testing.assert_array_equal(out, ref, err_msg=f"output {k}")


def run_compiled(module, target: str, inputs) -> tuple:
    """A graph module (or anything `retarget.compile` takes) compiled for `target` and called on its device with
    `inputs` (tensors): its outputs, as a tuple. Skips, saying why, where the target cannot run here."""
    import retarget

    from ..importers.torch_export import to_numpy
    from .devices import skip_unless_runs

    device = device_of(target)
    skip_unless_runs(target, device)
    outs = retarget.load(retarget.compile(module, target), device=device).main(*[to_numpy(x) for x in inputs])
    return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)


def compile_and_compare(fn_or_module, inputs, target: str, tol: float = 1e-5) -> None:
    """Export `fn_or_module` (a function becomes a module), import it both ways (the training IR as it stands, and
    decomposed to core ATen), compile each for `target`, run it and compare every output with torch's."""
    import torch

    from ..importers.torch_export import TorchImporter
    from ..ir import verify
    from .devices import skip_unless_runs

    skip_unless_runs(target, device_of(target))
    model = (fn_or_module if isinstance(fn_or_module, torch.nn.Module) else module_of(fn_or_module)).eval()
    program = torch.export.export(model, tuple(inputs))
    with torch.no_grad():
        expected = model(*inputs)
    expected = tuple(expected) if isinstance(expected, (tuple, list)) else (expected,)
    for decompose in (False, True):
        module = verify(TorchImporter().load(program, decompose=decompose))
        assert_matches(run_compiled(module, target, inputs), expected, tol)
