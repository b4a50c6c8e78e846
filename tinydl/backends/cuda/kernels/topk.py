"""TopK with a constant k: a block per row, a pass over the row per output element
(backends/lowering.py: topk_rows, topk_supports)."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import FLOATS, kernel, load, store


@kernel("TopK", supports=lowering.topk_supports)
def top_k(b):
    geo = lowering.topk_rows(b)
    if geo.rows == 0 or geo.k == 0:
        return
    xi = b.info(0)
    at = f"x[base + (unsigned long long)r * {geo.inner}ull]"
    integer = xi.dtype not in FLOATS
    # A warp for short rows: the other warps would find nothing to read.
    threads = 256 if geo.length >= 1024 else 64 if geo.length >= 64 else 32
    b.launch(
        "topk.cu",
        [b.inputs[0], b.outputs[0], b.outputs[1]],
        geo.rows,
        threads,
        rows=geo.rows,
        L=geo.length,
        inner=geo.inner,
        K=geo.k,
        largest=b.attrs["largest"],
        T=threads,
        warps=threads // 32,
        xt=xi.ctype,
        yt=b.out(0).ctype,
        it=b.out(1).ctype,
        xload=f"(long long)({at})" if integer else load(xi.ctype, at),
        ystore=f"({b.out(0).ctype})(pv)" if integer else store(b.out(0).ctype, "pv"),
        acc="long long" if integer else "float",
    )
