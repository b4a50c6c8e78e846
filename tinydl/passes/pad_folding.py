"""Pad folding: a constant Pad of the spatial axes in front of Conv or pooling ops (its only
readers, one or several) becomes each op's own `pads`.

Exact when the padded value is what the op pads with: zeros for Conv; zeros for AveragePool
when padding counts as data (count_include_pad=1, which is set when the pool had no pads of its
own); -inf for MaxPool. Pools must not use ceil_mode (its output size depends on where the
padding is), and pool pads must stay smaller than the window.
"""

from __future__ import annotations

import math

from tinydl.ir.graph import Graph, Node
from tinydl.ops.resize import _pad_widths
from tinydl.passes.rewrite import Accepts, Uses, const, rank, repeat, scalar

NAME = "pad_folding"
_CONVS = ("Conv", "tinydl.FusedConv")


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    return repeat(lambda: _fold_one(graph))


def _fold_one(graph: Graph) -> bool:
    uses = Uses(graph)
    for pad in graph.nodes:
        if pad.op != "Pad" or pad.attrs["mode"] != "constant":
            continue
        hosts = uses.readers.get(pad.outputs[0], [])
        # Every reader takes the padding itself (a Pad shared by a block's two branches, as in
        # MediaPipe's pose detector): each gets its own pads, and the Pad goes.
        if not hosts or not uses.only_read_by(pad.outputs[0], hosts):
            continue
        widths = _spatial_widths(graph, pad)
        if widths is None:
            continue
        folded = [_folded_pads(graph, pad, host, widths) for host in hosts]
        if any(p is None for p in folded):
            continue
        for host, pads in zip(hosts, folded, strict=True):
            if host.op == "AveragePool":
                host.attrs["count_include_pad"] = 1
            host.attrs["pads"] = pads
            host.inputs[0] = pad.inputs[0]
        graph.nodes.remove(pad)
        return True
    return False


def _folded_pads(graph: Graph, pad: Node, host: Node, widths) -> list[int] | None:
    """The pads `host` takes with the Pad's folded in, or None when it cannot take them."""
    if host.inputs[0] != pad.outputs[0] or pad.outputs[0] in host.inputs[1:]:
        return None
    if host.attrs.get("auto_pad") != "NOTSET" or not _fill_fits(graph, pad, host):
        return None
    n = len(widths)
    own = host.attrs["pads"] or [0] * (2 * n)
    pads = [own[i] + widths[i][0] for i in range(n)] + [own[n + i] + widths[i][1] for i in range(n)]
    if host.op in ("AveragePool", "MaxPool"):
        if host.attrs["ceil_mode"] or not _inside_window(host, pads):
            return None
        if host.op == "AveragePool" and not host.attrs["count_include_pad"] and any(own):
            return None
    return pads


def _spatial_widths(graph: Graph, pad: Node) -> list[tuple[int, int]] | None:
    """(begin, end) per spatial axis when the Pad is constant, non-negative, and leaves the batch
    and channel axes alone."""
    pads = const(graph, pad.inputs[1])
    axes_name = pad.inputs[3] if len(pad.inputs) > 3 else ""
    axes = const(graph, axes_name)
    r = rank(graph, pad.inputs[0])
    if pads is None or (axes_name and axes is None) or r is None or r < 3:
        return None
    widths = _pad_widths(r, pads, axes)
    if any(b < 0 or e < 0 for b, e in widths) or widths[0] != (0, 0) or widths[1] != (0, 0):
        return None
    return widths[2:]


def _fill_fits(graph: Graph, pad: Node, host: Node) -> bool:
    name = pad.inputs[2] if len(pad.inputs) > 2 else ""
    fill = scalar(graph, name) if name else 0.0
    if fill is None:
        return False
    if host.op == "MaxPool":
        return fill == -math.inf
    return fill == 0 and host.op in (*_CONVS, "AveragePool")


def _inside_window(pool: Node, pads: list[int]) -> bool:
    """Every pool window must hold some data (the pooling ops refuse pads as large as it)."""
    kernel = pool.attrs["kernel_shape"]
    dilations = pool.attrs["dilations"] or [1] * len(kernel)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    n = len(kernel)
    return all(max(pads[i], pads[n + i]) < spans[i] for i in range(n))
