"""The Reduce* ops, ArgMax and ArgMin (and GlobalAveragePool, through emit_mean): a warp per
output element when each reduction is short, a block per output element when it is long;
threads reduce strided elements in fp32 (integers in 64 bits), then warp shuffles (and, for a
block, one exchange through shared memory) combine their results.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.cuda.kernels import (
    FLOATS,
    blocks,
    cfloat,
    constant_inputs,
    index_type,
    kernel,
    load,
    store,
)
from tinydl.backends.indexing import collapse, strides_of
from tinydl.ops.base import normalize_axis
from tinydl.ops.reduce import REDUCTIONS, _reduce_axes

BLOCK = 256
WARPS = BLOCK // 32
# Reductions over at least this many elements get a block each; shorter ones a warp each.
BLOCK_MIN = 1024
# Per Reduce* op: (initial value, what an element v contributes, how two partial results a and b
# combine, the output from the total s; m is the largest element where the op shifts by it).
CUDA_REDUCTIONS = {
    "ReduceMean": ("0.0f", "v", "a + b", "s / {R}"),
    "ReduceMax": (cfloat(-math.inf), "v", "fmaxf(a, b)", "s"),
    "ReduceMin": (cfloat(math.inf), "v", "fminf(a, b)", "s"),
    "ReduceSum": ("0.0f", "v", "a + b", "s"),
    "ReduceProd": ("1.0f", "v", "a * b", "s"),
    "ReduceL1": ("0.0f", "fabsf(v)", "a + b", "s"),
    "ReduceL2": ("0.0f", "v * v", "a + b", "sqrtf(s)"),
    "ReduceLogSum": ("0.0f", "v", "a + b", "logf(s)"),
    "ReduceLogSumExp": ("0.0f", "expf(v - m)", "a + b", "logf(s) + m"),
    "ReduceSumSquare": ("0.0f", "v * v", "a + b", "s"),
}
assert CUDA_REDUCTIONS.keys() == REDUCTIONS.keys()
# On integers, in long long (an int32 result wraps as the reference's does in its own type): the
# reductions that run on them, as (initial value, element, combine) where they differ.
LL_MIN, LL_MAX = "(-9223372036854775807LL - 1)", "9223372036854775807LL"
INT_REDUCTIONS = {
    "ReduceMax": (LL_MIN, "v", "(a > b ? a : b)"),
    "ReduceMin": (LL_MAX, "v", "(a < b ? a : b)"),
    "ReduceSum": ("0LL", "v", "a + b"),
    "ReduceProd": ("1LL", "v", "a * b"),
    "ReduceL1": ("0LL", "(v < 0 ? -v : v)", "a + b"),
    "ReduceSumSquare": ("0LL", "v * v", "a + b"),
}
INT_INPUTS = ("int32", "int64", "bool")


def float_input(node, graph) -> Support:
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype not in FLOATS:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is None or v.dtype in FLOATS:
        return Support(True)
    if v.dtype in INT_INPUTS and node.op in (*INT_REDUCTIONS, "ArgMax", "ArgMin"):
        return Support(True)
    return Support(False, f"{node.op} on {v.dtype} runs on the cpu backend")


def emit_mean(b, axes: tuple[int, ...]) -> None:
    """Launch the mean of input 0 over `axes` into output 0 (same element order as NumPy)."""
    emit_reduce(b, axes, "ReduceMean")


def emit_reduce(
    b, axes: tuple[int, ...], op: str = "ReduceMean", arg: str = "", last=0, view=None
) -> None:
    """Reduce input 0 over `axes` into output 0 (NumPy's element order): Reduce* op `op`, or
    with `arg` ("max"/"min") the index of the extreme along the one axis in `axes`. `view`
    (dims, element strides) reads the input through another shape (pooling's tiled windows)."""
    xi, yo = b.info(0), b.out()
    shape, st = view if view else (xi.shape, strides_of(xi.shape))
    kept = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i not in axes]
    red = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i in axes]
    kd, (ks,) = collapse([d for d, _ in kept], [s for _, s in kept]) if kept else ([1], [[0]])
    rd, (rs,) = collapse([d for d, _ in red], [s for _, s in red]) if red else ([1], [[0]])
    outputs, count = math.prod(kd), math.prod(rd)
    if outputs == 0:
        return
    per_warp = count < BLOCK_MIN
    init, element, combine, finish = CUDA_REDUCTIONS[op]
    integer = xi.dtype not in FLOATS
    if integer and not arg:
        init, element, combine = INT_REDUCTIONS[op]
    acc = "long long" if integer else "float"
    if integer:
        xload, ystore = "(long long)(x[off])", f"({yo.ctype})(s)"
    else:
        xload = load(xi.ctype, "x[off]")
        ystore = store(yo.ctype, finish.format(R=f"{float(max(count, 1))!r}f"))
    itype = index_type(max(math.prod(shape), 1))
    how = dict(
        per_warp=per_warp,
        block=BLOCK,
        warps=WARPS,
        itype=itype,
        xt=xi.ctype,
        yt=yo.ctype,
        xload=xload,
        acc=acc,
        arg=arg,
        last=last,
        init=init,
        element=element,
        combine=combine,
        shift=op == "ReduceLogSumExp",
    )
    args = [b.inputs[0], b.outputs[0]]
    generic = None
    if itype == "unsigned int":  # (the counts and axes at launch)
        ext = np.dtype(
            [("O", np.uint32), ("R", np.uint32), ("RF", np.float32)]
            + [(f, np.uint32, (len(kd),)) for f in ("kd", "ks")]
            + [(f, np.uint32, (len(rd),)) for f in ("rd", "rs")],
            align=True,
        )
        value = np.zeros((), ext)
        value["O"], value["R"], value["RF"] = outputs, count, float(max(count, 1))
        value["kd"], value["ks"], value["rd"], value["rs"] = kd, ks, rd, rs
        generic = [value[()], *args], dict(
            how, GENERIC=True, OV="g.O", RV="g.R", R="g.R", O="g.O", label="Reduction",
            kept=[(f"g.kd[{a}]", f"g.ks[{a}]") for a in range(len(kd))],
            reduced=[(f"g.rd[{a}]", f"g.rs[{a}]") for a in range(len(rd))],
            ystore=ystore if integer else store(yo.ctype, finish.format(R="g.RF")),
        )  # fmt: skip
    b.launch(
        "reduce.cu",
        args,
        blocks(outputs, WARPS) if per_warp else outputs,
        BLOCK,
        O=outputs,
        R=count,
        OV=f"{outputs}u",
        RV=f"{count}u",
        kept=[(f"{d}u", f"{s}u") for d, s in zip(kd, ks, strict=True)],
        reduced=[(f"{d}u", f"{s}u") for d, s in zip(rd, rs, strict=True)],
        ystore=ystore,
        generic=generic,
        GENERIC=False,
        **how,
    )


# Reductions whose value over one element is that element: no axes (noop_with_empty_axes) is
# the input itself.
_IDENTITY = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd")


def _reduction(op: str):
    def build(b):
        xi = b.info(0)
        axes = _reduce_axes(b.const(1), len(xi.shape), b.attrs["noop_with_empty_axes"])
        if axes is None and op in _IDENTITY and xi.stype == b.out().stype:
            b.alias(b.outputs[0], b.inputs[0])
            return
        emit_reduce(b, axes or (), op)

    return build


for _op in CUDA_REDUCTIONS:
    kernel(_op, supports=_supports)(_reduction(_op))


@kernel("ArgMax", "ArgMin", supports=_supports)
def arg_extreme(b):
    shape = b.info(0).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    arg = "max" if b.node.op == "ArgMax" else "min"
    emit_reduce(b, (axis,), arg=arg, last=b.attrs["select_last_index"])
