"""Elementwise ops with NumPy broadcasting: arithmetic, math functions, activations, Cast,
BatchNormalization. (Comparisons, logic and Where are logic.py's, through `emit`.)

One template serves all: each operand is a buffer read through its broadcast strides (axes
merged where contiguous), or a literal baked into the source for a one-element constant. When
the last merged axis is a multiple of 4 and every operand walks it with stride 1 or 0, each
invocation does one vec4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.fusion import (
    CHAIN,
    activation_operands,
    activation_supports,
    bn_affine,
    bn_supports,
    chain_lets,
)
from tinydl.backends.webgpu.kernels import (
    INT_DTYPES,
    activation_expr,
    broadcast_strides,
    collapse,
    ctype,
    grid,
    kernel,
    strides_of,
    wgsl_float,
)
from tinydl.ops.activation import ACTIVATION_OPS

WG = 256
BINARY = {"Add": "{0} + {1}", "Sub": "{0} - {1}", "Mul": "{0} * {1}", "Div": "{0} / {1}"}
INT_OPS = {"Add", "Sub", "Mul", "Div", "Relu"}


@dataclass
class Operand:
    """A value name or constant array to read, or a literal (WGSL text) to bake in."""

    shape: tuple[int, ...]
    name: str | None = None
    array: np.ndarray | None = None
    literal: str | None = None


def emit(b, expr, operands: list[Operand], out: str, ctype: str, label: str = "") -> None:
    """Dispatch `expr` over a0, a1, ... (in `ctype`, vec4 or scalar) into value `out`; `expr`
    is WGSL text, or a function of the vector width (4 or 1) that returns it or a pair
    (let statements [(name, WGSL)], final WGSL)."""
    info = b.plan.infos[out]
    out_shape = info.shape
    strides = [broadcast_strides(op.shape, out_shape) for op in operands]
    dims, merged = collapse(out_shape, *strides) if operands else collapse(out_shape)
    total = int(np.prod(out_shape))
    vec = 4 if total % 4 == 0 and dims[-1] % 4 == 0 else 1
    for op, st in zip(operands, merged, strict=True):
        if op.literal is None and st[-1] not in (0, 1):
            vec = 1
    bindings, params = [], []
    coords = False
    for op, st in zip(operands, merged, strict=True):
        if op.literal is not None:
            t = f"vec4<{ctype}>" if vec == 4 else ctype
            params.append({"binding": None, "load": f"{t}({op.literal})"})
            continue
        if op.name is not None:
            stype = b.plan.infos[op.name].stype
            bindings.append(op.name)
        else:
            stype = (
                "i32" if ctype == "i32" else ("f16" if b.plan.infos[out].stype == "f16" else "f32")
            )
            bindings.append(b.upload(("operand", len(bindings)), op.array, stype))
        k = len(bindings) - 1
        full = st == strides_of(dims)
        if vec == 4 and full:
            elem, load = f"vec4<{stype}>", f"vec4<{ctype}>(in{k}[i])"
        else:
            offset = " + ".join(f"c{j} * {s}u" for j, s in enumerate(st) if s) or "0u"
            if not full:
                coords = True
            else:
                offset = "i"
            if vec == 4 and st[-1] == 1:
                elem, load = f"vec4<{stype}>", f"vec4<{ctype}>(in{k}[({offset}) / 4u])"
            elif vec == 4:
                elem, load = stype, f"vec4<{ctype}>({ctype}(in{k}[{offset}]))"
            else:
                elem, load = stype, f"{ctype}(in{k}[{offset}])"
        params.append({"binding": k, "elem": elem, "load": load})
    ostype = info.stype
    units = total // vec
    text = expr(vec) if callable(expr) else expr
    lets: list = []
    if isinstance(text, tuple):
        lets, text = text
    g = grid(units, WG)
    b.dispatch(
        "elementwise.wgsl",
        [*bindings, out],
        g,
        label=label,
        operands=params,
        out_binding=len(bindings),
        out_t=f"vec4<{ostype}>" if vec == 4 else ostype,
        expr=text,
        lets=lets,
        vec=vec,
        dims=dims,
        total=units,
        coords=coords,
        wg=WG,
        gx=g[0],
    )


def operand(b, i: int, ctype: str) -> Operand:
    """Input i as an operand: a literal for a one-element constant, else a buffer."""
    arr = b.const(i)
    if arr is not None:
        if arr.size == 1:
            value = arr.reshape(()).item()
            lit = f"{int(value)}" if ctype == "i32" else wgsl_float(float(value))
            return Operand(tuple(arr.shape), literal=lit)
        return Operand(tuple(arr.shape), array=arr)
    return Operand(b.info(i).shape, name=b.inputs[i])


def _float_only(node, graph) -> Support:
    v = graph.value(node.outputs[0])
    if node.op not in INT_OPS and v is not None and v.dtype in INT_DTYPES:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


@kernel("Add", "Sub", "Mul", "Div", supports=_float_only)
def binary(b):
    ct = ctype(b.out().dtype)
    expr = BINARY[b.node.op].format("a0", "a1")
    emit(b, expr, [operand(b, 0, ct), operand(b, 1, ct)], b.outputs[0], ct)


def _pow_supports(node, graph) -> Support:
    v = graph.value(node.inputs[1])
    if node.inputs[1] not in graph.initializers and (v is None or v.dtype != "float32"):
        return Support(False, "Pow with a non-constant, non-float32 exponent is not implemented")
    return _float_only(node, graph)


@kernel("Pow", supports=_pow_supports)
def power(b):
    exp = b.const(1)
    special = {1.0: "a0", 2.0: "a0 * a0", 0.5: "sqrt(a0)"}
    if exp is not None and exp.size == 1 and float(exp.reshape(())) in special:
        emit(b, special[float(exp.reshape(()))], [operand(b, 0, "f32")], b.outputs[0], "f32")
        return
    ops = [operand(b, 0, "f32"), operand(b, 1, "f32")]
    if ops[1].array is not None:
        ops[1].array = ops[1].array.astype(np.float32)
    emit(b, lambda vec: f"pow_{vec}(a0, a1)", ops, b.outputs[0], "f32")


@kernel("Sqrt", supports=_float_only)
def sqrt(b):
    emit(b, "sqrt(a0)", [operand(b, 0, "f32")], b.outputs[0], "f32")


def _erf(vec: int, x: str = "a0", to: str = "e"):
    """erf(x) in f32 (WGSL has none): its Taylor series below 0.5 (relative error < 1e-6), and
    Abramowitz & Stegun 7.1.26 above (absolute error < 1.5e-7). Let statements named `to`_...,
    and the final expression."""
    c = literal(vec)

    def poly(v, coefs):
        text = c(coefs[-1])
        for k in reversed(coefs[:-1]):
            text = f"({c(k)} + {v} * {text})"
        return text

    taylor = [1.1283791670955126, -0.3761263890318375, 0.11283791670955126]
    taylor += [-0.026866170645131252, 0.005223977625442188]
    series = [0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429]
    ax, x2, t = f"{to}_ax", f"{to}_x2", f"{to}_t"
    lets = [
        (ax, f"abs({x})"),
        (x2, f"{x} * {x}"),
        (t, f"{c(1)} / ({c(1)} + {c(0.3275911)} * {ax})"),
        (f"{to}_small", f"{x} * {poly(x2, taylor)}"),
        (f"{to}_big", f"sign({x}) * ({c(1)} - {t} * {poly(t, series)} * exp(-{x2}))"),
    ]
    return lets, f"select({to}_big, {to}_small, {ax} < {c(0.5)})"


def _vtype(vec: int, ct: str) -> str:
    return f"vec{vec}<{ct}>" if vec > 1 else ct


def literal(vec: int, ct: str = "f32"):
    """A function writing a number as a WGSL literal of type vec`vec`<ct> (or ct)."""
    t = _vtype(vec, ct)
    return lambda x: f"{t}({int(x) if ct == 'i32' else wgsl_float(x)})"


@kernel("Erf", supports=_float_only)
def erf(b):
    emit(b, _erf, [operand(b, 0, "f32")], b.outputs[0], "f32")


def _activation_supports(node, graph) -> Support:
    support = activation_supports(node, graph)
    return _float_only(node, graph) if support.ok else support


@kernel(*ACTIVATION_OPS, supports=_activation_supports)
def activation(b):
    op = b.node.op
    ct = ctype(b.out().dtype)
    ops = [operand(b, 0, ct)]
    if op == "Relu" and ct == "i32":
        emit(b, lambda vec: "max(a0, a0 * 0)", ops, b.outputs[0], ct)
        return
    params, slope = activation_operands(b.node, b.plan.graph.initializers.get)
    if slope:
        ops.append(operand(b, 1, ct))
    emit(b, lambda vec: activation_expr(op, "a0", params, vec), ops, b.outputs[0], ct)


# WGSL per one-input float op: {x} is the operand, {t} its type (f32 or vec4<f32>), {vec} the
# width (common.wgsl's helpers end in _1 or _4), {alpha} and {gamma} the node's attributes.
UNARY = {
    "Exp": "exp({x})",
    "Log": "log({x})",
    "Sin": "sin({x})",
    "Cos": "cos({x})",
    "Reciprocal": "{t}(1.0) / {x}",
    "Ceil": "ceil({x})",
    "Floor": "floor({x})",
    "Round": "round({x})",  # halves to even, as ONNX
    "Softplus": "softplus_{vec}({x})",
    "Mish": "{x} * tanh_{vec}(softplus_{vec}({x}))",
    "Softsign": "{x} / ({t}(1.0) + abs({x}))",
    "Elu": "select({x}, {alpha} * (exp({x}) - {t}(1.0)), {x} < {t}(0.0))",
    "Selu": "{gamma} * select({x}, {alpha} * (exp({x}) - {t}(1.0)), {x} <= {t}(0.0))",
}


@kernel(*UNARY, supports=_float_only)
def unary(b):
    def code(vec: int) -> str:
        c = literal(vec)
        params = {k: c(v) for k, v in b.attrs.items()}
        return UNARY[b.node.op].format(x="a0", t=_vtype(vec, "f32"), vec=vec, **params)

    emit(b, code, [operand(b, 0, "f32")], b.outputs[0], "f32")


@kernel("Gelu", supports=_float_only)
def gelu(b):
    def code(vec: int):
        c = literal(vec)
        if b.attrs["approximate"] == "tanh":
            cube = f"a0 + {c(0.044715)} * a0 * a0 * a0"
            return f"{c(0.5)} * a0 * ({c(1)} + tanh_{vec}({c(0.7978845608028654)} * ({cube})))"
        lets, e = _erf(vec, "g_x")
        return [("g_x", f"a0 * {c(0.7071067811865476)}"), *lets], f"{c(0.5)} * a0 * ({c(1)} + {e})"

    emit(b, code, [operand(b, 0, "f32")], b.outputs[0], "f32")


@kernel("Abs", "Neg", "Sign")
def signs(b):
    """On floats and integers alike; the sign of a NaN is NaN, as in NumPy."""
    ct = ctype(b.out().dtype)

    def code(vec: int) -> str:
        if b.node.op == "Abs":
            return "abs(a0)"
        if b.node.op == "Neg":
            return "-a0"
        c = literal(vec, ct)
        whole = f"select(select({c(0)}, {c(-1)}, a0 < {c(0)}), {c(1)}, a0 > {c(0)})"
        return whole if ct == "i32" else f"select({whole}, a0, isnan_{vec}(a0))"

    emit(b, code, [operand(b, 0, ct)], b.outputs[0], ct)


@kernel("Mod")
def mod(b):
    """Floats: C's fmod (the schema asks fmod=1). Integers: the truncated remainder, moved to
    the divisor's sign unless fmod=1; a zero divisor gives 0."""
    ct = ctype(b.out().dtype)
    ops = [operand(b, 0, ct), operand(b, 1, ct)]
    if ct == "f32":
        emit(b, lambda vec: f"fmod_{vec}(a0, a1)", ops, b.outputs[0], ct)
        return

    def code(vec: int):
        c = literal(vec, ct)
        # a - b * (a / b), not `%`: NVIDIA's Vulkan driver got `%` wrong for negative operands
        lets = [
            ("d", f"select(a1, {c(1)}, a1 == {c(0)})"),
            ("r", f"select(a0 - d * (a0 / d), {c(0)}, a1 == {c(0)})"),
        ]
        if b.attrs["fmod"]:
            return lets, "r"
        moved = f"(r != {c(0)}) & ((r < {c(0)}) != (a1 < {c(0)}))"
        return lets, f"select(r, r + a1, {moved})"

    emit(b, code, ops, b.outputs[0], ct)


