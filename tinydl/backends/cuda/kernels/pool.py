"""MaxPool and AveragePool over 1 to 3 spatial axes (one output per thread), and
GlobalAveragePool (a mean per (n, c) plane, reduced by a warp or a block: see reduce.py).

Pooling reads each input about once per tap and does little arithmetic, so it is bound by
memory; the window, strides, dilations and pads are baked in and the tap loops unroll.
"""

from __future__ import annotations

import math

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.cuda.kernels import (
    CTYPES,
    FLOATS,
    blocks,
    index_type,
    kernel,
    load,
    store,
)
from tinydl.backends.cuda.kernels.reduce import emit_mean, emit_reduce, float_input

BLOCK = 256
# The lowest value of each integer storage type: where a max-pool accumulator starts.
LOWEST = {
    "int": "(-2147483647 - 1)",
    "long long": "(-9223372036854775807LL - 1)",
    "unsigned char": "0",
    "signed char": "(-128)",
}


def _supports(node, graph) -> Support:
    if len([o for o in node.outputs if o]) > 1:
        return Support(False, "the Indices output of MaxPool is not implemented")
    if len(node.attrs["kernel_shape"]) > 3:
        return Support(False, "pooling over more than 3 spatial axes is not implemented")
    if math.prod(node.attrs["kernel_shape"]) > lowering.MAX_TAPS:
        if not lowering.pool_tiles(node.attrs):
            return Support(
                False,
                f"overlapping or padded pooling windows over {lowering.MAX_TAPS} taps "
                "are not implemented",
            )
    v = graph.value(node.inputs[0])
    dtype = None if v is None else v.dtype
    if node.op == "AveragePool" and dtype is not None and dtype not in FLOATS:
        return Support(False, f"AveragePool on {dtype} is not implemented")
    if dtype == "bool":
        return Support(False, "MaxPool on bool is not implemented")
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
    ct = "float" if x.dtype in FLOATS else CTYPES[x.dtype]
    if geo["total"] == 0:
        return
    b.launch(
        "pool.cu",
        [b.inputs[0], b.outputs[0]],
        blocks(geo["total"], BLOCK),
        BLOCK,
        **geo,
        xt=x.ctype,
        yt=y.ctype,
        ct=ct,
        xload=load(x.ctype, "xp[off]") if ct == "float" else "xp[off]",
        ystore=store(y.ctype, "r") if ct == "float" else "r",
        lowest="__int_as_float(0xff800000)" if ct == "float" else LOWEST[ct],
        itype=index_type(max(geo["total"], math.prod(x.shape))),
        block=BLOCK,
    )


@kernel("GlobalAveragePool", supports=float_input)
def global_average_pool(b):
    emit_mean(b, tuple(range(2, len(b.info(0).shape))))
