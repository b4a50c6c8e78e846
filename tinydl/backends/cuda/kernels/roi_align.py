"""RoiAlign: a thread per output element averages (or takes the maximum of) its bin's bilinear
samples, reading the rois and batch indices at run time (backends/lowering.py: roi_align)."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import blocks, cfloat, kernel, load, store

BLOCK = 128


@kernel("RoiAlign")
def roi_align(b):
    geo = lowering.roi_align(b)
    if geo["total"] == 0:
        return
    if geo["H"] == 0 or geo["W"] == 0:
        raise ValueError(f"{b.label}: cannot sample an empty image {b.info(0).shape}")
    xi, ri, yo = b.info(0), b.info(1), b.out()
    b.launch(
        "roi_align.cu",
        [b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0]],
        blocks(geo["total"], BLOCK),
        BLOCK,
        **{**geo, "scale": cfloat(geo["scale"]), "offset": cfloat(geo["offset"])},
        x_ctype=xi.ctype,
        roi_ctype=ri.ctype,
        idx_ctype=b.info(2).ctype,
        out_ctype=yo.ctype,
        x_load=lambda expr: load(xi.ctype, expr),
        roi_load=lambda expr: load(ri.ctype, expr),
        store=store(yo.ctype, "v"),
        block=BLOCK,
    )