# WebGPU guarantees 8 storage buffers per shader stage: the output and 7 operands.
MAX_OPERANDS = 7


def _variadic_supports(node, graph) -> Support:
    if len(node.inputs) > MAX_OPERANDS:
        return Support(False, f"{node.op} of {len(node.inputs)} inputs (at most {MAX_OPERANDS})")
    return Support(True)


@kernel("Min", "Max", "Sum", "Mean", supports=_variadic_supports)
def variadic(b):
    """Folded left to right; Min and Max of floats pass a NaN on, as NumPy does."""
    op, n = b.node.op, len(b.inputs)
    ct = ctype(b.out().dtype)
    ops = [operand(b, i, ct) for i in range(n)]

    def code(vec: int):
        lets, v = [], "a0"
        for k in range(1, n):
            a = f"a{k}"
            if op in ("Sum", "Mean"):
                text = f"{v} + {a}"
            elif ct == "i32":
                text = f"{op.lower()}({v}, {a})"
            else:
                cmp = "<" if op == "Min" else ">"
                text = f"select({a}, {v}, ({v} {cmp} {a}) | isnan_{vec}({v}))"
            lets.append((f"t{k}", text))
            v = f"t{k}"
        if op == "Mean":
            v = f"{v} / {literal(vec)(n)}"
        return lets, v

    emit(b, code, ops, b.outputs[0], ct)


