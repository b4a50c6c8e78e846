"""Elementwise ops with NumPy broadcasting: arithmetic, math functions, activations, Pow, Sqrt,
Cast, BatchNormalization (inference form). (Comparisons, logic and Where are logic.py's,
through `emit`.)

One template serves all: each operand is an array read through its broadcast strides (axes
merged where contiguous), or a literal baked into the source for a one-element constant.
Arithmetic is done in float (fp16 storage is widened on load) or, for integer tensors, in the
integer type itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.cuda.kernels import (
    CTYPES,
    FLOATS,
    activation_code,
    blocks,
    cfloat,
    coords,
    index_type,
    kernel,
    load,
    offset,
    store,
)
from tinydl.backends.fusion import (
    CHAIN,
    activation_operands,
    activation_supports,
    bn_affine,
    bn_supports,
    chain_lets,
)
from tinydl.backends.indexing import broadcast_strides, collapse, strides_of
from tinydl.ops.activation import ACTIVATION_OPS

BLOCK = 256
BINARY = {"Add": "{0} + {1}", "Sub": "{0} - {1}", "Mul": "{0} * {1}", "Div": "{0} / {1}"}


@dataclass
class Operand:
    """A value name or constant array to read, or a literal (C text) to bake in."""

    shape: tuple[int, ...]
    name: str | None = None
    array: np.ndarray | None = None
    literal: str | None = None


def compute_type(dtype: str) -> str:
    """The C type arithmetic on `dtype` happens in."""
    return "float" if dtype in FLOATS else CTYPES[dtype]


def emit(b, expr, operands: list[Operand], out: str, ct: str, label: str = "") -> None:
    """Launch `expr` (C text over a0, a1, ... of C type `ct`) over value `out`."""
    info = b.plan.infos[out]
    out_shape = info.shape
    strides = [broadcast_strides(op.shape, out_shape) for op in operands]
    dims, merged = collapse(out_shape, *strides) if operands else collapse(out_shape)
    total = int(np.prod(out_shape))
    itype = index_type(total)
    args, params = [], []
    need_coords = False
    strided = []  # the strides of the operands read through them (the generic kernel's g.s)
    for k, (op, st) in enumerate(zip(operands, merged, strict=True)):
        if op.literal is not None:
            params.append({"arg": False, "load": f"({ct})({op.literal})"})
            continue
        if op.name is not None:
            ctype = b.info(op.name).ctype
            args.append(op.name)
        else:
            arr = op.array
            if arr.dtype == np.float64 or (ct == "float" and arr.dtype.name not in FLOATS):
                arr = arr.astype(np.float32)
            if arr.dtype.name == "float16" and b.plan.infos[out].stype != "float16":
                arr = arr.astype(np.float32)
            ctype = CTYPES[arr.dtype.name]
            args.append(b.upload(("operand", k), arr))
        if st == strides_of(dims):
            idx = gidx = "i"
        else:
            idx = offset(st)
            need_coords = True
            gidx = " + ".join(f"c{a} * g.s[{len(strided)}][{a}]" for a in range(len(dims)))
            strided.append(st)
        at = len(args) - 1
        raw, graw = f"in{at}[{idx}]", f"in{at}[{gidx}]"
        value = load(ctype, raw) if ct == "float" else f"({ct})({raw})"
        gvalue = load(ctype, graw) if ct == "float" else f"({ct})({graw})"
        params.append({"arg": True, "index": at, "ctype": ctype, "load": value, "g": gvalue})
    out_ctype = info.ctype
    result = f"({ct})({expr})"
    how = dict(
        operands=params,
        out_ctype=out_ctype,
        store=store(out_ctype, result) if out_ctype != ct else result,
        ct=ct,
        itype=itype,
        block=BLOCK,
    )
    generic = None
    if itype == "unsigned int":  # (every extent at launch, and the strides read through)
        ext = np.dtype(
            [("total", np.uint32), ("d", np.uint32, (len(dims),)),
             ("s", np.uint32, (max(len(strided), 1), len(dims)))],
            align=True,
        )  # fmt: skip
        value = np.zeros((), ext)
        value["total"], value["d"] = total, dims
        for j, st in enumerate(strided):
            value["s"][j] = st
        gops = [dict(p, load=p.get("g", p["load"])) for p in params]
        rem = coords([f"g.d[{a}]" for a in range(len(dims))], itype=itype)
        generic = [value[()], *args, out], dict(
            how, GENERIC=True, operands=gops, nd=len(dims), strided=len(strided),
            coords=rem if need_coords else "", label="Elementwise",
        )  # fmt: skip
    b.launch(
        "elementwise.cu",
        [*args, out],
        blocks(total, BLOCK),
        BLOCK,
        label=label,
        dims=dims,
        total=total,
        coords=coords(dims, itype=itype) if need_coords else "",
        generic=generic,
        GENERIC=False,
        **how,
    )


def operand(b, i: int, ct: str) -> Operand:
    """Input i as an operand: a literal for a one-element constant, else an array."""
    arr = b.const(i)
    if arr is not None:
        if arr.size == 1:
            value = arr.reshape(()).item()
            if ct == "float":
                lit = cfloat(float(value))
            elif ct == "bool":
                lit = "true" if value else "false"
            else:
                lit = f"{int(value)}LL" if ct == "long long" else str(int(value))
            return Operand(tuple(arr.shape), literal=lit)
        return Operand(tuple(arr.shape), array=arr)
    return Operand(b.info(i).shape, name=b.inputs[i])


def _int_arithmetic(node, graph) -> Support:
    v = graph.value(node.outputs[0])
    if v is not None and v.dtype == "bool":
        return Support(False, f"{node.op} on bool is not implemented")
    return Support(True)


@kernel("Add", "Sub", "Mul", "Div", supports=_int_arithmetic)
def binary(b):
    ct = compute_type(b.out().dtype)
    expr = BINARY[b.node.op].format("a0", "a1")
    if b.node.op == "Div" and ct != "float":
        # ONNX integer Div truncates toward zero, as C does; a zero divisor gives 0, not a trap.
        expr = "(a1 == 0 ? 0 : a0 / a1)"
    emit(b, expr, [operand(b, 0, ct), operand(b, 1, ct)], b.outputs[0], ct)


def _float_only(node, graph) -> Support:
    v = graph.value(node.outputs[0])
    if v is not None and v.dtype not in FLOATS:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


@kernel("Pow", supports=_float_only)
def power(b):
    exp = b.const(1)
    special = {1.0: "a0", 2.0: "a0 * a0", 0.5: "sqrtf(a0)"}
    if exp is not None and exp.size == 1 and float(exp.reshape(())) in special:
        emit(b, special[float(exp.reshape(()))], [operand(b, 0, "float")], b.outputs[0], "float")
        return
    ops = [operand(b, 0, "float"), operand(b, 1, "float")]
    if ops[1].name is not None and b.info(1).dtype not in FLOATS:
        raise ValueError(f"{b.label}: Pow with an integer exponent tensor is not implemented")
    emit(b, "pow_(a0, a1)", ops, b.outputs[0], "float")


@kernel("Sqrt", supports=_float_only)
def sqrt(b):
    emit(b, "sqrtf(a0)", [operand(b, 0, "float")], b.outputs[0], "float")


@kernel("Erf", supports=_float_only)
def erf(b):
    emit(b, "erff(a0)", [operand(b, 0, "float")], b.outputs[0], "float")


def _activation_supports(node, graph) -> Support:
    support = activation_supports(node, graph)
    if not support.ok:
        return support
    if node.op in ("Relu", "Clip"):
        return _int_arithmetic(node, graph)
    return _float_only(node, graph)


@kernel(*ACTIVATION_OPS, supports=_activation_supports)
def activation(b):
    op = b.node.op
    ct = compute_type(b.out().dtype)
    ops = [operand(b, 0, ct)]
    if ct != "float":
        lo, hi = (b.const(i) for i in (1, 2)) if op == "Clip" else (np.array(0), None)
        expr = "a0"
        if lo is not None:
            expr = f"({expr} < ({ct}){int(lo.reshape(()))} ? ({ct}){int(lo.reshape(()))} : {expr})"
        if hi is not None:
            expr = f"({expr} > ({ct}){int(hi.reshape(()))} ? ({ct}){int(hi.reshape(()))} : {expr})"
        emit(b, expr, ops, b.outputs[0], ct)
        return
    params, slope = activation_operands(b.node, b.plan.const)
    if slope:
        ops.append(operand(b, 1, ct))
    emit(b, activation_code(op, "a0", params), ops, b.outputs[0], ct)


# C per one-input float op: {x} is the operand (a float), {alpha} and {gamma} the node's
# attributes; the functions ending in _ are common.cuh's.
UNARY = {
    "Exp": "expf({x})",
    "Log": "logf({x})",
    "Sin": "sinf({x})",
    "Cos": "cosf({x})",
    "Reciprocal": "1.0f / {x}",
    "Ceil": "ceilf({x})",
    "Floor": "floorf({x})",
    "Round": "rintf({x})",  # halves to even, as ONNX
    "Softplus": "softplus_({x})",
    "Mish": "{x} * tanhf(softplus_({x}))",
    "Softsign": "{x} / (1.0f + fabsf({x}))",
    "Elu": "({x} < 0.0f ? {alpha} * expm1f({x}) : {x})",
    "Selu": "{gamma} * ({x} <= 0.0f ? {alpha} * expm1f({x}) : {x})",
    "Gelu": "0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f))",
}
GELU_TANH = "0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x})))"


@kernel(*UNARY, supports=_float_only)
def unary(b):
    op = b.node.op
    code = GELU_TANH if op == "Gelu" and b.attrs["approximate"] == "tanh" else UNARY[op]
    params = {k: cfloat(v) for k, v in b.attrs.items() if k in ("alpha", "gamma")}
    emit(b, code.format(x="a0", **params), [operand(b, 0, "float")], b.outputs[0], "float")


@kernel("Abs", "Neg", "Sign", supports=_int_arithmetic)
def signs(b):
    """On floats and integers alike; the sign of a NaN is NaN, as in NumPy."""
    ct = compute_type(b.out().dtype)
    whole = "((a0 > 0) - (a0 < 0))"
    expr = {
        "Abs": "fabsf(a0)" if ct == "float" else "(a0 < 0 ? -a0 : a0)",
        "Neg": "-a0",
        "Sign": f"(a0 != a0 ? a0 : (float){whole})" if ct == "float" else whole,
    }[b.node.op]
    emit(b, expr, [operand(b, 0, ct)], b.outputs[0], ct)


@kernel("Mod", supports=_int_arithmetic)
def mod(b):
    """Floats: C's fmod (the schema asks fmod=1). Integers: common.cuh's trunc_mod_ (fmod=1) or
    floor_mod_."""
    ct = compute_type(b.out().dtype)
    if ct == "float":
        expr = "fmodf(a0, a1)"
    else:
        expr = f"{'trunc_mod_' if b.attrs['fmod'] else 'floor_mod_'}<{ct}>(a0, a1)"
    emit(b, expr, [operand(b, 0, ct), operand(b, 1, ct)], b.outputs[0], ct)


@kernel("Min", "Max", "Sum", "Mean", supports=_int_arithmetic)
def variadic(b):
    """Folded left to right; Min and Max of floats pass a NaN on (common.cuh's min_, max_)."""
    op, n = b.node.op, len(b.inputs)
    ct = compute_type(b.out().dtype)
    expr = "a0"
    for k in range(1, n):
        expr = f"{expr} + a{k}" if op in ("Sum", "Mean") else f"{op.lower()}_({expr}, a{k})"
    if op == "Mean":
        expr = f"({expr}) / {cfloat(n)}"
    emit(b, expr, [operand(b, i, ct) for i in range(n)], b.outputs[0], ct)


@kernel("Cast")
def cast(b):
    src, dst = b.info(0), b.out()
    if src.stype == dst.stype:
        b.alias(b.outputs[0], b.inputs[0])
        return
    if dst.dtype == "bool":
        ct = compute_type(src.dtype)
        emit(b, "a0 != 0", [operand(b, 0, ct)], b.outputs[0], "bool")
        return
    if dst.dtype in FLOATS or src.dtype in FLOATS:
        # Float -> int truncates toward zero (C conversion); NaN and overflow are undefined in
        # ONNX too.
        emit(b, "a0", [operand(b, 0, "float")], b.outputs[0], "float")
        return
    ct = CTYPES[dst.dtype]
    emit(b, "a0", [operand(b, 0, ct)], b.outputs[0], ct)


@kernel(CHAIN)
def elementwise_chain(b):
    """A run of elementwise ops (fusion.fuse_elementwise) as one launch: each step a local of
    the one before (in a lambda called at once, so no step's text is repeated), every other
    operand read with its own broadcast."""
    ops = [operand(b, i, "float") for i in range(len(b.inputs))]
    lets, v = chain_lets(b.node.meta["steps"], BINARY, "sqrtf({x})", activation_code)
    body = " ".join(f"const float {name} = {text};" for name, text in lets)
    emit(b, f"[&]() {{ {body} return {v}; }}()", ops, b.outputs[0], "float")


@kernel("BatchNormalization", supports=bn_supports)
def batch_norm(b):
    per_channel, k, shift = bn_affine(b)
    ops = [
        operand(b, 0, "float"),
        Operand(per_channel, array=k),
        Operand(per_channel, array=shift),
    ]
    expr = "(a0 * a1 + a2)"
    for kind, params in b.node.meta.get("epilogue", []):  # fusion.fuse_bn_activations
        expr = f"({activation_code(kind, expr, params)})"
    emit(b, expr, ops, b.outputs[0], "float")
