"""Geometry of the GPU kernels that read indices or running state at run time: CumSum, OneHot,
ScatterElements, ScatterND and GatherND with computed indices. Each function returns the
template parameters both GPU backends render (one thread per output element, or per line for
CumSum); the backends add only their storage and compute types.

Scatters run as gathers: each output element starts from `data` and applies, in the reference's
order, every update that targets it. No atomics, so every reduction and every dtype works and
results are deterministic (a repeated index with reduction "none" keeps its last update, as the
reference does); the cost is a scan per output element, bounded by `SCATTER_ND_MAX`.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.indexing import strides_of
from tinydl.backends.planned import constant_inputs, shape_derived
from tinydl.ops.base import normalize_axis

# ScatterND: each output element compares its position with every index tuple; past this many
# tuples the scan is refused (the cpu backend scatters directly).
SCATTER_ND_MAX = 65536


def cumsum(b) -> dict:
    """Lines along the axis: `lines` of length `L`, elements `inner` apart."""
    shape = b.info(0).shape
    axis = normalize_axis(int(np.ravel(b.const(1))[0]), len(shape))
    inner = math.prod(shape[axis + 1 :])
    return {
        "lines": math.prod(shape[:axis]) * inner,
        "L": shape[axis],
        "inner": inner,
        "exclusive": int(b.attrs["exclusive"]),
        "reverse": int(b.attrs["reverse"]),
    }


def cumsum_supports(node, graph) -> Support:
    return constant_inputs(node, graph)


def one_hot(b) -> dict:
    """Output (outer, depth, inner): element (o, j, n) is on where index (o, n) equals j."""
    ishape = b.info(0).shape
    depth = int(np.ravel(b.const(1))[0])
    axis = normalize_axis(b.attrs["axis"], len(ishape) + 1)
    inner = math.prod(ishape[axis:])
    return {
        "total": math.prod(ishape) * depth,
        "depth": depth,
        "inner": inner,
    }


def one_hot_supports(node, graph) -> Support:
    # depth sizes the output: it must be known when planning; the values may be computed.
    depth = node.inputs[1]
    if depth not in graph.initializers and not shape_derived(depth, graph):
        return Support(False, f"OneHot needs depth '{depth}' constant; it is computed at run time")
    return Support(True)


def scatter_elements(b) -> dict:
    """Output element c reads the updates along `axis` that share its other coordinates."""
    shape, ushape = b.info(0).shape, b.info(2).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    return {
        "nd": False,
        "total": math.prod(shape),
        "dims": list(shape),
        "udims": list(ushape),
        "ustrides": strides_of(ushape),
        "axis": axis,
        "scan": ushape[axis] if math.prod(ushape) else 0,
        "reduction": b.attrs["reduction"],
    }


def scatter_nd(b) -> dict:
    """Output element (lead, s) reads update (t, s) of every index tuple t naming `lead`."""
    shape, ishape = b.info(0).shape, b.info(1).shape
    k = ishape[-1]
    return {
        "nd": True,
        "total": math.prod(shape),
        "inner": math.prod(shape[k:]),
        "k": k,
        "kdims": list(shape[:k]),
        "scan": math.prod(ishape[:-1]),
        "reduction": b.attrs["reduction"],
    }


def scatter_nd_supports(node, graph) -> Support:
    idx = graph.value(node.inputs[1])
    shape = None if idx is None else idx.shape
    if shape is not None and all(isinstance(d, int) for d in shape[:-1]):
        if math.prod(shape[:-1]) > SCATTER_ND_MAX:
            return Support(
                False,
                f"ScatterND with {math.prod(shape[:-1])} index tuples (> {SCATTER_ND_MAX}): "
                "each output element would scan them all",
            )
    return Support(True)


def scatter_nd_any_supports(node, graph) -> Support:
    """Without a reduction any count of index tuples (a thread per updated element, past
    SCATTER_ND_MAX); with one, scatter_nd_supports's limit."""
    if node.attrs.get("reduction", "none") == "none":
        return Support(True)
    return scatter_nd_supports(node, graph)


def gather_nd(b) -> dict:
    """Output element (t, s): slice element s at the index tuple t of batch t // per_batch."""
    shape, ishape = b.info(0).shape, b.info(1).shape
    nb = b.attrs["batch_dims"]
    k = ishape[-1]
    return {
        "total": math.prod(ishape[:-1]) * math.prod(shape[nb + k :]),
        "inner": math.prod(shape[nb + k :]),
        "k": k,
        "kdims": list(shape[nb : nb + k]),
        "per_batch": math.prod(ishape[nb:-1]),
        "batch_stride": math.prod(shape[nb:]),
    }


# Per reduction, how update u combines with value v, in each backend's spelling: (float, int).
WGSL_COMBINE = {
    "none": ("u", "u"),
    "add": ("v + u", "v + u"),
    "mul": ("v * u", "v * u"),
    "max": ("max(v, u)", "max(v, u)"),
    "min": ("min(v, u)", "min(v, u)"),
}
CUDA_COMBINE = {
    "none": ("u", "u"),
    "add": ("v + u", "v + u"),
    "mul": ("v * u", "v * u"),
    "max": ("fmaxf(v, u)", "(u > v ? u : v)"),
    "min": ("fminf(v, u)", "(u < v ? u : v)"),
}
