"""Fused ops of tinydl's private domain: tinydl.FusedConv (Conv, then an activation).

The graph optimizer creates them (tinydl/passes/conv_activation_fusion.py); nothing imports them
from a model file. The reference is the unfused ops run one after the other, so a fused graph
computes exactly what the original did on the cpu backend.
"""

import numpy as np

from tinydl.ops.activation import (
    clip,
    hard_sigmoid,
    hard_swish,
    leaky_relu,
    prelu,
    relu,
    sigmoid,
    tanh,
)
from tinydl.ops.base import Attr, InferContext, TensorType, broadcast, op
from tinydl.ops.conv import _CONV_ATTRS, _conv_infer, conv

# activation -> y -> activated y, given the node's attributes and the optional slope input.
ACTIVATIONS = {
    "none": lambda y, a, s: y,
    "relu": lambda y, a, s: relu(y),
    "relu6": lambda y, a, s: clip(y, 0.0, 6.0),
    "clip": lambda y, a, s: clip(y, a["min"], a["max"]),
    "tanh": lambda y, a, s: tanh(y),
    "sigmoid": lambda y, a, s: sigmoid(y),
    "leaky_relu": lambda y, a, s: leaky_relu(y, _or(a["alpha"], 0.01)),
    "prelu": lambda y, a, s: prelu(y, s),
    "hard_swish": lambda y, a, s: hard_swish(y),
    "hard_sigmoid": lambda y, a, s: hard_sigmoid(y, _or(a["alpha"], 0.2), _or(a["beta"], 0.5)),
    "silu": lambda y, a, s: y * sigmoid(y),
}


def _or(value, default):
    return default if value is None else value


def _fused_conv_infer(ctx: InferContext) -> list[TensorType]:
    activation = ctx.attrs["activation"]
    if activation not in ACTIVATIONS:
        raise ctx.fail(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if (activation == "prelu") != ctx.has(3):
        raise ctx.fail("the slope input (input 3) is required by activation 'prelu' and only by it")
    (out,) = _conv_infer(ctx)
    slope = ctx.shape(3)
    if slope is not None and out.shape is not None:
        if len(slope) > len(out.shape) or broadcast(out.shape, slope) != out.shape:
            raise ctx.fail(f"slope of shape {slope} must broadcast to the output {out.shape}")
    return [out]


@op(
    "tinydl.FusedConv",
    types="float",
    same_dtype="all",
    inputs=(2, 4),
    infer=_fused_conv_infer,
    attrs={
        **_CONV_ATTRS,
        "activation": Attr("string", "none"),
        "alpha": Attr("float", None),
        "beta": Attr("float", None),
        "min": Attr("float", None),
        "max": Attr("float", None),
    },
)
def fused_conv(x, w, b=None, slope=None, *, activation, alpha, beta, min, max, **conv_attrs):
    """Conv (with optional bias), then `activation`: none, relu, relu6, clip (min, max), tanh,
    sigmoid, leaky_relu (alpha), prelu (slope input), hard_swish, hard_sigmoid (alpha, beta) or
    silu (y * sigmoid(y)). Unset alpha/beta take the ONNX op's defaults."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}")
    y = conv(x, w, b, **conv_attrs)
    return np.asarray(
        ACTIVATIONS[activation](y, {"alpha": alpha, "beta": beta, "min": min, "max": max}, slope)
    )
