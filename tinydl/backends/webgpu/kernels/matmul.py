"""MatMul (NumPy semantics: batch broadcasting, 1-D promotion) and Gemm, as one tiled kernel.

A and B are read through element strides, so transposed operands need no copy; per-batch
offsets of A and B come from a small table. Gemm's alpha and beta*C are in the epilogue.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import INT_DTYPES, kernel, wgsl_float


def _float(node, graph) -> Support:
    v = graph.value(node.outputs[0])
    if v is not None and v.dtype in INT_DTYPES:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


def _operand(b, i: int):
    """A value name, or a constant uploaded once; and its storage type."""
    arr = b.const(i)
    if arr is None:
        return b.inputs[i], b.info(i).stype
    return b.upload(("operand", i), arr.astype(np.float32), "f32"), "f32"


def emit_matmul(b, a, b_, batch, m, n, k, sa, sb, c=None, sc=(0, 0), alpha=1.0, beta=1.0):
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


@kernel("MatMul", "Gemm", supports=_float)
def matmul(b):
    # (one B for a batch of A's items back to back: one product of all their rows)
    g = lowering.fold_batch(lowering.matmul(b))
    c = _operand(b, 2) if g.has_c else None
    emit_matmul(
        b, _operand(b, 0), _operand(b, 1), g.batch, g.m, g.n, g.k, g.sa, g.sb, c, g.sc,
        g.alpha, g.beta,
    )  # fmt: skip
