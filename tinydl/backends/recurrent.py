"""LSTM, GRU and RNN on the GPU backends: what both backends' kernels share.

A node runs as one dispatch that sets the states (initial_h/initial_c or zeros), then one per
time step, then one that writes Y_h/Y_c. A step has a thread per (direction, batch entry,
hidden unit): it computes its gates' input and recurrent products itself (f32 accumulation),
applies the cell and writes h_t into Y. The hidden state lives in two buffers used in turn (a
step reads every unit of h_{t-1} while writing h_t); the cell state is updated in place. A GRU
without linear_before_reset needs r ⊙ h_{t-1} for every unit before its candidate: one more
dispatch per step. Past an entry's sequence length its state is kept and Y gets zeros; the
reverse direction runs each entry from its own last step, as the reference does.

The weights (W, R, B, P) must be constants: they are packed into one float32 table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinydl.backends.base import Support
from tinydl.ops.recurrent import _ACTIVATIONS, _DIRECTIONS, _KINDS

# Per activation (lower-cased, as the op names them): its expression of x, alpha a and beta b
# in each backend's spelling (WGSL, CUDA C); a, b come from the reference's defaults and lists.
ACTIVATIONS = {
    "relu": ("max(x, 0.0)", "fmaxf(x, 0.0f)"),
    "tanh": ("tanh_1(x)", "tanhf(x)"),
    "sigmoid": ("0.5 * (tanh_1(0.5 * x) + 1.0)", "0.5f * (tanhf(0.5f * x) + 1.0f)"),
    "affine": ("a * x + b", "a * x + b"),
    "leakyrelu": ("select(a * x, x, x >= 0.0)", "(x >= 0.0f ? x : a * x)"),
    "thresholdedrelu": ("select(0.0, x, x > a)", "(x > a ? x : 0.0f)"),
    "scaledtanh": ("a * tanh_1(b * x)", "a * tanhf(b * x)"),
    "hardsigmoid": ("clamp(a * x + b, 0.0, 1.0)", "fminf(fmaxf(a * x + b, 0.0f), 1.0f)"),
    "elu": ("select(a * (exp(min(x, 0.0)) - 1.0), x, x >= 0.0)", "(x >= 0.0f ? x : a * expm1f(x))"),
    "softsign": ("x / (1.0 + abs(x))", "x / (1.0f + fabsf(x))"),
    "softplus": ("softplus_1(x)", "softplus_(x)"),
}
assert ACTIVATIONS.keys() == _ACTIVATIONS.keys()


def _constants(node, graph):
    return [graph.initializers.get(n) if n else None for n in node.inputs]


def supports(node, graph) -> Support:
    for i in (1, 2, 3, 7):
        if i < len(node.inputs) and node.inputs[i] and node.inputs[i] not in graph.initializers:
            return Support(
                False, f"{node.op} needs its weights constant; '{node.inputs[i]}' is computed"
            )
    return Support(True)


@dataclass
class Recurrent:
    op: str
    seq: int
    batch: int
    inputs: int
    hidden: int
    directions: list[bool]  # reverse, per direction
    gates: int
    layout: int
    clip: float | None
    acts: list[list[tuple[str, float, float]]]  # per direction, per function: (name, a, b)
    table: np.ndarray  # float32: W, R, B (zeros when absent), P (when given)
    offsets: dict[str, int]
    has_lens: bool
    has_init: list[bool]  # initial_h, initial_c
    input_forget: int
    linear_before_reset: int

    @property
    def threads(self) -> int:
        return len(self.directions) * self.batch * self.hidden


def geometry(b) -> Recurrent:
    node, attrs = b.node, b.attrs
    x = b.info(0).shape
    seq, batch = (x[1], x[0]) if attrs["layout"] else (x[0], x[1])
    w, r = b.const(1).astype(np.float32), b.const(2).astype(np.float32)
    nd, gh = w.shape[0], w.shape[1]
    gates = _KINDS[node.op][0]
    hidden = gh // gates
    bias = b.const(3)
    bias = np.zeros((nd, 2 * gh), np.float32) if bias is None else bias.astype(np.float32)
    parts = {"w": w, "r": r, "b": bias}
    peep = b.const(7) if node.op == "LSTM" else None
    if peep is not None:
        parts["p"] = peep.astype(np.float32)
    offsets, at = {}, 0
    for key, arr in parts.items():
        offsets[key] = at
        at += arr.size
    return Recurrent(
        op=node.op,
        seq=seq,
        batch=batch,
        inputs=x[2],
        hidden=hidden,
        directions=list(_DIRECTIONS[attrs["direction"]]),
        gates=gates,
        layout=attrs["layout"],
        clip=attrs["clip"],
        acts=_activation_params(node.op, attrs, nd),
        table=np.concatenate([a.ravel() for a in parts.values()]),
        offsets=offsets,
        has_lens=b.has(4),
        has_init=[b.has(5), node.op == "LSTM" and b.has(6)],
        input_forget=attrs.get("input_forget", 0),
        linear_before_reset=attrs.get("linear_before_reset", 0),
    )


def _activation_params(op: str, attrs: dict, nd: int) -> list[list[tuple[str, float, float]]]:
    """(name, alpha, beta) per function per direction, taken from the lists as the reference
    (tinydl/ops/recurrent.py) takes them."""
    default = _KINDS[op][1]
    names = attrs["activations"] or list(default) * nd
    alphas, betas = list(attrs["activation_alpha"] or []), list(attrs["activation_beta"] or [])
    out = []
    for name in names:
        _, n_alpha, n_beta, alpha, beta = _ACTIVATIONS[name.lower()]
        alpha = alphas.pop(0) if n_alpha and alphas else alpha
        beta = betas.pop(0) if n_beta and betas else beta
        out.append((name.lower(), float(alpha), float(beta)))
    per = len(default)
    return [out[d * per : (d + 1) * per] for d in range(nd)]
