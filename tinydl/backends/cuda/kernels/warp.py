"""tinydl.Warp: bilinear crops by a 3x3 matrix each, one thread per output element; the
matrices are read at run time (computed per frame from detections)."""

from __future__ import annotations

import math

from tinydl.backends.cuda.kernels import blocks, index_type, kernel, load, store

BLOCK = 256


@kernel("tinydl.Warp")
def warp(b):
    x, mat, y = b.info(0), b.info(1), b.out()
    total = math.prod(y.shape)
    if total == 0:
        return
    layout = b.attrs["layout"]
    n, c, h, w = x.shape if layout == "NCHW" else (x.shape[0], x.shape[3], *x.shape[1:3])
    b.launch(
        "warp.cu",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        blocks(total, BLOCK),
        BLOCK,
        crops=mat.shape[0],
        images=n,
        c=c,
        h=h,
        w=w,
        oh=b.attrs["output_height"],
        ow=b.attrs["output_width"],
        layout=layout,
        border=b.attrs["border"],
        total=total,
        itype=index_type(max(total, math.prod(x.shape))),
        block=BLOCK,
        xt=x.ctype,
        mt=mat.ctype,
        yt=y.ctype,
        xload=lambda e: load(x.ctype, e),
        mload=lambda e: load(mat.ctype, e),
        ystore=store(y.ctype, "r_"),
    )
