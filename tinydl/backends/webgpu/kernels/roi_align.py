"""RoiAlign: a thread per output element averages (or takes the maximum of) its bin's bilinear
samples, reading the rois and batch indices at run time (backends/lowering.py: roi_align)."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import grid, kernel, wgsl_float

WG = 64


@kernel("RoiAlign")
def roi_align(b):
    geo = lowering.roi_align(b)
    if geo["total"] == 0:
        return
    if geo["H"] == 0 or geo["W"] == 0:
        raise ValueError(f"{b.label}: cannot sample an empty image {b.info(0).shape}")
    g = grid(geo["total"], WG)
    b.dispatch(
        "roi_align.wgsl",
        [b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0]],
        g,
        **{**geo, "scale": wgsl_float(geo["scale"]), "offset": wgsl_float(geo["offset"])},
        x_t=b.info(0).stype,
        roi_t=b.info(1).stype,
        out_t=b.out().stype,
        wg=WG,
        gx=g[0],
    )
