"""Calling functions with symbolic dimensions: one module, many input sizes.

A call reads the symbols' values off its inputs (`Layout.bind`: an InputError names an argument
whose size is outside its symbol's range, or that disagrees with another argument sharing the
symbol), then runs the function at that concrete shape. Each shape gets, once, a memory plan, an
arena and a recorded command buffer (on CUDA a graph; on Vulkan a reusable command buffer) whose
dispatches carry the kernels' scalars and workgroup counts for that shape; the last
`RETARGET_SHAPE_CACHE` (default 8) shapes stay recorded, least recently used first out.

Memory: with every symbol bounded (`--dim batch=1..64`) one arena, planned at the bounds, serves
every shape and is allocated at load. Otherwise each shape's plan needs its own size; arenas are
kept by size class (`dynamic_plan.size_class`), so shapes of similar size share one, and an arena
is freed when no cached shape uses it.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .errors import InputError, UnknownDeviceError
from .ir.core import TensorType
from .ir.symbolic import evaluate, evaluate_shape
from .passes.dynamic_plan import Layout, size_class
from .runtime import SINGLE, Function, FunctionSignature, _allocate, _tensor_type

DEFAULT_SHAPE_CACHE = 8


@dataclass
class _Shape:
    """One concrete shape of a function: its plan, arena, command buffers (by step; one step) and output types."""

    sizes: dict
    plan: dict
    arena: object
    arena_class: int | None
    command_buffers: dict
    output_types: list


class DynamicFunction(Function):
    """A function of a loaded module with symbolic dimensions (see the module docstring)."""

    def __init__(self, module, name: str, plan: dict):
        self.module, self.name, self.dynamic_plan = module, name, plan
        self.layout = Layout(plan)
        dtypes = [_tensor_type(i["type"]).dtype for i in plan["inputs"]]
        self.input_types = [TensorType(s, d) for s, d in zip(self.layout.input_shapes, dtypes)]
        out_dtypes = [_tensor_type(o["type"]).dtype for o in plan["outputs"]]
        self.symbolic_output_types = [TensorType(s, d) for s, d in zip(self.layout.output_shapes, out_dtypes)]
        self.output_types = self.symbolic_output_types
        self.signature = FunctionSignature(
            name,
            [(i["name"], t.shape, t.dtype.name) for i, t in zip(plan["inputs"], self.input_types)],
            [(t.shape, t.dtype.name) for t in self.output_types],
            {k: str(r) for k, r in self.layout.symbols.items()},
        )
        self._checks = self._input_checks(plan["inputs"])
        self.cache_size = max(1, int(os.environ.get("RETARGET_SHAPE_CACHE", DEFAULT_SHAPE_CACHE)))
        self._shapes: OrderedDict[tuple, _Shape] = OrderedDict()
        self._arenas: dict[int, object] = {}  # size class -> arena, when each shape is planned for itself
        self._lock = threading.Lock()
        # What a static Function holds, for the shape being recorded or run (`use`); a dynamic function
        # runs on one device, as one segment.
        self.arena, self.arenas, self.command_buffers = None, {}, {}
        self.steps, self.segments = [], [0]
        self._inputs, self._outputs = [], []
        self.plan = plan  # its static plan, once a shape is used; until then this one (for the inputs' names)
        self.sizes: dict = {}
        self.bounded_arena = None
        if self.layout.bounds is not None:
            self.bounded_arena = _allocate(module.device, plan["arena_bytes"],
                                           f"the buffers of function '{name}' (at the bounds of its symbols)")

    # -- calls ---------------------------------------------------------------------------------------
    def _check_shape(self, a, t, where: str) -> None:
        """Sizes are checked together, when the symbols are bound (`_select`)."""

    def _select(self, arrays) -> None:
        names = [i["name"] for i in self.dynamic_plan["inputs"]]
        self.use(self.layout.bind([a.shape for a in arrays], names, self.name))

    def use(self, sizes: dict) -> _Shape:
        """Make the shape of `sizes` current (planned and recorded on first use): `plan`, `arena`,
        `command_buffer` and `output_types` are then its own, as a static function's are."""
        key = tuple(sizes[s] for s in sorted(self.layout.symbols))
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._prepare(sizes)
            self._shapes[key] = shape
            while len(self._shapes) > self.cache_size:
                self._evict(self._shapes.popitem(last=False)[1])
        else:
            self._shapes.move_to_end(key)
        self._install(shape.sizes, shape.plan, shape.arena)
        self.command_buffers, self.output_types = shape.command_buffers, shape.output_types
        return shape

    def _install(self, sizes: dict, plan: dict, arena) -> None:
        self.sizes, self.plan, self.arena, self.arenas = sizes, plan, arena, {SINGLE: arena}
        self.steps = [{"op": "run", "placement": SINGLE, "program": plan["program"]}]
        self._inputs = [[(SINGLE, i["slot"])] for i in plan["inputs"]]
        self._outputs = [(SINGLE, o["slot"]) for o in plan["outputs"]]

    def _prepare(self, sizes: dict) -> _Shape:
        plan = self.layout.plan_for(sizes)
        arena, arena_class = self.bounded_arena, None
        if arena is None:
            arena_class = size_class(plan["arena_bytes"])
            arena = self._arenas.get(arena_class)
            if arena is None:
                arena = _allocate(self.module.device, arena_class, f"the buffers of function '{self.name}' at "
                                  + ", ".join(f"{k}={v}" for k, v in sizes.items()))
                self._arenas[arena_class] = arena
        self._install(sizes, plan, arena)
        outputs = [TensorType(evaluate_shape(t.shape, sizes), t.dtype) for t in self.symbolic_output_types]
        return _Shape(sizes, plan, arena, arena_class, {0: self.record()}, outputs)

    def _evict(self, shape: _Shape) -> None:
        for cb in shape.command_buffers.values():
            release = getattr(cb, "release", None)
            if release is not None:  # e.g. a CUDA graph
                release()
        if shape.arena_class is not None and not any(s.arena_class == shape.arena_class for s in self._shapes.values()):
            self._arenas.pop(shape.arena_class, None)

    def _only_segment(self) -> int:
        if not self.steps:
            raise InputError(f"function '{self.name}' has sizes known only at run time, and no shape yet",
                             hint="call it once first: its command buffer is recorded for that call's shape")
        return 0

    @property
    def command_buffer(self):
        """The recorded command buffer of the current shape (None before the first call)."""
        return self.command_buffers.get(0)

    @command_buffer.setter
    def command_buffer(self, cb) -> None:
        self._only_segment()
        self.command_buffers[0] = cb

    @property
    def cached_shapes(self) -> list[dict]:
        """The shapes recorded now, least recently used first."""
        return [s.sizes for s in self._shapes.values()]

    # -- recording ------------------------------------------------------------------------------------
    def _dispatch(self, cb, executable, cmd: dict, bindings) -> None:
        ep = executable.entry_points[cmd["entry"]]
        if not ep.scalars:
            cb.dispatch(executable, cmd["entry"], bindings)
            return
        if not _takes_sizes(cb):
            device = self.module.device.info.uri
            raise UnknownDeviceError(
                f"{device} cannot run '{self.name}', which has sizes known only at run time: its driver's "
                "command buffers take no sizes (CommandBuffer.dispatch has no `scalars`)",
                hint="recompile with --dim NAME=SIZE for each symbolic dimension to make the function static, "
                     "or use a device whose driver supports dynamic shapes")
        scalars = [self.sizes[s] for s in ep.scalars]
        count = tuple(evaluate(c, self.sizes) for c in ep.workgroup_count)
        cb.dispatch(executable, cmd["entry"], bindings, scalars=scalars, workgroup_count=count)


_TAKES_SIZES: dict[type, bool] = {}


def _takes_sizes(cb) -> bool:
    """Whether a command buffer's `dispatch` takes `scalars` (the optional contract, protocols.py); per class."""
    kind = type(cb)
    if kind not in _TAKES_SIZES:
        _TAKES_SIZES[kind] = "scalars" in inspect.signature(cb.dispatch).parameters
    return _TAKES_SIZES[kind]
