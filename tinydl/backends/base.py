"""The Backend interface every delegate implements (cpu, webgpu, cuda)."""

from __future__ import annotations

import functools
import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, InvalidInputError
from tinydl.ir.graph import Graph, Node

# The memory graph inputs come from and host outputs go to (NumPy arrays).
HOST = "host"
# The most CPU threads a run takes by default: NumPy's and onnxruntime's gains flatten out
# beyond this on the models tinydl runs, and a busy machine loses more to oversubscription.
MAX_DEFAULT_THREADS = 8


@dataclass(frozen=True)
class Support:
    """A backend's answer to "can you run this node?"; `reason` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def content_key(array: np.ndarray) -> tuple:
    """A cache key for an array's content (shape, dtype, SHA-256 digest of the bytes). A GPU
    kernel caches its uploaded constants across plans (one plan per set of input shapes) by
    node, role and this, so a table made for one input shape (Resize taps, gather offsets) is
    never reused for another, while weights are uploaded once. SHA-256, not BLAKE2: CPUs with
    SHA instructions hash 2-3x faster with it (a ResNet's weights are ~100 MB to key)."""
    a = np.ascontiguousarray(array)
    return (a.shape, a.dtype.str, hashlib.sha256(a.view(np.uint8).data).digest()[:16])


def to_half(array) -> np.ndarray:
    """`array` as float16, bit for bit what `astype(np.float16)` gives, but fast where values
    fall in fp16's subnormal range (|x| < 2^-14: small weights, the low parts of split weights),
    where NumPy's conversion is 10-20x slower than for normal values: those are rounded as
    integers of 2^-24 (round half to even, as IEEE conversion does)."""
    x = np.ascontiguousarray(array)
    if x.dtype not in (np.float32, np.float64):
        return x.astype(np.float16)
    a = np.abs(x)
    small = (a < 2.0**-14) & (x != 0)
    if not small.any():
        return x.astype(np.float16)
    bits = np.where(small, x.dtype.type(0), x).astype(np.float16).view(np.uint16)
    tiny = np.rint(np.where(small, a, 0) * 2.0**24).astype(np.uint16)  # exact: a power of 2
    tiny |= np.signbit(x).astype(np.uint16) << 15
    return np.where(small, tiny, bits).view(np.float16)


@dataclass(frozen=True)
class CompileOptions:
    """What a backend compiles with: the precision and its backend options (`extra`).

    Backend options come from `tinydl.compile(..., backend_options={"webgpu": {...}})`, over
    the environment variables of ENVIRONMENT (read once, when a session compiles). Kernel
    builders read them through `Build.option`, never from the environment. Keys:
    - every backend: "timing" ("ops" or "total": GPU timestamps per op or per run; set by
      `profile=True`), "snapshot" (True when the session cache will keep the session; the
      onnxruntime backend then keeps onnxruntime's optimized model, which the session read
      back loads with onnxruntime's optimizations off).
    - numpy and onnxruntime: "threads" (int: NumPy's BLAS threads during a run, onnxruntime's
      intra-op threads; default `default_threads()`; set for both by
      `tinydl.compile(threads=N)`).
    - webgpu and cuda: "max_plans" (int, default 16: plans, one per set of input shapes, kept
      per compiled partition; the least recently used is freed first, with its buffers and
      per-shape tables); "shape_inputs" (set by the session, not by users: the partition's
      inputs computed from shapes alone in the whole graph, `Partition.shape_inputs`).
    - webgpu: "fuse_elementwise" (bool, default True), "fuse_depthwise" (bool, default
      True: a depthwise convolution computed inside the 1x1 convolution that alone reads
      it), "fold_shortcuts" (bool, default True: a residual that is a zero Pad adding
      channels or a k x k MaxPool of stride k, read through by the convolution's epilogue),
      "fuse_channels_last" (bool, default True: Transposes between NHWC and NCHW folded into
      a convolution's loads and stores), "concat_in_place" (bool, default True: a Concat's
      inputs written straight into their slices of its output where they can be),
      "conv_configs" ({node name or "*":
      "TX,TY,PY,OCV,CC4[,f16][,KS]" blocking}), "accumulate" ("f16" for fp16 accumulation at fp16),
      "winograd" ("1", "0" or a blocking; or {node name or "*": ...}), "shaders" ("compute",
      the default; "fragment": every node the render path takes drawn into textures; "auto":
      per node by measurement, webgpu/shaders.py), "weights" (the render path's conv weights:
      "uniform", the default, "texture" or "const"), "early_submit" ("FIRST,GROWTH",
      default "8,1.5": a run submits its first 8 steps while it records the rest, then 12
      more, 18 more, and so on; 0 for one submission a run), "conv_unroll" (int, default 64:
      the fma blocks conv_direct unrolls before it loops over a chunk's input vec4, then over
      the kernel rows; 0 unrolls everything), "conv_split" (int, default 16: the most slices
      of threads a conv_direct workgroup splits its input channels between when the
      dispatch has fewer than "conv_split_threads" threads, default 65536; 1: no split).
    - cuda: "cuda_graphs" (bool, default True), "chain_fusion" (bool, default True),
      "chain_tile" ("TH,TW,THREADS[,UNROLL]"), "chain_wgmma" (bool, default True: on
      compute capability 9.0 the chain's three layers run on warpgroup MMAs; False keeps
      mma.sync, as on other GPUs), "chain_reuse" (bool, default True: on warpgroups, layer 2
      loads each row of layer 1 into registers once for all three row offsets of its taps,
      where its region is a whole number of 16-pixel segments wide; False reads A from shared
      memory), "chain_fold" (bool, default True: on warpgroups, layer 3 multiplies whole rows
      with its column offsets folded into N, and sums them across lanes, where they fit),
      "chain_split" ("ROWS/TILES", default from a cost model: for a folded layer 3 on
      warpgroups, the rows of layer 3 (multiples of 4) and the m64 tiles of the next tile's
      layer 1 each warpgroup takes in the phase they share, e.g. "20,0,0,0/0,4,4,5"),
      "conv_tensor_cores" (bool, default True),
      "conv_exact_weights" (bool, default False: at fp16, tensor-core convolutions keep the
      float32 weights as hi + lo fp16 parts instead of rounding them to fp16),
      "conv_k_step" (32 or 64: the K columns an fp16 tensor-core convolution multiplies a
      step; default 64 where a thread's share of a step is channels of one tap, else 32),
      "conv_shared_kernels" (bool, default True: tensor-core convolutions that differ only in
      their input channels, three or more in a plan, share one kernel; False specializes each),
      "generic_kernels" ("first", default: where the own kernel of a convolution, elementwise
      op or reduction is not compiled yet, a plan runs a generic one, every extent (and a
      convolution's epilogue) an argument, and switches to the own kernel once it is compiled
      on background threads; "off": wait for the own kernels;
      "only": never switch; or TINYDL_CUDA_GENERIC),
      "fuse_elementwise" (bool, default True: runs of elementwise ops as one launch).
    """

    precision: str = "fp32"
    extra: dict[str, Any] = field(default_factory=dict)
    # At fp16: intermediate values kept in float32 storage (precision="auto"'s decision).
    fp32_values: frozenset[str] = frozenset()


# Thread-count variables a user sets for BLAS/OpenMP libraries; default_threads() honours them.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def default_threads() -> int:
    """CPU threads when none are asked for: the first of THREAD_VARIABLES set to a whole number,
    else one per physical core this process may run on (hyperthread siblings count once), at
    most MAX_DEFAULT_THREADS. NumPy's own default, a BLAS thread per logical CPU of the whole
    machine, ran some models 5-14x slower than one thread on a busy 2-core machine."""
    for var in THREAD_VARIABLES:
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as f, open(f"{topology}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))  # no topology (not Linux): a logical CPU counts as a core
    return max(1, min(len(cores), MAX_DEFAULT_THREADS))


def threads_option(options: CompileOptions) -> int:
    """The "threads" backend option as a count (default_threads() when not set)."""
    value = options.extra.get("threads")
    if value is None:
        return default_threads()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {value!r}")
    return value


# Environment variables that set backend options (for sweeps and comparisons from a shell):
# variable -> (backend, value -> options).
ENVIRONMENT: dict[str, tuple[str, Any]] = {
    "TINYDL_WEBGPU_ELEMENTWISE": ("webgpu", lambda v: {"fuse_elementwise": v != "off"}),
    "TINYDL_WEBGPU_DEPTHWISE": ("webgpu", lambda v: {"fuse_depthwise": v != "off"}),
    "TINYDL_WEBGPU_DEPTHWISE_AFTER": ("webgpu", lambda v: {"fuse_depthwise_after": v != "off"}),
    "TINYDL_WEBGPU_CONV": ("webgpu", lambda v: {"conv_configs": {"*": v}}),
    "TINYDL_WEBGPU_ACCUMULATE": ("webgpu", lambda v: {"accumulate": v}),
    "TINYDL_WEBGPU_WINOGRAD": ("webgpu", lambda v: {"winograd": v}),
    "TINYDL_WEBGPU_SHADERS": ("webgpu", lambda v: {"shaders": v}),
    "TINYDL_WEBGPU_WEIGHTS": ("webgpu", lambda v: {"weights": v}),
    "TINYDL_WEBGPU_SUBMIT": ("webgpu", lambda v: {"early_submit": v}),
    "TINYDL_WEBGPU_UNROLL": ("webgpu", lambda v: {"conv_unroll": v}),
    "TINYDL_WEBGPU_SPLIT": ("webgpu", lambda v: {"conv_split": v}),
    "TINYDL_CUDA_ELEMENTWISE": ("cuda", lambda v: {"fuse_elementwise": v != "off"}),
    "TINYDL_CUDA_CHAIN": (
        "cuda",
        lambda v: {"chain_fusion": False} if v == "off" else {"chain_tile": v},
    ),
    "TINYDL_CUDA_GENERIC": ("cuda", lambda v: {"generic_kernels": v}),
    "TINYDL_CUDA_WGMMA": ("cuda", lambda v: {"chain_wgmma": v != "off"}),
    "TINYDL_CUDA_FOLD": ("cuda", lambda v: {"chain_fold": v != "off"}),
}


def environment_options(backend: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The backend options that ENVIRONMENT's variables set for `backend`."""
    environ = os.environ if environ is None else environ
    options: dict[str, Any] = {}
    for var, (name, parse) in ENVIRONMENT.items():
        if name == backend and environ.get(var):
            options.update(parse(environ[var]))
    return options


class Kernel(ABC):
    """A compiled partition: runs its subgraph on the backend's tensors."""

    @abstractmethod
    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Map input value names to backend tensors; return output names to backend tensors."""

    def run_host(self, inputs: dict[str, Any], host: Collection[str]) -> dict[str, Any]:
        """Run; the outputs named in `host` come back as NumPy arrays. A GPU kernel reads them
        back right after its compute; this default runs and leaves them as they are."""
        return self.run(inputs)

    def profile(self) -> dict[str, Any]:
        """Init-cost phases ("init") and per-op device times of the last timed run ("ops")."""
        return {"init": {}, "ops": None}

    # The session cache (tinydl/snapshot.py) keeps a compiled kernel between processes when
    # its class says it can: pickled, with what cannot be pickled dropped in __getstate__ and
    # made again in `restored()` (called once the whole session is unpickled).
    snapshot: bool = False

    def restored(self) -> None:  # noqa: B027 - most kernels keep everything they need
        """Remake what __getstate__ left out; the kernel runs after this."""

    def snapshot_done(self, later: bool = False) -> None:  # noqa: B027 - most keep nothing
        """The session has been pickled (or will not be): drop what was kept for that.
        `later`: it will be pickled again after the first run, so a kernel without a plan yet
        keeps what that run's plan needs."""


def stacked_shape(arrays: Sequence[np.ndarray]) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of `arrays` concatenated along axis 0 (one dtype, one trailing
    shape, at least one axis each), or an InvalidInputError saying which array differs."""
    if not arrays:
        raise InvalidInputError("nothing to stack: expected at least one array")
    first = arrays[0]
    for i, a in enumerate(arrays):
        if a.ndim == 0:
            raise InvalidInputError(f"array {i} is 0-d: stacking needs a batch axis")
        if a.dtype != first.dtype or a.shape[1:] != first.shape[1:]:
            raise InvalidInputError(
                f"array {i} is {a.dtype}{list(a.shape)}; stacking expected "
                f"{first.dtype}[{', '.join(['N', *map(str, first.shape[1:])])}] like array 0"
            )
    return (sum(a.shape[0] for a in arrays), *first.shape[1:]), first.dtype


@functools.cache
def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo; else what `platform` says, which on
    Linux runs `uname -p` in a subprocess: once a process at most)."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Backend(ABC):
    name: str = ""
    # The memory this backend's tensors live in: HOST (NumPy arrays) unless the backend has a
    # device memory of its own. Backends that share a memory exchange tensors with no transfer;
    # a value crosses between two memories at a partition boundary (through the host).
    memory: str = HOST

    @abstractmethod
    def available(self) -> bool:
        """True when the backend's libraries and a device are present."""

    def unavailable_reason(self) -> str:
        return ""

    @abstractmethod
    def supports(self, node: Node, graph: Graph) -> Support: ...

    @abstractmethod
    def compile(self, subgraph: Graph, options: CompileOptions) -> Kernel: ...

    def devices(self) -> list[str]:
        """Human-readable names of the devices this backend would use."""
        return []

    def device_names(self) -> list[str]:
        """Every device this backend can be put on, by index (`tinydl.compile(device=
        "NAME:INDEX")`); a backend with no choice of devices lists the one it uses."""
        return self.devices() if self.available() else []

    def _snapshot_id(self) -> tuple:
        """How a pickled session names this backend (tinydl/snapshot.py)."""
        return ("tinydl.backends:backend_on", self.name, getattr(self, "index", None))

    def on_device(self, index: int) -> Backend:
        """This backend on device `index` of `device_names()` (checked by the caller). A backend
        with no choice of devices has only index 0: itself."""
        if index != 0:
            raise BackendUnavailableError(f"backend '{self.name}' has one device, index 0")
        return self

    def to_device(self, array: np.ndarray) -> Any:
        return array

    def to_host(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor)

    def to_host_later(self, tensor: Any) -> tuple[np.ndarray, Callable[[], None]]:
        """A copy to the host, enqueued: the array, filled once the returned call has
        returned (a GPU backend copies asynchronously after the work already enqueued; this
        default copies now)."""
        return self.to_host(tensor), _nothing

    def stack_to_device(self, arrays: Sequence[np.ndarray]) -> Any:
        """Host arrays of one dtype and trailing shape, concatenated along axis 0, as one
        tensor of this backend. A GPU backend copies each array straight into its place (no
        host concatenation); one array is taken as it is."""
        stacked_shape(arrays)
        if len(arrays) == 1:
            return self.to_device(arrays[0])
        return self.to_device(np.concatenate(arrays))

    def empty_host(self, shape: Any, dtype: Any = np.uint8) -> np.ndarray:
        """An uninitialized host array that this backend uploads from fastest (page-locked
        memory on cuda); plain NumPy memory by default."""
        return np.empty(shape, dtype)

    def lock_host(self, array: np.ndarray) -> Callable[[], None] | None:
        """Make host memory this backend did not allocate (a shared-memory frame block) upload
        as fast as `empty_host`'s, for as long as it stays mapped; returns the call that undoes
        it, or None where the backend has nothing to do."""
        return None

    def wait_host_reads(self) -> None:
        """Wait until the device has read every host array given to an asynchronous upload
        (`stack_to_device`): before memory another process owns is handed back."""
        return None

    def is_device_tensor(self, tensor: Any) -> bool:
        return False

    def adopt(self, tensor: Any) -> Any:
        """This backend's own tensor for a device tensor it accepts (e.g. another library's
        array over the same memory); the default takes it as it is."""
        return tensor


def _nothing() -> None:
    return None
