"""Reductions (opset 18 forms, axes as an optional input): ReduceMean, ReduceMax, ReduceMin,
ReduceSum, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare; the
index reductions ArgMax and ArgMin; TopK; CumSum."""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, normalize_axis, op, same_as_input


def _reduce_axes(axes, rank: int, noop: int) -> tuple[int, ...] | None:
    """Normalized axes to reduce; None means "return the input unchanged"."""
    if axes is None or len(axes) == 0:
        return None if noop else tuple(range(rank))
    out = tuple(sorted(normalize_axis(int(a), rank) for a in np.ravel(axes)))
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(np.ravel(axes))} repeat an axis")
    return out


def _reduce_infer(ctx: InferContext) -> list[TensorType]:
    x, keep = ctx.shape(0), ctx.attrs["keepdims"]
    if ctx.has(1) and ctx.const(1) is None:
        return [TensorType(ctx.dtype(0), None if x is None or not keep else (None,) * len(x))]
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    axes = _reduce_axes(ctx.const(1), len(x), ctx.attrs["noop_with_empty_axes"])
    if axes is None:
        return [TensorType(ctx.dtype(0), x)]
    shape = tuple(1 if i in axes else d for i, d in enumerate(x) if keep or i not in axes)
    return [TensorType(ctx.dtype(0), shape)]


def _compute_type(dtype: np.dtype) -> np.dtype:
    """Floats reduce in at least float32; integers in their own type (wrapping, as in ONNX)."""
    return np.promote_types(dtype, np.float32) if dtype.kind == "f" else dtype


def _extreme(dtype: np.dtype, highest: bool):
    """The identity of max (the lowest value) or min (the highest): an empty reduction's result."""
    if dtype.kind == "f":
        return dtype.type(np.inf if highest else -np.inf)
    if dtype.kind == "b":
        return highest
    info = np.iinfo(dtype)
    return info.max if highest else info.min


def _sum(x, axes, ct):
    return np.sum(x, axis=axes, keepdims=True, dtype=ct)


def _log_sum_exp(x, axes, ct):
    m = np.max(x, axis=axes, keepdims=True, initial=_extreme(x.dtype, False)).astype(ct)
    # An all -inf (or empty) slice has max -inf: shift by 0 so its result is log(0) = -inf.
    shift = np.where(np.isfinite(m), m, ct.type(0)) if ct.kind == "f" else m
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(x.astype(ct) - shift), axis=axes, keepdims=True)) + shift


# ONNX name -> f(x, axes, ct) reducing `axes` of x with keepdims, in compute type ct.
REDUCTIONS = {
    # An integer mean is computed in floating point, then cast back (truncated).
    "ReduceMean": lambda x, axes, ct: np.mean(
        x, axis=axes, keepdims=True, dtype=np.promote_types(ct, np.float32)
    ),
    "ReduceMax": lambda x, axes, ct: np.max(
        x, axis=axes, keepdims=True, initial=_extreme(x.dtype, False)
    ),
    "ReduceMin": lambda x, axes, ct: np.min(
        x, axis=axes, keepdims=True, initial=_extreme(x.dtype, True)
    ),
    "ReduceSum": _sum,
    "ReduceProd": lambda x, axes, ct: np.prod(x, axis=axes, keepdims=True, dtype=ct),
    "ReduceL1": lambda x, axes, ct: _sum(np.abs(x.astype(ct)), axes, ct),
    "ReduceL2": lambda x, axes, ct: np.sqrt(_sum(np.square(x.astype(ct)), axes, ct)),
    "ReduceLogSum": lambda x, axes, ct: np.log(_sum(x, axes, ct)),
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": lambda x, axes, ct: _sum(np.square(x.astype(ct)), axes, ct),
}


