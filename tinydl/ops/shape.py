"""Shape and data movement: Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Concat, Slice, Shape,
Cast, Constant, Identity, Dropout (inference), Split, Expand, Tile; tensors made from shapes:
ConstantOfShape, Range."""

import math

import numpy as np

from tinydl.ir.dtypes import ONNX_CODES
from tinydl.ir.graph import Dim
from tinydl.ops.base import (
    Attr,
    InferContext,
    TensorType,
    broadcast,
    normalize_axis,
    op,
    same_as_input,
)


def _product(dims) -> int | None:
    return math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def _flatten_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    axis = _flatten_axis(ctx.attrs["axis"], len(x))
    return [TensorType(ctx.dtype(0), (_product(x[:axis]), _product(x[axis:])))]


def _flatten_axis(axis: int, rank: int) -> int:
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if axis < rank else rank


@op("Flatten", attrs={"axis": Attr("int", 1)}, infer=_flatten_infer)
def flatten(x, *, axis):
    """2-D view: the axes before `axis` become rows, the rest columns."""
    axis = _flatten_axis(axis, x.ndim)
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _rank_of_shape(ctx: InferContext, i: int) -> int | None:
    """The length of shape input `i` where its own shape is known (its values are not)."""
    known = ctx.shape(i)
    return known[0] if known is not None and len(known) == 1 and isinstance(known[0], int) else None


def _reshape_infer(ctx: InferContext) -> list[TensorType]:
    target, x = ctx.const(1), ctx.shape(0)
    if target is None:
        # (computed at run time, from a symbolic dim say: its length is still the rank)
        rank = _rank_of_shape(ctx, 1)
        return [TensorType(ctx.dtype(0), None if rank is None else (None,) * rank)]
    target = [int(d) for d in np.ravel(target)]
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise ctx.fail(f"shape {target} may hold at most one -1 and no other negative size")
    out: list[Dim] = []
    for i, d in enumerate(target):
        if d == 0 and not ctx.attrs["allowzero"]:
            if x is None or i >= len(x):
                raise ctx.fail(f"shape {target} copies dim {i} (0) but the input is {x}")
            out.append(x[i])
        else:
            out.append(d)
    total = None if x is None else _product(x)
    known = _product([d for d in out if d != -1])
    if -1 in out:
        unknown = None if total is None or known is None else total // max(known, 1)
        if unknown is not None and known * unknown != total:
            raise ctx.fail(f"cannot reshape {x} ({total} elements) to {target}")
        out[out.index(-1)] = unknown
    elif total is not None and known is not None and total != known:
        raise ctx.fail(f"cannot reshape {x} ({total} elements) to {target} ({known} elements)")
    return [TensorType(ctx.dtype(0), tuple(out))]


@op(
    "Reshape",
    types={1: "index"},
    inputs=2,
    attrs={"allowzero": Attr("int", 0)},
    infer=_reshape_infer,
)
def reshape(x, shape, *, allowzero):
    """Reshape to `shape`: -1 is inferred; 0 copies the input dim unless allowzero."""
    shape = [int(d) for d in shape]
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _perm(perm, rank: int) -> list[int]:
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(normalize_axis(p, rank) for p in perm) != list(range(rank)):
        raise ValueError(f"perm {perm} is not a permutation of {rank} axes")
    return [normalize_axis(p, rank) for p in perm]


def _transpose_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    return [TensorType(ctx.dtype(0), tuple(x[p] for p in _perm(ctx.attrs["perm"], len(x))))]


@op("Transpose", attrs={"perm": Attr("ints", None)}, infer=_transpose_infer)
def transpose(x, *, perm):
    """Permute axes; the default reverses them."""
    return np.transpose(x, _perm(perm, x.ndim))


def _axes(axes, rank: int) -> list[int]:
    out = sorted(normalize_axis(int(a), rank) for a in np.ravel(axes))
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(np.ravel(axes))} repeat an axis")
    return out


