"""MaxPool and AveragePool over 1 to 3 spatial axes: one output per thread, taps unrolled.

Pooling reads each input about once per tap and does no arithmetic to speak of, so it is bound
by memory; the window, strides and pads are baked in and every tap is straight-line code.
"""

from __future__ import annotations

import itertools
import math

from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import grid, kernel, strides_of
from tinydl.ops.conv import window_attrs, window_geometry


def _supports(node, graph) -> Support:
    if len([o for o in node.outputs if o]) > 1:
        return Support(False, "the Indices output of MaxPool is not implemented")
    if len(node.attrs["kernel_shape"]) > 3:
        return Support(False, "pooling over more than 3 spatial axes is not implemented")
    if math.prod(node.attrs["kernel_shape"]) > 1024:
        return Support(False, "pooling windows over 1024 taps are not implemented")
    v = graph.value(node.inputs[0])
    if node.op == "AveragePool" and v is not None and v.dtype == "int32":
        return Support(False, "AveragePool on int32 is not implemented")
    return Support(True)


@kernel("MaxPool", "AveragePool", supports=_supports)
def pool(b):
    x, y = b.info(0), b.out()
    kshape = b.attrs["kernel_shape"]
    strides, dilations, pads = window_attrs(b.attrs, kshape)
    geo = window_geometry(
        x.shape[2:],
        kshape,
        strides,
        dilations,
        pads,
        b.attrs["auto_pad"],
        bool(b.attrs["ceil_mode"]),
    )
    is_max = b.node.op == "MaxPool"
    ct = "i32" if x.dtype == "int32" else "f32"
    total = math.prod(y.shape)
    g = grid(total, 256)
    b.dispatch(
        "pool.wgsl",
        [b.inputs[0], b.outputs[0]],
        g,
        nd=len(kshape),
        dims_in=list(x.shape[2:]),
        dims_out=list(y.shape[2:]),
        kernel=kshape,
        strides=strides,
        dilations=dilations,
        pads=[p for p, _, _ in geo],
        pads_end=[e for _, e, _ in geo],
        taps=list(itertools.product(*[range(k) for k in kshape])),
        in_strides=strides_of(x.shape[2:]),
        plane=math.prod(x.shape[2:]),
        is_max=is_max,
        include_pad=bool(b.attrs.get("count_include_pad", 0)),
        st=x.stype,
        ot=y.stype,
        ct=ct,
        lowest="-2147483647 - 1" if ct == "i32" else "-3.40282347e+38",
        total=total,
        gx=g[0],
    )
