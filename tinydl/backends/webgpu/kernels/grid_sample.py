"""GridSample over 2-D images (torchvision's RAFT, spatial transformers): one invocation per
output element; the grid is read at run time."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.webgpu.kernels import grid, kernel


@kernel("GridSample", supports=lowering.grid_sample_supports)
def grid_sample(b):
    geo = lowering.grid_sample(b)
    if not geo["TOTAL"]:
        return
    wg = grid(geo["TOTAL"], 256)
    b.dispatch(
        "grid_sample.wgsl",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        wg,
        GX=wg[0],
        st=b.info(0).stype,
        gt=b.info(1).stype,
        ot=b.out().stype,
        **geo,
    )
