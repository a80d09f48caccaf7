"""Run graph-IR functions op by op with the numpy kernels."""

from __future__ import annotations

import numpy as np

from ..ir.core import Function, TensorType
from ..ir.ops import HOST_OPS, SHAPE_ATTRS
from ..ir.symbolic import bind, evaluate_shape
from .kernels import KERNELS, evaluate


def run_function(fn: Function, inputs: list[np.ndarray], sizes: dict | None = None) -> list[np.ndarray]:
    """Evaluate `fn` on `inputs` (already of the argument types, symbolic dimensions at any size);
    returns its results. `sizes` gives the symbols' values; by default they are read off the inputs
    (which works when each symbol is some argument's dimension by itself). A host op binds the symbol of its
    data-dependent size (its `count`) to the size it produces."""
    env = dict(zip(fn.args, inputs))
    dynamic = bool(sizes) or any(not a.type.is_static for a in fn.args + [op.result for op in fn.ops])
    if dynamic:
        sizes = {**bind([a.type.shape for a in fn.args], [np.shape(x) for x in inputs]), **(sizes or {})}
    for op in fn.ops:
        operands = [env[v] for v in op.operands]
        if op.name in HOST_OPS:
            env[op.result] = out = np.asarray(KERNELS[op.name](op.attrs, *operands))
            sizes.update(bind([op.result.type.shape], [out.shape]))
            continue
        attrs, rtype = op.attrs, op.result.type
        if dynamic:  # this call's sizes in place of the symbols
            attrs = {k: evaluate_shape(v, sizes) if k in SHAPE_ATTRS and isinstance(v, tuple) else v
                     for k, v in attrs.items()}
            rtype = TensorType(evaluate_shape(rtype.shape, sizes), rtype.dtype)
        env[op.result] = evaluate(op.name, attrs, operands, rtype)  # every graph op has one result
    return [np.asarray(env[v]) for v in fn.returns]
