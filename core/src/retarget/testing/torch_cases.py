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
