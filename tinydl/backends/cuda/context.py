"""The CUDA device as the backend sees it: CuPy (memory pool, streams, events), NVRTC
compilation with an on-disk cache of compiled modules, and device properties.

CuPy is imported here and nowhere else at module level, so `import tinydl` never loads it.
Kernels are compiled by NVRTC straight to a cubin for the device's architecture and cached on
disk under a hash of (source, options, architecture, NVRTC version); a second process loads
the cubin instead of compiling. The cache lives in $TINYDL_CACHE_DIR/cuda (default
~/.cache/tinydl/cuda). A plan asks for all its kernels first (`prefetch`) and NVRTC compiles
the missing ones on a pool of threads (NVRTC releases the GIL), so a cold start costs about
the slowest kernel per core rather than the sum of all of them; modules are loaded on the
calling thread, where the device is current.
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import functools
import hashlib
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tinydl.cache import cache_dir as tinydl_cache
from tinydl.errors import BackendUnavailableError

DEVICE_ENV = "TINYDL_CUDA_DEVICE"
OPTIONS = ("-std=c++17",)
# NVRTC 12.4+: leave out what no kernel here uses (texture and surface types, device-side
# runtime calls and launches), which every program otherwise parses: the same cubins, bit for
# bit, 4-5 % less compile time (docs/cuda.md, "Compile options").
MINIMAL_SINCE = (12, 4)
# A source holding this line is compiled for a short compile rather than fast code (NVRTC 12.8+:
# --Ofast-compile=mid): the generic kernels a cold plan runs until its own are compiled
# (conv_tc.cu; 3xTF32 ResNet-18's generic GEMMs 0.15-0.2 -> 0.08-0.09 s each on one x86 core).
FAST_COMPILE = "// tinydl: compiled fast, to run for a while"
FAST_COMPILE_SINCE = (12, 8)
# A source holding this line uses instructions of its architecture only (Hopper's wgmma): it is
# compiled for the architecture-specific target, sm_90 as sm_90a, whose cubin runs on that
# compute capability alone (the kernels that ask for it check the device's).
ARCH_SPECIFIC = "// tinydl: architecture-specific instructions"
# Loaded modules a device keeps (shapes are baked into kernels; see webgpu MAX_PIPELINES).
MAX_MODULES = 2048
# Threads compiling kernels at once (NVRTC is CPU-bound and holds no lock of ours).
COMPILE_THREADS = max(1, min(16, os.cpu_count() or 1))
# Kernels a program gets at least before another thread starts one: NVRTC's threads contend,
# so a program of one small kernel on each of 16 threads is slower than a few programs. Counted
# in weights: a kernel that compiles as slowly as several small ones (an implicit-GEMM
# convolution: about 8 on an x86 core) says so at `prefetch`.
MIN_PER_PROGRAM = 8
# Small kernels queued while a plan is being made start compiling in programs of this much
# weight as they come, rather than all when the plan is complete (`flush` takes the rest): a
# cold MobileNetV3-small's 27 depthwise, pooling and elementwise kernels had waited for the
# whole plan (0.27 s of Python on an H100 host), then taken 0.57 s in three programs of nine.
EAGER_BATCH = 4


class CompileError(RuntimeError):
    """NVRTC rejected a generated kernel; the message holds the log and the source's name."""


