"""Normalization: BatchNormalization (in training mode too: the batch's statistics),
LayerNormalization,
InstanceNormalization and GroupNormalization (opset 21: scale and bias per channel)."""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, broadcast, normalize_axis, op


def _batch_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is not None and len(x) < 2:
        raise ctx.fail(f"input must have rank >= 2 (N, C, ...), got shape {x}")
    c = x[1] if x is not None else None
    for i, name in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        s = ctx.shape(i)
        if s is not None and isinstance(c, int) and s != (c,):
            raise ctx.fail(f"{name}: expected shape ({c},), got {s}")
    stats = TensorType(ctx.dtype(3), (c,) if c is not None else None)
    return [TensorType(ctx.dtype(0), x), stats, stats]


@op(
    "BatchNormalization",
    types="float",
    inputs=5,
    outputs=(1, 3),
    infer=_batch_norm_infer,
    attrs={
        "epsilon": Attr("float", 1e-5),
        "momentum": Attr("float", 0.9),
        "training_mode": Attr("int", 0),
    },
)
def batch_normalization(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias, per channel (axis 1). In training
    mode the mean and (population) variance are the batch's, over every axis but 1, and the
    running statistics mean * momentum + the batch's * (1 - momentum) are returned too (as the
    ONNX reference does; timm's weight-standardized convolutions export so)."""
    ct = np.promote_types(x.dtype, np.float32)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training_mode:
        axes = (0, *range(2, x.ndim))
        xs = x.astype(ct)
        batch_mean, batch_var = xs.mean(axis=axes), xs.var(axis=axes)
        running = [
            (s.astype(ct) * ct.type(momentum) + b * ct.type(1 - momentum)).astype(s.dtype)
            for s, b in ((mean, batch_mean), (var, batch_var))
        ]
        mean, var = batch_mean, batch_var
    k = (scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(epsilon))).reshape(shape)
    y = (x.astype(ct) - mean.astype(ct).reshape(shape)) * k + bias.astype(ct).reshape(shape)
    y = y.astype(x.dtype, copy=False)
    return (y, *running) if training_mode else y


# stash_type (an ONNX element type code) -> the dtype statistics are computed and returned in.
STASH_TYPES = {1: "float32", 10: "float16", 11: "float64"}


def stash_dtype(stash_type: int) -> str:
    if stash_type not in STASH_TYPES:
        raise ValueError(f"stash_type {stash_type} is not supported (float16, float32, float64)")
    return STASH_TYPES[stash_type]


def _normalize(x: np.ndarray, axes: tuple[int, ...], epsilon: float, ct):
    """(x - mean) / sqrt(var + epsilon) over `axes` in type ct, with the mean and 1/std."""
    x = x.astype(ct)
    mean = np.mean(x, axis=axes, keepdims=True)
    d = x - mean
    inv = 1 / np.sqrt(np.mean(d * d, axis=axes, keepdims=True) + ct.type(epsilon))
    return d * inv, mean, inv


def _layer_norm_infer(ctx: InferContext) -> list[TensorType]:
    x, stash = ctx.shape(0), stash_dtype(ctx.attrs["stash_type"])
    if x is None:
        return [TensorType(ctx.dtype(0), None), TensorType(stash, None), TensorType(stash, None)]
    axis = normalize_axis(ctx.attrs["axis"], len(x))
    for i, name in ((1, "Scale"), (2, "B")):
        s = ctx.shape(i)
        if s is not None:
            broadcast(s, x[axis:])
            if len(s) > len(x) - axis:
                raise ctx.fail(f"{name} {s} has more axes than the normalized shape {x[axis:]}")
    stats = x[:axis] + (1,) * (len(x) - axis)
    return [TensorType(ctx.dtype(0), x), TensorType(stash, stats), TensorType(stash, stats)]


@op(
    "LayerNormalization",
    types={0: "float", 1: "float", 2: "float"},
    same_dtype=(0, 1, 2),
    inputs=(2, 3),
    outputs=(1, 3),
    infer=_layer_norm_infer,
    attrs={
        "axis": Attr("int", -1),
        "epsilon": Attr("float", 1e-5),
        "stash_type": Attr("int", 1),
    },
)
def layer_normalization(x, scale, bias=None, *, axis, epsilon, stash_type):
    """Normalize over the axes from `axis` on (statistics in stash_type), then scale and bias;
    also returns the mean and 1/std per normalized row (stash_type, normalized axes kept as 1)."""
    axis = normalize_axis(axis, x.ndim)
    ct = np.dtype(stash_dtype(stash_type))
    y, mean, inv = _normalize(x, tuple(range(axis, x.ndim)), epsilon, ct)
    y = y * scale.astype(ct)
    if bias is not None:
        y = y + bias.astype(ct)
    return y.astype(x.dtype), mean, inv


def _channels(ctx: InferContext, names: tuple[str, ...]) -> None:
    x = ctx.shape(0)
    if x is not None and len(x) < 2:
        raise ctx.fail(f"input must have rank >= 2 (N, C, ...), got shape {x}")
    c = x[1] if x is not None else None
    for i, name in enumerate(names, start=1):
        s = ctx.shape(i)
        if s is not None and isinstance(c, int) and s != (c,):
            raise ctx.fail(f"{name}: expected shape ({c},), got {s}")


def _instance_norm_infer(ctx: InferContext) -> list[TensorType]:
    _channels(ctx, ("scale", "B"))
    return [TensorType(ctx.dtype(0), ctx.shape(0))]


@op(
    "InstanceNormalization",
    types="float",
    same_dtype="all",
    inputs=3,
    infer=_instance_norm_infer,
    attrs={"epsilon": Attr("float", 1e-5)},
)
def instance_normalization(x, scale, bias, *, epsilon):
    """Normalize each (sample, channel) over the spatial axes, then scale and bias per channel."""
    ct = np.promote_types(x.dtype, np.float32)
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), epsilon, ct)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = y * scale.astype(ct).reshape(shape) + bias.astype(ct).reshape(shape)
    return y.astype(x.dtype)


def _group_norm_infer(ctx: InferContext) -> list[TensorType]:
    _channels(ctx, ("scale", "bias"))
    stash_dtype(ctx.attrs["stash_type"])
    x, groups = ctx.shape(0), ctx.attrs["num_groups"]
    if groups < 1:
        raise ctx.fail(f"num_groups must be positive, got {groups}")
    if x is not None and isinstance(x[1], int) and x[1] % groups:
        raise ctx.fail(f"{x[1]} channels do not divide into {groups} groups")
    return [TensorType(ctx.dtype(0), x)]


@op(
    "GroupNormalization",
    types="float",
    same_dtype="all",
    inputs=3,
    infer=_group_norm_infer,
    attrs={
        "epsilon": Attr("float", 1e-5),
        "num_groups": Attr("int"),
        "stash_type": Attr("int", 1),
    },
)
def group_normalization(x, scale, bias, *, epsilon, num_groups, stash_type):
    """Normalize each (sample, group of channels) over the group's channels and spatial axes
    (statistics in stash_type), then scale and bias per channel (opset 21)."""
    n, c = x.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ValueError(f"{c} channels do not divide into {num_groups} groups")
    ct = np.dtype(stash_dtype(stash_type))
    grouped = x.reshape(n, num_groups, -1)
    y, _, _ = _normalize(grouped, (2,), epsilon, ct)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = y.reshape(x.shape) * scale.astype(ct).reshape(shape) + bias.astype(ct).reshape(shape)
    return y.astype(x.dtype)
