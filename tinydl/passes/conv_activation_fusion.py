"""Conv + activation fusion: a Conv (with its bias) and the activation that is the only reader of
its output become one tinydl.FusedConv (ops/fused.py).

Activations: every op of tinydl.ops.activation.ACTIVATIONS (Clip with constant bounds; PRelu's
slope becomes input 3), y * Sigmoid(y) as SiLU and y * HardSigmoid(y) with alpha 1/6, beta 0.5
as HardSwish. Bias adds and BatchNormalization have been folded into the Conv by the passes that
run before this one.
"""

from __future__ import annotations

from tinydl.ir.graph import Graph, Node
from tinydl.ops.activation import ACTIVATION_OPS, ACTIVATIONS, activation_params
from tinydl.ops.base import broadcast
from tinydl.passes.rewrite import Accepts, Uses, allowed, near, repeat, value_names

NAME = "conv_activation_fusion"


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    return repeat(lambda: _fuse_sweep(graph, accepts))


def _fuse_sweep(graph: Graph, accepts: Accepts | None) -> int:
    """Every fusion one look at the graph's readers allows; one touching a value an earlier
    fusion of this sweep changed waits for the next sweep (`value_names`)."""
    uses = Uses(graph)
    touched: set[str] = set()
    count = 0
    for conv in list(graph.nodes):
        y = conv.outputs[0]
        if conv.op != "Conv" or y in uses.outputs:
            continue
        found = _activation(graph, uses, y)
        if found is None:
            continue
        last, removed, attrs, slope = found
        names = value_names(conv, *removed)
        if names & touched:
            continue
        padded = [*conv.inputs, *[""] * (3 - len(conv.inputs))]
        fused = Node(
            "tinydl.FusedConv",
            [*padded, slope] if slope else list(conv.inputs),
            [last.outputs[0]],
            {**conv.attrs, **attrs},
            conv.name,
            {**conv.meta, "fused": [n.name for n in removed]},
        )
        if not allowed(accepts, fused, conv, graph):
            continue
        graph.nodes[graph.nodes.index(conv)] = fused
        for n in removed:
            graph.nodes.remove(n)
        touched |= names
        count += 1
    return count


def _activation(graph: Graph, uses: Uses, y: str):
    """(last node, nodes fused away, FusedConv attributes, slope input) for the activation that
    reads y, or None."""
    readers = uses.readers.get(y, [])
    if len(readers) == 1:
        act = readers[0]
        attrs = _single(graph, act)
        if attrs is None or act.inputs[0] != y:
            return None
        slope = act.inputs[1] if ACTIVATIONS[act.op].slope else ""
        if slope and not _slope_fits(graph, y, slope):
            return None
        return act, [act], attrs, slope
    if len(readers) == 2:
        # y * Sigmoid(y) or y * HardSigmoid(y): the gate's only reader is the Mul.
        gate, mul = sorted(readers, key=lambda n: n.op == "Mul")
        if mul.op != "Mul" or sorted(mul.inputs) != sorted([y, gate.outputs[0]]):
            return None
        if not uses.sole_reader(gate.outputs[0], mul) or gate.inputs[0] != y:
            return None
        if gate.op == "Sigmoid":
            return mul, [gate, mul], {"activation": "SiLU"}, ""
        if gate.op == "HardSigmoid" and near(gate.attrs["alpha"], 1 / 6):
            if near(gate.attrs["beta"], 0.5):
                return mul, [gate, mul], {"activation": "HardSwish"}, ""
    return None


def _single(graph: Graph, act: Node) -> dict | None:
    """FusedConv's attributes for activation node `act`: its name and parameters."""
    if act.op not in ACTIVATION_OPS:
        return None
    params = activation_params(act, graph.initializers.get)
    if params is None:
        return None
    return {"activation": act.op, **params}


def _slope_fits(graph: Graph, y: str, slope: str) -> bool:
    """The slope broadcasts to the conv output without growing it (FusedConv's contract)."""
    out, s = graph.value(y), graph.value(slope)
    if out is None or s is None or out.shape is None or s.shape is None:
        return False
    return len(s.shape) <= len(out.shape) and broadcast(out.shape, s.shape) == tuple(out.shape)
