"""Warm starts: imported models and compiled sessions kept on disk between processes.

Two caches under $TINYDL_CACHE_DIR, each on by default and bounded in size:

- models/ (TINYDL_MODEL_CACHE=off to turn it off): `tinydl.load` of an ONNX, TFLite or Keras
  file keeps the imported graph, validated and its types inferred, as a snapshot, keyed by the
  file's path, size, modification time and inode (and tinydl's code); the next load reads it
  back (weights mapped) instead of parsing, checking and inferring the original again.
- sessions/ (TINYDL_SESSION_CACHE=off): `tinydl.compile` of a model loaded from a file keeps the
  compiled session — optimized graph, partitions, each kernel's plans with their packed weights
  and the keys of their compiled GPU code — keyed by the model file, every compile argument, the
  TINYDL_* environment, the devices (name, compute capability, compiler version) and the code of
  tinydl itself. The next compile of the same file with the same arguments maps it back: no
  optimizer passes, no planning, no weight packing (GPU code comes from the kernel caches).

Reading a snapshot runs code, as reading Python's own bytecode cache does: only files this user
owns and no one else can write are read (others are compiled again and replaced); the cache
folder is trusted like ~/.cache/tinydl's compiled kernels. The files a user gives (.onnx, .tflite,
.h5, .tdl) are never read this way.

A session whose plans are made at its first run (inputs of symbolic shape) is kept again by
that run, the plan with it (once per session).

A session is kept only when every partition's backend can snapshot its kernels
(`Kernel.snapshot`); `session.profile()["init"]["cache"]` says what happened ("hit", "saved",
"off", or why not). Graphs made in memory, or changed after loading, are never cached: their
identity would cost a hash of every weight — except a graph an app makes around a loaded model
(`derive_origin`: the parent's identity, the rest by value).

The snapshot file: pickle protocol 5 for the structure, large arrays stored beside it out of
band and mapped back read-only. Device arrays go as their host copies and objects that cannot
be pickled (contexts, modules, locks) by name (`persistent_id`); after loading, every kernel's
`restored()` remakes what it dropped.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import mmap
import os
import pickle
import struct
import sys
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.cache import cache_dir

MODEL_ENV = "TINYDL_MODEL_CACHE"
SESSION_ENV = "TINYDL_SESSION_CACHE"
SIZE_ENV = "TINYDL_CACHE_MB"  # each of models/ and sessions/ at most this many MB
DEFAULT_MB = 4096
MAGIC = b"TDLSNAP1"
ALIGN = 64
_LOCKS = (type(threading.Lock()), type(threading.RLock()))


def enabled(env: str) -> bool:
    return os.environ.get(env, "on").strip().lower() not in ("0", "off", "false", "no")


@functools.cache
def code_fingerprint() -> str:
    """Every file of the tinydl package by name, size and modification time (and Python's and
    NumPy's versions): a cached entry made by other code is never used."""
    root = os.path.dirname(os.path.abspath(__file__))  # the tinydl package
    h = hashlib.sha256(f"{sys.version_info[:3]} {np.__version__}".encode())
    folders = [root]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for e in sorted(entries, key=lambda e: e.name):
                if e.is_dir():
                    if e.name != "__pycache__":
                        folders.append(e.path)
                elif not e.name.endswith((".pyc", ".tdl")):
                    st = e.stat()
                    h.update(f"{e.path} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def file_identity(path: Path) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"


def _hash_structure(h, graph, attr=repr) -> None:
    """Inputs, outputs and nodes into hash `h`, each attribute value as `attr` writes it."""
    for v in (*graph.inputs, *graph.outputs):
        h.update(f"{v.name}|{v.dtype}|{v.shape};".encode())
    for n in graph.nodes:
        attrs = sorted((k, attr(a)) for k, a in n.attrs.items())
        h.update(f"{n.op}|{n.name}|{n.inputs}|{n.outputs}|{attrs!r};".encode())


def graph_signature(graph) -> str:
    """The graph's structure and which arrays it holds (by identity): what must be unchanged
    since loading for the file to still describe the graph."""
    h = hashlib.sha256()
    _hash_structure(h, graph)
    for name, a in graph.initializers.items():
        writeable = getattr(getattr(a, "flags", None), "writeable", True)
        h.update(f"{name}|{id(a)}|{getattr(a, 'shape', None)}|{writeable};".encode())
    return h.hexdigest()


def mark_origin(graph, identity: str) -> None:
    """Record that `graph` is the content of the file `identity` names (see model_key). Its
    weights become read-only: changed in place, they would no longer be the file's."""
    for a in graph.initializers.values():
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    graph.origin = (identity, graph_signature(graph))


def derive_origin(graph, parent, identity: str | None) -> None:
    """Mark `graph`, made in memory from the loaded `parent` (an app's graph around a shipped
    model), as a file's content too, so that compiles of it are cached: its identity is the
    parent's (`identity`: `model_key(parent)` taken before `graph` was made, which may have
    changed the nodes they share) with all of `graph` by value — structure, attributes, and
    each weight by name where it is the parent's own array, else by its bytes. Nothing when
    the parent was not a file's unchanged content (`identity` None)."""
    if identity is None:
        return
    own = {id(a): name for name, a in parent.initializers.items()}
    h = hashlib.sha256(identity.encode())
    _hash_structure(h, graph, _by_value)
    for name, a in graph.initializers.items():
        h.update(f"{name}|{own.get(id(a)) or _by_value(a)};".encode())
    mark_origin(graph, f"derived\0{h.hexdigest()}")


def _by_value(a) -> str:
    if isinstance(a, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
        return f"array {a.dtype} {a.shape} {digest}"
    if isinstance(a, (list, tuple)):
        return repr([_by_value(x) for x in a])
    return repr(a)


def model_key(graph) -> str | None:
    """The loaded file's identity when `graph` is still as loaded, else None."""
    origin = getattr(graph, "origin", None)
    if origin is None or graph_signature(graph) != origin[1]:
        return None
    return origin[0]


# -- the file format -----------------------------------------------------------------------------


def _atomic_write(path: Path, chunks) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        # Private to this user (0600), whatever the umask: `load` reads no other kind.
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _Pickler(pickle.Pickler):
    """Names what cannot be pickled: objects with a `_snapshot_id()`, modules, locks and the
    device arrays of registered types (`register_device_array`)."""

    def __init__(self, file, buffers: list):
        super().__init__(file, protocol=5, buffer_callback=buffers.append)
        self._ids: dict[int, tuple] = {}
        self._keep: list = []  # the objects named, alive while pickling (their ids stay theirs)

    def persistent_id(self, obj):
        if obj is None or type(obj) in _PLAIN:
            return None
        known = self._ids.get(id(obj))
        if known is not None:
            return known
        pid = _name_of(obj)
        if pid is not None:
            pid = (len(self._ids), *pid)  # a token first: each object is made once again
            self._ids[id(obj)] = pid
            self._keep.append(obj)
        return pid


_PLAIN = {str, int, float, bool, bytes, tuple, list, dict, set, frozenset, np.ndarray}

# "module.type" -> function(array) -> ("module:function", *args) that makes it again.
DEVICE_ARRAYS: dict[str, Any] = {}


def register_device_array(type_name: str, name_of) -> None:
    """Let snapshots hold device arrays of type `type_name` ("module.qualname"): `name_of(a)`
    gives ("module:function", *args), the function that makes the array again and its
    arguments (a host copy among them)."""
    DEVICE_ARRAYS[type_name] = name_of


def _name_of(obj) -> tuple | None:
    named = getattr(type(obj), "_snapshot_id", None)
    if named is not None:
        return ("call", *named(obj))
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, _LOCKS):
        return ("lock", isinstance(obj, _LOCKS[1]))
    name_of = DEVICE_ARRAYS.get(f"{type(obj).__module__}.{type(obj).__qualname__}")
    if name_of is not None:
        return ("call", *name_of(obj))
    return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, buffers):
        super().__init__(file, buffers=buffers)
        self._made: dict[int, Any] = {}

    def persistent_load(self, pid):
        token, what, *args = pid
        if token in self._made:
            return self._made[token]
        if what == "call":
            where, *rest = args
            module, name = where.split(":")
            obj = getattr(importlib.import_module(module), name)(*rest)
        elif what == "module":
            obj = importlib.import_module(args[0])
        elif what == "lock":
            obj = threading.RLock() if args[0] else threading.Lock()
        else:
            raise pickle.UnpicklingError(f"unknown persistent object {what!r}")
        self._made[token] = obj
        return obj


_writers: list[threading.Thread] = []


def dump(obj, path: Path, background: bool = False, then=None) -> None:
    """Write `obj` to `path` (atomically: a partial file is never seen). `background`: pickle
    now, write on a thread of its own (the process waits for it before exiting), then call
    `then()`."""
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _Pickler(stream, buffers).dump(obj)
    data = stream.getvalue()
    raws = [b.raw() for b in buffers]
    head = len(MAGIC) + 16 + 16 * len(raws)
    table = []
    offset = _aligned(head + len(data))
    for raw in raws:
        table.append((offset, raw.nbytes))
        offset = _aligned(offset + raw.nbytes)
    header = MAGIC + struct.pack(f"<QQ{2 * len(table)}Q", len(data), len(raws), *sum(table, ()))

    def chunks():
        yield header
        yield data
        pos = head + len(data)
        for (o, n), raw in zip(table, raws, strict=True):
            yield b"\0" * (o - pos)
            yield raw
            pos = o + n

    def write():
        with contextlib.suppress(OSError):
            _atomic_write(path, chunks())
            if then is not None:
                then()

    if not background:
        _atomic_write(path, chunks())
        if then is not None:
            then()
        return
    in_background(write)


def in_background(write) -> None:
    """Run `write()` on a thread of its own (the process waits for it before exiting)."""
    writer = threading.Thread(target=write, name="tinydl-cache-writer")
    _writers[:] = [t for t in _writers if t.is_alive()] + [writer]
    writer.start()


def wait_for_writes() -> None:
    """Wait until the snapshots written in the background are on disk."""
    for t in list(_writers):
        t.join()


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def load(path: Path):
    """Read what `dump` wrote; the large arrays map the file (read-only, zero-copy)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            # A snapshot runs code when read (as Python's own .pyc files do): only this user's,
            # written by tinydl, never one another user could have written.
            raise PermissionError(f"{path}: not written by this user alone")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapped)
    if view[: len(MAGIC)] != MAGIC:
        raise pickle.UnpicklingError(f"{path}: not a snapshot")
    size, count = struct.unpack_from("<QQ", view, len(MAGIC))
    table = struct.unpack_from(f"<{2 * count}Q", view, len(MAGIC) + 16)
    start = len(MAGIC) + 16 + 16 * count
    buffers = [view[table[2 * i] : table[2 * i] + table[2 * i + 1]] for i in range(count)]
    return _Unpickler(io.BytesIO(view[start : start + size]), buffers).load()


def size_limit() -> int:
    """$TINYDL_CACHE_MB in bytes (a value that is not a number of megabytes: the default, with
    a warning)."""
    raw = os.environ.get(SIZE_ENV, "")
    try:
        mb = float(raw) if raw.strip() else DEFAULT_MB
        if not mb >= 0:
            raise ValueError(raw)
    except ValueError:
        import warnings

        warnings.warn(
            f"{SIZE_ENV}={raw!r} is not a number of megabytes; using {DEFAULT_MB}", stacklevel=2
        )
        mb = DEFAULT_MB
    return int(mb * (1 << 20))


def prune(folder: Path, keep: Path | None = None) -> None:
    """Delete the least recently used files of `folder` beyond $TINYDL_CACHE_MB."""
    limit = size_limit()
    entries = []
    with contextlib.suppress(OSError):
        for e in os.scandir(folder):
            with contextlib.suppress(OSError):  # (another process may delete it meanwhile)
                st = e.stat()
                entries.append((st.st_mtime_ns, st.st_size, e.path))
    kept = None if keep is None else os.path.abspath(keep)
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        if os.path.abspath(path) == kept:
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            total -= size


def touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


# -- imported models -----------------------------------------------------------------------------


def model_cache_path(identity: str) -> Path:
    """Where the import of the file `identity` (`file_identity`) is kept."""
    key = hashlib.sha256(f"{code_fingerprint()}\0{identity}".encode()).hexdigest()
    return cache_dir("models", f"{key[:32]}.snap")


# -- compiled sessions ---------------------------------------------------------------------------


def session_key(model, arguments: dict[str, Any], devices: list[str]) -> str | None:
    """The cache key of compiling `model` with `arguments` on `devices`, or None when the model
    is not a file's unchanged content or an argument cannot be named by value."""
    if arguments.get("partition") != "greedy" or arguments.get("calibration") is not None:
        return None  # measured costs, the caller's arrays: not named by value
    identity = model_key(model)
    if identity is None:
        return None
    parts = [code_fingerprint(), identity, *devices]
    for name, value in sorted(arguments.items()):
        parts.append(f"{name}={value!r}")
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TINYDL_"))
    parts.append(repr(env))
    # The cores this process may use: host backends' default thread counts follow them.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    parts.append(f"cores {os.cpu_count()} {cores}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def session_path(key: str) -> Path:
    return cache_dir("sessions", f"{key}.snap")
