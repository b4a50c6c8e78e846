"""The .tdl model file: a safetensors container whose tensors are the weights and whose
`__metadata__` holds {"format": "tinydl", "version": "1", "graph": "<graph JSON>"}.

Reading validates the header, every tensor's offsets, the graph JSON's structure, every weight
reference and the graph's structure before returning; anything wrong is an InvalidModelError.
The ops, attributes and shapes are checked by the caller with the op registry
(tinydl.load does: tinydl.ops.validate). Weights are memory-mapped read-only (no copy). Nothing
in the file is ever executed.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import InvalidModelError, UnsupportedOpError
from tinydl.ir.dtypes import DTYPES, SAFETENSORS
from tinydl.ir.graph import Graph, Node, Value

FORMAT = "tinydl"
VERSION = "1"
_MAX_HEADER = 100 * 1024 * 1024
_MAX_DIM = 2**40  # the same bound graph validation puts on a dimension
_FROM_SAFETENSORS = {v: k for k, v in SAFETENSORS.items()}
_ATTR_TENSOR_PREFIX = "__attr__/"


# -- graph <-> JSON ---------------------------------------------------------------------------


def graph_to_json(graph: Graph) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The graph as a JSON-ready dict, plus the tensors that go in the container."""
    tensors: dict[str, np.ndarray] = dict(graph.initializers)

    def attr(node: Node, key: str, value: Any) -> Any:
        if isinstance(value, Graph):
            raise UnsupportedOpError(
                f"node '{node.name}' ({node.op}): attribute '{key}' is a graph, which .tdl files "
                "do not store"
            )
        if isinstance(value, np.ndarray):
            ref = f"{_ATTR_TENSOR_PREFIX}{node.name}/{key}"
            tensors[ref] = value
            return {"$tensor": ref}
        return value

    doc = {
        "name": graph.name,
        "inputs": [_value_json(v) for v in graph.inputs],
        "outputs": [_value_json(v) for v in graph.outputs],
        "nodes": [
            {
                "name": n.name,
                "op": n.op,
                "inputs": list(n.inputs),
                "outputs": list(n.outputs),
                "attrs": {k: attr(n, k, v) for k, v in n.attrs.items()},
            }
            for n in graph.nodes
        ],
        "initializers": list(graph.initializers),
        "metadata": graph.metadata,
    }
    return doc, tensors


def _value_json(v: Value) -> dict[str, Any]:
    return {"name": v.name, "dtype": v.dtype, "shape": None if v.shape is None else list(v.shape)}


def graph_json_text(graph: Graph) -> str:
    doc, _ = graph_to_json(graph)
    return json.dumps(doc, indent=1)


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write `graph` to a .tdl file (atomically: a partial file is never left behind)."""
    doc, tensors = graph_to_json(graph)
    meta = {"format": FORMAT, "version": VERSION, "graph": json.dumps(doc, separators=(",", ":"))}
    _write(meta, tensors, Path(path))


def _write(meta: dict, tensors: dict, path: Path) -> None:
    """The file gets the permissions the umask gives new files."""
    from safetensors.numpy import save_file

    # A name of this writer's own: two processes writing one path never share a partial file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        try:
            save_file(
                {k: np.asarray(v, order="C") for k, v in tensors.items()}, str(tmp), metadata=meta
            )
        except Exception as exc:  # noqa: BLE001 - safetensors reports I/O errors as its own
            if isinstance(exc, OSError):
                raise
            # SafetensorError ("I/O error: ... os error 13"): say it as the OSError it is.
            raise OSError(f"cannot write {path}: {exc}") from None
        # The container writer creates private (0600) files; give the file the usual mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# -- reading -------------------------------------------------------------------------------------


def load(path: str | os.PathLike, validate: bool = True) -> Graph:
    """Read a .tdl file and validate all but its ops (tinydl.load checks those too); raises
    InvalidModelError for anything malformed. `validate=False` leaves the graph's structure to
    the caller's check (tinydl.load checks structure and ops in one pass)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InvalidModelError(f"{path}: not a .tdl file (only {len(head)} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > min(_MAX_HEADER, size - 8):
                raise InvalidModelError(
                    f"{path}: not a .tdl file (header length {n} exceeds the file size {size})"
                )
            raw = f.read(n)
    except OSError as exc:
        raise InvalidModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # ValueError: bad UTF-8, bad JSON, a 5000-digit int
        raise InvalidModelError(f"{path}: header is not valid JSON ({exc})") from None
    _expect(isinstance(header, dict), path, "header must be a JSON object")
    meta = header.pop("__metadata__", None)
    _expect(isinstance(meta, dict), path, "no __metadata__: not a tinydl model")
    _expect(
        meta.get("format") == FORMAT,
        path,
        f"format is {_summary(meta.get('format'))}, expected 'tinydl'",
    )
    _expect(
        meta.get("version") == VERSION,
        path,
        f"version {_summary(meta.get('version'))} is not supported by this tinydl "
        f"(reads version {VERSION})",
    )
    tensors = _map_tensors(path, header, data_start=8 + n, size=size)
    graph_text = meta.get("graph")
    _expect(isinstance(graph_text, str), path, "__metadata__.graph must be a JSON string")
    try:
        doc = json.loads(graph_text)
    except (ValueError, RecursionError) as exc:
        raise InvalidModelError(f"{path}: graph JSON is invalid ({exc})") from None
    graph = graph_from_json(doc, tensors, where=str(path))
    return graph.validate() if validate else graph


