"""Backends (delegates) by name. A backend module is imported only when asked for."""

from __future__ import annotations

import importlib

from tinydl.backends.base import Backend, CompileOptions, Kernel, Support
from tinydl.errors import BackendUnavailableError

# name -> "module:Class"; modules import their heavy libraries lazily.
KNOWN: dict[str, str] = {
    "cpu": "tinydl.backends.cpu:CPUBackend",
    "webgpu": "tinydl.backends.webgpu:WebGPUBackend",
    "cuda": "tinydl.backends.cuda:CUDABackend",
}

_instances: dict[str, Backend] = {}


def register_backend(backend: Backend) -> None:
    """Make a backend instance available by its name (plug-ins and tests)."""
    KNOWN.setdefault(backend.name, f"{type(backend).__module__}:{type(backend).__name__}")
    _instances[backend.name] = backend


def unregister_backend(name: str) -> None:
    _instances.pop(name, None)
    if name != "cpu":
        KNOWN.pop(name, None)


def get_backend(name: str) -> Backend:
    """The backend instance for `name`; BackendUnavailableError if unknown."""
    if name not in KNOWN:
        raise BackendUnavailableError(
            f"unknown backend {name!r}: expected one of {', '.join(KNOWN)}"
        )
    if name not in _instances:
        module, cls = KNOWN[name].split(":")
        _instances[name] = getattr(importlib.import_module(module), cls)()
    return _instances[name]


__all__ = [
    "Backend",
    "CompileOptions",
    "Kernel",
    "Support",
    "KNOWN",
    "get_backend",
    "register_backend",
    "unregister_backend",
]
