"""Recurrent layers: LSTM, GRU and RNN (one layer; forward, reverse or bidirectional).

The time loop is sequential by nature; each step is vectorized over batch and hidden units. A
batch entry shorter than the sequence (sequence_lens) keeps its state past its end and gives
zeros in Y; the reverse direction runs each entry from its own last step back to its first.
"""

from __future__ import annotations

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, op

# Activation functions the recurrent ops name, lower-cased as onnxruntime matches them:
# (reference(x, alpha, beta), how many of alpha and beta it consumes, their defaults: zero but
# for LeakyRelu, HardSigmoid and Elu, as in onnxruntime).
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0, 0, 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), 0, 0, 0.0, 0.0),
    "sigmoid": (lambda x, a, b: 0.5 * (np.tanh(0.5 * x) + 1), 0, 0, 0.0, 0.0),
    "affine": (lambda x, a, b: a * x + b, 1, 1, 0.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 1, 0, 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1, 0, 0.0, 0.0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1, 1, 0.0, 0.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 1, 1, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), 1, 0, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, 0, 0.0, 0.0),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), 0, 0, 0.0, 0.0),
}
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
_ATTRS = {
    "activation_alpha": Attr("floats", None),
    "activation_beta": Attr("floats", None),
    "activations": Attr("strings", None),
    "clip": Attr("float", None),
    "direction": Attr("string", "forward"),
    "hidden_size": Attr("int", None),
    "layout": Attr("int", 0),
}
# Op -> (gates, default activations of one direction).
_KINDS = {
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "RNN": (1, ("Tanh",)),
}


def _activations(op_name: str, attrs: dict, directions: int):
    """The activation functions per direction, with alpha and beta taken in order by the
    functions that use them (as onnxruntime reads the lists)."""
    default = _KINDS[op_name][1]
    names = attrs["activations"] or list(default) * directions
    if len(names) != len(default) * directions:
        raise ValueError(
            f"activations must name {len(default)} function(s) per direction "
            f"({len(default) * directions} for {attrs['direction']}), got {names}"
        )
    alphas, betas = list(attrs["activation_alpha"] or []), list(attrs["activation_beta"] or [])
    funcs = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ValueError(f"unknown activation '{name}' (known: {', '.join(_ACTIVATIONS)})")
        fn, n_alpha, n_beta, alpha, beta = entry
        alpha = alphas.pop(0) if n_alpha and alphas else alpha
        beta = betas.pop(0) if n_beta and betas else beta
        funcs.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, x.dtype.type(a), x.dtype.type(b)))
    return [funcs[d * len(default) : (d + 1) * len(default)] for d in range(directions)]


def _recurrent_infer(ctx: InferContext) -> list[TensorType]:
    gates = _KINDS[ctx.node.op][0]
    attrs = ctx.attrs
    if attrs["direction"] not in _DIRECTIONS:
        raise ctx.fail(
            f"direction must be one of {', '.join(_DIRECTIONS)}, got {attrs['direction']}"
        )
    if attrs["layout"] not in (0, 1):
        raise ctx.fail(f"layout must be 0 or 1, got {attrs['layout']}")
    nd = len(_DIRECTIONS[attrs["direction"]])
    _activations(ctx.node.op, attrs, nd)
    x, w, r = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    hidden = attrs["hidden_size"]
    if hidden is None and r is not None:
        hidden = r[-1]
    if w is not None and len(w) == 3 and isinstance(w[0], int) and w[0] != nd:
        raise ctx.fail(f"W has {w[0]} direction(s), direction '{attrs['direction']}' needs {nd}")
    if w is not None and isinstance(w[1], int) and isinstance(hidden, int):
        if w[1] != gates * hidden:
            raise ctx.fail(f"W {w} needs {gates} * hidden_size ({hidden}) rows")
    if x is None or len(x) != 3:
        if x is not None:
            raise ctx.fail(f"X must be 3-D, got {x}")
        seq = batch = None
    else:
        seq, batch = (x[1], x[0]) if attrs["layout"] else (x[0], x[1])
    dtype = ctx.dtype(0)
    if attrs["layout"]:
        y, state = (batch, seq, nd, hidden), (batch, nd, hidden)
    else:
        y, state = (seq, nd, batch, hidden), (nd, batch, hidden)
    return [TensorType(dtype, y)] + [TensorType(dtype, state)] * (len(ctx.node.outputs) - 1)


def _time_index(seq: int, lens: np.ndarray, reverse: bool) -> np.ndarray:
    """[seq, batch] positions of each step: reversed within each entry's own length."""
    t = np.arange(seq)[:, None]
    if not reverse:
        return np.broadcast_to(t, (seq, len(lens)))
    return np.where(t < lens, lens - 1 - t, t)


