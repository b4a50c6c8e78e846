"""Resize: nearest, N-linear and cubic, every coordinate transformation mode.

The host computes, per output axis, each output index's taps (input offset and weight) with
the op reference's own coordinate functions, so the kernel only gathers and sums.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import INT_DTYPES, constant_inputs, grid, kernel, wgsl_float


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype in INT_DTYPES and node.attrs["mode"] != "nearest":
        return Support(False, f"Resize {node.attrs['mode']} on {v.dtype} is not implemented")
    return Support(True)


@kernel("Resize", supports=_supports)
def resize(b):
    x, y = b.info(0), b.out()
    rt = lowering.resize(b)
    if np.abs(rt.indices).max(initial=0) >= 2**31:
        raise ValueError(f"{b.label}: tensor too large for 32-bit offsets")
    ti = b.upload("indices", rt.indices.astype(np.int32), "i32")
    tw = [b.upload("weights", rt.weights.astype(np.float32), "f32")] if rt.weighted else []
    total = math.prod(y.shape)
    g = grid(total, 256)
    b.dispatch(
        "resize.wgsl",
        [b.inputs[0], ti, *tw, b.outputs[0]],
        g,
        rank=len(x.shape),
        dims_in=list(x.shape),
        dims_out=list(y.shape),
        taps_per_axis=rt.taps,
        base=rt.base,
        combos=rt.combos,
        weighted=rt.weighted,
        total=total,
        gx=g[0],
        st=x.stype,
        ot=y.stype,
        extrapolation=wgsl_float(b.attrs["extrapolation_value"]),
    )
