"""Comparisons, logic and selection with NumPy broadcasting: Equal, Greater, GreaterOrEqual, Less,
LessOrEqual, And, Or, Xor, Not, Where; and the float predicates IsNaN, IsInf. All but Where
output bool."""

import numpy as np

from tinydl.ops.base import Attr, broadcast_all, op

_COMPARE = broadcast_all("bool")


@op("Equal", types="any", inputs=2, same_dtype="all", infer=_COMPARE)
def equal(a, b):
    return np.equal(a, b)


@op("Greater", types="numeric", inputs=2, same_dtype="all", infer=_COMPARE)
def greater(a, b):
    return np.greater(a, b)


@op("GreaterOrEqual", types="numeric", inputs=2, same_dtype="all", infer=_COMPARE)
def greater_or_equal(a, b):
    return np.greater_equal(a, b)


@op("Less", types="numeric", inputs=2, same_dtype="all", infer=_COMPARE)
def less(a, b):
    return np.less(a, b)


@op("LessOrEqual", types="numeric", inputs=2, same_dtype="all", infer=_COMPARE)
def less_or_equal(a, b):
    return np.less_equal(a, b)


_BOOLS = {0: "bool", 1: "bool"}


@op("And", types=_BOOLS, inputs=2, infer=_COMPARE)
def and_(a, b):
    return np.logical_and(a, b)


@op("Or", types=_BOOLS, inputs=2, infer=_COMPARE)
def or_(a, b):
    return np.logical_or(a, b)


@op("Xor", types=_BOOLS, inputs=2, infer=_COMPARE)
def xor(a, b):
    return np.logical_xor(a, b)


@op("Not", types="bool", infer=_COMPARE)
def not_(x):
    return np.logical_not(x)


@op(
    "Where",
    types={0: "bool", 1: "any", 2: "any"},
    inputs=3,
    same_dtype=(1, 2),
    infer=broadcast_all(like=1),
)
def where(condition, x, y):
    return np.where(condition, x, y)


@op("IsNaN", types="float", infer=_COMPARE)
def is_nan(x):
    return np.isnan(x)


@op(
    "IsInf",
    types="float",
    attrs={"detect_positive": Attr("int", 1), "detect_negative": Attr("int", 1)},
    infer=_COMPARE,
)
def is_inf(x, detect_positive, detect_negative):
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))
