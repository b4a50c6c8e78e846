"""Tensors made from shapes: ConstantOfShape and Range. The plan computes them when their inputs
are known constants and the output is small (backends/planned.py); a larger one is filled here.
"""

from __future__ import annotations

import functools

import numpy as np

from tinydl.backends.webgpu.kernels import constant_inputs, ctype, kernel, wgsl_float
from tinydl.backends.webgpu.kernels.elementwise import emit
from tinydl.ops.shape import _fill_value


def _literal(value, ct: str) -> str:
    return str(int(value)) if ct == "i32" else wgsl_float(float(value))


@kernel("ConstantOfShape", "Range", supports=functools.partial(constant_inputs, first=0))
def fill(b):
    ct = ctype(b.out().dtype)
    if b.node.op == "ConstantOfShape":
        emit(b, _literal(_fill_value(b.attrs["value"]), ct), [], b.outputs[0], ct)
        return
    start, delta = (_literal(np.ravel(b.const(i))[0], ct) for i in (0, 2))

    def expr(vec: int) -> str:
        # i counts vec4 units when vec is 4: element 4i + lane
        if vec == 1:
            return f"{ct}({start}) + {ct}(i) * {ct}({delta})"
        t = f"vec4<{ct}>"
        lanes = ", ".join(_literal(k, ct) for k in range(4))
        return f"{t}({start}) + ({t}({ct}(i * 4u)) + {t}({lanes})) * {t}({delta})"

    emit(b, expr, [], b.outputs[0], ct)
