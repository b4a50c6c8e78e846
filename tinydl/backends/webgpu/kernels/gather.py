"""Data movement as table-driven gathers (Transpose, Slice, Pad, Concat, DepthToSpace, Split,
Expand, Tile, Trilu, and Gather, GatherElements, GatherND with constant indices): the tables come
from tinydl/backends/gathers.py (shared with the other GPU backend); this module emits them with
one kernel, and Gather and GatherElements whose indices are computed at run time with another.
"""

from __future__ import annotations

import numpy as np

from tinydl.backends.gathers import Gather, Indexed, register
from tinydl.backends.webgpu.kernels import constant_inputs, ctype, grid, kernel, wgsl_float
from tinydl.backends.webgpu.kernels.scatter import emit_gather_nd

WG = 256


def emit_gather(b, g: Gather, dst: str, label: str = "") -> None:
    """Dispatch a gather `g` (gathers.Gather) into value `dst`."""
    dims, tables, tbase, ostrides = g.layout()
    src, base, pad = g.src, g.base, g.pad
    if max((int(np.abs(t).max(initial=0)) for t in tables), default=0) >= 2**31:
        raise ValueError(f"{b.label}: tensor too large for 32-bit offsets")
    table = b.upload(g.key, np.concatenate(tables).astype(np.int32), "i32")
    total = int(np.prod(dims))
    if total == 0:
        return
    out = b.plan.infos[dst]
    ct = ctype(out.dtype)
    g = grid(total, WG)
    b.dispatch(
        "gather.wgsl",
        [src, table, dst],
        g,
        label=label,
        dims=dims,
        tbase=tbase,
        ostrides=ostrides,
        base=base,
        total=total,
        pad=str(int(pad)) if ct == "i32" else wgsl_float(pad),
        ctype=ct,
        in_t=b.info(src).stype,
        out_t=out.stype,
        wg=WG,
        gx=g[0],
    )


def emit_indexed(b, g: Indexed) -> None:
    """Dispatch Gather or GatherElements reading its indices (input 1) at run time."""
    out = b.out()
    total = int(np.prod(g.dims))
    if total == 0:
        return
    if g.axis_dim == 0:
        raise ValueError(f"{b.label}: cannot index an empty axis")
    grid_ = grid(total, WG)
    b.dispatch(
        "gather_index.wgsl",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        grid_,
        dims=list(g.dims),
        sstrides=g.sstrides,
        istrides=g.istrides,
        axis_dim=g.axis_dim,
        axis_stride=g.axis_stride,
        total=total,
        ctype=ctype(out.dtype),
        in_t=b.info(0).stype,
        out_t=out.stype,
        wg=WG,
        gx=grid_[0],
    )


def emit_concat(b) -> bool:
    """A Concat whose inputs are made in place in the output where the plan can
    (Plan.place_concat); one gather for each other input."""
    from tinydl.backends.gathers import concat

    for g in b.plan.place_concat(b, concat(b)):
        emit_gather(b, g, b.outputs[0])
    return True


register(kernel, constant_inputs, emit_gather, emit_indexed, emit_gather_nd, emit_concat)
