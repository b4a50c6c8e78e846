"""Data movement as table-driven gathers (Transpose, Slice, Pad, Concat, DepthToSpace, Split,
Expand, Tile, Trilu, and Gather, GatherElements, GatherND with constant indices): the tables come
from tinydl/backends/gathers.py (shared with the other GPU backend); this module emits them with
one kernel, and Gather and GatherElements whose indices are computed at run time with another. A
copy between two storage types (an fp16 intermediate to a float32 output) converts on the way.
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
from tinydl.backends.cuda.kernels.scatter import emit_gather_nd
from tinydl.backends.gathers import Gather, Indexed, register
from tinydl.ops.base import normalize_axis

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


def emit_indexed(b, g: Indexed) -> None:
    """Launch Gather or GatherElements reading its indices (input 1) at run time."""
    total = int(np.prod(g.dims))
    if total == 0:
        return
    if g.axis_dim == 0:
        raise ValueError(f"{b.label}: cannot index an empty axis")
    sin, sout = b.info(0), b.out()
    b.launch(
        "gather_index.cu",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        blocks(total, BLOCK),
        BLOCK,
        dims=list(g.dims),
        sstrides=g.sstrides,
        istrides=g.istrides,
        axis_dim=g.axis_dim,
        axis_stride=g.axis_stride,
        total=total,
        same=sin.stype == sout.stype,
        store=store(sout.ctype, load(sin.ctype, "src[at]")),
        in_ctype=sin.ctype,
        idx_ctype=b.info(1).ctype,
        out_ctype=sout.ctype,
        block=BLOCK,
    )


MAX_CONCAT = 64  # inputs of a one-launch Concat (each is a kernel parameter)


def emit_concat(b) -> bool:
    """Concat as one launch when its inputs (2 to 64) are stored as its output is: an element
    finds its input in a per-position table of the axis. The gathers would launch once per
    input (DenseNet-121's 58 concatenations have 597 inputs). False: not taken."""
    names, dst = list(b.inputs), b.outputs[0]
    sout = b.plan.infos[dst]
    shape = [int(d) for d in sout.shape]
    total = int(np.prod(shape))
    if not 2 <= len(names) <= MAX_CONCAT or total == 0 or total >= 2**31:
        return False
    infos = [b.info(n) for n in names]
    if any(i.stype != sout.stype or i.ctype != sout.ctype for i in infos):
        return False
    axis = normalize_axis(b.attrs["axis"], len(shape))
    sizes = [int(i.shape[axis]) for i in infos]
    if max(sizes) >= 1 << 20:
        return False
    which = np.repeat(np.arange(len(names)), sizes)
    within = np.concatenate([np.arange(s) for s in sizes])
    table = b.upload("concat", ((which << 20) | within).astype(np.int32))
    b.launch(
        "concat.cu",
        [*names, table, dst],
        blocks(total, BLOCK),
        BLOCK,
        n=len(names),
        sizes=sizes,
        channels=shape[axis],
        inner=int(np.prod(shape[axis + 1 :])),
        total=total,
        ctype=sout.ctype,
        block=BLOCK,
    )
    return True


register(kernel, constant_inputs, emit_gather, emit_indexed, emit_gather_nd, emit_concat)
