"""ONNX importer: a .onnx file (opsets 11-21 tested) becomes an ir.Graph in canonical form.

Canonical form is the newest form of each op: attributes that later opsets moved to inputs
(Squeeze/Unsqueeze and ReduceMean `axes`, Split's `split`) become constant inputs, a Split
without sizes gets `num_outputs`, the pre-13 Softmax "flatten to 2-D" semantics are rewritten with
Flatten/Softmax/Reshape, pre-16 RoiAlign states its pixel convention, and Constant nodes become
initializers. External data is read only from files inside the model's folder.

An If whose condition folds to a constant at import (an initializer, a Constant, or shape
arithmetic on inputs of static shape) is replaced by the nodes of the branch it takes. Any other
If keeps both branches, converted the same way, as graph attributes; the outer values a branch
reads become its inputs and the If's inputs after the condition. A Loop's body is converted the
same way; each outer value it reads becomes one more loop-carried value, which the body passes
through unchanged (so the body is a closed graph and the Loop stays an ONNX Loop); a Scan's
become state values after its own.

ONNX sequences are followed at import as lists of tensors (SequenceAt becomes an Identity,
SplitToSequence a Split, ConcatFromSequence a Concat); a Loop that carries one is unrolled
when its trip count is a constant (up to UNROLL_LIMIT iterations).

A node of an ONNX op tinydl does not implement is evaluated at import by onnx's reference
evaluator and replaced by its results, when every input is a constant (an initializer, or what
shape inference folds), the op is deterministic, and each result holds at most FOLD_LIMIT
elements; any other such node is refused by name.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import InvalidModelError, UnsupportedOpError
from tinydl.ir.dtypes import ONNX_CODES, ONNX_NAMES, dtype_name
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

MIN_OPSET, MAX_OPSET = 11, 23
# The most elements a result of an op tinydl lacks may hold to be folded into a constant at import.
FOLD_LIMIT = 1 << 16
# Sequence values (SequenceEmpty, SequenceInsert, SplitToSequence, ... ) are followed at import
# as lists of tensors; a Loop that carries one is unrolled when its trip count is a constant of
# at most this many iterations.
UNROLL_LIMIT = 256
SEQUENCE_OPS = frozenset((
    "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt",
    "SequenceLength", "SplitToSequence", "ConcatFromSequence",
))  # fmt: skip
# ONNX ops whose results are random: never folded.
_RANDOM = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)


@functools.cache
def _proto():
    """onnx's protobuf messages (ModelProto, AttributeProto, ...). The onnx package itself, when
    it is not imported yet, is left so: its import (helpers, checker, serialization) took 65-160
    ms of a cold start on a 2-core machine, where its generated `onnx_ml_pb2` alone takes 15-36.
    That module is imported from its file under a name of our own; protobuf keeps one class per
    message, so the onnx package, imported later, finds the same ones. Anything unexpected falls
    back to importing the package."""
    if "onnx" not in sys.modules:
        try:
            import importlib.util

            package = importlib.util.find_spec("onnx")
            path = Path(package.origin).with_name("onnx_ml_pb2.py")
            spec = importlib.util.spec_from_file_location("tinydl._onnx_ml_pb2", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.ModelProto().ParseFromString(b"")  # it works
            return module
        except Exception:  # noqa: BLE001 - an unexpected onnx or protobuf: import onnx
            pass
    import onnx

    return onnx


def load(path: str | os.PathLike) -> Graph:
    """Read, convert and validate an ONNX file; InvalidModelError for anything malformed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return from_bytes(data, base_dir=path.parent, where=str(path))


def from_bytes(
    data: bytes, base_dir: str | os.PathLike | None = None, where: str = "model"
) -> Graph:
    from google.protobuf.message import DecodeError

    model = _proto().ModelProto()
    split = _without_raw_data(data)
    try:
        model.ParseFromString(data if split is None else split[0])
    except (DecodeError, RuntimeError, ValueError, RecursionError) as exc:
        raise InvalidModelError(f"{where}: not a valid ONNX protobuf ({exc})") from None
    if not model.HasField("graph"):
        raise InvalidModelError(f"{where}: ONNX file has no graph")
    _check_strings(model, where)
    converter = _Converter(model, base_dir, where)
    if split is not None:
        converter.raw = (memoryview(data), split[1])
    return converter.run()


# -- the weights' bytes read in place ------------------------------------------------------------
# Protobuf copies every tensor's raw_data out of the file's bytes as it parses (ResNet-18: 46 MB
# parsed in 55 ms on the 2-core VM, most of it those copies). So the graph's initializers are
# parsed without their raw_data, which stays in the file's bytes: `_without_raw_data` writes the
# model again with each initializer's raw_data field left out (the nodes and the rest: a small
# part of a convnet's file) and notes where each one's bytes are; the tensors are then NumPy views
# of the file's bytes (copied where unaligned).


