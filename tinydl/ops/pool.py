"""Pooling: MaxPool, AveragePool and GlobalAveragePool (NCHW layout, any spatial rank)."""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, op
from tinydl.ops.conv import taps, window_attrs, window_geometry

_POOL_ATTRS = {
    "auto_pad": Attr("string", "NOTSET"),
    "ceil_mode": Attr("int", 0),
    "dilations": Attr("ints", None),
    "kernel_shape": Attr("ints"),
    "pads": Attr("ints", None),
    "strides": Attr("ints", None),
}


def _pool_infer(ctx: InferContext) -> list[TensorType]:
    outputs = ctx.node.outputs
    if len(outputs) > 1 and outputs[1]:
        raise ValueError("the Indices output of MaxPool is not supported")
    x, kernel = ctx.shape(0), ctx.attrs["kernel_shape"]
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    if len(x) != len(kernel) + 2:
        raise ctx.fail(f"kernel_shape {kernel} needs an input of rank {len(kernel) + 2}, got {x}")
    strides, dilations, pads = window_attrs(ctx.attrs, kernel)
    n = len(kernel)
    for axis, (k, d) in enumerate(zip(kernel, dilations, strict=True)):
        if max(pads[axis], pads[axis + n]) >= (k - 1) * d + 1:
            # A window made only of padding has no value (onnxruntime refuses this too).
            raise ctx.fail(f"pads {pads} must be smaller than the kernel {kernel} on every axis")
    geo = window_geometry(
        x[2:], kernel, strides, dilations, pads, ctx.attrs["auto_pad"], bool(ctx.attrs["ceil_mode"])
    )
    return [TensorType(ctx.dtype(0), (*x[:2], *[o for _, _, o in geo]))]


def _windows(x, kernel, attrs, fill, pad_fill=None):
    """Pad x for pooling; return (padded x, padded count mask or None, strides, dilations, out).

    The mask is 1 over the input, `pad_fill` over explicit pads and 0 over the extra tail that
    ceil_mode adds; it is built only when pad_fill is given.
    """
    strides, dilations, pads = window_attrs(attrs, kernel)
    geo = window_geometry(
        x.shape[2:], kernel, strides, dilations, pads, attrs["auto_pad"], bool(attrs["ceil_mode"])
    )
    extra = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e))
        for (b, e, o), n, k, s, d in zip(geo, x.shape[2:], kernel, strides, dilations, strict=True)
    ]
    width = [(b, e + t) for (b, e, _), t in zip(geo, extra, strict=True)]
    xp = np.pad(x, [(0, 0), (0, 0), *width], constant_values=fill)
    mask = None
    if pad_fill is not None:
        mask = np.pad(
            np.ones(x.shape[2:], np.float32), [(b, e) for b, e, _ in geo], constant_values=pad_fill
        )
        mask = np.pad(mask, [(0, t) for t in extra])
    return xp, mask, strides, dilations, [o for _, _, o in geo]


@op(
    "MaxPool",
    types="numeric",
    outputs=(1, 2),
    infer=_pool_infer,
    attrs={**_POOL_ATTRS, "storage_order": Attr("int", 0)},
)
def max_pool(x, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides, storage_order):
    """Maximum over each window; padding never wins. Only the first output (Y) is computed."""
    attrs = dict(
        auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations, pads=pads, strides=strides
    )
    low = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp, _, strides, dilations, out = _windows(x, kernel_shape, attrs, low)
    y = None
    for _, view in taps(xp, kernel_shape, strides, dilations, out):
        y = view.copy() if y is None else np.maximum(y, view, out=y)
    return y


@op(
    "AveragePool",
    types="float",
    infer=_pool_infer,
    attrs={**_POOL_ATTRS, "count_include_pad": Attr("int", 0)},
)
def average_pool(
    x, *, auto_pad, ceil_mode, count_include_pad, dilations, kernel_shape, pads, strides
):
    """Mean over each window; count_include_pad decides whether explicit pads count as zeros."""
    attrs = dict(
        auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations, pads=pads, strides=strides
    )
    ct = np.promote_types(x.dtype, np.float32)
    xp, mask, strides, dilations, out = _windows(
        x.astype(ct, copy=False), kernel_shape, attrs, 0, pad_fill=float(count_include_pad)
    )
    total = np.zeros((*x.shape[:2], *out), ct)
    count = np.zeros(out, np.float32)
    for (_, view), (_, m) in zip(
        taps(xp, kernel_shape, strides, dilations, out),
        taps(mask, kernel_shape, strides, dilations, out),
        strict=True,
    ):
        total += view
        count += m
    return (total / count.astype(ct)).astype(x.dtype, copy=False)


def _global_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is not None and len(x) < 3:
        raise ctx.fail(f"input must have rank >= 3 (N, C, spatial...), got shape {x}")
    return [TensorType(ctx.dtype(0), None if x is None else (*x[:2], *[1] * (len(x) - 2)))]


@op("GlobalAveragePool", types="float", infer=_global_infer)
def global_average_pool(x):
    """Mean over all spatial axes, kept as size 1."""
    ct = np.promote_types(x.dtype, np.float32)
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=ct).astype(x.dtype)
