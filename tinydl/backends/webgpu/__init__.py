"""The webgpu backend: WGSL kernels from templates through wgpu-py, all intermediates on the GPU.

Importable without wgpu: `available()` is then False and `unavailable_reason()` says what to
install. See docs/webgpu.md for the design and what each op supports.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from tinydl.backends.base import Backend, CompileOptions, Kernel, Support
from tinydl.errors import BackendUnavailableError
from tinydl.ir.graph import Graph, Node

# Logical dtypes a tensor may have on this backend (WGSL has f32, f16 and i32); uint8 is held
# packed, for casts and views only (frames go up and come down as bytes); int64 and bool are
# held as i32 (webgpu/tensor.py).
DTYPES = ("float32", "float16", "int32", "int64", "bool", "uint8")
BYTE_OPS = ("Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


class WebGPUBackend(Backend):
    """`WebGPUBackend()` runs on the default adapter (TINYDL_WEBGPU_ADAPTER, else the
    high-performance one); `on_device(i)` gives the backend on adapter i of `device_names()`,
    with a memory of its own ("webgpu:i": its tensors live on that device only)."""

    name = "webgpu"

    def __init__(self, adapter: int | None = None):
        self._reason: str | None = None
        self.adapter = adapter
        self.memory = "webgpu" if adapter is None else f"webgpu:{adapter}"
        self._on: dict[int, WebGPUBackend] = {}

    # -- device --------------------------------------------------------------------------------
    def _context(self):
        from tinydl.backends.webgpu.context import get_context

        return get_context(self.adapter)

    def available(self) -> bool:
        if self._reason is None:
            missing = [m for m in ("wgpu", "jinja2") if importlib.util.find_spec(m) is None]
            if missing:
                self._reason = f"{', '.join(missing)} not installed: pip install 'tinydl[webgpu]'"
            else:
                try:
                    self._context()
                    self._reason = ""
                except BackendUnavailableError as exc:
                    self._reason = str(exc)
                except Exception as exc:  # noqa: BLE001 - a broken driver must not break import
                    self._reason = f"no Vulkan/Metal/DX12 adapter found ({exc})"
        return not self._reason

    def unavailable_reason(self) -> str:
        self.available()
        return self._reason or ""

    def devices(self) -> list[str]:
        if not self.available():
            return []
        ctx = self._context()
        feats = ", ".join(sorted(ctx.features)) or "no optional features"
        return [f"{ctx.name}; {feats}"]

    def device_names(self) -> list[str]:
        from tinydl.backends.webgpu.context import adapter_names

        if importlib.util.find_spec("wgpu") is None:
            return []
        try:
            return adapter_names()
        except Exception:  # noqa: BLE001 - a broken driver lists no adapter
            return []

    def on_device(self, index: int) -> WebGPUBackend:
        if index not in self._on:
            self._on[index] = WebGPUBackend(index)
        return self._on[index]

    # -- placement -----------------------------------------------------------------------------
    def supports(self, node: Node, graph: Graph) -> Support:
        from tinydl.backends.webgpu.kernels import REGISTRY

        kd = REGISTRY.get(node.op)
        if kd is None:
            return Support(False, f"no WebGPU kernel for {node.op}")
        for name in [*node.inputs, *node.outputs]:
            if not name or name in graph.initializers:
                continue
            v = graph.value(name)
            dtype = None if v is None else v.dtype
            if dtype not in DTYPES:
                return Support(False, f"{name} has dtype {dtype}; WebGPU holds {', '.join(DTYPES)}")
            if dtype == "uint8" and node.op not in BYTE_OPS:
                return Support(False, f"{node.op} on uint8 is not implemented (Cast and views are)")
            if dtype == "float16" and not self._context().has_f16:
                return Support(False, "float16 needs the adapter's shader-f16 feature")
        if kd.supports is not None:
            return kd.supports(node, graph)
        return Support(True)

    def compile(self, subgraph: Graph, options: CompileOptions) -> Kernel:
        from tinydl.backends.webgpu.program import WebGPUKernel

        ctx = self._context()
        if options.precision == "fp16" and not ctx.has_f16:
            import warnings

            warnings.warn(
                f"precision='fp16': the adapter {ctx.name} lacks shader-f16, so tensors stay fp32",
                stacklevel=3,
            )
        return WebGPUKernel(ctx, subgraph, options)

    # -- tensors -------------------------------------------------------------------------------
    def to_device(self, array: np.ndarray) -> Any:
        from tinydl.backends.webgpu.tensor import LOGICAL, GPUTensor, Storage, to_storage

        array = np.asarray(array)
        if array.dtype.name not in LOGICAL:
            raise TypeError(f"WebGPU tensors hold {', '.join(LOGICAL)}, got {array.dtype}")
        ctx = self._context()
        stype = LOGICAL[array.dtype.name]
        storage = Storage(ctx, ctx.upload(to_storage(array, stype)))
        return GPUTensor(storage, array.shape, array.dtype.name, stype)

    def to_host(self, tensor: Any) -> np.ndarray:
        return tensor.numpy()

    def is_device_tensor(self, tensor: Any) -> bool:
        from tinydl.backends.webgpu.tensor import GPUTensor

        # A tensor of another adapter's device is not this one's (it is read back, then uploaded).
        return isinstance(tensor, GPUTensor) and tensor.storage.ctx.index == self.adapter

    def sync(self) -> None:
        """Wait for all submitted GPU work (for timing a device-resident loop)."""
        self._context().sync()


__all__ = ["WebGPUBackend"]
