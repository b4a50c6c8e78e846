"""The Reduce* ops, ArgMax, ArgMin and GlobalAveragePool: a workgroup per output element, a
strided pass per thread, then a tree in workgroup memory, in f32 (in i32 for integers)."""

from __future__ import annotations

import math

from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import (
    INT_DTYPES,
    collapse,
    constant_inputs,
    ctype,
    grid,
    kernel,
    strides_of,
    wgsl_float,
)
from tinydl.ops.base import normalize_axis
from tinydl.ops.reduce import REDUCTIONS, _reduce_axes

INF = wgsl_float(math.inf)
LOWEST = wgsl_float(-math.inf)
# Per Reduce* op: (initial value, what an element v contributes, how two partial results a and b
# combine, the output from the total s; m is the largest element where the op shifts by it).
WGSL_REDUCTIONS = {
    "ReduceMean": ("0.0", "v", "a + b", "s / {R}.0"),
    "ReduceMax": (LOWEST, "v", "max(a, b)", "s"),
    "ReduceMin": (INF, "v", "min(a, b)", "s"),
    "ReduceSum": ("0.0", "v", "a + b", "s"),
    "ReduceProd": ("1.0", "v", "a * b", "s"),
    "ReduceL1": ("0.0", "abs(v)", "a + b", "s"),
    "ReduceL2": ("0.0", "v * v", "a + b", "sqrt(s)"),
    "ReduceLogSum": ("0.0", "v", "a + b", "log(s)"),
    "ReduceLogSumExp": ("0.0", "exp(v - m)", "a + b", "log(s) + m"),
    "ReduceSumSquare": ("0.0", "v * v", "a + b", "s"),
}
assert WGSL_REDUCTIONS.keys() == REDUCTIONS.keys()
I32_MIN, I32_MAX = "bitcast<i32>(0x80000000u)", "2147483647"
# On integers, in i32 (an int64 is held as i32 here, as by every webgpu kernel), wrapping as the
# reference does in its own type: the initial value of each reduction that runs on integers.
INT_INIT = {"ReduceMax": I32_MIN, "ReduceMin": I32_MAX, "ReduceSum": "0", "ReduceProd": "1"}
INT_INIT.update(ReduceL1="0", ReduceSumSquare="0")


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype in INT_DTYPES and node.op not in (*INT_INIT, "ArgMax", "ArgMin"):
        return Support(False, f"{node.op} on {v.dtype} runs on the cpu backend")
    return Support(True)


def emit_reduce(
    b, axes: tuple[int, ...], op: str = "ReduceMean", arg: str = "", last=0, view=None
) -> None:
    """Reduce input 0 over `axes` into output 0 (NumPy's element order): Reduce* op `op`, or
    with `arg` ("max"/"min") the index of the extreme along the one axis in `axes`. `view`
    (dims, element strides) reads the input through another shape (pooling's tiled windows)."""
    shape, st = view if view else (b.info(0).shape, strides_of(b.info(0).shape))
    kept = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i not in axes]
    red = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i in axes]
    kd, (ks,) = collapse([d for d, _ in kept], [s for _, s in kept]) if kept else ([1], [[0]])
    rd, (rs,) = collapse([d for d, _ in red], [s for _, s in red]) if red else ([1], [[0]])
    outputs, count = math.prod(kd), math.prod(rd)
    if outputs == 0:
        return
    wg = 256 if count >= 256 else 64 if count >= 64 else 32
    init, element, combine, finish = WGSL_REDUCTIONS[op]
    acc = ctype(b.info(0).dtype)
    if acc == "i32" and not arg:
        init = INT_INIT[op]
    g = grid(outputs, 1)
    b.dispatch(
        "reduce.wgsl",
        [b.inputs[0], b.outputs[0]],
        g,
        O=outputs,
        R=count,
        kept=list(zip(kd, ks, strict=True)),
        reduced=list(zip(rd, rs, strict=True)),
        WG=wg,
        steps=int(math.log2(wg)),
        gx=g[0],
        st=b.info(0).stype,
        ot=b.out().stype,
        arg=arg,
        last=last,
        init=init,
        element=element,
        combine=combine,
        finish=finish.format(R=count),
        shift=op == "ReduceLogSumExp",
        lowest=LOWEST,
        acc=acc,
    )


def _reduction(op: str):
    def build(b):
        rank = len(b.info(0).shape)
        # No axes with noop_with_empty_axes: each element reduced alone (a copy for Mean).
        axes = _reduce_axes(b.const(1), rank, b.attrs["noop_with_empty_axes"]) or ()
        emit_reduce(b, axes, op)

    return build


for _op in WGSL_REDUCTIONS:
    kernel(_op, supports=_supports)(_reduction(_op))


@kernel("GlobalAveragePool", supports=_supports)
def global_average_pool(b):
    emit_reduce(b, tuple(range(2, len(b.info(0).shape))))


@kernel("ArgMax", "ArgMin", supports=_supports)
def arg_extreme(b):
    shape = b.info(0).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    arg = "max" if b.node.op == "ArgMax" else "min"
    emit_reduce(b, (axis,), arg=arg, last=b.attrs["select_last_index"])
