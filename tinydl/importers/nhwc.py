"""Graph building for channels-last (NHWC) sources: the TFLite and Keras importers use it.

The IR's layout is NCHW. Rather than wrapping every source op in transposes, the builder tracks
for each source tensor an axis permutation `perm` with `IR value = np.transpose(source, perm)`:
a convolution's output is held as NCHW (perm (0, 3, 1, 2)), an element-wise op keeps its input's
perm, an op whose axes mean something (Concat, ReduceMean, Pad, Slice) has its axes remapped, and
only ops that need the source's own element order (Reshape, a Dense layer's flatten, graph
outputs) get a Transpose back. Constants are permuted at import, so they cost nothing at run time.
Graph inputs stay as the user feeds them (NHWC); one Transpose follows each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinydl.errors import InvalidModelError, UnsupportedOpError
from tinydl.ir.dtypes import ONNX_NAMES, dtype_name
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

Perm = tuple[int, ...]
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
# A constant the importer computes (densified, dequantized, permuted) may be at most this big.
MAX_CONSTANT_BYTES = 1 << 31


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def channels_first(rank: int) -> Perm:
    """(0, rank-1, 1, ..., rank-2): NHWC -> NCHW for rank 4."""
    return (0, rank - 1, *range(1, rank - 1)) if rank >= 3 else identity(rank)


def inverse(perm: Perm) -> Perm:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def without(perm: Perm, axes: Sequence[int]) -> Perm:
    """The perm left when source axes `axes` are dropped (as Squeeze or a reduction does)."""
    gone = set(axes)
    kept = [p for p in perm if p not in gone]
    rank = sorted(kept)
    return tuple(rank.index(p) for p in kept)


@dataclass
class Tensor:
    """A source tensor as the builder holds it."""

    name: str | None  # the IR value; None for a constant that no node has used yet
    perm: Perm  # IR value = np.transpose(source tensor, perm)
    dtype: str | None = None
    shape: tuple | None = None  # the source (channels-last) shape; dims are ints or None
    value: np.ndarray | None = None  # a constant, in the source layout

    @property
    def rank(self) -> int:
        return len(self.perm)


def constant(value: np.ndarray) -> Tensor:
    value = np.asarray(value)
    return Tensor(None, identity(value.ndim), dtype_name(value.dtype), tuple(value.shape), value)


class GraphBuilder:
    """Collects nodes and initializers; hands out unique value names."""

    def __init__(self, where: str):
        self.where = where
        self.nodes: list[Node] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.inputs: list[Value] = []
        self.taken: set[str] = set()
        self._views: dict[tuple, str] = {}
        self._constants: dict[tuple[int, Perm], tuple[np.ndarray, str]] = {}
        self.renamed: dict[str, str] = {}

    def fail(self, message: str) -> InvalidModelError:
        return InvalidModelError(f"{self.where}: {message}")

    def unsupported(self, message: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where}: {message}")

    # -- names, constants, nodes --------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = base or "v"
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def const(self, value: np.ndarray, base: str) -> str:
        name = self.fresh(base)
        self.initializers[name] = np.ascontiguousarray(value)
        return name

    def add(
        self,
        op: str,
        inputs: Sequence[str],
        attrs: dict[str, Any] | None = None,
        name: str = "",
        outputs: int | Sequence[str] = 1,
    ) -> str:
        """Append a node; returns its (first) output name."""
        node_name = self.fresh(f"{name or op}/{op}" if name else op)
        if isinstance(outputs, int):
            outputs = [
                self.fresh(f"{name or op}:{i}" if i else (name or op)) for i in range(outputs)
            ]
        self.nodes.append(Node(op, list(inputs), list(outputs), dict(attrs or {}), node_name))
        return outputs[0]

    def input(self, name: str, dtype: str, shape: tuple) -> Tensor:
        name = self.fresh(name)
        self.inputs.append(Value(name, dtype, shape))
        return Tensor(
            name,
            identity(len(shape)),
            dtype,
            tuple(d if isinstance(d, int) else None for d in shape),
        )

    # -- views of a tensor in a chosen axis order ---------------------------------------------
    def at(self, t: Tensor, perm: Perm, name: str = "") -> str:
        """The IR value holding `t` with `IR = np.transpose(source, perm)`."""
        perm = tuple(perm)
        if t.value is not None:
            key = (id(t.value), perm)
            if key not in self._constants:  # the entry keeps the array alive, so ids stay unique
                data = t.value if perm == identity(t.value.ndim) else np.transpose(t.value, perm)
                self._constants[key] = (t.value, self.const(data, name or "const"))
            return self._constants[key][1]
        if t.perm == perm:
            return t.name
        key = (t.name, perm)
        if key not in self._views:
            back = inverse(t.perm)
            self._views[key] = self.add(
                "Transpose", [t.name], {"perm": [back[q] for q in perm]}, name or t.name
            )
        return self._views[key]

    def plain(self, t: Tensor, name: str = "") -> str:
        return self.at(t, identity(t.rank), name)

    def nchw(self, t: Tensor, name: str = "") -> str:
        return self.at(t, channels_first(t.rank), name)

    # -- ops with source (channels-last) semantics --------------------------------------------
    def unary(
        self,
        op: str,
        x: Tensor,
        attrs: dict | None = None,
        name: str = "",
        extra: Sequence[str] = (),
    ) -> Tensor:
        """An element-wise op: it works in whatever axis order x is held."""
        src = x if x.value is None else self._materialize(x, name)
        out = self.add(op, [src.name, *extra], attrs, name)
        return Tensor(out, src.perm, x.dtype, x.shape)

    def _materialize(self, t: Tensor, name: str) -> Tensor:
        return Tensor(self.at(t, t.perm, name), t.perm, t.dtype, t.shape)

    def clip(self, x: Tensor, lo: float | None, hi: float | None, name: str = "") -> Tensor:
        dtype = np.dtype(x.dtype or "float32")
        extra = [
            "" if v is None else self.const(np.array(v, dtype), f"{name or 'clip'}_{which}")
            for v, which in ((lo, "min"), (hi, "max"))
        ]
        while extra and not extra[-1]:
            extra.pop()
        return self.unary("Clip", x, name=name, extra=extra)

    def activation(self, x: Tensor, kind: str | None, name: str = "", alpha: float = 0.0) -> Tensor:
        """Apply a named activation (the spellings both importers map onto)."""
        if kind in (None, "linear", "NONE"):
            return x
        if kind == "relu":
            return self.unary("Relu", x, name=name)
        if kind == "relu6":
            return self.clip(x, 0.0, 6.0, name)
        if kind == "relu_n1_to_1":
            return self.clip(x, -1.0, 1.0, name)
        if kind == "relu_0_to_1":
            return self.clip(x, 0.0, 1.0, name)
        if kind == "tanh":
            return self.unary("Tanh", x, name=name)
        if kind == "sigmoid":
            return self.unary("Sigmoid", x, name=name)
        if kind == "hard_swish":
            return self.unary("HardSwish", x, name=name)
        if kind == "leaky_relu":
            return self.unary("LeakyRelu", x, {"alpha": float(alpha)}, name=name)
        if kind == "silu":
            s = self.unary("Sigmoid", x, name=f"{name}_sigmoid")
            return self.binary("Mul", x, s, name)
        raise self.unsupported(f"activation '{kind}' is not supported")

    def binary(self, op: str, a: Tensor, b: Tensor, name: str = "") -> Tensor:
        """An element-wise op with NumPy broadcasting of the source shapes."""
        rank = max(a.rank, b.rank)
        perm = next(
            (
                t.perm
                for t in (a, b)
                if t.value is None and t.rank == rank and t.perm != identity(rank)
            ),
            identity(rank),
        )
        names = [self._operand(t, perm, rank, name) for t in (a, b)]
        out = self.add(op, names, None, name)
        return Tensor(out, perm, a.dtype or b.dtype)

    def _operand(self, t: Tensor, perm: Perm, rank: int, name: str) -> str:
        if t.value is not None:
            value = t.value
            if value.size == 1 and value.ndim <= rank:
                return self.at(constant(value.reshape(())), (), f"{name}_const")
            value = value.reshape((1,) * (rank - value.ndim) + value.shape)
            return self.at(constant(value), perm, f"{name}_const")
        if t.rank < rank:
            if perm == identity(rank):
                return t.name if t.perm == identity(t.rank) else self.plain(t)
            axes = self.const(np.arange(rank - t.rank, dtype=np.int64), f"{name}_axes")
            grown = self.add("Unsqueeze", [self.plain(t), axes], None, f"{name}_expand")
            t = Tensor(grown, identity(rank), t.dtype)
        return self.at(t, perm, name)

    def concat(self, parts: Sequence[Tensor], axis: int, name: str = "") -> Tensor:
        rank = parts[0].rank
        if any(p.rank != rank for p in parts):
            raise self.fail(f"{name}: concatenated tensors differ in rank")
        axis = _axis(self, axis, rank, name)
        perm = next((p.perm for p in parts if p.value is None), identity(rank))
        out = self.add(
            "Concat", [self.at(p, perm, name) for p in parts], {"axis": perm.index(axis)}, name
        )
        return Tensor(out, perm, parts[0].dtype)

    def pad(
        self,
        x: Tensor,
        widths: Sequence[tuple[int, int]],
        mode: str = "constant",
        value: float | None = None,
        name: str = "",
    ) -> Tensor:
        """Pad source axis i by widths[i] = (before, after)."""
        if len(widths) != x.rank:
            raise self.fail(f"{name}: {len(widths)} pad pairs for a rank-{x.rank} tensor")
        src = x if x.value is None else self._materialize(x, name)
        order = [widths[p] for p in src.perm]
        pads = self.const(
            np.array([b for b, _ in order] + [e for _, e in order], np.int64), f"{name}_pads"
        )
        extra = [pads]
        if value is not None and value != 0:
            dtype = np.dtype(x.dtype or "float32")
            extra.append(self.const(np.array(value, dtype), f"{name}_value"))
        out = self.add("Pad", [src.name, *extra], {"mode": mode}, name)
        return Tensor(out, src.perm, x.dtype)

    def reduce_mean(self, x: Tensor, axes: Sequence[int], keepdims: bool, name: str = "") -> Tensor:
        axes = sorted({_axis(self, a, x.rank, name) for a in axes})
        src = x if x.value is None else self._materialize(x, name)
        ir_axes = self.const(np.array([src.perm.index(a) for a in axes], np.int64), f"{name}_axes")
        out = self.add("ReduceMean", [src.name, ir_axes], {"keepdims": int(keepdims)}, name)
        return Tensor(out, src.perm if keepdims else without(src.perm, axes), x.dtype)

    def squeeze(self, x: Tensor, axes: Sequence[int], name: str = "") -> Tensor:
        axes = sorted({_axis(self, a, x.rank, name) for a in axes})
        if not axes:
            return x
        src = x if x.value is None else self._materialize(x, name)
        ir_axes = self.const(np.array([src.perm.index(a) for a in axes], np.int64), f"{name}_axes")
        out = self.add("Squeeze", [src.name, ir_axes], None, name)
        return Tensor(out, without(src.perm, axes), x.dtype)

    def transpose(self, x: Tensor, perm: Sequence[int], name: str = "") -> Tensor:
        """Source-level transpose: only the bookkeeping changes, no node is added."""
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(x.rank)):
            raise self.fail(f"{name}: {list(perm)} is not a permutation of {x.rank} axes")
        if x.value is not None:
            return constant(np.transpose(x.value, perm))
        back = inverse(perm)
        shape = None if x.shape is None else tuple(x.shape[p] for p in perm)
        return Tensor(x.name, tuple(back[p] for p in x.perm), x.dtype, shape)

    def reshape(
        self, x: Tensor, shape: Sequence[int] | str, name: str = "", allowzero: bool = False
    ) -> Tensor:
        """Reshape in the source element order; `shape` is a constant or an int64 value name."""
        if isinstance(shape, str):
            target, rank = shape, None
        else:
            shape = [int(d) for d in shape]
            target, rank = self.const(np.array(shape, np.int64), f"{name}_shape"), len(shape)
        if x.value is not None and not isinstance(shape, str):
            try:
                return constant(
                    x.value.reshape(
                        [
                            x.value.shape[i] if d == 0 and not allowzero else d
                            for i, d in enumerate(shape)
                        ]
                    )
                )
            except (ValueError, IndexError) as exc:
                raise self.fail(
                    f"{name}: cannot reshape {x.value.shape} to {shape}: {exc}"
                ) from None
        out = self.add("Reshape", [self.plain(x), target], {"allowzero": int(allowzero)}, name)
        if rank is None:
            raise self.unsupported(f"{name}: a reshape to a computed shape of unknown rank")
        return Tensor(out, identity(rank), x.dtype, None)

    def slice(
        self, x: Tensor, specs: Sequence[tuple[int, int, int, int]], name: str = ""
    ) -> Tensor:
        """specs: (source axis, start, end, step) in ONNX Slice terms."""
        src = x if x.value is None else self._materialize(x, name)
        if not specs:
            return src
        cols = list(zip(*[(src.perm.index(a), s, e, t) for a, s, e, t in specs], strict=True))
        ins = [
            self.const(np.array(c, np.int64), f"{name}_{what}")
            for c, what in zip(cols[1:3], ("starts", "ends"), strict=True)
        ]
        ins.append(self.const(np.array(cols[0], np.int64), f"{name}_axes"))
        ins.append(self.const(np.array(cols[3], np.int64), f"{name}_steps"))
        out = self.add("Slice", [src.name, *ins], None, name)
        return Tensor(out, src.perm, x.dtype)

    # -- spatial ops: the input is taken as NCHW, the output is NCHW ---------------------------
    def _spatial(self, x: Tensor, channels_last: bool, name: str) -> tuple[str, Perm]:
        """x as the NCHW input of a spatial op, and the perm of that op's output. A
        channels-first source tensor is NCHW already."""
        perm = channels_first(x.rank) if channels_last else identity(x.rank)
        return self.at(x, perm, name), perm

    def conv(
        self,
        x: Tensor,
        w: Tensor,
        w_perm: Perm,
        bias: Tensor | None,
        strides,
        dilations,
        padding: str,
        group: int = 1,
        name: str = "",
        transpose: bool = False,
        pads: Sequence[int] | None = None,
        channels_last: bool = True,
    ) -> Tensor:
        """Conv (or ConvTranspose) over the spatial axes; `w_perm` orders the weight as the ONNX op
        wants it (OIHW, or IOHW for ConvTranspose). padding: "SAME", "VALID" or "EXPLICIT"."""
        attrs: dict[str, Any] = {
            "strides": [int(s) for s in strides],
            "dilations": [int(d) for d in dilations],
            "group": int(group),
        }
        attrs.update(_padding(self, padding, pads, len(attrs["strides"]), name))
        src, perm = self._spatial(x, channels_last, name)
        ins = [src, self.at(w, w_perm, f"{name}_weight")]
        if bias is not None:
            ins.append(self.at(bias, identity(bias.rank), f"{name}_bias"))
        out = self.add("ConvTranspose" if transpose else "Conv", ins, attrs, name)
        return Tensor(out, perm, x.dtype)

    def pool(
        self,
        op: str,
        x: Tensor,
        kernel,
        strides,
        padding: str,
        name: str = "",
        channels_last: bool = True,
    ) -> Tensor:
        attrs: dict[str, Any] = {
            "kernel_shape": [int(k) for k in kernel],
            "strides": [int(s) for s in strides],
        }
        attrs.update(_padding(self, padding, None, len(attrs["strides"]), name))
        if op == "AveragePool":
            attrs["count_include_pad"] = 0  # TensorFlow averages over the real pixels only
        src, perm = self._spatial(x, channels_last, name)
        return Tensor(self.add(op, [src], attrs, name), perm, x.dtype)

    def nchw_op(
        self,
        op: str,
        x: Tensor,
        attrs: dict | None = None,
        name: str = "",
        extra: Sequence[str] = (),
        channels_last: bool = True,
    ) -> Tensor:
        """An op with NCHW semantics (DepthToSpace, Resize, BatchNormalization, ...)."""
        src, perm = self._spatial(x, channels_last, name)
        return Tensor(self.add(op, [src, *extra], attrs, name), perm, x.dtype)

    def resize(
        self,
        x: Tensor,
        mode: str,
        coordinates: str,
        nearest: str = "round_prefer_floor",
        name: str = "",
        sizes: Sequence[int] | None = None,
        scales: Sequence[float] | None = None,
        channels_last: bool = True,
    ) -> Tensor:
        """Resize the spatial axes to `sizes` (H, W) or by `scales`."""
        if sizes is not None:
            extra = [
                "",
                "",
                self.const(np.array([int(v) for v in sizes], np.int64), f"{name}_sizes"),
            ]
        else:
            extra = [
                "",
                self.const(np.array([float(v) for v in scales], np.float32), f"{name}_scales"),
            ]
        attrs = {
            "mode": mode,
            "coordinate_transformation_mode": coordinates,
            "nearest_mode": nearest,
            "axes": list(range(2, x.rank)),
        }
        return self.nchw_op("Resize", x, attrs, name, extra=extra, channels_last=channels_last)

    # -- finishing ----------------------------------------------------------------------------
    def finish(
        self, outputs: Sequence[tuple[Tensor, str]], metadata: dict[str, Any], graph_name: str
    ) -> Graph:
        """Give each output (in the source layout) its name, reserved earlier with `fresh`, and
        validate the graph."""
        out_values = []
        inputs = {v.name for v in self.inputs}
        used: set[str] = set()
        for t, name in outputs:
            if t.value is not None:
                self.initializers[name] = np.ascontiguousarray(t.value)
            else:
                current = self.plain(t)
                if current in inputs or current in used or current in self.initializers:
                    self.add("Identity", [current], None, name, outputs=[name])
                else:
                    self._rename(current, name)
            used.add(name)
            out_values.append(Value(name, t.dtype, None))
        graph = Graph(
            list(self.inputs),
            out_values,
            self.nodes,
            self.initializers,
            metadata=metadata,
            name=graph_name or "graph",
        )
        validate(graph)
        _resolve_same_padding(graph)
        return graph

    def _rename(self, old: str, new: str) -> None:
        self.renamed[old] = new
        for node in self.nodes:
            node.inputs = [new if i == old else i for i in node.inputs]
            node.outputs = [new if o == old else o for o in node.outputs]


def _padding(builder: GraphBuilder, padding: str, pads, n: int, name: str) -> dict[str, Any]:
    if padding == "SAME":
        return {"auto_pad": "SAME_UPPER"}  # resolved to explicit pads once shapes are known
    if padding == "VALID":
        return {"pads": [0] * (2 * n)}
    if padding == "EXPLICIT" and pads is not None and len(pads) == 2 * n:
        return {"pads": [int(p) for p in pads]}
    raise builder.fail(f"{name}: unknown padding {padding!r}")


def _resolve_same_padding(graph: Graph) -> None:
    """Turn auto_pad=SAME_UPPER into explicit pads wherever the input's spatial size is known,
    so that later passes and backends see one form."""
    for node in graph.nodes:
        if node.op not in ("Conv", "MaxPool", "AveragePool") or node.attrs.get("auto_pad") != (
            "SAME_UPPER"
        ):
            continue
        x = graph.value(node.inputs[0])
        if x is None or x.shape is None:
            continue
        if node.op == "Conv":
            w = graph.value(node.inputs[1])
            if w is None or w.shape is None:
                continue
            kernel = list(w.shape[2:])
        else:
            kernel = node.attrs["kernel_shape"]
        n = len(kernel)
        strides = node.attrs.get("strides") or [1] * n
        dilations = node.attrs.get("dilations") or [1] * n
        pads = same_pads(list(x.shape[2:]), kernel, strides, dilations)
        if pads is not None:
            node.attrs["auto_pad"] = "NOTSET"
            node.attrs["pads"] = pads


def _axis(builder: GraphBuilder, axis: int, rank: int, name: str) -> int:
    axis = int(axis)
    if not -rank <= axis < rank:
        raise builder.fail(f"{name}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def same_pads(
    size: Sequence[Any], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> list[int] | None:
    """TensorFlow's SAME padding as explicit ONNX pads (begins, then ends); None when a spatial
    size is unknown (then auto_pad SAME_UPPER, which is the same rule, decides at run time)."""
    if not all(isinstance(d, int) for d in size):
        return None
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations, strict=True):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return begins + ends


def check_size(builder: GraphBuilder, shape: Sequence[int], itemsize: int, what: str) -> None:
    """Refuse a tensor whose declared size is negative or absurd before allocating it."""
    if any(int(d) < 0 for d in shape):
        raise builder.fail(f"{what}: negative dimension in shape {list(shape)}")
    if math.prod(int(d) for d in shape) * itemsize > MAX_CONSTANT_BYTES:
        raise builder.fail(f"{what}: shape {list(shape)} is too large for a constant")


def onnx_dtype(dtype: str) -> int:
    return ONNX_NAMES[dtype]
