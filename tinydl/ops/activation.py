"""Activations: Relu, Clip, LeakyRelu, PRelu, HardSigmoid, HardSwish, Sigmoid, Tanh, Softmax,
LogSoftmax; and Gelu, Softplus, Mish, Elu, Selu, Softsign, which no fusion takes.

ACTIVATIONS (at the end) is the one table of the activations that fuse into a convolution or an
elementwise run: tinydl.FusedConv's `activation` attribute, the optimizer's fusion pass, the GPU
backends' epilogues and elementwise kernels and the bench peers all take their names, parameters
and references from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.ir.graph import Node
from tinydl.ops.base import (
    REGISTRY,
    Attr,
    InferContext,
    TensorType,
    broadcast,
    normalize_axis,
    op,
    same_as_input,
)
from tinydl.ops.elementwise import erf


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


@op("LogSoftmax", types="float", attrs={"axis": Attr("int", -1)}, infer=_softmax_infer)
def log_softmax(x, axis):
    """log(Softmax(x)) along one axis (opset 13 semantics), as x - max - log(sum(exp(x - max)))
    so a large |x| neither overflows nor takes the log of 0."""
    d = x - np.max(x, axis=axis, keepdims=True)
    return (d - np.log(np.sum(np.exp(d), axis=axis, keepdims=True))).astype(x.dtype)


def _gelu_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.attrs["approximate"] not in ("none", "tanh"):
        raise ctx.fail(f"approximate must be 'none' or 'tanh', got {ctx.attrs['approximate']!r}")
    return [TensorType(ctx.dtype(0), ctx.shape(0))]


@op("Gelu", types="float", attrs={"approximate": Attr("string", "none")}, infer=_gelu_infer)
def gelu(x, approximate):
    """0.5 x (1 + erf(x / sqrt 2)); "tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
    Computed in float64."""
    v = x.astype(np.float64)
    if approximate == "tanh":
        inner = np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))
    else:
        inner = erf(v / math.sqrt(2))
    return (0.5 * v * (1 + inner)).astype(x.dtype)


@op("Softplus", types="float", infer=same_as_input(0))
def softplus(x):
    # log(1 + e^x) without overflow: logaddexp(x, 0)
    return np.logaddexp(x, x.dtype.type(0))


@op("Mish", types="float", infer=same_as_input(0))
def mish(x):
    v = x.astype(np.float64)
    return (v * np.tanh(np.logaddexp(v, 0))).astype(x.dtype)


@op("Elu", types="float", attrs={"alpha": Attr("float", 1.0)}, infer=same_as_input(0))
def elu(x, alpha):
    # expm1 of min(x, 0): the branch not taken cannot overflow
    negative = x.dtype.type(alpha) * np.expm1(np.minimum(x, x.dtype.type(0)))
    return np.where(x < 0, negative, x).astype(x.dtype)


@op(
    "Selu",
    types="float",
    attrs={
        "alpha": Attr("float", 1.67326319217681884765625),
        "gamma": Attr("float", 1.05070102214813232421875),
    },
    infer=same_as_input(0),
)
def selu(x, alpha, gamma):
    t = x.dtype.type
    negative = t(alpha) * np.expm1(np.minimum(x, t(0)))
    return (t(gamma) * np.where(x <= 0, negative, x)).astype(x.dtype)


@op("Softsign", types="float", infer=same_as_input(0))
def softsign(x):
    return x / (x.dtype.type(1) + np.abs(x))


def silu(x):
    """SiLU (swish): x * Sigmoid(x). No ONNX op; the fusions' name for that two-node pattern."""
    return x * sigmoid(x)


