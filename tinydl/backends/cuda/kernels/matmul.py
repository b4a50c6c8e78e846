"""MatMul (NumPy semantics: batch broadcasting, 1-D promotion) and Gemm, as one tiled kernel
(and, for products of a few rows along a contiguous K, a warp per output column).

A block of 16x16 threads makes a 64x64 tile of the output, each thread 4x4 outputs in fp32,
through 16-deep slices of A and B staged in shared memory. A and B are read through element
strides, so transposed operands need no copy; per-batch offsets of A and B come from a small
table. Either operand may be a constant (uploaded as float32) or a value. Gemm's alpha and
beta*C (broadcast through strides) are in the epilogue.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.cuda.kernels import FLOATS, cfloat, kernel, load, store

TILE, DEPTH, THREADS = 64, 16, 256
# Products of at most GEMV_ROWS rows and at least GEMV_DEPTH along K, B contiguous along K (a
# classifier's Gemm, transB=1): matmul.cu's gemv kernel, a warp per output column, GEMV_WARPS
# warps a block.
GEMV_ROWS, GEMV_DEPTH, GEMV_WARPS = 16, 256, 8
# Warps in flight the gemv kernel aims for (K split over up to GEMV_WARPS warps a column until
# there are this many): one warp a column left an H100's SMs with 8 warps each, waiting on loads.
GEMV_INFLIGHT = 4096


def _float(node, graph) -> Support:
    v = graph.value(node.outputs[0])
    if v is not None and v.dtype not in FLOATS:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


def _operand(b, i: int) -> tuple:
    """A value name, or a constant uploaded once; and its C storage type."""
    arr = b.const(i)
    if arr is None:
        return b.inputs[i], b.info(i).ctype
    return b.upload(("operand", i), arr, "float32"), "float"


def _at(ptr: str, i: str, si: int, j: str, sj: int, wide: bool) -> str:
    """C text for ptr[i * si + j * sj] (in 64-bit arithmetic when `wide`)."""
    if wide:
        return f"{ptr}[(unsigned long long){i} * {si}ull + (unsigned long long){j} * {sj}ull]"
    return f"{ptr}[{i} * {si}u + {j} * {sj}u]"


def _emit(b, a, b_, batch, m, n, k, sa, sb, c=None, sc=(0, 0), alpha=1.0, beta=1.0):
    (abuf, at), (bbuf, bt) = a, b_
    yo = b.out()
    if m * n * len(batch) == 0:
        return
    # 32-bit offsets unless an operand (or the output) holds 2^31 elements or more.
    sizes = [len(batch) * m * n, max(o for o, _ in batch) + m * k, max(o for _, o in batch) + k * n]
    wide = max(sizes) >= 2**31
    table = b.upload("batch", np.asarray(batch, np.int64).ravel(), "int64")
    args = [abuf, bbuf, table]
    if c is not None:
        args.append(c[0])
    args.append(b.outputs[0])
    gemv = m <= GEMV_ROWS and k >= GEMV_DEPTH and sb[0] == 1
    acc = "v" if gemv else "acc[i][j]"
    r = acc if alpha == 1.0 else f"{acc} * {cfloat(alpha)}"
    if c is not None:
        cv = load(c[1], _at("c", "m", sc[0], "n", sc[1], wide))
        r += f" + {cv}" if beta == 1.0 else f" + {cfloat(beta)} * {cv}"
    if gemv:
        split = 1
        while split < GEMV_WARPS and n * len(batch) * split < GEMV_INFLIGHT and k >= 64 * split * 2:
            split *= 2
        cols = GEMV_WARPS // split
        b.launch(
            "matmul.cu", args, (math.ceil(n / cols), len(batch)), GEMV_WARPS * 32,
            gemv=True, B=len(batch), M=m, N=n, K=k, WARPS=GEMV_WARPS, THREADS=GEMV_WARPS * 32,
            SPLIT=split, COLS=cols,
            at=at, bt=bt, ct=None if c is None else c[1], yt=yo.ctype,
            aload=load(at, _at("ab", "m", sa[0], "k", sa[1], wide)),
            bload=load(bt, _at("bb", "k", sb[0], "n", sb[1], wide)),
            ystore=store(yo.ctype, "r"), result=r,
        )  # fmt: skip
        return
    b.launch(
        "matmul.cu",
        args,
        (math.ceil(n / TILE), math.ceil(m / TILE), len(batch)),
        THREADS,
        gemv=False,
        B=len(batch),
        M=m,
        N=n,
        K=k,
        SAM=sa[0],
        SAK=sa[1],
        SBK=sb[0],
        SBN=sb[1],
        # Consecutive threads load along the operand's contiguous axis.
        a_k_fast=sa[1] == 1,
        b_n_fast=sb[1] == 1,
        at=at,
        bt=bt,
        ct=None if c is None else c[1],
        yt=yo.ctype,
        aload=load(at, _at("ab", "m", sa[0], "k", sa[1], wide)),
        bload=load(bt, _at("bb", "k", sb[0], "n", sb[1], wide)),
        ystore=store(yo.ctype, "r"),
        result=r,
        TILE=TILE,
        DEPTH=DEPTH,
        THREADS=THREADS,
    )


@kernel("MatMul", "Gemm", supports=_float)
def matmul(b):
    g = lowering.matmul(b)
    c = _operand(b, 2) if g.has_c else None
    _emit(
        b, _operand(b, 0), _operand(b, 1), g.batch, g.m, g.n, g.k, g.sa, g.sb, c, g.sc,
        g.alpha, g.beta,
    )  # fmt: skip
