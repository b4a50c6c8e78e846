"""Tensors made from shapes: ConstantOfShape and Range. The plan computes them when their inputs
are known constants and the output is small (backends/planned.py); a larger one is filled here.
"""

from __future__ import annotations

import functools

import numpy as np

from tinydl.backends.cuda.kernels import cfloat, constant_inputs, kernel
from tinydl.backends.cuda.kernels.elementwise import compute_type, emit
from tinydl.ops.shape import _fill_value


def _literal(value, ct: str) -> str:
    if ct == "float":
        return cfloat(float(value))
    if ct == "bool":
        return "true" if value else "false"
    return f"{int(value)}LL" if ct == "long long" else str(int(value))


@kernel("ConstantOfShape", "Range", supports=functools.partial(constant_inputs, first=0))
def fill(b):
    ct = compute_type(b.out().dtype)
    if b.node.op == "ConstantOfShape":
        emit(b, _literal(_fill_value(b.attrs["value"]), ct), [], b.outputs[0], ct)
        return
    start, delta = (_literal(np.ravel(b.const(i))[0], ct) for i in (0, 2))
    emit(b, f"{start} + ({ct})i * {delta}", [], b.outputs[0], ct)
