"""ONNX's recurrent and signal ops (composed by the importer: unrolled recurrences, DFTs as matrix products) beside
onnxruntime's own kernels, on one device, each model compiled once, checked against onnxruntime, then timed
interleaved with it so that noise hits both alike.

    .venv/bin/python benchmarks/cpu/onnx_sequence_ops.py [--target llvm-cpu --device local-task] [--repeats 50]
        [--json out.json] [--only TEXT]

Reported: compile time, medians in ms of a call (numpy in, numpy out; `retarget.bench.timing.interleave`'s
shuffled rounds) for ours, onnxruntime on 2 threads and on 1, and the ratio onnxruntime (2 threads) / ours (above
1: ours is faster).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def onnx_model(nodes, inputs: dict, outputs, constants: dict, opset: int = 17):
    """A graph of `nodes` with f32 `inputs` (name -> example array), `outputs` (names) and `constants` (name -> array,
    initializers), as onnxruntime 1.31 reads it."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what onnxruntime 1.31 reads
    return m


def models():
    """(name, onnx model, inputs): seeded, so every run times the same numbers."""
    from onnx import helper

    rng = np.random.default_rng(0)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    model = onnx_model

    def recurrent(op, gates, seq, batch, size, hidden, direction="bidirectional"):
        d = 2 if direction == "bidirectional" else 1
        x = normal(seq, batch, size)
        weights = {"W": normal(d, gates * hidden, size, scale=0.3), "R": normal(d, gates * hidden, hidden, scale=0.3),
                   "B": normal(d, 2 * gates * hidden, scale=0.1)}
        node = helper.make_node(op, ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=hidden, direction=direction)
        return model([node], {"x": x}, ["y", "y_h"], weights), {"x": x}

    out = []
    for op, gates in (("LSTM", 4), ("GRU", 3)):
        m, inputs = recurrent(op, gates, 64, 4, 32, 64)
        out.append((f"{op} bidirectional, 64 steps, batch 4, 32 -> 64", m, inputs))
    m, inputs = recurrent("LSTM", 4, 16, 1, 256, 256, "forward")
    out.append(("LSTM forward, 16 steps, batch 1, 256 -> 256", m, inputs))
    signal = normal(64, 1024, 1)
    out.append(("DFT of 64 real signals of 1024 points, onesided",
                model([helper.make_node("DFT", ["x"], ["y"], onesided=1, axis=1)], {"x": signal}, ["y"], {}),
                {"x": signal}))
    audio = normal(1, 16000, 1)
    window = (np.sin(np.arange(400) * np.pi / 400) ** 2).astype(np.float32)
    nodes = [helper.make_node("STFT", ["x", "step", "window", "length"], ["spectrum"], onesided=1),
             helper.make_node("ReduceSumSquare", ["spectrum", "last"], ["power"], keepdims=0),
             helper.make_node("MatMul", ["power", "mel"], ["mels"]),
             helper.make_node("Add", ["mels", "eps"], ["floored"]), helper.make_node("Log", ["floored"], ["y"])]
    mel = np.abs(normal(201, 80, scale=0.1))
    out.append(("log-mel spectrogram of 1 s at 16 kHz (STFT 400/160, 80 bands)",
                model(nodes, {"x": audio}, ["y"], {"step": np.array(160, np.int64), "window": window,
                                                   "length": np.array(400, np.int64), "last": np.array([-1]),
                                                   "mel": mel, "eps": np.array(1e-6, np.float32)}, opset=18),
                {"x": audio}))
    return out


def compare(cases, description: str) -> None:
    """Compile each (name, model, inputs) of `cases`, check it against onnxruntime, time it interleaved with
    onnxruntime on 2 threads and on 1, and print a row (and write --json): the command line of this script and of
    others that time other models the same way (`onnx_math_ops.py`)."""
    import onnxruntime as ort
    import retarget
    from retarget.bench.timing import Runner, interleave

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target", default="llvm-cpu")
    parser.add_argument("--device", default="local-task")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    rows = []
    for name, model, inputs in cases:
        if args.only not in name:
            continue
        start = time.perf_counter()
        ours = retarget.load(retarget.compile(model, args.target), device=args.device)
        compile_s = time.perf_counter() - start
        sessions = {}
        for threads in (2, 1):
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            sessions[threads] = ort.InferenceSession(model.SerializeToString(), options,
                                                     providers=["CPUExecutionProvider"])
        values = list(inputs.values())
        got = ours.main(*values)
        got = got[0] if isinstance(got, (list, tuple)) else got
        want = sessions[2].run(None, inputs)[0]
        error = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        runners = [Runner("ours", lambda ours=ours, values=values: ours.main(*values)),
                   *(Runner(f"ort{t}", lambda s=s, inputs=inputs: s.run(None, inputs)) for t, s in sessions.items())]
        row = {"model": name, "compile_s": round(compile_s, 2), "relative_error": error,
               **{m.runner.label: round(m.wall.median_ms, 3) for m in interleave(runners, args.repeats)}}
        row["ort2_over_ours"] = round(row["ort2"] / row["ours"], 2)
        rows.append(row)
        print(f"{name:<62} compile {compile_s:5.2f} s  ours {row['ours']:8.3f} ms  ORT {row['ort2']:8.3f} ms "
              f"(1 thread {row['ort1']:8.3f})  ORT/ours {row['ort2_over_ours']:5.2f}  error {error:.1e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "device": args.device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    compare(models(), __doc__.splitlines()[0])
