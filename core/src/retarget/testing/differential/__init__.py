"""Differential testing: seeded random torch models, compiled for several targets, checked against float64.

Model `seed` of a family is always the same, so a finding reproduces from its seed alone:

    python -m retarget.testing.differential --count 200                          # CPU targets
    python -m retarget.testing.differential --pair vulkan-spirv=vulkan --family gemm --dtype f16 --max-size 2048
    python -m retarget.testing.differential --pair llvm-cpu=local-task --seed 117 --count 1 --show

Families:
- `graph`: a chain of 2-7 ops drawn from `GRAPH_OPS` on random shapes, odd sizes included: elementwise ops
  (GELU exact and tanh, SiLU, hardswish, leaky ReLU, ELU, clamp with drawn bounds, ...), broadcasts, reductions
  (sum, mean, logsumexp, max/min/amax/amin, keepdim or not, over one dim or several), cumsum, variances, softmax
  and log-softmax, layer/group/instance/batch norms (affine or not), 1-D and 2-D convolutions and transposed ones,
  pools (ceil mode, padding counted or not, adaptive to any size), pixel (un)shuffle, interpolation, linear
  layers, bmm and einsum, attention (causal or not), gathers, permutes, transpose-reshape chains, flip, roll,
  repeat, tril/triu, sort and topk values, slices, chunks, expands, pads, concatenations of 2 and 3, stacks,
  where and masked_fill, and sizes used as data (`x * x.shape[d]`, a sum over its count). Ops whose result
  jumps (rounding, comparisons, argmax with ties, masks) take only values that float32 and float64 hold alike
  (`EXACT`: the input, and what only moves or picks its values), so that no rounding upstream moves a jump. A
  graph may end in an integer or bool result (argmax/argmin, comparisons, logic, counts, casts), compared
  exactly;
- `gemm`: one matmul, linear layer, batched matmul or convolution of random size (up to `max_size`), ragged
  and tile-aligned sizes both, so that the GPU targets' fragment and staged schedules and their edges run;
- `int`: a chain of integer ops on an i8, ui8, i16, i32 or i64 input (every value of the 8-bit types, so that
  arithmetic wraps): floor and truncating division and both remainders by numbers of both signs and by tensors,
  shifts, bitwise ops, casts between integer types (wrapping) and through f32, sums in i64 and in the input's
  type, cumulative sums, products, counts, argmax/argmin, comparisons, and the float graphs' moves. Its reference
  is torch itself, and every result must be equal.

With `dynamic=True` (`--dynamic`), the input's first dimension is exported as a `torch.export.Dim` (1 to
`DYNAMIC_MAX` or the largest size run, traced at 2 or more), each target compiles the model once, and runs it at
`dynamic_sizes(n)`: 1, the model's own size n and n + 3, each against float64 at that size. A model that
torch.export specializes (a reshape to fixed sizes, a weight of the batch's size) is refused by the importer and
counted so.

A float result is wrong when its relative error (`numerics.relative_error`) against the same model in float64
passes `TOLERANCE` for the family and dtype, or where it has NaN or an infinity that float64 has not (or the other
way: the variance of one element is NaN in both); an integer or bool result, when its dtype or any element differs
(the `int` family's reference is torch's own result, not float64's).
An op that a target refuses with a `RetargetError` is counted as refused, not as a finding; any other exception
is a finding.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...errors import RetargetError
from ..numerics import relative_error

__all__ = ["DYNAMIC_MAX", "FAMILIES", "FAMILY_DTYPES", "IMPORTERS", "INT_DTYPES", "TOLERANCE", "Finding", "Report",
           "bisect", "check", "dynamic_sizes", "make_model"]

# relative error against float64 that a result may have, by family and dtype. In f16 the reference has the
# same f16 inputs and weights; a gemm's error is its output's rounding and the order of its f32 sums, while
# each op of a graph rounds its result to f16 where the float64 reference does not.
INT_DTYPES = ("i8", "ui8", "i16", "i32", "i64")
TOLERANCE = {("graph", "f32"): 1e-4, ("gemm", "f32"): 1e-4, ("graph", "f16"): 1e-2, ("gemm", "f16"): 4e-3,
             **{("int", d): 0.0 for d in INT_DTYPES}}
# inputs and weights are of order 1, so a result whose float64 value is below this everywhere is an exact zero
# in rounding noise (instance norm of equal values: 5e-14), and our exact 0 is right (seed 163 scored 1 without it)
NOISE_FLOOR = 1e-6


@dataclass
class Finding:
    seed: int
    target: str
    device: str
    kind: str  # "wrong" or "error"
    detail: str
    ops: list[str]
    importer: str = "torch"
    dynamic: bool = False

    def command(self, family: str, dtype: str) -> str:
        through = f" --importer {self.importer}" if self.importer != "torch" else ""
        through += " --dynamic" if self.dynamic else ""
        return (f"python -m retarget.testing.differential --family {family} --dtype {dtype} --seed {self.seed} "
                f"--count 1 --pair {self.target}={self.device}{through} --show")


@dataclass
class Report:
    models: int = 0
    outcomes: Counter = field(default_factory=Counter)  # "ok", "refused", "wrong", "error"
    by_pair: dict = field(default_factory=dict)  # "target=device" -> its own outcomes (a Counter)
    findings: list[Finding] = field(default_factory=list)
    worst: dict = field(default_factory=dict)  # "target=device" -> largest relative error among the right ones
    refusals: Counter = field(default_factory=Counter)  # each refusal's first line -> how often
    seconds: float = 0.0

    def summary(self) -> str:
        counts = ", ".join(f"{k} {self.outcomes[k]}" for k in ("ok", "refused", "wrong", "error"))
        worst = ", ".join(f"{pair} {err:.1e}" for pair, err in self.worst.items())
        lines = [f"{self.models} models in {self.seconds:.0f} s: {counts}; largest error {worst or '-'}"]
        lines += [f"  refused {n}x: {why}" for why, n in self.refusals.most_common(3)]
        return "\n".join(lines)

    def count(self, pair: str, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.by_pair.setdefault(pair, Counter())[outcome] += 1

    def refused(self, pair: str, why: str) -> None:
        """Counts a refusal under its message's first line (its hint and "and 2 more ops" left out)."""
        self.count(pair, "refused")
        self.refusals[why.splitlines()[0].split(" (and ")[0][:300]] += 1  # "(and 2 more ops)" apart


# -- the ops a graph is made of: each builder gets (rng, shape, new_param) and returns (name, fn) or None,
# fn(module, values) -> tensor; new_param(tensor) registers a weight and gives its index

def _torch():
    import torch
    import torch.nn.functional as F
    return torch, F


