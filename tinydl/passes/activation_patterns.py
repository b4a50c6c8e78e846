"""Activation patterns: multi-node spellings of HardSwish become one HardSwish node.

    x * HardSigmoid(x, alpha=1/6, beta=0.5)
    x * Clip(x + 3, 0, 6) / 6          (also * (1/6), and x * (Clip(x + 3, 0, 6) / 6))

Paddle and PyTorch exporters write the second form (PP-OCRv4 has it after most convolutions);
as one node it can then fuse into the convolution before it.
"""

from __future__ import annotations

from tinydl.ir.graph import Graph, Node
from tinydl.passes.rewrite import Accepts, Uses, allowed, const, near, rank, repeat, scalar

NAME = "activation_patterns"


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    return repeat(lambda: _rewrite_one(graph, accepts))


def _rewrite_one(graph: Graph, accepts: Accepts | None) -> bool:
    uses = Uses(graph)
    for node in graph.nodes:
        found = _hard_swish(graph, uses, node)
        if found is None:
            continue
        x, inner = found
        if not all(uses.only_read_by(o, [*inner, node]) for n in inner for o in n.outputs):
            continue
        if not allowed(
            accepts, Node("HardSwish", [x], node.outputs[:1], {}, node.name), node, graph
        ):
            continue
        for n in inner:
            graph.nodes.remove(n)
        node.op, node.inputs, node.attrs = "HardSwish", [x], {}
        return True
    return False


def _hard_swish(graph: Graph, uses: Uses, node: Node) -> tuple[str, list[Node]] | None:
    """(x, the pattern's other nodes) when `node` computes hard_swish(x)."""
    if node.op == "Mul":
        for a, b in (node.inputs, node.inputs[::-1]):
            found = _hard_sigmoid(graph, uses, b)
            if found is not None and found[0] == a:
                return found
    scaled = _scaled_by_sixth(graph, node)
    product = uses.producer.get(scaled) if scaled else None
    if product is not None and product.op == "Mul":
        for a, b in (product.inputs, product.inputs[::-1]):
            found = _relu6_of_plus_3(graph, uses, b)
            if found is not None and found[0] == a:
                return a, [*found[1], product]
    return None


def _hard_sigmoid(graph: Graph, uses: Uses, value: str) -> tuple[str, list[Node]] | None:
    """(x, nodes) when `value` is HardSigmoid(x, 1/6, 0.5) or Clip(x + 3, 0, 6) / 6."""
    node = uses.producer.get(value)
    if node is None:
        return None
    if node.op == "HardSigmoid":
        if near(node.attrs["alpha"], 1 / 6) and near(node.attrs["beta"], 0.5):
            return node.inputs[0], [node]
        return None
    scaled = _scaled_by_sixth(graph, node)
    found = _relu6_of_plus_3(graph, uses, scaled) if scaled else None
    return (found[0], [*found[1], node]) if found else None


def _relu6_of_plus_3(graph: Graph, uses: Uses, value: str) -> tuple[str, list[Node]] | None:
    clip = uses.producer.get(value)
    if clip is None or clip.op != "Clip" or len(clip.inputs) != 3:
        return None
    lo, hi = scalar(graph, clip.inputs[1]), scalar(graph, clip.inputs[2])
    add = uses.producer.get(clip.inputs[0])
    if lo != 0 or hi != 6 or add is None or add.op != "Add":
        return None
    for k in (0, 1):
        x, three = add.inputs[k], add.inputs[1 - k]
        if near(scalar(graph, three), 3.0) and _keeps_shape(graph, x, three):
            return x, [add, clip]
    return None


def _scaled_by_sixth(graph: Graph, node: Node) -> str | None:
    """The input v when `node` is v / 6, v * (1/6) or (1/6) * v."""
    if node.op == "Div" and near(scalar(graph, node.inputs[1]), 6.0):
        return node.inputs[0] if _keeps_shape(graph, *node.inputs) else None
    if node.op == "Mul":
        for k in (0, 1):
            v, c = node.inputs[k], node.inputs[1 - k]
            if near(scalar(graph, c), 1 / 6) and _keeps_shape(graph, v, c):
                return v
    return None


def _keeps_shape(graph: Graph, x: str, c: str) -> bool:
    """A one-element constant c does not change x's shape when broadcast against it."""
    r = rank(graph, x)
    return r is not None and const(graph, c).ndim <= r
