"""Softmax and LogSoftmax along one axis (opset 13): a warp per row for rows up to 1024 long, a
block per row for longer ones. Each thread keeps its share of the row in registers (up to 32
values), so the row is read once: max, then the sum of exponentials, then the normalized write,
all in fp32 (LogSoftmax reads the row again for x - max - log(sum))."""

from __future__ import annotations

import math

from tinydl.backends.cuda.kernels import blocks, index_type, kernel, load, store
from tinydl.ops.base import normalize_axis

WARP_ROWS = 8  # rows per block of warps
CACHE = 32  # values per thread kept in registers


def _threads(length: int) -> int:
    if length <= 32 * CACHE:
        return 32
    return 256 if length <= 256 * CACHE else 512


@kernel("Softmax", "LogSoftmax")
def softmax(b):
    xi, yo = b.info(0), b.out()
    shape = xi.shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    length, inner = shape[axis], math.prod(shape[axis + 1 :])
    total = math.prod(shape)
    if total == 0:
        return
    rows = total // length
    threads = _threads(length)
    per_warp = threads == 32
    vpt = math.ceil(length / threads)
    b.launch(
        "softmax.cu",
        [b.inputs[0], b.outputs[0]],
        blocks(rows, WARP_ROWS) if per_warp else rows,
        32 * WARP_ROWS if per_warp else threads,
        L=length,
        inner=inner,
        rows=rows,
        per_warp=per_warp,
        T=threads,
        warps=WARP_ROWS if per_warp else threads // 32,
        vpt=vpt,
        cached=vpt <= CACHE,
        itype=index_type(total),
        xt=xi.ctype,
        yt=yo.ctype,
        xload=load(xi.ctype, f"x[base + (unsigned long long)k * {inner}ull]"),
        ystore=store(yo.ctype, "e * inv"),
        log=b.node.op == "LogSoftmax",
        logstore=store(yo.ctype, "(xv - m) - ls"),
    )
