"""ReduceMean and GlobalAveragePool: a workgroup per output element, tree-summed in f32."""

from __future__ import annotations

import math

from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import (
    INT_DTYPES,
    collapse,
    constant_inputs,
    grid,
    kernel,
    strides_of,
)
from tinydl.ops.reduce import _reduce_axes


def _supports(node, graph) -> Support:
    if not (const := constant_inputs(node, graph)):
        return const
    v = graph.value(node.inputs[0])
    if v is not None and v.dtype in INT_DTYPES:
        return Support(False, f"{node.op} on {v.dtype} is not implemented")
    return Support(True)


def emit_mean(b, axes: tuple[int, ...]) -> None:
    shape = b.info(0).shape
    st = strides_of(shape)
    kept = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i not in axes]
    red = [(d, s) for i, (d, s) in enumerate(zip(shape, st, strict=True)) if i in axes]
    kd, (ks,) = collapse([d for d, _ in kept], [s for _, s in kept]) if kept else ([1], [[0]])
    rd, (rs,) = collapse([d for d, _ in red], [s for _, s in red]) if red else ([1], [[0]])
    outputs, count = math.prod(kd), math.prod(rd)
    wg = 256 if count >= 256 else 64 if count >= 64 else 32
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
    )


@kernel("ReduceMean", supports=_supports)
def reduce_mean(b):
    rank = len(b.info(0).shape)
    axes = _reduce_axes(b.const(1), rank, b.attrs["noop_with_empty_axes"])
    emit_mean(b, () if axes is None else axes)  # no axes with noop_with_empty_axes: a copy


@kernel("GlobalAveragePool", supports=_supports)
def global_average_pool(b):
    emit_mean(b, tuple(range(2, len(b.info(0).shape))))
