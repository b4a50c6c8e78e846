"""TFLite reader: a .tflite flatbuffer read into plain Python values (tensors, operators,
buffer spans), for importers/tflite.py to convert.

The file is read with the `tflite` package (TFLite's schema compiled by flatc into Python
classes: pure Python, small, versioned with TensorFlow), so no flatbuffer code is hand-written
here. Everything the file says is copied into plain Python values, with every vector length
and buffer span checked against the file; any failure while reading is an InvalidModelError.
`densify` expands TFLite's sparse tensor format, checking every index.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, InvalidModelError

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"

# TFLite TensorType codes -> IR dtypes (the others, e.g. STRING or INT4, are not supported).
DTYPES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    7: "int16",
    9: "int8",
    10: "float64",
    12: "uint64",
    15: "uint32",
    16: "uint16",
}

# Builtin options: op -> (options table, [fields]). Fields are read with the generated accessor
# of that name; an absent table reads as the schema's defaults.
_CONV = [
    "Padding",
    "StrideW",
    "StrideH",
    "FusedActivationFunction",
    "DilationWFactor",
    "DilationHFactor",
]
_POOL = ["Padding", "StrideW", "StrideH", "FilterWidth", "FilterHeight", "FusedActivationFunction"]
_ACT = ["FusedActivationFunction"]
OPTIONS: dict[str, tuple[str, list[str]]] = {
    "CONV_2D": ("Conv2DOptions", _CONV),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions", _CONV + ["DepthMultiplier"]),
    "TRANSPOSE_CONV": (
        "TransposeConvOptions",
        ["Padding", "StrideW", "StrideH", "FusedActivationFunction"],
    ),
    "MAX_POOL_2D": ("Pool2DOptions", _POOL),
    "AVERAGE_POOL_2D": ("Pool2DOptions", _POOL),
    "ADD": ("AddOptions", _ACT),
    "SUB": ("SubOptions", _ACT),
    "MUL": ("MulOptions", _ACT),
    "DIV": ("DivOptions", _ACT),
    "CONCATENATION": ("ConcatenationOptions", ["Axis", "FusedActivationFunction"]),
    "FULLY_CONNECTED": (
        "FullyConnectedOptions",
        ["FusedActivationFunction", "WeightsFormat", "KeepNumDims"],
    ),
    "RESHAPE": ("ReshapeOptions", ["NewShape"]),
    "RESIZE_BILINEAR": ("ResizeBilinearOptions", ["AlignCorners", "HalfPixelCenters"]),
    "RESIZE_NEAREST_NEIGHBOR": (
        "ResizeNearestNeighborOptions",
        ["AlignCorners", "HalfPixelCenters"],
    ),
    "DEPTH_TO_SPACE": ("DepthToSpaceOptions", ["BlockSize"]),
    "SPACE_TO_DEPTH": ("SpaceToDepthOptions", ["BlockSize"]),
    "SOFTMAX": ("SoftmaxOptions", ["Beta"]),
    "LEAKY_RELU": ("LeakyReluOptions", ["Alpha"]),
    "MEAN": ("ReducerOptions", ["KeepDims"]),
    "STRIDED_SLICE": (
        "StridedSliceOptions",
        ["BeginMask", "EndMask", "EllipsisMask", "NewAxisMask", "ShrinkAxisMask", "Offset"],
    ),
    "SQUEEZE": ("SqueezeOptions", ["SqueezeDims"]),
    "BATCH_MATMUL": ("BatchMatMulOptions", ["AdjX", "AdjY"]),
    "MIRROR_PAD": ("MirrorPadOptions", ["Mode"]),
}
# Fields whose value is a vector (read with <Field>AsNumpy; None when absent).
_VECTOR_FIELDS = {"NewShape", "SqueezeDims"}


def _tflite():
    try:
        import tflite
    except ImportError:
        raise BackendUnavailableError(
            "reading .tflite files needs the 'tflite' package: pip install 'tinydl[tflite]'"
        ) from None
    return tflite


# -- reading the flatbuffer into plain values ------------------------------------------------------


@dataclass
class _TensorInfo:
    index: int
    name: str
    type_code: int
    shape: tuple[int, ...]
    signature: tuple[int, ...] | None
    buffer: int
    variable: bool
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    quantized_dimension: int = 0
    sparsity: dict | None = None

    @property
    def dtype(self) -> str | None:
        return DTYPES.get(self.type_code)

    @property
    def dynamic(self) -> bool:
        return self.signature is not None and any(d < 0 for d in self.signature)


@dataclass
class _OpInfo:
    index: int
    op: str
    custom: str
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    custom_options: bytes = b""  # a custom op's options, as the file stores them


@dataclass
class _Model:
    data: bytes
    description: str
    tensors: list[_TensorInfo]
    operators: list[_OpInfo]
    inputs: list[int]
    outputs: list[int]
    buffers: list[tuple[int, int]]  # (start, length) of each buffer's bytes in `data`
    subgraph_name: str


class _Reader:
    """Copies a TFLite model out of its flatbuffer, checking each length against the file."""

    def __init__(self, data: bytes, where: str):
        self.tfl = _tflite()
        self.data = data
        self.where = where
        self.names = {
            v: k for k, v in vars(self.tfl.BuiltinOperator).items() if not k.startswith("_")
        }

    def fail(self, message: str) -> InvalidModelError:
        return InvalidModelError(f"{self.where}: {message}")

    def count(self, n: int, what: str, item_size: int = 4) -> int:
        if not 0 <= n <= len(self.data) // item_size:
            raise self.fail(f"{what}: length {n} does not fit in a {len(self.data)}-byte file")
        return n

    def ints(self, array, what: str) -> list[int]:
        if isinstance(array, int):  # the generated accessor's "absent" value
            return []
        self.count(array.size, what)
        return [int(v) for v in array]

    def text(self, raw: bytes | None, what: str) -> str:
        if raw is None:
            return ""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text: {raw[:40]!r}") from None

    def read(self) -> _Model:
        tfl, data = self.tfl, self.data
        if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
            raise self.fail(f"not a TFLite flatbuffer (no '{FILE_IDENTIFIER.decode()}' identifier)")
        model = tfl.Model.GetRootAs(data, 0)
        if model.Version() != SCHEMA_VERSION:
            raise self.fail(f"TFLite schema version {model.Version()}, expected {SCHEMA_VERSION}")
        n_graphs = self.count(model.SubgraphsLength(), "subgraphs")
        if n_graphs < 1:
            raise self.fail("the model has no subgraph")
        graph = model.Subgraphs(0)
        codes = [
            self._opcode(model.OperatorCodes(i))
            for i in range(self.count(model.OperatorCodesLength(), "operator codes"))
        ]
        buffers = [
            self._buffer(model.Buffers(i), i)
            for i in range(self.count(model.BuffersLength(), "buffers"))
        ]
        tensors = [
            self._tensor(graph.Tensors(i), i)
            for i in range(self.count(graph.TensorsLength(), "tensors"))
        ]
        operators = []
        for i in range(self.count(graph.OperatorsLength(), "operators")):
            operators.append(self._operator(graph.Operators(i), i, codes))
        return _Model(
            data=data,
            description=self.text(model.Description(), "model description"),
            tensors=tensors,
            operators=operators,
            inputs=self.ints(graph.InputsAsNumpy(), "subgraph inputs"),
            outputs=self.ints(graph.OutputsAsNumpy(), "subgraph outputs"),
            buffers=buffers,
            subgraph_name=self.text(graph.Name(), "subgraph name"),
        )

    def _opcode(self, code) -> tuple[str, str, int]:
        # Codes below 127 may sit in the old int8 field only; the newer field wins when larger.
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        name = self.names.get(builtin, f"BUILTIN_{builtin}")
        custom = self.text(code.CustomCode(), "custom op code") if name == "CUSTOM" else ""
        return name, custom, int(code.Version())

    def _buffer(self, buf, index: int) -> tuple[int, int]:
        offset, size = int(buf.Offset()), int(buf.Size())
        if offset > 1:  # data stored after the flatbuffer (models over 2 GB)
            if offset + size > len(self.data):
                raise self.fail(
                    f"buffer {index}: bytes {offset}..{offset + size} lie outside "
                    f"the {len(self.data)}-byte file"
                )
            return offset, size
        tab = buf._tab  # the generated class's flatbuffers.table.Table
        o = tab.Offset(4)  # field 0: data
        if not o:
            return 0, 0
        start, length = tab.Vector(o), tab.VectorLen(o)
        if not 0 <= start <= start + length <= len(self.data):
            raise self.fail(f"buffer {index}: {length} bytes at {start} lie outside the file")
        return int(start), int(length)

    def _tensor(self, t, index: int) -> _TensorInfo:
        name = self.text(t.Name(), f"tensor {index} name")
        shape = tuple(self.ints(t.ShapeAsNumpy(), f"tensor '{name}' shape"))
        signature = None
        if not t.ShapeSignatureIsNone():
            signature = tuple(self.ints(t.ShapeSignatureAsNumpy(), f"tensor '{name}' signature"))
        info = _TensorInfo(
            index, name, int(t.Type()), shape, signature, int(t.Buffer()), bool(t.IsVariable())
        )
        q = t.Quantization()
        if q is not None and q.ScaleLength() > 0:
            self.count(q.ScaleLength(), f"tensor '{name}' quantization scales")
            info.scale = np.array(q.ScaleAsNumpy(), np.float32)
            zp = q.ZeroPointAsNumpy()
            info.zero_point = np.array(zp if not isinstance(zp, int) else [0], np.int64)
            info.quantized_dimension = int(q.QuantizedDimension())
        sp = t.Sparsity()
        if sp is not None:
            info.sparsity = self._sparsity(sp, name)
        return info

    def _sparsity(self, sp, name: str) -> dict:
        dims = []
        for i in range(self.count(sp.DimMetadataLength(), f"tensor '{name}' sparsity")):
            d = sp.DimMetadata(i)
            dims.append(
                {
                    "format": int(d.Format()),
                    "dense_size": int(d.DenseSize()),
                    "segments": self._index_vector(d.ArraySegmentsType(), d.ArraySegments(), name),
                    "indices": self._index_vector(d.ArrayIndicesType(), d.ArrayIndices(), name),
                }
            )
        return {
            "traversal_order": self.ints(sp.TraversalOrderAsNumpy(), f"tensor '{name}' order"),
            "block_map": self.ints(sp.BlockMapAsNumpy(), f"tensor '{name}' block map"),
            "dims": dims,
        }

    def _index_vector(self, kind: int, table, name: str) -> np.ndarray | None:
        classes = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}
        if kind == 0 or table is None:
            return None
        if kind not in classes:
            raise self.fail(f"tensor '{name}': unknown sparse index vector type {kind}")
        vec = getattr(self.tfl, classes[kind])()
        vec.Init(table.Bytes, table.Pos)
        values = vec.ValuesAsNumpy()
        return np.zeros(0, np.int64) if isinstance(values, int) else values.astype(np.int64)

    def _operator(self, op, index: int, codes: list[tuple[str, str, int]]) -> _OpInfo:
        code = int(op.OpcodeIndex())
        if not 0 <= code < len(codes):
            raise self.fail(
                f"operator {index}: opcode index {code} is out of range "
                f"(the model has {len(codes)} operator codes)"
            )
        name, custom, version = codes[code]
        info = _OpInfo(
            index,
            name,
            custom,
            self.ints(op.InputsAsNumpy(), f"operator {index}"),
            self.ints(op.OutputsAsNumpy(), f"operator {index}"),
            version=version,
        )
        if name in OPTIONS:
            info.options = self._options(op, name, index)
        if name == "CUSTOM" and op.CustomOptionsLength():
            self.count(op.CustomOptionsLength(), f"operator {index} custom options", 1)
            info.custom_options = op.CustomOptionsAsNumpy().tobytes()
        return info

    def _options(self, op, name: str, index: int) -> dict[str, Any]:
        table_name, fields = OPTIONS[name]
        options = getattr(self.tfl, table_name)()
        kind = int(op.BuiltinOptionsType())
        expected = getattr(self.tfl.BuiltinOptions, table_name)
        table = op.BuiltinOptions() if kind else None
        if table is None:
            options.Init(*_empty_table())  # reads as the schema's default for each field
        elif kind != expected:
            raise self.fail(
                f"operator {index} ({name}): options of type {kind}, expected {table_name}"
            )
        else:
            options.Init(table.Bytes, table.Pos)
        out: dict[str, Any] = {}
        for f in fields:
            if f in _VECTOR_FIELDS:
                absent = getattr(options, f"{f}IsNone")()
                out[f] = (
                    None
                    if absent
                    else self.ints(getattr(options, f"{f}AsNumpy")(), f"operator {index} {f}")
                )
            elif hasattr(options, f):
                out[f] = getattr(options, f)()
            else:
                out[f] = 0
        return out


@functools.cache
def _empty_table() -> tuple[bytes, int]:
    """A flatbuffer holding one table with no fields, and the table's position."""
    import flatbuffers

    builder = flatbuffers.Builder(16)
    builder.StartObject(0)
    builder.Finish(builder.EndObject())
    data = bytes(builder.Output())
    (root,) = struct.unpack_from("<I", data, 0)
    return data, root


