"""Elementwise float math (sin, cos, tan, atan, exp, tanh, log, erf, a cast to int32; and neg, the cost of a call)
over 64K values, and a rotary embedding's tables computed at run time (cos and sin of positions times frequencies, as
torch.export of a Llama writes them), beside onnxruntime: what computing these functions in vector code, rather than
a libm call a lane, buys.

    .venv/bin/python benchmarks/cpu/onnx_math_ops.py [--target llvm-cpu --device local-task] [--repeats 50]
        [--json out.json] [--only TEXT]

The harness is onnx_sequence_ops.py's (`compare`): medians in ms of a call, interleaved with onnxruntime on 2 threads
and 1, and the ratio onnxruntime (2 threads) / ours (above 1: ours is faster).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from onnx_sequence_ops import compare, onnx_model  # noqa: E402


def models():
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)

    model = onnx_model

    out = []
    wide = rng.uniform(-100, 100, 65536).astype(np.float32)
    positive = rng.uniform(0.1, 10, 65536).astype(np.float32)
    for op, x in (("Neg", wide), ("Sin", wide), ("Cos", wide), ("Tan", wide), ("Atan", wide),
                  ("Exp", rng.uniform(-20, 20, 65536).astype(np.float32)),
                  ("Tanh", wide / 20), ("Log", positive), ("Erf", wide / 30)):
        out.append((f"{op} of 65536 floats", model([helper.make_node(op, ["x"], ["y"])], {"x": x}, ["y"], {}),
                    {"x": x}))
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)  # saturating vector code since 2026-12-07
    out.append(("Cast of 65536 floats to int32", model([cast], {"x": wide}, ["y"], {}), {"x": wide}))
    positions = np.arange(4096, dtype=np.float32).reshape(4096, 1)
    frequencies = (10000.0 ** (-np.arange(0, 128, 2) / 128)).astype(np.float32).reshape(1, 64)
    nodes = [helper.make_node("Mul", ["positions", "frequencies"], ["angles"]),
             helper.make_node("Concat", ["angles", "angles"], ["both"], axis=1),
             helper.make_node("Cos", ["both"], ["cos"]), helper.make_node("Sin", ["both"], ["sin"])]
    out.append(("rotary tables: cos, sin of 4096 positions x 64 frequencies",
                model(nodes, {"positions": positions}, ["cos", "sin"], {"frequencies": frequencies}),
                {"positions": positions}))
    return out


if __name__ == "__main__":
    compare(models(), __doc__.splitlines()[0])