def driver_loadable() -> bool:
    """True when NVIDIA's driver library (libcuda) can be loaded: an NVIDIA GPU's driver is
    installed on this machine."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def no_device_reason(exc: Exception) -> str:
    """Why CUDA found no device, in words a user can act on."""
    if not driver_loadable():
        return (
            "no NVIDIA GPU: NVIDIA's driver (libcuda) is not installed on this machine; "
            "the cuda backend needs an NVIDIA GPU (try backends=('webgpu', 'cpu'))"
        )
    if "insufficient" in str(exc).lower():
        return (
            f"the NVIDIA driver is older than the CUDA runtime CuPy was built for ({exc}): "
            "update the driver, or install the CuPy wheel for its CUDA version (cupy-cuda12x)"
        )
    return f"no CUDA device: {exc}"


def cache_dir() -> Path:
    return tinydl_cache("cuda")


def _start_driver(index: int) -> None:
    """Start the driver and device `index`'s primary context (the one CUDA's runtime, and so
    CuPy, uses) through ctypes, which lets go of the GIL during the call: CuPy's own first calls
    hold it for the 0.1-0.3 s the driver takes to start, which would keep the imports
    `prefetch_imports` runs from overlapping it. Nothing when the driver library cannot be
    loaded or a call fails: CuPy's calls then start it, and say what is wrong."""
    import ctypes

    try:
        lib = ctypes.CDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
        device, context = ctypes.c_int(), ctypes.c_void_p()
        if lib.cuInit(0) == 0 and lib.cuDeviceGet(ctypes.byref(device), index) == 0:
            lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    except (OSError, AttributeError):
        return


