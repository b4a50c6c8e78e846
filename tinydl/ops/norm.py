"""Normalization: BatchNormalization in inference mode."""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, op


def _batch_norm_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.attrs["training_mode"] != 0:
        raise ValueError("training_mode=1 is not supported")
    x = ctx.shape(0)
    if x is not None and len(x) < 2:
        raise ctx.fail(f"input must have rank >= 2 (N, C, ...), got shape {x}")
    c = x[1] if x is not None else None
    for i, name in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        s = ctx.shape(i)
        if s is not None and isinstance(c, int) and s != (c,):
            raise ctx.fail(f"{name}: expected shape ({c},), got {s}")
    return [TensorType(ctx.dtype(0), x)]


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
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias, per channel (axis 1)."""
    if training_mode != 0:
        raise ValueError("training_mode=1 is not supported")
    ct = np.promote_types(x.dtype, np.float32)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    k = (scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(epsilon))).reshape(shape)
    y = (x.astype(ct) - mean.astype(ct).reshape(shape)) * k + bias.astype(ct).reshape(shape)
    return y.astype(x.dtype, copy=False)
