"""Fused attention (backends/fusion.py: fuse_attention): softmax(scale · Q·Kᵀ + mask)·V in one
dispatch, FlashAttention's way. A workgroup takes BQ query rows of one (batch, head), TPR
threads per row, and walks the keys in blocks of BK staged in workgroup memory with an online
softmax (a running max and sum per row rescale the accumulators); the scores never reach
global memory, and everything is computed in f32 whatever the storage.
"""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.fusion import ATTENTION
from tinydl.backends.webgpu.kernels import kernel, wgsl_float

BQ, TPR = 16, 4  # query rows per workgroup, threads per row
BLOCKS = (32, 16, 8, 4)  # keys per block, the largest whose tiles fit in workgroup memory
MAX_DIM = 128  # head dims the rewrite fuses; at BK = 4 the tiles fit WebGPU's 16 KiB minimum


def shared_bytes(d: int, dv: int, bk: int) -> int:
    """Workgroup memory of the Q, K, V and score tiles (rows of Q, K and scores padded by one)."""
    return 4 * (BQ * (d + 1) + bk * (d + 1) + bk * dv + BQ * (bk + 1))


@kernel(ATTENTION)
def attention(b):
    g = lowering.attention(b)
    limit = b.ctx.max_workgroup_storage
    fitting = [k for k in BLOCKS if shared_bytes(g.d, g.dv, k) <= limit]
    if not fitting:
        raise ValueError(f"{b.label}: head dims {g.d}, {g.dv} do not fit in workgroup memory")
    bk = fitting[0]
    bindings = [b.inputs[0], b.inputs[1], b.inputs[2], *b.inputs[3:4], b.outputs[0]]
    b.dispatch(
        "attention.wgsl",
        bindings,
        ((g.m + BQ - 1) // BQ, g.b * g.h),
        **g.template_params(BQ, TPR, bk),
        scale=wgsl_float(g.scale),
        qt=b.info(0).stype,
        kt=b.info(1).stype,
        vt=b.info(2).stype,
        mt=b.info(3).stype if g.mask else None,
        ot=b.out().stype,
    )
