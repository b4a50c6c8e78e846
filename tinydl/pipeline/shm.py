"""Frame pools: NumPy arrays in shared-memory blocks, passed between processes by reference.

An array allocated from a pool (`ctx.empty(shape, dtype)` in a component) lives in a block of
its process's `Pool`. When such an array — or any view of it — is pickled for another process,
only a reference goes (block name, offset, shape, dtype, strides); the receiver maps the block
(once per block, cached) and gets a view: no pixel is copied, however many processes it crosses.
A worker's outputs that are not in its pool yet are copied into a block once, as they leave.

Lifetime (a block is reused only when no process may still read it):
- the app keeps the inputs of a worker's call alive until the call returns, and a worker reads
  its inputs only during the call (components that hold inputs copy them), so a block the app
  sends needs no bookkeeping;
- a worker counts each reference it sends to one of its own blocks (`Pool.lend`) and keeps the
  block until the app has returned as many; the app maps each block of a worker once, counts
  the references that worker sent to it, and queues the count for return (`Receiver.returns`)
  when its mapping is no longer used; the count goes back with the next request.

Blocks are named `tinydl_<app pid>_<owner pid>_b<n>`; each pool unlinks its own when it closes,
but for those still lent, which the app unlinks when it ends (`sweep`), as those of a worker
that died.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import threading
import weakref
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

MIN_BLOCK = 1 << 16  # smaller arrays are cheaper to pickle than to map
# Re-entrant: dropping the last view of a block inside a locked section runs its finalizer there.
_lock = threading.RLock()
_owners: dict[int, tuple[str, int]] = {}  # id(owner array) -> (block name, its data address)
_live: dict[str, tuple[weakref.ref, _Count | None]] = {}  # block name -> its owner array here
_receiving = threading.local()
# Arrays that begin where their block does (as `Pool.empty` makes them), by id: their offset
# needs no `__array_interface__` (1.6 µs, a third of a frame's message work).
_at_start: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


class _Segment(SharedMemory):
    """A SharedMemory whose collection while views live is quiet: the mapping then goes with
    the last view (its buffer export), not with this object."""

    def __del__(self):
        with contextlib.suppress(BufferError, OSError):
            self.close()


class _Count:
    """References to one mapped block received from its owner, to return when unmapped."""

    __slots__ = ("n",)

    def __init__(self):
        self.n = 0


def _register(owner: np.ndarray, name: str, count: _Count | None) -> None:
    _owners[id(owner)] = (name, owner.__array_interface__["data"][0])
    _live[name] = (weakref.ref(owner), count)


def _unregister(key: int, name: str) -> None:
    with _lock:
        _owners.pop(key, None)
        entry = _live.get(name)
        if entry is not None and entry[0]() is None:
            del _live[name]


def _live_owner(name: str) -> tuple[np.ndarray | None, _Count | None]:
    entry = _live.get(name)
    if entry is None:
        return None, None
    return entry[0](), entry[1]


class Pool:
    """The blocks of this process. `lends`: count references sent (a worker's pool)."""

    _serial = itertools.count()

    def __init__(self, prefix: str, lends: bool):
        self.prefix = f"{prefix}{os.getpid()}_b"
        self.lends = lends
        self.free: dict[int, list[SharedMemory]] = {}
        self.blocks: dict[str, SharedMemory] = {}
        self.lent: dict[str, list] = {}  # name -> [owner array, references out]
        self.lock = threading.RLock()  # as _lock
        self.closed = False

    def empty(self, shape: Any, dtype: Any = np.uint8) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(MIN_BLOCK, 1 << max(0, nbytes - 1).bit_length())
        with self.lock:
            spare = self.free.get(size)
            shm = spare.pop() if spare else None
        if shm is None:
            shm = _Segment(f"{self.prefix}{next(self._serial)}", create=True, size=size)
            with self.lock:
                self.blocks[shm.name] = shm
        owner = _map(shm)
        with _lock:
            _register(owner, shm.name, None)
        weakref.finalize(owner, self._release, id(owner), shm)
        arr = owner[:nbytes].view(dtype).reshape(shape)
        _at_start[id(arr)] = arr
        return arr

    def _release(self, key: int, shm: SharedMemory) -> None:
        _unregister(key, shm.name)
        with self.lock:
            if not self.closed:
                self.free.setdefault(shm.size, []).append(shm)

    def lend(self, name: str, owner: np.ndarray) -> None:
        with self.lock:
            entry = self.lent.get(name)
            if entry is None:
                self.lent[name] = [owner, 1]
            else:
                entry[1] += 1

    def returned(self, counts: list[tuple[str, int]]) -> None:
        with self.lock:
            for name, n in counts:
                entry = self.lent.get(name)
                if entry is not None:
                    entry[1] -= n
                    if entry[1] <= 0:
                        del self.lent[name]

    def close(self) -> None:
        """Unlink the blocks, except those lent out: another process may still have to map
        them (a frame queued for a worker); the app sweeps those at its end."""
        with self.lock:
            self.closed = True
            blocks = [b for name, b in self.blocks.items() if name not in self.lent]
            self.blocks.clear()
            self.free.clear()
            self.lent.clear()
        for shm in blocks:
            _unlink(shm)


def _map(shm: SharedMemory) -> np.ndarray:
    """The whole block as bytes. frombuffer holds an export of the mapping (ndarray(buffer=)
    would not), so closing the SharedMemory cannot unmap it under a live view."""
    return np.frombuffer(shm.buf, np.uint8)


def _unlink(shm: SharedMemory) -> None:
    try:
        shm.close()
    except BufferError:  # arrays still view it; the mapping goes when they do
        pass
    with contextlib.suppress(FileNotFoundError):
        shm.unlink()


def sweep(prefix: str) -> None:
    """Unlink the blocks a process left behind (lent at its close, or it died)."""
    for path in glob.glob(f"/dev/shm/{prefix}*"):
        with contextlib.suppress(FileNotFoundError):
            _unlink(_Segment(os.path.basename(path)))


class Receiver:
    """One side of one channel: the blocks it has mapped, and (in the app) the counts of
    references received from the process at the other end, queued for return when unmapped."""

    def __init__(self, counts: bool, keep: bool = False):
        self.counts = counts
        # Keep each block's owner array once mapped (a worker, which returns no counts): the
        # next frame in that block is a view of it, with no mapping, registering or finalizer.
        self.keep = keep
        self.kept: dict[str, np.ndarray] = {}  # block name -> its owner array
        self.sender = ""  # the block prefix of the process at the other end
        self.attached: dict[str, SharedMemory] = {}
        self.returns: list[tuple[str, int]] = []  # list.append is atomic: finalizers add here
        self.copy = False  # give copies, not views (for a component that holds its inputs)
        # Called with each block as it is first mapped (a worker that drives a GPU page-locks
        # it: Backend.lock_host); returns the call that undoes it before the block is closed.
        self.on_map = None
        self.undo: list = []

    def take_returns(self) -> list[tuple[str, int]]:
        out, self.returns = self.returns, []
        return out

    def view(self, name: str, offset: int, shape, dtype: str, strides) -> np.ndarray:
        owner = self.kept.get(name)  # kept for good: no lock, no look-up of the live owner
        if owner is not None:
            view = np.ndarray(shape, dtype, buffer=owner, offset=offset, strides=strides)
            return view.copy() if self.copy else view
        counted = self.counts and name.startswith(self.sender)
        with _lock:
            owner, count = _live_owner(name)
            if owner is None:
                shm = self.attached.get(name)
                if shm is None:
                    shm = self.attached[name] = _Segment(name)
                    if self.on_map is not None:
                        self._lock_block(shm)
                owner = _map(shm)
                count = _Count() if counted else None
                _register(owner, name, count)
                weakref.finalize(owner, self._unmapped, id(owner), name, count)
                if self.keep:
                    self.kept[name] = owner
            if counted and count is not None:
                count.n += 1
        view = np.ndarray(shape, np.dtype(dtype), buffer=owner, offset=offset, strides=strides)
        return view.copy() if self.copy else view

    def _unmapped(self, key: int, name: str, count: _Count | None) -> None:
        _unregister(key, name)
        if count is not None and count.n:
            self.returns.append((name, count.n))

    def _lock_block(self, shm: SharedMemory) -> None:
        try:
            undo = self.on_map(np.frombuffer(shm.buf, np.uint8))
        except Exception:  # noqa: BLE001 - the block is read as pageable memory then
            return
        if undo is not None:
            self.undo.append(undo)

    def close(self) -> None:
        self.kept.clear()
        for undo in self.undo:
            with contextlib.suppress(Exception):
                undo()
        self.undo.clear()
        for shm in self.attached.values():
            try:
                shm.close()
            except BufferError:
                pass
        self.attached.clear()


class receiving:  # noqa: N801 - used as a context manager, as contextlib's are
    """References unpickled meanwhile (on this thread) are mapped by `rx`."""

    __slots__ = ("rx",)

    def __init__(self, rx: Receiver):
        self.rx = rx

    def __enter__(self) -> None:
        _receiving.rx = self.rx

    def __exit__(self, *exc) -> None:
        _receiving.rx = None


def block_view(name: str, offset: int, shape, dtype: str, strides) -> np.ndarray:
    """The array a `reference` names, in the block as this (receiving) process maps it."""
    return _receiving.rx.view(name, offset, shape, dtype, strides)


def reference(
    arr: np.ndarray, pool: Pool | None, lend: bool = True, copies: dict | None = None
) -> tuple | None:
    """How to pickle `arr` by reference: it lies in a block (of any process), or it is large
    and `pool` copies it into one of its blocks; None to pickle it as usual. `copies` keeps
    those copies, so an array sent twice is copied once; `lend=False`: not counted as lent
    (the caller knows the block outlives the reader)."""
    if arr.dtype.hasobject or arr.dtype.fields is not None:
        return None
    base = arr
    with _lock:
        while isinstance(base, np.ndarray) and id(base) not in _owners:
            base = base.base
        found = _owners.get(id(base)) if isinstance(base, np.ndarray) else None
    if found is None:
        if pool is None or arr.nbytes < MIN_BLOCK:
            return None
        copied = copies.get(id(arr)) if copies is not None else None
        if copied is None:
            copied = pool.empty(arr.shape, arr.dtype)
            copied[...] = arr
            if copies is not None:
                copies[id(arr)] = (copied, arr)  # arr kept: its id stays its own
        else:
            copied = copied[0]
        arr = base = copied
        while id(base) not in _owners:
            base = base.base
        found = _owners[id(base)]
    name, address = found
    if lend and pool is not None and pool.lends and name.startswith(pool.prefix):
        pool.lend(name, base)
    if arr is base or _at_start.get(id(arr)) is arr:
        offset = 0
    else:
        offset = arr.__array_interface__["data"][0] - address
    return (block_view, (name, offset, arr.shape, arr.dtype.str, arr.strides))
