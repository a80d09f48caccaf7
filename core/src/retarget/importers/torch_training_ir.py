"""torch.export's training IR, imported as it stands: which programs can skip `run_decompositions()`.

`torch.export.export` returns the training IR: core ATen ops, plus higher-level ops that it keeps
whole (`aten.conv2d`, `aten.linear`, `aten.batch_norm`, `aten.layer_norm`, ...) and in-place ops
(`aten.hardtanh_` in MobileNetV2, `aten.relu_` in ResNet-18). Decomposing it to core ATen retraces
the whole program: 2.9 s of MobileNetV2's 9.3 s first import on the 2-core CI machine. `plan(program)`
decides, for the whole program and before any import, whether it can be imported as it stands:

- every input is a user input, a parameter, a buffer or a lifted constant, each a plain tensor (not a
  subclass such as torchao's quantized tensors), and every output is a user output (no buffer mutation);
- every op is one of `TRAINING_IR_OPS` (where its arguments meet that entry's condition: batch norm and
  dropout in inference mode, constant padding, ...), an in-place op of `INPLACE_OPS`, or an op that
  run_decompositions leaves as it is (core ATen, and custom ops such as PT2E's quantize and dequantize,
  none CompositeImplicitAutograd) and that the importer has a handler for;
- an in-place op `y = op_(x)` writes to a tensor that an op created: not an input, parameter or buffer,
  nor a view or possible alias of another tensor; and no view of it is taken before its last in-place
  write. Then `op_(x)` imports as `op(x)`, and every later read of x (or of y) reads that result.

Otherwise the whole program is decomposed, as before: all or nothing, never per op.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from . import compose as C
from .torch_export import (
    _SIZE_ARITHMETIC,
    HANDLERS,
    _constant_pad,
    _convolution,
    _named_arguments,
    _split,
    handler_key,
    handles,
    inference_batch_norm,
)

VIEW, NEW = True, False  # whether an op's result may alias one of its inputs (a view, or the input itself)

# The training IR's ops that are not core ATen, imported as they stand. Overload -> (whether its result
# may alias an input, and what its arguments must be for the handler to import it exactly: a test of the
# named arguments and the words for an error, or None).
TRAINING_IR_OPS: dict[str, tuple[bool, tuple[Callable, str] | None]] = {
    "aten.conv1d.default": (NEW, None),
    "aten.upsample_nearest1d.vec": (NEW, None),
    "aten.upsample_nearest2d.vec": (NEW, None),
    "aten._upsample_nearest_exact1d.vec": (NEW, None),
    "aten._upsample_nearest_exact2d.vec": (NEW, None),
    "aten.upsample_bilinear2d.vec": (NEW, None),
    "aten._upsample_bilinear2d_aa.vec": (NEW, None),
    "aten._upsample_bicubic2d_aa.vec": (NEW, None),
    "aten.var.dim": (NEW, None),
    "aten.conv2d.default": (NEW, None),
    "aten.conv_transpose1d.default": (NEW, None),
    "aten.conv_transpose2d.input": (NEW, None),
    "aten.conv3d.default": (NEW, None),
    "aten.conv_transpose3d.input": (NEW, None),
    "aten.linear.default": (NEW, None),
    "aten.matmul.default": (NEW, None),
    "aten.batch_norm.default": (NEW, (lambda a: not a["training"] and a["running_mean"] is not None
                                      and a["running_var"] is not None, "in inference mode with running statistics")),
    "aten.layer_norm.default": (NEW, None),
    "aten.group_norm.default": (NEW, None),
    "aten.rms_norm.default": (NEW, None),
    "aten.instance_norm.default": (NEW, (lambda a: not a["use_input_stats"] or a["running_mean"] is None,
                                         "in eval mode or without running statistics")),
    "aten.softmax.int": (NEW, None),
    "aten.log_softmax.int": (NEW, None),
    "aten.relu6.default": (NEW, None),
    "aten.hardswish.default": (NEW, None),
    "aten.hardsigmoid.default": (NEW, None),
    "aten.silu.default": (NEW, None),
    "aten.rsub.Scalar": (NEW, None),
    "aten.max_pool1d.default": (NEW, None),
    "aten.max_pool1d_with_indices.default": (NEW, None),
    "aten.max_pool2d.default": (NEW, None),
    "aten.max_pool3d.default": (NEW, None),
    "aten.max_unpool2d.default": (NEW, None),
    "aten.max_unpool3d.default": (NEW, None),
    "aten.adaptive_avg_pool2d.default": (NEW, None),
    "aten.adaptive_max_pool2d.default": (NEW, None),
    "aten.scaled_dot_product_attention.default": (NEW, (lambda a: a["dropout_p"] == 0 and not a["enable_gqa"],
                                                        "without dropout or grouped-query attention")),
    "aten.arange.default": (NEW, None),
    "aten.arange.start": (NEW, None),
    "aten.zeros.default": (NEW, None),
    "aten.ones.default": (NEW, None),
    "aten.zeros_like.default": (NEW, None),
    "aten.ones_like.default": (NEW, None),
    "aten.lift_fresh_copy.default": (NEW, None),
    "aten.dropout.default": (VIEW, (lambda a: not a["train"], "in inference mode")),  # then its input itself
    "aten.pad.default": (VIEW, (lambda a: a["mode"] == "constant", "constant padding")),
    "aten.flatten.using_ints": (VIEW, None),
    "aten.reshape.default": (VIEW, None),
    "aten.unflatten.int": (VIEW, None),
    "aten.view_as.default": (VIEW, None),
    "aten.expand_as.default": (VIEW, None),
    "aten.squeeze.default": (VIEW, None),
    "aten.t.default": (VIEW, None),
    "aten.transpose.int": (VIEW, None),
    "aten.contiguous.default": (VIEW, None),
    "aten.detach.default": (VIEW, None),
    "aten.to.dtype": (VIEW, None),
    "aten.type_as.default": (VIEW, None),
    "aten.split.Tensor": (VIEW, None),
    "aten.chunk.default": (VIEW, None),
    "aten.sym_size.int": (NEW, None),
    "aten._assert_tensor_metadata.default": (NEW, None),
    "aten._assert_scalar.default": (NEW, None),
    "aten.sym_constrain_range_for_size.default": (NEW, None),
    # math ops that run_decompositions keeps but are not tagged core ATen, and composites it would decompose
    "aten.linalg_vector_norm.default": (NEW, None),
    "aten.dist.default": (NEW, None),
    "aten.clamp_min.default": (NEW, None),
    "aten.cosine_similarity.default": (NEW, None),
    "aten.frac.default": (NEW, None),
    "aten.hypot.default": (NEW, None),
    "aten.copysign.Tensor": (NEW, None),
    "aten.copysign.Scalar": (NEW, None),
    "aten.erfinv.default": (NEW, None),
    "aten.lgamma.default": (NEW, None),
    "aten.digamma.default": (NEW, None),
    "aten.var_mean.correction": (NEW, None),
    "aten.var_mean.dim": (NEW, None),
    "aten.std_mean.dim": (NEW, None),
    "aten.std_mean.correction": (NEW, None),
    "aten.cumprod.default": (NEW, None),
    "aten.cummax.default": (NEW, None),
    "aten.cummin.default": (NEW, None),
    "aten.logcumsumexp.default": (NEW, None),
    "aten.cdist.default": (NEW, None),
    "aten.pdist.default": (NEW, None),
    "aten.searchsorted.Tensor": (NEW, None),
    "aten.searchsorted.Scalar": (NEW, None),
    "aten.bucketize.Tensor": (NEW, None),
    "aten.bucketize.Scalar": (NEW, None),
    "aten.median.default": (NEW, None),
    "aten.median.dim": (NEW, None),
    "aten.kthvalue.default": (NEW, None),
    "aten.histc.default": (NEW, None),
    "aten.adaptive_avg_pool3d.default": (NEW, None),
    "aten.linalg_det.default": (NEW, None),
    "aten.det.default": (NEW, None),
    "aten.rrelu.default": (NEW, (lambda a: not a["training"], "in eval mode")),
}

# In-place ops -> the HANDLERS key of the op they compute; what they write to is their first argument.
INPLACE_OPS: dict[str, str] = {
    "aten.relu_.default": "relu", "aten.hardtanh_.default": "hardtanh", "aten.silu_.default": "silu",
    "aten.hardswish_.default": "hardswish", "aten.hardsigmoid_.default": "hardsigmoid",
    "aten.leaky_relu_.default": "leaky_relu", "aten.elu_.default": "elu", "aten.gelu_.default": "gelu",
    "aten.sigmoid_.default": "sigmoid", "aten.tanh_.default": "tanh", "aten.clamp_.default": "clamp",
    "aten.add_.Tensor": "add", "aten.sub_.Tensor": "sub", "aten.mul_.Tensor": "mul", "aten.div_.Tensor": "div",
    "aten.detach_.default": "detach",  # torch.tensor(...) in forward: lift_fresh_copy, then detach_
}

_PLAIN_INPUTS = ("USER_INPUT", "PARAMETER", "BUFFER", "CONSTANT_TENSOR")


@dataclass
class Plan:
    """How a program imports. `reason`: None when its training IR imports as it stands, else why it
    must be decomposed first. `writes`: each in-place node -> (the HANDLERS key of the op it computes,
    the nodes that are the tensor it writes to, whose later reads get its result)."""

    reason: str | None
    writes: dict = field(default_factory=dict)


def plan(program) -> Plan:
    """Whether `program` (an ExportedProgram, not decomposed) imports as it stands; see the module doc."""
    reason = _signature_reason(program)
    if reason is not None:
        return Plan(reason)
    nodes = list(program.graph.nodes)
    inputs = {spec.arg.name: spec.kind.name.lower().replace("_", " ") for spec in program.graph_signature.input_specs}
    may_alias: dict = {}
    tensor_of: dict = {}  # an in-place node -> the node that created the tensor it wrote to
    members: dict = {}  # a creating node -> the nodes that are its tensor (itself, and the writes to it)
    last_write: dict = {}  # a creating node -> the position of the last in-place write to its tensor
    writes: dict = {}
    for position, node in enumerate(nodes):
        if node.op in ("placeholder", "output"):
            continue
        if node.op != "call_function":
            return Plan(f"node '{node.name}' is a {node.op}")
        name = str(node.target)
        if name in INPLACE_OPS:
            written = node.args[0] if node.args else None
            created = tensor_of.get(written, written)
            if getattr(created, "op", None) != "call_function":
                what = inputs.get(getattr(created, "name", None), "input")
                return Plan(f"'{node.name}' ({name}) writes to the {what} '{getattr(created, 'name', created)}'")
            if may_alias[created]:
                return Plan(f"'{node.name}' ({name}) writes to '{written.name}', which may alias another tensor "
                            f"('{created.name}' is {created.target})")
            tensor_of[node] = created
            members.setdefault(created, [created]).append(node)
            writes[node] = (INPLACE_OPS[name], list(members[created]))
            last_write[created] = position
            continue
        known = _op_aliases(node)
        if isinstance(known, str):
            return Plan(known)
        may_alias[node] = known
    order = {node: i for i, node in enumerate(nodes)}
    for created, last in last_write.items():
        for member in members[created]:
            for user in member.users:
                if may_alias.get(user) and order[user] < last:
                    return Plan(f"'{user.name}' ({user.target}) views '{member.name}' before "
                                f"'{nodes[last].name}' writes to it in place")
    return Plan(None, writes)


def _signature_reason(program) -> str | None:
    import torch

    sig = program.graph_signature
    for spec in sig.input_specs:
        kind = spec.kind.name
        if kind not in _PLAIN_INPUTS:
            return f"input '{spec.arg.name}' is a {kind}"
        if kind != "USER_INPUT":
            tensor = program.state_dict.get(spec.target)
            tensor = program.constants.get(spec.target) if tensor is None else tensor
            if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
                return f"input '{spec.arg.name}' is a tensor subclass ({type(tensor).__name__})"
    for spec in sig.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            return f"output '{getattr(spec.arg, 'name', spec.arg)}' is a {spec.kind.name}"
    return None


def _op_aliases(node) -> bool | str:
    """Whether the op of `node` may return an alias of an input; a str says why it is not imported as it stands."""
    target = node.target
    if target is operator.getitem:
        return VIEW  # a result of split is a view
    if target in _SIZE_ARITHMETIC:
        return NEW
    name = str(target)
    entry = TRAINING_IR_OPS.get(name)
    if entry is not None:
        aliases, condition = entry
        if condition is not None and not condition[0](_named_arguments(node)):
            return f"'{node.name}' ({name}) is not {condition[1]}"
        return aliases
    if _kept_by_decomposition(target) and handler_key(name) in HANDLERS:
        return any(r.alias_info is not None for r in target._schema.returns)
    return f"'{node.name}' ({name}) imports only after decomposition"


_KEPT: dict = {}


def _kept_by_decomposition(target) -> bool:
    """run_decompositions leaves the op as it is: core ATen, or a custom op; never CompositeImplicitAutograd
    (and never one that writes to an argument)."""
    import torch

    if target not in _KEPT:
        kept = (isinstance(target, torch._ops.OpOverload) and not target._schema.is_mutable
                and not target.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
        if kept and target.namespace == "aten":
            kept = torch.Tag.core in target.tags
        _KEPT[target] = kept
    return _KEPT[target]


# -- handlers of the ops that run_decompositions would have decomposed ----------------------


def _ntuple(v, n: int) -> tuple:
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    return v * n if len(v) == 1 else v


@handles("conv1d", "conv2d", "conv3d")
def _conv(cv, node, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    n = x.type.rank - 2
    return _convolution(cv, node, x, w, bias, _ntuple(stride, n), _ntuple(padding, n), _ntuple(dilation, n),
                        False, (0,) * n, groups)


@handles("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_transpose(cv, node, x, w, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    n = x.type.rank - 2
    return _convolution(cv, node, x, w, bias, _ntuple(stride, n), _ntuple(padding, n), _ntuple(dilation, n),
                        True, _ntuple(output_padding, n), groups)


@handles("batch_norm")
def _batch_norm(cv, node, x, weight, bias, mean, var, training, momentum, eps, *_):
    return inference_batch_norm(cv, x, weight, bias, mean, var, eps)


@handles("group_norm")
def _group_norm(cv, node, x, groups, weight=None, bias=None, eps=1e-5, *_):
    return C.group_norm(cv.b, x, groups, weight, bias, eps)


@handles("instance_norm")
def _instance_norm(cv, node, x, weight, bias, mean, var, use_input_stats, momentum, eps, *_):
    if not use_input_stats:  # eval mode with tracked statistics: a batch norm by them
        return inference_batch_norm(cv, x, weight, bias, mean, var, eps)
    return C.group_norm(cv.b, x, x.type.shape[1], weight, bias, eps)


@handles("layer_norm")
def _layer_norm(cv, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, *_):
    axes = tuple(range(x.type.rank - len(normalized_shape), x.type.rank))
    return C.layer_norm(cv.b, x, axes, weight, bias, eps)


@handles("relu6")
def _relu6(cv, node, x):
    return C.clamp(cv.b, x, 0, 6)


@handles("pad")
def _pad(cv, node, x, pad, mode="constant", value=None):
    return _constant_pad(cv, node, x, pad, 0 if value is None else value)


@handles("chunk")
def _chunk(cv, node, x, chunks, dim=0):
    size = x.type.shape[C.normalize_axis(dim, x.type.rank)]
    return _split(cv, node, x, math.ceil(size / chunks), dim)
