"""MediaPipe's custom ops (tinydl/ops/mediapipe.py): TransformTensorBilinear, a thread per
output element; Landmarks2TransformMatrix, a thread per batch entry."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import blocks, kernel, load, store

BLOCK = 64


@kernel("tinydl.TransformTensorBilinear", "tinydl.Landmarks2TransformMatrix")
def build(b):
    geo = lowering.mediapipe(b)
    if geo["total"] == 0:
        return
    xi, yo = b.info(0), b.out()
    mi = b.info(1) if b.has(1) else xi
    b.launch(
        "mediapipe.cu",
        [*b.inputs, b.outputs[0]],
        blocks(geo["total"], BLOCK),
        BLOCK,
        **geo,
        x_ctype=xi.ctype,
        m_ctype=mi.ctype,
        out_ctype=yo.ctype,
        x_load=lambda expr: load(xi.ctype, expr),
        m_load=lambda expr: load(mi.ctype, expr),
        store=lambda expr: store(yo.ctype, expr),
        block=BLOCK,
    )