def _reduction(name: str):
    fn = REDUCTIONS[name]

    def reduce(x, axes=None, *, keepdims, noop_with_empty_axes):
        # No axes with noop_with_empty_axes reduces each element alone: L1 still takes |x|.
        axes = _reduce_axes(axes, x.ndim, noop_with_empty_axes) or ()
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            y = fn(x, axes, _compute_type(x.dtype))
        return (y if keepdims else np.squeeze(y, axis=axes)).astype(x.dtype)

    reduce.__doc__ = f"{name} over `axes` (all axes when omitted, unless noop_with_empty_axes)."
    # Max and Min also take bool (opset 20); the others any number.
    types = {1: "index"} if name in ("ReduceMax", "ReduceMin") else {0: "numeric", 1: "index"}
    op(
        name,
        types=types,
        inputs=(1, 2),
        infer=_reduce_infer,
        attrs={"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)},
    )(reduce)
    return reduce


for _name in REDUCTIONS:
    _reduction(_name)


# -- ArgMax, ArgMin ------------------------------------------------------------------------------


def _arg_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType("int64", None)]
    axis = normalize_axis(ctx.attrs["axis"], len(x))
    keep = ctx.attrs["keepdims"]
    shape = tuple(1 if i == axis else d for i, d in enumerate(x) if keep or i != axis)
    return [TensorType("int64", shape)]


_ARG_ATTRS = {
    "axis": Attr("int", 0),
    "keepdims": Attr("int", 1),
    "select_last_index": Attr("int", 0),
}


def _arg(x, axis, keepdims, select_last_index, pick):
    axis = normalize_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"cannot take the index of an extreme over an empty axis {axis}")
    if select_last_index:
        i = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=True)
    else:
        i = pick(x, axis=axis, keepdims=True)
    return (i if keepdims else np.squeeze(i, axis=axis)).astype(np.int64)


@op("ArgMax", types="numeric", infer=_arg_infer, attrs=_ARG_ATTRS)
def arg_max(x, *, axis, keepdims, select_last_index):
    """Index of the largest element along `axis` (the first one, or the last with
    select_last_index)."""
    return _arg(x, axis, keepdims, select_last_index, np.argmax)


@op("ArgMin", types="numeric", infer=_arg_infer, attrs=_ARG_ATTRS)
def arg_min(x, *, axis, keepdims, select_last_index):
    """Index of the smallest element along `axis` (the first one, or the last with
    select_last_index)."""
    return _arg(x, axis, keepdims, select_last_index, np.argmin)


# -- TopK ----------------------------------------------------------------------------------------


def topk_count(k, length: int) -> int:
    """TopK's k, checked against the length of its axis."""
    k = np.ravel(k)
    if k.size != 1:
        raise ValueError(f"K must hold one value, got {k.size}")
    k = int(k[0])
    if not 0 <= k <= length:
        raise ValueError(f"K = {k} is outside 0..{length} (the length of the axis)")
    return k


def _topk_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType(ctx.dtype(0), None), TensorType("int64", None)]
    axis = normalize_axis(ctx.attrs["axis"], len(x))
    k = ctx.const(1)
    if k is not None and isinstance(x[axis], int):
        k = topk_count(k, x[axis])
    elif k is not None and np.size(k) == 1:
        k = int(np.ravel(k)[0])
    else:
        k = None
    shape = tuple(k if i == axis else d for i, d in enumerate(x))
    return [TensorType(ctx.dtype(0), shape), TensorType("int64", shape)]


@op(
    "TopK",
    types={0: "numeric", 1: "index"},
    inputs=2,
    outputs=2,
    infer=_topk_infer,
    attrs={"axis": Attr("int", -1), "largest": Attr("int", 1), "sorted": Attr("int", 1)},
)
def top_k(x, k, *, axis, largest, sorted):
    """The k largest (or smallest) elements along `axis` and their indices; equal values in
    index order, as onnxruntime gives them. Unsorted output (sorted=0) is given sorted too."""
    axis = normalize_axis(axis, x.ndim)
    n = x.shape[axis]
    k = topk_count(k, n)
    if largest:
        # A stable ascending sort of the reversed axis, read backwards: descending values, equal
        # ones by ascending index (no negation, which would overflow the lowest integer).
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


@op(
    "CumSum",
    types={0: "numeric", 1: "index"},
    inputs=2,
    infer=same_as_input(0),
    attrs={"exclusive": Attr("int", 0), "reverse": Attr("int", 0)},
)
def cumsum(x, axis, *, exclusive, reverse):
    """Running sums along `axis` (a one-element tensor); `exclusive` leaves each element out of
    its own sum, `reverse` sums from the end."""
    if np.size(axis) != 1:
        raise ValueError(f"axis must hold one value, got {np.size(axis)}")
    axis = normalize_axis(int(np.ravel(axis)[0]), x.ndim)
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        # shift by one along the axis: zero first, the last sum dropped
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        out = np.delete(np.pad(out, pad), -1, axis=axis)
    return np.flip(out, axis) if reverse else out
