"""Backends (delegates) by name. A backend module is imported only when asked for."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from tinydl.backends.base import Backend, CompileOptions, Kernel, Support
from tinydl.errors import BackendUnavailableError

# name -> "module:Class"; modules import their heavy libraries lazily.
KNOWN: dict[str, str] = {
    "numpy": "tinydl.backends.cpu:CPUBackend",
    "onnxruntime": "tinydl.backends.cpu.ort:OrtBackend",
    "webgpu": "tinydl.backends.webgpu:WebGPUBackend",
    "cuda": "tinydl.backends.cuda:CUDABackend",
}

BUILT_IN = frozenset(KNOWN)
# "cpu" is the fastest CPU path this install has: onnxruntime where it is installed, with the
# NumPy reference (which runs every op) after it; "numpy" names the reference alone.
CPU = "cpu"


def cpu_path() -> tuple[str, ...]:
    """What "cpu" means here: ("onnxruntime", "numpy"), or ("numpy",) without onnxruntime."""
    return ("onnxruntime", "numpy") if get_backend("onnxruntime").available() else ("numpy",)


def expand(names) -> list[str]:
    """Backend names with "cpu" replaced by the CPU path (`cpu_path`), duplicates dropped."""
    out: list[str] = []
    for name in names:
        for n in cpu_path() if name == CPU else (name,):
            if n not in out:
                out.append(n)
    return out


_instances: dict[str, Backend] = {}


def register_backend(backend: Backend) -> None:
    """Make a backend instance available by its name (plug-ins and tests)."""
    KNOWN.setdefault(backend.name, f"{type(backend).__module__}:{type(backend).__name__}")
    _instances[backend.name] = backend


def unregister_backend(name: str) -> None:
    """Forget a registered instance; a built-in backend stays known (a fresh instance is made
    on next use), a plug-in is gone."""
    _instances.pop(name, None)
    if name not in BUILT_IN and name != CPU:
        KNOWN.pop(name, None)


def get_backend(name: str) -> Backend:
    """The backend instance for `name`; BackendUnavailableError if unknown. "cpu" gives the NumPy
    backend (host memory: what a caller moving tensors to or from the CPU needs)."""
    if name == CPU:
        name = "numpy"
    if name not in KNOWN:
        raise BackendUnavailableError(
            f"unknown backend {name!r}: expected one of {', '.join([CPU, *KNOWN])}"
        )
    if name not in _instances:
        module, cls = KNOWN[name].split(":")
        _instances[name] = getattr(importlib.import_module(module), cls)()
    return _instances[name]


@dataclass(frozen=True)
class BackendInfo:
    """What `tinydl.list_backends()` reports of one backend."""

    name: str
    available: bool
    devices: tuple[str, ...]
    reason: str  # why it is unavailable ("" when available)
    memory: str  # where its tensors live ("host" for the cpu)


def list_backends() -> list[BackendInfo]:
    """Every known backend: whether it can run here, its devices, or why not."""
    found = []
    for name in KNOWN:
        try:
            backend = get_backend(name)
            ok = backend.available()
            found.append(
                BackendInfo(
                    name,
                    ok,
                    tuple(backend.devices()) if ok else (),
                    "" if ok else backend.unavailable_reason() or "no device",
                    backend.memory,
                )
            )
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is reported, not raised
            found.append(BackendInfo(name, False, (), f"cannot be loaded: {exc}", "?"))
    return found


def to_device(array, backend: str):
    """A NumPy array as a tensor of `backend` (e.g. "webgpu", "cuda"), to feed sessions with no
    upload per run; `to_host` brings any backend's tensor back."""
    return get_backend(backend).to_device(array)


def to_host(tensor):
    """A backend's tensor (or a NumPy array) as a NumPy array."""
    import numpy as np

    if isinstance(tensor, np.ndarray):
        return tensor
    for name in list(_instances):
        backend = _instances[name]
        if backend.is_device_tensor(tensor):
            return backend.to_host(tensor)
    return np.asarray(tensor)


__all__ = [
    "CPU",
    "BackendInfo",
    "cpu_path",
    "expand",
    "list_backends",
    "to_device",
    "to_host",
    "Backend",
    "CompileOptions",
    "Kernel",
    "Support",
    "KNOWN",
    "get_backend",
    "register_backend",
    "unregister_backend",
]
