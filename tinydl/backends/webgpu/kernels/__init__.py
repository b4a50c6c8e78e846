"""WGSL kernels: each op family is `<name>.py` (the builder, registered with `@kernel`) plus
`<name>.wgsl` (a Jinja2 template). The backend supports an op when a module here registers it.

A builder gets a `Build` (backends/planned.py, webgpu/program.py) for one node and
emits dispatches: it renders its template with the node's shapes, strides, kernel sizes,
activation and precision baked in, and binds value
names (resolved to buffers when the plan is made) or uploaded constants.
"""

from __future__ import annotations

import math

from tinydl.backends.fusion import render_activation
from tinydl.backends.indexing import broadcast_strides, collapse, strides_of  # noqa: F401 (re-export)
from tinydl.backends.planned import (  # noqa: F401 (re-export)
    KernelRegistry,
    constant_inputs,
    module_importer,
    templates,
)
from tinydl.ops.activation import check_covers

REGISTRY = KernelRegistry("webgpu")
kernel = REGISTRY.kernel
# Specialize a .wgsl template of this package.
render = templates(__name__)


# Logical dtypes held as i32 (webgpu/tensor.py): kernels compute on them in i32.
INT_DTYPES = ("int32", "int64", "bool")


def ctype(dtype: str | None) -> str:
    """The WGSL type a kernel computes a value of logical `dtype` in."""
    return "i32" if dtype in INT_DTYPES else "f32"


def grid(total: int, per_group: int, limit: int = 65535) -> tuple[int, int, int]:
    """Workgroups for `total` invocations in groups of `per_group`, folded into y past `limit`."""
    groups = max(1, math.ceil(total / per_group))
    if groups <= limit:
        return (groups, 1, 1)
    return (limit, math.ceil(groups / limit), 1)


def wgsl_float(x: float) -> str:
    """A WGSL f32 literal."""
    if math.isnan(x):
        return "bitcast<f32>(0x7fc00000u)"
    if math.isinf(x):
        return "bitcast<f32>(0x7f800000u)" if x > 0 else "bitcast<f32>(0xff800000u)"
    text = repr(float(x))
    return text if ("e" in text or "." in text) else text + ".0"


# -- activations (shared by the elementwise kernels and the fused conv epilogues) ----------------


# WGSL per activation of tinydl.ops.activation.ACTIVATIONS, for fusion.render_activation: {x}
# is a vec{vec}<ct> (or a scalar, {t} its type) expression.
WGSL_ACTIVATIONS = {
    # max, min and clamp leave a NaN's result to the implementation: NaN is passed through
    # explicitly (isnan_ tests its bits), as in NumPy
    "Relu": "select(max({x}, {t}(0.0)), {x}, isnan_{vec}({x}))",
    "Clip": (
        "select(max({x}, {min}), {x}, isnan_{vec}({x}))",
        "select(min({x}, {max}), {x}, isnan_{vec}({x}))",
    ),
    "LeakyRelu": "select({x} * {alpha}, {x}, {x} >= {t}(0.0))",
    "PRelu": "select({x} * {slope}, {x}, {x} >= {t}(0.0))",
    "HardSigmoid": "clamp01_{vec}({x} * {alpha} + {beta})",
    "HardSwish": "{x} * clamp01_{vec}({x} * {t}(0.16666666666666666) + {t}(0.5))",
    "Sigmoid": "sigmoid_{vec}({x})",
    "Tanh": "tanh_{vec}({x})",
    "SiLU": "{x} * sigmoid_{vec}({x})",
}
check_covers("webgpu kernels", WGSL_ACTIVATIONS)


def activation_expr(kind: str, v: str, params: dict, vec: int = 4, ctype: str = "f32") -> str:
    """WGSL for activation `kind` applied to expression `v` (a vec`vec`<ctype>, or a scalar)."""
    t = f"vec{vec}<{ctype}>" if vec > 1 else ctype
    return render_activation(
        WGSL_ACTIVATIONS, kind, v, params, lambda x: f"{t}({wgsl_float(x)})", t=t, vec=vec
    )


# Every module of this package is imported when the registry is first asked for an op.
REGISTRY.load = module_importer(__name__, __path__)
