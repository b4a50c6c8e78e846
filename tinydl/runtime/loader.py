"""`tinydl.load`: pick the importer by file type."""

from __future__ import annotations

import os
from pathlib import Path

from tinydl.errors import InvalidModelError
from tinydl.ir.graph import Graph

FORMATS = {".onnx": "onnx", ".tdl": "tdl", ".tflite": "tflite", ".h5": "keras"}
# Foreign formats: (the parser package the importer needs, its importer module, the pip extra).
IMPORTERS = {
    "onnx": ("onnx", "tinydl.importers.onnx", "onnx"),
    "tflite": ("tflite", "tinydl.importers.tflite", "tflite"),
    "keras": ("h5py", "tinydl.importers.keras", "keras"),
}
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def detect_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt:
        return fmt
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError as exc:
        raise InvalidModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if head[4:8] == b"TFL3":  # the flatbuffer file identifier of TFLite models
        return "tflite"
    if head[:8] == HDF5_SIGNATURE:
        return "keras"
    if len(head) == 9 and head[8:9] == b"{":
        return "tdl"
    if head[:1] == b"\x08":  # protobuf field 1 (ir_version), varint: how ONNX files begin
        return "onnx"
    raise InvalidModelError(
        f"{path}: unrecognized model file (expected one of {', '.join(FORMATS)})"
    )


SHIPPED = "tinydl:"


def shipped_path(name: str) -> Path:
    """The file of a model shipped with tinydl ("tinydl:espcn_x3" -> tinydl/models/espcn_x3.tdl)."""
    from importlib.resources import files

    stem = name[len(SHIPPED) :]
    folder = Path(str(files("tinydl.models")))
    path = folder / f"{stem}.tdl"
    if not stem or "/" in stem or "\\" in stem or not path.is_file():
        names = ", ".join(sorted(f"{SHIPPED}{p.stem}" for p in folder.glob("*.tdl")))
        raise InvalidModelError(f"{name}: not shipped with tinydl (shipped: {names})")
    return path


def _importable(package: str) -> bool:
    """`package` is installed (imported already, or found), without importing it."""
    import importlib.util
    import sys

    if package in sys.modules:
        return sys.modules[package] is not None  # (None: imports of it are refused)
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def load(path: str | os.PathLike) -> Graph:
    """Load a model file (.onnx, .tflite, Keras .h5 or .tdl) into a validated ir.Graph;
    "tinydl:NAME" names a model shipped with tinydl (tinydl:espcn_x2, tinydl:espcn_x3).

    An ONNX, TFLite or Keras file imported once is kept in the cache folder (the validated
    graph as a snapshot: tinydl.snapshot, which reads only files this user alone could have
    written) and read back by later loads of the same unchanged file, weights mapped
    (`TINYDL_MODEL_CACHE=off` turns it off).
    The graph's weights are read-only: copy one to change it.

    Raises InvalidModelError (or its subclass UnsupportedOpError) when the file cannot be used.
    """
    if isinstance(path, str) and path.startswith(SHIPPED):
        path = shipped_path(path)
    path = Path(path)
    if not path.exists():
        raise InvalidModelError(f"{path}: no such file")
    if path.is_dir():
        raise InvalidModelError(f"{path}: is a folder, expected a model file")
    fmt = detect_format(path)
    from tinydl import snapshot

    identity = snapshot.file_identity(path)
    keep = None  # where a fresh import is kept for the next load
    if fmt in IMPORTERS:
        import importlib

        cached = (
            snapshot.model_cache_path(identity) if snapshot.enabled(snapshot.MODEL_ENV) else None
        )
        graph = _cached_import(cached) if cached is not None else None
        if graph is None:
            package, module, extra = IMPORTERS[fmt]
            # Found, not imported: an importer imports what it needs (the ONNX one not the onnx
            # package itself, whose import is slow: importers/onnx.py, `_proto`).
            if not _importable(package):
                from tinydl.errors import BackendUnavailableError

                raise BackendUnavailableError(
                    f"reading {path.suffix or fmt} files needs the '{package}' package: "
                    f"pip install 'tinydl[{extra}]'"
                )
            graph = importlib.import_module(module).load(path)
            external = getattr(graph, "external_files", None)
            if external:  # the weights of other files: the cached copy would not see them change
                identity += "".join(f"\0{snapshot.file_identity(p)}" for p in external)
            else:
                keep = cached
    else:
        graph = _load_tdl(path)
    snapshot.mark_origin(graph, identity)  # (its weights read-only from here on)
    if keep is not None:
        _keep_import(graph, keep)
    return graph


def _load_tdl(path: Path) -> Graph:
    from tinydl.ir import tdl
    from tinydl.ops import validate
    from tinydl.ops.fused import upgrade_legacy_activations

    graph = tdl.load(path, validate=False)  # (the structure is checked with the ops below)
    upgrade_legacy_activations(graph)  # FusedConv activations written in snake_case before
    return validate(graph)


def _cached_import(cached: Path) -> Graph | None:
    """The graph an earlier import of the same file kept, or None (a damaged copy is dropped).
    It is read back as it was kept, validated and its types inferred: no check runs again (the
    key holds tinydl's code fingerprint, and only files this user alone could write are read:
    snapshot.load)."""
    if not cached.exists():
        return None
    from tinydl import snapshot

    try:
        graph = snapshot.load(cached)
        if not isinstance(graph, Graph):
            raise TypeError(f"holds a {type(graph).__name__}")
    except Exception:  # noqa: BLE001 - a damaged cache entry costs one import, nothing more
        cached.unlink(missing_ok=True)
        return None
    snapshot.touch(cached)
    return graph


def _keep_import(graph: Graph, cached: Path) -> None:
    """Keep the imported graph for the next load of the same file: pickled now (the structure
    before the caller can change it; its weights are read-only from here on:
    `snapshot.mark_origin`), written on a thread; nothing when it cannot be: the cache only
    saves time."""
    from tinydl import snapshot

    try:
        snapshot.dump(
            graph, cached, background=True, then=lambda: snapshot.prune(cached.parent, keep=cached)
        )
    except Exception:  # noqa: BLE001 - a graph that cannot be pickled: no cache
        return


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write a graph as a .tdl file."""
    from tinydl.ir import tdl

    tdl.save(graph, path)
