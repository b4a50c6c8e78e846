"""MatMul (NumPy semantics: batch broadcasting, 1-D promotion) and Gemm, as one tiled kernel.

A and B are read through element strides, so transposed operands need no copy; per-batch
offsets of A and B come from a small table. Gemm's alpha and beta*C are in the epilogue.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import broadcast_strides, kernel, wgsl_float


def _float(node, graph) -> Support:
    v = graph.value(node.outputs[0])
    if v is not None and v.dtype == "int32":
        return Support(False, f"{node.op} on int32 is not implemented")
    return Support(True)


def _operand(b, i: int):
    """A value name, or a constant uploaded once; and its storage type."""
    arr = b.const(i)
    if arr is None:
        return b.inputs[i], b.info(i).stype
    return b.upload(("operand", i), arr.astype(np.float32), "f32"), "f32"


def _emit(b, a, b_, batch, m, n, k, sa, sb, c=None, sc=(0, 0), alpha=1.0, beta=1.0):
    (abuf, at), (bbuf, bt) = a, b_
    table = b.upload("batch", np.asarray(batch, np.int64).astype(np.int32).ravel(), "i32")
    bindings = [abuf, bbuf, table]
    ctype_c = "f32"
    if c is not None:
        bindings.append(c[0])
        ctype_c = c[1]
    bindings.append(b.outputs[0])
    b.dispatch(
        "matmul.wgsl",
        bindings,
        (math.ceil(n / 32), math.ceil(m / 32), len(batch)),
        B=len(batch),
        M=m,
        N=n,
        K=k,
        SAM=sa[0],
        SAK=sa[1],
        SBK=sb[0],
        SBN=sb[1],
        SCM=sc[0],
        SCN=sc[1],
        at=at,
        bt=bt,
        ctype_c=ctype_c,
        ot=b.out().stype,
        has_c=c is not None,
        alpha=wgsl_float(alpha),
        beta=wgsl_float(beta),
    )


@kernel("MatMul", supports=_float)
def matmul(b):
    sa_, sb_ = (
        b.info(0).shape if b.const(0) is None else b.const(0).shape,
        (b.info(1).shape if b.const(1) is None else b.const(1).shape),
    )
    a2 = (1, *sa_) if len(sa_) == 1 else tuple(sa_)
    b2 = (*sb_, 1) if len(sb_) == 1 else tuple(sb_)
    m, k = a2[-2:]
    n = b2[-1]
    batch_shape = np.broadcast_shapes(a2[:-2], b2[:-2])
    a_st = broadcast_strides(a2[:-2], batch_shape) if a2[:-2] else []
    b_st = broadcast_strides(b2[:-2], batch_shape) if b2[:-2] else []
    offsets = []
    for idx in np.ndindex(*batch_shape):
        ao = sum(i * s for i, s in zip(idx[len(idx) - len(a_st) :], a_st, strict=True)) * m * k
        bo = sum(i * s for i, s in zip(idx[len(idx) - len(b_st) :], b_st, strict=True)) * k * n
        offsets.append((ao, bo))
    _emit(b, _operand(b, 0), _operand(b, 1), offsets or [(0, 0)], m, n, k, (k, 1), (n, 1))


@kernel("Gemm", supports=_float)
def gemm(b):
    shape_a = b.info(0).shape if b.const(0) is None else b.const(0).shape
    shape_b = b.info(1).shape if b.const(1) is None else b.const(1).shape
    m, k = shape_a[::-1] if b.attrs["transA"] else shape_a
    n = shape_b[0] if b.attrs["transB"] else shape_b[1]
    sa = (1, m) if b.attrs["transA"] else (k, 1)
    sb = (1, k) if b.attrs["transB"] else (n, 1)
    c, sc = None, (0, 0)
    if b.has(2):
        cshape = b.info(2).shape if b.const(2) is None else b.const(2).shape
        c = _operand(b, 2)
        sc = tuple(broadcast_strides(cshape, (m, n)))
    _emit(
        b,
        _operand(b, 0),
        _operand(b, 1),
        [(0, 0)],
        m,
        n,
        k,
        sa,
        sb,
        c,
        sc,
        b.attrs["alpha"],
        b.attrs["beta"],
    )
