"""Softmax and LogSoftmax along any axis: a workgroup per row (max, sum of exponentials,
write)."""

from __future__ import annotations

import math

from tinydl.backends.webgpu.kernels import grid, kernel
from tinydl.ops.base import normalize_axis


@kernel("Softmax", "LogSoftmax")
def softmax(b):
    shape = b.info(0).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    length, inner = shape[axis], math.prod(shape[axis + 1 :])
    rows = math.prod(shape) // max(length, 1)
    wg = 256 if length >= 256 else 64 if length >= 64 else 32
    g = grid(rows, 1)
    b.dispatch(
        "softmax.wgsl",
        [b.inputs[0], b.outputs[0]],
        g,
        L=length,
        inner=inner,
        rows=rows,
        WG=wg,
        steps=int(math.log2(wg)),
        gx=g[0],
        st=b.info(0).stype,
        ot=b.out().stype,
        log=b.node.op == "LogSoftmax",
    )