def _parse(data: bytes, where: str) -> _Model:
    reader = _Reader(data, where)  # imports tflite first: a missing package is no model error
    try:
        return reader.read()
    except InvalidModelError:
        raise
    except (
        struct.error,
        IndexError,
        ValueError,
        TypeError,
        OverflowError,
        AttributeError,
        RecursionError,
        MemoryError,
        UnicodeDecodeError,
    ) as exc:
        raise InvalidModelError(
            f"{where}: not a valid TFLite flatbuffer ({type(exc).__name__}: {exc})"
        ) from None


# -- sparse tensors ------------------------------------------------------------------------------


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: dict, what: str) -> np.ndarray:
    """Expand TFLite's sparse format (dense and CSR levels over a traversal order, with optional
    dense blocks) to a dense array, as TFLite's FormatConverter does, checking every index."""

    def fail(message: str) -> InvalidModelError:
        return InvalidModelError(f"{what}: sparse tensor: {message}")

    rank = len(shape)
    order, block_map, dims = sparsity["traversal_order"], sparsity["block_map"], sparsity["dims"]
    levels = rank + len(block_map)
    if sorted(order) != list(range(levels)) or len(dims) != levels:
        raise fail(
            f"traversal order {order} and {len(dims)} dim metadata do not fit rank {rank} "
            f"with {len(block_map)} block dims"
        )
    if len(set(block_map)) != len(block_map) or any(not 0 <= b < rank for b in block_map):
        raise fail(f"block map {block_map} is not a set of axes of rank {rank}")
    block_size = []
    for b in range(len(block_map)):
        level = order.index(rank + b)
        if dims[level]["format"] != 0 or dims[level]["dense_size"] < 1:
            raise fail("block dimensions must be dense with a positive size")
        block_size.append(dims[level]["dense_size"])
    expanded = list(shape) + block_size  # size of each expanded dim
    for b, axis in enumerate(block_map):
        if shape[axis] % block_size[b]:
            raise fail(
                f"axis {axis} of size {shape[axis]} is not a multiple of block {block_size[b]}"
            )
        expanded[axis] = shape[axis] // block_size[b]

    # Walk the levels breadth-first: `pos` is each partial path's position at the current level.
    pos = np.zeros(1, np.int64)
    coords: list[np.ndarray] = []
    for level, meta in enumerate(dims):
        size = expanded[order[level]]
        if meta["format"] == 0:
            if meta["dense_size"] != size:
                raise fail(f"level {level}: dense size {meta['dense_size']}, expected {size}")
            if pos.size * size > math.prod(shape):
                raise fail("the levels hold more entries than the tensor")
            child = np.arange(size, dtype=np.int64)
            coords = [np.repeat(c, size) for c in coords] + [np.tile(child, pos.size)]
            pos = (pos[:, None] * size + child[None, :]).ravel()
        elif meta["format"] == 1:
            seg, idx = meta["segments"], meta["indices"]
            if seg is None or idx is None or seg.size < 1:
                raise fail(f"level {level}: CSR level without segments or indices")
            if pos.size and (pos.max() + 1 >= seg.size):
                raise fail(f"level {level}: {seg.size} segments for {pos.max() + 2} entries")
            if np.any(np.diff(seg) < 0) or seg[0] < 0 or seg[-1] > idx.size:
                raise fail(f"level {level}: segments are not increasing within the indices")
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise fail(f"level {level}: an index is outside the dimension of size {size}")
            lo, hi = seg[pos], seg[pos + 1]
            counts = hi - lo
            total = int(counts.sum())
            if total > values.size:
                raise fail(f"level {level}: {total} entries for {values.size} values")
            start = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
            pos = start + np.arange(total, dtype=np.int64)
            coords = [np.repeat(c, counts) for c in coords] + [idx[pos]]
        else:
            raise fail(f"level {level}: unknown dimension format {meta['format']}")
    if pos.size != values.size:
        raise fail(
            f"the sparse structure holds {pos.size} entries, the buffer {values.size} values"
        )
    original = [None] * rank
    for level, c in enumerate(coords[:rank]):
        original[order[level]] = c
    for level in range(rank, levels):
        b = order[level] - rank
        axis = block_map[b]
        original[axis] = original[axis] * block_size[b] + coords[level]
    dense = np.zeros(shape, values.dtype)
    if values.size:
        dense[tuple(original)] = values
    return dense