def _squeeze_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is not None and ctx.has(1) and ctx.const(1) is None:
        n = _rank_of_shape(ctx, 1)  # (axes computed at run time: as many fewer axes)
        return [TensorType(ctx.dtype(0), None if n is None else (None,) * (len(x) - n))]
    if x is None or (ctx.has(1) and ctx.const(1) is None):
        return [TensorType(ctx.dtype(0), None)]
    if not ctx.has(1):
        if not all(isinstance(d, int) for d in x):
            return [TensorType(ctx.dtype(0), None)]
        return [TensorType(ctx.dtype(0), tuple(d for d in x if d != 1))]
    axes = _axes(ctx.const(1), len(x))
    for a in axes:
        if isinstance(x[a], int) and x[a] != 1:
            raise ctx.fail(f"cannot squeeze axis {a}: expected size 1, got {x[a]} (shape {x})")
    return [TensorType(ctx.dtype(0), tuple(d for i, d in enumerate(x) if i not in axes))]


@op("Squeeze", types={1: "index"}, inputs=(1, 2), infer=_squeeze_infer)
def squeeze(x, axes=None):
    """Drop the size-1 axes listed in `axes` (all size-1 axes when omitted)."""
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(_axes(axes, x.ndim)))


def _unsqueeze_infer(ctx: InferContext) -> list[TensorType]:
    x, axes = ctx.shape(0), ctx.const(1)
    if x is not None and axes is None:
        n = _rank_of_shape(ctx, 1)  # (axes computed at run time: as many more axes)
        return [TensorType(ctx.dtype(0), None if n is None else (None,) * (len(x) + n))]
    if x is None or axes is None:
        return [TensorType(ctx.dtype(0), None)]
    rank = len(x) + np.size(axes)
    axes = _axes(axes, rank)
    rest = iter(x)
    return [TensorType(ctx.dtype(0), tuple(1 if i in axes else next(rest) for i in range(rank)))]


@op("Unsqueeze", types={1: "index"}, inputs=2, infer=_unsqueeze_infer)
def unsqueeze(x, axes):
    """Insert size-1 axes at `axes` (positions in the output)."""
    return np.expand_dims(x, tuple(_axes(axes, x.ndim + np.size(axes))))


def _concat_infer(ctx: InferContext) -> list[TensorType]:
    shapes = [ctx.shape(i) for i in range(len(ctx.inputs))]
    dtypes = {ctx.dtype(i) for i in range(len(ctx.inputs))} - {None}
    if len(dtypes) > 1:
        raise ctx.fail(f"inputs must have one dtype, got {sorted(dtypes)}")
    dtype = dtypes.pop() if dtypes else None
    if any(s is None for s in shapes):
        return [TensorType(dtype, None)]
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise ctx.fail(f"inputs must have one rank, got shapes {shapes}")
    axis = normalize_axis(ctx.attrs["axis"], rank)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i] for s in shapes]
        if i == axis:
            out.append(sum(dims) if all(isinstance(d, int) for d in dims) else None)
            continue
        ints = {d for d in dims if isinstance(d, int)}
        if len(ints) > 1:
            raise ctx.fail(
                f"inputs differ on axis {i} (not the concat axis {axis}): shapes {shapes}"
            )
        out.append(ints.pop() if ints else dims[0] if len(set(dims)) == 1 else None)
    return [TensorType(dtype, tuple(out))]


@op(
    "Concat",
    inputs=(1, 1 << 16),
    same_dtype="all",
    attrs={"axis": Attr("int")},
    infer=_concat_infer,
)
def concat(*inputs, axis):
    return np.concatenate(inputs, axis=axis)


