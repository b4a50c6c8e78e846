"""Reductions: ReduceMean (opset 18 form, axes as an optional input); CumSum."""

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


@op(
    "ReduceMean",
    types={0: "numeric", 1: "index"},
    inputs=(1, 2),
    infer=_reduce_infer,
    attrs={
        "keepdims": Attr("int", 1),
        "noop_with_empty_axes": Attr("int", 0),
    },
)
def reduce_mean(x, axes=None, *, keepdims, noop_with_empty_axes):
    """Mean over `axes` (all axes when omitted, unless noop_with_empty_axes)."""
    axes = _reduce_axes(axes, x.ndim, noop_with_empty_axes)
    if axes is None:
        return x
    ct = np.promote_types(x.dtype, np.float32)
    return np.mean(x, axis=axes, keepdims=bool(keepdims), dtype=ct).astype(x.dtype)


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
