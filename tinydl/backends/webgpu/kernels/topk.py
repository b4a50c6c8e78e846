"""TopK with a constant k: a workgroup per row, a pass over the row per output element
(backends/lowering.py: topk_rows, topk_supports)."""

from __future__ import annotations

import math

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import ctype, grid, kernel


@kernel("TopK", supports=lowering.topk_supports)
def top_k(b):
    geo = lowering.topk_rows(b)
    if geo.rows == 0 or geo.k == 0:
        return
    wg = 256 if geo.length >= 256 else 64 if geo.length >= 64 else 32
    g = grid(geo.rows, 1)
    b.dispatch(
        "topk.wgsl",
        [b.inputs[0], b.outputs[0], b.outputs[1]],
        g,
        rows=geo.rows,
        L=geo.length,
        inner=geo.inner,
        K=geo.k,
        largest=b.attrs["largest"],
        WG=wg,
        steps=int(math.log2(wg)),
        gx=g[0],
        st=b.info(0).stype,
        ot=b.out(0).stype,
        it=b.out(1).stype,
        acc=ctype(b.info(0).dtype),
    )
