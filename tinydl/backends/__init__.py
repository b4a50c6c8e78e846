"""Backends (delegates) by name. A backend module is imported only when asked for."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from tinydl.backends.base import HOST, Backend, CompileOptions, Kernel, Support
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


def backend_on(name: str, index: int | None) -> Backend:
    """The backend `name`, on device `index` when one is given (how a session read back from
    the session cache finds its backends)."""
    backend = get_backend(name)
    return backend if index is None else backend.on_device(index)


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
    # every device `tinydl.compile(device="NAME:INDEX")` can choose, by index
    device_names: tuple[str, ...] = ()


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
                    tuple(backend.device_names()) if ok else (),
                )
            )
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is reported, not raised
            found.append(BackendInfo(name, False, (), f"cannot be loaded: {exc}", "?"))
    return found


def parse_device(device: str | int) -> tuple[str | None, int | None]:
    """`device` as (backend name, index): "cuda:1" -> ("cuda", 1), "webgpu" -> ("webgpu", None)
    (its default device), 1 -> (None, 1) (device 1 of the first GPU backend)."""
    if isinstance(device, bool) or not isinstance(device, int | str):
        raise ValueError(f"device must be 'NAME:INDEX', 'NAME' or an index, got {device!r}")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"device index must be >= 0, got {device}")
        return None, device
    name, sep, index = device.strip().partition(":")
    if name not in KNOWN and name != CPU:
        raise BackendUnavailableError(
            f"device {device!r}: unknown backend {name!r} (expected one of "
            f"{', '.join([CPU, *KNOWN])}); devices here: {devices_here()}"
        )
    if not sep:
        return name, None
    if not index.isdigit():
        raise ValueError(f"device {device!r}: expected NAME:INDEX with INDEX 0, 1, ...")
    return name, int(index)


def devices_here() -> str:
    """Every device of every backend here as NAME:INDEX (what it is), and why a backend has
    none: what an error about a device that does not exist lists."""
    found = []
    for info in list_backends():
        if info.device_names:
            found += [f"{info.name}:{i} ({d})" for i, d in enumerate(info.device_names)]
        else:
            found.append(f"{info.name}: none ({info.reason or 'no device listed'})")
    return "; ".join(found)


def resolve_device(
    device: str | int, requested: Sequence[str], default: bool
) -> tuple[list[str], str, int | None]:
    """The backends a session with `device` uses, the one `device` is on and its index.

    A device on a backend that `requested` leaves out puts that backend first when the caller
    chose no backends (`default`), and is an error otherwise; an index picks from the backend's
    `device_names()`, and one it does not have is BackendUnavailableError listing the devices
    there are."""
    name, index = parse_device(device)
    requested = list(requested)
    if name is None:
        gpus = [n for n in expand(requested) if get_backend(n).memory != HOST]
        if not gpus:
            raise BackendUnavailableError(
                f"device={device} is an index into the first GPU backend in backends, but "
                f"backends={requested} has none: name one (e.g. device='webgpu:{device}'); "
                f"devices here: {devices_here()}"
            )
        name = gpus[0]
    elif name not in requested and name not in expand(requested):
        if not default:
            raise ValueError(
                f"device {device!r} is on backend '{name}', which backends={requested} leaves "
                f"out: add it, or leave backends out"
            )
        requested = [name, CPU]
    if index is not None:
        if index >= len(get_backend(name).device_names()):
            raise BackendUnavailableError(
                f"device '{name}:{index}' does not exist; devices here: {devices_here()}"
            )
    return requested, name, index


def to_device(array, backend: str):
    """A NumPy array as a tensor of `backend` (e.g. "webgpu", "cuda", or "webgpu:1" for a
    device of its own), to feed sessions with no upload per run; `to_host` brings any backend's
    tensor back."""
    name, index = parse_device(backend) if ":" in str(backend) else (backend, None)
    target = get_backend(name)
    if index is not None:
        names = target.device_names()
        if index >= len(names):
            raise BackendUnavailableError(
                f"device {backend!r} does not exist; devices here: {devices_here()}"
            )
        target = target.on_device(index)
    return target.to_device(array)


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
    "devices_here",
    "expand",
    "parse_device",
    "resolve_device",
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
