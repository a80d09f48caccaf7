"""ONNX's recurrent ops, RNN, GRU and LSTM (opset 14's: opset 7's and `layout`; opset 22 adds only types),
unrolled over the sequence into graph ops; and opset 27's CausalConvWithState and LinearAttention (every
update_rule: linear, gated, delta, gated_delta; grouped query heads; per-head or per-key decay), the ops of
linear-attention and state-space LLMs, LinearAttention unrolled over its sequence in f32 as onnx's reference runs it.

- Every attribute: `activations` (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid,
  Elu, Softsign, Softplus, in any case; one list a direction), with `activation_alpha` and `activation_beta`
  consumed in order by the functions that take them and, past their end, the defaults of the ONNX operators of the
  same name (LeakyRelu 0.01, HardSigmoid 0.2 and 0.5, Elu 1, ThresholdedRelu 1, Affine 1 and 0, ScaledTanh 1 and 1;
  onnxruntime takes 0 for the last three), `clip` (applied to every gate's input, as onnxruntime does; not to
  LSTM's h(Ct)), `direction`, `hidden_size`, `input_forget` (LSTM's forget gate is 1 - its input gate),
  `linear_before_reset` (GRU) and `layout`.
- Every input (B, sequence_lens, initial_h, initial_c and P optional) and every output; an output no one reads
  is not computed, nor is an input that is known to be zeros used.
- X @ W^T plus the biases is one matmul for every step and both directions; a step multiplies the state by R^T,
  one batched matmul for both directions (GRU with linear_before_reset 0 takes two: its reset gate comes between).
- sequence_lens, known at import time or not: a batch element's state stops changing past its length, its rows of
  Y are 0 there, and where its length is 0 its Y_h and Y_c are 0 (as onnxruntime gives them; the spec says
  nothing). The reverse direction starts each element at its own last step: its steps are reversed within its
  length (ReverseSequence's gather), run forward with the mask, and its Y reversed back.
- The sequence length must be static (the op is unrolled over it); the batch may be known only at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..ir.core import Builder, Value
from ..ir.symbolic import Sym
from . import compose as C
from .onnx import handles

DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}  # rows of W, R (and half of B) per hidden unit
REVERSED = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}  # each direction's steps


def _affine(b: Builder, x: Value, alpha, beta) -> Value:
    return b.op("rt.add", [b.op("rt.mul", [x, C.scalar(b, alpha, x)]), C.scalar(b, beta, x)])


def _scaled_tanh(b: Builder, x: Value, alpha, beta) -> Value:
    return b.op("rt.mul", [b.op("rt.tanh", [b.op("rt.mul", [x, C.scalar(b, beta, x)])]), C.scalar(b, alpha, x)])


# lower-case name -> (graph ops of (builder, x, alpha, beta), default alpha, default beta); None: takes none
ACTIVATIONS = {
    "relu": (lambda b, x, alpha, beta: C.relu(b, x), None, None),
    "tanh": (lambda b, x, alpha, beta: b.op("rt.tanh", [x]), None, None),
    "sigmoid": (lambda b, x, alpha, beta: b.op("rt.sigmoid", [x]), None, None),
    "affine": (_affine, 1.0, 0.0),
    "leakyrelu": (lambda b, x, alpha, beta: C.leaky_relu(b, x, alpha), 0.01, None),
    "thresholdedrelu": (lambda b, x, alpha, beta: C.thresholded_relu(b, x, alpha), 1.0, None),
    "scaledtanh": (_scaled_tanh, 1.0, 1.0),
    "hardsigmoid": (lambda b, x, alpha, beta: C.hard_sigmoid(b, x, alpha, beta), 0.2, 0.5),
    "elu": (lambda b, x, alpha, beta: C.elu(b, x, alpha), 1.0, None),
    "softsign": (lambda b, x, alpha, beta: C.softsign(b, x), None, None),
    "softplus": (lambda b, x, alpha, beta: C.softplus(b, x), None, None),
}

Activation = tuple  # (lower-case name, alpha, beta): equal tuples are the same function


def _activations(n, directions: int) -> list[tuple[Activation, ...]]:
    """Each direction's functions (f; f, g; or f, g, h), their alphas and betas taken from the lists in order."""
    op = n.node.op_type
    count = len(DEFAULT_ACTIVATIONS[op])
    names = list(n.attr("activations", None) or DEFAULT_ACTIVATIONS[op] * directions)
    if len(names) != count * directions:
        raise InputError(f"{op} takes {count} activation function(s) a direction, {count * directions} for its "
                         f"{directions} direction(s); got {len(names)}: {', '.join(names)}",
                         hint="list the functions of each direction, the forward one's first")
    alphas, betas = iter(n.attr("activation_alpha", [])), iter(n.attr("activation_beta", []))
    chosen = []
    for name in names:
        if name.lower() not in ACTIVATIONS:
            raise UnsupportedOpError(f"{op}'s activation function '{name}' is not one of ONNX's",
                                     hint=f"use one of {', '.join(ACTIVATIONS)}")
        _, alpha, beta = ACTIVATIONS[name.lower()]
        chosen.append((name.lower(), alpha if alpha is None else float(next(alphas, alpha)),
                       beta if beta is None else float(next(betas, beta))))
    return [tuple(chosen[d * count:(d + 1) * count]) for d in range(directions)]


