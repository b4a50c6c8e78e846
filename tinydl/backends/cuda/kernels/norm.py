"""LayerNormalization, InstanceNormalization and GroupNormalization: one kernel, a warp per
normalized row when rows are short, a block per row when they are long (backends/lowering.py:
norm_rows); statistics in fp32."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import blocks, cfloat, index_type, kernel, load, store

THREADS = 256
WARP_ROWS = 8  # rows per block of warps
# Rows of at least this many elements get a block each; shorter ones a warp each.
BLOCK_MIN = 1024


@kernel(
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    supports=lowering.norm_supports,
)
def normalization(b):
    if b.node.meta.get("channels_first"):
        channels_first(b)
        return
    geo = lowering.norm_rows(b)
    if geo.rows == 0 or geo.length == 0:
        return
    xi, yo = b.info(0), b.out()
    bias = b.has(2)
    stats = [o for o in b.outputs[1:] if o]  # both or neither (lowering.norm_supports)
    per_warp = geo.length < BLOCK_MIN
    b.launch(
        "norm.cu",
        [b.inputs[0], b.inputs[1], *([b.inputs[2]] if bias else []), b.outputs[0], *stats],
        blocks(geo.rows, WARP_ROWS) if per_warp else geo.rows,
        32 * WARP_ROWS if per_warp else THREADS,
        channels_first=False,
        rows=geo.rows,
        L=geo.length,
        per_channel=geo.per_channel,
        groups=geo.groups,
        channels=geo.channels,
        spatial=geo.spatial,
        bias=bias,
        stats=bool(stats),
        epsilon=cfloat(b.attrs["epsilon"]),
        per_warp=per_warp,
        T=32 * WARP_ROWS if per_warp else THREADS,
        warps=WARP_ROWS if per_warp else THREADS // 32,
        itype=index_type(xi.size),
        xt=xi.ctype,
        wt=b.info(1).ctype,
        bt=b.info(2).ctype if bias else "",
        yt=yo.ctype,
        mt=b.out(1).ctype if stats else "",
        it=b.out(2).ctype if stats else "",
        xload=load(xi.ctype, "x[base + k]"),
        wload=load(b.info(1).ctype, "scale[c]"),
        bload=load(b.info(2).ctype, "bias[c]") if bias else "",
        ystore=store(yo.ctype, "v"),
        mstore=store(b.out(1).ctype, "mean") if stats else "",
        istore=store(b.out(2).ctype, "inv") if stats else "",
    )


def channels_first(b) -> None:
    """LayerNormalization over axis 1 of (N, C, spatial...) (fusion.fuse_channel_norms: the
    transposes around a channels-last LayerNormalization taken away): 32 pixels a block, their
    channels split over its warps — 8, or 32 where that few blocks would not fill the GPU."""
    xi, yo = b.info(0), b.out()
    rows, c, hw = lowering.channel_norm_rows(b)
    if rows == 0 or c == 0:
        return
    groups = blocks(rows, 32)
    y = 8 if groups >= 2 * b.ctx.sm_count else 32
    y = min(y, 1 << (c.bit_length() - 1))  # no warp without a channel
    bias = b.has(2)
    it = index_type(xi.size)
    b.launch(
        "norm.cu",
        [b.inputs[0], b.inputs[1], *([b.inputs[2]] if bias else []), b.outputs[0]],
        groups,
        32 * y,
        channels_first=True,
        rows=rows,
        C=c,
        HW=hw,
        Y=y,
        bias=bias,
        stats=False,
        epsilon=cfloat(b.attrs["epsilon"]),
        T=32 * y,
        itype=it,
        xt=xi.ctype,
        wt=b.info(1).ctype,
        bt=b.info(2).ctype if bias else "",
        yt=yo.ctype,
        xload=load(xi.ctype, f"x[base + ({it})c * {hw}u]"),
        wload=load(b.info(1).ctype, "scale[c]"),
        bload=load(b.info(2).ctype, "bias[c]") if bias else "",
        ystore=store(yo.ctype, "v"),
    )
