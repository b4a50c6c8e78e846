"""TFLite importer: a .tflite flatbuffer becomes an ir.Graph in canonical (NCHW) form.

importers/tflite_reader.py reads the file into plain Python values first (every vector length
and buffer span checked against the file; any failure while reading is an InvalidModelError),
and only then is it converted here.

Conversion: NHWC tensors are held as NCHW where an op needs it (see importers/nhwc.py), weights
are reordered at import (OHWI -> OIHW; depthwise 1HWC -> C1HW with group=C), fused activations
become their own nodes, fp16 weights behind DEQUANTIZE and sparse weights behind DENSIFY are
expanded to dense float32 constants. Graph inputs keep their NHWC shape (metadata
`input_layout` says so); outputs are given back in TFLite's layout.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import InvalidModelError, UnsupportedOpError
from tinydl.importers.nhwc import (
    INT64_MAX,
    INT64_MIN,
    GraphBuilder,
    Tensor,
    channels_first,
    check_size,
    constant,
    identity,
    onnx_dtype,
)
from tinydl.importers.tflite_reader import (
    SCHEMA_VERSION,
    _Model,
    _OpInfo,
    _parse,
    _TensorInfo,
    densify,
)
from tinydl.ir.graph import Graph

ACTIVATIONS = {0: None, 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}


def load(path: str | os.PathLike) -> Graph:
    """Read, convert and validate a .tflite file; InvalidModelError for anything malformed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return from_bytes(data, where=str(path))


def from_bytes(data: bytes, where: str = "model") -> Graph:
    model = _parse(bytes(data), where)
    return _Converter(model, where).run()


# -- conversion --------------------------------------------------------------------------------


def _short(name: str) -> str:
    """A readable value name from a TFLite tensor name (they can be long ';'-joined lists)."""
    return name.split(";")[0][:120] or "t"


def _declared(info: _TensorInfo) -> tuple:
    dims = (
        info.signature
        if info.signature is not None and len(info.signature) == len(info.shape)
        else info.shape
    )
    return tuple(None if d < 0 else d for d in dims)


