"""The tinydl error hierarchy: every error the library raises on purpose is a TinyDLError.

Each message says what was expected and what was got, so a user can act on it.
"""


class TinyDLError(Exception):
    """Base of every error tinydl raises on purpose."""


class InvalidModelError(TinyDLError):
    """A model file or graph is malformed: bad bytes, unknown op, bad attribute, dangling value."""


class UnsupportedOpError(InvalidModelError):
    """An op (or op variant) that no requested backend, or no importer, can handle.

    A subclass of InvalidModelError: a model using an op tinydl lacks is one it cannot load, so
    `except InvalidModelError` covers every reason a file is refused.
    """


class InvalidInputError(TinyDLError, ValueError):
    """Feeds given to a session do not match its inputs (a missing or unknown name), or an
    argument of the API is out of its range (a precision, an optimize level, a memory limit)."""


class InvalidShapeError(InvalidInputError):
    """An input fed to a session has the wrong shape or dtype (names the input, expected, got)."""


class OpError(TinyDLError):
    """An op failed while a model ran (inputs that fit the model's declared shapes but not what
    its ops compute); names the node, the op and the shapes it was given."""


class BackendUnavailableError(TinyDLError):
    """A requested backend is not installed or has no usable device."""


class DeviceLostError(TinyDLError):
    """The GPU device was lost; the session can be rebuilt."""


class BufferSizeError(TinyDLError):
    """A tensor is larger than the device allows for one buffer."""


__all__ = [
    "TinyDLError",
    "InvalidModelError",
    "UnsupportedOpError",
    "InvalidInputError",
    "InvalidShapeError",
    "OpError",
    "BackendUnavailableError",
    "DeviceLostError",
    "BufferSizeError",
]
