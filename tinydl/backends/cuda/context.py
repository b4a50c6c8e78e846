"""The CUDA device as the backend sees it: CuPy (memory pool, streams, events), NVRTC
compilation with an on-disk cache of compiled modules, and device properties.

CuPy is imported here and nowhere else at module level, so `import tinydl` never loads it.
Kernels are compiled by NVRTC straight to a cubin for the device's architecture and cached on
disk under a hash of (source, options, architecture, NVRTC version); a second process loads
the cubin instead of compiling. The cache lives in $TINYDL_CACHE_DIR/cuda (default
~/.cache/tinydl/cuda).
"""

from __future__ import annotations

import collections
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tinydl.errors import BackendUnavailableError

CACHE_ENV = "TINYDL_CACHE_DIR"
DEVICE_ENV = "TINYDL_CUDA_DEVICE"
OPTIONS = ("-std=c++17",)
# Loaded modules a device keeps (shapes are baked into kernels; see webgpu MAX_PIPELINES).
MAX_MODULES = 2048


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
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tinydl")
    return Path(root) / "cuda"


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
            # Graphs are captured on this stream (capture cannot use the legacy default stream).
            self.capture_stream = cupy.cuda.Stream(non_blocking=True)
        self.nvrtc_version = tuple(nvrtc.getVersion())
        self.arch = self._arch()
        # Loaded modules by source hash, least recently used first (plans hold their own).
        self._modules: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"compile_s": 0.0, "load_s": 0.0, "compiled": 0, "cache_hits": 0}

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
    def module(self, source: str, label: str = "kernel"):
        """A loaded module for CUDA C `source` (compiled once per source, architecture and
        NVRTC version, then read from the disk cache)."""
        key = hashlib.sha256(
            "\0".join([source, *OPTIONS, self.arch, repr(self.nvrtc_version)]).encode()
        ).hexdigest()[:32]
        with self._lock:
            mod = self._modules.get(key)
            if mod is not None:
                self._modules.move_to_end(key)
                return mod
            path = cache_dir() / f"{key}.cubin"
            if path.exists():
                self.stats["cache_hits"] += 1
            else:
                t0 = time.perf_counter()
                cubin = compile_cubin(source, self.arch, label)
                self.stats["compile_s"] += time.perf_counter() - t0
                self.stats["compiled"] += 1
                _atomic_write(path, cubin)
            t0 = time.perf_counter()
            with self.device:
                mod = self.cp.RawModule(path=str(path))
            self.stats["load_s"] += time.perf_counter() - t0
            self._modules[key] = mod
            while len(self._modules) > MAX_MODULES:
                self._modules.popitem(last=False)
            return mod

    def function(self, source: str, name: str, label: str = "kernel", smem: int = 0):
        fn = self.module(source, label).get_function(name)
        if smem > 48 << 10:
            if smem > self.smem_optin:
                raise CompileError(
                    f"{label}: needs {smem} bytes of shared memory, the device allows "
                    f"{self.smem_optin} per block"
                )
            fn.max_dynamic_shared_size_bytes = smem
        return fn

    def sync(self) -> None:
        with self.device:
            self.cp.cuda.get_current_stream().synchronize()


def compile_cubin(source: str, arch: str, label: str = "kernel") -> bytes:
    """NVRTC: CUDA C source -> cubin for `arch` (sm_XX). Needs no GPU."""
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(source, f"{label}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", *OPTIONS])
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
