"""Resize: nearest, N-linear and cubic, every coordinate transformation mode.

The host computes, per output axis, each output index's taps (input offset and weight) with
the op reference's own coordinate functions, so the kernel only gathers and sums (in fp32;
nearest copies the element as it is, so integers keep every bit).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.cuda.kernels import (
    CTYPES,
    FLOATS,
    blocks,
    cfloat,
    constant_inputs,
    index_type,
    kernel,
    load,
    store,
)
from tinydl.backends.indexing import strides_of
from tinydl.ops.resize import (
    _check_resize_attrs,
    _given,
    _resize_targets,
    axis_taps,
)

BLOCK = 256


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype not in FLOATS and node.attrs["mode"] != "nearest":
        return Support(False, f"Resize {node.attrs['mode']} on {v.dtype} is not implemented")
    return Support(True)


def _fewer_taps(idx: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the taps whose weight is 0 in every row; a single tap when every row then reads
    one element with a total weight of 1 (a crop of the batch axis, integral cubic positions).
    The kernel weighs only the axes with more than one tap."""
    keep = ~(w == 0).all(0)
    live_idx, live_w = (idx[:, keep], w[:, keep]) if keep.any() else (idx, w)
    if (live_idx == live_idx[:, :1]).all() and np.allclose(live_w.sum(1), 1, rtol=0, atol=1e-6):
        return live_idx[:, :1], np.ones((len(idx), 1))
    return (live_idx, live_w) if live_idx.shape[1] > 1 else (idx, w)


@kernel("Resize", supports=_supports)
def resize(b):
    x, y = b.info(0), b.out()
    attrs = dict(b.attrs)
    _check_resize_attrs(attrs)
    roi, scales, sizes = b.const(1), b.const(2), b.const(3)
    axes, scale, out = _resize_targets(
        x.shape, scales, sizes, attrs["axes"], attrs["keep_aspect_ratio_policy"]
    )
    ctm = attrs["coordinate_transformation_mode"]
    roi = np.ravel(roi).astype(np.float64) if _given(roi) else None
    st = strides_of(x.shape)
    idx_tables, w_tables, taps = [], [], []
    for d, n in enumerate(x.shape):
        if d in axes and not (out[d] == n and scale[d] == 1.0 and ctm != "tf_crop_and_resize"):
            k = axes.index(d)
            bounds = (0.0, 1.0) if roi is None else (roi[k], roi[k + len(roi) // 2])
            idx, w, outside = axis_taps(n, out[d], scale[d], attrs, bounds)
            idx, w = _fewer_taps(idx, w)
        else:
            idx, w, outside = np.arange(n)[:, None], np.ones((n, 1)), np.zeros(n, bool)
        # A row per output index: its T input offsets, then the outside flag (weights: 0).
        idx_tables.append(np.concatenate([idx * st[d], outside[:, None]], 1).ravel())
        w_tables.append(np.concatenate([w, np.zeros((len(w), 1))], 1).ravel())
        taps.append(idx.shape[1])
    total = math.prod(y.shape)
    if total == 0:
        return
    base = np.cumsum([0] + [len(t) for t in idx_tables[:-1]]).tolist()
    ti = b.upload("indices", np.concatenate(idx_tables), "int64")
    weighted = attrs["mode"] != "nearest" and max(taps) > 1
    tw = [b.upload("weights", np.concatenate(w_tables), "float32")] if weighted else []
    ct = "float" if y.dtype in FLOATS else CTYPES[y.dtype]
    ext = attrs["extrapolation_value"]
    extrapolation = cfloat(ext) if ct == "float" else f"({ct})({int(ext)})"
    b.launch(
        "resize.cu",
        [b.inputs[0], ti, *tw, b.outputs[0]],
        blocks(total, BLOCK),
        BLOCK,
        rank=len(x.shape),
        dims_in=list(x.shape),
        dims_out=list(y.shape),
        taps_per_axis=taps,
        base=base,
        combos=list(itertools.product(*[range(t) for t in taps])),
        weighted=weighted,
        total=total,
        itype=index_type(total),
        block=BLOCK,
        xt=x.ctype,
        yt=y.ctype,
        ct=ct,
        copy=x.stype == y.stype and not weighted,
        xload=load(x.ctype, "x[at]") if ct == "float" else "x[at]",
        ystore=store(y.ctype, "r") if ct == "float" else "r",
        extrapolation=extrapolation,
        # The extrapolation value in the output's storage type (fp16 is stored as raw bits).
        yextrapolation=store(y.ctype, extrapolation) if ct == "float" else extrapolation,
    )
