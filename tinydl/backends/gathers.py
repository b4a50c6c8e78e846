"""Data movement as table-driven gathers, for every GPU backend: Transpose, Slice, Pad, Concat,
DepthToSpace.

Each of these maps an output coordinate to an input offset that is a sum of one term per output
axis, so the host computes a small table per axis (with NumPy, using the op's own index rules)
and one kernel per backend serves them all. A negative entry marks padding. A builder here
gets a backend's Build (`b.info`, `b.out`, `b.const`, `b.attrs`) and returns the gathers to
emit; Concat is one gather per input, into its slice of the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.backends.indexing import strides_of
from tinydl.ops.base import normalize_axis
from tinydl.ops.resize import _pad_widths
from tinydl.ops.shape import _perm, _slice_params, _slice_range


@dataclass
class Gather:
    """dst[base + coords . ostrides] = src[sum_k tables[k][coords[k]]] over region `dims`."""

    src: str
    dims: tuple[int, ...]
    tables: list[np.ndarray]
    base: int = 0
    ostrides: list[int] | None = None
    pad: float = 0.0
    key: Any = field(default="tables")

    def layout(self) -> tuple[list[int], list[np.ndarray], list[int], list[int]]:
        """The region's dims, the per-axis tables as int64, each table's first row in their
        concatenation, and the output strides: what a backend's gather kernel takes."""
        dims = [int(d) for d in self.dims] or [1]
        tables = [np.asarray(t, np.int64) for t in self.tables] or [np.zeros(1, np.int64)]
        tbase = np.cumsum([0] + [len(t) for t in tables[:-1]]).tolist()
        ostrides = strides_of(dims) if self.ostrides is None else list(self.ostrides)
        return dims, tables, tbase, ostrides


def transpose(b) -> list[Gather]:
    shape = b.info(0).shape
    perm = _perm(b.attrs["perm"], len(shape))
    st = strides_of(shape)
    out = b.out().shape
    return [Gather(b.inputs[0], out, [np.arange(out[d]) * st[perm[d]] for d in range(len(out))])]


def slice_(b) -> list[Gather]:
    shape = b.info(0).shape
    consts = [b.const(i) for i in range(1, 5)]
    index = [np.arange(d) for d in shape]
    for axis, start, end, step in _slice_params(len(shape), *consts):
        index[axis] = index[axis][slice(*_slice_range(start, end, step, shape[axis]))]
    st = strides_of(shape)
    tables = [idx * s for idx, s in zip(index, st, strict=True)]
    return [Gather(b.inputs[0], b.out().shape, tables)]


def pad(b) -> list[Gather]:
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
    return [Gather(b.inputs[0], b.out().shape, tables, pad=fill)]


def concat(b) -> list[Gather]:
    out = b.out().shape
    axis = normalize_axis(b.attrs["axis"], len(out))
    ost = strides_of(out)
    offset, parts = 0, []
    for k, name in enumerate(b.inputs):
        shape = b.info(name).shape
        st = strides_of(shape)
        tables = [np.arange(d) * s for d, s in zip(shape, st, strict=True)]
        parts.append(Gather(name, shape, tables, offset * ost[axis], ost, key=("tables", k)))
        offset += shape[axis]
    return parts


def depth_to_space(b) -> list[Gather]:
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
    return [Gather(b.inputs[0], b.out().shape, tables)]


BUILDERS = {
    "Transpose": transpose,
    "Slice": slice_,
    "Pad": pad,
    "Concat": concat,
    "DepthToSpace": depth_to_space,
}
# Ops whose inputs after the first must be constants (baked into the tables).
CONSTANT_INPUTS = ("Slice", "Pad")


def register(kernel, constant_inputs, emit_gather) -> None:
    """Register the gather ops with a backend: its `kernel` decorator, its constant-inputs
    support check, and its `emit_gather(b, gather, dst)`."""

    def build(b) -> None:
        for g in BUILDERS[b.node.op](b):
            emit_gather(b, g, b.outputs[0])

    for op in BUILDERS:
        kernel(op, supports=constant_inputs if op in CONSTANT_INPUTS else None)(build)