def _given(n, i: int) -> bool:
    """Whether optional input `i` is there and can matter (one known to be zeros is the same as none)."""
    known = n.known_if_so(i)
    return n.has(i) and (known is None or bool(np.any(known)))


@dataclass
class _Unrolled:
    """One node's op, unrolled: values are [1 or seq, directions, batch, features], each direction's steps in the
    order it runs them (`in_run_order`)."""

    n: object  # the node (onnx.py's _Node)
    b: Builder
    x: Value  # [seq, batch, input]
    hidden: int
    reversed: tuple[bool, ...]
    activations: list[tuple[Activation, ...]]
    clip: float | None
    lengths: Value | None  # [1, 1, batch, 1], in [0, seq]; None: every element runs every step
    maybe_empty: bool  # whether some element's length may be 0
    # with lengths: whether each element runs each step ([seq, 1, batch, 1]), and the step of X that a reverse
    # direction reads at each of its own (len - 1 - t within the length, t past it)
    running: Value | None = field(init=False, default=None)
    reversed_step: Value | None = field(init=False, default=None)

    def __post_init__(self):
        if self.lengths is None:
            return
        b, seq = self.b, self.x.type.shape[0]
        step = b.op("rt.iota", [], {"shape": (seq, 1, 1, 1), "axis": 0, "dtype": "i32"})
        self.running = b.op("rt.cmp", [step, self.lengths], {"predicate": "lt"})
        mirrored = b.op("rt.sub", [b.op("rt.sub", [self.lengths, C.scalar(b, 1, step)]), step])
        self.reversed_step = b.op("rt.select", [self.running, mirrored, step])

    @property
    def directions(self) -> int:
        return len(self.reversed)

    def activate(self, which: int, x: Value, clipped: bool = True) -> Value:
        """Activation function `which` (0: f, 1: g, 2: h) of each direction, of x, clipped first."""
        b = self.b
        if clipped and self.clip is not None:
            x = C.clamp(b, x, -self.clip, self.clip)
        chosen = [functions[which] for functions in self.activations]
        if all(a == chosen[0] for a in chosen):
            return _apply(b, chosen[0], x)
        parts = [_apply(b, a, C.slice_axis(b, x, 1, d, d + 1)) for d, a in enumerate(chosen)]
        return b.op("rt.concat", parts, {"axis": 1})

    def gates(self, x: Value, first: int, count: int = 1) -> Value:
        """Gates first ... first + count - 1 of x (the last axis holds them one after another)."""
        return C.slice_axis(self.b, x, 3, first * self.hidden, (first + count) * self.hidden)

    def weights(self, i: int, first: int = 0, count: int | None = None) -> Value:
        """Input i (W or R: [directions, gates * hidden, k]) transposed, gates first ... first + count - 1:
        [1, directions, k, count * hidden], to multiply the state by."""
        w = self.n(i)
        if count is not None:
            w = C.slice_axis(self.b, w, 1, first * self.hidden, (first + count) * self.hidden)
        t = self.b.op("rt.transpose", [w], {"perm": (0, 2, 1)})
        return self.b.op("rt.reshape", [t], {"shape": (1, *t.type.shape)})

    def vector(self, v: Value) -> Value:
        """A [directions, k] input (a bias, the peepholes) as [1, directions, 1, k]."""
        return self.b.op("rt.reshape", [v], {"shape": (1, self.directions, 1, v.type.shape[-1])})

    def input_bias(self, with_recurrent_h: bool = True) -> Value | None:
        """Wb + Rb ([directions, gates * hidden]), added to X @ W^T; None without B. Without Rb's last gate where
        it goes elsewhere (GRU's linear_before_reset)."""
        if not _given(self.n, 3):
            return None
        b, bias = self.b, self.n(3)
        size = bias.type.shape[1] // 2
        recurrent = C.slice_axis(b, bias, 1, size, 2 * size)
        if not with_recurrent_h:
            recurrent = b.op("rt.pad", [C.slice_axis(b, recurrent, 1, 0, size - self.hidden)],
                             {"low": (0, 0), "high": (0, self.hidden), "value": 0.0})
        return b.op("rt.add", [C.slice_axis(b, bias, 1, 0, size), recurrent])

    def projected(self, bias: Value | None) -> Value:
        """X @ W^T + bias for every step, every direction: one matmul, [seq, directions, batch, gates * hidden]
        in run order."""
        b, x = self.b, self.x
        seq, batch, size = x.type.shape
        w = self.n(1)
        rows = w.type.shape[1]
        w_t = b.op("rt.transpose", [b.op("rt.reshape", [w], {"shape": (self.directions * rows, size)})],
                   {"perm": (1, 0)})
        y = b.op("rt.matmul", [b.op("rt.reshape", [x], {"shape": (seq * batch, size)}), w_t])
        if bias is not None:
            y = b.op("rt.add", [y, b.op("rt.reshape", [bias], {"shape": (self.directions * rows,)})])
        y = b.op("rt.reshape", [y], {"shape": (seq, batch, self.directions, rows)})
        return self.in_run_order(b.op("rt.transpose", [y], {"perm": (0, 2, 1, 3)}))

    def in_run_order(self, x: Value) -> Value:
        """x [seq, directions, batch, k] with each reverse direction's steps reversed (within each element's
        length): from the order of X to the order the direction runs them, and back (it is its own inverse)."""
        if not any(self.reversed):
            return x
        b = self.b
        parts = [C.slice_axis(b, x, 1, d, d + 1) for d in range(self.directions)]
        for d, backwards in enumerate(self.reversed):
            if backwards:
                parts[d] = self._reverse_steps(parts[d])
        return parts[0] if len(parts) == 1 else b.op("rt.concat", parts, {"axis": 1})

    def _reverse_steps(self, x: Value) -> Value:
        if self.lengths is None:
            return C.reverse(self.b, x, (0,))
        index = self.b.op("rt.broadcast", [self.reversed_step], {"shape": x.type.shape})
        return C.take_along_axis(self.b, x, index, 0)

    def initial(self, i: int) -> Value:
        """Initial state input i ([directions, batch, hidden], or [batch, directions, hidden] in layout 1) as
        [1, directions, batch, hidden]; zeros without it."""
        b = self.b
        shape = (1, self.directions, self.x.type.shape[1], self.hidden)
        if not _given(self.n, i):
            return b.op("rt.broadcast", [C.scalar(b, 0, self.x)], {"shape": shape})
        state = self.n(i)
        if self.n.attr("layout", 0):
            state = b.op("rt.transpose", [state], {"perm": (1, 0, 2)})
        return b.op("rt.reshape", [state], {"shape": shape})

    def run(self, step, projected: Value, states: list[Value]) -> list:
        """`step(x_t, states) -> states` over the sequence, the hidden state first: Y, then each final state
        (None where no one reads it), in the node's layout."""
        b, n = self.b, self.n
        outputs, zero = [], C.scalar(b, 0, self.x)
        for t in range(projected.type.shape[0]):
            new = step(C.slice_axis(b, projected, 0, t, t + 1), states)
            if self.lengths is None:
                states = new
                outputs.append(new[0])
                continue
            running = C.slice_axis(b, self.running, 0, t, t + 1)
            states = [b.op("rt.select", [running, v, old]) for v, old in zip(new, states, strict=True)]
            if n.wants(0):
                outputs.append(b.op("rt.select", [running, new[0], zero]))
        y = None
        if n.wants(0):
            y = self.in_run_order(b.op("rt.concat", outputs, {"axis": 0}) if len(outputs) > 1 else outputs[0])
            if n.attr("layout", 0):
                y = b.op("rt.transpose", [y], {"perm": (2, 0, 1, 3)})
        return [y] + [self._final(v) if n.wants(k + 1) else None for k, v in enumerate(states)]

    def _final(self, state: Value) -> Value:
        b = self.b
        if self.maybe_empty:  # onnxruntime's state of an element of length 0 is 0, not the initial one
            ran = b.op("rt.cmp", [self.lengths, C.scalar(b, 0, self.lengths)], {"predicate": "gt"})
            state = b.op("rt.select", [ran, state, C.scalar(b, 0, state)])
        _, directions, batch, hidden = state.type.shape
        state = b.op("rt.reshape", [state], {"shape": (directions, batch, hidden)})
        return b.op("rt.transpose", [state], {"perm": (1, 0, 2)}) if self.n.attr("layout", 0) else state


