"""GridSample over 2-D images (torchvision's RAFT, spatial transformers): a thread per output
element; the grid is read at run time (webgpu's grid_sample.wgsl, the same rules)."""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import blocks, kernel, load, store

BLOCK = 256


@kernel("GridSample", supports=lowering.grid_sample_supports)
def grid_sample(b):
    geo = lowering.grid_sample(b)
    if not geo["TOTAL"]:
        return
    x, g, y = b.info(0), b.info(1), b.out()
    b.launch(
        "grid_sample.cu",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        blocks(geo["TOTAL"], BLOCK),
        BLOCK,
        block=BLOCK, x_ctype=x.ctype, g_ctype=g.ctype, out_ctype=y.ctype,
        x_load=lambda expr: load(x.ctype, expr), g_load=lambda expr: load(g.ctype, expr),
        store=store(y.ctype, "r"), **geo,
    )  # fmt: skip
