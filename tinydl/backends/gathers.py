"""Data movement as table-driven gathers, for every GPU backend: Transpose, Slice, Pad, Concat,
DepthToSpace, Split, Expand, Tile, Trilu, and Gather, GatherElements and GatherND with constant
indices.

Each of these maps an output coordinate to an input offset that is a sum of one term per output
axis, so the host computes a small table per axis (with NumPy, using the op's own index rules)
and one kernel per backend serves them all. A negative entry marks padding. A builder here
gets a backend's Build (`b.info`, `b.out`, `b.const`, `b.attrs`) and returns the gathers to
emit; Concat is one gather per input, into its slice of the output, Split one per output. Where
the offset is no per-axis sum (Trilu's triangle, GatherElements, GatherND) axes are merged
into one whose table lists every offset.

Gather and GatherElements with indices computed at run time are one kernel per backend that
reads them (`indexed` gives its geometry). Indices are wrapped once if negative and clamped to
the axis, here and in those kernels: a GPU kernel cannot raise, and must not read out of bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.indexing import broadcast_strides, strides_of
from tinydl.ops.base import normalize_axis
from tinydl.ops.resize import _pad_widths
from tinydl.ops.shape import _perm, _repeats, _slice_params, _slice_range, _split_sizes


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
    out: int = 0  # which output of the node it writes

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


def split(b) -> list[Gather]:
    shape = b.info(0).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    sizes = _split_sizes(shape[axis], b.const(1), b.attrs["num_outputs"], len(b.outputs))
    st = strides_of(shape)
    start, parts = 0, []
    for k, size in enumerate(sizes):
        dims = [*shape[:axis], size, *shape[axis + 1 :]]
        tables = [np.arange(d) * s for d, s in zip(dims, st, strict=True)]
        tables[axis] = tables[axis] + start * st[axis]
        parts.append(Gather(b.inputs[0], tuple(dims), tables, key=("tables", k), out=k))
        start += size
    return [g for g in parts if b.outputs[g.out]]


def expand(b) -> list[Gather]:
    out = b.out().shape
    st = broadcast_strides(b.info(0).shape, out)
    return [Gather(b.inputs[0], out, [np.arange(d) * s for d, s in zip(out, st, strict=True)])]


def tile(b) -> list[Gather]:
    shape = b.info(0).shape
    out = [d * r for d, r in zip(shape, _repeats(b.const(1), len(shape)), strict=True)]
    st = strides_of(shape)
    tables = [(np.arange(o) % max(d, 1)) * s for o, d, s in zip(out, shape, st, strict=True)]
    return [Gather(b.inputs[0], tuple(out), tables)]


def trilu(b) -> list[Gather]:
    shape = b.info(0).shape
    k = 0 if b.const(1) is None else int(np.ravel(b.const(1))[0])
    rows, cols = shape[-2:]
    r, c = np.arange(rows)[:, None], np.arange(cols)
    keep = c - r >= k if b.attrs["upper"] else c - r <= k
    matrix = np.where(keep, r * cols + c, -1).ravel()
    st = strides_of(shape)
    tables = [np.arange(d) * s for d, s in zip(shape[:-2], st[:-2], strict=True)] + [matrix]
    return [Gather(b.inputs[0], (*shape[:-2], rows * cols), tables)]


def clamp_index(indices: np.ndarray, dim: int) -> np.ndarray:
    """Indices into an axis of size `dim` as the GPU kernels read them: a negative one counts
    from the end, then any still outside [0, dim) is clamped to it."""
    idx = np.asarray(indices).astype(np.int64)
    return np.clip(np.where(idx < 0, idx + dim, idx), 0, max(dim - 1, 0))


def gather(b) -> list[Gather]:
    shape = b.info(0).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    st = strides_of(shape)
    picked = clamp_index(b.const(1), shape[axis]).ravel()
    dims = (*shape[:axis], picked.size, *shape[axis + 1 :])
    tables = [np.arange(d) * s for d, s in zip(dims, st, strict=True)]
    tables[axis] = picked * st[axis]
    return [Gather(b.inputs[0], dims, tables)]


def gather_elements(b) -> list[Gather]:
    shape, indices = b.info(0).shape, b.const(1)
    axis = normalize_axis(b.attrs["axis"], len(shape))
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = clamp_index(indices, shape[axis])
    offsets = sum(g * s for g, s in zip(grid, strides_of(shape), strict=True))
    return [Gather(b.inputs[0], (indices.size,), [np.ravel(offsets)])]


def gather_nd(b) -> list[Gather]:
    shape, indices = b.info(0).shape, b.const(1)
    nb, k = b.attrs["batch_dims"], indices.shape[-1]
    st = strides_of(shape)
    idx = indices.reshape(math.prod(shape[:nb]), -1, k)
    at = np.arange(idx.shape[0])[:, None] * math.prod(shape[nb:])
    for j in range(k):
        at = at + clamp_index(idx[..., j], shape[nb + j]) * st[nb + j]
    inner = math.prod(shape[nb + k :])
    return [Gather(b.inputs[0], (at.size, inner), [at.ravel(), np.arange(inner)])]


BUILDERS = {
    "Transpose": transpose,
    "Slice": slice_,
    "Pad": pad,
    "Concat": concat,
    "DepthToSpace": depth_to_space,
    "Split": split,
    "Expand": expand,
    "Tile": tile,
    "Trilu": trilu,
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
}
# Ops whose inputs after the first must be constants (baked into the tables).
CONSTANT_INPUTS = ("Slice", "Pad", "Split", "Expand", "Tile", "Trilu")
# Ops whose indices (input 1) may also be computed at run time: a backend's `indexed` kernel
# (GatherND: its `gather_nd` kernel).
RUN_TIME_INDICES = ("Gather", "GatherElements", "GatherND")
# Ops the GPU backends leave to the cpu backend, and why.
CPU_ONLY = {
    "NonZero": "NonZero's output shape depends on the data; it runs on the cpu backend",
}


@dataclass
class Indexed:
    """dst[c] = src[c . sstrides + clamp_index(idx[c . istrides], axis_dim) * axis_stride] over
    the output coordinates c of region `dims`: Gather and GatherElements reading their indices
    at run time."""

    dims: tuple[int, ...]
    sstrides: list[int]
    istrides: list[int]
    axis_dim: int
    axis_stride: int


def indexed(b) -> Indexed:
    shape, ishape = b.info(0).shape, b.info(1).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    st = strides_of(shape)
    if b.node.op == "Gather":
        outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
        m = math.prod(ishape)
        return Indexed(
            (outer, m, inner), [shape[axis] * inner, 0, 1], [0, 1, 0], shape[axis], inner
        )
    sstrides = [0 if k == axis else s for k, s in enumerate(st)]
    return Indexed(tuple(ishape), sstrides, strides_of(ishape), shape[axis], st[axis])


def _refuse(node, graph) -> Support:
    return Support(False, CPU_ONLY[node.op])


def register(
    kernel, constant_inputs, emit_gather, emit_indexed, emit_gather_nd, emit_concat=None
) -> None:
    """Register the gather ops with a backend: its `kernel` decorator, its constant-inputs
    support check, its `emit_gather(b, gather, dst)`, its `emit_indexed(b, indexed)` and
    `emit_gather_nd(b)` (the kernels for indices read at run time), optionally its
    `emit_concat(b)` (a Concat in one launch; False when it does not take this one); and the
    ops it leaves to the cpu backend."""

    def build(b) -> None:
        if b.node.op == "Concat" and emit_concat is not None and emit_concat(b):
            return
        if b.node.op in RUN_TIME_INDICES and b.const(1) is None:
            if b.node.op == "GatherND":
                emit_gather_nd(b)
            else:
                emit_indexed(b, indexed(b))
            return
        for g in BUILDERS[b.node.op](b):
            emit_gather(b, g, b.outputs[g.out])

    def refused(b) -> None:
        raise RuntimeError(f"{b.label}: {CPU_ONLY[b.node.op]}")

    for op in BUILDERS:
        kernel(op, supports=constant_inputs if op in CONSTANT_INPUTS else None)(build)
    for op in CPU_ONLY:
        kernel(op, supports=_refuse)(refused)