def _map_tensors(path: Path, header: dict, data_start: int, size: int) -> dict[str, np.ndarray]:
    spans = []
    entries = []
    for name, info in header.items():
        ok = (
            isinstance(info, dict)
            and isinstance(info.get("dtype"), str)
            and info["dtype"] in _FROM_SAFETENSORS
            and isinstance(info.get("shape"), list)
            and all(_is_int(d) and 0 <= d < _MAX_DIM for d in info["shape"])
            and isinstance(info.get("data_offsets"), list)
            and len(info["data_offsets"]) == 2
            and all(_is_int(o) for o in info["data_offsets"])
        )
        _expect(ok, path, f"tensor '{name}': malformed entry {_summary(info)}")
        dtype = DTYPES[_FROM_SAFETENSORS[info["dtype"]]]
        begin, end = info["data_offsets"]
        # Python ints: exact for any shape, where a fixed-width product could wrap around.
        nbytes = math.prod(info["shape"]) * dtype.itemsize
        _expect(
            0 <= begin <= end and data_start + end <= size and nbytes == end - begin,
            path,
            f"tensor '{name}': offsets {begin}..{end} do not fit shape {info['shape']} "
            f"{dtype.name} in a file of {size} bytes",
        )
        spans.append((begin, end, name))
        entries.append((name, dtype, tuple(info["shape"]), begin))
    spans.sort()
    for (_, e0, a), (b1, _, b) in zip(spans, spans[1:], strict=False):
        _expect(e0 <= b1, path, f"tensors '{a}' and '{b}' overlap")
    out: dict[str, np.ndarray] = {}
    mapped = None  # the file, mapped once (read-only); each tensor a view of its span
    for name, dtype, shape, begin in entries:
        if math.prod(shape) == 0:
            arr = np.zeros(shape, dtype)
            arr.flags.writeable = False
            out[name] = arr
        else:
            if mapped is None:
                # Plain ndarray views (np.memmap's keep the file mapped as their base): a
                # memmap subclass is pickled in band, by a copy of its bytes, where an ndarray
                # goes out of band (a session kept of this graph maps its weights again).
                mapped = np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray)
            start = data_start + begin
            span = mapped[start : start + math.prod(shape) * dtype.itemsize]
            out[name] = span.view(dtype).reshape(shape)
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _summary(x: Any) -> str:
    """A short description of a JSON value, safe for any size or nesting depth."""
    if isinstance(x, dict):
        return (
            "{"
            + ", ".join(f"{str(k)[:20]}: {type(v).__name__}" for k, v in list(x.items())[:4])
            + "}"
        )
    if isinstance(x, list):
        return f"list of {len(x)}"
    return repr(x)[:60]


def graph_from_json(doc: Any, tensors: dict[str, np.ndarray], where: str = "graph") -> Graph:
    """Build a Graph from its JSON form, checking every field's type; does not validate ops."""
    p = where
    _expect(isinstance(doc, dict), p, "graph JSON must be an object")
    for key in ("inputs", "outputs", "nodes", "initializers"):
        _expect(isinstance(doc.get(key), list), p, f"graph JSON field '{key}' must be a list")
    metadata = doc.get("metadata", {})
    _expect(isinstance(metadata, dict), p, "graph JSON field 'metadata' must be an object")
    name = doc.get("name", "graph")
    _expect(isinstance(name, str), p, "graph JSON field 'name' must be a string")

    def value(item: Any, what: str) -> Value:
        _expect(
            isinstance(item, dict) and isinstance(item.get("name"), str), p, f"{what}: bad entry"
        )
        dtype, shape = item.get("dtype"), item.get("shape")
        _expect(
            dtype is None or (isinstance(dtype, str) and dtype in DTYPES),
            p,
            f"{what} '{item['name']}': bad dtype {_summary(dtype)}",
        )
        _expect(shape is None or isinstance(shape, list), p, f"{what} '{item['name']}': bad shape")
        return Value(item["name"], dtype, None if shape is None else tuple(shape))

    init_names = doc["initializers"]
    initializers = {}
    for n in init_names:
        _expect(
            isinstance(n, str) and n in tensors,
            p,
            f"initializer {_summary(n)} has no tensor in the file",
        )
        initializers[n] = tensors[n]
    nodes = []
    for i, item in enumerate(doc["nodes"]):
        _expect(isinstance(item, dict), p, f"node #{i} must be an object")
        nname = item.get("name", f"node_{i}")
        ok = (
            isinstance(nname, str)
            and isinstance(item.get("op"), str)
            and isinstance(item.get("inputs"), list)
            and isinstance(item.get("outputs"), list)
            and all(isinstance(x, str) for x in item["inputs"] + item["outputs"])
            and isinstance(item.get("attrs", {}), dict)
        )
        _expect(
            ok,
            p,
            f"node #{i} ({_summary(nname)}): needs string op, lists of input/output names, attrs",
        )
        attrs = {}
        for k, v in item.get("attrs", {}).items():
            if isinstance(v, dict):
                ref = v.get("$tensor")
                _expect(
                    isinstance(ref, str) and ref in tensors,
                    p,
                    f"node '{nname}': attribute '{k}' refers to a missing tensor {_summary(ref)}",
                )
                v = np.array(tensors[ref])
            attrs[k] = v
        nodes.append(Node(item["op"], list(item["inputs"]), list(item["outputs"]), attrs, nname))
    return Graph(
        inputs=[value(v, "input") for v in doc["inputs"]],
        outputs=[value(v, "output") for v in doc["outputs"]],
        nodes=nodes,
        initializers=initializers,
        metadata=metadata,
        name=name,
    )


def _expect(cond: bool, where: Any, message: str) -> None:
    if not cond:
        raise InvalidModelError(f"{where}: {message}")
