"""Indexing: Gather, GatherElements, GatherND, ScatterElements, ScatterND, NonZero, OneHot, Trilu.

Negative indices count from the end of their axis, as ONNX defines; an index outside
[-dim, dim) is an error here (the GPU kernels, which cannot raise, clamp it: docs/webgpu.md).
"""

import math

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, normalize_axis, op, same_as_input


def wrap(indices: np.ndarray, dim: int) -> np.ndarray:
    """Indices into an axis of size `dim` with negative ones counted from its end (int64)."""
    idx = np.asarray(indices).astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise IndexError(
            f"indices must be in [{-dim}, {dim - 1}] for an axis of size {dim}, "
            f"got {int(idx.min())}..{int(idx.max())}"
        )
    return np.where(idx < 0, idx + dim, idx)


def _gather_infer(ctx: InferContext) -> list[TensorType]:
    x, idx = ctx.shape(0), ctx.shape(1)
    if x is None or idx is None:
        return [TensorType(ctx.dtype(0), None)]
    axis = normalize_axis(ctx.attrs["axis"], len(x))
    return [TensorType(ctx.dtype(0), (*x[:axis], *idx, *x[axis + 1 :]))]


@op("Gather", types={1: "index"}, inputs=2, attrs={"axis": Attr("int", 0)}, infer=_gather_infer)
def gather(data, indices, *, axis):
    """Entries of `data` along `axis` at `indices` (its shape replaces that axis)."""
    axis = normalize_axis(axis, data.ndim)
    return np.take(data, wrap(indices, data.shape[axis]), axis=axis)


def _same_rank_infer(ctx: InferContext) -> list[TensorType]:
    x, idx = ctx.shape(0), ctx.shape(1)
    if x is not None and idx is not None and len(x) != len(idx):
        raise ctx.fail(f"data {x} and indices {idx} must have one rank")
    return [TensorType(ctx.dtype(0), idx)]


def _element_index(indices: np.ndarray, axis: int, shape) -> tuple[np.ndarray, ...]:
    """The fancy index that pairs every entry of `indices` with its own coordinates, `axis`
    replaced by the entry's (wrapped) value."""
    if indices.ndim != len(shape):
        raise ValueError(f"data {tuple(shape)} and indices {indices.shape} must have one rank")
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = wrap(indices, shape[axis])
    return tuple(grid)


@op(
    "GatherElements",
    types={1: "index"},
    inputs=2,
    attrs={"axis": Attr("int", 0)},
    infer=_same_rank_infer,
)
def gather_elements(data, indices, *, axis):
    """out[..., i, ...] = data[..., indices[..., i, ...], ...] along `axis`."""
    axis = normalize_axis(axis, data.ndim)
    return data[_element_index(indices, axis, data.shape)]


def _gather_nd_infer(ctx: InferContext) -> list[TensorType]:
    x, idx, b = ctx.shape(0), ctx.shape(1), ctx.attrs["batch_dims"]
    if x is None or idx is None or not idx or not isinstance(idx[-1], int):
        return [TensorType(ctx.dtype(0), None)]
    k = idx[-1]
    if not 0 <= b < min(len(x), len(idx)) or b + k > len(x):
        raise ctx.fail(f"indices {idx} with batch_dims {b} do not fit data {x}")
    return [TensorType(ctx.dtype(0), (*idx[:-1], *x[b + k :]))]


@op(
    "GatherND",
    types={1: "index"},
    inputs=2,
    attrs={"batch_dims": Attr("int", 0)},
    infer=_gather_nd_infer,
)
def gather_nd(data, indices, *, batch_dims):
    """Slices of `data` at the index tuples in the last axis of `indices`; the first
    `batch_dims` axes of both are matched, not indexed."""
    b, k = batch_dims, indices.shape[-1]
    if data.shape[:b] != indices.shape[:b] or b + k > data.ndim:
        raise ValueError(f"indices {indices.shape} with batch_dims {b} do not fit {data.shape}")
    nb = math.prod(data.shape[:b])
    flat = data.reshape(nb, *data.shape[b:])
    idx = indices.reshape(nb, -1, k)
    where = [wrap(idx[..., j], data.shape[b + j]) for j in range(k)]
    out = flat[(np.arange(nb)[:, None], *where)]
    return out.reshape(*indices.shape[:-1], *data.shape[b + k :])