def _apply(b: Builder, activation: Activation, x: Value) -> Value:
    name, alpha, beta = activation
    return ACTIVATIONS[name][0](b, x, alpha, beta)


def _unrolled(n) -> _Unrolled:
    """The node's shapes and attributes, checked."""
    op, b = n.node.op_type, n.b
    x = n(0)
    if n.attr("layout", 0) not in (0, 1):
        raise UnsupportedOpError(f"{op}'s layout {n.attr('layout')} is not 0 or 1")
    if n.attr("layout", 0):
        x = b.op("rt.transpose", [x], {"perm": (1, 0, 2)})
    seq, batch, _ = x.type.shape
    if isinstance(seq, Sym):
        raise UnsupportedOpError(f"{op} over a sequence of length {seq}, known only at run time (X is {n(0).type}): "
                                 "the op is unrolled over its steps, whose number must be static",
                                 hint=f"export with a static sequence length, or fix it with "
                                      f"input_shapes={{'{n.node.input[0]}': [...]}}")
    direction = n.attr("direction", "forward")
    if direction not in REVERSED:
        raise UnsupportedOpError(f"{op}'s direction '{direction}' is not forward, reverse or bidirectional")
    directions = len(REVERSED[direction])
    r_shape = n(2).type.shape
    hidden = n.attr("hidden_size", r_shape[-1])
    gates, size = GATES[op] * hidden, n(1).type.shape[-1]
    if n(1).type.shape != (directions, gates, size) or r_shape != (directions, gates, hidden):
        raise InputError(f"{op} of X {n(0).type}, hidden_size {hidden} and direction {direction} takes W "
                         f"[{directions}, {gates}, {size}] and R [{directions}, {gates}, {hidden}]; got {n(1).type} "
                         f"and {n(2).type}", hint="check the model's weights against its attributes")
    lengths, maybe_empty = None, False
    known = n.known_if_so(4)
    if n.has(4) and (known is None or np.any(known != seq)):  # all of them full: no mask
        lengths = b.op("rt.cast", [n(4)], {"dtype": "i32"})
        lengths = C.clamp(b, b.op("rt.reshape", [lengths], {"shape": (1, 1, batch, 1)}), 0, seq)
        maybe_empty = known is None or bool(np.any(known <= 0))
    clip = n.attr("clip", None)
    return _Unrolled(n, b, x, hidden, REVERSED[direction], _activations(n, directions),
                     None if clip is None else float(clip), lengths, maybe_empty)