def _varint(buf, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]  # (IndexError past the end: a truncated message)
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, value start, value end, field start) of each field of the
    message in buf[start:end]; ValueError for groups or a field past the end."""
    i = start
    while i < end:
        first = i
        key, i = _varint(buf, i)
        field, wire, begin = key >> 3, key & 7, None
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _varint(buf, i)
            begin, i = i, i + size
        else:
            raise ValueError(f"wire type {wire}")
        if i > end:
            raise ValueError("a field runs past its message")
        yield field, wire, begin, i, first


GRAPH, INITIALIZER, RAW_DATA = 7, 5, 9  # ModelProto.graph, GraphProto.initializer, TensorProto


def _without_raw_data(data: bytes) -> tuple[bytes, list[tuple[int, int] | None]] | None:
    """The model written again without its initializers' raw_data, and per initializer (in
    order) the (offset, size) of its raw_data in `data`, or None where it has no single one.
    None when no initializer has raw_data, or for anything but one graph field and well-formed
    initializers (the protobuf parse then reads `data` as it is, and says what is wrong).
    Initializers of subgraphs (If, Loop bodies) and of functions are parsed as they are."""
    view = memoryview(data)
    try:
        graphs = [f for f in _fields(data, 0, len(data)) if f[0] == GRAPH]
        if len(graphs) != 1 or graphs[0][1] != 2:
            return None
        _, _, start, end, first = graphs[0]
        pieces, spans, copied = [], [], start
        for field, wire, begin, stop, at in _fields(data, start, end):
            if field != INITIALIZER:
                continue
            if wire != 2:
                return None
            raw = [f for f in _fields(data, begin, stop) if f[0] == RAW_DATA and f[1] == 2]
            if len(raw) != 1:
                spans.append(None)
                continue
            _, _, raw_begin, raw_end, raw_at = raw[0]
            tensor = bytes(view[begin:raw_at]) + bytes(view[raw_end:stop])
            pieces += [view[copied:at], _varint_bytes(INITIALIZER << 3 | 2)]
            pieces += [_varint_bytes(len(tensor)), tensor]
            copied = stop
            spans.append((raw_begin, raw_end - raw_begin))
        if not any(spans):
            return None
        pieces.append(view[copied:end])
        graph = b"".join(pieces)
        head = bytes(view[:first]) + _varint_bytes(GRAPH << 3 | 2) + _varint_bytes(len(graph))
        return head + graph + bytes(view[end:]), spans
    except (ValueError, IndexError):
        return None


def _check_strings(message, where: str, path: str = "model") -> None:
    """Refuse text fields that are not UTF-8 (protobuf returns those as bytes, not str). Fields
    are read by name: `ListFields` would copy every tensor's `raw_data` (the whole model) too."""
    for name, text, repeated in _text_fields(message.DESCRIPTOR):
        if text:
            value = getattr(message, name)
            for item in value if repeated else (value,):
                if type(item) is not str:
                    raise InvalidModelError(
                        f"{where}: {path}.{name} is not UTF-8 text: {bytes(item[:40])!r}"
                    )
        elif repeated:
            for i, item in enumerate(getattr(message, name)):
                _check_strings(item, where, f"{path}.{name}[{i}]")
        elif message.HasField(name):
            _check_strings(getattr(message, name), where, f"{path}.{name}")


@functools.cache
def _text_fields(descriptor) -> tuple[tuple[str, bool, bool], ...]:
    """(name, a string field (else a message one), repeated) of the fields that may hold text."""
    out = []
    for field in descriptor.fields:
        if field.type in (field.TYPE_STRING, field.TYPE_MESSAGE):
            found = getattr(field, "is_repeated", None)  # (protobuf 7 has no `label`)
            repeated = found if found is not None else field.label == field.LABEL_REPEATED
            out.append((field.name, field.type == field.TYPE_STRING, repeated))
    return tuple(out)


def from_model(model, base_dir: str | os.PathLike | None = None, where: str = "model") -> Graph:
    """Convert an in-memory onnx.ModelProto."""
    return _Converter(model, base_dir, where).run()


