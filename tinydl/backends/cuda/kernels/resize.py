"""Resize: nearest, N-linear and cubic, every coordinate transformation mode.

The host computes, per output axis, each output index's taps (input offset and weight) with
the op reference's own coordinate functions, so the kernel only gathers and sums (in fp32;
nearest copies the element as it is, so integers keep every bit).
"""

from __future__ import annotations

import math

from tinydl.backends import lowering
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

BLOCK = 256


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype not in FLOATS and node.attrs["mode"] != "nearest":
        return Support(False, f"Resize {node.attrs['mode']} on {v.dtype} is not implemented")
    return Support(True)


@kernel("Resize", supports=_supports)
def resize(b):
    x, y = b.info(0), b.out()
    attrs = b.attrs
    rt = lowering.resize(b)
    total = math.prod(y.shape)
    if total == 0:
        return
    ti = b.upload("indices", rt.indices, "int64")
    weighted = rt.weighted
    tw = [b.upload("weights", rt.weights, "float32")] if weighted else []
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
        taps_per_axis=rt.taps,
        base=rt.base,
        combos=rt.combos,
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