# ScatterElements/ScatterND `reduction` -> the ufunc whose `at` applies it (repeats accumulate).
_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(data, where, updates, reduction: str) -> np.ndarray:
    out = data.copy()
    if reduction == "none":
        out[where] = updates  # a repeated index keeps its last update, as onnxruntime does
    elif reduction in _REDUCTIONS:
        _REDUCTIONS[reduction].at(out, where, updates)
    else:
        raise ValueError(f"reduction must be none, {', '.join(_REDUCTIONS)}; got {reduction!r}")
    return out


@op(
    "ScatterElements",
    types={1: "index"},
    inputs=3,
    same_dtype=(0, 2),
    attrs={"axis": Attr("int", 0), "reduction": Attr("string", "none")},
    infer=same_as_input(0),
)
def scatter_elements(data, indices, updates, *, axis, reduction):
    """A copy of `data` with updates[..., i, ...] written (or reduced) at indices[..., i, ...]
    along `axis`."""
    axis = normalize_axis(axis, data.ndim)
    if updates.shape != indices.shape:
        raise ValueError(f"updates {updates.shape} must have the shape of indices {indices.shape}")
    return _scatter(data, _element_index(indices, axis, data.shape), updates, reduction)


@op(
    "ScatterND",
    types={1: "index"},
    inputs=3,
    same_dtype=(0, 2),
    attrs={"reduction": Attr("string", "none")},
    infer=same_as_input(0),
)
def scatter_nd(data, indices, updates, *, reduction):
    """A copy of `data` with the slices at the index tuples of `indices` replaced by (or
    reduced with) `updates`."""
    k = indices.shape[-1]
    want = indices.shape[:-1] + data.shape[k:]
    if k > data.ndim or updates.shape != want:
        raise ValueError(f"indices {indices.shape} and updates {updates.shape} do not fit data")
    where = tuple(wrap(indices[..., j], data.shape[j]) for j in range(k))
    return _scatter(data, where, updates, reduction)


def _nonzero_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    return [TensorType("int64", None if x is None else (max(len(x), 1), None))]


@op("NonZero", infer=_nonzero_infer)
def nonzero(x):
    """Coordinates of the nonzero entries, one column each, in row-major order (a scalar is
    read as one element)."""
    return np.array(np.nonzero(np.atleast_1d(x)), np.int64).reshape(max(x.ndim, 1), -1)


def _onehot_infer(ctx: InferContext) -> list[TensorType]:
    idx, depth = ctx.shape(0), ctx.const(1)
    if idx is None:
        return [TensorType(ctx.dtype(2), None)]
    axis = normalize_axis(ctx.attrs["axis"], len(idx) + 1)
    d = None if depth is None else _depth(depth)
    return [TensorType(ctx.dtype(2), (*idx[:axis], d, *idx[axis:]))]


def _depth(depth) -> int:
    if np.size(depth) != 1:
        raise ValueError(f"depth must hold one value, got {np.size(depth)}")
    d = int(np.ravel(depth)[0])
    if d < 1:
        raise ValueError(f"depth must be positive, got {d}")
    return d


@op(
    "OneHot",
    types={0: "numeric", 1: "numeric"},
    inputs=3,
    attrs={"axis": Attr("int", -1)},
    infer=_onehot_infer,
)
def one_hot(indices, depth, values, *, axis):
    """values[1] where the new `axis` equals the index (negative ones count from `depth`),
    values[0] elsewhere; an index outside [-depth, depth) gives values[0] throughout."""
    d = _depth(depth)
    axis = normalize_axis(axis, indices.ndim + 1)
    idx = np.expand_dims(indices.astype(np.int64), axis)
    idx = np.where(idx < 0, idx + d, idx)
    shape = [1] * (indices.ndim + 1)
    shape[axis] = d
    off, on = np.ravel(values)[:2]
    return np.where(idx == np.arange(d).reshape(shape), on, off).astype(values.dtype)


def _trilu_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is not None and len(x) < 2:
        raise ctx.fail(f"input must have rank 2 or more, got {x}")
    return [TensorType(ctx.dtype(0), x)]


@op("Trilu", types={1: "index"}, inputs=(1, 2), attrs={"upper": Attr("int", 1)}, infer=_trilu_infer)
def trilu(x, k=None, *, upper):
    """The upper (or lower) triangle of the last two axes from diagonal `k`; zeros elsewhere."""
    k = 0 if k is None else int(np.ravel(k)[0])
    return np.triu(x, k) if upper else np.tril(x, k)
