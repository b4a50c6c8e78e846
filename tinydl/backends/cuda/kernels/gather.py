"""Transpose, Slice, Pad, Concat and DepthToSpace as table-driven gathers: the tables come from
tinydl/backends/gathers.py (shared with the other GPU backend); this module emits them with one
kernel. A copy between two storage types (an fp16 intermediate to a float32 output) converts
on the way.
"""

from __future__ import annotations

import numpy as np

from tinydl.backends.cuda.kernels import (
    CTYPES,
    FLOATS,
    blocks,
    cfloat,
    constant_inputs,
    kernel,
    load,
    store,
)
from tinydl.backends.gathers import Gather, register

BLOCK = 256


def emit_gather(b, g: Gather, dst: str, label: str = "") -> None:
    """Launch a gather `g` (gathers.Gather) into value `dst`."""
    dims, tables, tbase, ostrides = g.layout()
    src, base, pad = g.src, g.base, g.pad
    table = b.upload(g.key, np.concatenate(tables).astype(np.int64))
    total = int(np.prod(dims))
    if total == 0:
        return
    sin, sout = b.info(src), b.plan.infos[dst]
    same = sin.stype == sout.stype
    ct = "float" if sout.dtype in FLOATS else CTYPES[sout.dtype]
    if ct == "float":
        pad_text = cfloat(float(pad))
        if same and sout.ctype == "half_t":
            pad_text = f"f2h({pad_text})"
    else:
        pad_text = str(int(pad))
    b.launch(
        "gather.cu",
        [src, table, dst],
        blocks(total, BLOCK),
        BLOCK,
        label=label,
        dims=dims,
        tbase=tbase,
        ostrides=ostrides,
        base=base,
        total=total,
        pad=pad_text,
        same=same,
        ct=ct,
        load=load(sin.ctype, "src[at]") if ct == "float" else f"({ct})src[at]",
        store=store(sout.ctype, "v") if ct == "float" else "v",
        in_ctype=sin.ctype,
        out_ctype=sout.ctype,
        block=BLOCK,
    )


register(kernel, constant_inputs, emit_gather)