class _Converter:
    def __init__(self, model, base_dir, where: str):
        self.model = model
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.where = where
        self.initializers: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self.taken: set[str] = set()
        self.scopes: list[dict[str, str]] = []  # value renames of the If branches being inlined
        # (nodes, initializers, inputs) of the graphs enclosing the If branch being converted
        self.outer: list[tuple[list[Node], dict[str, np.ndarray], list[Value]]] = []
        # ops tinydl lacks that could not be folded at import -> why (or "")
        self.unknown: dict[str, str] = {}
        # sequence value -> the tensors it holds, in order (names as the graph calls them)
        self.seqs: dict[str, list[str]] = {}
        self.external: set[Path] = set()  # the files external data was read from
        # (the file's bytes, per graph initializer the (offset, size) of its raw_data there or
        # None): set by from_bytes when the model was parsed without them
        self.raw: tuple[memoryview, list[tuple[int, int] | None]] | None = None

    def fail(self, message: str) -> InvalidModelError:
        return InvalidModelError(f"{self.where}: {message}")

    def run(self) -> Graph:
        model, g = self.model, self.model.graph
        self.opset = self._opset()
        spans = self.raw[1] if self.raw is not None else []
        for i, t in enumerate(g.initializer):
            span = spans[i] if i < len(spans) else None
            self.initializers[t.name] = self._tensor(t, span)
        for t in g.sparse_initializer:
            raise UnsupportedOpError(
                f"{self.where}: sparse initializer '{t.values.name}' is not supported"
            )
        self.taken = _names(g)
        self._check_ops(g)
        self.inputs = [self._value(v) for v in g.input if v.name not in self.initializers]
        for i, n in enumerate(g.node):
            self._node(n, i)
        if self.unknown:
            raise UnsupportedOpError(
                f"{self.where}: ops not supported by tinydl: "
                + ", ".join(
                    f"{op} ({why})" if why else op for op, why in sorted(self.unknown.items())
                )
            )
        inputs = self.inputs
        outputs = [self._value(v) for v in g.output]
        meta: dict[str, Any] = {
            "source_format": "onnx",
            "opset": self.opset,
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
        }
        if model.doc_string:
            meta["doc"] = model.doc_string[:1000]
        props = {p.key: p.value for p in model.metadata_props}
        if props:
            meta["onnx_metadata"] = props
        graph = Graph(
            inputs, outputs, self.nodes, self.initializers, metadata=meta, name=g.name or "graph"
        )
        graph.external_files = sorted(self.external)  # (what a cached copy would depend on)
        return validate(graph)

    def _opset(self) -> int:
        versions = {o.domain: o.version for o in self.model.opset_import}
        version = versions.get("", versions.get("ai.onnx"))
        if version is None:
            raise self.fail("no opset_import for the default ONNX domain")
        if not MIN_OPSET <= version <= MAX_OPSET:
            raise UnsupportedOpError(
                f"{self.where}: opset {version} is not supported (tinydl reads opsets "
                f"{MIN_OPSET}-{MAX_OPSET}; convert with onnx.version_converter)"
            )
        return version

    def _check_ops(self, g) -> None:
        """Refuse a graph (the model's, a branch or a body) with ops of other domains. ONNX ops
        tinydl lacks are judged node by node: folded when their inputs are constants."""
        bad = set()
        for n in g.node:
            if n.domain not in ("", "ai.onnx"):
                bad.add(f"{n.domain}.{n.op_type}")
        if bad:
            raise UnsupportedOpError(
                f"{self.where}: ops not supported by tinydl: {', '.join(sorted(bad))}"
            )

    # -- values and tensors ------------------------------------------------------------------
    def _value(self, v) -> Value:
        t = v.type
        kind = t.WhichOneof("value")
        if kind != "tensor_type":
            raise UnsupportedOpError(
                f"{self.where}: value '{v.name}' is an ONNX {kind or 'untyped value'}, not a "
                "tensor: tinydl has no sequence, map or optional values (SequenceEmpty, "
                "SequenceInsert, SequenceAt, SplitToSequence, Optional...)"
            )
        elem = t.tensor_type.elem_type
        dtype = ONNX_CODES.get(elem)
        if elem and dtype is None:
            raise UnsupportedOpError(
                f"{self.where}: value '{v.name}' has unsupported element type {elem}"
            )
        shape = None
        if t.tensor_type.HasField("shape"):
            dims = []
            for d in t.tensor_type.shape.dim:
                which = d.WhichOneof("value")
                if which == "dim_value" and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                elif which == "dim_param" and d.dim_param and d.dim_param != "?":  # "?": unknown
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            shape = tuple(dims)
        return Value(v.name, dtype, shape)

    def _tensor(self, t, span: tuple[int, int] | None = None) -> np.ndarray:
        """A TensorProto's value; `span`: where its raw_data is in the file's bytes (`raw`),
        when the model was parsed without it."""
        if t.data_type not in ONNX_CODES:
            raise UnsupportedOpError(
                f"{self.where}: tensor '{t.name}' has unsupported element type {t.data_type}"
            )
        dims = list(t.dims)
        if any(d < 0 for d in dims) or math.prod(dims) > 2**34:
            raise self.fail(f"tensor '{t.name}' has invalid dims {dims}")
        raw = None
        if t.data_location == 1:  # EXTERNAL
            self._load_external(t)
        elif span is not None:
            raw = self.raw[0][span[0] : span[0] + span[1]]
        try:
            plain = not t.HasField("segment") and sys.byteorder == "little"
            if raw is not None and not plain:
                t.raw_data, raw = bytes(raw), None  # (numpy_helper's cases: it reads raw_data)
            if raw is not None or (plain and t.HasField("raw_data")):
                # (what numpy_helper.to_array does for these types, without importing onnx);
                # a view of the file's bytes where it was parsed without them
                source = t.raw_data if raw is None else raw
                arr = np.frombuffer(source, ONNX_CODES[t.data_type]).reshape(dims)
                if not arr.flags.aligned:  # (NumPy's kernels round unaligned data differently)
                    arr = arr.copy()
                    arr.flags.writeable = False
            else:
                from onnx import numpy_helper

                arr = numpy_helper.to_array(t)
        except (ValueError, TypeError, RuntimeError, KeyError, MemoryError) as exc:
            raise self.fail(f"tensor '{t.name}' cannot be decoded: {exc}") from None
        if tuple(arr.shape) != tuple(dims):
            raise self.fail(f"tensor '{t.name}' holds {arr.shape}, expected dims {dims}")
        return np.asarray(arr, order="C")  # (ascontiguousarray would make a scalar 1-D)

    def _load_external(self, t) -> None:
        """Read a tensor's bytes from a file beside the model, checking the span before reading."""
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if self.base_dir is None:
            raise self.fail(f"tensor '{t.name}' has external data but the model has no folder")
        shown = (
            repr(location)
            if len(location) <= 200
            else f"{location[:200]!r}... ({len(location)} characters)"
        )
        try:
            if "\0" in location:
                raise ValueError("a null byte in the name")
            base = self.base_dir.resolve()
            target = (base / location).resolve()
            found = target.is_file()
        except (ValueError, OSError, RuntimeError) as exc:
            # null bytes, names the OS refuses, symlink loops
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise self.fail(
                f"tensor '{t.name}': external data location {shown} cannot be used: {why}"
            ) from None
        if not location or os.path.isabs(location) or base not in target.parents:
            raise self.fail(
                f"tensor '{t.name}': external data location {shown} is outside the model's folder"
            )
        if not found:
            raise self.fail(f"tensor '{t.name}': external data file {shown} not found")
        self.external.add(target)
        need = math.prod(t.dims) * np.dtype(ONNX_CODES[t.data_type]).itemsize
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", need))
            size = target.stat().st_size
        except (ValueError, OSError) as exc:
            raise self.fail(f"tensor '{t.name}': bad external data entry: {exc}") from None
        if offset < 0 or length != need or offset + need > size:
            raise self.fail(
                f"tensor '{t.name}': external data {shown} at offset {offset}, "
                f"length {length} "
                f"does not hold the {need} bytes of dims {list(t.dims)} (file size {size})"
            )
        try:
            with open(target, "rb") as f:
                f.seek(offset)
                t.raw_data = f.read(need)
        except OSError as exc:
            raise self.fail(
                f"tensor '{t.name}': cannot read external data: {exc.strerror or exc}"
            ) from None
        t.data_location = 0  # DEFAULT: the bytes are now inline
        del t.external_data[:]

    # -- nodes -------------------------------------------------------------------------------
    def _attrs(self, n, skip: Collection[str] = ()) -> dict[str, Any]:
        """The node's attributes as plain values; those named in `skip` (graphs converted
        apart) are left out."""
        AttributeProto = _proto().AttributeProto  # noqa: N806 - onnx's name

        out: dict[str, Any] = {}
        for a in n.attribute:
            if a.name in skip:
                continue
            kind = a.type
            if kind == AttributeProto.FLOAT:
                out[a.name] = float(a.f)
            elif kind == AttributeProto.INT:
                out[a.name] = int(a.i)
            elif kind == AttributeProto.STRING:
                try:
                    out[a.name] = a.s.decode("utf-8")
                except UnicodeDecodeError:
                    raise self.fail(f"node '{n.name}': attribute '{a.name}' is not UTF-8") from None
            elif kind == AttributeProto.FLOATS:
                out[a.name] = [float(x) for x in a.floats]
            elif kind == AttributeProto.INTS:
                out[a.name] = [int(x) for x in a.ints]
            elif kind == AttributeProto.STRINGS:
                out[a.name] = [x.decode("utf-8", "replace") for x in a.strings]
            elif kind == AttributeProto.TENSOR:
                out[a.name] = self._tensor(a.t)
            elif a.ref_attr_name:
                raise UnsupportedOpError(f"{self.where}: node '{n.name}': function attribute refs")
            else:
                names = AttributeProto.AttributeType
                kind_name = names.Name(kind) if kind in names.values() else kind
                raise UnsupportedOpError(
                    f"{self.where}: node '{n.name}' ({n.op_type}): attribute '{a.name}' of type "
                    f"{kind_name} is not supported"
                )
        return out

    def _fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def _const(self, base: str, value: np.ndarray) -> str:
        name = self._fresh(base)
        self.initializers[name] = value
        return name

    def _node(self, n, index: int) -> None:
        if n.op_type == "If":
            self._if(n, n.name or f"If_{index}")
            return
        of_sequence = n.op_type == "Identity" and len(n.input) == 1 and n.input[0] in self.seqs
        if n.op_type in SEQUENCE_OPS or of_sequence:
            self._sequence(n, n.name or f"{n.op_type}_{index}")
            return
        if n.op_type == "Loop" and any(i in self.seqs for i in n.input[2:]):
            self._unrolled(n, n.name or f"Loop_{index}")
            return
        if n.op_type == "Loop":
            self._loop(n, n.name or f"Loop_{index}")
            return
        for i in n.input:
            if i in self.seqs:
                raise UnsupportedOpError(
                    f"{self.where}: node '{n.name or n.op_type}' ({n.op_type}) reads '{i}', a "
                    "sequence: tinydl follows sequences through the Sequence* ops, "
                    "SplitToSequence, ConcatFromSequence and unrolled Loops only"
                )
        if n.op_type == "Scan":
            self._scan(n, n.name or f"Scan_{index}")
            return
        from tinydl.ops import REGISTRY

        if n.op_type not in REGISTRY:
            self._fold_unknown(n)
            return
        op, attrs = n.op_type, self._attrs(n)
        name = n.name or f"{op}_{index}"
        inputs, outputs = list(n.input), list(n.output)
        while inputs and not inputs[-1]:
            inputs.pop()
        if op == "Constant":
            if len(outputs) != 1 or inputs or not outputs[0]:
                raise self.fail(f"node '{name}' (Constant): expects no inputs and one named output")
            from tinydl.ops import schema_of

            node = Node(op, [], outputs, attrs, name)
            schema = schema_of("Constant")
            node.attrs = schema.check_attrs(node)
            try:
                (value,) = schema.run(node, [])
            except (ValueError, TypeError) as exc:
                raise self.fail(f"node '{name}' (Constant): {exc}") from None
            if outputs[0] in self.initializers:
                raise self.fail(
                    f"node '{name}' (Constant): output '{outputs[0]}' is already defined"
                )
            self.initializers[outputs[0]] = np.asarray(value)
            return
        # Squeeze/Unsqueeze (opset < 13), ReduceSum (< 13) and the other Reduce* (< 18) take
        # `axes` as an attribute.
        if (op in ("Squeeze", "Unsqueeze") or op.startswith("Reduce")) and "axes" in attrs:
            axes = attrs.pop("axes")
            if (
                not isinstance(axes, list)
                or not all(isinstance(a, int) for a in axes)
                or len(inputs) > 1
            ):
                raise self.fail(
                    f"node '{name}' ({op}): 'axes' must be one list of ints, given as an attribute "
                    f"(opset < 13) or as the second input, not both; got {type(axes).__name__}"
                )
            inputs = [
                inputs[0] if inputs else "",
                self._const(f"{name}_axes", np.array(axes, np.int64)),
            ]
        if op == "Split":
            inputs = self._split_form(name, inputs, outputs, attrs)
        if op in ("Softmax", "LogSoftmax") and self.opset < 13:
            self._legacy_softmax(op, name, inputs, outputs, attrs)
            return
        if op == "GroupNormalization" and self.opset < 21:
            self._legacy_group_norm(name, inputs, outputs, attrs)
            return
        if op == "RoiAlign" and self.opset < 16:
            # RoiAlign-10 has no such attribute: it samples as "output_half_pixel" names it
            attrs.setdefault("coordinate_transformation_mode", "output_half_pixel")
        if op in ("LSTM", "GRU", "RNN") and outputs and not outputs[0]:
            outputs[0] = self._fresh(f"{name}_Y")  # the IR's first output always has a name
        self.nodes.append(Node(op, inputs, outputs, attrs, name))

    def _fold_unknown(self, n) -> None:
        """Evaluate a node of an op tinydl lacks with onnx's reference and keep its results as
        constants; note the op as unsupported (with why, when its inputs were constants) when
        it cannot be."""
        op = n.op_type
        if self.unknown.get(op, None) == "":
            return  # already refused for a run-time input: the model fails at the end
        values = [self._folded(i) if i else None for i in n.input]
        if any(v is None for v, i in zip(values, n.input, strict=True) if i):
            self.unknown[op] = ""
            return
        if op in _RANDOM:
            self.unknown.setdefault(op, "not folded at import: its results are random")
            return
        try:
            results = _reference_run(n, values, self.opset)
        except Exception as exc:  # noqa: BLE001 - onnx's reference raises whatever its ops do
            self.unknown.setdefault(op, f"not folded at import: onnx's reference failed: {exc}")
            return
        for out, value in zip(n.output, results, strict=False):
            if not out:
                continue
            if not isinstance(value, np.ndarray) or value.dtype.name not in ONNX_NAMES:
                self.unknown.setdefault(op, "not folded at import: a result is no numeric tensor")
                return
            if value.size > FOLD_LIMIT:
                self.unknown.setdefault(
                    op,
                    f"not folded at import: a result of {value.size} elements, over the "
                    f"{FOLD_LIMIT} limit",
                )
                return
        for out, value in zip(n.output, results, strict=False):
            if out:
                self.initializers[out] = np.asarray(value, order="C")

    def _split_form(self, name, inputs: list[str], outputs: list[str], attrs) -> list[str]:
        """Split's `split` attribute (opset < 13) becomes its second input; with neither sizes
        nor `num_outputs` (opset < 18) the parts are one per output."""
        if "split" in attrs:
            sizes = attrs.pop("split")
            if not isinstance(sizes, list) or len(inputs) > 1:
                raise self.fail(
                    f"node '{name}' (Split): 'split' must be one list of ints, given as an "
                    "attribute (opset < 13) or as the second input, not both"
                )
            inputs = [
                inputs[0] if inputs else "",
                self._const(f"{name}_split", np.array(sizes, np.int64)),
            ]
        if len(inputs) < 2 and attrs.get("num_outputs") is None:
            attrs["num_outputs"] = len(outputs)
        return inputs

    # -- If ------------------------------------------------------------------------------------
    def _if(self, n, name: str) -> None:
        """Inline the branch an If takes, its values renamed apart and its outputs written to
        the If's; outer values it reads keep their names."""
        if not n.input or not n.input[0]:
            raise self.fail(f"If '{name}': no condition")
        cond = self._folded(n.input[0])
        if cond is None:
            self._runtime_if(n, name)
            return
        if cond.size != 1:
            raise self.fail(f"If '{name}': condition must hold one value, got shape {cond.shape}")
        key = "then_branch" if bool(cond.reshape(())) else "else_branch"
        branch = next((a.g for a in n.attribute if a.name == key), None)
        if branch is None:
            raise self.fail(f"If '{name}': no {key}")
        if len(branch.output) != len(n.output):
            raise self.fail(
                f"If '{name}': {key} has {len(branch.output)} outputs, the If {len(n.output)}"
            )
        self._check_ops(branch)
        rename: dict[str, str] = {}
        for t in branch.initializer:
            rename[t.name] = self._const(f"{name}/{t.name}", self._tensor(t))
        produced = {o for bn in branch.node for o in bn.output if o}
        identities = []
        for inner, outer in zip(branch.output, n.output, strict=True):
            if not outer:
                continue
            if inner.name in produced and inner.name not in rename:
                rename[inner.name] = outer
            else:
                identities.append((inner.name, outer))
        for o in sorted(produced - rename.keys()):
            rename[o] = self._fresh(f"{name}/{o}")
        self.scopes.append(rename)
        try:
            self._inline(branch.node, name, rename)
            for k, (inner, outer) in enumerate(identities):
                self.nodes.append(
                    Node("Identity", [self._resolve(inner)], [outer], {}, f"{name}/out_{k}")
                )
        finally:
            self.scopes.pop()

    def _inline(self, nodes, prefix: str, rename: dict[str, str]) -> None:
        """Convert a branch's or a body's `nodes` into this graph, named under `prefix`, their
        outputs renamed by `rename` (the innermost scope) and their inputs resolved."""
        for i, bn in enumerate(nodes):
            copy = type(bn)()
            copy.CopyFrom(bn)
            copy.name = f"{prefix}/{bn.name or f'{bn.op_type}_{i}'}"
            copy.input[:] = [self._resolve(v) for v in bn.input]
            copy.output[:] = [rename.get(v, v) if v else v for v in bn.output]
            self._node(copy, i)

    def _runtime_if(self, n, name: str) -> None:
        """Keep both branches as graphs; the outer values either reads become inputs of both."""
        converted = {}
        for key in ("then_branch", "else_branch"):
            branch = next((a.g for a in n.attribute if a.name == key), None)
            if branch is None:
                raise self.fail(f"If '{name}': no {key}")
            if len(branch.output) != len(n.output):
                raise self.fail(
                    f"If '{name}': {key} has {len(branch.output)} outputs, the If {len(n.output)}"
                )
            self._check_ops(branch)
            converted[key] = self._branch(branch, f"{name}/{key}")
        captured: dict[str, None] = {}
        for nodes, inits, outputs in converted.values():
            inner = inits.keys() | {o for bn in nodes for o in bn.outputs}
            reads = [i for bn in nodes for i in bn.inputs] + [v.name for v in outputs]
            captured.update((i, None) for i in reads if i and i not in inner)
        attrs = {
            key: Graph([self._outer_value(c) for c in captured], outputs, nodes, inits, name=key)
            for key, (nodes, inits, outputs) in converted.items()
        }
        inputs = [self._resolve(n.input[0]), *captured]
        self.nodes.append(Node("If", inputs, list(n.output), attrs, name))

    def _branch(
        self, g, name: str, inputs: list[Value] = ()
    ) -> tuple[list[Node], dict[str, np.ndarray], list[Value]]:
        """A branch's (or body's, whose `inputs` are given) nodes and initializers, converted
        as the main graph's are, and its outputs; the values it reads from enclosing graphs
        keep their (resolved) names."""
        self.outer.append((self.nodes, self.initializers, self.inputs))
        self.nodes, self.initializers, self.inputs = [], {}, list(inputs)
        try:
            for t in g.initializer:
                self.initializers[t.name] = self._tensor(t)
            for i, bn in enumerate(g.node):
                copy = type(bn)()
                copy.CopyFrom(bn)
                copy.name = f"{name}/{bn.name or f'{bn.op_type}_{i}'}"
                copy.input[:] = [self._resolve(v) for v in bn.input]
                self._node(copy, i)
            outputs = []
            for v in g.output:
                value = self._value(v)
                value.name = self._resolve(v.name)
                outputs.append(value)
            return self.nodes, self.initializers, outputs
        finally:
            self.nodes, self.initializers, self.inputs = self.outer.pop()

    # -- sequences -----------------------------------------------------------------------------
    def _constant(self, value: str) -> np.ndarray | None:
        """`value` if it is a constant at import: an initializer (of this graph or an enclosing
        one) or an Identity of one, else what _folded finds."""
        for _ in range(8):
            for inits in (self.initializers, *(o[1] for o in reversed(self.outer))):
                if value in inits:
                    return inits[value]
            producer = next((m for m in reversed(self.nodes) if value in m.outputs), None)
            if producer is None or producer.op != "Identity":
                break
            value = producer.inputs[0]
        return self._folded(value)

    def _position(self, value: str, name: str, op: str, size: int, insert: bool = False) -> int:
        """A sequence position input: a constant integer, negative from the end, within the
        sequence's `size` (or at its end where `insert`)."""
        pos = self._constant(value)
        if pos is None or pos.size != 1 or pos.dtype.kind not in "iu":
            raise UnsupportedOpError(
                f"{self.where}: node '{name}' ({op}): position '{value}' is computed at run "
                "time; tinydl follows sequences only at constant positions"
            )
        at = int(pos.reshape(()))
        at += size if at < 0 else 0
        if not 0 <= at <= size - (not insert):
            raise self.fail(
                f"node '{name}' ({op}): position {int(pos.reshape(()))} is outside "
                f"a sequence of {size}"
            )
        return at

    def _sequence(self, n, name: str) -> None:
        """A sequence op, followed at import: a sequence is the list of tensors it holds (the
        model never sees it); SequenceAt becomes an Identity of its element, SequenceLength a
        constant, SplitToSequence a Split, ConcatFromSequence a Concat."""
        op, ins, outs = n.op_type, list(n.input), list(n.output)
        attrs = self._attrs(n)

        def held(v: str) -> list[str]:
            if v not in self.seqs:
                raise UnsupportedOpError(
                    f"{self.where}: node '{name}' ({op}): '{v}' is not a sequence tinydl can "
                    "follow (one made by SequenceEmpty, SequenceConstruct, SplitToSequence or an "
                    "unrolled Loop)"
                )
            return self.seqs[v]

        if op == "SequenceEmpty":
            self.seqs[outs[0]] = []
        elif op == "SequenceConstruct":
            self.seqs[outs[0]] = list(ins)
        elif op == "Identity":
            self.seqs[outs[0]] = list(held(ins[0]))
        elif op == "SequenceInsert":
            items = list(held(ins[0]))
            at = len(items)
            if len(ins) > 2 and ins[2]:
                at = self._position(ins[2], name, op, len(items), insert=True)
            items.insert(at, ins[1])
            self.seqs[outs[0]] = items
        elif op == "SequenceErase":
            items = list(held(ins[0]))
            at = len(items) - 1
            if len(ins) > 1 and ins[1]:
                at = self._position(ins[1], name, op, len(items))
            if not items:
                raise self.fail(f"node '{name}' ({op}): the sequence is empty")
            del items[at]
            self.seqs[outs[0]] = items
        elif op == "SequenceAt":
            items = held(ins[0])
            at = self._position(ins[1], name, op, len(items))
            self.nodes.append(Node("Identity", [items[at]], [outs[0]], {}, name))
        elif op == "SequenceLength":
            self.initializers[outs[0]] = np.array(len(held(ins[0])), np.int64)
        elif op == "ConcatFromSequence":
            items = held(ins[0])
            if not items:
                raise self.fail(f"node '{name}' ({op}): the sequence is empty")
            axis = attrs.get("axis")
            if not isinstance(axis, int):
                raise self.fail(f"node '{name}' ({op}): needs an integer 'axis'")
            if attrs.get("new_axis", 0):
                axes = self._const(f"{name}_axes", np.array([axis], np.int64))
                parts = []
                for k, item in enumerate(items):
                    parts.append(self._fresh(f"{name}/item{k}"))
                    self.nodes.append(
                        Node("Unsqueeze", [item, axes], [parts[-1]], {}, f"{name}/unsqueeze{k}")
                    )
                items = parts
            self.nodes.append(Node("Concat", list(items), [outs[0]], {"axis": axis}, name))
        elif op == "SplitToSequence":
            self._split_to_sequence(name, ins, outs[0], attrs)
        else:  # pragma: no cover - SEQUENCE_OPS and this chain agree
            raise AssertionError(op)

    def _split_to_sequence(self, name: str, ins: list[str], out: str, attrs) -> None:
        """SplitToSequence as a Split: sizes given, or chunks of a constant size (the last
        smaller), or pieces of one (squeezed unless keepdims) along an axis of known length."""
        axis = attrs.get("axis", 0)
        split = self._constant(ins[1]) if len(ins) > 1 and ins[1] else None
        if len(ins) > 1 and ins[1] and split is None:
            raise UnsupportedOpError(
                f"{self.where}: node '{name}' (SplitToSequence): split '{ins[1]}' is computed at "
                "run time; tinydl follows sequences only of constant sizes"
            )
        if split is not None and split.ndim == 1:
            sizes = [int(v) for v in split]
        else:
            length = self._length(ins[0], axis)
            if length is None:
                raise UnsupportedOpError(
                    f"{self.where}: node '{name}' (SplitToSequence): the length of '{ins[0]}' "
                    f"along axis {axis} is not known at import"
                )
            step = 1 if split is None else int(split.reshape(()))
            if step <= 0:
                raise self.fail(f"node '{name}' (SplitToSequence): split must be positive")
            sizes = [min(step, length - k) for k in range(0, length, step)]
        parts = [self._fresh(f"{name}/part{k}") for k in range(len(sizes))]
        counts = self._const(f"{name}_split", np.array(sizes, np.int64))
        self.nodes.append(Node("Split", [ins[0], counts], parts, {"axis": axis}, name))
        if split is None and not attrs.get("keepdims", 1):
            axes = self._const(f"{name}_axes", np.array([axis], np.int64))
            squeezed = [self._fresh(f"{name}/item{k}") for k in range(len(parts))]
            for k, (part, item) in enumerate(zip(parts, squeezed, strict=True)):
                self.nodes.append(Node("Squeeze", [part, axes], [item], {}, f"{name}/squeeze{k}"))
            parts = squeezed
        self.seqs[out] = parts

    def _length(self, value: str, axis: int) -> int | None:
        """The length of `value` along `axis` where shape inference knows it at import."""
        known = self._inferred(value)
        shape = None if known is None else known.shape
        if shape is None or not -len(shape) <= axis < len(shape):
            return None
        dim = shape[axis]
        return dim if isinstance(dim, int) else None

    def _unrolled(self, n, name: str) -> None:
        """A Loop that carries a sequence (tinydl has no sequence values) unrolled at import: a
        constant trip count (at most UNROLL_LIMIT) and a condition that folds at each
        iteration's end; the body's nodes are converted once an iteration, its inputs bound
        to the iteration number, the condition and the values carried so far, its scan
        outputs stacked (Unsqueeze, Concat)."""
        body = self._body_of(n, name)
        carried = len(n.input) - 2
        if carried < 0 or len(body.input) != carried + 2 or len(body.output) < carried + 1:
            raise self.fail(
                f"Loop '{name}': {len(n.input)} inputs (trip count, condition, {carried} "
                f"loop-carried values) need a body of {carried + 2} inputs and at least "
                f"{carried + 1} outputs, got {len(body.input)} and {len(body.output)}"
            )
        self._check_ops(body)
        trips = self._constant(n.input[0]) if n.input[0] else None
        if trips is None or trips.size != 1 or int(trips.reshape(())) > UNROLL_LIMIT:
            got = "computed at run time" if trips is None else f"{int(trips.reshape(-1)[0])}"
            raise UnsupportedOpError(
                f"{self.where}: Loop '{name}' carries a sequence: tinydl unrolls such a loop at "
                f"import, which needs a constant trip count of at most {UNROLL_LIMIT}, got {got}"
            )
        count = max(0, int(trips.reshape(())))
        if n.input[1]:
            cond = self._constant(n.input[1])
            if cond is None:
                raise UnsupportedOpError(
                    f"{self.where}: Loop '{name}' carries a sequence and "
                    "its condition is computed at run time"
                )
            count = count if bool(cond.reshape(-1)[0]) else 0
        current = list(n.input[2:])
        scans: list[list[str]] = []
        for it in range(count):
            rename = {
                body.input[0].name: self._const(f"{name}/iter{it}", np.array(it, np.int64)),
                body.input[1].name: self._const(f"{name}/cond{it}", np.array(True)),
            }
            rename.update({b.name: c for b, c in zip(body.input[2:], current, strict=True)})
            for t in body.initializer:
                rename[t.name] = self._const(f"{name}/{it}/{t.name}", self._tensor(t))
            for o in sorted({o for bn in body.node for o in bn.output if o} - rename.keys()):
                rename[o] = self._fresh(f"{name}/{it}/{o}")
            self.scopes.append(rename)
            try:
                self._inline(body.node, f"{name}/{it}", rename)
                outs = [self._resolve(v.name) for v in body.output]
            finally:
                self.scopes.pop()
            current = outs[1 : carried + 1]
            scans.append(outs[carried + 1 :])
            more = self._constant(outs[0])
            if more is None:
                raise UnsupportedOpError(
                    f"{self.where}: Loop '{name}' carries a sequence and "
                    "its body's condition is computed at run time"
                )
            if not bool(more.reshape(-1)[0]):
                break
        for k, (out, value) in enumerate(zip(n.output[:carried], current, strict=False)):
            if not out:
                continue
            if value in self.seqs:
                self.seqs[out] = list(self.seqs[value])
            else:
                self.nodes.append(Node("Identity", [value], [out], {}, f"{name}/out_{k}"))
        for k, out in enumerate(n.output[carried:]):
            if not out:
                continue
            if not scans:
                raise UnsupportedOpError(
                    f"{self.where}: Loop '{name}' runs no iteration, so its "
                    f"scan output '{out}' has no known shape"
                )
            axes = self._const(f"{name}/scan_axes", np.array([0], np.int64))
            parts = []
            for it, values in enumerate(scans):
                parts.append(self._fresh(f"{name}/scan{k}_{it}"))
                self.nodes.append(
                    Node("Unsqueeze", [values[k], axes], [parts[-1]], {}, f"{name}/scan{k}_{it}")
                )
            self.nodes.append(Node("Concat", parts, [out], {"axis": 0}, f"{name}/scan{k}"))

    # -- Loop ----------------------------------------------------------------------------------
    def _loop(self, n, name: str) -> None:
        """A Loop with its body converted; the outer values the body reads become loop-carried
        values after the Loop's own (their final values are outputs nobody reads)."""
        carried = len(n.input) - 2
        body = self._body_of(n, name)
        if carried < 0 or len(body.input) != carried + 2 or len(body.output) < carried + 1:
            raise self.fail(
                f"Loop '{name}': {len(n.input)} inputs (trip count, condition, {carried} "
                f"loop-carried values) need a body of {carried + 2} inputs and at least "
                f"{carried + 1} outputs, got {len(body.input)} and {len(body.output)}"
            )
        self._lifted(n, name, body, len(n.input), carried + 2, carried + 1, carried)

    def _scan(self, n, name: str) -> None:
        """A Scan with its body converted; the outer values the body reads become state values
        after the Scan's own, before the scanned inputs."""
        scanned = self._attrs(n, skip={"body"}).get("num_scan_inputs")
        body = self._body_of(n, name)
        if not isinstance(scanned, int) or not 1 <= scanned <= len(n.input):
            raise self.fail(
                f"Scan '{name}': num_scan_inputs must be 1..{len(n.input)}, got {scanned!r}"
            )
        state = len(n.input) - scanned
        if len(body.input) != len(n.input) or len(body.output) < state:
            raise self.fail(
                f"Scan '{name}': {len(n.input)} inputs ({state} state values) need a body of "
                f"{len(n.input)} inputs and at least {state} outputs, got {len(body.input)} and "
                f"{len(body.output)}"
            )
        self._lifted(n, name, body, state, state, state, state)

    def _body_of(self, n, name: str):
        body = next((a.g for a in n.attribute if a.name == "body"), None)
        if body is None:
            raise self.fail(f"{n.op_type} '{name}': no body")
        return body

    def _lifted(self, n, name: str, body, at_input, at_body_input, at_body_output, at_output):
        """Append node `n` (Loop or Scan) with its body converted as a closed graph: each outer
        value the body reads is inserted as a value the body passes through unchanged, at
        these positions of the node's inputs, the body's inputs and outputs, and the node's
        outputs (its final values are outputs nobody reads)."""
        self._check_ops(body)
        own = [self._value(v) if v.type.WhichOneof("value") else Value(v.name) for v in body.input]
        nodes, inits, outputs = self._branch(body, f"{name}/body", own)
        inner = inits.keys() | {o for bn in nodes for o in bn.outputs} | {v.name for v in own}
        reads = [i for bn in nodes for i in bn.inputs] + [v.name for v in outputs]
        captured = list(dict.fromkeys(i for i in reads if i and i not in inner))
        # (named as the outer values, as an If's branch inputs are: nested Ifs read them so)
        passed = [self._outer_value(c) for c in captured]
        graph = Graph(
            [*own[:at_body_input], *passed, *own[at_body_input:]],
            [*outputs[:at_body_output], *passed, *outputs[at_body_output:]],
            nodes,
            inits,
            name="body",
        )
        # one output per body output, but the condition a Loop's body gives first
        results = list(n.output)
        results += [""] * (len(body.output) - (n.op_type == "Loop") - len(n.output))
        results = [r or self._fresh(f"{name}/unused") for r in results]
        finals = [self._fresh(f"{name}/{c}_final") for c in captured]
        inputs = [self._resolve(i) if i else "" for i in n.input]
        attrs = {**self._attrs(n, skip={"body"}), "body": graph}
        self.nodes.append(
            Node(
                n.op_type,
                [*inputs[:at_input], *captured, *inputs[at_input:]],
                [*results[:at_output], *finals, *results[at_output:]],
                attrs,
                name,
            )
        )

    def _outer_value(self, name: str) -> Value:
        """A captured value, typed as far as the enclosing graphs declare it."""
        for _, inits, inputs in [(None, self.initializers, self.inputs), *reversed(self.outer)]:
            if name in inits:
                return Value(name, dtype_name(inits[name].dtype), tuple(inits[name].shape))
            for v in inputs:
                if v.name == name:
                    return Value(name, v.dtype, v.shape)
        return Value(name)

    def _resolve(self, value: str) -> str:
        """A branch's name for a value, as the graph now calls it (innermost branch first)."""
        for scope in reversed(self.scopes):
            if value in scope:
                return scope[value]
        return value

    def _folded(self, value: str) -> np.ndarray | None:
        """The value if it is a constant at import: an initializer, or what shape inference
        folds from the nodes converted so far (in the graph that defines it, a branch or an
        enclosing graph); None when it is computed at run time."""
        known = self._inferred(value)
        return None if known is None else known.value

    def _inferred(self, value: str):
        """What is known of `value` at import (ops.TensorType: dtype, shape, and the value of a
        constant): an initializer's own, else shape inference over the nodes converted so far
        in the graph that defines it (a branch or an enclosing graph), else this graph's input's
        declared type; None where nothing defines it."""
        from tinydl.ops import infer_graph
        from tinydl.ops.base import TensorType

        scopes = [*self.outer, (self.nodes, self.initializers, self.inputs)]
        for scope in reversed(scopes):
            if value in scope[1]:
                arr = scope[1][value]
                return TensorType(dtype_name(arr.dtype), tuple(arr.shape), arr)
            if any(value in n.outputs for n in scope[0]):
                break
        else:
            given = next((v for v in self.inputs if v.name == value), None)
            return None if given is None else TensorType(given.dtype, given.shape)
        nodes, inits, inputs = scope
        nodes = [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.name) for n in nodes]
        defined = {o for n in nodes for o in n.outputs} | inits.keys() | {v.name for v in inputs}
        # A branch reads values of enclosing graphs: unknown here, like graph inputs.
        free = [Value(i) for n in nodes for i in n.inputs if i and i not in defined]
        free = list({v.name: v for v in free}.values())
        graph = Graph([*inputs, *free], [], nodes, dict(inits))
        validate(graph, infer=False)
        return infer_graph(graph).get(value)

    def _legacy_softmax(self, op: str, name, inputs, outputs, attrs: dict[str, Any]) -> None:
        """Opset < 13 (Log)Softmax coerces the input to 2-D at `axis`; axis -1 is the same as
        today's."""
        if len(inputs) != 1 or not inputs[0] or len(outputs) != 1 or not outputs[0]:
            raise self.fail(f"node '{name}' ({op}): expects one input and one output")
        axis = attrs.pop("axis", 1)
        if attrs:
            raise self.fail(
                f"node '{name}' ({op}): unknown attribute '{sorted(attrs)[0]}' (known: axis)"
            )
        if not isinstance(axis, int):
            raise self.fail(
                f"node '{name}' ({op}): attribute 'axis' must be an int, got {type(axis).__name__}"
            )
        if axis == -1:
            self.nodes.append(Node(op, inputs, outputs, {"axis": -1}, name))
            return
        flat, soft, shape = (self._fresh(f"{name}_{s}") for s in ("flat", "soft", "shape"))
        self.nodes += [
            Node("Flatten", [inputs[0]], [flat], {"axis": axis}, f"{name}_flatten"),
            Node(op, [flat], [soft], {"axis": 1}, name),
            Node("Shape", [inputs[0]], [shape], {}, f"{name}_shape"),
            Node("Reshape", [soft, shape], outputs, {}, f"{name}_reshape"),
        ]

    def _legacy_group_norm(self, name, inputs, outputs, attrs: dict[str, Any]) -> None:
        """Opset 18-20 GroupNormalization scales and shifts per group, not per channel: that is
        InstanceNormalization of x seen as (N, groups, rest), reshaped back."""
        if len(inputs) != 3 or not all(inputs) or len(outputs) != 1 or not outputs[0]:
            raise self.fail(
                f"node '{name}' (GroupNormalization): expects inputs X, scale, bias and one output"
            )
        groups = attrs.pop("num_groups", None)
        epsilon = attrs.pop("epsilon", 1e-5)
        if attrs:
            raise self.fail(
                f"node '{name}' (GroupNormalization): unknown attribute '{sorted(attrs)[0]}' "
                "(known: epsilon, num_groups)"
            )
        if not isinstance(groups, int) or groups < 1:
            raise self.fail(
                f"node '{name}' (GroupNormalization): 'num_groups' must be a positive int, "
                f"got {groups!r}"
            )
        grouped, normed, shape = (
            self._fresh(f"{name}_{s}") for s in ("grouped", "normed", "shape")
        )
        target = self._const(f"{name}_groups", np.array([0, groups, -1], np.int64))
        self.nodes += [
            Node("Reshape", [inputs[0], target], [grouped], {}, f"{name}_group"),
            Node(
                "InstanceNormalization",
                [grouped, inputs[1], inputs[2]],
                [normed],
                {"epsilon": epsilon},
                name,
            ),
            Node("Shape", [inputs[0]], [shape], {}, f"{name}_shape"),
            Node("Reshape", [normed, shape], outputs, {}, f"{name}_reshape"),
        ]


def _reference_run(n, values: list[np.ndarray | None], opset: int) -> list:
    """Node `n` run alone by onnx.reference.ReferenceEvaluator on constant inputs."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{k}" if i else "" for k, i in enumerate(n.input)]
    node = helper.make_node(n.op_type, names, [f"out{k}" for k in range(len(n.output))])
    node.attribute.extend(n.attribute)
    inits = [
        numpy_helper.from_array(np.asarray(v), name)
        for name, v in zip(names, values, strict=True)
        if name
    ]
    outputs = [helper.make_value_info(f"out{k}", helper.TypeProto()) for k in range(len(n.output))]
    graph = helper.make_graph([node], "fold", [], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return list(ReferenceEvaluator(model).run(None, {}))


def _names(g) -> set[str]:
    """Every value name in an ONNX graph and the graphs in its nodes' attributes."""
    names = {v.name for v in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        names.update(n.input)
        names.update(n.output)
        for a in n.attribute:
            for sub in [a.g, *a.graphs] if a.HasField("g") else a.graphs:
                names |= _names(sub)
    return names
