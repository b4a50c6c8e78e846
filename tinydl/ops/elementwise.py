"""Arithmetic with NumPy broadcasting: Add, Sub, Mul, Div, Pow, Mod; the variadic Min, Max, Sum,
Mean; and one-input math: Sqrt, Erf, Exp, Log, Sin, Cos, Reciprocal, Ceil, Floor, Round, Abs,
Neg, Sign."""

import functools
import math

import numpy as np

from tinydl.ops.base import (
    Attr,
    InferContext,
    TensorType,
    broadcast,
    broadcast_all,
    op,
    same_as_input,
)


def _binary_infer(ctx: InferContext) -> list[TensorType]:
    return [TensorType(ctx.dtype(0) or ctx.dtype(1), broadcast(ctx.shape(0), ctx.shape(1)))]


@op("Add", types="numeric", inputs=2, same_dtype="all", infer=_binary_infer)
def add(a, b):
    return a + b


@op("Sub", types="numeric", inputs=2, same_dtype="all", infer=_binary_infer)
def sub(a, b):
    return a - b


@op("Mul", types="numeric", inputs=2, same_dtype="all", infer=_binary_infer)
def mul(a, b):
    return a * b


@op("Div", types="numeric", inputs=2, same_dtype="all", infer=_binary_infer)
def div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer division truncates toward zero (C semantics), unlike NumPy's floor division.
        return (np.trunc(a / b)).astype(a.dtype)
    return a / b


def _pow_infer(ctx: InferContext) -> list[TensorType]:
    return [TensorType(ctx.dtype(0), broadcast(ctx.shape(0), ctx.shape(1)))]


@op("Pow", types={0: "numeric", 1: "numeric"}, inputs=2, infer=_pow_infer)
def pow_(a, b):
    if np.issubdtype(a.dtype, np.floating):
        return np.power(a, b.astype(a.dtype))
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


@op("Sqrt", types="float", infer=same_as_input(0))
def sqrt(x):
    return np.sqrt(x)


_ERF = np.frompyfunc(math.erf, 1, 1)


@op("Erf", types="float", infer=same_as_input(0))
def erf(x):
    # math.erf in float64 (NumPy has no erf), rounded to the input's dtype
    return _ERF(x.astype(np.float64)).astype(x.dtype)


def _mod_infer(ctx: InferContext) -> list[TensorType]:
    dtype = ctx.dtype(0) or ctx.dtype(1)
    if dtype is not None and dtype.startswith("float") and not ctx.attrs["fmod"]:
        raise ctx.fail(f"Mod on {dtype} needs fmod=1 (a float floor modulo is opset 28's)")
    return _binary_infer(ctx)


@op(
    "Mod",
    types="numeric",
    inputs=2,
    same_dtype="all",
    attrs={"fmod": Attr("int", 0)},
    infer=_mod_infer,
)
def mod(a, b, fmod):
    """fmod=1: C's fmod (the sign of the dividend); 0: the sign of the divisor (integers only).
    A zero integer divisor gives 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b) if fmod else np.mod(a, b)


# Variadic, with every input broadcast together (opset 8+).
_VARIADIC = {"inputs": (1, 2**31 - 1), "same_dtype": "all", "infer": broadcast_all()}


@op("Min", types="numeric", **_VARIADIC)
def min_(*xs):
    # np.minimum propagates NaN, as onnxruntime does
    return functools.reduce(np.minimum, xs)


@op("Max", types="numeric", **_VARIADIC)
def max_(*xs):
    return functools.reduce(np.maximum, xs)


@op("Sum", types="float", **_VARIADIC)
def sum_(*xs):
    return functools.reduce(np.add, xs)


@op("Mean", types="float", **_VARIADIC)
def mean(*xs):
    return (functools.reduce(np.add, xs) / xs[0].dtype.type(len(xs))).astype(xs[0].dtype)


@op("Exp", types="float", infer=same_as_input(0))
def exp(x):
    with np.errstate(over="ignore"):
        return np.exp(x)


@op("Log", types="float", infer=same_as_input(0))
def log(x):
    # log(0) = -inf and log(x < 0) = NaN, as in C
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


@op("Sin", types="float", infer=same_as_input(0))
def sin(x):
    return np.sin(x)


@op("Cos", types="float", infer=same_as_input(0))
def cos(x):
    return np.cos(x)


@op("Reciprocal", types="float", infer=same_as_input(0))
def reciprocal(x):
    with np.errstate(divide="ignore"):
        return np.reciprocal(x)


@op("Ceil", types="float", infer=same_as_input(0))
def ceil(x):
    return np.ceil(x)


@op("Floor", types="float", infer=same_as_input(0))
def floor(x):
    return np.floor(x)


@op("Round", types="float", infer=same_as_input(0))
def round_(x):
    """Halves to even."""
    return np.round(x)


@op("Abs", types="numeric", infer=same_as_input(0))
def abs_(x):
    return np.abs(x)


@op("Neg", types="signed", infer=same_as_input(0))
def neg(x):
    return np.negative(x)


@op("Sign", types="numeric", infer=same_as_input(0))
def sign(x):
    return np.sign(x)