def _run(op_name, x, w, r, b, lens, initial, attrs, step):
    """The shared frame: layout, directions, sequence lengths and the time loop. `initial`
    holds the optional initial states; `step(xw_t, states, rw, rb, acts, clip, direction)`
    returns the new states, the hidden one first. Returns Y and the final states (each
    [nd, batch, H])."""
    ct = np.promote_types(x.dtype, np.float32)
    layout = attrs["layout"]
    if layout:
        x = x.transpose(1, 0, 2)
        initial = [None if s is None else s.transpose(1, 0, 2) for s in initial]
    seq, batch, _ = x.shape
    gates = _KINDS[op_name][0]
    hidden = r.shape[-1]
    directions = _DIRECTIONS[attrs["direction"]]
    acts = _activations(op_name, attrs, len(directions))
    if w.shape[0] != len(directions) or w.shape[1] != gates * hidden:
        raise ValueError(f"W {w.shape} does not fit {len(directions)} direction(s) of {hidden}")
    lens = np.full(batch, seq, np.int64) if lens is None else lens.astype(np.int64)
    if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
        raise ValueError(f"sequence_lens {lens.tolist()} must be {batch} lengths in 0..{seq}")
    if b is None:
        b = np.zeros((len(directions), 2 * gates * hidden), ct)
    clip = attrs["clip"]
    x, w, r, b = (a.astype(ct, copy=False) for a in (x, w, r, b))
    ys, finals = [], []
    for d, reverse in enumerate(directions):
        index = _time_index(seq, lens, reverse)
        xd = np.take_along_axis(x, index[:, :, None], axis=0)
        xw = xd @ w[d].T + b[d, : gates * hidden]
        states = [np.zeros((batch, hidden), ct) if s is None else s[d].astype(ct) for s in initial]
        y = np.zeros((seq, batch, hidden), ct)
        for t in range(seq):
            new = step(xw[t], states, r[d], b[d, gates * hidden :], acts[d], clip, d)
            live = (t < lens)[:, None]
            states = [np.where(live, n, s) for n, s in zip(new, states, strict=True)]
            y[t] = np.where(live, states[0], 0)
        out = np.empty_like(y)
        np.put_along_axis(out, index[:, :, None], y, axis=0)
        ys.append(out)
        finals.append(states)
    y = np.stack(ys, axis=1)  # [seq, nd, batch, H]
    finals = [np.stack(s) for s in zip(*finals, strict=True)]  # each [nd, batch, H]
    if layout:
        y = y.transpose(2, 0, 1, 3)
        finals = [s.transpose(1, 0, 2) for s in finals]
    return (y, *finals)


def _clipped(v, clip):
    return v if clip is None else np.clip(v, -clip, clip)


@op(
    "LSTM",
    types={0: "float", 4: "index"},
    same_dtype=(0, 1, 2, 3, 5, 6, 7),
    inputs=(3, 8),
    outputs=(1, 3),
    attrs={**_ATTRS, "input_forget": Attr("int", 0)},
    infer=_recurrent_infer,
)
def lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, **attrs):
    """LSTM with gates in iofc order, optional peepholes P (iof) and coupled input and forget
    gates (input_forget); returns Y, Y_h, Y_c."""
    hidden = r.shape[-1]

    def step(xw, states, rw, rb, acts, clip, d):
        f, g, h = acts
        h_prev, c_prev = states
        gates = xw + h_prev @ rw.T + rb
        i, o, fg, c = np.split(gates, 4, axis=-1)
        if p is not None:
            peep = p[d].astype(gates.dtype)
            i = i + peep[:hidden] * c_prev
            fg = fg + peep[2 * hidden :] * c_prev
        i = f(_clipped(i, clip))
        fg = 1 - i if attrs["input_forget"] else f(_clipped(fg, clip))
        c_new = fg * c_prev + i * g(_clipped(c, clip))
        if p is not None:
            o = o + p[d, hidden : 2 * hidden].astype(gates.dtype) * c_new
        return [f(_clipped(o, clip)) * h(c_new), c_new]

    y, y_h, y_c = _run("LSTM", x, w, r, b, sequence_lens, [initial_h, initial_c], attrs, step)
    return y.astype(x.dtype), y_h.astype(x.dtype), y_c.astype(x.dtype)


@op(
    "GRU",
    types={0: "float", 4: "index"},
    same_dtype=(0, 1, 2, 3, 5),
    inputs=(3, 6),
    outputs=(1, 2),
    attrs={**_ATTRS, "linear_before_reset": Attr("int", 0)},
    infer=_recurrent_infer,
)
def gru(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    """GRU with gates in zrh order; linear_before_reset applies the reset gate after the
    recurrent product; returns Y, Y_h."""
    hidden = r.shape[-1]

    def step(xw, states, rw, rb, acts, clip, d):
        f, g = acts
        (h_prev,) = states
        zr = xw[:, : 2 * hidden] + h_prev @ rw[: 2 * hidden].T + rb[: 2 * hidden]
        z, rg = np.split(f(_clipped(zr, clip)), 2, axis=-1)
        rh, rbh = rw[2 * hidden :], rb[2 * hidden :]
        if attrs["linear_before_reset"]:
            hh = xw[:, 2 * hidden :] + rg * (h_prev @ rh.T + rbh)
        else:
            hh = xw[:, 2 * hidden :] + (rg * h_prev) @ rh.T + rbh
        hh = g(_clipped(hh, clip))
        return [(1 - z) * hh + z * h_prev]

    y, y_h = _run("GRU", x, w, r, b, sequence_lens, [initial_h], attrs, step)
    return y.astype(x.dtype), y_h.astype(x.dtype)


@op(
    "RNN",
    types={0: "float", 4: "index"},
    same_dtype=(0, 1, 2, 3, 5),
    inputs=(3, 6),
    outputs=(1, 2),
    attrs=_ATTRS,
    infer=_recurrent_infer,
)
def rnn(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    """Simple RNN: H = f(X W^T + H R^T + Wb + Rb); returns Y, Y_h."""

    def step(xw, states, rw, rb, acts, clip, d):
        (f,) = acts
        return [f(_clipped(xw + states[0] @ rw.T + rb, clip))]

    y, y_h = _run("RNN", x, w, r, b, sequence_lens, [initial_h], attrs, step)
    return y.astype(x.dtype), y_h.astype(x.dtype)
