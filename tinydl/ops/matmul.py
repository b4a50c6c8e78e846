"""Matrix products: MatMul (NumPy matmul semantics), Gemm and Einsum."""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, broadcast, op


def _same_dtype(ctx: InferContext, *inputs: int) -> str | None:
    dtypes = {ctx.dtype(i) for i in inputs if ctx.dtype(i) is not None}
    if len(dtypes) > 1:
        raise ctx.fail(f"inputs must have one dtype, got {sorted(dtypes)}")
    return dtypes.pop() if dtypes else None


def _check_inner(ctx: InferContext, k1, k2) -> None:
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise ctx.fail(f"inner dimensions differ: expected {k1} rows in B, got {k2}")


def _matmul_infer(ctx: InferContext) -> list[TensorType]:
    dtype, a, b = _same_dtype(ctx, 0, 1), ctx.shape(0), ctx.shape(1)
    if a is None or b is None:
        return [TensorType(dtype, None)]
    if not a or not b:
        raise ctx.fail(f"inputs must have rank >= 1, got {a} and {b}")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    _check_inner(ctx, a2[-1], b2[-2])
    rows = (a2[-2],) if len(a) > 1 else ()
    cols = (b2[-1],) if len(b) > 1 else ()
    return [TensorType(dtype, (*broadcast(a2[:-2], b2[:-2]), *rows, *cols))]


@op("MatMul", types="numeric", same_dtype="all", inputs=2, infer=_matmul_infer)
def matmul(a, b):
    return np.matmul(a, b)


def _gemm_infer(ctx: InferContext) -> list[TensorType]:
    dtype, a, b = _same_dtype(ctx, 0, 1, 2), ctx.shape(0), ctx.shape(1)
    if a is None or b is None:
        return [TensorType(dtype, None)]
    if len(a) != 2 or len(b) != 2:
        raise ctx.fail(f"A and B must be 2-D, got {a} and {b}")
    m, k1 = a[::-1] if ctx.attrs["transA"] else a
    k2, n = b[::-1] if ctx.attrs["transB"] else b
    _check_inner(ctx, k1, k2)
    c = ctx.shape(2) if ctx.has(2) else None
    if c is not None:
        target = (m, n)[2 - len(c) :] if len(c) <= 2 else None
        if target is None or any(
            isinstance(d, int) and isinstance(t, int) and d not in (1, t)
            for d, t in zip(c, target, strict=True)
        ):
            raise ctx.fail(f"C of shape {c} does not broadcast to ({m}, {n})")
    return [TensorType(dtype, (m, n))]


@op(
    "Gemm",
    types="numeric",
    inputs=(2, 3),
    same_dtype="all",
    infer=_gemm_infer,
    attrs={
        "alpha": Attr("float", 1.0),
        "beta": Attr("float", 1.0),
        "transA": Attr("int", 0),
        "transB": Attr("int", 0),
    },
)
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    """alpha * A' @ B' + beta * C, where ' transposes when the flag is set."""
    t = a.dtype.type
    y = (a.T if transA else a) @ (b.T if transB else b)
    if alpha != 1.0:
        y = y * t(alpha)
    if c is not None:
        # C broadcasts one way, to (M, N): a (5, 1) bias must not widen a (1, 5) product.
        fits = all(d in (1, t_) for d, t_ in zip(c.shape[::-1], y.shape[::-1], strict=False))
        if c.ndim > 2 or not fits:
            raise ValueError(f"C of shape {c.shape} does not broadcast to {y.shape}")
        y = y + (c * t(beta) if beta != 1.0 else c)
    return y.astype(a.dtype, copy=False)


def _einsum_labels(equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Each input's axis labels and the output's, with `...` expanded to labels of its own
    ("...0", "...1": right-aligned, so the broadcast batch axes line up)."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, got {len(ranks)}")
    spans = []
    for term, rank in zip(terms, ranks, strict=True):
        if term.count("...") > 1:
            raise ValueError(f"equation {equation!r}: one '...' per operand")
        n = rank - len(term.replace("...", "")) if "..." in term else 0
        if n < 0 or ("..." not in term and len(term) != rank):
            raise ValueError(f"equation {equation!r}: term {term!r} does not fit rank {rank}")
        spans.append(n)
    ell = max(spans, default=0)

    def expand(term: str, n: int) -> list[str]:
        head, dots, tail = term.partition("...")
        return [*head, *(f"...{i}" for i in range(ell - n, ell) if dots), *tail]

    inputs = [expand(t, n) for t, n in zip(terms, spans, strict=True)]
    if arrow:
        output = expand(rhs, ell)
    else:
        letters = [c for t in terms for c in t.replace("...", "")]
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        output = [f"...{i}" for i in range(ell)] + once
    known = {label for labels in inputs for label in labels}
    if not set(output) <= known or len(set(output)) != len(output):
        raise ValueError(f"equation {equation!r}: output labels must be distinct input labels")
    return inputs, output


def _einsum_infer(ctx: InferContext) -> list[TensorType]:
    n = len(ctx.inputs)
    dtype, shapes = _same_dtype(ctx, *range(n)), [ctx.shape(i) for i in range(n)]
    if any(s is None for s in shapes):
        return [TensorType(dtype, None)]
    inputs, output = _einsum_labels(ctx.attrs["equation"], [len(s) for s in shapes])
    dims: dict[str, list] = {}
    for labels, shape in zip(inputs, shapes, strict=True):
        for label, d in zip(labels, shape, strict=True):
            dims.setdefault(label, []).append(d)
    out = []
    for label in output:
        (d,) = broadcast(*[(d,) for d in dims[label]])
        out.append(d)
    return [TensorType(dtype, tuple(out))]


@op(
    "Einsum",
    types="numeric",
    inputs=(1, 1 << 16),
    same_dtype="all",
    attrs={"equation": Attr("string")},
    infer=_einsum_infer,
)
def einsum(*inputs, equation):
    """Einstein summation (numpy.einsum); float16 is summed in float32."""
    _einsum_labels(equation, [x.ndim for x in inputs])
    ct = np.promote_types(inputs[0].dtype, np.float32) if inputs[0].dtype == np.float16 else None
    args = [x.astype(ct) for x in inputs] if ct is not None else inputs
    return np.asarray(np.einsum(equation.replace(" ", ""), *args)).astype(inputs[0].dtype)
