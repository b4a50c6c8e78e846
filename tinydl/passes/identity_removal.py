"""Identity removal: nodes whose output equals their input go, and readers read the input.

Removed: Identity; Dropout (inference; its mask unused); Cast to the input's own dtype; Add or
Sub of zero and Mul or Div by one (a constant that leaves the other operand's shape and dtype
alone, e.g. the `Mul(x, 1.0)` of exported Swish); Pad by zeros; Transpose by the identity
permutation; Reshape to the input's own static shape.
"""

from __future__ import annotations

import numpy as np

from tinydl.ir.graph import Graph, Node
from tinydl.ops.base import broadcast
from tinydl.passes.rewrite import Accepts, const

NAME = "identity_removal"

# op -> (neutral constant, input positions the constant may take)
_NEUTRAL = {"Add": (0, (0, 1)), "Sub": (0, (1,)), "Mul": (1, (0, 1)), "Div": (1, (1,))}


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    """Remove every pass-through node in one walk, then rename once: linear in the graph's
    size (a chain of 20,000 Identity nodes is removed in one pass)."""
    outputs = {v.name for v in graph.outputs}
    producers = graph.producers()
    used = {i for n in graph.nodes for i in n.inputs} | outputs
    renamed: dict[str, str] = {}

    def resolve(name: str) -> str:
        seen = []
        while name in renamed:
            seen.append(name)
            name = renamed[name]
        for s in seen:
            renamed[s] = name
        return name

    removed: set[int] = set()
    for node in graph.nodes:
        source = _source(graph, node, used)
        if source is None:
            continue
        source, out = resolve(source), node.outputs[0]
        if out in outputs:
            # The output keeps its name: the producer of `source` takes it over.
            if producers.get(source) is None or source in outputs:
                continue
            renamed[source] = out
        else:
            renamed[out] = source
        removed.add(id(node))
    if removed:
        graph.nodes = [n for n in graph.nodes if id(n) not in removed]
        for node in graph.nodes:
            node.inputs = [resolve(i) if i else i for i in node.inputs]
            node.outputs = [resolve(o) if o else o for o in node.outputs]
    return len(removed)


def _source(graph: Graph, node: Node, used: set[str]) -> str | None:
    """The input that `node` passes through unchanged, or None."""
    if any(node.outputs[1:]) and node.op != "Dropout":
        return None
    x = node.inputs[0] if node.inputs else ""
    if node.op == "Identity":
        return x
    if node.op == "Dropout":
        return x if len(node.outputs) < 2 or node.outputs[1] not in used else None
    typed_in, typed_out = graph.value(x), graph.value(node.outputs[0])
    if typed_in is None or typed_out is None or typed_in.dtype is None:
        return None
    if node.op == "Cast":
        return x if typed_in.dtype == typed_out.dtype else None
    if node.op in _NEUTRAL:
        return _neutral_operand(graph, node)
    if node.op == "Pad":
        pads = const(graph, node.inputs[1])
        return x if pads is not None and not pads.any() else None
    if node.op == "Transpose":
        perm = node.attrs["perm"]
        return x if perm is not None and perm == sorted(perm) else None
    if node.op == "Reshape" and typed_in.shape is not None and typed_in.shape == typed_out.shape:
        return x if all(isinstance(d, int) for d in typed_in.shape) else None
    return None


def _neutral_operand(graph: Graph, node: Node) -> str | None:
    neutral, positions = _NEUTRAL[node.op]
    for k in positions:
        c, other = const(graph, node.inputs[k]), graph.value(node.inputs[1 - k])
        if c is None or other is None or other.shape is None or c.dtype.name != other.dtype:
            continue
        if c.ndim <= len(other.shape) and np.all(c == neutral):
            if broadcast(other.shape, c.shape) == tuple(other.shape):
                return other.name
    return None
