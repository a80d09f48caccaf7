"""Calling a function whose sizes depend on the data: its stages in order, with host ops between them.

`passes/stages.py` splits such a function at its host ops (NonZero, Unique, NonMaxSuppression). Each stage is a
function of the module, static or dynamic (`runtime_dynamic.py`), called with host arrays. A host op runs on the
host, with the numpy reference (`vmvx/kernels.py`, `ir/host_eval.py`), on the arrays the stages before it made,
and its result's size is its count's value. A stage whose counts are 0 runs the variant compiled for them.

Each stage ends with a wait, and what a later stage reads passes through the host: a call costs a round trip per
stage on top of the kernels. The values are numbered as in the manifest's `staged` entry (arguments first).
"""

from __future__ import annotations

import threading

import numpy as np

from . import dlpack
from .errors import InputError, ModuleFormatError
from .ir.core import TensorType
from .ir.symbolic import bind, dims_from_json, evaluate_shape
from .module_format import stage_functions
from .runtime import Function, FunctionSignature, _tensor_type
from .vmvx.kernels import KERNELS


class StagedFunction(Function):
    """A function of a loaded module with data-dependent sizes (see the module docstring)."""

    def __init__(self, module, name: str, chain: dict, stages: dict[str, Function]):
        self.module, self.name, self.chain = module, name, chain
        self.input_types = [_typed(i) for i in chain["inputs"]]
        self.output_types = self.symbolic_output_types = [_typed(o) for o in chain["outputs"]]
        self.signature = FunctionSignature(
            name,
            [(i["name"], t.shape, t.dtype.name) for i, t in zip(chain["inputs"], self.input_types)],
            [(t.shape, t.dtype.name) for t in self.output_types],
            dict(chain["symbols"]),
        )
        self._checks = self._input_checks(chain["inputs"])
        self.steps = chain["steps"]
        try:
            self.stages = {name: stages[name] for name in stage_functions(chain)}
        except KeyError as e:
            raise ModuleFormatError(f"function '{name}' runs stage {e}, which the module lacks",
                                    hint="recompile the module") from None
        self._results = {id(s): (dims_from_json(s["shape"]), _tensor_type(s["type"]).dtype.np_dtype)
                         for s in self.steps if s["op"] == "host"}  # each host op's result: shape and dtype
        self.segments = []  # no one command buffer replays it: benchmarks time whole calls
        self.plan = {"program": []}
        self._lock = threading.Lock()

    @property
    def command_buffer(self):
        raise InputError(f"function '{self.name}' has sizes that depend on the data: it runs as stages with host "
                         "work between them, not as one command buffer", hint="call it instead")

    def _check_shape(self, a, t, where: str) -> None:
        if len(a.shape) != t.rank:
            raise InputError(f"{where} must have rank {t.rank}, got shape {list(a.shape)}",
                             hint=f"the function expects {t}")
        try:
            expected = evaluate_shape(t.shape, bind([t.shape], [a.shape]))
        except KeyError:  # a size of symbols this input does not give alone: its stage checks it
            return
        if tuple(a.shape) != tuple(expected):
            raise InputError(f"{where} must have shape {list(expected)}, got {list(a.shape)}",
                             hint=f"the function expects {t}")

    def _borrow(self, arg, where: str):
        place = None if isinstance(arg, np.ndarray) else dlpack.device_of(arg)
        if place is not None and place[0] != dlpack.CPU:
            raise InputError(f"{where} is an array on {dlpack.device_name(place)}; function '{self.name}' has sizes "
                             "that depend on the data, and takes host arrays",
                             hint="copy it to the host first, e.g. x.cpu().numpy()")
        return None

    def __call__(self, *args, output: str | None = None):
        """Run the stages and host ops in order; returns numpy arrays (`output` may only be "host")."""
        if output not in (None, "host"):
            raise InputError(f"function '{self.name}' has sizes that depend on the data: its results are host "
                             "arrays", hint="leave out output=")
        arrays = self.check_inputs(args)
        values = dict(enumerate(arrays))
        sizes = bind([t.shape for t in self.input_types], [a.shape for a in arrays])  # then the counts, as they come
        with self._lock:
            for step in self.steps:
                if step["op"] == "host":
                    values[step["output"]] = self._host(step, [values[i] for i in step["inputs"]], sizes)
                    continue
                fn = self.stages[self._variant(step, sizes)]
                carriers = [np.zeros(sizes[s], np.int8) for s in step["sizes"]]  # inputs whose length is a size
                outs = fn(*[values[i] for i in step["inputs"]], *carriers, output="host")
                outs = outs if isinstance(outs, tuple) else (outs,)
                values.update(zip(step["outputs"], outs))
            outs = [np.asarray(values[i]) for i in self.chain["returns"]]
            # as a dynamic function's: the last call's concrete types (`symbolic_output_types` keeps the symbols)
            self.output_types = [TensorType(o.shape, t.dtype) for o, t in zip(outs, self.symbolic_output_types)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def summarize_steps(self) -> list[dict]:
        """Its steps, short (as `retarget run --list-functions` prints them): each stage's dispatches, each host op."""
        out = []
        for step in self.steps:
            if step["op"] == "host":
                out.append({"op": "host", "name": step["name"], "count": step["attrs"]["count"]})
                continue
            stage = self.stages[step["function"]]
            program = getattr(stage, "dynamic_plan", stage.plan)["program"]
            out.append({"op": "run", "function": step["function"],
                        "dispatches": [c["name"] for c in program if c["op"] == "dispatch"],
                        "variants": [v["function"] for v in step["variants"]]})
        return out

    def _host(self, step: dict, arrays: list, sizes: dict) -> np.ndarray:
        out = np.require(KERNELS[step["name"]](step["attrs"], *arrays), requirements="C")
        shape, dtype = self._results[id(step)]
        if isinstance(step["attrs"]["count"], str):
            sizes.update(bind([shape], [out.shape]))
        want = evaluate_shape(shape, sizes)
        if tuple(out.shape) != tuple(want):  # the model fixed this size, or tied it to another one
            raise InputError(f"{step['name']} in function '{self.name}' gave a result of shape {list(out.shape)}, "
                             f"where the model's shapes need {list(want)}", hint="check the inputs' values")
        return out if out.dtype == dtype else out.astype(dtype)

    def _variant(self, step: dict, sizes: dict) -> str:
        zeros = [c for c in step["counts"] if sizes[c] == 0]
        if not zeros:
            return step["function"]
        for v in step["variants"]:
            if sorted(v["zero"]) == sorted(zeros):
                return v["function"]
        raise InputError(f"function '{self.name}': {', '.join(zeros)} came out 0 together, and its stage "
                         f"'{step['function']}' reads too many such sizes to be compiled for each of them 0",
                         hint="an input that gives at least one element (one nonzero value, one box) avoids it")


def _typed(meta: dict) -> TensorType:
    return TensorType(dims_from_json(meta["shape"]), _tensor_type(meta["type"]).dtype)
