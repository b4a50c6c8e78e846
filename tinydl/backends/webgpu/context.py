"""The WebGPU context: adapter, device and queue, limits, the pipeline cache and the buffer pool.

One Context per process and adapter (`get_context()` for the default adapter,
`get_context(index)` for adapter `index` of `adapter_names()`); a lost device marks it dead,
and the next `get_context()` builds a fresh one, so a session compiled again after
DeviceLostError works.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import ctypes
import os
import threading
import time
import weakref
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, BufferSizeError, DeviceLostError

# Compiled pipelines a device keeps cached (shapes are baked into kernels, so inputs of ever new
# sizes would otherwise grow this without bound).
MAX_PIPELINES = 2048
# Threads compiling pipelines while a plan is built (the driver's compiler releases the GIL):
# one per core this process may use. NVIDIA's driver on a 16-core H100 host, cold starts:
# ResNet-18's compile 1.11-1.20 s on 4 threads, 0.74-0.81 on 8, 0.56-0.82 on 16, 0.69-0.71 on 32
# (docs/webgpu.md, "Start").
COMPILE_THREADS = (
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
)
# Constants of a session read back share buffers of at most this many bytes, each at a multiple
# of ARENA_ALIGN (WebGPU's largest offset alignment for a binding).
ARENA_BYTES = 256 << 20
ARENA_ALIGN = 256
_compile_pool: concurrent.futures.ThreadPoolExecutor | None = None
_compile_pool_lock = threading.Lock()
_threads_started = False


def compile_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _compile_pool
    with _compile_pool_lock:
        if _compile_pool is None:
            _compile_pool = concurrent.futures.ThreadPoolExecutor(
                COMPILE_THREADS, thread_name_prefix="tinydl-webgpu-compile"
            )
        return _compile_pool


def start_compile_threads() -> None:
    """Start every thread of the compile pool now, once a process (the first context does
    while its device starts). The pool starts a thread per task until it has them all, and
    each start waits for the new thread to run: with pipelines already being made on the
    others, queueing a warm start's 58 pipelines took 16 ms of the main thread (2-6 ms with
    the threads started; docs/webgpu.md)."""
    global _threads_started
    with _compile_pool_lock:
        if _threads_started:
            return
        _threads_started = True
    pool = compile_pool()
    ready = threading.Barrier(COMPILE_THREADS)

    def wait() -> None:  # (held until every thread runs one: each task a thread of its own)
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait(timeout=2.0)

    for _ in range(COMPILE_THREADS):
        pool.submit(wait)


ADAPTER_ENV = "TINYDL_WEBGPU_ADAPTER"
# Features used when the adapter has them; none is required.
OPTIONAL_FEATURES = ("shader-f16", "timestamp-query", "float32-filterable")
# Limits raised to the adapter's maxima (WebGPU's defaults are far below what GPUs allow).
RAISED_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-storage-buffers-per-shader-stage",
    # the render path (kernels/fragment.py): render targets per pass, texture sizes
    "max-color-attachments",
    "max-color-attachment-bytes-per-sample",
    "max-texture-array-layers",
    "max-texture-dimension-2d",
    "max-uniform-buffer-binding-size",
)


def _runtime_dir() -> None:
    """Vulkan drivers print "XDG_RUNTIME_DIR is invalid or not set" on every instance made in
    a process without a usable runtime dir (services, containers, CI); a private one (mode 0700,
    as the spec asks) keeps stderr clean. A valid one the user set is left alone."""
    current = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.name != "posix" or (current and os.path.isdir(current) and os.access(current, os.W_OK)):
        return
    import tempfile

    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tinydl-runtime-")


def import_wgpu():
    """The wgpu module, or BackendUnavailableError saying how to install it."""
    _runtime_dir()
    try:
        import wgpu
    except ImportError as exc:
        raise BackendUnavailableError(
            f"wgpu is not installed ({exc}): pip install 'tinydl[webgpu]'"
        ) from None
    return wgpu


def adapter_names() -> list[str]:
    """Every adapter wgpu finds, in its order: what `webgpu:INDEX` counts."""
    return [a.summary for a in import_wgpu().gpu.enumerate_adapters_sync()]


def _choose_adapter(wgpu, index: int | None = None):
    """Adapter `index` of the enumeration when given; else TINYDL_WEBGPU_ADAPTER picks by name
    substring or power preference; otherwise high-performance, then a retry with low-power."""
    if index is not None:
        adapters = wgpu.gpu.enumerate_adapters_sync()
        if not 0 <= index < len(adapters):
            raise BackendUnavailableError(
                f"no WebGPU adapter {index}: found {len(adapters)} "
                f"({'; '.join(a.summary for a in adapters) or 'none'})"
            )
        return adapters[index]
    wanted = os.environ.get(ADAPTER_ENV, "").strip()
    if wanted and wanted not in ("high-performance", "low-power"):
        adapters = wgpu.gpu.enumerate_adapters_sync()
        for adapter in adapters:
            if wanted.lower() in adapter.summary.lower():
                return adapter
        names = "; ".join(a.summary for a in adapters) or "none"
        raise BackendUnavailableError(
            f"{ADAPTER_ENV}={wanted!r} matches no adapter (found: {names})"
        )
    order = [wanted] if wanted else ["high-performance", "low-power"]
    for preference in order:
        try:
            adapter = wgpu.gpu.request_adapter_sync(power_preference=preference)
        except Exception:  # noqa: BLE001 - wgpu raises plain RuntimeError when none is found
            adapter = None
        if adapter is not None:
            return adapter
    raise BackendUnavailableError("no Vulkan/Metal/DX12 adapter found")


class Context:
    """A WebGPU device with what every kernel shares."""

    def __init__(self, index: int | None = None):
        wgpu = import_wgpu()
        t0 = time.perf_counter()
        from tinydl.backends.planned import prefetch_imports

        # (what a compile or a kept session needs, imported while the driver makes the device)
        ahead = prefetch_imports("tinydl.backends.webgpu.program")
        from tinydl.backends.webgpu.cffi_types import prewarm

        prewarm()  # wgpu-py's C types parsed in one pass, not one at a time
        start_compile_threads()
        self.wgpu = wgpu
        # The adapter's index in adapter_names(), or None for the default choice.
        self.index = index
        self.adapter = _choose_adapter(wgpu, index)
        self.features = {f for f in OPTIONAL_FEATURES if f in self.adapter.features}
        limits = {k: self.adapter.limits[k] for k in RAISED_LIMITS if k in self.adapter.limits}
        self.device = self.adapter.request_device_sync(
            required_features=sorted(self.features), required_limits=limits
        )
        self.queue = self.device.queue
        self.limits = dict(self.device.limits)
        info = self.adapter.info
        self.name = f"{info['device']} ({info['backend_type']}, {info['adapter_type']})"
        self.lost = False
        # Compiled pipelines by source hash, least recently used first (plans hold their own).
        self._pipelines: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
        self._pipelines_lock = threading.Lock()
        self._compiling: dict[tuple[str, str], concurrent.futures.Future] = {}
        self._pool: dict[tuple[int, int], list[Any]] = {}
        self._unplaced: list = []  # (storage, host) of `constant_later`
        self._placing = threading.Lock()
        self._lock = threading.Lock()
        # Held while a command buffer is recorded and submitted, and around the fence.
        self.queue_lock = threading.RLock()
        self._fence = None
        self._samplers: dict[str, Any] = {}
        self._serials: dict[int, tuple[int, Any]] = {}
        self._next_serial = 0
        self.stats = {
            "device_s": time.perf_counter() - t0,
            "pipelines": 0,
            "compile_s": 0.0,
            "buffers": 0,
        }
        # The first mappable buffer of a device cost NVIDIA's driver 20-30 ms (an H100 host: the
        # allocator's first block of host-visible memory), paid by the first run's read-back: one
        # is made here on a thread, while the caller loads and compiles, and kept.
        self._first_staging = None
        threading.Thread(
            target=self._make_first_staging, name="tinydl-webgpu-staging", daemon=True
        ).start()
        if ahead is not None:
            ahead.join()

    def _make_first_staging(self) -> None:
        u = self.wgpu.BufferUsage
        with contextlib.suppress(Exception):  # (a lost device: the next call says so)
            self._first_staging = self.device.create_buffer(size=256, usage=u.MAP_READ | u.COPY_DST)

    # -- capabilities --------------------------------------------------------------------------
    @property
    def has_f16(self) -> bool:
        return "shader-f16" in self.features

    @property
    def has_timestamps(self) -> bool:
        return "timestamp-query" in self.features

    @property
    def max_binding(self) -> int:
        return int(self.limits["max-storage-buffer-binding-size"])

    @property
    def max_workgroup_storage(self) -> int:
        return int(self.limits["max-compute-workgroup-storage-size"])

    @property
    def max_workgroup_threads(self) -> int:
        """Invocations a workgroup may have (the three sizes multiplied)."""
        return int(self.limits.get("max-compute-invocations-per-workgroup", 256))

    def check_size(self, nbytes: int, what: str) -> None:
        if nbytes > self.max_binding:
            raise BufferSizeError(
                f"{what} needs {nbytes} bytes in one buffer, but this adapter binds at most "
                f"{self.max_binding} bytes (max-storage-buffer-binding-size); "
                "use a smaller input or the cpu backend for it"
            )

    # -- pipelines -----------------------------------------------------------------------------
    def _snapshot_id(self) -> tuple:
        """How a pickled session names this context (tinydl/snapshot.py)."""
        return ("tinydl.backends.webgpu.context:get_context", self.index)

    def pipeline(self, source: str, label: str = ""):
        """A compute pipeline for WGSL `source` (entry point `main`), cached by a hash of it."""

        def make(module):
            return self.device.create_compute_pipeline(
                label=label, layout="auto", compute={"module": module, "entry_point": "main"}
            )

        return self._cached(source, label or "a kernel", make)

    def pipeline_soon(self, source: str, label: str = ""):
        """The compute pipeline for `source` if it is compiled, else a Future of it, compiled on
        a thread of the compile pool (a plan resolves its Futures once every node is built, so
        the driver compiles its kernels in parallel while Python builds the rest)."""
        key = _pipeline_key(source)
        with self._pipelines_lock:
            cached = self._cached_locked(key)
            if cached is not None:
                return cached
            future = self._compiling.get(key)
            if future is None:
                future = self._compiling[key] = compile_pool().submit(
                    self._compile_soon, source, label, key
                )
            return future

    def _compile_soon(self, source: str, label: str, key: tuple[str, str]):
        try:
            return self.pipeline(source, label)
        finally:
            with self._pipelines_lock:
                self._compiling.pop(key, None)

    def render_pipeline(self, source: str, formats: list[str], label: str = ""):
        """A render pipeline for WGSL `source` (entry points `vs` and `fs`) drawing a triangle
        list into color targets of `formats`, cached by a hash of both."""

        def make(module):
            return self.device.create_render_pipeline(
                label=label,
                layout="auto",
                vertex={"module": module, "entry_point": "vs"},
                primitive={"topology": "triangle-list"},
                fragment={
                    "module": module,
                    "entry_point": "fs",
                    "targets": [{"format": f} for f in formats],
                },
            )

        return self._cached(source, label or "a shader", make, "|" + ",".join(formats))

    def _cached_locked(self, key: tuple[str, str]):
        """The pipeline cached under `key` (marked recently used), or None; hold the lock."""
        cached = self._pipelines.get(key)
        if cached is not None:
            self._pipelines.move_to_end(key)
        return cached

    def _cached(self, source: str, what: str, make, extra: str = ""):
        """The pipeline `make(module)` builds from `source`, compiled once per source (and
        `extra`), the least recently used dropped past MAX_PIPELINES."""
        key = _pipeline_key(source, extra)
        with self._pipelines_lock:
            cached = self._cached_locked(key)
            if cached is not None:
                return cached
        t0 = time.perf_counter()
        with self.guard(f"compiling {what}"):
            pipeline = make(self.device.create_shader_module(label=what, code=source))
        with self._pipelines_lock:
            self._pipelines[key] = pipeline
            while len(self._pipelines) > MAX_PIPELINES:
                self._pipelines.popitem(last=False)
            self.stats["pipelines"] += 1
            self.stats["compile_s"] += time.perf_counter() - t0  # summed over threads
        return pipeline

    def sampler(self, linear: bool = False):
        """A clamp-to-edge sampler (edge padding through the address mode), nearest or linear
        (Resize through the texture units' bilinear filter)."""
        filt = "linear" if linear else "nearest"
        if filt not in self._samplers:
            self._samplers[filt] = self.device.create_sampler(
                address_mode_u="clamp-to-edge",
                address_mode_v="clamp-to-edge",
                mag_filter=filt,
                min_filter=filt,
            )
        return self._samplers[filt]

    def create_texture(self, width: int, height: int, layers: int, fmt: str, what: str):
        """A 2-D texture array the render path draws into and reads from."""
        most = int(self.limits.get("max-texture-dimension-2d", 8192))
        most_layers = int(self.limits.get("max-texture-array-layers", 256))
        if max(width, height) > most or layers > most_layers:
            raise BufferSizeError(
                f"{what} needs a {width}x{height} texture of {layers} layers, but this adapter "
                f"allows {most}x{most} and {most_layers} layers"
            )
        u = self.wgpu.TextureUsage
        with self.guard("allocating a texture"):
            return self.device.create_texture(
                size=(width, height, layers),
                format=fmt,
                usage=u.RENDER_ATTACHMENT | u.TEXTURE_BINDING | u.COPY_SRC | u.COPY_DST,
            )

    # -- buffers -------------------------------------------------------------------------------
    @property
    def storage_usage(self) -> int:
        u = self.wgpu.BufferUsage
        return u.STORAGE | u.COPY_SRC | u.COPY_DST

    def create_buffer(self, nbytes: int, usage: int | None = None, what: str = "a tensor"):
        usage = self.storage_usage if usage is None else usage
        if usage & self.wgpu.BufferUsage.STORAGE:
            self.check_size(nbytes, what)
        self.stats["buffers"] += 1
        with self.guard("allocating a buffer"):
            return self.device.create_buffer(size=max(4, _round4(nbytes)), usage=usage)

    def serial_of(self, buffer) -> int:
        """A number for a live buffer that no other buffer gets while this one lives."""
        entry = self._serials.get(id(buffer))
        if entry is None:
            self._next_serial += 1
            entry = self._serials[id(buffer)] = (self._next_serial, buffer)
        return entry[0]

    def forget(self, buffer) -> None:
        self._serials.pop(id(buffer), None)

    def acquire(self, nbytes: int, usage: int | None = None):
        """A buffer of at least `nbytes` from the pool (or a new one).

        Reuse needs no wait: every use of a buffer is a queue operation, and the queue runs
        them in order, so work already submitted is done with it before any later write.
        """
        usage = self.storage_usage if usage is None else usage
        size = _bucket(nbytes)
        with self._lock:
            free = self._pool.get((size, usage))
            if free:
                return free.pop()
        return self.create_buffer(size, usage)

    def release(self, buffer, usage: int | None = None) -> None:
        """Give a buffer back to the pool (called when the last tensor on it is dropped)."""
        if self.lost:
            return
        usage = self.storage_usage if usage is None else usage
        with self._lock:
            free = self._pool.setdefault((buffer.size, usage), [])
            if len(free) < 4:
                free.append(buffer)
                return
        self.forget(buffer)
        buffer.destroy()  # wgpu keeps it alive until submitted work using it has finished

    def constant_later(self, host: np.ndarray, usage: int):
        """A constant whose buffer comes with `place_constants`: a session read back makes its
        constants this way, and then one buffer a usage holds them all (created mapped, each
        written into place, unmapped) instead of a buffer and a queued write each (111 of them
        for MobileNetV3-small, whose writes waited behind the pipelines being made)."""
        from tinydl.backends.webgpu.tensor import Storage

        storage = Storage(self, None, pooled=False, usage=usage)
        with self._lock:
            self._unplaced.append((storage, np.ascontiguousarray(host)))
        return storage

    def place_constants(self) -> None:
        """Give every constant of `constant_later` its place: one buffer per usage (and per
        ARENA_BYTES), each at an offset aligned for binding."""
        cap = min(ARENA_BYTES, int(self.limits.get("max-buffer-size", ARENA_BYTES)))
        with self._placing:  # (a constant asked for meanwhile waits for its place)
            with self._lock:
                todo, self._unplaced = self._unplaced, []
            groups: dict[int, list] = {}
            for storage, host in todo:
                groups.setdefault(storage.usage, []).append((storage, host))
            for usage, items in groups.items():
                total, chunk = 0, []
                for storage, host in items:
                    size = -(-max(4, host.nbytes) // ARENA_ALIGN) * ARENA_ALIGN
                    if chunk and total + size > cap:
                        self._place(chunk, total, usage)
                        total, chunk = 0, []
                    chunk.append((storage, host, total))
                    total += size
                self._place(chunk, total, usage)

    def _place(self, chunk: list, total: int, usage: int) -> None:
        with self.guard("uploading constants"):
            buffer = self.device.create_buffer(size=total, usage=usage, mapped_at_creation=True)
            self.stats["buffers"] += 1
            # One view of the whole mapped range, each constant copied into it by memoryview
            # (which keeps the GIL): one call into wgpu-native for the buffer, not one a
            # constant, and no copy that lets go of the GIL (each such call waited to take it
            # back from the compile threads making the same session's pipelines).
            mapped = _mapped_bytes(buffer, total)
            for _, host, offset in chunk:
                mapped[offset : offset + host.nbytes] = memoryview(host.reshape(-1)).cast("B")
            del mapped  # (the view must not outlive the mapping)
            buffer.unmap()
        for storage, host, offset in chunk:
            storage.place(buffer, offset, max(4, _round4(host.nbytes)))

    def upload(self, array: np.ndarray, usage: int | None = None):
        array = np.ascontiguousarray(array)
        buffer = self.acquire(array.nbytes, usage)
        if array.nbytes:
            with self.guard("uploading a tensor"):
                self.queue.write_buffer(buffer, 0, _padded_bytes(array))
        return buffer

    def read(self, buffer, nbytes: int, offset: int = 0) -> np.ndarray:
        """Copy `nbytes` of a GPU buffer to a new host array (uint8), through a staging buffer."""
        u = self.wgpu.BufferUsage
        staging = self.acquire(nbytes, u.MAP_READ | u.COPY_DST)
        with self.queue_lock, self.guard("reading a tensor back"):
            encoder = self.device.create_command_encoder()
            encoder.copy_buffer_to_buffer(buffer, offset, staging, 0, _round4(nbytes))
            self.queue.submit([encoder.finish()])
        return self.map_read(staging, nbytes)

    def map_read(self, staging, nbytes: int) -> np.ndarray:
        """The bytes of a staging buffer whose copy is already submitted, without a copy: the
        array (writable) is the mapped memory, and the buffer is unmapped and goes back to the
        pool when the array and every view of it are gone."""
        u = self.wgpu.BufferUsage
        if not nbytes:
            self.release(staging, u.MAP_READ | u.COPY_DST)
            return np.empty(0, np.uint8)
        with self.guard("reading a tensor back"):
            if self.map_here:
                self._map_here(staging, _round4(nbytes))
            else:
                staging.map_sync("READ_NOSYNC", 0, _round4(nbytes))
            view = staging.read_mapped(0, _round4(nbytes), copy=False)
        address = np.frombuffer(view, np.uint8).ctypes.data
        memory = (ctypes.c_uint8 * nbytes).from_address(address)
        weakref.finalize(memory, self._unmap, staging)
        return np.frombuffer(memory, np.uint8)

    # Read-backs wait on the calling thread (`_map_here`); False: through wgpu-py's map_sync,
    # for comparisons.
    map_here = True

    def _map_here(self, staging, size: int) -> None:
        """Map a staging buffer for reading, as wgpu-py 0.32's map_sync("READ_NOSYNC") does,
        but wait on this thread: wgpu-native's map, then device polls here (the GIL released
        in each) until its callback has run, without blocking for up to SPIN_S (a core busy
        meanwhile), then blocking. map_sync instead wakes wgpu-py's poll thread,
        which polls and then wakes this thread: two thread hand-offs a read-back. One thread
        maps and polls at a time (`_POLL_LOCK`, taken before the queue lock, never after)."""
        from wgpu import enums, flags
        from wgpu.backends.wgpu_native._api import ffi, lib, new_struct

        status: list[int] = []

        @ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
        def mapped(code, _message, _data1, _data2):
            status.append(code)

        info = new_struct(
            "WGPUBufferMapCallbackInfo",
            mode=lib.WGPUCallbackMode_AllowProcessEvents,
            callback=mapped,
        )
        device = self.device._internal
        with _POLL_LOCK:
            staging._map_state = enums.BufferMapState.pending
            lib.wgpuBufferMapAsync(staging._internal, lib.WGPUMapMode_Read, 0, size, info)
            # Non-blocking polls for a while (the GIL released in each), then blocking ones
            # under the queue lock: a blocking poll while another thread submits aborted the
            # process (wgpu-native 29 on lavapipe, threads sharing a session).
            end = time.perf_counter() + SPIN_S
            while not status and time.perf_counter() < end:
                lib.wgpuDevicePoll(device, False, ffi.NULL)
            for _ in range(_MAP_POLLS):
                if status:
                    break
                with self.queue_lock:
                    lib.wgpuDevicePoll(device, True, ffi.NULL)
        if status != [lib.WGPUMapAsyncStatus_Success]:
            staging._map_state = enums.BufferMapState.unmapped
            raise RuntimeError(f"could not map a buffer for reading (status {status})")
        staging._map_state = enums.BufferMapState.mapped
        staging._mapped_status = 0, size, flags.MapMode.READ
        staging._mapped_memoryviews = []

    def _unmap(self, staging) -> None:
        if self.lost:
            return
        staging.unmap()
        u = self.wgpu.BufferUsage
        self.release(staging, u.MAP_READ | u.COPY_DST)

    def sync(self) -> None:
        """Wait until the GPU has finished everything submitted so far."""
        # A map waits for the submission that last used the buffer, and the queue runs in
        # order (on_submitted_work_done is broken in wgpu-py 0.32 with wgpu-native 29).
        u = self.wgpu.BufferUsage
        with self.queue_lock, self.guard("waiting for the GPU"):
            if self._fence is None:
                self._fence = self.device.create_buffer(size=256, usage=u.MAP_READ | u.COPY_DST)
            encoder = self.device.create_command_encoder()
            encoder.clear_buffer(self._fence)
            self.queue.submit([encoder.finish()])
            self._fence.map_sync("READ_NOSYNC")
            self._fence.unmap()

    # -- errors --------------------------------------------------------------------------------
    def guard(self, what: str) -> _Guard:
        return _Guard(self, what)


class _Guard:
    """Turns wgpu's errors about a lost device into DeviceLostError (and marks the context)."""

    def __init__(self, ctx: Context, what: str):
        self.ctx, self.what = ctx, what

    def __enter__(self):
        if self.ctx.lost:
            raise DeviceLostError(
                f"the WebGPU device ({self.ctx.name}) was lost; compile the model again"
            )
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, DeviceLostError):
            return False
        if "lost" in str(exc).lower() or "destroyed" in str(exc).lower():
            self.ctx.lost = True
            _forget(self.ctx)
            raise DeviceLostError(
                f"the WebGPU device ({self.ctx.name}) was lost while {self.what}: "
                f"{str(exc).strip().splitlines()[-1]}; compile the model again"
            ) from exc
        return False


def _mapped_bytes(buffer, size: int) -> memoryview:
    """The first `size` bytes of a buffer mapped for writing, as a writable memoryview (through
    wgpu-native's entry point, as wgpu-py 0.32, the version pinned, exposes it)."""
    from wgpu.backends.wgpu_native._api import ffi, libf

    pointer = libf.wgpuBufferGetMappedRange(buffer._internal, 0, size)
    return memoryview(ffi.buffer(pointer, size))


def _pipeline_key(source: str, extra: str = "") -> tuple[str, str]:
    """The pipeline cache's key: the WGSL source itself (and `extra`: render targets). Python
    hashes a string once and keeps the hash; a SHA-256 of each source let go of the GIL and
    waited to take it back from the compile threads at every call (tens of calls as a session
    read back queues its pipelines: milliseconds of a warm start on a 16-core host)."""
    return (source, extra)


_POLL_LOCK = threading.Lock()
# How long a read-back polls without blocking before it blocks (seconds).
SPIN_S = 0.002
# Blocking polls a read-back makes before giving up: each returns once the queue is idle, so
# the map's callback runs in the first.
_MAP_POLLS = 100


def _round4(n: int) -> int:
    return (int(n) + 3) // 4 * 4


def _bucket(nbytes: int) -> int:
    """Pool size classes: multiples of 256 bytes, then eight steps per power of two."""
    n = max(256, _round4(nbytes))
    if n <= 1 << 16:
        return (n + 255) // 256 * 256
    step = 1 << (n.bit_length() - 4)
    return (n + step - 1) // step * step


def _padded_bytes(array: np.ndarray):
    if array.nbytes % 4 == 0:
        return array
    raw = np.zeros(_round4(array.nbytes), np.uint8)
    raw[: array.nbytes] = array.view(np.uint8).ravel()
    return raw


_contexts: dict[int | None, Context] = {}
_context_lock = threading.Lock()


def get_context(index: int | None = None) -> Context:
    """The process's WebGPU context on adapter `index` (None: the default adapter); a new one
    after the device was lost."""
    with _context_lock:
        ctx = _contexts.get(index)
        if ctx is None or ctx.lost:
            ctx = _contexts[index] = Context(index)
        return ctx


def _forget(ctx: Context) -> None:
    with _context_lock:
        if _contexts.get(ctx.index) is ctx:
            del _contexts[ctx.index]
