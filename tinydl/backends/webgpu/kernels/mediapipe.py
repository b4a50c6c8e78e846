"""MediaPipe's custom ops (tinydl/ops/mediapipe.py): TransformTensorBilinear, a thread per
output element; Landmarks2TransformMatrix, a thread per batch entry."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import grid, kernel

WG = 64


@kernel("tinydl.TransformTensorBilinear", "tinydl.Landmarks2TransformMatrix")
def build(b):
    geo = lowering.mediapipe(b)
    total = geo["total"]
    if total == 0:
        return
    g = grid(total, WG)
    types = {"x_t": b.info(0).stype, "out_t": b.out().stype}
    if b.has(1):
        types["m_t"] = b.info(1).stype
    b.dispatch(
        "mediapipe.wgsl",
        [*b.inputs, b.outputs[0]],
        g,
        **geo,
        **types,
        wg=WG,
        gx=g[0],
    )