class Context:
    """One CUDA device: compiles and caches kernels, owns the capture stream."""

    def __init__(self, index: int = 0):
        try:
            import cupy
            from cupy_backends.cuda.libs import nvrtc
        except ImportError as exc:
            raise BackendUnavailableError(
                f"CuPy is not installed ({exc}): pip install 'tinydl[cuda]' "
                "(or the cupy-cudaXXx wheel matching your CUDA driver)"
            ) from exc
        self.cp, self.nvrtc = cupy, nvrtc
        from tinydl.backends.planned import prefetch_imports

        # What a compile or a kept session needs, imported while the driver starts.
        ahead = prefetch_imports("tinydl.backends.cuda.program")
        _start_driver(index)
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # noqa: BLE001 - no driver, no device: the same answer
            raise BackendUnavailableError(no_device_reason(exc)) from exc
        if count == 0:
            raise BackendUnavailableError("no CUDA device: the driver reports 0 devices")
        if not 0 <= index < count:
            raise BackendUnavailableError(
                f"{DEVICE_ENV}={index}: expected a device index in 0..{count - 1}"
            )
        self.index = index
        self.device = cupy.cuda.Device(index)
        with self.device:
            props = cupy.cuda.runtime.getDeviceProperties(index)
            self.name = (
                props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            )
            self.cc = (int(props["major"]), int(props["minor"]))
            self.sm_count = int(props["multiProcessorCount"])
            self.smem_optin = int(props.get("sharedMemPerBlockOptin", 48 << 10))
            self.total_memory = int(props["totalGlobalMem"])
        self.nvrtc_version = tuple(nvrtc.getVersion())
        self.arch = self._arch()
        # Loaded modules by source hash, least recently used first (plans hold their own).
        self._modules: collections.OrderedDict[str, Any] = collections.OrderedDict()
        # The functions taken from each loaded module, by name: a session's steps share few
        # kernels (CuPy's get_function makes a new Function each call: 91 calls, 5 ms of a warm
        # start of MobileNetV3-small on an H100 host, for a dozen functions).
        self._functions: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._pending: dict[str, concurrent.futures.Future] = {}
        self._queued: dict[str, tuple[str, str, str, str]] = {}
        self._weights: dict[str, int] = {}  # of the queued kernels
        self._later: dict[str, tuple[str, str, str, str]] = {}  # queued for compile_later
        self._later_keys: set[str] = set()  # pending on the later threads
        self._later_pool: concurrent.futures.ThreadPoolExecutor | None = None
        # Source key -> (cubin key, entry suffix) for kernels compiled or found on disk.
        self._where: dict[str, tuple[str, str]] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._local = threading.local()
        # Host arrays under asynchronous copies, with the event that says they are done.
        self._kept: collections.deque = collections.deque()
        self._kept_lock = threading.Lock()
        # Host ranges page-locked with cudaHostRegister (`lock_host`): sorted starts, ends.
        self._locked: tuple[list[int], list[int]] = ([], [])
        # The two page-locked buffers `upload` copies through, made on first use.
        self._stages: list | None = None
        self._stage, self._stage_at = 0, 0  # the buffer being filled, and how far
        self._stage_lock = threading.Lock()
        self._splits: list = []  # (array, n, copies done) for split_tf32, not yet split
        self.stats = {"compile_s": 0.0, "load_s": 0.0, "compiled": 0, "cache_hits": 0}
        from tinydl.snapshot import register_device_array

        t = cupy.ndarray
        register_device_array(f"{t.__module__}.{t.__qualname__}", _array_name)
        if ahead is not None:
            ahead.join()

    def _snapshot_id(self) -> tuple:
        """How a pickled session names this context (tinydl/snapshot.py)."""
        return ("tinydl.backends.cuda.context:get_context", self.index)

    def _arch(self) -> str:
        """The newest real architecture NVRTC can target for this device."""
        want = self.cc[0] * 10 + self.cc[1]
        try:
            supported = [int(a) for a in self.nvrtc.getSupportedArchs()]
        except Exception:  # noqa: BLE001 - old NVRTC without the query
            supported = [want]
        usable = [a for a in supported if a <= want]
        return f"sm_{max(usable) if usable else want}"

    # -- compilation ---------------------------------------------------------------------------
    def _key(self, source: str) -> str:
        return hashlib.sha256(
            "\0".join([source, *nvrtc_options(), self.arch, repr(self.nvrtc_version)]).encode()
        ).hexdigest()[:32]

    def _cached(self, key: str) -> tuple[str, str] | None:
        """Where the disk cache holds `key`'s kernel: (cubin key, entry suffix), or None."""
        root = cache_dir()
        if (root / f"{key}.cubin").exists():
            return key, ""
        ref = root / f"{key}.ref"
        if ref.exists():
            cubin, suffix = ref.read_text().split("\n")[:2]
            if (root / f"{cubin}.cubin").exists():
                return cubin, suffix
        return None

    def _compile(self, items: list[tuple[str, str, str, str]]) -> dict[str, tuple[str, str]]:
        """Compile (key, source, label, entry) items as one NVRTC program, each source in a
        namespace of its own and its entry renamed, and cache the cubin with a reference per
        item. One program of n kernels costs far less than n programs (NVRTC's fixed cost per
        program dominates small kernels). A program that fails is compiled item by item, so
        the error names its kernel."""
        t0 = time.perf_counter()
        if len(items) == 1:
            key, source, label, _ = items[0]
            _atomic_write(cache_dir() / f"{key}.cubin", compile_cubin(source, self.arch, label))
            where = {key: (key, "")}
        else:
            parts = [_namespaced(i, source, entry) for i, (_, source, _, entry) in enumerate(items)]
            program = "".join(parts)
            try:
                cubin = compile_cubin(program, self.arch, f"{len(items)} kernels")
            except CompileError:
                where = {}
                for item in items:
                    where.update(self._compile([item]))
                return where
            chunk = self._key(program)
            _atomic_write(cache_dir() / f"{chunk}.cubin", cubin)
            where = {}
            for i, (key, *_) in enumerate(items):
                _write_ref(cache_dir() / f"{key}.ref", f"{chunk}\n_{i}\n")
                where[key] = (chunk, f"_{i}")
        with self._lock:
            self.stats["compile_s"] += time.perf_counter() - t0
            self.stats["compiled"] += len(items)
        return where

    def prefetch(
        self,
        source: str,
        label: str = "kernel",
        entry: str = "k",
        weight: int = 1,
        later: bool = False,
    ) -> None:
        """Queue `source` for compilation unless it is loaded or on its way; `flush` compiles
        the queue, `function` waits for it. `weight`: its compile time in small kernels'; a
        kernel of a whole program's weight (an implicit GEMM) starts compiling at once, as a
        program of its own, while the plan asking for it is still being made. `later`: for
        `compile_later` instead (a kernel a plan runs a generic one for first)."""
        key = self._key(source)
        with self._lock:
            if key in self._where or key in self._pending:
                return
            if later or weight < MIN_PER_PROGRAM:
                queue = self._later if later else self._queued
                queue[key] = (key, source, label, entry)
                self._weights[key] = max(1, int(weight))
                if later or sum(self._weights.get(k, 1) for k in self._queued) < EAGER_BATCH:
                    return
                batch, self._queued = list(self._queued.values()), {}
                weight = {item[0]: self._weights.pop(item[0], 1) for item in batch}
            else:
                batch = None
        if batch is not None:  # a program's worth of small kernels: compiled from now on
            self._submit(batch, weight, one_program=True)
            return
        where = self._cached(key)
        with self._lock:
            if where is not None:
                self._hit(key, where)
            elif key not in self._pending:
                item = (key, source, label, entry)
                self._pending[key] = self._thread_pool().submit(self._compile, [item])

    def known(self, source: str) -> bool:
        """Whether `source` is compiled, on its way in a flush, or in the disk cache."""
        key = self._key(source)
        with self._lock:
            if key in self._where or (key in self._pending and key not in self._later_keys):
                return True
        where = self._cached(key)
        if where is not None:
            with self._lock:
                self._hit(key, where)
        return where is not None

    def _hit(self, key: str, where: tuple[str, str]) -> None:
        """Record a kernel found in the disk cache (counted once); under the lock."""
        if key not in self._where:
            self.stats["cache_hits"] += 1
        self._where[key] = where

    def compile_later(self, sources: list[str]) -> list[concurrent.futures.Future]:
        """Compile the kernels queued with `prefetch(later=True)` on the later threads (apart
        from the compile threads, so that the next plan's compile does not queue behind them);
        the futures `sources` wait for (none for those already compiled)."""
        with self._lock:
            queued, self._later = list(self._later.values()), {}
            weight = {item[0]: self._weights.pop(item[0], 1) for item in queued}
        self._submit(queued, weight, later=True)
        keys = {self._key(s) for s in sources}
        with self._lock:
            return list({id(f): f for k, f in self._pending.items() if k in keys}.values())

    def flush(self) -> None:
        """Compile the queued kernels the disk cache lacks, spread over the compile threads."""
        with self._lock:
            queued, self._queued = list(self._queued.values()), {}
            weight = {item[0]: self._weights.pop(item[0], 1) for item in queued}
        self._submit(queued, weight)

    def _submit(
        self, queued: list, weight: dict[str, int], one_program: bool = False, later: bool = False
    ) -> None:
        """Compile the `queued` items the disk cache lacks on the compile threads (`later`: on
        the later threads): spread over programs by weight (`_programs`), or as one."""
        todo = []
        for item in queued:
            where = self._cached(item[0])
            if where is None:
                todo.append(item)
            else:
                with self._lock:
                    self._hit(item[0], where)
        if not todo:
            return
        with self._lock:
            pool = self._thread_pool(later)
            groups = [todo] if one_program else _programs(todo, weight)
            if one_program and len({_option_kind(item[1]) for item in todo}) > 1:
                groups = _programs(todo, weight)  # (one set of options a program)
            for group in groups:
                future = pool.submit(self._compile, group)
                for key, *_ in group:
                    self._pending[key] = future
                    if later:
                        self._later_keys.add(key)

    def _thread_pool(self, later: bool = False) -> concurrent.futures.ThreadPoolExecutor:
        """The compile threads (or the later threads), started on first use; under the lock."""
        if later:
            if self._later_pool is None:
                self._later_pool = concurrent.futures.ThreadPoolExecutor(
                    COMPILE_THREADS, thread_name_prefix="tinydl-nvrtc-later"
                )
            return self._later_pool
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                COMPILE_THREADS, thread_name_prefix="tinydl-nvrtc"
            )
        return self._pool

    def _locate(self, source: str, label: str, entry: str) -> tuple[str, str]:
        """(cubin key, entry suffix) of `source`, compiling it now if nobody has."""
        key = self._key(source)
        with self._lock:
            where = self._where.get(key)
            pending = self._pending.get(key)
        if where is not None:
            return where
        if pending is not None:
            try:
                found = pending.result()
            finally:
                with self._lock:
                    for k in [k for k, f in self._pending.items() if f is pending]:
                        self._pending.pop(k)
            with self._lock:
                self._where.update(found)
                self._later_keys.difference_update(found)
            return found[key]
        where = self._cached(key) or self._compile([(key, source, label, entry)])[key]
        with self._lock:
            self._where[key] = where
        return where

    def _load(self, cubin_key: str):
        with self._lock:
            mod = self._modules.get(cubin_key)
            if mod is not None:
                self._modules.move_to_end(cubin_key)
                return mod
        t0 = time.perf_counter()
        with self.device:
            mod = self.cp.RawModule(path=str(cache_dir() / f"{cubin_key}.cubin"))
        with self._lock:
            self.stats["load_s"] += time.perf_counter() - t0
            self._modules[cubin_key] = mod
            while len(self._modules) > MAX_MODULES:
                dropped, _ = self._modules.popitem(last=False)
                self._functions.pop(dropped, None)
        return mod

    def function(self, source: str, name: str, label: str = "kernel", smem: int = 0):
        """Function `name` of CUDA C `source`, compiled once per source, architecture and
        NVRTC version (then read from the disk cache)."""
        return self._function(self._locate(source, label, name), name, label, smem)

    def locate(self, source: str, name: str, label: str = "kernel") -> tuple[str, str]:
        """Where the disk cache keeps `source`'s function `name`: (cubin key, entry suffix),
        compiling it first if nobody has; `function_at` takes it (a session read back finds
        its kernels without hashing their sources or reading the cache's references)."""
        return self._locate(source, label, name)

    def function_at(self, where: tuple[str, str], name: str, label: str = "kernel", smem: int = 0):
        """Function `name` of the cubin `locate` gave, or None when the disk cache no longer
        holds that cubin (the caller compiles the source again)."""
        with self._lock:
            loaded = where[0] in self._modules
        if not loaded and not (cache_dir() / f"{where[0]}.cubin").exists():
            return None
        return self._function(where, name, label, smem)

    def _function(self, where: tuple[str, str], name: str, label: str, smem: int):
        cubin, suffix = where
        if smem > self.smem_optin:
            raise CompileError(
                f"{label}: needs {smem} bytes of shared memory, the device allows "
                f"{self.smem_optin} per block"
            )
        # CuPy loads a module, and sets a function's attributes, on the device current then:
        # this context's device, not the calling thread's (a kernel whose shared-memory limit
        # was raised on another GPU fails to launch here with CUDA_ERROR_INVALID_VALUE).
        with self._lock:
            fn = self._functions.get(cubin, {}).get(name + suffix)
        if fn is None:
            with self.device:
                fn = self._load(cubin).get_function(name + suffix)
            with self._lock:
                if cubin in self._modules:  # (not dropped meanwhile)
                    self._functions.setdefault(cubin, {})[name + suffix] = fn
        if smem > 48 << 10 and fn.max_dynamic_shared_size_bytes < smem:
            with self.device:
                fn.max_dynamic_shared_size_bytes = smem
        return fn

    @property
    def capture_stream(self):
        """This thread's stream for capturing graphs (not the legacy default stream, which
        cannot capture; one per thread, so sessions run by several threads capture apart)."""
        stream = getattr(self._local, "capture", None)
        if stream is None:
            with self.device:
                stream = self._local.capture = self.cp.cuda.Stream(non_blocking=True)
        return stream

    def stack(self, arrays, shape, dtype):
        """Host arrays concatenated along axis 0 (`shape`, `dtype`, checked by the caller) into
        one new device array: one copy per array on the current stream, asynchronous from
        page-locked memory. The host arrays are kept alive until the stream has copied them
        (a pooled frame must not be rewritten under a copy in flight)."""
        import numpy as np

        cp = self.cp
        runtime = cp.cuda.runtime
        pinned_type = cp.cuda.PinnedMemoryPointer
        enqueue = _enqueue_copy()
        kept = []
        with self.device:
            out = cp.empty(shape, dtype)
            stream = cp.cuda.get_current_stream()
            ptr = out.data.ptr
            for a in arrays:
                a = np.ascontiguousarray(a)
                n = a.nbytes
                if n:
                    src = a.__array_interface__["data"][0]
                    base = a.base
                    while isinstance(base, np.ndarray):
                        base = base.base
                    # Page-locked: the copy is only enqueued, so the call keeps the GIL (a
                    # release per frame is a wait for the GIL per frame in a busy app). Where
                    # the driver refuses (no context current on this thread yet: the runtime
                    # makes it current lazily), CuPy's call does it and raises what it must.
                    if (
                        enqueue is None
                        or (type(base) is not pinned_type and not self.locked(src, n))
                        or enqueue(ptr, src, n, stream.ptr)
                    ):
                        runtime.memcpyAsync(ptr, src, n, runtime.memcpyHostToDevice, stream.ptr)
                ptr += n
                kept.append(a)
            done = cp.cuda.Event(block=False, disable_timing=True)
            done.record(stream)
        with self._kept_lock:
            while self._kept and self._kept[0][0].done:
                self._kept.popleft()
            self._kept.append((done, kept))
        return out

    def upload(self, host, wait: bool = True, split_tf32: bool = False):
        """A new device array holding the host array `host`, copied through two page-locked
        buffers in turn — the CPU fills one while the copy engine reads the other; small
        arrays share a buffer, each at its own offset — instead of CUDA's synchronous copy
        from pageable memory (a session read back from the cache uploads its weights from a
        mapped file: ResNet-18's weights in 43 arrays; docs/cuda.md, "Warm starts"). `wait`:
        return once the copy is done; else it is in flight on the current stream until
        `wait_uploads` (a plan calls it before its first run). `split_tf32`: a float32 `host`
        becomes two tf32 parts, big then small, in an array of shape (2, *host.shape), split
        on the GPU (kernels/split_tf32.cu) once the copy has arrived: half the bytes to pack,
        keep and upload that the parts made on the host would take."""
        import numpy as np

        cp = self.cp
        host = np.ascontiguousarray(host)
        n = host.nbytes
        if split_tf32:
            if host.dtype != np.float32:
                raise TypeError(f"split_tf32 takes float32 weights, got {host.dtype}")
            self.prefetch(_split_source(), "split_tf32", "split_tf32")
        with self.device:
            out = cp.empty((2, *host.shape) if split_tf32 else host.shape, host.dtype)
            if n == 0:
                return out
            flat = host.reshape(-1).view(np.uint8)
            runtime = cp.cuda.runtime
            with self._stage_lock:
                if self._stages is None:
                    block = empty_pinned(cp, (2 * STAGE_CHUNK,), np.uint8)  # one allocation
                    self._stages = [
                        (
                            block[i * STAGE_CHUNK : (i + 1) * STAGE_CHUNK],
                            cp.cuda.Event(block=False, disable_timing=True),
                        )
                        for i in range(2)
                    ]
                stream = cp.cuda.get_current_stream()
                at = 0
                while at < n:
                    if self._stage_at >= STAGE_CHUNK:  # full: the other buffer, once read
                        self._stage, self._stage_at = 1 - self._stage, 0
                        self._stages[self._stage][1].synchronize()
                    buf, done = self._stages[self._stage]
                    pos = self._stage_at
                    m = min(STAGE_CHUNK - pos, n - at)
                    np.copyto(buf[pos : pos + m], flat[at : at + m])
                    runtime.memcpyAsync(
                        out.data.ptr + at,
                        buf.ctypes.data + pos,
                        m,
                        runtime.memcpyHostToDevice,
                        stream.ptr,
                    )
                    done.record(stream)
                    at += m
                    self._stage_at = -(-(pos + m) // 256) * 256
                if split_tf32:  # split once its copies are in (`wait_uploads`)
                    copied = cp.cuda.Event(block=False, disable_timing=True)
                    copied.record(stream)
                    self._splits.append((out, host.size, copied))
            if wait:
                stream.synchronize()
        if wait and split_tf32:
            self.wait_uploads()
        return out

    def wait_uploads(self) -> None:
        """Wait until every copy `upload` queued has arrived (and the weights to split are
        split)."""
        with self._stage_lock:
            for _, done in self._stages or ():
                done.synchronize()
            splits, self._splits = self._splits, []
        if splits:
            import numpy as np

            self.flush()
            fn = self.function(_split_source(), "split_tf32", "split_tf32")
            with self.device:
                stream = self.cp.cuda.get_current_stream()
                for array, n, copied in splits:
                    stream.wait_event(copied)
                    blocks = min(-(-n // 256), 4 * self.sm_count)
                    fn((blocks,), (256,), (array, np.uint64(n)), stream=stream)
                stream.synchronize()

    def wait_host_reads(self) -> None:
        """Wait until every asynchronous copy from host memory (`stack`) has read its array."""
        with self._kept_lock:
            kept, self._kept = self._kept, collections.deque()
        for done, _ in kept:
            done.synchronize()

    def lock_host(self, array):
        """Page-lock the memory of a host array CUDA did not allocate (cudaHostRegister,
        portable: for every device), so copies from it are asynchronous, at the bus's speed.
        Returns the call that undoes it (before the memory is unmapped)."""
        runtime = self.cp.cuda.runtime
        ptr, n = array.__array_interface__["data"][0], array.nbytes
        with self.device:
            runtime.hostRegister(ptr, n, 1)  # cudaHostRegisterPortable
        with self._kept_lock:
            starts, ends = (list(x) for x in self._locked)
            i = bisect.bisect(starts, ptr)
            starts.insert(i, ptr)
            ends.insert(i, ptr + n)
            self._locked = (starts, ends)

        def unlock() -> None:
            with self._kept_lock:
                starts, ends = (list(x) for x in self._locked)
                if ptr not in starts:
                    return
                i = starts.index(ptr)
                del starts[i], ends[i]
                self._locked = (starts, ends)
            with self.device:
                runtime.hostUnregister(ptr)

        return unlock

    def locked(self, ptr: int, n: int) -> bool:
        """Whether [ptr, ptr + n) lies in memory page-locked by `lock_host`."""
        starts, ends = self._locked
        i = bisect.bisect(starts, ptr) - 1
        return i >= 0 and ptr + n <= ends[i]

    def sync(self) -> None:
        with self.device:
            self.cp.cuda.get_current_stream().synchronize()


@functools.cache
def _enqueue_copy():
    """The driver's cuMemcpyHtoDAsync called without releasing the GIL (ctypes.PyDLL), or None
    where the driver library cannot be loaded that way (CuPy's copy is used then)."""
    import ctypes

    try:
        lib = ctypes.PyDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
        fn = lib.cuMemcpyHtoDAsync_v2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def _programs(todo: list, weight: dict[str, int]) -> list[list]:
    """The NVRTC programs to compile `todo` (key, source, label, entry) items in: as many as
    the compile threads, at least MIN_PER_PROGRAM weight units each; heaviest kernels first,
    each to the lightest program, so that the programs finish together."""
    kinds: dict[tuple, list] = {}
    for item in todo:
        kinds.setdefault(_option_kind(item[1]), []).append(item)
    total = sum(weight[i[0]] for i in todo)
    programs = []
    for kind in kinds.values():  # (a program is compiled with one set of options)
        share = sum(weight[i[0]] for i in kind)
        chunks = max(1, min(round(COMPILE_THREADS * share / total), share // MIN_PER_PROGRAM))
        groups: list[list] = [[] for _ in range(chunks)]
        loads = [0] * chunks
        for item in sorted(kind, key=lambda item: (-weight[item[0]], -len(item[1]))):
            c = loads.index(min(loads))
            groups[c].append(item)
            loads[c] += weight[item[0]]
        programs += [group for group in groups if group]
    return programs


def _write_ref(path: Path, text: str) -> None:
    """A small file written whole or not at all (a per-thread temporary name, then a rename:
    cheaper than mkstemp for the hundreds a big model writes)."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{path.name}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _namespaced(i: int, source: str, entry: str) -> str:
    """`source` as part `i` of a program of many: in namespace p{i}, its entry `entry` renamed
    `entry_{i}` (an extern "C" name is global), its macros undefined after it."""
    declared = rf"(__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?){re.escape(entry)}\s*\("
    renamed, n = re.subn(declared, rf"\g<1>{entry}_{i}(", source, count=1)
    if n != 1:
        raise CompileError(f"kernel entry {entry!r} not found in its source")
    macros = re.findall(r"^\s*#\s*define\s+(\w+)", source, re.M)
    return f"namespace p{i} {{\n{renamed}\n}}\n" + "".join(f"#undef {m}\n" for m in macros)


# Context.upload copies through two page-locked buffers of STAGE_CHUNK bytes.
STAGE_CHUNK = 2 << 20


def empty_pinned(cp, shape, dtype):
    """A NumPy array in page-locked memory, as cupyx.empty_pinned makes it (importing cupyx
    imports SciPy: a third of a second on the first read-back)."""
    import numpy as np

    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    mem = cp.cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
    return np.ndarray(tuple(shape), dtype, mem)


@functools.cache
def nvrtc_options() -> tuple[str, ...]:
    """OPTIONS, and -minimal where this NVRTC has it (it only saves compile time)."""
    from cupy_backends.cuda.libs import nvrtc

    version = tuple(nvrtc.getVersion())
    return (*OPTIONS, "-minimal") if version >= MINIMAL_SINCE else OPTIONS


def _option_kind(source: str) -> tuple[bool, bool]:
    """What sets a source's compile options apart (FAST_COMPILE, ARCH_SPECIFIC)."""
    return FAST_COMPILE in source, ARCH_SPECIFIC in source


def compile_cubin(source: str, arch: str, label: str = "kernel") -> bytes:
    """NVRTC: CUDA C source -> cubin for `arch` (sm_XX). Needs no GPU. A source marked
    FAST_COMPILE is compiled with less optimization, where this NVRTC can; one marked
    ARCH_SPECIFIC for the architecture-specific target (sm_90 -> sm_90a)."""
    from cupy_backends.cuda.libs import nvrtc

    if ARCH_SPECIFIC in source and not arch.endswith("a"):
        arch += "a"
    options = [f"--gpu-architecture={arch}", *nvrtc_options()]
    if FAST_COMPILE in source and tuple(nvrtc.getVersion()) >= FAST_COMPILE_SINCE:
        options.append("--Ofast-compile=mid")
    prog = nvrtc.createProgram(source, f"{label}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(source.split("\n")))
            raise CompileError(
                f"NVRTC could not compile {label}: {exc}\n{log}\n{numbered}"
            ) from exc
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@functools.cache
def _split_source() -> str:
    """kernels/split_tf32.cu as it is (no template: nothing to render at a warm start)."""
    return (Path(__file__).parent / "kernels" / "split_tf32.cu").read_text()


# id(device array) -> (the array, its contents on the host, how it was uploaded: `upload`'s
# keywords): the constants of a session being
# pickled (CUDAKernel.__getstate__ puts them here, snapshot_done takes them out), so that
# keeping a session (tinydl/snapshot.py) reads nothing back from the GPU.
host_copies: dict[int, tuple[Any, Any, dict]] = {}


def _array_name(a) -> tuple:
    """A device array in a pickled session: its device and a host copy of its contents."""
    kept = host_copies.get(id(a))
    if kept is not None and kept[0] is a:
        return ("tinydl.backends.cuda.context:array_from_host", a.device.id, *kept[1:])
    return ("tinydl.backends.cuda.context:array_from_host", a.device.id, a.get())


def array_from_host(index: int, host, how: dict | None = None):
    """A device array of a session read back (tinydl/snapshot.py), uploaded as `how` says;
    its plans wait for the copies (`Plan.finish`)."""
    return get_context(index).upload(host, wait=False, **(how or {}))


_contexts: dict[int, Context] = {}
_context_lock = threading.Lock()


def get_context(index: int | None = None) -> Context:
    """The process's CUDA context on device `index` (None: $TINYDL_CUDA_DEVICE, default 0),
    made on first use."""
    if index is None:
        raw = os.environ.get(DEVICE_ENV, "0")
        try:
            index = int(raw)
        except ValueError:
            raise BackendUnavailableError(
                f"{DEVICE_ENV}={raw!r}: expected a device index (0, 1, ...)"
            ) from None
    with _context_lock:
        if index not in _contexts:
            _contexts[index] = Context(index)
        return _contexts[index]
