"""CUDA C kernels: each op family is `<name>.py` (the builder, registered with `@kernel`) plus
`<name>.cu` (a Jinja2 template). The backend supports an op when a module here registers it.

A builder gets a `Build` (backends/planned.py, cuda/program.py) for one node and
emits launches: it renders its template with the node's shapes, strides, kernel sizes,
activation and precision baked in, and passes
value names (resolved to device arrays when the plan is made) or uploaded constants.
Every template starts with common.cuh (storage types, fp16 conversion, activations); kernels
need no CUDA headers, so NVRTC compiles them with no include path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tinydl.backends.fusion import render_activation
from tinydl.backends.planned import (  # noqa: F401 (re-export)
    KernelRegistry,
    constant_inputs,
    module_importer,
    shape_derived,
    templates,
)
from tinydl.ops.activation import check_covers

REGISTRY = KernelRegistry("cuda")
kernel = REGISTRY.kernel

# Logical dtype -> C storage type. float16 is stored as raw bits (half_t) and converted with
# PTX cvt instructions, so no cuda_fp16.h is needed.
CTYPES = {
    "float32": "float",
    "float16": "half_t",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "int8": "signed char",
    "bool": "bool",
}
FLOATS = ("float32", "float16")


_render = templates(__name__)


def render(template: str, **params) -> str:
    """Specialize a .cu template of this package (common.cuh goes first)."""
    return _render("common.cuh") + _render(template, **params)


# -- code generation helpers ---------------------------------------------------------------------


def index_type(total: int) -> str:
    return "unsigned int" if total < 2**31 else "unsigned long long"


def coords(
    dims: Sequence[int | str], var: str = "i", prefix: str = "c", itype: str = "unsigned int"
):
    """C statements that split linear index `var` into row-major coordinates c0..cN-1; a dim
    is a number or a C expression (a generic kernel's extent)."""
    sizes = [d if isinstance(d, str) else f"{d}u" for d in dims]
    lines = [f"{itype} rem_ = {var};"]
    for k in range(len(dims) - 1, -1, -1):
        lines.append(f"const {itype} {prefix}{k} = rem_ % {sizes[k]};")
        if k > 0:
            lines.append(f"rem_ /= {sizes[k]};")
    return "\n    ".join(lines)


def offset(strides: Sequence[int], prefix: str = "c") -> str:
    """sum_k c_k * stride_k as C text ("0" when every stride is 0)."""
    terms = [
        f"{prefix}{k} * {s}u" if s != 1 else f"{prefix}{k}" for k, s in enumerate(strides) if s
    ]
    return " + ".join(terms) or "0"


def cfloat(x: float) -> str:
    """A C float literal (NaN and infinities through bit patterns)."""
    if math.isnan(x):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(x):
        return "__int_as_float(0x7f800000)" if x > 0 else "__int_as_float(0xff800000)"
    return f"{float(x)!r}f"


def load(ctype: str, expr: str) -> str:
    """Read storage element `expr` (of C type `ctype`) as a float."""
    return f"h2f({expr})" if ctype == "half_t" else f"(float)({expr})"


def store(ctype: str, expr: str) -> str:
    """Convert float `expr` to storage type `ctype`."""
    return f"f2h({expr})" if ctype == "half_t" else f"({ctype})({expr})"


# CUDA C per activation of tinydl.ops.activation.ACTIVATIONS, for fusion.render_activation: {x}
# is a float expression; the functions ending in _ are common.cuh's.
CUDA_ACTIVATIONS = {
    # comparisons rather than fmaxf/fminf, which drop a NaN: NaN passes through, as in NumPy
    "Relu": "({x} < 0.0f ? 0.0f : {x})",
    "Clip": ("({x} < {min} ? {min} : {x})", "({x} > {max} ? {max} : {x})"),
    "LeakyRelu": "leaky_({x}, {alpha})",
    "PRelu": "leaky_({x}, {slope})",
    "HardSigmoid": "hard_sigmoid_({x}, {alpha}, {beta})",
    "HardSwish": "hard_swish_({x})",
    "Sigmoid": "sigmoid_({x})",
    "Tanh": "tanhf({x})",
    "SiLU": "silu_({x})",
}
check_covers("cuda kernels", CUDA_ACTIVATIONS)


def activation_code(kind: str, v: str, params: dict) -> str:
    """C for activation `kind` applied to float expression `v`."""
    return render_activation(CUDA_ACTIVATIONS, kind, v, params, cfloat)


def blocks(total: int, per_block: int) -> int:
    return max(1, math.ceil(total / per_block))


# Every module of this package is imported when the registry is first asked for an op.
REGISTRY.load = module_importer(__name__, __path__)
