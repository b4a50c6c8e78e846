"""Data movement as table-driven gathers: Transpose, Slice, Pad, Concat, DepthToSpace.

Every one of these maps an output coordinate to an input offset that is a sum of one term per
output axis, so the host computes a small table per axis (with NumPy, using the op's own
index rules) and one kernel serves them all. A negative entry marks padding. A copy between
two storage types (fp16 intermediate to float32 output) converts on the way.
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
from tinydl.backends.indexing import strides_of
from tinydl.ops.base import normalize_axis
from tinydl.ops.resize import _pad_widths
from tinydl.ops.shape import _perm, _slice_params, _slice_range

BLOCK = 256


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
    """Launch a gather over region `dims`; tables[k][c] is axis k's input offset term."""
    dims = [int(d) for d in dims] or [1]
    tables = [np.asarray(t, np.int64) for t in tables] or [np.zeros(1, np.int64)]
    tbase = np.cumsum([0] + [len(t) for t in tables[:-1]]).tolist()
    table = b.upload(key, np.concatenate(tables).astype(np.int64))
    ostrides = strides_of(dims) if ostrides is None else list(ostrides)
    total = int(np.prod(dims))
    if total == 0:
        return
    sin, sout = b.info(src), b.plan.infos[dst]
    same = sin.sdtype == sout.sdtype
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


@kernel("Transpose")
def transpose(b):
    shape = b.info(0).shape
    perm = _perm(b.attrs["perm"], len(shape))
    st = strides_of(shape)
    out = b.out().shape
    emit_gather(
        b,
        b.inputs[0],
        b.outputs[0],
        out,
        [np.arange(out[d]) * st[perm[d]] for d in range(len(out))],
    )


@kernel("Slice", supports=constant_inputs)
def slice_(b):
    shape = b.info(0).shape
    consts = [b.const(i) for i in range(1, 5)]
    index = [np.arange(d) for d in shape]
    for axis, start, end, step in _slice_params(len(shape), *consts):
        index[axis] = index[axis][slice(*_slice_range(start, end, step, shape[axis]))]
    st = strides_of(shape)
    emit_gather(
        b,
        b.inputs[0],
        b.outputs[0],
        b.out().shape,
        [idx * s for idx, s in zip(index, st, strict=True)],
    )


@kernel("Pad", supports=constant_inputs)
def pad(b):
    shape = b.info(0).shape
    widths = _pad_widths(len(shape), b.const(1), b.const(3))
    mode = b.attrs["mode"]
    value = b.const(2)
    fill = 0.0 if value is None or value.size == 0 else float(value.reshape(()))
    st = strides_of(shape)
    tables = []
    for n, (lo, hi), s in zip(shape, widths, st, strict=True):
        idx = np.arange(n)[max(-lo, 0) : n - max(-hi, 0)]
        w = (max(lo, 0), max(hi, 0))
        if mode == "constant":
            src = np.pad(idx, w, constant_values=-1)
        else:
            src = np.pad(idx, w, mode=mode)
        tables.append(np.where(src >= 0, src * s, -1))
    emit_gather(b, b.inputs[0], b.outputs[0], b.out().shape, tables, pad=fill)


@kernel("Concat")
def concat(b):
    out = b.out().shape
    axis = normalize_axis(b.attrs["axis"], len(out))
    ost = strides_of(out)
    offset = 0
    for k, name in enumerate(b.inputs):
        shape = b.info(name).shape
        st = strides_of(shape)
        emit_gather(
            b,
            name,
            b.outputs[0],
            shape,
            [np.arange(d) * s for d, s in zip(shape, st, strict=True)],
            base=offset * ost[axis],
            ostrides=ost,
            key=("tables", k),
        )
        offset += shape[axis]


@kernel("DepthToSpace")
def depth_to_space(b):
    n, c, h, w = b.info(0).shape
    bs = b.attrs["blocksize"]
    cc = c // (bs * bs)
    sn, sc, sh, sw = strides_of((n, c, h, w))
    dcr = b.attrs["mode"] == "DCR"
    oy, ox = np.arange(h * bs), np.arange(w * bs)
    tables = [
        np.arange(n) * sn,
        np.arange(cc) * (sc if dcr else bs * bs * sc),
        (oy // bs) * sh + (oy % bs) * (bs * cc * sc if dcr else bs * sc),
        (ox // bs) * sw + (ox % bs) * (cc * sc if dcr else sc),
    ]
    emit_gather(b, b.inputs[0], b.outputs[0], b.out().shape, tables)
