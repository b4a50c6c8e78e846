"""GPU tensors: a buffer, a shape, a dtype and a layout.

Layouts: "nchw" is plain row-major in the logical axis order (any rank); "nc4hw4" (packed-4)
stores a 4-D N,C,H,W tensor as N,ceil(C/4),H,W,4: planes of four channels, padded, so that a
kernel reads four channels as one vec4 and neighbouring pixels are neighbouring vec4 (the
thesis's RGBA texture planes, in a buffer; ncnn's pack4).

`reshape` is a zero-copy view. Views share one Storage; the buffer goes back to the context's
pool only when the last tensor on it is dropped, and queue order makes that safe while GPU work
that uses it is still in flight.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends.base import to_half

# Storage element types: WGSL scalar name -> NumPy dtype. "u8" is bytes packed four to a u32
# word (WGSL has no 8-bit type); only Cast and views handle it.
STORAGE_TYPES = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "i32": np.dtype(np.int32),
    "u8": np.dtype(np.uint8),
}
# Logical dtypes the backend can hold, and the storage type of each at full precision. WGSL has
# no 64-bit integers and no bool in storage: int64 values (indices, shapes) are held as i32 and
# must fit it (checked when they go up), bool as i32 0/1.
LOGICAL = {
    "float32": "f32",
    "float16": "f16",
    "int32": "i32",
    "int64": "i32",
    "bool": "i32",
    "uint8": "u8",
}
_I32 = np.iinfo(np.int32)


class Storage:
    """A GPU buffer owned by tensors; given back to the pool when the last one is dropped.

    `serial` names the buffer (not this object), so bind groups made for a pooled buffer are
    found again when the buffer comes back for another tensor. A constant of a session read
    back lies at `offset` (`size` bytes) of a buffer it shares with the session's other
    constants (`Context.place_constants`), placed when first asked for.
    """

    def __init__(self, ctx, buffer, pooled: bool = True, usage: int | None = None):
        self.ctx, self._buffer, self.pooled = ctx, buffer, pooled
        self.serial = ctx.serial_of(buffer) if buffer is not None else 0
        self.offset, self.size = 0, None  # (the whole buffer)
        self.usage = int(buffer.usage) if buffer is not None else int(usage)
        # A constant's contents while its session may still be pickled (tinydl/snapshot.py).
        self.host: np.ndarray | None = None

    @property
    def buffer(self):
        if self._buffer is None:  # a constant not placed yet
            self.ctx.place_constants()
        return self._buffer

    def place(self, buffer, offset: int, size: int) -> None:
        self._buffer, self.offset, self.size = buffer, offset, size

    def _snapshot_id(self) -> tuple:
        if self.host is None:
            raise TypeError("a webgpu buffer without its host contents cannot be kept")
        where = "tinydl.backends.webgpu.tensor:storage_from_host"
        return (where, self.ctx.index, self.host, self.usage)

    def __del__(self):
        if self._buffer is None or self.size is not None:  # (a shared buffer: its own refs)
            return
        try:
            if self.pooled:
                self.ctx.release(self._buffer)
            else:
                self.ctx.forget(self._buffer)
        except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter exit)
            pass
        self._buffer = None


def storage_from_host(index, host: np.ndarray, usage: int) -> Storage:
    """A constant of a pickled session uploaded again (tinydl/snapshot.py): placed with the
    session's other constants in one buffer, when the session is read (or first used)."""
    from tinydl.backends.webgpu.context import get_context

    return get_context(index).constant_later(host, usage)


def padded_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The stored shape: N,ceil(C/4),H,W,4 for nc4hw4, the shape itself for nchw."""
    if layout == "nc4hw4":
        n, c, h, w = shape
        return (n, (c + 3) // 4, h, w, 4)
    return tuple(shape)


class GPUTensor:
    """A tensor on the GPU. `numpy()` reads it back; `reshape` makes a view."""

    __slots__ = ("storage", "shape", "dtype", "stype", "layout", "__weakref__")

    def __init__(self, storage: Storage, shape, dtype: str, stype: str, layout: str = "nchw"):
        self.storage = storage
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.stype = stype
        self.layout = layout

    @property
    def buffer(self):
        return self.storage.buffer

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes this tensor occupies in its buffer (padding included)."""
        return math.prod(padded_shape(self.shape, self.layout)) * STORAGE_TYPES[self.stype].itemsize

    def reshape(self, *shape) -> GPUTensor:
        """A view with another shape (plain layout only); -1 is inferred."""
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        if self.layout != "nchw":
            raise ValueError(f"reshape needs the plain nchw layout, this tensor is {self.layout}")
        shape = np.empty(self.shape, dtype=[]).reshape(shape).shape  # NumPy's own rules, no data
        return GPUTensor(self.storage, shape, self.dtype.name, self.stype, self.layout)

    def numpy(self) -> np.ndarray:
        raw = self.storage.ctx.read(self.buffer, self.nbytes, self.storage.offset)
        return from_storage(raw, self)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return (
            f"GPUTensor(shape={self.shape}, dtype={self.dtype.name}, storage={self.stype}, "
            f"layout={self.layout})"
        )


def from_storage(raw: np.ndarray, t: GPUTensor) -> np.ndarray:
    """Host array of logical shape and dtype from the raw bytes of a tensor's storage."""
    data = raw.view(STORAGE_TYPES[t.stype]).reshape(padded_shape(t.shape, t.layout))
    if t.layout == "nc4hw4":
        n, c4, h, w, _ = data.shape
        data = data.transpose(0, 1, 4, 2, 3).reshape(n, c4 * 4, h, w)[:, : t.shape[1]]
        data = np.ascontiguousarray(data)
    return data.astype(t.dtype, copy=False)


def to_storage(array: np.ndarray, stype: str) -> np.ndarray:
    """The bytes of `array` as storage type `stype`; int64 must fit the i32 it is held in."""
    if stype == "i32" and array.dtype.kind in "iu" and array.dtype.itemsize > 4 and array.size:
        lo, hi = int(array.min()), int(array.max())
        if lo < _I32.min or hi > _I32.max:
            from tinydl.errors import InvalidInputError

            raise InvalidInputError(
                f"WebGPU holds {array.dtype} as int32: values {lo}..{hi} do not fit "
                f"({_I32.min}..{_I32.max})"
            )
    if stype == "f16" and np.asarray(array).dtype.kind == "f":
        return to_half(array)
    return np.ascontiguousarray(array, dtype=STORAGE_TYPES[stype])
