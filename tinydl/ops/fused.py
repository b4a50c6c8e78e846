"""Fused ops of tinydl's private domain: tinydl.FusedConv (Conv, then an activation).

The graph optimizer creates them (tinydl/passes/conv_activation_fusion.py); nothing imports them
from a model file. The reference is the unfused ops run one after the other, so a fused graph
computes exactly what the original did on the numpy backend.
"""

from tinydl.ops.activation import ACTIVATION_PARAMS, ACTIVATIONS
from tinydl.ops.base import Attr, InferContext, TensorType, broadcast, op
from tinydl.ops.conv import _CONV_ATTRS, _conv_infer, conv

FUSED_CONV = "tinydl.FusedConv"
NO_ACTIVATION = "none"

# FusedConv's activation as .tdl files written before it took the ONNX names spelled it:
# old name -> (name, parameters it implied). runtime/loader.py upgrades .tdl files with it.
LEGACY_ACTIVATIONS = {
    "relu": ("Relu", {}),
    "relu6": ("Clip", {"min": 0.0, "max": 6.0}),
    "clip": ("Clip", {}),
    "tanh": ("Tanh", {}),
    "sigmoid": ("Sigmoid", {}),
    "leaky_relu": ("LeakyRelu", {}),
    "prelu": ("PRelu", {}),
    "hard_swish": ("HardSwish", {}),
    "hard_sigmoid": ("HardSigmoid", {}),
    "silu": ("SiLU", {}),
}


def upgrade_legacy_activations(graph) -> int:
    """Rename the snake_case activations of FusedConv nodes in place; the count renamed."""
    count = 0
    for node in graph.nodes:
        old = node.attrs.get("activation") if node.op == FUSED_CONV else None
        if isinstance(old, str) and old in LEGACY_ACTIVATIONS:
            name, params = LEGACY_ACTIVATIONS[old]
            node.attrs = {**node.attrs, "activation": name, **params}
            count += 1
    return count


def _fused_conv_infer(ctx: InferContext) -> list[TensorType]:
    activation = ctx.attrs["activation"]
    act = ACTIVATIONS.get(activation)
    if act is None and activation != NO_ACTIVATION:
        names = ", ".join([NO_ACTIVATION, *ACTIVATIONS])
        raise ctx.fail(f"activation must be one of {names}, got {activation!r}")
    foreign = [k for k in ACTIVATION_PARAMS if ctx.attrs[k] is not None]
    foreign = [k for k in foreign if act is None or k not in act.params]
    if foreign:
        raise ctx.fail(f"attribute(s) {', '.join(foreign)} are no parameter of {activation}")
    if (act is not None and act.slope) != ctx.has(3):
        raise ctx.fail("the slope input (input 3) is required by activation PRelu and only by it")
    (out,) = _conv_infer(ctx)
    slope = ctx.shape(3)
    if slope is not None and out.shape is not None:
        if len(slope) > len(out.shape) or broadcast(out.shape, slope) != out.shape:
            raise ctx.fail(f"slope of shape {slope} must broadcast to the output {out.shape}")
    return [out]


@op(
    FUSED_CONV,
    types="float",
    same_dtype="all",
    inputs=(2, 4),
    infer=_fused_conv_infer,
    attrs={
        **_CONV_ATTRS,
        "activation": Attr("string", NO_ACTIVATION),
        **{k: Attr("float", None) for k in ACTIVATION_PARAMS},
    },
)
def fused_conv(x, w, b=None, slope=None, *, activation, **attrs):
    """Conv (with optional bias), then `activation`: "none" or a name of
    tinydl.ops.activation.ACTIVATIONS (ONNX spelling; SiLU is x * Sigmoid(x)) with its
    parameters as attributes: Clip `min`/`max` (unset: no bound), LeakyRelu `alpha`,
    HardSigmoid `alpha`/`beta` (unset: the ONNX defaults); PRelu's slope is input 3."""
    params = {k: attrs.pop(k) for k in ACTIVATION_PARAMS}
    y = conv(x, w, b, **attrs)
    if activation == NO_ACTIVATION:
        return y
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}")
    return ACTIVATIONS[activation].apply(y, params, slope)