# -- the activation table ------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    """An activation as the fusions carry it: `name` is the ONNX op (SiLU: x * Sigmoid(x)),
    `params` its scalar parameters with their defaults (an attribute's is its schema's; a Clip
    bound's is None: no bound), `inputs` the parameters an ONNX node gives as constant scalar
    inputs 1, 2, ... instead of attributes (Clip's min and max), `slope` whether it takes
    PRelu's slope tensor (node input 1; FusedConv input 3; per channel in a GPU epilogue).
    `reference(x, **params)`, plus `slope=` when it takes one, is the NumPy reference."""

    name: str
    reference: Callable[..., np.ndarray]
    params: dict[str, float | None] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    slope: bool = False

    def resolve(self, attrs: Mapping[str, Any]) -> dict[str, float | None]:
        """This activation's parameters read from `attrs` (a FusedConv's attributes, an
        epilogue's parameters); a missing or None one takes its default."""
        return {
            k: default if attrs.get(k) is None else float(attrs[k])
            for k, default in self.params.items()
        }

    def apply(self, x: np.ndarray, params: Mapping[str, Any], slope=None) -> np.ndarray:
        """The reference on x with `params` (resolved first) and PRelu's slope."""
        extra = {"slope": slope} if self.slope else {}
        return np.asarray(self.reference(x, **self.resolve(params), **extra))


def _entry(name: str, reference, inputs: tuple[str, ...] = (), slope: bool = False) -> Activation:
    """A table entry whose attribute parameters and defaults are the op schema's."""
    schema = REGISTRY.get(name)
    params = {k: a.default for k, a in schema.attrs.items()} if schema else {}
    return Activation(name, reference, {**params, **dict.fromkeys(inputs)}, inputs, slope)


ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in (
        _entry("Relu", relu),
        _entry("Clip", clip, inputs=("min", "max")),
        _entry("LeakyRelu", leaky_relu),
        _entry("PRelu", prelu, slope=True),
        _entry("HardSigmoid", hard_sigmoid),
        _entry("HardSwish", hard_swish),
        _entry("Sigmoid", sigmoid),
        _entry("Tanh", tanh),
        _entry("SiLU", silu),
    )
}
# The table's names that are ops of the registry (all but SiLU, a two-node pattern).
ACTIVATION_OPS = tuple(name for name in ACTIVATIONS if name in REGISTRY)
# Every scalar parameter of the table (FusedConv has one optional attribute for each).
ACTIVATION_PARAMS = tuple(dict.fromkeys(k for a in ACTIVATIONS.values() for k in a.params))


def activation_params(
    node: Node, const: Callable[[str], np.ndarray | None]
) -> dict[str, float | None] | None:
    """The parameters of activation node `node` (op in ACTIVATION_OPS): its attributes, and its
    scalar inputs read with `const(name)` (None: not a constant; graph.initializers.get, say);
    an omitted one is None. None when such an input is not a one-element numeric constant.
    PRelu's slope (input 1) is the caller's."""
    act = ACTIVATIONS[node.op]
    params = act.resolve(node.attrs)
    for i, key in enumerate(act.inputs, start=1):
        name = node.inputs[i] if len(node.inputs) > i else ""
        if not name:
            continue
        arr = const(name)
        if arr is None or arr.size != 1 or arr.dtype.kind not in "fiu":
            return None
        params[key] = float(arr.reshape(()))
    return params


def check_covers(
    where: str, names: Iterable[str], refused: Mapping[str, str] | None = None, ops_only=False
) -> None:
    """For a backend or peer at import: its per-activation table (`names`) and the activations
    it refuses (name -> the reason, given when a node needs one) are exactly ACTIVATIONS (with
    `ops_only`, ACTIVATION_OPS: a table for graph nodes, which SiLU never is)."""
    names, refused = set(names), dict(refused or {})
    want = set(ACTIVATION_OPS if ops_only else ACTIVATIONS)
    both = names & refused.keys()
    if names | refused.keys() != want or both:
        raise RuntimeError(
            f"{where}: activation table out of step with tinydl.ops.activation.ACTIVATIONS: "
            f"missing {sorted(want - names - refused.keys())}, "
            f"unknown {sorted((names | refused.keys()) - want)}, both {sorted(both)}"
        )
