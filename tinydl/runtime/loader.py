"""`tinydl.load`: pick the importer by file type."""

from __future__ import annotations

import os
from pathlib import Path

from tinydl.errors import InvalidModelError
from tinydl.ir.graph import Graph

FORMATS = {".onnx": "onnx", ".tdl": "tdl"}


def detect_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt:
        return fmt
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError as exc:
        raise InvalidModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(head) == 9 and head[8:9] == b"{":
        return "tdl"
    if head[:1] == b"\x08":  # protobuf field 1 (ir_version), varint: how ONNX files begin
        return "onnx"
    raise InvalidModelError(
        f"{path}: unrecognized model file (expected one of {', '.join(FORMATS)})"
    )


def load(path: str | os.PathLike) -> Graph:
    """Load a model file (.onnx or .tdl) into a validated ir.Graph.

    Raises InvalidModelError (or its subclass UnsupportedOpError) when the file cannot be used.
    """
    path = Path(path)
    if not path.exists():
        raise InvalidModelError(f"{path}: no such file")
    if path.is_dir():
        raise InvalidModelError(f"{path}: is a folder, expected a model file")
    fmt = detect_format(path)
    if fmt == "onnx":
        try:
            import onnx  # noqa: F401

            from tinydl.importers import onnx as onnx_importer
        except ImportError:
            from tinydl.errors import BackendUnavailableError

            raise BackendUnavailableError(
                "reading .onnx files needs the 'onnx' package: pip install 'tinydl[onnx]'"
            ) from None
        return onnx_importer.load(path)
    from tinydl.ir import tdl

    return tdl.load(path)


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write a graph as a .tdl file."""
    from tinydl.ir import tdl

    tdl.save(graph, path)