class _Converter:
    def __init__(self, model: _Model, where: str):
        self.m = model
        self.where = where
        self.b = GraphBuilder(where)
        self.values: dict[int, Tensor] = {}
        self.handlers = {
            "CONV_2D": self._conv,
            "DEPTHWISE_CONV_2D": self._depthwise,
            "TRANSPOSE_CONV": self._transpose_conv,
            "FULLY_CONNECTED": self._fully_connected,
            "MAX_POOL_2D": self._pool,
            "AVERAGE_POOL_2D": self._pool,
            "MEAN": self._mean,
            "ADD": self._binary,
            "SUB": self._binary,
            "MUL": self._binary,
            "DIV": self._binary,
            "POW": self._binary,
            "SQUARED_DIFFERENCE": self._squared_difference,
            "PRELU": self._binary,
            "RELU": self._activation,
            "RELU6": self._activation,
            "RELU_N1_TO_1": self._activation,
            "RELU_0_TO_1": self._activation,
            "LOGISTIC": self._activation,
            "TANH": self._activation,
            "HARD_SWISH": self._activation,
            "LEAKY_RELU": self._activation,
            "SQRT": self._unary,
            "RSQRT": self._rsqrt,
            "NEG": self._neg,
            "SQUARE": self._square,
            "SOFTMAX": self._softmax,
            "PAD": self._pad,
            "PADV2": self._pad,
            "MIRROR_PAD": self._pad,
            "CONCATENATION": self._concat,
            "RESHAPE": self._reshape,
            "SQUEEZE": self._squeeze,
            "EXPAND_DIMS": self._expand_dims,
            "TRANSPOSE": self._transpose,
            "STRIDED_SLICE": self._strided_slice,
            "SLICE": self._slice,
            "RESIZE_BILINEAR": self._resize,
            "RESIZE_NEAREST_NEIGHBOR": self._resize,
            "DEPTH_TO_SPACE": self._depth_to_space,
            "SPACE_TO_DEPTH": self._space_to_depth,
            "BATCH_MATMUL": self._batch_matmul,
            "CAST": self._cast,
            "DEQUANTIZE": self._dequantize,
            "DENSIFY": self._densify,
        }
        # MediaPipe's custom ops (mediapipe/util/tflite/operations/), by name and version.
        self.custom_handlers = {
            ("Convolution2DTransposeBias", 1): self._transpose_conv_bias,
            ("Landmarks2TransformMatrix", 2): self._landmarks_to_matrix,
            ("TransformTensorBilinear", 2): self._transform_tensor,
            ("TransformLandmarks", 2): self._transform_landmarks,
        }

    def fail(self, message: str) -> InvalidModelError:
        return InvalidModelError(f"{self.where}: {message}")

    def unsupported(self, message: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where}: {message}")

    # -- the whole model ----------------------------------------------------------------------
    def run(self) -> Graph:
        m = self.m
        bad = sorted({self._label(o) for o in m.operators if self._handler(o) is None})
        if bad:
            raise self.unsupported(f"TFLite ops not supported by tinydl: {', '.join(bad)}")
        for i in [*m.inputs, *m.outputs]:
            self.info(i)
        for t in m.tensors:
            if t.variable:
                raise self.unsupported(
                    f"tensor '{t.name}' is a variable (stateful models are not supported)"
                )
        for i in m.inputs:
            info = self.info(i)
            if info.dtype is None:
                raise self.unsupported(f"input '{info.name}' has unsupported type {info.type_code}")
            if info.scale is not None and info.dtype != "float32":
                raise self.unsupported(
                    f"input '{info.name}' is quantized ({info.dtype}); "
                    "quantized models are not supported"
                )
            dims = info.signature if info.signature is not None else info.shape
            if len(dims) != len(info.shape):
                raise self.fail(
                    f"input '{info.name}': shape {info.shape} and signature "
                    f"{info.signature} differ in rank"
                )
            shape = tuple(("N" if k == 0 else None) if d < 0 else d for k, d in enumerate(dims))
            self.values[i] = self.b.input(info.name or f"input_{i}", info.dtype, shape)
        names = [self.b.fresh(self.info(i).name or f"output_{i}") for i in m.outputs]
        for op in m.operators:
            self._operator(op)
        outputs = [(self.value(i), name) for i, name in zip(m.outputs, names, strict=True)]
        metadata: dict[str, Any] = {"source_format": "tflite", "tflite_schema": SCHEMA_VERSION}
        if any(len(self.info(i).shape) == 4 for i in m.inputs):
            metadata["input_layout"] = "NHWC"
        if m.description:
            metadata["description"] = m.description[:1000]
        graph = self.b.finish(outputs, metadata, m.subgraph_name or "tflite")
        self._check_declared_shapes(graph)
        return graph

    def _handler(self, op: _OpInfo):
        if op.op == "CUSTOM":
            return self.custom_handlers.get((op.custom, op.version))
        return self.handlers.get(op.op)

    def _label(self, op: _OpInfo) -> str:
        if op.op != "CUSTOM":
            return op.op
        if any(name == op.custom for name, _ in self.custom_handlers):
            return f"CUSTOM ({op.custom} version {op.version})"
        return f"CUSTOM ({op.custom})"

    def info(self, index: int) -> _TensorInfo:
        if not isinstance(index, int) or not 0 <= index < len(self.m.tensors):
            raise self.fail(
                f"tensor index {index} is out of range (the model has "
                f"{len(self.m.tensors)} tensors)"
            )
        return self.m.tensors[index]

    def value(self, index: int, what: str = "") -> Tensor:
        """The builder's tensor for a TFLite tensor: an op's result, a graph input or a weight."""
        if index in self.values:
            return self.values[index]
        info = self.info(index)
        data = self._data(info)
        if data is None:
            raise self.fail(
                f"tensor '{info.name}'{what} is read before any op writes it and holds no data"
            )
        if info.sparsity is not None:
            raise self.unsupported(f"sparse tensor '{info.name}' is used without DENSIFY")
        t = constant(self._dequantized(info, data))
        self.values[index] = t
        return t

    def _data(self, info: _TensorInfo) -> np.ndarray | None:
        """A weight's values (sparse: the stored values only), or None for a tensor without data."""
        if not 0 <= info.buffer < len(self.m.buffers):
            raise self.fail(f"tensor '{info.name}': buffer index {info.buffer} is out of range")
        start, length = self.m.buffers[info.buffer]
        if info.buffer == 0 or length == 0:
            return None
        dtype = info.dtype
        if dtype is None:
            raise self.unsupported(f"tensor '{info.name}' has unsupported type {info.type_code}")
        item = np.dtype(dtype).itemsize
        check_size(self.b, info.shape, item, f"tensor '{info.name}'")
        if info.sparsity is None:
            need = math.prod(info.shape) * item
            if length != need:
                raise self.fail(
                    f"tensor '{info.name}': buffer holds {length} bytes, shape "
                    f"{list(info.shape)} of {dtype} needs {need}"
                )
            count = math.prod(info.shape)
        else:
            if length % item:
                raise self.fail(
                    f"tensor '{info.name}': buffer of {length} bytes is not a "
                    f"whole number of {dtype} values"
                )
            count = length // item
        raw = np.frombuffer(self.m.data, np.dtype(dtype).newbyteorder("<"), count, start)
        out = raw.astype(dtype)  # a native-order, writable copy
        return out if info.sparsity is not None else out.reshape(info.shape)

    def _dequantized(self, info: _TensorInfo, data: np.ndarray) -> np.ndarray:
        """Integer weights with a scale are stored quantized: give them as float32."""
        if info.scale is None or data.dtype.kind not in "iu":
            return data
        scale, zero = info.scale, info.zero_point
        axis = info.quantized_dimension
        if scale.size > 1 or zero.size > 1:
            if (
                not 0 <= axis < data.ndim
                or data.shape[axis] not in (scale.size,)
                or (zero.size not in (1, scale.size))
            ):
                raise self.fail(
                    f"tensor '{info.name}': {scale.size} scales do not fit axis "
                    f"{axis} of shape {list(data.shape)}"
                )
            view = [1] * data.ndim
            view[axis] = -1
            scale, zero = scale.reshape(view), zero.reshape(view if zero.size > 1 else ())
        return ((data.astype(np.float32) - zero.astype(np.float32)) * scale).astype(np.float32)

    def _check_declared_shapes(self, graph: Graph) -> None:
        """Every tensor the file gives a static shape must get that shape from the ops here: the
        padding and axes chosen above relied on the declared shapes."""
        renamed = self.b.renamed
        for index, t in self.values.items():
            if t.name is None:
                continue
            info = self.m.tensors[index]
            if info.dynamic:
                continue
            v = graph.value(renamed.get(t.name, t.name))
            if v is None or v.shape is None:
                continue
            if len(v.shape) != len(info.shape):
                raise self.fail(
                    f"tensor '{info.name}': declared shape {list(info.shape)}, the ops "
                    f"give rank {len(v.shape)}"
                )
            back = [v.shape[t.perm.index(a)] for a in range(len(t.perm))]
            if any(isinstance(g, int) and g != d for g, d in zip(back, info.shape, strict=True)):
                raise self.fail(
                    f"tensor '{info.name}': declared shape {list(info.shape)}, the ops give {back}"
                )

    # -- one operator -------------------------------------------------------------------------
    def _operator(self, op: _OpInfo) -> None:
        for i in op.outputs:
            info = self.info(i)
            if i in self.values:
                raise self.fail(
                    f"operator {op.index} ({op.op}): tensor '{info.name}' is "
                    "written twice or is a graph input"
                )
            if info.scale is not None and info.dtype not in ("float32", "float16", None):
                raise self.unsupported(
                    f"operator {op.index} ({op.op}) writes quantized tensor "
                    f"'{info.name}' ({info.dtype}); quantized models are not "
                    "supported"
                )
        if not op.outputs:
            raise self.fail(f"operator {op.index} ({op.op}) has no outputs")
        self._handler(op)(op)

    def _name(self, op: _OpInfo, k: int = 0) -> str:
        return _short(self.info(op.outputs[k]).name) or f"{op.op.lower()}_{op.index}"

    def _args(self, op: _OpInfo, lo: int, hi: int | None = None) -> list[int]:
        hi = lo if hi is None else hi
        if not lo <= len(op.inputs) <= hi:
            raise self.fail(
                f"operator {op.index} ({op.op}): expected {lo}..{hi} inputs, got {len(op.inputs)}"
            )
        for i in op.inputs[:lo]:
            if i < 0:
                raise self.fail(f"operator {op.index} ({op.op}): a required input is omitted")
        return op.inputs

    def _in(self, op: _OpInfo, k: int) -> Tensor | None:
        if k >= len(op.inputs) or op.inputs[k] < 0:
            return None
        return self.value(op.inputs[k], f" (input {k} of {op.op} {op.index})")

    def _const_ints(self, op: _OpInfo, k: int, what: str) -> list[int]:
        t = self._in(op, k)
        if t is None or t.value is None:
            raise self.unsupported(f"operator {op.index} ({op.op}): {what} must be a constant")
        if t.value.dtype.kind not in "iu":
            raise self.fail(
                f"operator {op.index} ({op.op}): {what} must be integers, got {t.value.dtype}"
            )
        return [int(v) for v in t.value.ravel()]

    def _set(self, op: _OpInfo, t: Tensor, k: int = 0) -> None:
        """Bind an op's result; later decisions read the shape the file declares for it (checked
        against shape inference at the end)."""
        info = self.info(op.outputs[k])
        if len(info.shape) != t.rank:
            raise self.fail(
                f"operator {op.index} ({op.op}): output '{info.name}' is declared "
                f"with shape {list(info.shape)}, the op gives rank {t.rank}"
            )
        if t.value is None:
            t = Tensor(t.name, t.perm, t.dtype or info.dtype, _declared(info))
        self.values[op.outputs[k]] = t

    def _fused(self, op: _OpInfo, t: Tensor) -> Tensor:
        code = op.options.get("FusedActivationFunction", 0)
        if code in (4, 5):
            # TANH and SIGN_BIT: LiteRT's kernels clamp to the ReLU family only and ignore these
            # (conv, depthwise, add, mul, pooling); tinydl does as LiteRT does.
            return t
        if code not in ACTIVATIONS:
            raise self.fail(f"operator {op.index} ({op.op}): unknown fused activation {code}")
        return self.b.activation(t, ACTIVATIONS[code], f"{self._name(op)}_act")

    def _rank(self, op: _OpInfo, t: Tensor, rank: int, what: str = "input") -> None:
        if t.rank != rank:
            raise self.fail(
                f"operator {op.index} ({op.op}): {what} must have rank {rank}, got "
                f"shape {list(t.shape or ())} (rank {t.rank})"
            )

    def _padding(self, op: _OpInfo) -> str:
        code = op.options.get("Padding", 0)
        if code not in (0, 1):
            raise self.fail(f"operator {op.index} ({op.op}): unknown padding {code}")
        return "SAME" if code == 0 else "VALID"

    def _strides(self, op: _OpInfo, prefix: str = "Stride") -> list[int]:
        return [int(op.options[f"{prefix}H"]), int(op.options[f"{prefix}W"])]

    # -- convolutions, pooling, dense ---------------------------------------------------------
    def _conv(self, op: _OpInfo) -> None:
        self._args(op, 2, 3)
        x, w, bias = self._in(op, 0), self._in(op, 1), self._in(op, 2)
        self._rank(op, x, 4)
        self._rank(op, w, 4, "filter")
        c_in, per_group = x.shape[3] if x.shape else None, self._shape(w)[3]
        group = 1
        if isinstance(c_in, int) and isinstance(per_group, int) and per_group > 0:
            if c_in % per_group:
                raise self.fail(
                    f"operator {op.index} (CONV_2D): {c_in} input channels do not "
                    f"divide into groups of {per_group}"
                )
            group = c_in // per_group
        out = self.b.conv(
            x,
            w,
            (0, 3, 1, 2),
            bias,
            self._strides(op),
            self._dilations(op),
            self._padding(op),
            group,
            self._name(op),
        )
        self._set(op, self._fused(op, out))

    def _dilations(self, op: _OpInfo) -> list[int]:
        return [int(op.options["DilationHFactor"]), int(op.options["DilationWFactor"])]

    def _shape(self, t: Tensor) -> tuple:
        return t.value.shape if t.value is not None else (t.shape or (None,) * t.rank)

    def _depthwise(self, op: _OpInfo) -> None:
        self._args(op, 2, 3)
        x, w, bias = self._in(op, 0), self._in(op, 1), self._in(op, 2)
        self._rank(op, x, 4)
        self._rank(op, w, 4, "filter")
        c_in = x.shape[3] if x.shape else None
        if not isinstance(c_in, int) or c_in < 1:
            raise self.unsupported(
                f"operator {op.index} (DEPTHWISE_CONV_2D): the input's channel count must be known"
            )
        if self._shape(w)[0] != 1:
            raise self.fail(
                f"operator {op.index} (DEPTHWISE_CONV_2D): filter shape "
                f"{list(self._shape(w))} must start with 1"
            )
        # Filter 1HW(C*M) -> (C*M)1HW: output channel c*M+m reads input channel c (group = C).
        out = self.b.conv(
            x,
            w,
            (3, 0, 1, 2),
            bias,
            self._strides(op),
            self._dilations(op),
            self._padding(op),
            c_in,
            self._name(op),
        )
        self._set(op, self._fused(op, out))

    def _transpose_conv(self, op: _OpInfo) -> None:
        self._args(op, 3, 4)
        size = self._const_ints(op, 0, "output_shape")
        w, x, bias = self._in(op, 1), self._in(op, 2), self._in(op, 3)
        self._rank(op, x, 4)
        self._rank(op, w, 4, "filter")
        if len(size) != 4 or not x.shape or not all(isinstance(d, int) for d in x.shape[1:3]):
            raise self.unsupported(
                f"operator {op.index} (TRANSPOSE_CONV): needs a static "
                "input size and a 4-value output_shape"
            )
        kernel = self._shape(w)[1:3]
        strides = self._strides(op)
        pads_begin, pads_end, extra = [], [], []
        for n_in, n_out, k, s in zip(x.shape[1:3], size[1:3], kernel, strides, strict=True):
            total = (n_in - 1) * s + k - n_out
            begin = max(total, 0) // 2 if self._padding(op) == "SAME" else 0
            end = total - begin
            pads_begin.append(begin)
            pads_end.append(max(end, 0))
            extra.append(max(-end, 0))
        if any(e >= s for e, s in zip(extra, strides, strict=True)):
            raise self.fail(
                f"operator {op.index} (TRANSPOSE_CONV): output_shape {size} does not "
                f"fit input {list(x.shape)} and filter {list(self._shape(w))}"
            )
        out = self.b.conv(
            x,
            w,
            (3, 0, 1, 2),
            bias,
            strides,
            [1, 1],
            "EXPLICIT",
            1,
            self._name(op),
            transpose=True,
            pads=pads_begin + pads_end,
        )
        if any(extra):
            node = self.b.nodes[-1]
            node.attrs["output_padding"] = extra
        self._set(op, self._fused(op, out))

    def _pool(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        self._rank(op, x, 4)
        kernel = [int(op.options["FilterHeight"]), int(op.options["FilterWidth"])]
        kind = "MaxPool" if op.op == "MAX_POOL_2D" else "AveragePool"
        out = self.b.pool(kind, x, kernel, self._strides(op), self._padding(op), self._name(op))
        self._set(op, self._fused(op, out))

    def _fully_connected(self, op: _OpInfo) -> None:
        self._args(op, 2, 3)
        x, w, bias = self._in(op, 0), self._in(op, 1), self._in(op, 2)
        if op.options["WeightsFormat"] != 0:
            raise self.unsupported(f"operator {op.index} (FULLY_CONNECTED): shuffled weights")
        self._rank(op, w, 2, "weights")
        k = self._shape(w)[1]
        if not isinstance(k, int) or k < 1:
            raise self.unsupported(f"operator {op.index} (FULLY_CONNECTED): unknown input size")
        name = self._name(op)
        flat = (
            x
            if x.rank == 2 and x.shape and x.shape[1] == k
            else self.b.reshape(x, [-1, k], f"{name}_flatten")
        )
        ins = [self.b.plain(flat, name), self.b.at(w, (0, 1), f"{name}_weights")]
        if bias is not None:
            ins.append(self.b.at(bias, identity(bias.rank), f"{name}_bias"))
        y = Tensor(self.b.add("Gemm", ins, {"transB": 1}, name), (0, 1), x.dtype)
        if op.options["KeepNumDims"] and x.rank != 2:
            declared = self.info(op.outputs[0]).shape
            if self.info(op.outputs[0]).dynamic or len(declared) != x.rank:
                raise self.unsupported(
                    f"operator {op.index} (FULLY_CONNECTED): keep_num_dims with a dynamic shape"
                )
            y = self.b.reshape(y, list(declared), f"{name}_unflatten")
        self._set(op, self._fused(op, y))

    def _mean(self, op: _OpInfo) -> None:
        self._args(op, 2)
        x = self._in(op, 0)
        axes = self._const_ints(op, 1, "axes")
        out = self.b.reduce_mean(x, axes, bool(op.options["KeepDims"]), self._name(op))
        self._set(op, out)

    # -- element-wise -------------------------------------------------------------------------
    def _binary(self, op: _OpInfo) -> None:
        self._args(op, 2)
        onnx = {
            "ADD": "Add",
            "SUB": "Sub",
            "MUL": "Mul",
            "DIV": "Div",
            "POW": "Pow",
            "PRELU": "PRelu",
        }[op.op]
        out = self.b.binary(onnx, self._in(op, 0), self._in(op, 1), self._name(op))
        self._set(op, self._fused(op, out))

    def _squared_difference(self, op: _OpInfo) -> None:
        self._args(op, 2)
        name = self._name(op)
        d = self.b.binary("Sub", self._in(op, 0), self._in(op, 1), f"{name}_diff")
        self._set(op, self.b.binary("Mul", d, d, name))

    def _activation(self, op: _OpInfo) -> None:
        self._args(op, 1)
        kind = {
            "RELU": "relu",
            "RELU6": "relu6",
            "RELU_N1_TO_1": "relu_n1_to_1",
            "RELU_0_TO_1": "relu_0_to_1",
            "LOGISTIC": "sigmoid",
            "TANH": "tanh",
            "HARD_SWISH": "hard_swish",
            "LEAKY_RELU": "leaky_relu",
        }[op.op]
        alpha = float(op.options.get("Alpha", 0.0))
        self._set(op, self.b.activation(self._in(op, 0), kind, self._name(op), alpha=alpha))

    def _unary(self, op: _OpInfo) -> None:
        self._args(op, 1)
        self._set(op, self.b.unary({"SQRT": "Sqrt"}[op.op], self._in(op, 0), name=self._name(op)))

    def _rsqrt(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x, name = self._in(op, 0), self._name(op)
        root = self.b.unary("Sqrt", x, name=f"{name}_sqrt")
        one = constant(np.array(1, np.dtype(x.dtype or "float32")))
        self._set(op, self.b.binary("Div", one, root, name))

    def _neg(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        zero = constant(np.array(0, np.dtype(x.dtype or "float32")))
        self._set(op, self.b.binary("Sub", zero, x, self._name(op)))

    def _square(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        self._set(op, self.b.binary("Mul", x, x, self._name(op)))

    def _softmax(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x, name = self._in(op, 0), self._name(op)
        beta = float(op.options["Beta"])
        if beta != 1.0:
            x = self.b.binary("Mul", x, constant(np.array(beta, np.float32)), f"{name}_beta")
        src = x if x.value is None else Tensor(self.b.at(x, x.perm), x.perm, x.dtype)
        axis = src.perm.index(src.rank - 1)
        out = self.b.add("Softmax", [src.name], {"axis": axis}, name)
        self._set(op, Tensor(out, src.perm, x.dtype))

    def _cast(self, op: _OpInfo) -> None:
        self._args(op, 1)
        to = self.info(op.outputs[0]).dtype
        if to is None:
            raise self.unsupported(
                f"operator {op.index} (CAST) to type {self.info(op.outputs[0]).type_code}"
            )
        x = self._in(op, 0)
        if x.value is not None:
            self._set(op, constant(x.value.astype(to)))
            return
        self._set(
            op,
            Tensor(
                self.b.add("Cast", [x.name], {"to": onnx_dtype(to)}, self._name(op)), x.perm, to
            ),
        )

    # -- weights behind DEQUANTIZE and DENSIFY ------------------------------------------------
    def _dequantize(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        if x.value is not None:
            self._set(op, constant(x.value.astype(np.float32)))
            return
        if x.dtype != "float16":
            raise self.unsupported(
                f"operator {op.index} (DEQUANTIZE) of a computed {x.dtype} "
                "tensor: quantized models are not supported"
            )
        out = self.b.add("Cast", [x.name], {"to": onnx_dtype("float32")}, self._name(op))
        self._set(op, Tensor(out, x.perm, "float32"))

    def _densify(self, op: _OpInfo) -> None:
        self._args(op, 1)
        info = self.info(op.inputs[0])
        values = self._data(info)
        if values is None or info.sparsity is None:
            raise self.unsupported(
                f"operator {op.index} (DENSIFY) of tensor '{info.name}', "
                "which is not a sparse weight"
            )
        limit = 64 * len(self.m.data) + (1 << 20)
        if math.prod(info.shape) * values.itemsize > limit:
            raise self.fail(
                f"tensor '{info.name}': dense shape {list(info.shape)} is far larger than the file"
            )
        dense = densify(
            values, tuple(info.shape), info.sparsity, f"{self.where}: tensor '{info.name}'"
        )
        self._set(op, constant(self._dequantized(info, dense)))

    # -- layout and shape ---------------------------------------------------------------------
    def _pad(self, op: _OpInfo) -> None:
        self._args(op, 2, 3)
        x = self._in(op, 0)
        pads = self._const_ints(op, 1, "paddings")
        if len(pads) != 2 * x.rank or any(p < 0 for p in pads):
            raise self.fail(
                f"operator {op.index} ({op.op}): paddings {pads} do not fit rank {x.rank}"
            )
        mode, value = "constant", None
        if op.op == "PADV2" and self._in(op, 2) is not None:
            v = self._in(op, 2)
            if v.value is None or v.value.size != 1:
                raise self.unsupported(
                    f"operator {op.index} (PADV2): the pad value must be a constant scalar"
                )
            value = float(v.value.ravel()[0])
        if op.op == "MIRROR_PAD":
            if op.options["Mode"] != 0:
                raise self.unsupported(f"operator {op.index} (MIRROR_PAD): SYMMETRIC mode")
            mode = "reflect"
        widths = [(pads[2 * i], pads[2 * i + 1]) for i in range(x.rank)]
        self._set(op, self.b.pad(x, widths, mode, value, self._name(op)))

    def _concat(self, op: _OpInfo) -> None:
        if not op.inputs:
            raise self.fail(f"operator {op.index} (CONCATENATION) has no inputs")
        parts = [self._in(op, k) for k in range(len(op.inputs))]
        if any(p is None for p in parts):
            raise self.fail(f"operator {op.index} (CONCATENATION): an input is omitted")
        out = self.b.concat(parts, int(op.options["Axis"]), self._name(op))
        self._set(op, self._fused(op, out))

    def _reshape(self, op: _OpInfo) -> None:
        self._args(op, 1, 2)
        x, name = self._in(op, 0), self._name(op)
        shape_t = self._in(op, 1)
        declared = self.info(op.outputs[0])
        if shape_t is not None and shape_t.value is None:
            if shape_t.rank != 1 or not shape_t.shape or not isinstance(shape_t.shape[0], int):
                raise self.unsupported(
                    f"operator {op.index} (RESHAPE): computed shape of unknown length"
                )
            target = self.b.add(
                "Cast", [self.b.plain(shape_t)], {"to": onnx_dtype("int64")}, f"{name}_shape"
            )
            out = self.b.add("Reshape", [self.b.plain(x), target], {"allowzero": 1}, name)
            self._set(op, Tensor(out, identity(shape_t.shape[0]), x.dtype))
            return
        if shape_t is not None:
            shape = [int(v) for v in shape_t.value.ravel()]
        elif op.options.get("NewShape") is not None:
            shape = op.options["NewShape"]
        else:
            shape = list(declared.signature if declared.signature is not None else declared.shape)
        if shape.count(-1) > 1 or any(d < -1 for d in shape):
            raise self.fail(f"operator {op.index} (RESHAPE): invalid shape {shape}")
        # TFLite's 0 is a size, not ONNX's "copy this dim".
        self._set(op, self.b.reshape(x, shape, name, allowzero=0 in shape))

    def _squeeze(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        axes = op.options.get("SqueezeDims") or []
        if not axes:
            shape = self._shape(x)
            if not all(isinstance(d, int) for d in shape):
                raise self.unsupported(
                    f"operator {op.index} (SQUEEZE) of all size-1 axes needs a static shape"
                )
            axes = [i for i, d in enumerate(shape) if d == 1]
        if x.value is not None:
            self._set(op, constant(np.squeeze(x.value, tuple(a % x.rank for a in axes))))
            return
        self._set(op, self.b.squeeze(x, axes, self._name(op)))

    def _expand_dims(self, op: _OpInfo) -> None:
        self._args(op, 2)
        x, name = self._in(op, 0), self._name(op)
        (axis,) = self._const_ints(op, 1, "axis") or [None]
        if axis is None or not -(x.rank + 1) <= axis <= x.rank:
            raise self.fail(f"operator {op.index} (EXPAND_DIMS): axis {axis} for rank {x.rank}")
        axis %= x.rank + 1
        axes = self.b.const(np.array([axis], np.int64), f"{name}_axes")
        out = self.b.add("Unsqueeze", [self.b.plain(x), axes], None, name)
        self._set(op, Tensor(out, identity(x.rank + 1), x.dtype))

    def _transpose(self, op: _OpInfo) -> None:
        self._args(op, 2)
        perm = self._const_ints(op, 1, "perm")
        x = self._in(op, 0)
        if len(perm) != x.rank:
            raise self.fail(f"operator {op.index} (TRANSPOSE): perm {perm} for rank {x.rank}")
        self._set(
            op, self.b.transpose(x, [p % x.rank if p < 0 else p for p in perm], self._name(op))
        )

    def _slice(self, op: _OpInfo) -> None:
        self._args(op, 3)
        x = self._in(op, 0)
        begin, size = self._const_ints(op, 1, "begin"), self._const_ints(op, 2, "size")
        if len(begin) != x.rank or len(size) != x.rank:
            raise self.fail(
                f"operator {op.index} (SLICE): begin {begin} and size {size} for rank {x.rank}"
            )
        if any(b < 0 for b in begin) or any(s < -1 for s in size):
            raise self.fail(f"operator {op.index} (SLICE): negative begin or size")
        specs = [
            (a, b, INT64_MAX if s == -1 else b + s, 1)
            for a, (b, s) in enumerate(zip(begin, size, strict=True))
        ]
        self._set(op, self.b.slice(x, specs, self._name(op)))

    def _strided_slice(self, op: _OpInfo) -> None:
        self._args(op, 4)
        x, name = self._in(op, 0), self._name(op)
        begin, end = self._const_ints(op, 1, "begin"), self._const_ints(op, 2, "end")
        strides = self._const_ints(op, 3, "strides")
        o = op.options
        if o["Offset"]:
            raise self.unsupported(f"operator {op.index} (STRIDED_SLICE) with offset=true")
        n = len(begin)
        if len(end) != n or len(strides) != n or n > 32:
            raise self.fail(
                f"operator {op.index} (STRIDED_SLICE): begin, end and strides differ in length"
            )

        def bit(mask: int, i: int) -> bool:
            return bool((int(mask) >> i) & 1)

        ellipsis = [i for i in range(n) if bit(o["EllipsisMask"], i)]
        real = sum(
            1 for i in range(n) if not bit(o["NewAxisMask"], i) and not bit(o["EllipsisMask"], i)
        )
        if len(ellipsis) > 1 or real > x.rank:
            raise self.fail(
                f"operator {op.index} (STRIDED_SLICE): {n} slice entries for rank {x.rank}"
            )
        entries: list[tuple] = []  # ("new",) or (axis, begin, end, stride, b_mask, e_mask, shrink)
        axis = 0
        for i in range(n):
            if bit(o["EllipsisMask"], i):
                for _ in range(x.rank - real):
                    entries.append((axis, 0, 0, 1, True, True, False))
                    axis += 1
            elif bit(o["NewAxisMask"], i):
                entries.append(("new",))
            else:
                entries.append(
                    (
                        axis,
                        begin[i],
                        end[i],
                        strides[i],
                        bit(o["BeginMask"], i),
                        bit(o["EndMask"], i),
                        bit(o["ShrinkAxisMask"], i),
                    )
                )
                axis += 1
        while axis < x.rank:
            entries.append((axis, 0, 0, 1, True, True, False))
            axis += 1
        specs, shrunk, new_at, out_pos = [], [], [], 0
        for e in entries:
            if e[0] == "new":
                new_at.append(out_pos)
                out_pos += 1
                continue
            a, b, en, s, bm, em, shrink = e
            if s == 0:
                raise self.fail(f"operator {op.index} (STRIDED_SLICE): stride 0")
            if shrink:
                specs.append((a, b, INT64_MAX if b == -1 else b + 1, 1))
                shrunk.append(a)
                continue
            out_pos += 1
            if bm and em and s == 1:
                continue
            start = (0 if s > 0 else INT64_MAX) if bm else b
            stop = (INT64_MAX if s > 0 else INT64_MIN) if em else en
            specs.append((a, start, stop, s))
        y = self.b.slice(x, specs, name if not shrunk and not new_at else f"{name}_slice")
        if shrunk:
            y = self.b.squeeze(y, shrunk, name if not new_at else f"{name}_squeeze")
        if new_at:
            axes = self.b.const(np.array(new_at, np.int64), f"{name}_axes")
            out = self.b.add("Unsqueeze", [self.b.plain(y), axes], None, name)
            y = Tensor(out, identity(y.rank + len(new_at)), x.dtype)
        self._set(op, y)

    def _resize(self, op: _OpInfo) -> None:
        self._args(op, 2)
        x = self._in(op, 0)
        self._rank(op, x, 4)
        size = self._const_ints(op, 1, "size")
        if len(size) != 2 or min(size) < 1:
            raise self.fail(f"operator {op.index} ({op.op}): size {size} must be 2 positive ints")
        align, half = bool(op.options["AlignCorners"]), bool(op.options["HalfPixelCenters"])
        if align and half:
            raise self.fail(
                f"operator {op.index} ({op.op}): align_corners and half_pixel_centers are both set"
            )
        coords = "align_corners" if align else "half_pixel" if half else "asymmetric"
        if op.op == "RESIZE_BILINEAR":
            out = self.b.resize(x, "linear", coords, name=self._name(op), sizes=size)
        else:
            # TF rounds half away from zero (align_corners) or floors (asymmetric);
            # floor((o + 0.5) * scale) is round_prefer_ceil of the half-pixel coordinate.
            rounding = "floor" if coords == "asymmetric" else "round_prefer_ceil"
            out = self.b.resize(x, "nearest", coords, rounding, self._name(op), sizes=size)
        self._set(op, out)

    def _depth_to_space(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        self._rank(op, x, 4)
        bs = int(op.options["BlockSize"])
        out = self.b.nchw_op("DepthToSpace", x, {"blocksize": bs, "mode": "DCR"}, self._name(op))
        self._set(op, out)

    def _space_to_depth(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x, name = self._in(op, 0), self._name(op)
        self._rank(op, x, 4)
        bs = int(op.options["BlockSize"])
        _, h, w, c = x.shape or (None,) * 4
        if not all(isinstance(d, int) for d in (h, w, c)) or bs < 1 or h % bs or w % bs:
            raise self.unsupported(
                f"operator {op.index} (SPACE_TO_DEPTH) needs static H, W "
                f"that are multiples of the block size {bs}"
            )
        split = self.b.const(np.array([0, c, h // bs, bs, w // bs, bs], np.int64), f"{name}_split")
        joined = self.b.const(
            np.array([0, bs * bs * c, h // bs, w // bs], np.int64), f"{name}_joined"
        )
        t = self.b.add("Reshape", [self.b.nchw(x), split], None, f"{name}_blocks")
        t = self.b.add("Transpose", [t], {"perm": [0, 3, 5, 1, 2, 4]}, f"{name}_order")
        out = self.b.add("Reshape", [t, joined], None, name)
        self._set(op, Tensor(out, channels_first(4), x.dtype))

    def _batch_matmul(self, op: _OpInfo) -> None:
        self._args(op, 2)
        a, b = self._in(op, 0), self._in(op, 1)
        if a.rank < 2 or b.rank < 2:
            raise self.fail(f"operator {op.index} (BATCH_MATMUL): inputs must have rank >= 2")

        def adjoint(t: Tensor, flag: bool) -> Tensor:
            if not flag:
                return t
            perm = list(range(t.rank))
            perm[-2], perm[-1] = perm[-1], perm[-2]
            return self.b.transpose(t, perm)

        a, b = adjoint(a, op.options["AdjX"]), adjoint(b, op.options["AdjY"])
        out = self.b.add("MatMul", [self.b.plain(a), self.b.plain(b)], None, self._name(op))
        self._set(op, Tensor(out, identity(max(a.rank, b.rank)), a.dtype))

    # -- MediaPipe's custom ops ---------------------------------------------------------------
    def _flex(self, op: _OpInfo, ints: tuple, floats: tuple = ()) -> dict[str, Any]:
        """A custom op's flexbuffer map, with the named int (or int list) and float keys."""
        from flatbuffers import flexbuffers

        where = f"operator {op.index} (CUSTOM {op.custom})"
        try:
            options = flexbuffers.Loads(op.custom_options)
        except (ValueError, IndexError, KeyError, TypeError, struct.error, RecursionError):
            raise self.fail(f"{where}: custom options are no flexbuffer map") from None
        if not isinstance(options, dict):
            raise self.fail(f"{where}: custom options are no flexbuffer map")
        out: dict[str, Any] = {}
        for key in (*ints, *floats):
            value = options.get(key)
            if key in floats and isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = float(value)
            elif key in ints and isinstance(value, int) and not isinstance(value, bool):
                out[key] = value
            elif key in ints and isinstance(value, list) and all(type(v) is int for v in value):
                out[key] = value
            else:
                raise self.fail(f"{where}: option '{key}' is missing or mistyped: {value!r:.60}")
        return out

    def _transpose_conv_bias(self, op: _OpInfo) -> None:
        """TRANSPOSE_CONV with a bias input; its options are TFLite's TransposeConv params as a
        raw struct (int32 padding, stride_w, stride_h) and the output size follows from them."""
        self._args(op, 3)
        x, w, bias = self._in(op, 0), self._in(op, 1), self._in(op, 2)
        self._rank(op, x, 4)
        self._rank(op, w, 4, "filter")
        if len(op.custom_options) < 12:
            raise self.fail(
                f"operator {op.index} (CUSTOM {op.custom}): options hold "
                f"{len(op.custom_options)} bytes, not padding and two strides"
            )
        padding, stride_w, stride_h = struct.unpack_from("<3i", op.custom_options)
        if padding not in (1, 2) or min(stride_w, stride_h) < 1:
            raise self.fail(
                f"operator {op.index} (CUSTOM {op.custom}): padding {padding}, "
                f"strides {stride_h}x{stride_w}"
            )
        kernel = self._shape(w)[1:3]
        if not x.shape or not all(isinstance(d, int) for d in (*x.shape[1:3], *kernel)):
            raise self.unsupported(
                f"operator {op.index} (CUSTOM {op.custom}) needs a static input and filter size"
            )
        begin, end = [], []
        for n_in, k, s in zip(x.shape[1:3], kernel, (stride_h, stride_w), strict=True):
            total = max(0, k - (n_in - 1) % s - 1) if padding == 1 else 0  # 1 is SAME
            begin.append(total // 2)
            end.append(total - total // 2)
        out = self.b.conv(
            x,
            w,
            (3, 0, 1, 2),
            bias,
            [stride_h, stride_w],
            [1, 1],
            "EXPLICIT",
            1,
            self._name(op),
            transpose=True,
            pads=begin + end,
        )
        self._set(op, out)

    def _landmarks_to_matrix(self, op: _OpInfo) -> None:
        self._args(op, 1)
        x = self._in(op, 0)
        self._rank(op, x, 3, "landmarks")
        ints = ("left_rotation_idx", "right_rotation_idx", "subset_idxs")
        ints += ("output_height", "output_width")
        attrs = self._flex(op, ints, ("scale_x", "scale_y", "target_rotation_radians"))
        out = self.b.add(
            "tinydl.Landmarks2TransformMatrix", [self.b.plain(x)], attrs, self._name(op)
        )
        self._set(op, Tensor(out, identity(3), x.dtype))

    def _transform_tensor(self, op: _OpInfo) -> None:
        self._args(op, 2)
        x, matrix = self._in(op, 0), self._in(op, 1)
        self._rank(op, x, 4)
        self._rank(op, matrix, 3, "matrix")
        attrs = self._flex(op, ("output_height", "output_width"))
        ins = [self.b.nchw(x), self.b.plain(matrix)]
        out = self.b.add("tinydl.TransformTensorBilinear", ins, attrs, self._name(op))
        self._set(op, Tensor(out, channels_first(4), x.dtype))

    def _transform_landmarks(self, op: _OpInfo) -> None:
        """Landmarks (N, L, 2 or 3) moved by the 4x4 matrix's 2-D affine part (z is kept):
        x @ A^T + t, with existing ops."""
        self._args(op, 2)
        x, matrix, name = self._in(op, 0), self._in(op, 1), self._name(op)
        self._rank(op, x, 3, "landmarks")
        self._rank(op, matrix, 3, "matrix")
        dims = self._shape(x)[2]
        if dims not in (2, 3):
            raise self.fail(
                f"operator {op.index} (CUSTOM {op.custom}): landmarks of {dims} dimensions"
            )
        linear = self.b.slice(matrix, [(1, 0, 2, 1), (2, 0, 2, 1)], f"{name}_linear")
        shift = self.b.slice(matrix, [(1, 0, 2, 1), (2, 3, 4, 1)], f"{name}_shift")
        xy = x if dims == 2 else self.b.slice(x, [(2, 0, 2, 1)], f"{name}_xy")
        ins = [self.b.plain(xy), self.b.plain(self.b.transpose(linear, [0, 2, 1]))]
        moved = Tensor(self.b.add("MatMul", ins, None, f"{name}_rotate"), identity(3), x.dtype)
        shift = self.b.transpose(shift, [0, 2, 1])
        out = self.b.binary("Add", moved, shift, name if dims == 2 else f"{name}_move")
        if dims == 3:
            out = self.b.concat([out, self.b.slice(x, [(2, 2, 3, 1)], f"{name}_z")], 2, name)
        self._set(op, out)
