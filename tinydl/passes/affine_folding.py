"""Affine folding: Mul, Add, Sub and Div by per-channel constants folded into a convolution's
weights, where that is exact.

- After a Conv, ConvTranspose or Gemm (its only reader): y*c, c*y, y/c, y+c, c+y, y-c and c-y
  with c constant per output channel are exact for any padding.
- Before a Conv (its only reader), per input channel: x*c and x/c are exact with any zero
  padding (0*c = 0); x+c and x-c only when the Conv pads nothing, since padded zeros would not
  be shifted. Before a ConvTranspose: x*c and x/c.

PP-OCRv4's MobileOne blocks put a learnable scale and shift after every convolution and
activation; they fold here.
"""

from __future__ import annotations

import numpy as np

from tinydl.ir.graph import Graph, Node
from tinydl.passes.rewrite import (
    Accepts,
    Uses,
    add_const,
    channel_vector,
    const,
    fold_output_affine,
    output_channels,
    repeat,
    value_names,
)

NAME = "affine_folding"
_HOSTS = ("Conv", "ConvTranspose", "Gemm")
_ARITH = ("Mul", "Add", "Sub", "Div")


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    return repeat(lambda: _fold_sweep(graph))


def _fold_sweep(graph: Graph) -> int:
    """Every fold one look at the graph's readers and producers allows (building them was most
    of a fold's cost when each fold made its own): a candidate touching a value an earlier fold
    of this sweep changed waits for the next sweep (`value_names`)."""
    uses = Uses(graph)
    touched: set[str] = set()
    count = 0
    for node in list(graph.nodes):
        if node.op not in _ARITH:
            continue
        for k in (0, 1):
            c = const(graph, node.inputs[1 - k])
            x = node.inputs[k]
            if c is None or c.dtype.kind != "f":
                continue
            host = uses.producer.get(x)
            if host is not None and host.op in _HOSTS and uses.sole_reader(x, node):
                before = value_names(host, node)
                if not before & touched and _fold_after(graph, host, node, c, k):
                    touched |= before | value_names(host)
                    count += 1
                    break
            readers = uses.readers.get(node.outputs[0], [])
            if len(readers) == 1 and uses.sole_reader(node.outputs[0], readers[0]):
                before = value_names(node, readers[0])
                if not before & touched and _fold_before(graph, node, readers[0], c, k):
                    touched |= before | value_names(readers[0])
                    count += 1
                    break
    return count


def _fold_after(graph: Graph, host: Node, node: Node, c: np.ndarray, k: int) -> bool:
    """node = host_output (op) c, with the host output at position k."""
    channels = output_channels(graph, host)
    out = graph.value(host.outputs[0])
    if channels is None or out is None or out.shape is None or c.dtype.name != out.dtype:
        return False
    vec = channel_vector(c, len(out.shape), channels)
    if vec is None:
        return False
    affine = {
        ("Mul", 0): (vec, None),
        ("Mul", 1): (vec, None),
        ("Add", 0): (None, vec),
        ("Add", 1): (None, vec),
        ("Sub", 0): (None, -vec),
        ("Sub", 1): (-np.ones_like(vec), vec),
        ("Div", 0): (1 / vec, None) if np.all(vec != 0) else None,
    }.get((node.op, k))
    if affine is None or not fold_output_affine(graph, host, *affine):
        return False
    host.outputs[0] = node.outputs[0]
    graph.nodes.remove(node)
    return True


def _fold_before(graph: Graph, node: Node, conv: Node, c: np.ndarray, k: int) -> bool:
    """conv reads node = x (op) c, x at position k, as its data input."""
    if conv.op not in ("Conv", "ConvTranspose") or conv.inputs[0] != node.outputs[0]:
        return False
    w = const(graph, conv.inputs[1])
    has_bias = len(conv.inputs) > 2 and conv.inputs[2]
    b = const(graph, conv.inputs[2]) if has_bias else None
    if w is None or (has_bias and b is None) or c.dtype != w.dtype:
        return False
    group = conv.attrs["group"]
    channels = w.shape[1] * group if conv.op == "Conv" else w.shape[0]
    vec = channel_vector(c, w.ndim, channels)
    x = graph.value(node.inputs[k])
    if vec is None or x is None or x.shape is None or len(x.shape) != w.ndim:
        return False
    if (node.op, k) in (("Sub", 1), ("Div", 1)):
        return False
    if node.op in ("Mul", "Div"):
        if node.op == "Div" and not np.all(vec != 0):
            return False
        scale = vec if node.op == "Mul" else 1 / vec
        if conv.op == "Conv":
            # Weight (M, C/group, *K): output channel o of group g reads input g*C/group + j.
            m, cg = w.shape[:2]
            per = scale.reshape(group, 1, cg, *[1] * (w.ndim - 2))
            w_new = w.astype(np.float64).reshape(group, m // group, *w.shape[1:]) * per
        else:
            w_new = w.astype(np.float64) * scale.reshape(-1, *[1] * (w.ndim - 1))
        conv.inputs[1] = add_const(
            graph, f"{conv.name}.weight", w_new.reshape(w.shape).astype(w.dtype)
        )
    else:
        if conv.op != "Conv" or not _pads_nothing(conv):
            return False
        shift = vec if node.op == "Add" else -vec
        m, cg = w.shape[:2]
        per = shift.reshape(group, 1, cg, *[1] * (w.ndim - 2))
        w_g = w.astype(np.float64).reshape(group, m // group, *w.shape[1:])
        extra = (w_g * per).sum(axis=tuple(range(2, w.ndim + 1))).reshape(m)
        bias = (b.astype(np.float64) if b is not None else 0.0) + extra
        conv.inputs[2:3] = [add_const(graph, f"{conv.name}.bias", bias.astype(w.dtype))]
    conv.inputs[0] = node.inputs[k]
    graph.nodes.remove(node)
    return True


def _pads_nothing(conv: Node) -> bool:
    auto_pad = conv.attrs["auto_pad"]
    if auto_pad == "VALID":
        return True
    return auto_pad == "NOTSET" and not any(conv.attrs["pads"] or [])
