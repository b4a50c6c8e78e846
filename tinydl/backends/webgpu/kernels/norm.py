"""LayerNormalization, InstanceNormalization and GroupNormalization: one kernel, a workgroup
per normalized row (backends/lowering.py: norm_rows); statistics in f32."""

from __future__ import annotations

import math

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import grid, kernel, wgsl_float


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
    bias = b.has(2)
    stats = [o for o in b.outputs[1:] if o]  # both or neither (lowering.norm_supports)
    wg = 256 if geo.length >= 256 else 64 if geo.length >= 64 else 32
    g = grid(geo.rows, 1)
    b.dispatch(
        "norm.wgsl",
        [b.inputs[0], b.inputs[1], *([b.inputs[2]] if bias else []), b.outputs[0], *stats],
        g,
        channels_first=False,
        rows=geo.rows,
        L=geo.length,
        per_channel=geo.per_channel,
        groups=geo.groups,
        channels=geo.channels,
        spatial=geo.spatial,
        bias=bias,
        stats=bool(stats),
        epsilon=wgsl_float(b.attrs["epsilon"]),
        WG=wg,
        steps=int(math.log2(wg)),
        gx=g[0],
        st=b.info(0).stype,
        wt=b.info(1).stype,
        bt=b.info(2).stype if bias else "",
        ot=b.out().stype,
        mt=b.out(1).stype if stats else "",
        it=b.out(2).stype if stats else "",
    )


def channels_first(b) -> None:
    """LayerNormalization over axis 1 of (N, C, spatial...) (fusion.fuse_channel_norms: the
    transposes around a channels-last LayerNormalization taken away): 32 pixels a workgroup,
    their channels split over 8 rows of invocations."""
    xi = b.info(0)
    rows, c, hw = lowering.channel_norm_rows(b)
    if rows == 0 or c == 0:
        return
    bias = b.has(2)
    g = grid(rows, 32)
    b.dispatch(
        "norm.wgsl",
        [b.inputs[0], b.inputs[1], *([b.inputs[2]] if bias else []), b.outputs[0]],
        g,
        channels_first=True,
        rows=rows,
        C=c,
        HW=hw,
        bias=bias,
        stats=False,
        epsilon=wgsl_float(b.attrs["epsilon"]),
        gx=g[0],
        st=xi.stype,
        wt=b.info(1).stype,
        bt=b.info(2).stype if bias else "",
        ot=b.out().stype,
    )
