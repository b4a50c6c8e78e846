"""Fused attention (backends/fusion.py: fuse_attention): softmax(scale · Q·Kᵀ + mask)·V in one
launch, FlashAttention's way. A block takes BQ query rows of one (batch, head), TPR threads per
row, and walks the keys in blocks of BK staged in shared memory with an online softmax (a
running max and sum per row rescale the accumulators); the scores never reach global memory,
and everything is computed in fp32 whatever the storage (half_t at fp16).
"""

from __future__ import annotations

from tinydl.backends import lowering
from tinydl.backends.cuda.kernels import cfloat, kernel, load, store
from tinydl.backends.fusion import ATTENTION

BQ, TPR = 32, 8  # query rows per block, threads per row (a row's threads share a warp)
BLOCKS = (64, 32, 16, 8)  # keys per block, the largest whose tiles fit in static shared memory
SMEM = 48 << 10  # static shared memory per block
MAX_DIM = 128  # head dims the rewrite fuses


def shared_bytes(d: int, dv: int, bk: int) -> int:
    """Shared memory of the Q, K, V and score tiles (rows of Q, K and scores padded by one)."""
    return 4 * (BQ * (d + 1) + bk * (d + 1) + bk * dv + BQ * (bk + 1))


def _load(ctype: str, ptr: str, base: str, *terms: tuple[str, int]) -> str:
    """C text reading ptr[base + index * stride + ...] as a float, in 64-bit offsets."""
    index = [base, *(f"(unsigned long long)({i}) * {s}ull" for i, s in terms if s)]
    return load(ctype, f"{ptr}[{' + '.join(index)}]")


@kernel(ATTENTION)
def attention(b):
    g = lowering.attention(b)
    bk = next(k for k in BLOCKS if shared_bytes(g.d, g.dv, k) <= SMEM)
    cts = [b.info(i).ctype for i in range(4 if g.mask else 3)]
    b.launch(
        "attention.cu",
        [*b.inputs[: len(cts)], b.outputs[0]],
        (g.b * g.h, (g.m + BQ - 1) // BQ),
        BQ * TPR,
        **g.template_params(BQ, TPR, bk),
        scale=cfloat(g.scale),
        qt=cts[0],
        kt=cts[1],
        vt=cts[2],
        mt=cts[3] if g.mask else None,
        yt=b.out().ctype,
        qload=_load(cts[0], "q", "qb", ("q0 + rr", g.q[2]), ("d", g.q[3])),
        kload=_load(cts[1], "k", "kb", ("d", g.k[2]), ("k0 + j", g.k[3])),
        vload=_load(cts[2], "v", "vb", ("k0 + j", g.v[2]), ("c", g.v[3])),
        mload=_load(cts[3], "mask", "mb", ("k0 + j", g.mask[3])) if g.mask else None,
        ystore=store(b.out().ctype, "acc[c] * inv"),
    )
