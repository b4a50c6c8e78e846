"""Activation patterns: multi-node spellings of HardSwish and GELU become one node.

    x * HardSigmoid(x, alpha=1/6, beta=0.5)
    x * Clip(x + 3, 0, 6) / 6          (also * (1/6), and x * (Clip(x + 3, 0, 6) / 6))
    x * 0.5 * (1 + Erf(x / sqrt(2)))   (the three factors multiplied in any order; also
                                        Erf(x * (1/sqrt(2))))  -> Gelu

Paddle and PyTorch exporters write the second form (PP-OCRv4 has it after most convolutions);
as one node it can then fuse into the convolution before it. PyTorch (before opset 20) and
transformers' BERT-style models export GELU as the third: one Gelu node is one kernel instead
of five.
"""

from __future__ import annotations

import math

from tinydl.ir.graph import Graph, Node
from tinydl.passes.rewrite import Accepts, Uses, allowed, const, near, rank, repeat, scalar

NAME = "activation_patterns"


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    return repeat(lambda: _rewrite_one(graph, accepts))


def _rewrite_one(graph: Graph, accepts: Accepts | None) -> bool:
    uses = Uses(graph)
    for node in graph.nodes:
        for op, attrs, match in (
            ("HardSwish", {}, _hard_swish),
            ("Gelu", {"approximate": "none"}, _gelu),
        ):
            found = match(graph, uses, node)
            if found is None:
                continue
            x, inner = found
            if not all(uses.only_read_by(o, [*inner, node]) for n in inner for o in n.outputs):
                continue
            if not allowed(accepts, Node(op, [x], node.outputs[:1], attrs, node.name), node, graph):
                continue
            for n in inner:
                graph.nodes.remove(n)
            node.op, node.inputs, node.attrs = op, [x], dict(attrs)
            return True
    return False


def _gelu(graph: Graph, uses: Uses, node: Node) -> tuple[str, list[Node]] | None:
    """(x, the pattern's other nodes) when Mul `node` computes x * 0.5 * (1 + Erf(x / sqrt 2))."""
    if node.op != "Mul":
        return None
    # The product's factors: through the Muls whose output only the product reads (x is read
    # by the Div as well, so a Mul that made x stays one factor).
    muls, factors = [], []
    todo = [(v, node) for v in node.inputs]
    while todo and len(factors) <= 3:
        value, parent = todo.pop()
        inner = uses.producer.get(value)
        if inner is not None and inner.op == "Mul" and uses.sole_reader(value, parent):
            muls.append(inner)
            todo += [(v, inner) for v in inner.inputs]
        else:
            factors.append(value)
    halves = [f for f in factors if near(scalar(graph, f), 0.5)]
    others = [f for f in factors if f not in halves]
    if len(factors) != 3 or len(halves) != 1 or len(others) != 2:
        return None
    for one_plus, x in (others, others[::-1]):
        found = _one_plus_erf(graph, uses, one_plus)
        if found is not None and found[0] == x and _keeps_shape(graph, x, halves[0]):
            return x, [*muls, *found[1]]
    return None


def _one_plus_erf(graph: Graph, uses: Uses, value: str) -> tuple[str, list[Node]] | None:
    """(x, nodes) when `value` is 1 + Erf(x / sqrt 2) (or Erf(x * (1 / sqrt 2)) + 1)."""
    add = uses.producer.get(value)
    if add is None or add.op != "Add":
        return None
    for k in (0, 1):
        erf, one = uses.producer.get(add.inputs[k]), add.inputs[1 - k]
        if erf is None or erf.op != "Erf" or not near(scalar(graph, one), 1.0):
            continue
        scaled = uses.producer.get(erf.inputs[0])
        x = _scaled_by(graph, scaled, math.sqrt(2)) if scaled is not None else None
        if x is not None and _keeps_shape(graph, x, one):
            return x, [add, erf, scaled]
    return None


def _scaled_by(graph: Graph, node: Node, divisor: float) -> str | None:
    """The input v when `node` is v / divisor, v * (1/divisor) or (1/divisor) * v."""
    if node.op == "Div" and near(scalar(graph, node.inputs[1]), divisor):
        return node.inputs[0] if _keeps_shape(graph, *node.inputs) else None
    if node.op == "Mul":
        for k in (0, 1):
            v, c = node.inputs[k], node.inputs[1 - k]
            if near(scalar(graph, c), 1 / divisor) and _keeps_shape(graph, v, c):
                return v
    return None


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
    return _scaled_by(graph, node, 6.0)


def _keeps_shape(graph: Graph, x: str, c: str) -> bool:
    """A one-element constant c does not change x's shape when broadcast against it."""
    r = rank(graph, x)
    return r is not None and const(graph, c).ndim <= r
