"""Binary arithmetic with NumPy broadcasting: Add, Sub, Mul, Div, Pow; and Sqrt, Erf."""

import math

import numpy as np

from tinydl.ops.base import InferContext, TensorType, broadcast, op, same_as_input


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
