"""Resize: nearest, N-linear and cubic, every coordinate transformation mode.

The host computes, per output axis, each output index's taps (input offset and weight) with
the op reference's own coordinate functions, so the kernel only gathers and sums.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import constant_inputs, grid, kernel, strides_of, wgsl_float
from tinydl.ops.resize import (
    _check_resize_attrs,
    _cubic_weights,
    _given,
    _nearest,
    _resize_targets,
    _source_coords,
)


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype == "int32" and node.attrs["mode"] != "nearest":
        return Support(False, f"Resize {node.attrs['mode']} on int32 is not implemented")
    return Support(True)


def _axis_taps(n_in: int, n_out: int, scale: float, attrs: dict, roi) -> tuple:
    """(indices [n_out, T], weights [n_out, T], outside [n_out]) for one resized axis."""
    c = _source_coords(n_out, n_in, scale, attrs["coordinate_transformation_mode"], roi)
    outside = np.zeros(n_out, bool)
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        outside = (c < 0) | (c > n_in - 1)
    mode = attrs["mode"]
    if mode == "nearest":
        idx = np.clip(_nearest(c, attrs["nearest_mode"]), 0, n_in - 1).astype(np.int64)
        return idx[:, None], np.ones((n_out, 1)), outside
    if mode == "linear":
        c = np.clip(c, 0, n_in - 1)
        i0 = np.floor(c).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        w = (c - i0).astype(np.float32)
        return np.stack([i0, i1], 1), np.stack([1 - w, w], 1), outside
    base = np.floor(c).astype(np.int64)
    taps = [base + k for k in (-1, 0, 1, 2)]
    weights = _cubic_weights(c - base, attrs["cubic_coeff_a"])
    if attrs["exclude_outside"]:
        weights = [
            np.where((i >= 0) & (i < n_in), w, 0.0) for i, w in zip(taps, weights, strict=True)
        ]
        total = sum(weights)
        weights = [w / total for w in weights]
    idx = np.stack([np.clip(i, 0, n_in - 1) for i in taps], 1)
    return idx, np.stack([w.astype(np.float32) for w in weights], 1), outside


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
            idx, w, outside = _axis_taps(n, out[d], scale[d], attrs, bounds)
        else:
            idx, w, outside = np.arange(n)[:, None], np.ones((n, 1)), np.zeros(n, bool)
        t = idx.shape[1]
        idx_tables.append(np.concatenate([idx * st[d], outside[:, None]], 1).ravel())
        w_tables.append(np.concatenate([w, np.zeros((len(w), 1))], 1).ravel())
        taps.append(t)
    base = np.cumsum([0] + [len(t) for t in idx_tables[:-1]]).tolist()
    ti = b.upload("indices", np.concatenate(idx_tables).astype(np.int32), "i32")
    weighted = attrs["mode"] != "nearest" and max(taps) > 1
    tw = (
        [b.upload("weights", np.concatenate(w_tables).astype(np.float32), "f32")]
        if weighted
        else []
    )
    total = math.prod(y.shape)
    g = grid(total, 256)
    b.dispatch(
        "resize.wgsl",
        [b.inputs[0], ti, *tw, b.outputs[0]],
        g,
        rank=len(x.shape),
        dims_in=list(x.shape),
        dims_out=list(y.shape),
        taps_per_axis=taps,
        base=base,
        combos=list(itertools.product(*[range(t) for t in taps])),
        weighted=weighted,
        total=total,
        gx=g[0],
        st=x.stype,
        ot=y.stype,
        extrapolation=wgsl_float(attrs["extrapolation_value"]),
    )
