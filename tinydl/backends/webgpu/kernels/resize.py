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
    _given,
    _resize_targets,
    axis_taps,
)


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype == "int32" and node.attrs["mode"] != "nearest":
        return Support(False, f"Resize {node.attrs['mode']} on int32 is not implemented")
    return Support(True)


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
