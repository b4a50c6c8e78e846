"""Keras .h5 reader: the model config (JSON text), the Keras version and the weights of a
Keras HDF5 file, read with h5py into plain values for importers/keras.py to convert.

Only `model_config`, `keras_version` and the datasets under `model_weights` are read; links
to other files, non-numeric data and weights larger than the file can hold are refused, and
any failure while reading is an InvalidModelError. Where the OS can fork, the HDF5 library
runs in a child process with a time and memory limit (see `_read_isolated`).
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, InvalidModelError

# A weight may claim at most this many bytes per byte of file (Keras does not compress weights).
MAX_EXPANSION = 16


def _h5py():
    try:
        import h5py
    except ImportError:
        raise BackendUnavailableError(
            "reading Keras .h5 files needs the 'h5py' package: pip install 'tinydl[keras]'"
        ) from None
    return h5py


# -- reading the file ---------------------------------------------------------------------------
# HDF5 is a C library that can hang or crash on a corrupt file (seen while fuzzing: a damaged
# global heap makes reading a string attribute loop forever). Where the OS can fork, the file is
# therefore read in a child process with a time and memory limit; it sends back plain data (JSON
# text and raw array bytes), so the parent never runs the HDF5 library on untrusted bytes.
# TINYDL_H5_IN_PROCESS=1 reads in-process instead (for debugging the reader).

Stored = list[tuple[str, str, np.ndarray]]  # (layer, variable, array) in file order
READ_SECONDS = 5.0  # plus one second per 50 MB of file
NUMERIC = {
    np.dtype(t).str for t in ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8")
}


def _read_isolated(path: Path, where: str, size: int) -> tuple[str, str, Stored]:
    if not hasattr(os, "fork") or os.environ.get("TINYDL_H5_IN_PROCESS") == "1":
        return _read_guarded(path, where, size)
    limit = MAX_EXPANSION * size + (8 << 20)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, send, and leave without running the parent's exit code
        try:
            os.close(r)
            _cap_memory(limit)
            try:
                payload = b"K" + _encode(*_read_guarded(path, where, size))
            except InvalidModelError as exc:
                payload = b"E" + str(exc).encode("utf-8", "replace")
            except BaseException as exc:  # anything else is the file's fault too
                payload = (
                    b"E"
                    + f"{where}: not a readable Keras HDF5 model ({type(exc).__name__})".encode()
                )
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view) :]
        finally:
            os._exit(0)
    os.close(w)
    chunks, total = [], 0
    deadline = READ_SECONDS + size / 50e6
    try:
        end = time.monotonic() + deadline
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                raise InvalidModelError(
                    f"{where}: reading the HDF5 file took more than "
                    f"{deadline:.0f} s (its structure is likely corrupt)"
                )
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit + (1 << 20):
                raise InvalidModelError(f"{where}: the file's weights exceed what it can hold")
            chunks.append(chunk)
    finally:
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
    payload = b"".join(chunks)
    if not payload:
        reason = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "no answer"
        raise InvalidModelError(f"{where}: the HDF5 library failed on this file ({reason})")
    if payload[:1] == b"E":
        raise InvalidModelError(payload[1:].decode("utf-8", "replace"))
    return _decode(payload[1:], where)


def _cap_memory(limit: int) -> None:
    try:
        import resource

        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = used + 2 * limit + (1 << 30)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or cap < soft:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError, ImportError):
        pass  # no /proc or no limits: read uncapped


def _encode(text: str, version: str, stored: Stored) -> bytes:
    header = json.dumps(
        {
            "config": text,
            "version": version,
            "weights": [[o, v, a.dtype.str, list(a.shape)] for o, v, a in stored],
        }
    ).encode()
    body = b"".join(np.ascontiguousarray(a).tobytes() for _, _, a in stored)
    return len(header).to_bytes(8, "little") + header + body


def _decode(payload: bytes, where: str) -> tuple[str, str, Stored]:
    def fail(why: str) -> InvalidModelError:
        return InvalidModelError(f"{where}: bad data from the HDF5 reader ({why})")

    n = int.from_bytes(payload[:8], "little")
    try:
        header = json.loads(payload[8 : 8 + n])
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise fail(str(exc)) from None
    offset, stored = 8 + n, []
    for owner, variable, dtype, shape in header["weights"]:
        if dtype not in NUMERIC or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise fail(f"weight {owner}/{variable}: {dtype} {shape}")
        count = math.prod(shape)
        size = count * np.dtype(dtype).itemsize
        if offset + size > len(payload):
            raise fail("truncated weights")
        array = (
            np.frombuffer(payload, dtype, count, offset)
            .reshape(shape)
            .astype(np.dtype(dtype).newbyteorder("="))
        )
        stored.append((owner, variable, array))
        offset += size
    return header["config"], header["version"], stored


def _read_guarded(path: Path, where: str, size: int) -> tuple[str, str, Stored]:
    h5py = _h5py()
    try:
        with h5py.File(path, "r") as f:
            return _read(f, where, size)
    except InvalidModelError:
        raise
    except (
        OSError,
        KeyError,
        ValueError,
        TypeError,
        RuntimeError,
        IndexError,
        AttributeError,
        UnicodeDecodeError,
        RecursionError,
        MemoryError,
        OverflowError,
    ) as exc:
        raise InvalidModelError(
            f"{where}: not a readable Keras HDF5 model ({type(exc).__name__}: {exc})"
        ) from None


def _text(value: Any, what: str, where: str) -> str:
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, bytes | np.bytes_):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidModelError(f"{where}: {what} is not UTF-8 text") from None
    if isinstance(value, str):
        return value
    raise InvalidModelError(f"{where}: {what} must be text, got {type(value).__name__}")


def _names(value: Any, what: str, where: str) -> list[str]:
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return [_text(v, what, where) for v in value]
    if isinstance(value, np.ndarray) and value.size == 0:
        return []
    raise InvalidModelError(f"{where}: {what} must be a list of names")


def _read(f, where: str, file_size: int) -> tuple[str, str, Stored]:
    """The model config (JSON text), the Keras version and the weights in file order."""
    h5py = _h5py()
    if "model_config" not in f.attrs:
        raise InvalidModelError(
            f"{where}: no 'model_config' attribute: not a whole Keras model "
            "saved as .h5 (a weights-only file?)"
        )
    text = _text(f.attrs["model_config"], "model_config", where)
    version = (
        _text(f.attrs["keras_version"], "keras_version", where)
        if ("keras_version" in f.attrs)
        else ""
    )
    stored: Stored = []
    link = f.get("model_weights", getlink=True)
    if link is None:
        return text, version, stored
    root = _member(f, "model_weights", h5py.Group, where)
    layers = (
        _names(root.attrs["layer_names"], "layer_names", where)
        if ("layer_names" in root.attrs)
        else []
    )
    budget = MAX_EXPANSION * file_size + (1 << 20)
    for layer in layers:
        g = _member(root, layer, h5py.Group, where)
        names = (
            _names(g.attrs["weight_names"], f"weight_names of '{layer}'", where)
            if ("weight_names" in g.attrs)
            else []
        )
        for weight in names:
            ds = _member(g, weight, h5py.Dataset, where)
            if ds.dtype.str not in NUMERIC or ds.external or ds.is_virtual:
                raise InvalidModelError(
                    f"{where}: weight '{layer}/{weight}' is not numeric data stored in this file"
                )
            nbytes = math.prod(ds.shape) * ds.dtype.itemsize
            if nbytes > budget:
                raise InvalidModelError(
                    f"{where}: weight '{layer}/{weight}' of shape "
                    f"{ds.shape} is larger than the file can hold"
                )
            budget -= nbytes
            parts = [p for p in weight.split("/") if p]
            owner = parts[-2] if len(parts) >= 2 else layer
            variable = parts[-1].split(":")[0] if parts else ""
            stored.append((owner, variable, np.asarray(ds[()])))
    return text, version, stored


def _member(group, name: str, kind, where: str):
    """group[name] when it is a plain member of this file (no soft or external link)."""
    h5py = _h5py()
    node = group
    for part in [p for p in name.split("/") if p]:
        link = node.get(part, getlink=True)
        if link is None:
            raise InvalidModelError(f"{where}: '{name}' is missing from group '{group.name}'")
        if not isinstance(link, h5py.HardLink):
            raise InvalidModelError(
                f"{where}: '{name}' is a link to elsewhere, not data in this file"
            )
        node = node[part]
    if not isinstance(node, kind):
        raise InvalidModelError(f"{where}: '{group.name}/{name}' is not a {kind.__name__}")
    return node
