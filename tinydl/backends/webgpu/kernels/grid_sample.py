"""GridSample over 2-D images (torchvision's RAFT, spatial transformers): one invocation per
output element; the grid is read at run time."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import grid, kernel
from tinydl.ops.resize import GRID_MODES


@kernel("GridSample", supports=lowering.grid_sample_supports)
def grid_sample(b):
    x, g, y = b.info(0), b.info(1), b.out()
    n, c, h, w = x.shape
    _, oh, ow, _ = g.shape
    total = n * c * oh * ow
    if not total:
        return
    wg = grid(total, 256)
    b.dispatch(
        "grid_sample.wgsl",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        wg,
        N=n, C=c, H=h, W=w, OH=oh, OW=ow, TOTAL=total, GX=wg[0],
        mode=GRID_MODES[b.attrs["mode"]], padding=b.attrs["padding_mode"],
        align=bool(b.attrs["align_corners"]), st=x.stype, gt=g.stype, ot=y.stype,
    )  # fmt: skip
