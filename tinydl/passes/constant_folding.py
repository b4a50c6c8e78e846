"""Constant folding: every node whose outputs are known without running the model becomes
initializers.

Shape inference (`ops.base.infer_graph`) already computes constants while it types the graph:
Constant nodes, Shape of a static shape, and any non-windowed op whose inputs are all constant
(`Shape -> Cast -> Slice -> Concat -> Reshape` chains). This pass asks it for those values with a
larger size bound than loading uses (weights, e.g. a Transpose of a weight matrix, fold too) and
turns the nodes into initializers. Shape chains that read only the static dims of a tensor whose
other dims are symbolic (`Shape(x)[1:2]` of an `N x 120 x H x W` tensor) are resolved here as
well, by running the same references over partially known shape vectors.
"""

from __future__ import annotations

import numpy as np

from tinydl.ir.graph import Graph
from tinydl.ops import schema_of
from tinydl.ops.base import infer_graph
from tinydl.passes.rewrite import Accepts

NAME = "constant_folding"
# Largest tensor (elements) the pass creates or reads: 64 MiB of float32, a large layer's
# weights (NF-ResNet's weight standardization, a training-mode BatchNormalization of each conv's
# weights, folds to the standardized weights; at 1 << 20 its last stages' did not).
FOLD_LIMIT = 1 << 24
# Ops that only move the elements of a shape vector, and the longest vector followed.
_SHAPE_MOVES = {"Slice", "Concat", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Cast", "Flatten"}
_SHAPE_LEN = 64


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    folded = 0
    while True:
        known = infer_graph(graph, fold_limit=FOLD_LIMIT)
        values = {name: t.value for name, t in known.items() if t.value is not None}
        values.update(_static_shape_parts(graph, known))
        keep = []
        for node in graph.nodes:
            outs = [o for o in node.outputs if o]
            if all(o in values for o in outs):
                for o in outs:
                    graph.initializers[o] = np.asarray(values[o], dtype=known[o].dtype)
                folded += 1
            else:
                keep.append(node)
        if len(keep) == len(graph.nodes):
            return folded
        graph.nodes = keep


def _static_shape_parts(graph: Graph, known) -> dict[str, np.ndarray]:
    """Shape vectors with some symbolic dims, followed through the ops of _SHAPE_MOVES as object
    arrays holding None for an unknown dim; those that end up fully known, by value name."""
    partial: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        out = node.outputs[0]
        if known[out].value is not None:
            continue
        if node.op == "Shape":
            shape = known[node.inputs[0]].shape
            if shape is not None:
                dims = [d if isinstance(d, int) else None for d in shape]
                partial[out] = np.array(dims[node.attrs["start"] : node.attrs["end"]], object)
            continue
        if node.op not in _SHAPE_MOVES or not any(i in partial for i in node.inputs):
            continue
        if node.op == "Cast" and not (known[out].dtype or "").startswith(("int", "uint")):
            continue
        args = []
        for name in node.inputs:
            if not name:
                args.append(None)
            elif name in partial:
                args.append(partial[name])
            elif known[name].value is not None:
                args.append(np.asarray(known[name].value))
            else:
                break
        else:
            if node.op == "Cast":
                result = args[0]
            else:
                try:
                    result = schema_of(node.op).run(node, args)[0]
                except (ValueError, TypeError, IndexError):
                    continue
            if result.size <= _SHAPE_LEN:
                partial[out] = result
    return {
        name: np.array(value.tolist(), np.int64)
        for name, value in partial.items()
        if all(isinstance(d, int) for d in value.ravel())
    }
