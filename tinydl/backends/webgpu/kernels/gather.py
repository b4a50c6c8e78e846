"""Transpose, Slice, Pad, Concat and DepthToSpace as table-driven gathers: the tables come from
tinydl/backends/gathers.py (shared with the other GPU backend); this module emits them with one
kernel.
"""

from __future__ import annotations

import numpy as np

from tinydl.backends.gathers import register
from tinydl.backends.webgpu.kernels import constant_inputs, grid, kernel, strides_of, wgsl_float

WG = 256


def emit_gather(
    b,
    src: str,
    dst: str,
    dims,
    tables,
    *,
    base: int = 0,
    ostrides=None,
    pad: float = 0.0,
    key="tables",
    label: str = "",
) -> None:
    """Dispatch a gather over region `dims`; tables[k][c] is axis k's input offset term."""
    dims = [int(d) for d in dims] or [1]
    tables = [np.asarray(t, np.int64) for t in tables] or [np.zeros(1, np.int64)]
    if max((int(np.abs(t).max(initial=0)) for t in tables), default=0) >= 2**31:
        raise ValueError(f"{b.label}: tensor too large for 32-bit offsets")
    tbase = np.cumsum([0] + [len(t) for t in tables[:-1]]).tolist()
    table = b.upload(key, np.concatenate(tables).astype(np.int32), "i32")
    ostrides = strides_of(dims) if ostrides is None else list(ostrides)
    total = int(np.prod(dims))
    if total == 0:
        return
    out = b.plan.infos[dst]
    ctype = "i32" if out.dtype == "int32" else "f32"
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
        pad=str(int(pad)) if ctype == "i32" else wgsl_float(pad),
        ctype=ctype,
        in_t=b.plan.infos[src].stype,
        out_t=out.stype,
        wg=WG,
        gx=g[0],
    )


register(kernel, constant_inputs, emit_gather)
