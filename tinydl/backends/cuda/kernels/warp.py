"""tinydl.Warp: bilinear crops by a 3x3 matrix each, one thread per output element; the
matrices are read at run time (computed per frame from detections)."""

from __future__ import annotations

import math

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import blocks, index_type, kernel, load, store

BLOCK = 256


@kernel("tinydl.Warp")
def warp(b):
    geo = lowering.warp(b)
    if not geo:
        return
    x, mat, y = b.info(0), b.info(1), b.out()
    b.launch(
        "warp.cu",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        blocks(geo["total"], BLOCK),
        BLOCK,
        **geo,
        itype=index_type(max(geo["total"], math.prod(x.shape))),
        block=BLOCK,
        xt=x.ctype,
        mt=mat.ctype,
        yt=y.ctype,
        xload=lambda e: load(x.ctype, e),
        mload=lambda e: load(mat.ctype, e),
        ystore=store(y.ctype, "r_"),
    )
