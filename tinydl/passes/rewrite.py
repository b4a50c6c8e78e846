"""Graph-editing helpers the passes share: who reads a value, constant inputs, fresh names,
removing a node in favour of one of its inputs, and folding a per-channel affine map into the
weights of the op that produced a value."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tinydl.ir.graph import Graph, Node

# accepts(new, old, graph): may `new` replace the pattern anchored at `old`? The session answers
# with its backends (the backend that would run `old` must also run `new`), so a pass never
# trades ops a backend runs for one it does not. None accepts everything.
Accepts = Callable[[Node, Node, Graph], bool]


def repeat(step: Callable[[], bool | int]) -> int:
    """Apply a step until it rewrites nothing; how many rewrites it made (a step returns
    whether it made one, or how many)."""
    count = 0
    while made := step():
        count += made
    return count


def allowed(accepts: Accepts | None, new: Node, old: Node, graph: Graph) -> bool:
    return accepts is None or accepts(new, old, graph)


def near(value: float | None, target: float) -> bool:
    """value equals target up to float32 rounding (exporters write 1/6 as 0.16666667...)."""
    return value is not None and abs(value - target) <= 1e-5 * max(1.0, abs(target))


class Uses:
    """Producers and readers of every value of a graph, as of when it was built."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer = graph.producers()
        self.readers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}

    def sole_reader(self, value: str, node: Node) -> bool:
        """`node` is the only reader of `value`, which is no graph output: the value may vanish."""
        readers = self.readers.get(value, [])
        return value not in self.outputs and bool(readers) and all(r is node for r in readers)

    def only_read_by(self, value: str, nodes: list[Node]) -> bool:
        readers = self.readers.get(value, [])
        return value not in self.outputs and all(any(r is n for n in nodes) for r in readers)


def value_names(*nodes: Node) -> set[str]:
    """The values `nodes` read and write. A pass that makes several rewrites from one `Uses`
    collects those of every node a rewrite changed, and passes over a later candidate that
    touches one: its readers or producer may have changed (a later look finds it)."""
    return {v for n in nodes for v in (*n.inputs, *n.outputs) if v}


def const(graph: Graph, name: str) -> np.ndarray | None:
    """The value of an input that is an initializer, else None ("" and computed values alike)."""
    return graph.initializers.get(name) if name else None


def scalar(graph: Graph, name: str) -> float | None:
    """The value of a one-element constant input, as a float."""
    value = const(graph, name)
    if value is None or value.size != 1 or value.dtype.kind not in "fiu":
        return None
    return float(value.reshape(()))


def rank(graph: Graph, name: str) -> int | None:
    v = graph.value(name)
    return None if v is None or v.shape is None else len(v.shape)


def fresh_name(graph: Graph, base: str) -> str:
    taken = set(graph.initializers) | {v.name for v in graph.inputs} | set(graph.values)
    taken |= {o for n in graph.nodes for o in n.outputs}
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def add_const(graph: Graph, base: str, value: np.ndarray) -> str:
    name = fresh_name(graph, base)
    graph.initializers[name] = value
    return name


def channel_vector(value: np.ndarray, out_rank: int, channels: int) -> np.ndarray | None:
    """`value` as a float64 vector of `channels` entries when, broadcast against an output of rank
    `out_rank`, it varies along axis 1 at most (a scalar, (C,1,1), (1,C,1,1), ...); else None."""
    if value.ndim > out_rank or value.dtype.kind != "f":
        return None
    shape = (1,) * (out_rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.astype(np.float64).reshape(-1), (channels,))


def output_channels(graph: Graph, node: Node) -> int | None:
    """Output channels of a Conv, ConvTranspose or Gemm whose weight is a constant."""
    w = const(graph, node.inputs[1])
    if w is None:
        return None
    if node.op == "Conv":
        return w.shape[0]
    if node.op == "ConvTranspose":
        return w.shape[1] * node.attrs["group"]
    if node.op == "Gemm":
        return w.shape[0] if node.attrs["transB"] else w.shape[1]
    return None


def fold_output_affine(
    graph: Graph, node: Node, scale: np.ndarray | None, shift: np.ndarray | None
) -> bool:
    """Rewrite a Conv, ConvTranspose or Gemm with constant weights so that it computes
    `out * scale + shift` per output channel (vectors of output-channel length). The weights are
    combined in float64 and stored as new initializers (shared weights stay untouched)."""
    channels = output_channels(graph, node)
    w = const(graph, node.inputs[1])
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    b = const(graph, node.inputs[2]) if has_bias else None
    if channels is None or (has_bias and b is None) or w.dtype.kind != "f":
        return False
    scale = np.ones(channels) if scale is None else scale
    shift = np.zeros(channels) if shift is None else shift
    w64 = w.astype(np.float64)
    if node.op == "Conv":
        w64 = w64 * scale.reshape(-1, *[1] * (w.ndim - 1))
    elif node.op == "ConvTranspose":
        group = node.attrs["group"]
        per_group = scale.reshape(group, 1, -1, *[1] * (w.ndim - 2))
        w64 = (w64.reshape(group, -1, *w.shape[1:]) * per_group).reshape(w.shape)
    else:
        w64 = w64 * (scale[:, None] if node.attrs["transB"] else scale[None, :])
    if node.op == "Gemm":
        # alpha * A'B' + beta * C  ->  alpha * A'(B' scale) + (beta * C * scale + shift)
        c = b.astype(np.float64) * node.attrs["beta"] if b is not None else 0.0
        bias = np.asarray(c * scale + shift)
        node.attrs["beta"] = 1.0
    else:
        bias = (b.astype(np.float64) if b is not None else 0.0) * scale + shift
    node.inputs[1] = add_const(graph, f"{node.name}.weight", w64.astype(w.dtype))
    bias_name = add_const(graph, f"{node.name}.bias", bias.astype(w.dtype))
    node.inputs[2:3] = [bias_name]
    return True