@handles("RNN")
def _rnn(n):
    """Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    u = _unrolled(n)
    b, r_t = u.b, u.weights(2)

    def step(x_t, states):
        (h,) = states
        return [u.activate(0, b.op("rt.add", [x_t, b.op("rt.matmul", [h, r_t])]))]

    return u.run(step, u.projected(u.input_bias()), [u.initial(5)])


@handles("GRU")
def _gru(n):
    """zt, rt = f(Xt W[zr]^T + Ht-1 R[zr]^T + biases); ht = g(Xt Wh^T + (rt * Ht-1) Rh^T + Rbh + Wbh), or with
    linear_before_reset g(Xt Wh^T + rt * (Ht-1 Rh^T + Rbh) + Wbh); Ht = (1 - zt) * ht + zt * Ht-1."""
    u = _unrolled(n)
    b, hidden = u.b, u.hidden
    linear_before_reset = bool(n.attr("linear_before_reset", 0))
    recurrent_h_bias = None  # Rbh, where it is added before the reset gate multiplies
    if linear_before_reset and _given(n, 3):
        recurrent_h_bias = u.vector(C.slice_axis(b, n(3), 1, 5 * hidden, 6 * hidden))
    # linear_before_reset: one matmul for the three gates; else the last one's waits for the reset gate
    r_t = u.weights(2) if linear_before_reset else u.weights(2, 0, 2)
    rh_t = None if linear_before_reset else u.weights(2, 2, 1)

    def step(x_t, states):
        (h,) = states
        recurrent = b.op("rt.matmul", [h, r_t])
        update_and_reset = u.activate(0, b.op("rt.add", [u.gates(x_t, 0, 2), u.gates(recurrent, 0, 2)]))
        update, reset = u.gates(update_and_reset, 0), u.gates(update_and_reset, 1)
        if linear_before_reset:
            h_part = u.gates(recurrent, 2)
            if recurrent_h_bias is not None:
                h_part = b.op("rt.add", [h_part, recurrent_h_bias])
            h_part = b.op("rt.mul", [reset, h_part])
        else:
            h_part = b.op("rt.matmul", [b.op("rt.mul", [reset, h]), rh_t])
        candidate = u.activate(1, b.op("rt.add", [u.gates(x_t, 2), h_part]))
        # (1 - z) * candidate + z * h, as candidate + z * (h - candidate)
        return [b.op("rt.add", [candidate, b.op("rt.mul", [update, b.op("rt.sub", [h, candidate])])])]

    return u.run(step, u.projected(u.input_bias(with_recurrent_h=not linear_before_reset)), [u.initial(5)])


@handles("LSTM")
def _lstm(n):
    """Gates i, o, f, c: it = f(Xt Wi^T + Ht-1 Ri^T + Pi * Ct-1 + biases), ft likewise with Pf (or 1 - it with
    input_forget), ct = g(Xt Wc^T + Ht-1 Rc^T + biases), Ct = ft * Ct-1 + it * ct, ot = f(... + Po * Ct),
    Ht = ot * h(Ct)."""
    u = _unrolled(n)
    b, r_t = u.b, u.weights(2)
    input_forget = bool(n.attr("input_forget", 0))
    peepholes = None  # Pi, Po, Pf
    if _given(n, 7):
        p = u.vector(n(7))
        peepholes = [u.gates(p, k) for k in range(3)]

    def peeped(gates, k: int, cell: Value) -> Value:
        """f of gate k, its peephole times the cell added."""
        return u.activate(0, b.op("rt.add", [u.gates(gates, k), b.op("rt.mul", [peepholes[k], cell])]))

    def step(x_t, states):
        h, cell = states
        gates = b.op("rt.add", [x_t, b.op("rt.matmul", [h, r_t])])
        if peepholes is None:  # each gate on its own, so that each fuses into the one kernel that reads it (i and f
            # into the cell's, o into h's): three kernels a step, where i, o and f together made a fourth
            input_gate, output_gate, forget_gate = (u.activate(0, u.gates(gates, k)) for k in range(3))
        else:
            input_gate, forget_gate = peeped(gates, 0, cell), peeped(gates, 2, cell)
        if input_forget:
            forget_gate = b.op("rt.sub", [C.scalar(b, 1, input_gate), input_gate])
        cell = b.op("rt.add", [b.op("rt.mul", [forget_gate, cell]),
                               b.op("rt.mul", [input_gate, u.activate(1, u.gates(gates, 3))])])
        if peepholes is not None:
            output_gate = peeped(gates, 1, cell)
        return [b.op("rt.mul", [output_gate, u.activate(2, cell, clipped=False)]), cell]

    return u.run(step, u.projected(u.input_bias()), [u.initial(5), u.initial(6)])


# -- the recurrent ops of opset 27: CausalConvWithState and LinearAttention (linear-attention and state-space LLMs) -


@handles("CausalConvWithState")
def _causal_conv_with_state(n):
    """A depthwise causal conv1d over [past_state, input] (zeros without a past state), then SiLU if asked;
    present_state is the last k - 1 positions of that. The k taps are k shifted slices, multiplied and summed: one
    elementwise kernel, as k is small (4 in Mamba-style models)."""
    b, x, weight = n.b, n(0), n(1)
    activation = n.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise UnsupportedOpError(f"CausalConvWithState's activation '{activation}' is not none, silu or swish")
    batch, channels, length = x.type.shape
    if weight.type.rank != 3 or weight.type.shape[:2] != (channels, 1):
        raise InputError(f"CausalConvWithState of input {x.type} takes a weight [{channels}, 1, k]; got "
                         f"{weight.type}")
    taps = weight.type.shape[2]
    if not isinstance(taps, int) or not isinstance(length, int):
        raise UnsupportedOpError(f"CausalConvWithState of input {x.type} and weight {weight.type}: the length and "
                                 "the kernel size must be static", hint="export with static sizes")
    past = n(3) if n.has(3) else b.op("rt.broadcast", [C.scalar(b, 0, x)], {"shape": (batch, channels, taps - 1)})
    padded = b.op("rt.concat", [past, x], {"axis": 2}) if taps > 1 else x
    wide = C.widen(b, padded)
    taps_weights = C.widen(b, b.op("rt.reshape", [weight], {"shape": (1, channels, taps)}))
    total = None
    for j in range(taps):
        term = b.op("rt.mul", [C.slice_axis(b, wide, 2, j, j + length), C.slice_axis(b, taps_weights, 2, j, j + 1)])
        total = term if total is None else b.op("rt.add", [total, term])
    if n.has(2):
        total = b.op("rt.add", [total, C.widen(b, b.op("rt.reshape", [n(2)], {"shape": (1, channels, 1)}))])
    output = C.narrow_to(b, total, x)  # the conv's result in the input's type, then the activation in f32
    if activation != "none":
        output = C.narrow_to(b, C.swish(b, C.widen(b, output)), x)
    present = C.slice_axis(b, padded, 2, length, length + taps - 1)
    return [output, present]


LINEAR_ATTENTION_RULES = {  # update_rule -> (decay gates the state, beta corrects it: the delta rule)
    "linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


@handles("LinearAttention")
def _linear_attention(n):
    """The recurrence of linear attention, one step a position (unrolled; the sequence length must be static),
    in f32: the state S [batch, kv_heads, d_k, d_v] decays by exp(decay) (gated rules), the value is corrected by
    beta * (v - S^T k) (delta rules), S += k v^T, and each query head reads q S of its key-value head (query head h
    reads kv head h // (q_heads / kv_heads)), scaled (1/sqrt(d_k) unless `scale` is given). `chunk_size` is a hint
    with no effect on the result."""
    b = n.b
    rule = n.attr("update_rule", "gated_delta")
    if rule not in LINEAR_ATTENTION_RULES:
        raise UnsupportedOpError(f"LinearAttention's update_rule '{rule}' is not one of "
                                 f"{', '.join(LINEAR_ATTENTION_RULES)}")
    gated, delta = LINEAR_ATTENTION_RULES[rule]
    for i, name, wanted in ((4, "decay", gated), (5, "beta", delta)):
        if n.has(i) != wanted:
            raise InputError(f"LinearAttention's update_rule '{rule}' {'needs' if wanted else 'takes no'} {name}")
    q_heads, kv_heads = n.attr("q_num_heads"), n.attr("kv_num_heads")
    if not q_heads or not kv_heads or q_heads % kv_heads:
        raise InputError(f"LinearAttention's q_num_heads ({q_heads}) must be a multiple of kv_num_heads ({kv_heads})")
    query, key, value = n(0), n(1), n(2)
    batch, steps, _ = query.type.shape
    if not isinstance(steps, int):
        raise UnsupportedOpError(f"LinearAttention over a sequence of length {steps}, known only at run time: the "
                                 "recurrence is unrolled over its steps", hint="export with a static sequence length")
    d_k, d_v = query.type.shape[2] // q_heads, value.type.shape[2] // kv_heads
    group = q_heads // kv_heads

    def per_step(x: Value, heads: int) -> Value:  # [batch, steps, heads * d] -> [steps, batch, heads, 1, d] in f32
        x = b.op("rt.reshape", [C.widen(b, x)], {"shape": (batch, steps, heads, 1, x.type.shape[2] // heads)})
        return b.op("rt.transpose", [x], {"perm": (1, 0, 2, 3, 4)})

    def at(x: Value, t: int) -> Value:
        return b.op("rt.reshape", [C.slice_axis(b, x, 0, t, t + 1)], {"shape": x.type.shape[1:]})

    q = per_step(query, q_heads)
    q = b.op("rt.reshape", [q], {"shape": (steps, batch, kv_heads, group, d_k)})  # a kv head's query heads together
    k, v = per_step(key, kv_heads), per_step(value, kv_heads)
    decay = beta = None
    if gated:  # [batch, steps, kv_heads] or [.., kv_heads * d_k] -> [steps, batch, kv_heads, 1 or d_k, 1]
        decay = b.op("rt.exp", [per_step(n(4), kv_heads)])
        decay = b.op("rt.transpose", [decay], {"perm": (0, 1, 2, 4, 3)})
    if delta:  # [batch, steps, kv_heads or 1] -> [steps, batch, kv_heads or 1, 1, 1]
        beta = per_step(n(5), n(5).type.shape[2])
    scale = n.attr("scale", 0.0) or 1.0 / np.sqrt(d_k)
    state_shape = (batch, kv_heads, d_k, d_v)
    state = (C.widen(b, n(3)) if n.has(3) else
             b.op("rt.broadcast", [C.scalar(b, 0, C.widen(b, query))], {"shape": state_shape}))
    outputs = []
    for t in range(steps):
        k_t, v_t = at(k, t), at(v, t)  # [batch, kv_heads, 1, d]
        if gated:
            state = b.op("rt.mul", [state, at(decay, t)])
        if delta:
            retrieved = b.op("rt.matmul", [k_t, state])  # S^T k: [batch, kv_heads, 1, d_v]
            v_t = b.op("rt.mul", [at(beta, t), b.op("rt.sub", [v_t, retrieved])])
        k_column = b.op("rt.reshape", [k_t], {"shape": (batch, kv_heads, d_k, 1)})
        state = b.op("rt.add", [state, b.op("rt.mul", [k_column, v_t])])
        outputs.append(b.op("rt.matmul", [at(q, t), state]))  # [batch, kv_heads, group, d_v]
    out = b.op("rt.concat", outputs, {"axis": 2}) if steps > 1 else outputs[0]  # [batch, kv_heads, steps*group, d_v]
    out = b.op("rt.reshape", [out], {"shape": (batch, kv_heads, steps, group, d_v)})
    out = b.op("rt.transpose", [out], {"perm": (0, 2, 1, 3, 4)})
    out = b.op("rt.mul", [out, C.scalar(b, scale, out)])
    out = C.narrow_to(b, b.op("rt.reshape", [out], {"shape": (batch, steps, q_heads * d_v)}), query)
    return [out, C.narrow_to(b, state, n(3) if n.has(3) else query)]
