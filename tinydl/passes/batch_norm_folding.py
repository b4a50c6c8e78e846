"""BatchNormalization folding: an inference-mode BatchNormalization right after a Conv,
ConvTranspose or Gemm with constant weights becomes part of those weights.

BN(y) = y * k + (beta - mean * k) per channel, with k = scale / sqrt(var + epsilon): a per-channel
affine map, folded into the weights and bias in float64 (rewrite.fold_output_affine).
"""

from __future__ import annotations

import numpy as np

from tinydl.ir.graph import Graph, Node
from tinydl.passes.rewrite import (
    Accepts,
    Uses,
    const,
    fold_output_affine,
    output_channels,
    repeat,
    value_names,
)

NAME = "batch_norm_folding"
_HOSTS = ("Conv", "ConvTranspose", "Gemm")


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    return repeat(lambda: _fold_sweep(graph))


def _fold_sweep(graph: Graph) -> int:
    """Every fold one look at the graph's readers allows; one touching a value an earlier fold
    of this sweep changed waits for the next sweep (`value_names`)."""
    uses = Uses(graph)
    touched: set[str] = set()
    count = 0
    for bn in list(graph.nodes):
        if bn.op != "BatchNormalization" or any(bn.outputs[1:]) or bn.attrs.get("training_mode"):
            continue
        host = uses.producer.get(bn.inputs[0])
        if host is None or host.op not in _HOSTS or not uses.sole_reader(bn.inputs[0], bn):
            continue
        names = value_names(host, bn)
        if names & touched:
            continue
        affine = _affine(graph, bn, output_channels(graph, host))
        if affine is None or not fold_output_affine(graph, host, *affine):
            continue
        host.outputs[0] = bn.outputs[0]
        graph.nodes.remove(bn)
        touched |= names | value_names(host)
        count += 1
    return count


def _affine(graph: Graph, bn: Node, channels: int | None):
    params = [const(graph, name) for name in bn.inputs[1:]]
    if channels is None or any(p is None or p.shape != (channels,) for p in params):
        return None
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    k = scale / np.sqrt(var + bn.attrs["epsilon"])
    return k, beta - mean * k
