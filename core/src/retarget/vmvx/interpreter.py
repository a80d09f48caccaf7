"""Run graph-IR functions op by op with the numpy kernels."""

from __future__ import annotations

import numpy as np

from ..ir.core import Function
from .kernels import evaluate


def run_function(fn: Function, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluate `fn` on `inputs` (already of the argument types); returns its results."""
    env = dict(zip(fn.args, inputs))
    for op in fn.ops:
        operands = [env[v] for v in op.operands]
        env[op.result] = evaluate(op.name, op.attrs, operands, op.result.type)  # every graph op has one result
    return [np.asarray(env[v]) for v in fn.returns]
