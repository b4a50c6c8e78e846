"""tinydl.Warp: bilinear crops by a 3x3 matrix each, one invocation per output element; the
matrices are read at run time (computed per frame from detections)."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import grid, kernel


@kernel("tinydl.Warp")
def warp(b):
    geo = lowering.warp(b)
    if not geo:
        return
    x, mat, y = b.info(0), b.info(1), b.out()
    g = grid(geo["total"], 256)
    b.dispatch(
        "warp.wgsl",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        g,
        **geo,
        gx=g[0],
        st=x.stype,
        mt=mat.stype,
        ot=y.stype,
    )