def _unary(r, s, p):
    torch, F = _torch()
    table = {
        "relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu, "silu": F.silu,
        "gelu(tanh)": lambda x: F.gelu(x, approximate="tanh"),
        "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "relu6": F.relu6, "elu": F.elu,
        "leaky_relu": lambda x: F.leaky_relu(x, 0.1), "softplus": F.softplus, "erf": torch.erf, "abs": torch.abs,
        "neg": torch.neg, "sin": torch.sin, "cos": torch.cos, "square": lambda x: x * x,
        "exp": lambda x: torch.exp(x.clamp(-5, 5)), "log": lambda x: torch.log(x.abs() + 1),
        "sqrt": lambda x: torch.sqrt(x.abs()), "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5),
        "reciprocal": lambda x: 1.0 / (x.abs() + 1), "clamp": lambda x: x.clamp(-0.5, 0.7)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _binary(r, s, p):
    torch, _ = _torch()
    table = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
             "minimum": torch.minimum, "div": lambda a, b: a / (b.abs() + 1)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, j, f=table[name]: f(v[i], v[j])  # j: a value of the same shape (see _grow)


def _broadcast(r, s, p):
    torch, _ = _torch()
    shape = [d if r.random() < 0.5 else 1 for d in s][r.randrange(len(s)) if r.random() < 0.3 else 0:]
    w = p(torch.randn(*shape))
    name = r.choice(["add", "mul", "sub"])
    return f"{name} (broadcast {shape})", lambda m, v, i: getattr(torch, name)(v[i], m.weights[w])


def _reduce(r, s, p):
    torch, _ = _torch()
    d, keep, name = r.randrange(len(s)), r.random() < 0.5, r.choice(["sum", "mean", "logsumexp"])
    return f"{name}(dim={d}, keepdim={keep})", lambda m, v, i: getattr(torch, name)(v[i], dim=d, keepdim=keep)


def _extremum(r, s, p):
    """max and min over one dim (their values) or several (amax, amin): each result is one of the operand's."""
    torch, _ = _torch()
    keep = r.random() < 0.5
    if r.random() < 0.5:
        d, name = r.randrange(len(s)), r.choice(["max", "min"])
        return (f"{name}(dim={d}, keepdim={keep}).values",
                lambda m, v, i: getattr(torch, name)(v[i], dim=d, keepdim=keep).values)
    dims, name = sorted(r.sample(range(len(s)), r.randint(1, len(s)))), r.choice(["amax", "amin"])
    return f"{name}(dim={dims}, keepdim={keep})", lambda m, v, i: getattr(torch, name)(v[i], dim=dims, keepdim=keep)


def _cumsum(r, s, p):
    torch, _ = _torch()
    d = r.randrange(len(s))
    return f"cumsum(dim={d})", lambda m, v, i: torch.cumsum(v[i], dim=d)


def _weight(m, k):
    """The model's weight `k`, or None where the builder drew none."""
    return None if k is None else m.weights[k]


def _linear(r, s, p):
    torch, F = _torch()
    out = r.randint(1, 40)
    w, b = p(torch.randn(out, s[-1]) * s[-1] ** -0.5), (p(torch.randn(out)) if r.random() < 0.7 else None)
    return f"linear({s[-1]}->{out})", lambda m, v, i: F.linear(v[i], m.weights[w], _weight(m, b))


def _conv_args(r, s):
    """(out channels, kernel, stride, padding, dilation, groups) that fit an NCHW shape `s`, or None."""
    c, k = s[1], r.choice([1, 3, 5])
    stride, pad, dil, groups = r.choice([1, 1, 2]), r.randint(0, k // 2), r.choice([1, 1, 2]), r.choice([1, 1, s[1]])
    if min(s[2], s[3]) + 2 * pad - dil * (k - 1) - 1 < 0:
        return None
    return (c if groups == c else r.randint(1, 16)), k, stride, pad, dil, groups


def _conv(r, s, p):
    torch, F = _torch()
    args = len(s) == 4 and _conv_args(r, s)
    if not args:
        return None
    out, k, stride, pad, dil, groups = args
    w = p(torch.randn(out, s[1] // groups, k, k) * (s[1] // groups * k * k) ** -0.5)
    b = p(torch.randn(out)) if r.random() < 0.5 else None
    return (f"conv2d({s[1]}->{out}, k{k}, s{stride}, p{pad}, d{dil}, g{groups})",
            lambda m, v, i: F.conv2d(v[i], m.weights[w], _weight(m, b), stride, pad, dil, groups))


def _conv_transpose(r, s, p):
    torch, F = _torch()
    if len(s) != 4:
        return None
    c, k, stride, dil = s[1], r.choice([1, 2, 3, 4]), r.choice([1, 2, 3]), r.choice([1, 1, 2])
    groups = r.choice([g for g in (1, 1, 2, 3, c) if c % g == 0])
    out, pad = groups * r.randint(1, max(1, 12 // groups)), r.randint(0, dil * (k - 1))
    out_pad = r.randrange(max(stride, dil))  # torch takes output_padding below the stride or the dilation
    w = p(torch.randn(c, out // groups, k, k) * (c // groups * k * k) ** -0.5)
    b = p(torch.randn(out)) if r.random() < 0.5 else None
    return (f"conv_transpose2d({c}->{out}, k{k}, s{stride}, p{pad}, op{out_pad}, d{dil}, g{groups})",
            lambda m, v, i: F.conv_transpose2d(v[i], m.weights[w], _weight(m, b), stride, pad, out_pad, groups, dil))


def _pixel_shuffle(r, s, p):
    _, F = _torch()
    f = r.choice([2, 3])
    if len(s) != 4:
        return None
    if s[1] % (f * f) == 0 and (r.random() < 0.5 or s[2] % f or s[3] % f):
        return f"pixel_shuffle({f})", lambda m, v, i: F.pixel_shuffle(v[i], f)
    if s[2] % f == 0 and s[3] % f == 0:
        return f"pixel_unshuffle({f})", lambda m, v, i: F.pixel_unshuffle(v[i], f)
    return None


def _pool(r, s, p):
    _, F = _torch()
    k, stride, ceil = r.choice([2, 3]), r.choice([1, 2, 3]), r.random() < 0.3
    pad = r.randint(0, k // 2)
    if len(s) != 4 or min(s[2], s[3]) + 2 * pad < k:
        return None
    if r.random() < 0.5:
        return (f"max_pool2d(k{k}, s{stride}, p{pad}, ceil_mode={ceil})",
                lambda m, v, i: F.max_pool2d(v[i], k, stride, pad, ceil_mode=ceil))
    count_pad = r.random() < 0.5
    return (f"avg_pool2d(k{k}, s{stride}, p{pad}, ceil_mode={ceil}, count_include_pad={count_pad})",
            lambda m, v, i: F.avg_pool2d(v[i], k, stride, pad, ceil, count_pad))


def _adaptive_pool(r, s, p):
    _, F = _torch()
    if len(s) != 4:
        return None
    name = r.choice(["adaptive_avg_pool2d", "adaptive_max_pool2d"])
    size = 1 if r.random() < 0.3 else (r.randint(1, s[2]), r.randint(1, s[3]))  # sizes that do not divide too
    return f"{name}({size})", lambda m, v, i: getattr(F, name)(v[i], size)


def _batch_norm(r, s, p):
    torch, F = _torch()
    if len(s) != 4:
        return None
    c = s[1]
    mean, var, w, b = p(torch.randn(c) * 0.3), p(torch.rand(c) + 0.5), p(torch.randn(c)), p(torch.randn(c))
    return "batch_norm", lambda m, v, i: F.batch_norm(v[i], m.weights[mean], m.weights[var], m.weights[w],
                                                      m.weights[b], False, 0.1, 1e-5)


def _softmax(r, s, p):
    _, F = _torch()
    d, f = r.randrange(len(s)), r.choice([F.softmax, F.log_softmax])
    return f"{f.__name__}(dim={d})", lambda m, v, i: f(v[i], dim=d)


def _norm(r, s, p):
    """Layer norm over the last one or two dims, group and instance norm over (N, C, ...); affine or not."""
    torch, F = _torch()
    name, affine = r.choice(["layer_norm", "group_norm", "instance_norm"]), r.random() < 0.6
    if name == "layer_norm":
        shape = tuple(s[-r.randint(1, min(2, len(s))):])
        norm, what = (lambda x, w, b: F.layer_norm(x, shape, w, b)), f"{shape}, "
    elif name == "group_norm" and len(s) >= 2:
        shape, groups = (s[1],), r.choice([g for g in range(1, s[1] + 1) if s[1] % g == 0])
        norm, what = (lambda x, w, b: F.group_norm(x, groups, w, b)), f"{groups} groups, "
    elif name == "instance_norm" and len(s) >= 3:
        shape, norm, what = (s[1],), (lambda x, w, b: F.instance_norm(x, weight=w, bias=b)), ""
    else:
        return None
    w, b = (p(torch.randn(*shape)), p(torch.randn(*shape))) if affine else (None, None)
    return f"{name}({what}affine={affine})", lambda m, v, i: norm(v[i], _weight(m, w), _weight(m, b))


def _permute(r, s, p):
    perm = list(range(len(s)))
    r.shuffle(perm)
    return f"permute{tuple(perm)}", lambda m, v, i: v[i].permute(*perm).contiguous()


def _reshape(r, s, p):
    """transpose(a, b).contiguous().reshape(...): two neighbours merged, or one dim split in two."""
    if len(s) < 2:
        return None
    a, b = r.sample(range(len(s)), 2)
    t = list(s)
    t[a], t[b] = t[b], t[a]
    splits = [(d, f) for d, n in enumerate(t) for f in (2, 3) if n % f == 0 and n > f] if len(t) < 5 else []
    if splits and (len(t) == 2 or r.random() < 0.5):
        d, f = r.choice(splits)
        new = t[:d] + [f, t[d] // f] + t[d + 1:]
    else:
        d = r.randrange(len(t) - 1)
        new = t[:d] + [t[d] * t[d + 1]] + t[d + 2:]
    return (f"transpose({a}, {b}).contiguous().reshape{tuple(new)}",
            lambda m, v, i: v[i].transpose(a, b).contiguous().reshape(new))


def _rearrange(r, s, p):
    """Ops that move values and make none: flip, roll, repeat, tril and triu."""
    torch, _ = _torch()
    d, dims = r.randrange(len(s)), sorted(r.sample(range(len(s)), r.randint(1, len(s))))
    shift, k = r.randint(-2 * s[d], 2 * s[d]), r.randint(-2, 2)
    reps = [r.choice([1, 1, 2, 3]) for _ in range(len(s) + r.randint(0, 1))]  # one more dim, at times
    table = {f"flip({dims})": lambda x: torch.flip(x, dims),
             f"roll({shift}, dim={d})": lambda x: torch.roll(x, shift, d),
             f"roll({shift}) (flattened)": lambda x: torch.roll(x, shift),
             f"repeat{tuple(reps)}": lambda x: x.repeat(*reps)}
    if len(s) >= 2:
        table |= {f"tril({k})": lambda x: torch.tril(x, k), f"triu({k})": lambda x: torch.triu(x, k)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _order(r, s, p):
    """sort and topk, their values only: which of two equal values comes first shows in the indices alone."""
    torch, _ = _torch()
    d, high = r.randrange(len(s)), r.random() < 0.5
    if r.random() < 0.5:
        k = r.randint(1, s[d])
        return (f"topk({k}, dim={d}, largest={high}).values",
                lambda m, v, i: torch.topk(v[i], k, dim=d, largest=high).values)
    return f"sort(dim={d}, descending={high}).values", lambda m, v, i: torch.sort(v[i], dim=d, descending=high).values


def _stack(r, s, p):
    torch, _ = _torch()
    d = r.randint(0, len(s))
    return f"stack(dim={d})", lambda m, v, i, j: torch.stack([v[i], v[j]], dim=d)


def _contract(r, s, p):
    """Batched products of two values of one shape: bmm (3-D values) or einsum (any rank from 2)."""
    torch, _ = _torch()
    table = {"einsum(...ij,...kj->...ik)": lambda x, y: torch.einsum("...ij,...kj->...ik", x, y),
             "einsum(...ji,...jk->...ik)": lambda x, y: torch.einsum("...ji,...jk->...ik", x, y),
             "einsum(...ij,...ij->...i)": lambda x, y: torch.einsum("...ij,...ij->...i", x, y)}
    if len(s) == 3:
        table |= {"bmm(x, y^T)": lambda x, y: torch.bmm(x, y.transpose(1, 2)),
                  "bmm(x^T, y)": lambda x, y: torch.bmm(x.transpose(1, 2), y)}
    if len(s) < 2:
        return None
    name = r.choice(sorted(table))
    return name, lambda m, v, i, j, f=table[name]: f(v[i], v[j])


def _flatten(r, s, p):
    return "flatten(1)", lambda m, v, i: v[i].flatten(1)


def _slice(r, s, p):
    if s[-1] < 3:
        return None
    start, step = r.randint(0, s[-1] - 2), r.choice([1, 2])
    return f"[..., {start}::{step}]", lambda m, v, i: v[i][..., start::step]


def _pad(r, s, p):
    _, F = _torch()
    pads = [r.randint(0, 2) for _ in range(4 if len(s) >= 2 else 2)]
    return f"pad{pads}", lambda m, v, i: F.pad(v[i], pads)


# thresholds that float16 holds exactly: with one it rounds (0.1), `x <= t` in float16 and in float64 differ at
# x = float16(t)
THRESHOLDS = (-0.5, 0.0, 0.25, 0.75)


def _select(r, s, p):
    """where and masked_fill on a mask computed from x, a value that float32 and float64 hold alike (see
    `EXACT`), so that no rounding moves an element across the threshold; y is any value of x's shape."""
    torch, _ = _torch()
    t, fill = r.choice(THRESHOLDS), r.choice([0.0, -1.5, float("-inf")])
    table = {f"where(x > {t}, x, y / 2)": lambda x, y: torch.where(x > t, x, y * 0.5),
             f"where(x <= {t}, y, {fill})": lambda x, y: torch.where(x <= t, y, fill),
             f"masked_fill(y, x > {t}, {fill})": lambda x, y: y.masked_fill(x > t, fill)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, j, f=table[name]: f(v[i], v[j])


def _concat(r, s, p):
    torch, _ = _torch()
    if r.random() < 0.5:
        return "cat(dim=-1)", lambda m, v, i, j: torch.cat([v[i], v[j]], dim=-1)
    return "cat(x, y, x, dim=-1)", lambda m, v, i, j: torch.cat([v[i], v[j], v[i]], dim=-1)


def _more_unary(r, s, p):
    """Unary ops with a drawn argument: an exponent, clamp's bounds (one may be missing), a slope, an alpha."""
    torch, F = _torch()
    exponent, slope, alpha = r.choice([0.5, 1.7, 2.0, 3.0]), r.choice([0.01, 0.3, 2.0]), r.choice([0.5, 1.0, 2.0])
    low, high = sorted(round(r.uniform(-1.5, 1.5), 2) for _ in range(2))
    bounds = r.choice([(low, high), (low, None), (None, high)])
    table = {f"pow(|x| + 0.1, {exponent})": lambda x: torch.pow(x.abs() + 0.1, exponent),
             f"clamp{bounds}": lambda x: torch.clamp(x, *bounds),
             f"leaky_relu({slope})": lambda x: F.leaky_relu(x, slope), f"elu(alpha={alpha})": lambda x: F.elu(x, alpha),
             "expm1": lambda x: torch.expm1(x.clamp(-3, 3)), "log1p": lambda x: torch.log1p(x.abs()),
             "hardtanh(-0.4, 0.6)": lambda x: F.hardtanh(x, -0.4, 0.6),
             "atan2(x, 0.5 - x)": lambda x: torch.atan2(x, 0.5 - x)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _discrete(r, s, p):
    """Ops whose result jumps (rounding, comparisons, argmax with ties): applied to a value that float32 and
    float64 hold alike (see `EXACT`), so that no rounding difference upstream can move a jump."""
    torch, F = _torch()
    d = r.randrange(len(s))
    table = {"floor(4x)": lambda x: torch.floor(x * 4), "ceil(4x)": lambda x: torch.ceil(x * 4),
             "round(floor(4x) / 2) (ties to even)": lambda x: torch.round(torch.floor(x * 4) / 2),
             "sign(round(x))": lambda x: torch.sign(torch.round(x)), "x > 0.3": lambda x: (x > 0.3).to(x.dtype),
             f"argmax(relu(x - 0.5), dim={d}) (ties: the first)":
                 lambda x: torch.argmax(F.relu(x - 0.5), dim=d).to(x.dtype),
             f"max(x, dim={d}).values": lambda x: torch.max(x, dim=d).values}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _index_or_mask(r, s, p):
    """Integer and bool results (argmax and argmin, comparisons, logic, counts, where on a mask, casts), on a value
    float32 and float64 hold alike (see `EXACT`) or on floor(4x), whose ties are many and exact: the first index
    must win. They are compared exactly, and end the graph."""
    torch, _ = _torch()
    d, keep, t = r.randrange(len(s)), r.random() < 0.5, r.choice(THRESHOLDS)

    def q(x):
        return torch.floor(x * 4)
    table = {f"argmax(floor(4x), dim={d}, keepdim={keep})": lambda x: torch.argmax(q(x), dim=d, keepdim=keep),
             f"argmin(floor(4x), dim={d}, keepdim={keep})": lambda x: torch.argmin(q(x), dim=d, keepdim=keep),
             f"max(floor(4x), dim={d}).indices": lambda x: torch.max(q(x), dim=d).indices,
             "argmax(x) (flattened)": lambda x: torch.argmax(x),
             f"x > {t} (bool)": lambda x: x > t, f"floor(4x) == {4 * t} (bool)": lambda x: q(x) == 4 * t,
             f"({t} < x) & (x <= 1) (bool)": lambda x: (t < x) & (x <= 1),
             f"(x < {t}) ^ (floor(4x) != 0) (bool)": lambda x: (x < t) ^ (q(x) != 0),
             f"any(x > {t}, dim={d}) (bool)": lambda x: torch.any(x > t, dim=d),
             f"sum(x > {t}, dim={d}) (i64)": lambda x: torch.sum(x > t, dim=d),
             f"where(x > {t}, floor(4x), -1).to(i64)": lambda x: torch.where(x > t, q(x), -1.0).to(torch.int64),
             "floor(4x).to(i32)": lambda x: q(x).to(torch.int32)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _gather(r, s, p):
    torch, F = _torch()
    d = r.randrange(len(s))
    index = p(torch.randint(0, s[d], (r.randint(1, 2 * s[d]),)))
    if len(s) == 2 and r.random() < 0.5:
        return f"embedding(table {s[0]}x{s[1]})", lambda m, v, i: F.embedding(m.weights[index], v[i])
    return f"index_select(dim={d})", lambda m, v, i: torch.index_select(v[i], d, m.weights[index])


def _statistics(r, s, p):
    """var, mean and sum over several dims."""
    torch, _ = _torch()
    dims, keep = sorted(r.sample(range(len(s)), r.randint(1, len(s)))), r.random() < 0.5
    if r.random() < 0.5:
        unbiased = r.random() < 0.5
        return (f"var(dim={dims}, unbiased={unbiased}, keepdim={keep})",
                lambda m, v, i: torch.var(v[i], dim=dims, unbiased=unbiased, keepdim=keep))
    name = r.choice(["mean", "sum"])
    return f"{name}(dim={dims}, keepdim={keep})", lambda m, v, i: getattr(torch, name)(v[i], dim=dims, keepdim=keep)


def _chunk(r, s, p):
    even = [d for d, n in enumerate(s) if n % 2 == 0]
    if not even:
        return None
    d = r.choice(even)
    return f"chunk(2, dim={d}): first * second", lambda m, v, i: (lambda a, b: a * b)(*v[i].chunk(2, dim=d))


def _expand(r, s, p):
    d = r.randrange(len(s) + 1)
    return f"unsqueeze({d}).expand(3)", lambda m, v, i: v[i].unsqueeze(d).expand(
        *[3 if k == d else -1 for k in range(len(s) + 1)]).contiguous()


def _attention(r, s, p):
    torch, F = _torch()
    if len(s) < 3:
        return None
    causal = r.random() < 0.5
    return (f"scaled_dot_product_attention(causal={causal})",
            lambda m, v, i: F.scaled_dot_product_attention(v[i], v[i] * 0.5, torch.tanh(v[i]), is_causal=causal))


def _conv1d(r, s, p):
    torch, F = _torch()
    if len(s) != 3:
        return None
    k, stride = r.choice([1, 3]), r.choice([1, 2])
    pad, out = r.randint(0, k // 2), r.randint(1, 16)
    w = p(torch.randn(out, s[1], k) * (s[1] * k) ** -0.5)
    return (f"conv1d({s[1]}->{out}, k{k}, s{stride}, p{pad})",
            lambda m, v, i: F.conv1d(v[i], m.weights[w], None, stride, pad))


def _interpolate(r, s, p):
    _, F = _torch()
    if len(s) != 4:
        return None
    mode = r.choice(["nearest", "bilinear"])
    size = {"scale_factor": r.choice([2, 0.5, 1.5])} if r.random() < 0.5 else \
        {"size": (r.randint(1, 2 * s[2]), r.randint(1, 2 * s[3]))}
    extra = {"align_corners": r.random() < 0.5} if mode == "bilinear" else {}
    return f"interpolate({mode}, {size}, {extra})", lambda m, v, i: F.interpolate(v[i], mode=mode, **size, **extra)


def _size_as_data(r, s, p):
    """A size used as data: x scaled by one of its sizes, or a sum divided by its count (a mean written by hand).
    With `--dynamic` the first size is known only at run time, and the kernels compute it."""
    d, keep = r.randrange(len(s)), r.random() < 0.5
    table = {f"x * x.shape[{d}] / 8": lambda x: x * x.shape[d] * 0.125,
             f"sum(dim={d}, keepdim={keep}) / x.shape[{d}]": lambda x: x.sum(d, keepdim=keep) / x.shape[d]}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _scatter(r, s, p):
    """Writes into x along one dim past the first (the batch, which `--dynamic` leaves open), at drawn positions
    (repeated ones too, where the writes add or take a max): index_add, scatter_add, scatter_reduce (amax), index_put
    with accumulate, and index_copy at distinct ones. A scatter's index covers the whole batch, as its rows are
    one drawn row expanded."""
    torch, _ = _torch()
    if len(s) < 2:  # no dim past the batch to write along
        return None
    d = r.randrange(1, len(s))
    k = r.randint(1, s[d])
    if math.prod(s) * k > 2_000_000:  # each position compares every update: keep vmvx's arrays small
        return None
    rows = p(torch.randint(0, s[d], (k,)))
    distinct = p(torch.randperm(s[d])[:k])
    shape = [1, *s[1:]]
    shape[d] = k
    spots = p(torch.randint(0, s[d], shape))

    def source(v):
        return v.narrow(d, 0, k) * 0.5 + 1

    def index(m, x):
        return m.weights[spots].expand(x.shape[0], *shape[1:])

    table = {f"index_add(dim={d}, {k} rows)": lambda m, x: x.index_add(d, m.weights[rows], source(x)),
             f"index_copy(dim={d}, {k} distinct rows)": lambda m, x: x.index_copy(d, m.weights[distinct], source(x)),
             f"scatter_add(dim={d})": lambda m, x: x.scatter_add(d, index(m, x), source(x)),
             f"scatter_reduce(dim={d}, amax, include_self=False)":
                 lambda m, x: x.scatter_reduce(d, index(m, x), source(x), "amax", include_self=False),
             f"index_put(x[:, ..., rows] += v, dim={d})":
                 lambda m, x: torch.ops.aten.index_put(x, [None] * d + [m.weights[rows]], source(x), True)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(m, v[i])


def _grid_sample(r, s, p):
    """grid_sample (bilinear or bicubic; nearest would jump where float32 and float64 round a position apart) at
    a drawn grid, every padding, past the edges too."""
    torch, F = _torch()
    if len(s) != 4:
        return None
    mode, padding = r.choice(["bilinear", "bicubic"]), r.choice(["zeros", "border", "reflection"])
    align = r.random() < 0.5
    grid = p(torch.rand(1, r.randint(1, 2 * s[2]), r.randint(1, 2 * s[3]), 2) * 2.4 - 1.2)
    return (f"grid_sample({mode}, {padding}, align_corners={align})",
            lambda m, v, i: F.grid_sample(v[i], m.weights[grid].expand(v[i].shape[0], -1, -1, -1), mode, padding,
                                          align))


# name -> (builder, what it takes: None (any value), "same" (a second value of its shape), "rows" (a second value
# alike in all but the last dim), "exact" (a value of `EXACT`) or "mask" (a value of `EXACT`, and a second value
# of its shape))
GRAPH_OPS: dict[str, tuple[Callable, str | None]] = {
    "unary": (_unary, None), "binary": (_binary, "same"), "broadcast": (_broadcast, None), "reduce": (_reduce, None),
    "extremum": (_extremum, None), "cumsum": (_cumsum, None), "linear": (_linear, None), "conv2d": (_conv, None),
    "conv_transpose2d": (_conv_transpose, None), "pixel_shuffle": (_pixel_shuffle, None), "pool": (_pool, None),
    "adaptive_pool": (_adaptive_pool, None), "batch_norm": (_batch_norm, None), "softmax": (_softmax, None),
    "norm": (_norm, None),
    "permute": (_permute, None), "reshape": (_reshape, None), "rearrange": (_rearrange, None),
    "order": (_order, None), "stack": (_stack, "same"), "contract": (_contract, "same"), "flatten": (_flatten, None),
    "slice": (_slice, None), "pad": (_pad, None), "select": (_select, "mask"), "concat": (_concat, "rows"),
    "more_unary": (_more_unary, None), "discrete": (_discrete, "exact"), "index_or_mask": (_index_or_mask, "exact"),
    "gather": (_gather, None), "statistics": (_statistics, None), "chunk": (_chunk, None), "expand": (_expand, None),
    "attention": (_attention, None), "conv1d": (_conv1d, None), "interpolate": (_interpolate, None),
    "size_as_data": (_size_as_data, None), "scatter": (_scatter, None), "grid_sample": (_grid_sample, None),
}
# the ops whose result float32 and float64 (and float16) hold alike when their operands are such values: they
# copy, move, drop or pick values (or, `discrete`, make small integers) and round nothing. The model's input is
# such a value; ops whose result jumps (`discrete`, `index_or_mask`, `select`'s mask) take only these.
EXACT = {"extremum", "pixel_shuffle", "permute", "reshape", "rearrange", "order", "stack", "flatten", "slice", "pad",
         "concat", "discrete", "gather", "expand"}
MAX_ELEMENTS = 200_000  # per value, so that a graph stays quick on the slowest CPU target


def _model(steps, weights):
    """A torch module (in eval mode) that applies its steps in turn, each to earlier values; the last value is
    the output. The class is made here because torch is imported only when a model is."""
    torch, _ = _torch()

    class RandomModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.steps = steps
            self.weights = torch.nn.ParameterList([torch.nn.Parameter(w, requires_grad=False) for w in weights])

        def forward(self, *inputs):
            values = list(inputs)
            for _, fn, args in self.steps:
                values.append(fn(self, values, *args))
            return values[-1]

    return RandomModel().eval()


def _graph(r: random.Random, max_size: int, dtype: str):
    torch, _ = _torch()
    return _chain(r, GRAPH_OPS, EXACT, torch.randn(*_graph_shape(r, max_size)))


def _graph_shape(r: random.Random, max_size: int) -> list[int]:
    rank = r.choice([2, 3, 4, 4])
    if rank == 4:
        return [r.randint(1, 3), r.randint(1, 12), r.randint(3, 15), r.randint(3, 15)]
    return [r.randint(1, 4)] + [r.randint(1, min(17, max_size)) for _ in range(rank - 1)]


def _chain(r: random.Random, ops: dict, exact_ops, x, draws=None):
    """(steps, weights, inputs): 2-7 ops of `ops` drawn in turn (from `draws`, where a name may repeat to weigh it
    more), each on an earlier value (`x` first), until a bool result, or for a float graph an integer one, ends
    the chain."""
    torch, _ = _torch()
    inputs, weights, steps, shapes, exact = [x], [], [], [tuple(x.shape)], [True]

    def param(t):
        weights.append(t)
        return len(weights) - 1

    goal = r.randint(2, 7)
    for _ in range(200):
        if len(steps) == goal:
            break
        name = r.choice(draws or sorted(ops))
        build, second = ops[name]
        i = r.choice([k for k, e in enumerate(exact) if e]) if second in ("exact", "mask") else r.randrange(len(shapes))
        if not shapes[i]:  # a scalar (a reduction of every axis) feeds no further op
            continue
        before = len(weights)
        built = build(r, shapes[i], param)
        if built is None:
            continue
        partners = [j for j, t in enumerate(shapes)
                    if (t[:-1] == shapes[i][:-1] if second == "rows" else t == shapes[i])]
        args = (i, r.choice(partners)) if second in ("same", "rows", "mask") else (i,)
        step = (built[0], built[1], args)
        try:
            with torch.no_grad():
                out = _model(steps + [step], weights)(*inputs)
        except (RuntimeError, ValueError, IndexError, TypeError):  # torch refuses the shapes or types: draw again
            del weights[before:]
            continue
        if not 0 < out.numel() <= MAX_ELEMENTS:
            del weights[before:]
            continue
        steps.append(step)
        shapes.append(tuple(out.shape))
        exact.append(name in exact_ops and all(exact[k] for k in args))
        if out.dtype == torch.bool or (x.dtype.is_floating_point and not out.dtype.is_floating_point):
            break  # an index or a mask is a float graph's output; a mask, an integer graph's
    return steps, weights, inputs


def _size(r: random.Random, limit: int) -> int:
    """Ragged or tile-aligned (a multiple of 64), small or near `limit`."""
    if r.random() < 0.4 and limit >= 64:
        return 64 * r.randint(1, limit // 64)
    return r.randint(1, limit) if r.random() < 0.5 else r.randint(max(1, limit // 2), limit)


def _gemm(r: random.Random, max_size: int, dtype: str):
    torch, F = _torch()
    kind = r.choice(["matmul", "linear", "bmm", "conv2d"])
    weights = []
    if kind == "conv2d":
        c, o, hw = _size(r, min(max_size, 256)), _size(r, min(max_size, 256)), r.randint(3, 28)
        x, k = torch.randn(r.randint(1, 2), c, hw, hw), r.choice([1, 3])
        weights = [torch.randn(o, c, k, k) * (c * k * k) ** -0.5]
        return [(f"conv2d({c}->{o}, k{k}, {hw}x{hw})",
                 lambda m, v, i: F.conv2d(v[i], m.weights[0], padding=k // 2), (0,))], weights, [x]
    m_, n, k = _size(r, max_size), _size(r, max_size), _size(r, max_size)
    if kind == "bmm":
        b = r.randint(2, 4)
        x, weights = torch.randn(b, m_, k), [torch.randn(b, k, n) * k ** -0.5]
        return [(f"bmm({b}x{m_}x{k} @ {k}x{n})", lambda mod, v, i: torch.bmm(v[i], mod.weights[0]), (0,))], weights, [x]
    x = torch.randn(m_, k)
    if kind == "matmul":
        weights = [torch.randn(k, n) * k ** -0.5]
        return [(f"matmul({m_}x{k} @ {k}x{n})",
                 lambda mod, v, i: torch.matmul(v[i], mod.weights[0]), (0,))], weights, [x]
    weights = [torch.randn(n, k) * k ** -0.5, torch.randn(n)]
    epilogue = r.choice(["", "relu", "gelu"])
    act = {"": lambda t: t, "relu": F.relu, "gelu": F.gelu}[epilogue]
    return ([(f"linear({m_}x{k} -> {n}){' + ' + epilogue if epilogue else ''}",
              lambda mod, v, i: act(F.linear(v[i], mod.weights[0], mod.weights[1])), (0,))], weights, [x])


# -- the integer family: chains of integer ops on an integer input, compared exactly with torch on the CPU

# the input's values: every value of the narrow types (so that arithmetic wraps, as in torch), small ones else
INT_RANGES = {"i8": (-128, 127), "ui8": (0, 255), "i16": (-3000, 3000), "i32": (-1000, 1000), "i64": (-1000, 1000)}


def _int_scalar(r, s, p):
    """x op c for a constant c: floor and truncating division and both remainders (divisors of both signs), shifts,
    masks, clamps, and round trips through f32 (a cast truncates; the values stay in x's type, since out of it
    torch's result depends on the CPU and ours saturates)."""
    torch, _ = _torch()
    c, k, mask = r.choice([2, 3, 5, 7, -2, -3, -7]), r.randint(0, 3), r.choice([0x0F, 0x5A, 0x7F])
    low, high = sorted(r.randint(-100, 100) for _ in range(2))
    table = {f"x // {c}": lambda x: x // c, f"remainder(x, {c})": lambda x: torch.remainder(x, c),
             f"fmod(x, {c})": lambda x: torch.fmod(x, c),
             f"div(x, {c}, rounding_mode=trunc)": lambda x: torch.div(x, c, rounding_mode="trunc"),
             f"x >> {k}": lambda x: x >> k, f"x << {k}": lambda x: x << k, f"x & {mask}": lambda x: x & mask,
             f"x | {mask}": lambda x: x | mask, f"x ^ {mask}": lambda x: x ^ mask, "~x": torch.bitwise_not,
             "abs": torch.abs, "neg": torch.neg, "sign": torch.sign, "x * x": lambda x: x * x,
             f"x * {c} + {k}": lambda x: x * c + k, f"clamp({low}, {high})": lambda x: x.clamp(low, high),
             "(x * 0.37).to(x.dtype)": lambda x: (x.float() * 0.37).to(x.dtype),
             f"round(x / {abs(c)}).to(x.dtype)": lambda x: torch.round(x.float() / abs(c)).to(x.dtype)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _nonzero(y):
    torch, _ = _torch()
    return torch.where(y == 0, torch.ones_like(y), y)


def _int_binary(r, s, p):
    """x op y for two integer values of one shape (their types promote as torch's do)."""
    torch, _ = _torch()
    table = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
             "minimum": torch.minimum, "x & y": torch.bitwise_and, "x | y": torch.bitwise_or,
             "x ^ y": torch.bitwise_xor, "x >> (y & 7)": lambda x, y: x >> (y & 7),
             "x << (y & 7)": lambda x, y: x << (y & 7), "x // y (0 -> 1)": lambda x, y: x // _nonzero(y),
             "remainder(x, y) (0 -> 1)": lambda x, y: torch.remainder(x, _nonzero(y)),
             "fmod(x, y) (0 -> 1)": lambda x, y: torch.fmod(x, _nonzero(y)),
             "where(x > y, x, y)": lambda x, y: torch.where(x > y, x, y),
             "x < y (bool)": lambda x, y: x < y, "x == y (bool)": lambda x, y: x == y,
             "(x != y) & (x > 0) (bool)": lambda x, y: (x != y) & (x > 0)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, j, f=table[name]: f(v[i], v[j])


def _int_cast(r, s, p):
    """A cast to another integer type (wrapping, as torch's), to f32 and back, or to bool."""
    torch, _ = _torch()
    to = r.choice(["int8", "uint8", "int16", "int32", "int64"])
    table = {f"to({to})": lambda x: x.to(getattr(torch, to)),
             "to(f32) * 0.5 to(x.dtype)": lambda x: (x.to(torch.float32) * 0.5).to(x.dtype),
             "to(bool)": lambda x: x.to(torch.bool)}
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


def _int_reduce(r, s, p):
    """Sums (in i64, as torch's, or in the input's type), cumulative sums, products of short rows, counts, argmax and
    argmin (ties: the first)."""
    torch, _ = _torch()
    d, keep = r.randrange(len(s)), r.random() < 0.5
    table = {f"sum(dim={d}, keepdim={keep})": lambda x: torch.sum(x, dim=d, keepdim=keep),
             f"sum(dim={d}, dtype=x.dtype)": lambda x: torch.sum(x, dim=d, dtype=x.dtype),
             f"cumsum(dim={d})": lambda x: torch.cumsum(x, dim=d),
             f"count_nonzero(dim={d})": lambda x: torch.count_nonzero(x, dim=d),
             f"argmax(dim={d}, keepdim={keep})": lambda x: torch.argmax(x, dim=d, keepdim=keep),
             f"argmin(dim={d})": lambda x: torch.argmin(x, dim=d)}
    if s[d] <= 4:
        table[f"prod(dim={d})"] = lambda x: torch.prod(x, dim=d)
    name = r.choice(sorted(table))
    return name, lambda m, v, i, f=table[name]: f(v[i])


# ops on integers; the ops that only move values come from the float graphs' table
INT_OPS = {"scalar": (_int_scalar, None), "binary": (_int_binary, "same"), "cast": (_int_cast, None),
           "reduce": (_int_reduce, None),
           **{name: GRAPH_OPS[name] for name in ("extremum", "permute", "reshape", "rearrange", "order", "stack",
                                                 "flatten", "slice", "pad", "concat", "gather", "expand", "chunk")}}
# arithmetic drawn about twice as often as moves
INT_DRAWS = sorted(INT_OPS) + 4 * ["scalar", "binary"] + 3 * ["cast", "reduce"]


def _int_graph(r: random.Random, max_size: int, dtype: str):
    torch, _ = _torch()
    low, high = INT_RANGES[dtype]
    x = torch.randint(low, high + 1, _graph_shape(r, max_size), dtype=_torch_dtype(dtype))
    return _chain(r, INT_OPS, INT_OPS, x, INT_DRAWS)


def _torch_dtype(name: str):
    torch, _ = _torch()
    return {"f16": torch.float16, "f32": torch.float32, "i8": torch.int8, "ui8": torch.uint8, "i16": torch.int16,
            "i32": torch.int32, "i64": torch.int64}[name]


FAMILIES = {"graph": _graph, "gemm": _gemm, "int": _int_graph}
FAMILY_DTYPES = {"graph": ("f32", "f16"), "gemm": ("f32", "f16"), "int": INT_DTYPES}  # the first: the default


def make_model(seed: int, family: str = "graph", dtype: str | None = None, max_size: int = 256,
               steps: int | None = None):
    """(model, inputs, the ops' names) for `seed`: the same on every run and machine. `dtype` defaults to the
    family's first (`FAMILY_DTYPES`); `steps` keeps only the model's first ops (to find where a finding starts)."""
    torch, _ = _torch()
    dtype = dtype or FAMILY_DTYPES[family][0]
    if dtype not in FAMILY_DTYPES[family]:
        raise ValueError(f"the {family} family takes {', '.join(FAMILY_DTYPES[family])}, not {dtype}")
    r = random.Random(f"{family}:{seed}")
    with torch.random.fork_rng():  # the caller's random state is left as it was
        torch.manual_seed(r.randrange(1 << 31))
        chain, weights, inputs = FAMILIES[family](r, max_size, dtype)
    chain = chain[:steps]
    model = _model(chain, weights)
    if dtype == "f16":
        model, inputs = model.half(), [x.half() for x in inputs]
    return model, tuple(inputs), [name for name, _, _ in chain]


def bisect(finding: Finding, family: str, dtype: str, max_size: int = 256) -> tuple[int, Finding | None]:
    """(n, what) for the shortest first n ops of the finding's model that are already wrong on its pair: its
    n-th op is where the finding starts. (len(ops), the finding) when every shorter model is right."""
    pair = [(finding.target, finding.device)]
    for n in range(1, len(finding.ops)):
        report = check([finding.seed], pair, family, dtype, max_size, steps=n, importer=finding.importer,
                       dynamic=finding.dynamic)
        if report.findings:
            return n, report.findings[0]
    return len(finding.ops), finding


def _compare(out, expected) -> tuple[float, str]:
    """(error, what it is). A float result's error is relative_error over the finite elements. It is inf where
    the shapes differ, where NaN or an infinity of the result is not the reference's (a NaN there is right when
    float64 has it too, as var of one element), and for an integer or bool result (an index, a mask: nothing to
    round) where its dtype is not the reference's or any element differs."""
    out, expected = np.asarray(out), np.asarray(expected)
    if out.shape != expected.shape:
        return float("inf"), f"shape {out.shape}, expected {expected.shape}"
    if not out.dtype.kind == expected.dtype.kind == "f":
        if out.dtype != expected.dtype:
            return float("inf"), f"dtype {out.dtype}, expected {expected.dtype}"
        differ = out != expected
        if not differ.any():
            return 0.0, "equal"
        first = tuple(int(k) for k in np.argwhere(differ)[0])
        return float("inf"), (f"{differ.sum()} of {differ.size} elements differ, the first at {first}: "
                               f"{out[first]}, expected {expected[first]}")
    out, expected = out.astype(np.float64), expected.astype(np.float64)
    finite = np.isfinite(out) & np.isfinite(expected)
    if not np.array_equal(out[~finite], expected[~finite], equal_nan=True):
        return float("inf"), "NaN or an infinity where float64 has none, or the other way"
    error = relative_error(out[finite], expected[finite], floor=NOISE_FLOOR) if finite.any() else 0.0
    return error, f"relative error {error:.3g}"


DYNAMIC_MAX = 32  # the batch's upper bound when --dynamic exports it as a symbol (or the largest size run, if more)


def dynamic_sizes(n: int) -> list[int]:
    """The batch sizes a dynamic model runs at: 1 (a schedule that spreads the batch), its own, and a larger one."""
    return sorted({1, n, n + 3})


def _resized(x, n: int, seed: int, dtype: str):
    """A new input like `x` (its type and values' distribution) with a first dimension of `n`, seeded."""
    torch, _ = _torch()
    g = torch.Generator().manual_seed(seed * 1000 + n)
    shape = (n, *x.shape[1:])
    if dtype in INT_RANGES:
        low, high = INT_RANGES[dtype]
        return torch.randint(low, high + 1, shape, dtype=x.dtype, generator=g)
    return torch.randn(shape, generator=g).to(x.dtype)


def _reference(model, inputs, family: str) -> np.ndarray:
    """The model's answer in float64 (the `int` family: torch's own, which has nothing to round)."""
    import warnings

    torch, _ = _torch()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own, from copying a module that export has seen
        if family == "int":
            return model(*inputs).numpy()
        return copy.deepcopy(model).double()(*[x.double() for x in inputs]).numpy()


def _cases(model, inputs, family: str, dtype: str, seed: int, dynamic: bool):
    """(example inputs to export with, [(inputs, expected), ...]): the model's own inputs alone, or with `dynamic`
    each of `dynamic_sizes` where torch itself can run it (a gather's indices may not fit a smaller batch)."""
    if not dynamic:
        return inputs, [(inputs, _reference(model, inputs, family))]
    (x,) = inputs
    size = x.shape[0]
    runs = []
    for n in dynamic_sizes(size):
        xn = x if n == size else _resized(x, n, seed, dtype)
        try:
            runs.append(((xn,), _reference(model, (xn,), family)))
        except (RuntimeError, ValueError, IndexError, TypeError):  # torch refuses the model at this size
            continue
    example = inputs if size >= 2 else (_resized(x, 2, seed, dtype),)  # torch.export specializes a size of 1
    return example, runs


IMPORTERS = ("torch", "onnx")
ONNX_OPSET = 18


class _ExportError(Exception):
    """torch.onnx.export could not write the model (an op its TorchScript exporter lacks)."""


@contextlib.contextmanager
def _silent_stdout():
    """File descriptor 1 sent to /dev/null (C++ writes to it directly), so that --json's stdout stays JSON."""
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _import(model, example, importer: str, runs, limit: float, dynamic: bool):
    """The model as a retarget module, through torch.export or through an ONNX file that torch writes (from the
    `example` inputs; with `dynamic`, their first dimension a symbol). An ONNX file that onnxruntime does not
    compute as torch does at each of `runs` (the exporter's own liberties: `x >> k` as a division, an int32 cumsum,
    a batch baked into a reshape) is an `_ExportError`, not a finding of ours."""
    import tempfile
    from pathlib import Path

    from retarget.compiler import import_model

    if importer == "torch":
        if not dynamic:
            return import_model(model, example_inputs=example)
        torch, _ = _torch()
        batch = torch.export.Dim("batch", min=1, max=max(DYNAMIC_MAX, *(xs[0].shape[0] for xs, _ in runs)))
        return import_model(model, example_inputs=example, dynamic_shapes={"inputs": ({0: batch},)})
    import onnxruntime

    from retarget.bench.peers import export_onnx

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        try:
            with _silent_stdout():  # it prints its graph when it fails, from C++
                export_onnx(model, example, path, opset=ONNX_OPSET,
                            dynamic_axes={"input_0": {0: "batch"}} if dynamic else None)
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            theirs = [session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})[0]
                      for inputs, _ in runs]
        except Exception as e:  # noqa: BLE001 - torch's exporter raises many kinds
            raise _ExportError(str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__) from e
        for out, (_, expected) in zip(theirs, runs):
            error, what = _compare(out, expected)
            if error > limit:
                raise _ExportError(f"onnxruntime computes the exported model differently from torch ({what})")
        return import_model(str(path))


def check(seeds, pairs: list[tuple[str, str]], family: str = "graph", dtype: str | None = None, max_size: int = 256,
          tolerance: float | None = None, progress: Callable[[str], None] | None = None,
          steps: int | None = None, importer: str = "torch", dynamic: bool = False) -> Report:
    """Each model of `seeds` (its first `steps` ops, or all), imported once (through torch.export, or with
    `importer="onnx"` through the ONNX file torch's exporter writes), compiled for each (target, device) pair and
    run there (with `dynamic`, once compiled and run at each of `dynamic_sizes`)."""
    import retarget

    dtype = dtype or FAMILY_DTYPES[family][0]
    limit = TOLERANCE[family, dtype] if tolerance is None else tolerance
    report, start = Report(), time.perf_counter()
    for seed in seeds:
        model, inputs, ops = make_model(seed, family, dtype, max_size, steps)
        example, runs = _cases(model, inputs, family, dtype, seed, dynamic)
        report.models += 1
        try:
            module = _import(model, example, importer, runs, limit, dynamic)
        except RetargetError as e:  # the importer refuses an op: every pair is refused
            for target, device in pairs:
                report.refused(f"{target}={device}", f"the importer: {e.message}")
            if progress:
                progress(f"seed {seed}: refused by the importer: {str(e).splitlines()[0]}")
            continue
        except _ExportError as e:  # torch's ONNX exporter cannot write the model, or not faithfully: not ours
            for target, device in pairs:
                report.refused(f"{target}={device}", f"torch.onnx.export: {e}")
            if progress:
                progress(f"seed {seed}: the exporter: {e}")
            continue
        except Exception:  # noqa: BLE001 - the importer crashed: a finding on every pair
            for target, device in pairs:
                report.count(f"{target}={device}", "error")
                report.findings.append(Finding(seed, target, device, "error", "the importer: " + traceback.format_exc(),
                                               ops, importer, dynamic))
            continue
        errors = {}  # "target=device" -> relative error, for `progress`
        for target, device in pairs:
            pair = f"{target}={device}"
            try:
                loaded = retarget.load(retarget.compile(module, target), device=device)
                outs = [np.asarray(loaded.main(*[x.numpy() for x in xs])) for xs, _ in runs]
            except RetargetError as e:
                report.refused(pair, f"{target}: {e.message}")
                if progress:
                    progress(f"seed {seed} on {target}={device}: refused: {str(e).splitlines()[0]}")
                continue
            except Exception:  # noqa: BLE001 - anything else is what we are looking for
                report.count(pair, "error")
                report.findings.append(Finding(seed, target, device, "error", traceback.format_exc(), ops, importer,
                                               dynamic))
                continue
            compared = [(*_compare(out, expected), xs[0].shape[0]) for out, (xs, expected) in zip(outs, runs)]
            error, what, size = max(compared, key=lambda c: c[0])
            what += f" at batch {size}" if dynamic else ""
            errors[pair] = error
            if error <= limit:
                report.count(pair, "ok")
                report.worst[pair] = max(report.worst.get(pair, 0.0), error)
            else:
                report.count(pair, "wrong")
                detail = what if error == float("inf") else f"{what} (tolerance {limit:g})"
                report.findings.append(Finding(seed, target, device, "wrong", detail, ops, importer, dynamic))
        if progress:
            progress(f"seed {seed}: {' -> '.join(ops)}" + "".join(f"\n  {p}: {e:.1e}" for p, e in errors.items()))
    report.seconds = time.perf_counter() - start
    return report