def _slice_range(start: int, end: int, step: int, dim: int) -> tuple[int, int | None, int]:
    """Clamp ONNX slice bounds to a Python slice of an axis of size `dim` (None: before index 0)."""
    if step == 0:
        raise ValueError("slice step must not be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim), step
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return start, None if end < 0 else end, step


def _slice_params(rank: int, starts, ends, axes, steps) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, as Python ints."""
    starts, ends = np.ravel(starts), np.ravel(ends)
    axes = range(len(starts)) if axes is None else [int(a) for a in np.ravel(axes)]
    steps = [1] * len(starts) if steps is None else np.ravel(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(
            f"starts, ends, axes and steps must have one length, got {len(starts)}, {len(ends)}, "
            f"{len(axes)}, {len(steps)}"
        )
    norm = [normalize_axis(a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return [
        (a, int(s), int(e), int(t)) for a, s, e, t in zip(norm, starts, ends, steps, strict=True)
    ]


def _slice_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    consts = [ctx.const(i) for i in range(1, 5)]
    if any(ctx.has(i) and c is None for i, c in enumerate(consts, start=1)):
        return [TensorType(ctx.dtype(0), (None,) * len(x))]
    out = list(x)
    for axis, start, end, step in _slice_params(len(x), *consts):
        if isinstance(x[axis], int):
            out[axis] = len(range(x[axis])[slice(*_slice_range(start, end, step, x[axis]))])
        else:
            out[axis] = None
    return [TensorType(ctx.dtype(0), tuple(out))]


@op(
    "Slice",
    types={1: "index", 2: "index", 3: "index", 4: "index"},
    inputs=(3, 5),
    infer=_slice_infer,
)
def slice_(x, starts, ends, axes=None, steps=None):
    """Strided slice with ONNX clamping (out-of-range bounds, negative steps, INT64 sentinels)."""
    index = [slice(None)] * x.ndim
    for axis, start, end, step in _slice_params(x.ndim, starts, ends, axes, steps):
        index[axis] = slice(*_slice_range(start, end, step, x.shape[axis]))
    return x[tuple(index)]


def _shape_range(rank: int, start: int, end: int | None) -> range:
    def clamp(i: int) -> int:
        return min(max(i + rank if i < 0 else i, 0), rank)

    return range(clamp(start), rank if end is None else clamp(end))


def _shape_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType("int64", None)]
    dims = [x[i] for i in _shape_range(len(x), ctx.attrs["start"], ctx.attrs["end"])]
    # The value of Shape comes from the input's type, not its data: make it known when it is.
    value = np.array(dims, np.int64) if all(isinstance(d, int) for d in dims) else None
    return [TensorType("int64", (len(dims),), value)]


@op("Shape", attrs={"start": Attr("int", 0), "end": Attr("int", None)}, infer=_shape_infer)
def shape(x, *, start, end):
    """The input's shape (dims start..end) as int64."""
    return np.array([x.shape[i] for i in _shape_range(x.ndim, start, end)], np.int64)


def _cast_dtype(code: int) -> str:
    if code not in ONNX_CODES:
        raise ValueError(
            f"Cast to ONNX dtype code {code} is not supported (supported: {sorted(ONNX_CODES)})"
        )
    return ONNX_CODES[code]


def _cast_infer(ctx: InferContext) -> list[TensorType]:
    return [TensorType(_cast_dtype(ctx.attrs["to"]), ctx.shape(0))]


@op("Cast", attrs={"to": Attr("int"), "saturate": Attr("int", 1)}, infer=_cast_infer)
def cast(x, *, to, saturate):
    """Convert element type; float to int truncates toward zero. `saturate` only affects float8."""
    return x.astype(_cast_dtype(to))


def _constant_value(value, value_float, value_floats, value_int, value_ints) -> np.ndarray:
    given = {
        "value": value,
        "value_float": value_float,
        "value_floats": value_floats,
        "value_int": value_int,
        "value_ints": value_ints,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if len(given) != 1:
        raise ValueError(f"exactly one value attribute must be set, got {sorted(given) or 'none'}")
    if value is not None:
        return value
    if value_float is not None or value_floats is not None:
        return np.array(value_float if value_float is not None else value_floats, np.float32)
    return np.array(value_int if value_int is not None else value_ints, np.int64)


def _constant_infer(ctx: InferContext) -> list[TensorType]:
    # A constant's value is its attribute; nothing is computed.
    v = _constant_value(**ctx.attrs)
    return [TensorType(v.dtype.name, tuple(v.shape), v)]


@op(
    "Constant",
    inputs=(0, 0),
    infer=_constant_infer,
    attrs={
        "value": Attr("tensor", None),
        "value_float": Attr("float", None),
        "value_floats": Attr("floats", None),
        "value_int": Attr("int", None),
        "value_ints": Attr("ints", None),
    },
)
def constant(*, value, value_float, value_floats, value_int, value_ints):
    """The one value attribute that is set, as a tensor (floats as float32, ints as int64)."""
    return _constant_value(value, value_float, value_floats, value_int, value_ints)


@op("Identity", infer=same_as_input(0))
def identity(x):
    return x


def _dropout_infer(ctx: InferContext) -> list[TensorType]:
    training = ctx.const(2)
    if ctx.has(2) and (training is None or bool(np.any(training))):
        raise ctx.fail("training_mode must be a constant false: tinydl runs inference only")
    return [TensorType(ctx.dtype(0), ctx.shape(0)), TensorType("bool", ctx.shape(0))]


@op(
    "Dropout",
    types={0: "float", 1: "float"},
    inputs=(1, 3),
    outputs=(1, 2),
    # `ratio` is the opset-10 attribute; later opsets take it as input 1.
    attrs={"seed": Attr("int", None), "ratio": Attr("float", None)},
    infer=_dropout_infer,
)
def dropout(x, ratio_input=None, training_mode=None, *, seed, ratio):
    """Inference: the identity, and an all-true mask."""
    return x, np.ones(x.shape, bool)


def _split_sizes(dim: int, split, num_outputs: int | None, outputs: int) -> list[int]:
    """The size of each part: `split` when given, else `num_outputs` (or one per output) parts
    of ceil(dim / n), the last one smaller."""
    if split is not None:
        if num_outputs is not None:
            raise ValueError("give the 'split' input or the 'num_outputs' attribute, not both")
        sizes = [int(s) for s in np.ravel(split)]
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise ValueError(f"split {sizes} must be non-negative and sum to the axis size {dim}")
        return sizes
    n = outputs if num_outputs is None else num_outputs
    if n < 1:
        raise ValueError(f"num_outputs must be positive, got {n}")
    chunk = -(-dim // n)
    return [min(chunk, max(dim - chunk * i, 0)) for i in range(n)]


def _split_infer(ctx: InferContext) -> list[TensorType]:
    x, n = ctx.shape(0), len(ctx.node.outputs)
    if x is None or (ctx.has(1) and ctx.const(1) is None):
        return [TensorType(ctx.dtype(0), None)] * n
    axis = normalize_axis(ctx.attrs["axis"], len(x))
    if not isinstance(x[axis], int):
        return [TensorType(ctx.dtype(0), (*x[:axis], None, *x[axis + 1 :]))] * n
    sizes = _split_sizes(x[axis], ctx.const(1), ctx.attrs["num_outputs"], n)
    if len(sizes) != n:
        raise ctx.fail(f"{len(sizes)} parts for {n} outputs")
    return [TensorType(ctx.dtype(0), (*x[:axis], s, *x[axis + 1 :])) for s in sizes]


@op(
    "Split",
    types={1: "index"},
    inputs=(1, 2),
    outputs=(1, 1 << 16),
    attrs={"axis": Attr("int", 0), "num_outputs": Attr("int", None)},
    infer=_split_infer,
)
def split(x, split=None, *, axis, num_outputs):
    """Consecutive parts along `axis`, of the sizes in `split` or `num_outputs` equal parts."""
    axis = normalize_axis(axis, x.ndim)
    if split is None and num_outputs is None:
        raise ValueError("Split needs the 'split' input or the 'num_outputs' attribute")
    sizes = _split_sizes(x.shape[axis], split, num_outputs, 0)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _expand_infer(ctx: InferContext) -> list[TensorType]:
    target, x = ctx.const(1), ctx.shape(0)
    if target is None:
        rank = _rank_of_shape(ctx, 1)
        if rank is None or x is None:
            return [TensorType(ctx.dtype(0), None)]
        return [TensorType(ctx.dtype(0), (None,) * max(rank, len(x)))]
    return [TensorType(ctx.dtype(0), broadcast(x, tuple(int(d) for d in target)))]


@op("Expand", types={1: "index"}, inputs=2, infer=_expand_infer)
def expand(x, shape):
    """Broadcast to `shape` both ways (NumPy rules: a 1 in `shape` keeps the input's dim)."""
    out = np.broadcast_shapes(x.shape, tuple(int(d) for d in np.ravel(shape)))
    return np.array(np.broadcast_to(x, out))


def _tile_infer(ctx: InferContext) -> list[TensorType]:
    x, repeats = ctx.shape(0), ctx.const(1)
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    if repeats is None:
        return [TensorType(ctx.dtype(0), (None,) * len(x))]
    reps = _repeats(repeats, len(x))
    return [
        TensorType(
            ctx.dtype(0),
            tuple(d * r if isinstance(d, int) else None for d, r in zip(x, reps, strict=True)),
        )
    ]


def _repeats(repeats, rank: int) -> list[int]:
    reps = [int(r) for r in np.ravel(repeats)]
    if len(reps) != rank or any(r < 0 for r in reps):
        raise ValueError(f"repeats {reps} must be {rank} non-negative counts, one per axis")
    return reps


@op("Tile", types={1: "index"}, inputs=2, infer=_tile_infer)
def tile(x, repeats):
    """The input repeated `repeats[i]` times along each axis i."""
    return np.tile(x, _repeats(repeats, x.ndim))


def _fill_value(value) -> np.ndarray:
    if value is None:
        return np.zeros((), np.float32)
    if np.size(value) != 1:
        raise ValueError(f"value must hold one element, got {np.size(value)}")
    return np.asarray(value).reshape(())


def _target_shape(shape) -> tuple[int, ...]:
    dims = tuple(int(d) for d in np.ravel(shape))
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {list(dims)} has a negative dim")
    return dims


def _constant_of_shape_infer(ctx: InferContext) -> list[TensorType]:
    dtype = _fill_value(ctx.attrs["value"]).dtype.name
    shape = ctx.const(0)
    if shape is None:
        rank = _rank_of_shape(ctx, 0)
        return [TensorType(dtype, None if rank is None else (None,) * rank)]
    return [TensorType(dtype, _target_shape(shape))]


@op(
    "ConstantOfShape",
    types={0: "index"},
    attrs={"value": Attr("tensor", None)},
    infer=_constant_of_shape_infer,
)
def constant_of_shape(shape, *, value):
    """A tensor of `shape` filled with the one element of `value` (float32 0 by default)."""
    fill = _fill_value(value)
    return np.full(_target_shape(shape), fill, fill.dtype)


def _range_length(start, limit, delta) -> int:
    start, limit, delta = (np.ravel(v)[0] for v in (start, limit, delta))
    if delta == 0:
        raise ValueError("delta must not be 0")
    if np.issubdtype(np.asarray(delta).dtype, np.integer):
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    return max(math.ceil((float(limit) - float(start)) / float(delta)), 0)


def _range_infer(ctx: InferContext) -> list[TensorType]:
    values = [ctx.const(i) for i in range(3)]
    if any(v is None for v in values):
        return [TensorType(ctx.dtype(0), (None,))]
    return [TensorType(ctx.dtype(0), (_range_length(*values),))]


@op("Range", types="signed", inputs=3, same_dtype="all", infer=_range_infer)
def range_(start, limit, delta):
    """start, start + delta, ... up to (not including) limit."""
    n = _range_length(start, limit, delta)
    dtype = start.dtype
    start, delta = np.ravel(start)[0], np.ravel(delta)[0]
    if np.issubdtype(dtype, np.integer):
        return start + np.arange(n, dtype=dtype) * delta
    return (float(start) + np.arange(n) * float(delta)).astype(dtype)
