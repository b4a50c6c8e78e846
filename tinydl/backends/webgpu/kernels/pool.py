"""MaxPool and AveragePool over 1 to 3 spatial axes: one output per thread, taps unrolled.

Pooling reads each input about once per tap and does no arithmetic to speak of, so it is bound
by memory; the window, strides and pads are baked in and every tap is straight-line code. Windows
of more than 1024 taps that tile the input (strides equal to the window, no padding or dilation:
MediaPipe's segmenters pool 128 x 128 blocks) are reductions over a strided view instead.
"""

from __future__ import annotations

import itertools
import math

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import INT_DTYPES, ctype, grid, kernel
from tinydl.backends.webgpu.kernels.reduce import emit_reduce


def _supports(node, graph) -> Support:
    if len([o for o in node.outputs if o]) > 1:
        return Support(False, "the Indices output of MaxPool is not implemented")
    if len(node.attrs["kernel_shape"]) > 3:
        return Support(False, "pooling over more than 3 spatial axes is not implemented")
    if math.prod(node.attrs["kernel_shape"]) > lowering.MAX_TAPS and not lowering.pool_tiles(
        node.attrs
    ):
        return Support(
            False,
            f"overlapping or padded pooling windows over {lowering.MAX_TAPS} taps "
            "are not implemented",
        )
    v = graph.value(node.inputs[0])
    if node.op == "AveragePool" and v is not None and v.dtype in INT_DTYPES:
        return Support(False, "AveragePool on int32 is not implemented")
    return Support(True)


@kernel("MaxPool", "AveragePool", supports=_supports)
def pool(b):
    x, y = b.info(0), b.out()
    if math.prod(b.attrs["kernel_shape"]) > lowering.MAX_TAPS:
        op = "ReduceMean" if b.node.op == "AveragePool" else "ReduceMax"
        dims, strides, axes = lowering.pool_tiles_view(b)
        emit_reduce(b, axes, op, view=(dims, strides))
        return
    geo = lowering.pool(b)
    ct = ctype(x.dtype)
    g = grid(geo["total"], 256)
    b.dispatch(
        "pool.wgsl",
        [b.inputs[0], b.outputs[0]],
        g,
        **geo,
        taps=list(itertools.product(*[range(k) for k in geo["kernel"]])),
        st=x.stype,
        ot=y.stype,
        ct=ct,
        lowest="-2147483647 - 1" if ct == "i32" else "-3.40282347e+38",
        gx=g[0],
    )
