"""Run graph-IR functions op by op with the numpy kernels."""

from __future__ import annotations

import numpy as np

from ...ir.core import Function
from .kernels import evaluate


def run_function(fn: Function, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluate `fn` on `inputs` (already of the argument types); returns its results."""
    env = dict(zip(fn.args, inputs))
    for op in fn.ops:
        operands = [env[v] for v in op.operands]
        if len(op.results) == 1:
            env[op.results[0]] = evaluate(op.name, op.attrs, operands, op.results[0].type)
        else:  # no multi-result graph op yet; kept explicit so one cannot slip through
            raise NotImplementedError(f"multi-result op {op.name}")
    return [np.asarray(env[v]) for v in fn.returns]
