"""ReduceMean (and GlobalAveragePool, through emit_mean): a warp per output element when each
mean is short, a block per output element when it is long; threads sum strided elements in
fp32, then warp shuffles (and, for a block, one exchange through shared memory) add the sums.
"""

from __future__ import annotations

import math

from tinydl.backends.base import Support
from tinydl.backends.cuda.kernels import (
    FLOATS,
    blocks,
    constant_inputs,
    index_type,
    kernel,
    load,
    store,
)
from tinydl.backends.indexing import collapse, strides_of
from tinydl.ops.reduce import _reduce_axes

BLOCK = 256
WARPS = BLOCK // 32
# Means over at least this many elements get a block each; shorter ones a warp each.
BLOCK_MIN = 1024


def float_input(node, graph) -> Support:
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype not in FLOATS:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    return float_input(node, graph)


def emit_mean(b, axes: tuple[int, ...]) -> None:
    """Launch the mean of input 0 over `axes` into output 0 (same element order as NumPy)."""
    xi, yo = b.info(0), b.out()
    shape = xi.shape
    st = strides_of(shape)
    kept = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i not in axes]
    red = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i in axes]
    kd, (ks,) = collapse([d for d, _ in kept], [s for _, s in kept]) if kept else ([1], [[0]])
    rd, (rs,) = collapse([d for d, _ in red], [s for _, s in red]) if red else ([1], [[0]])
    outputs, count = math.prod(kd), math.prod(rd)
    if outputs == 0:
        return
    per_warp = count < BLOCK_MIN
    b.launch(
        "reduce.cu",
        [b.inputs[0], b.outputs[0]],
        blocks(outputs, WARPS) if per_warp else outputs,
        BLOCK,
        O=outputs,
        R=count,
        kept=list(zip(kd, ks, strict=True)),
        reduced=list(zip(rd, rs, strict=True)),
        per_warp=per_warp,
        block=BLOCK,
        warps=WARPS,
        itype=index_type(max(math.prod(shape), 1)),
        xt=xi.ctype,
        yt=yo.ctype,
        xload=load(xi.ctype, "x[off]"),
        ystore=store(yo.ctype, f"s / {float(max(count, 1))!r}f"),
    )


@kernel("ReduceMean", supports=_supports)
def reduce_mean(b):
    xi = b.info(0)
    axes = _reduce_axes(b.const(1), len(xi.shape), b.attrs["noop_with_empty_axes"])
    if axes is None and xi.stype == b.out().stype:
        b.alias(b.outputs[0], b.inputs[0])  # no axes with noop_with_empty_axes: the input
        return
    emit_mean(b, () if axes is None else axes)
