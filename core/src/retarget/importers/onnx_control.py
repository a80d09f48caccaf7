"""ONNX's control flow: If, Loop and Scan, resolved at import time (the graph IR has no control flow).

A subgraph (a branch, a loop body) is converted inline into the enclosing function by the enclosing converter,
node by node: its formal inputs are bound to the node's actual values and its initializers to their arrays, and it
reads the enclosing graph's tensors by name, as ONNX subgraphs do. The names it defines hide the enclosing ones of
the same names only while it is converted (shadowing); afterwards the enclosing ones are back. Its nodes fold one
by one where their inputs are known, so a loop's iteration number, and the shape checks that exporters put in
branches, become constants. Control flow nests (an If in a Loop's body).

- If: a condition known at import time converts only the taken branch (the other may not even be valid for these
  shapes). A condition known only at run time converts both branches and selects each output (`rt.select`, which
  does not carry a NaN of the branch not taken into the result); both branches must then give each output the
  same shape and element type.
- Loop: unrolled. The trip count M and the condition must be known at import time, and so must the condition the
  body computes at every iteration (a constant, or computed from the iteration number and other known values); M
  may be absent when that condition turns false. Carried values may change shape from one iteration to the next;
  scan outputs are stacked along a new axis 0 and must keep one shape and type.
- Scan (opset 9 and later: no batch axis): unrolled along the scan axis, whose length must be static, with each
  scan input's and output's axis and direction (`scan_input_axes`, `scan_input_directions`, `scan_output_axes`,
  `scan_output_directions`). Opset 8's (a batch axis first): one scan for each batch element, restacked.
- A Loop or Scan unrolls at most MAX_UNROLLED_NODES nodes (its iterations times the nodes of its body, nested
  subgraphs included) and is refused past that. Sequence and optional values are not supported: the graph IR
  holds tensors only.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError, RetargetError, UnsupportedOpError
from ..ir.core import TensorType, Value
from ..ir.dtypes import DTYPES, from_numpy
from . import compose as C
from .onnx import (
    _NO_FOLD,
    SHAPE_OPERANDS,
    _constant,
    _dtype,
    _is_symbolic,
    _sizes_array,
    _to_array,
    handles,
    handles_old,
)

# their subgraphs read enclosing tensors that are not among their inputs: never folded as a whole (their nodes
# fold one by one)
_NO_FOLD.update({"If", "Loop", "Scan"})
SHAPE_OPERANDS["Loop"] = (0, 1)  # the trip count and the condition decide how far it unrolls

MAX_UNROLLED_NODES = 1 << 16
_ABSENT = object()
_UNROLL_HINT = ("the graph IR has no loops, so the importer unrolls them: their trip counts and conditions must be "
                "known at import time; export with static sizes, or fix them with retarget.compile's input_shapes= "
                "or bind_inputs=")


# -- subgraphs --------------------------------------------------------------------------------------------------


def _restore(names: dict, name: str, value) -> None:
    names.pop(name, None)
    if value is not _ABSENT:
        names[name] = value


def _run_graph(n, graph, actuals: list, where: str) -> list:
    """`graph`'s outputs (graph Values or known arrays), its nodes converted into the enclosing function with its
    inputs bound to `actuals`; the enclosing tensors that its names shadow come back afterwards."""
    cv = n.cv
    if len(actuals) != len(graph.input):
        raise InputError(f"{where} declares {len(graph.input)} inputs, and the node gives it {len(actuals)}")
    if graph.sparse_initializer:
        raise UnsupportedOpError(f"{where} has a sparse initializer, which is not supported")
    names = {*(i.name for i in graph.input), *(t.name for t in graph.initializer),
             *(name for node in graph.node for name in node.output if name)}
    # the enclosing values and their materialized constants (a name bound again must not reuse the old constant)
    hidden = {name: (cv.env.pop(name, _ABSENT), cv.materialized.pop(name, _ABSENT)) for name in names}
    try:
        for t in graph.initializer:
            cv.env[t.name] = _to_array(t)
        for formal, actual in zip(graph.input, actuals, strict=True):
            cv.env[formal.name] = actual
        for index, node in enumerate(graph.node):
            cv._convert(index, node)
        for out in graph.output:
            if out.name not in cv.env:
                raise InputError(f"output '{out.name}' is never produced")
        return [cv.env[out.name] for out in graph.output]
    except RetargetError as e:
        e.message = f"{where}: {e.message}"
        e.args = (e.oneline(),)
        raise
    finally:
        for name, (value, constant) in hidden.items():
            _restore(cv.env, name, value)
            _restore(cv.materialized, name, constant)


def _node_count(graph) -> int:
    """Nodes of `graph` and of the subgraphs nested in it, each counted once."""
    from onnx import AttributeProto

    count = 0
    for node in graph.node:
        count += 1
        for a in node.attribute:
            nested = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
            count += sum(_node_count(g) for g in nested)
    return count


def _check_unroll(op: str, iterations: int, body_nodes: int, still_running: bool = False) -> None:
    if iterations * max(1, body_nodes) > MAX_UNROLLED_NODES:  # an empty body still costs an iteration
        count = f"more than {iterations - 1}" if still_running else str(iterations)
        raise UnsupportedOpError(f"{op} of {count} iterations unrolls to more than {MAX_UNROLLED_NODES} nodes "
                                 f"({body_nodes} in its body)", hint=_UNROLL_HINT)


# -- values: graph Values, or arrays known at import time --------------------------------------------------------


def _known(v) -> np.ndarray | None:
    """`v` as an array of numbers known at import time, else None (a Value, or sizes known only at run time)."""
    return v if isinstance(v, np.ndarray) and not _is_symbolic(v) else None


def _type_of(v) -> TensorType:
    if isinstance(v, Value):
        return v.type
    return TensorType(v.shape, DTYPES["i64"] if _is_symbolic(v) else from_numpy(v.dtype))


def _as_value(n, v) -> Value:
    if isinstance(v, Value):
        return v
    return C.sizes_value(n.b, v) if _is_symbolic(v) else _constant(n.b, v)


def _scalar_of(n, i: int, what: str):
    """Input `i`, a one-element tensor that the unrolling needs at import time, as a Python number."""
    v = _known(n.cv.env[n.node.input[i]])
    if v is None:
        raise UnsupportedOpError(f"{n.node.op_type}'s {what} ('{n.node.input[i]}') is known only at run time",
                                 hint=_UNROLL_HINT)
    if v.size != 1:
        raise InputError(f"{n.node.op_type}'s {what} has {v.size} elements; it takes one")
    return v.reshape(-1)[0].item()


def _element(n, x, axis: int, index: int):
    """x[..., index, ...] along `axis`, the axis dropped."""
    if isinstance(x, np.ndarray):
        part = np.take(x, index, axis=axis)
        return _sizes_array(part) if _is_symbolic(x) else np.asarray(part)
    shape = x.type.shape[:axis] + x.type.shape[axis + 1:]
    return n.b.op("rt.reshape", [C.slice_axis(n.b, x, axis, index, index + 1)], {"shape": shape})


def _stack(n, parts: list, axis: int, output):
    """`parts` (one per iteration) stacked along a new axis `axis`; known at import time where every part is. With
    no parts, an empty tensor of the type that the body declares for its `output`."""
    if not parts:
        return _empty_stack(output, axis)
    types = [_type_of(p) for p in parts]
    for k, t in enumerate(types):
        if t != types[0]:
            raise UnsupportedOpError(f"scan output '{output.name}' is {types[0]} at iteration 0 and {t} at "
                                     f"iteration {k}",
                                     hint="ONNX stacks the outputs of every iteration into one tensor, so they must "
                                          "agree")
    axis = C.normalize_axis(axis, types[0].rank + 1)
    if all(isinstance(p, np.ndarray) for p in parts):
        stacked = np.stack(parts, axis)
        return _sizes_array(stacked) if _is_symbolic(stacked) else stacked
    shape = types[0].shape[:axis] + (1,) + types[0].shape[axis:]
    pieces = [n.b.op("rt.reshape", [_as_value(n, p)], {"shape": shape}) for p in parts]
    return pieces[0] if len(pieces) == 1 else n.b.op("rt.concat", pieces, {"axis": axis})


def _empty_stack(output, axis: int) -> np.ndarray:
    tensor = output.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if not tensor.HasField("shape") or None in dims:
        raise UnsupportedOpError(f"no iteration ran, and the body does not declare the shape of scan output "
                                 f"'{output.name}'", hint="declare the body output's shape")
    axis = C.normalize_axis(axis, len(dims) + 1)
    dims.insert(axis, 0)
    return np.zeros(dims, _dtype(tensor.elem_type, f"scan output '{output.name}'").np_dtype)


# -- If ---------------------------------------------------------------------------------------------------------


@handles("If")
def _if(n):
    condition = n.cv.env[n.node.input[0]]
    if _type_of(condition).num_elements != 1:
        raise InputError(f"If's condition is {_type_of(condition)}; it takes one element")
    known = _known(condition)
    if known is not None:
        taken = "then_branch" if bool(known.reshape(-1)[0]) else "else_branch"
        return _run_graph(n, n.attr(taken), [], taken)
    then_outputs = _run_graph(n, n.attr("then_branch"), [], "then_branch")
    else_outputs = _run_graph(n, n.attr("else_branch"), [], "else_branch")
    if len(then_outputs) != len(else_outputs):
        raise InputError(f"If's branches give {len(then_outputs)} and {len(else_outputs)} outputs")
    condition = n.b.op("rt.reshape", [_as_value(n, condition)], {"shape": ()})  # one flag for the whole output
    return [_select(n, condition, a, b, name)
            for a, b, name in zip(then_outputs, else_outputs, n.node.output, strict=False)]


def _select(n, condition: Value, then_value, else_value, name: str):
    if then_value is else_value:
        return then_value
    then_type, else_type = _type_of(then_value), _type_of(else_value)
    if then_type != else_type:
        raise UnsupportedOpError(
            f"If with a condition known only at run time needs both branches to give the same shapes; output "
            f"'{name}' is {then_type} in then_branch and {else_type} in else_branch",
            hint="make the condition known at import time: fix the sizes it is computed from (input_shapes=, "
                 "bind_inputs=)")
    then_known, else_known = _known(then_value), _known(else_value)
    if then_known is not None and else_known is not None and np.array_equal(then_known, else_known):
        return then_known
    return n.b.op("rt.select", [condition, _as_value(n, then_value), _as_value(n, else_value)])


# -- Loop -------------------------------------------------------------------------------------------------------


@handles("Loop")
def _loop(n):
    """for i in range(M) while condition: the body converted once per iteration, with (i, condition, carried)."""
    body = n.attr("body")
    carried = [n.cv.env[name] for name in n.node.input[2:]]
    trip_count = int(_scalar_of(n, 0, "trip count M")) if n.has(0) else None
    checks_condition = n.has(1)
    if trip_count is None and not checks_condition:
        raise UnsupportedOpError("Loop with neither a trip count M nor a condition never ends", hint=_UNROLL_HINT)
    running = bool(_scalar_of(n, 1, "condition")) if checks_condition else True
    body_nodes = _node_count(body)
    if not checks_condition:
        _check_unroll("Loop", trip_count, body_nodes)
    scan_outputs = body.output[1 + len(carried):]
    stacks = [[] for _ in scan_outputs]
    iteration = 0
    while running and (trip_count is None or iteration < trip_count):
        if checks_condition:  # M may be a bound never reached (exporters write INT64_MAX)
            _check_unroll("Loop", iteration + 1, body_nodes, still_running=True)
        where = f"its body at iteration {iteration}"
        outputs = _run_graph(n, body, [np.array(iteration, np.int64), np.array(running), *carried], where)
        if checks_condition:
            running = _next_condition(outputs[0], where)
        carried = outputs[1:1 + len(carried)]
        for stack, out in zip(stacks, outputs[1 + len(carried):], strict=True):
            stack.append(out)
        iteration += 1
    return [*carried, *(_stack(n, stack, 0, out) for stack, out in zip(stacks, scan_outputs, strict=True))]


def _next_condition(condition, where: str) -> bool:
    known = _known(condition)
    if known is None:
        raise UnsupportedOpError(f"{where}: Loop's condition is computed from values known only at run time",
                                 hint="the graph IR has no loops, so the importer unrolls them: the condition may "
                                      "depend on the iteration number and constants only")
    if known.size != 1:
        raise InputError(f"{where}: Loop's condition has {known.size} elements; it takes one")
    return bool(known.reshape(-1)[0])


# -- Scan -------------------------------------------------------------------------------------------------------


@handles("Scan")
def _scan(n):
    """The body converted once per position along the scan axis, with (state, each scan input's slice there)."""
    inputs = [n.cv.env[name] for name in n.node.input]
    scan_count = int(n.attr("num_scan_inputs"))
    if not 1 <= scan_count <= len(inputs):
        raise InputError(f"Scan's num_scan_inputs is {scan_count}, and it has {len(inputs)} inputs")
    states, sequences = inputs[:len(inputs) - scan_count], inputs[len(inputs) - scan_count:]
    in_axes = [C.normalize_axis(a, _type_of(x).rank)
               for a, x in zip(n.attr("scan_input_axes", [0] * scan_count), sequences, strict=True)]
    in_reversed = [bool(d) for d in n.attr("scan_input_directions", [0] * scan_count)]
    outputs = len(n.attr("body").output) - len(states)
    return _scan_over(n, states, sequences, in_axes, in_reversed, n.attr("scan_output_axes", [0] * outputs),
                      [bool(d) for d in n.attr("scan_output_directions", [0] * outputs)])


def _scan_over(n, states: list, sequences: list, in_axes: list, in_reversed: list, out_axes: list,
               out_reversed: list) -> list:
    """The final states and the stacked scan outputs of n's body run along the sequences."""
    body = n.attr("body")
    length = _scan_length(sequences, in_axes)
    _check_unroll("Scan", length, _node_count(body))
    scan_outputs = body.output[len(states):]
    stacks = [[] for _ in scan_outputs]
    for step in range(length):
        slices = [_element(n, x, axis, length - 1 - step if backwards else step)
                  for x, axis, backwards in zip(sequences, in_axes, in_reversed, strict=True)]
        outputs = _run_graph(n, body, [*states, *slices], f"its body at iteration {step}")
        states = outputs[:len(states)]
        for stack, out in zip(stacks, outputs[len(states):], strict=True):
            stack.append(out)
    return [*states, *(_stack(n, stack[::-1] if backwards else stack, axis, out)
                       for stack, axis, backwards, out in zip(stacks, out_axes, out_reversed, scan_outputs,
                                                               strict=True))]


@handles_old("Scan", 8)
def _scan_8(n):
    """Opset 8's Scan: every state and scan input has a batch axis first, and the scan axis second; each batch
    element scans on its own (a `sequence_lens` input must give every element the whole length)."""
    inputs = [n.cv.env[name] if name else None for name in n.node.input]
    scan_count = int(n.attr("num_scan_inputs"))
    if not 1 <= scan_count <= len(inputs) - 1:
        raise InputError(f"Scan's num_scan_inputs is {scan_count}, and it has {len(inputs) - 1} inputs after "
                         "sequence_lens")
    lengths, states, sequences = inputs[0], inputs[1:-scan_count], inputs[-scan_count:]
    batches = {_type_of(v).shape[0] for v in states + sequences}
    if len(batches) != 1 or not isinstance(next(iter(batches)), int):
        raise UnsupportedOpError(f"Scan-8's batch axes are {sorted(map(str, batches))}; they must be one static size",
                                 hint=_UNROLL_HINT)
    batch = batches.pop()
    full = _type_of(sequences[0]).shape[1]
    if lengths is not None and (_known(lengths) is None or (_known(lengths) != full).any()):
        raise UnsupportedOpError(f"Scan-8 with sequence_lens shorter than the sequences ({full}), or known only at "
                                 "run time, is not supported", hint="leave sequence_lens out, or give every batch "
                                 "element the whole length")
    directions = [bool(d) for d in n.attr("directions", [0] * scan_count)]
    body_outputs = n.attr("body").output
    outputs = len(body_outputs) - len(states)
    per_batch = [_scan_over(n, [_element(n, s, 0, k) for s in states], [_element(n, x, 0, k) for x in sequences],
                            [0] * scan_count, directions, [0] * outputs, [False] * outputs) for k in range(batch)]
    return [_stack(n, [results[i] for results in per_batch], 0, out) for i, out in enumerate(body_outputs)]


def _scan_length(sequences: list, axes: list[int]) -> int:
    lengths = {_type_of(x).shape[axis] for x, axis in zip(sequences, axes, strict=True)}
    if len(lengths) != 1:
        raise InputError(f"Scan's inputs differ in length along their scan axes: {sorted(map(str, lengths))}")
    (length,) = lengths
    if not isinstance(length, int):
        raise UnsupportedOpError(f"Scan along an axis of size {length}, known only at run time",
                                 hint="the graph IR has no loops, so the importer unrolls them: fix that size "
                                      "with input_shapes=")
    return length
