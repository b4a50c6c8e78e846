"""tinydl: run neural networks fast on any GPU and build real-time video pipelines from them.

    import tinydl as td
    sess = td.compile(td.load("model.onnx"), backends=("cpu",))
    outputs = sess.run({"input": x})

Importing tinydl is cheap: NumPy, onnx and every backend load only when first used.
"""

from tinydl.errors import (
    BackendUnavailableError,
    BufferSizeError,
    DeviceLostError,
    InvalidInputError,
    InvalidModelError,
    InvalidShapeError,
    OpError,
    TinyDLError,
    UnsupportedOpError,
)

__version__ = "0.1.0"

_LAZY = {
    "load": "tinydl.runtime.loader:load",
    "save": "tinydl.runtime.loader:save",
    "compile": "tinydl.runtime.session:compile",
    "Session": "tinydl.runtime.session:Session",
    "Graph": "tinydl.ir.graph:Graph",
    "from_torch": "tinydl.importers.torch:from_torch",
    "list_backends": "tinydl.backends:list_backends",
    "to_device": "tinydl.backends:to_device",
    "to_host": "tinydl.backends:to_host",
}


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'tinydl' has no attribute {name!r}")
    import importlib

    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = [
    "BackendUnavailableError",
    "BufferSizeError",
    "DeviceLostError",
    "InvalidInputError",
    "InvalidModelError",
    "InvalidShapeError",
    "OpError",
    "Session",
    "TinyDLError",
    "UnsupportedOpError",
    "compile",
    "from_torch",
    "list_backends",
    "load",
    "save",
    "to_device",
    "to_host",
]
