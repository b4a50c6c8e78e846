"""Activations: Relu, Clip, LeakyRelu, PRelu, HardSigmoid, HardSwish, Sigmoid, Tanh, Softmax."""

import numpy as np

from tinydl.ops.base import (
    Attr,
    InferContext,
    TensorType,
    broadcast,
    normalize_axis,
    op,
    same_as_input,
)


@op("Relu", types="signed", infer=same_as_input(0))
def relu(x):
    return np.maximum(x, x.dtype.type(0))


@op("Clip", types="numeric", inputs=(1, 3), infer=same_as_input(0))
def clip(x, min=None, max=None):
    lo = x.dtype.type(min) if min is not None else None
    hi = x.dtype.type(max) if max is not None else None
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


@op("LeakyRelu", types="float", attrs={"alpha": Attr("float", 0.01)}, infer=same_as_input(0))
def leaky_relu(x, alpha):
    return np.where(x >= 0, x, x * x.dtype.type(alpha)).astype(x.dtype)


def _prelu_infer(ctx: InferContext) -> list[TensorType]:
    return [TensorType(ctx.dtype(0), broadcast(ctx.shape(0), ctx.shape(1)))]


@op("PRelu", types="numeric", same_dtype="all", inputs=2, infer=_prelu_infer)
def prelu(x, slope):
    return np.where(x >= 0, x, x * slope).astype(x.dtype)


@op(
    "HardSigmoid",
    types="float",
    attrs={"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)},
    infer=same_as_input(0),
)
def hard_sigmoid(x, alpha, beta):
    t = x.dtype.type
    return np.clip(x * t(alpha) + t(beta), t(0), t(1))


@op("HardSwish", types="float", infer=same_as_input(0))
def hard_swish(x):
    t = x.dtype.type
    return x * np.clip(x * t(1 / 6) + t(0.5), t(0), t(1))


@op("Sigmoid", types="float", infer=same_as_input(0))
def sigmoid(x):
    # Split by sign so exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


@op("Tanh", types="float", infer=same_as_input(0))
def tanh(x):
    return np.tanh(x)


def _softmax_infer(ctx: InferContext) -> list[TensorType]:
    shape = ctx.shape(0)
    if shape is not None:
        normalize_axis(ctx.attrs["axis"], len(shape))
    return [TensorType(ctx.dtype(0), shape)]


@op("Softmax", types="float", attrs={"axis": Attr("int", -1)}, infer=_softmax_infer)
def softmax(x, axis):
    """Softmax along one axis (opset 13 semantics; the importer rewrites older forms)."""
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)