@kernel("Cast")
def cast(b):
    src, dst = b.info(0), b.out()
    if src.stype == dst.stype == "u8":
        b.alias(b.outputs[0], b.inputs[0])
    elif "u8" in (src.stype, dst.stype):
        total = int(np.prod(dst.shape))
        unpack = src.stype == "u8"
        units = total if unpack else -(-total // 4)
        g = grid(units, WG)
        b.dispatch(
            "cast_u8.wgsl",
            [b.inputs[0], b.outputs[0]],
            g,
            unpack=unpack,
            total=total,
            units=units,
            in_t=src.stype,
            out_t=dst.stype,
            wg=WG,
            gx=g[0],
        )
    elif dst.dtype == "bool":
        # Nonzero (NaN included) is true, held as i32 1.
        ct = ctype(src.dtype)

        def nonzero(vec: int) -> str:
            t = f"vec{vec}<{ct}>" if vec > 1 else ct
            return f"select({t}(0), {t}(1), a0 != {t}(0))"

        emit(b, nonzero, [operand(b, 0, ct)], b.outputs[0], ct)
    else:
        # Loading in the output's type converts: f32<->f16, float->i32 truncates, i32->float
        # (int64 and bool are held as i32: a bool is 0 or 1 already).
        ct = ctype(dst.dtype)
        emit(b, "a0", [operand(b, 0, ct)], b.outputs[0], ct)


@kernel("BatchNormalization", supports=bn_supports)
def batch_norm(b):
    per_channel, k, shift = bn_affine(b)
    ops = [
        operand(b, 0, "f32"),
        Operand(per_channel, array=k),
        Operand(per_channel, array=shift),
    ]
    emit(b, "a0 * a1 + a2", ops, b.outputs[0], "f32")


@kernel(CHAIN)
def elementwise_chain(b):
    """A run of elementwise ops (tinydl/backends/fusion.py: fuse_elementwise) as one dispatch:
    each step a `let` over the one before, every other operand read with its own broadcast."""
    ops = [operand(b, i, "f32") for i in range(len(b.inputs))]
    for op in ops:
        if op.array is not None:
            op.array = op.array.astype(np.float32)

    def code(vec: int):
        return chain_lets(
            b.node.meta["steps"], BINARY, "sqrt({x})",
            lambda kind, x, params: activation_expr(kind, x, params, vec),
        )  # fmt: skip

    emit(b, code, ops, b.outputs[0], "f32")
