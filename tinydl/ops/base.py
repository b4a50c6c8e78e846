"""Op schemas: attributes with defaults, arity, shape inference and the NumPy reference, together.

An op module registers each op with the `op` decorator on its NumPy reference:

    @op("Relu", types="signed", infer=same_as_input(0))
    def relu(x):
        return np.maximum(x, 0).astype(x.dtype)

The reference is called as `fn(*inputs, **attrs)`; an omitted optional input is passed as None.
It returns one array or a tuple of arrays (one per output).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.errors import InvalidModelError
from tinydl.ir.graph import Dim, Graph, Node, Shape

REQUIRED = object()

# Element-type classes for ONNX type constraints, by the names ops use in `types=`.
_FLOATS = {"float16", "float32", "float64"}
_SIGNED = _FLOATS | {"int8", "int16", "int32", "int64"}
_NUMERIC = _SIGNED | {"uint8", "uint16", "uint32", "uint64"}
TYPE_CLASSES = {
    "float": _FLOATS,
    "signed": _SIGNED,
    "numeric": _NUMERIC,
    "index": {"int32", "int64"},
    "bool": {"bool"},
    "any": _NUMERIC | {"bool"},
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor", "graph")


@dataclass(frozen=True)
class Attr:
    """An attribute: its kind and default (REQUIRED when the op cannot run without it;
    None when it is optional and has no default)."""

    kind: str
    default: Any = REQUIRED

    def check(self, op: str, node_name: str, name: str, value: Any) -> Any:
        where = f"node '{node_name}' ({op}): attribute '{name}'"
        kind = self.kind
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise InvalidModelError(f"{where} must be an int, got {_show(value)}")
            # ONNX attributes are int64; a bigger Python int (from JSON) is no valid value.
            if not _INT64_MIN <= int(value) <= _INT64_MAX:
                raise InvalidModelError(f"{where} is out of the int64 range: {_show(value)}")
            return int(value)
        if kind == "float":
            number = int | float | np.integer | np.floating
            if isinstance(value, bool) or not isinstance(value, number):
                raise InvalidModelError(f"{where} must be a float, got {_show(value)}")
            if isinstance(value, int | np.integer) and not _INT64_MIN <= int(value) <= _INT64_MAX:
                raise InvalidModelError(f"{where} is out of range: {_show(value)}")
            return float(value)
        if kind == "string":
            if isinstance(value, bytes):
                try:
                    value = value.decode()
                except UnicodeDecodeError:
                    raise InvalidModelError(f"{where} is not valid UTF-8") from None
            if not isinstance(value, str):
                raise InvalidModelError(f"{where} must be a string, got {_show(value)}")
            return value
        if kind in ("ints", "floats", "strings"):
            if not isinstance(value, list | tuple):
                raise InvalidModelError(f"{where} must be a list of {kind}, got {_show(value)}")
            item = Attr(kind[:-1])
            return [item.check(op, node_name, name, v) for v in value]
        if kind == "tensor":
            if not isinstance(value, np.ndarray):
                raise InvalidModelError(f"{where} must be a tensor, got {_show(value)}")
            return value
        if kind == "graph":
            if not isinstance(value, Graph):
                raise InvalidModelError(f"{where} must be a graph, got {_show(value)}")
            try:
                return validate(value)
            except InvalidModelError as exc:
                raise InvalidModelError(f"{where}: {exc}") from None
        raise AssertionError(kind)


def _show(value: Any) -> str:
    if isinstance(value, list | tuple | dict):  # repr of a huge or deeply nested value is costly
        return f"{type(value).__name__} of {len(value)}"
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}"


@dataclass
class TensorType:
    """What shape inference knows about a value; `value` is set when it is a known constant."""

    dtype: str | None
    shape: Shape | None
    value: np.ndarray | None = None


@dataclass
class InferContext:
    node: Node
    attrs: dict[str, Any]
    inputs: list[TensorType | None]

    def shape(self, i: int) -> Shape | None:
        t = self.inputs[i] if i < len(self.inputs) else None
        return None if t is None else t.shape

    def dtype(self, i: int) -> str | None:
        t = self.inputs[i] if i < len(self.inputs) else None
        return None if t is None else t.dtype

    def const(self, i: int) -> np.ndarray | None:
        t = self.inputs[i] if i < len(self.inputs) else None
        return None if t is None else t.value

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def fail(self, message: str) -> InvalidModelError:
        return InvalidModelError(f"node '{self.node.name}' ({self.node.op}): {message}")


Infer = Callable[[InferContext], list[TensorType]]


@dataclass
class OpSchema:
    op: str
    reference: Callable[..., Any]
    infer: Infer | None
    attrs: dict[str, Attr] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)
    outputs: tuple[int, int] = (1, 1)
    same_dtype: tuple[int, ...] | str = ()
    types: dict[int, str] = field(default_factory=dict)
    doc: str = ""

    def check_dtypes(self, ctx: InferContext) -> None:
        """Inputs bound to one ONNX type parameter must share a dtype ("all" = every input)."""
        for i, cls in self.types.items():
            got = ctx.dtype(i)
            if got is not None and got not in TYPE_CLASSES[cls]:
                raise ctx.fail(
                    f"input {i} must be {cls} ({', '.join(sorted(TYPE_CLASSES[cls]))}), got {got}"
                )
        idx = range(len(ctx.inputs)) if self.same_dtype == "all" else self.same_dtype
        seen = {(i, ctx.dtype(i)) for i in idx if ctx.dtype(i) is not None}
        if len({d for _, d in seen}) > 1:
            got = ", ".join(f"input {i}: {d}" for i, d in sorted(seen))
            raise ctx.fail(f"inputs must share one dtype, got {got}")

    def check_attrs(self, node: Node) -> dict[str, Any]:
        """Validate attribute types and fill defaults; unknown attributes are an error."""
        if not isinstance(node.attrs, dict):
            raise InvalidModelError(f"node '{node.name}' ({node.op}): attributes must be a mapping")
        out: dict[str, Any] = {}
        for key, value in node.attrs.items():
            spec = self.attrs.get(key)
            if spec is None:
                known = ", ".join(sorted(self.attrs)) or "none"
                raise InvalidModelError(
                    f"node '{node.name}' ({node.op}): unknown attribute '{key}' (known: {known})"
                )
            # None is how an optional attribute without a default reads once filled in.
            if value is None and spec.default is None:
                out[key] = None
                continue
            out[key] = spec.check(self.op, node.name, key, value)
        for key, spec in self.attrs.items():
            if key in out:
                continue
            if spec.default is REQUIRED:
                raise InvalidModelError(
                    f"node '{node.name}' ({node.op}): required attribute '{key}' is missing"
                )
            out[key] = list(spec.default) if isinstance(spec.default, list) else spec.default
        return out

    def check_arity(self, node: Node) -> None:
        lo, hi = self.inputs
        n_in = len(node.inputs)
        if not lo <= n_in <= hi or any(not node.inputs[i] for i in range(min(lo, n_in))):
            raise InvalidModelError(
                f"node '{node.name}' ({node.op}): expected {lo}..{hi} inputs "
                f"(the first {lo} required), got {node.inputs}"
            )
        lo, hi = self.outputs
        if not lo <= len(node.outputs) <= hi or not node.outputs[0]:
            raise InvalidModelError(
                f"node '{node.name}' ({node.op}): expected {lo}..{hi} outputs, got {node.outputs}"
            )
        for name in [*node.inputs, *node.outputs]:
            if not isinstance(name, str):
                raise InvalidModelError(
                    f"node '{node.name}' ({node.op}): value name {name!r} is not a string"
                )

    def run(self, node: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        result = self.reference(*inputs, **node.attrs)
        outs = list(result) if isinstance(result, tuple) else [result]
        return outs[: len(node.outputs)]


REGISTRY: dict[str, OpSchema] = {}


def op(
    name: str,
    *,
    infer: Infer | None = None,
    attrs: dict[str, Attr] | None = None,
    inputs: int | tuple[int, int] = 1,
    outputs: int | tuple[int, int] = 1,
    same_dtype: tuple[int, ...] | str = (),
    types: dict[int, str] | str | None = None,
):
    """Register the decorated NumPy reference as op `name` (ONNX spelling).

    `types` maps an input index to a class of TYPE_CLASSES; a plain string applies to input 0.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in REGISTRY:
            raise RuntimeError(f"op {name} registered twice")
        REGISTRY[name] = OpSchema(
            op=name,
            reference=fn,
            infer=infer,
            attrs=dict(attrs or {}),
            inputs=inputs if isinstance(inputs, tuple) else (inputs, inputs),
            outputs=outputs if isinstance(outputs, tuple) else (outputs, outputs),
            same_dtype=same_dtype,
            types={0: types} if isinstance(types, str) else dict(types or {}),
            doc=(fn.__doc__ or "").strip(),
        )
        return fn

    return deco


# -- shape helpers shared by op modules ----------------------------------------------------------


def same_as_input(i: int = 0) -> Infer:
    def infer(ctx: InferContext) -> list[TensorType]:
        return [TensorType(ctx.dtype(i), ctx.shape(i))]

    return infer


def broadcast_all(dtype: str | None = None, like: int = 0) -> Infer:
    """Every input broadcast together; the output's dtype is `dtype`, or input `like`'s."""

    def infer(ctx: InferContext) -> list[TensorType]:
        shape = broadcast(*(ctx.shape(i) for i in range(len(ctx.inputs))))
        return [TensorType(dtype or ctx.dtype(like), shape)]

    return infer


def broadcast(*shapes: Shape | None) -> Shape | None:
    """NumPy broadcasting over shapes that may hold symbols or unknown (None) dims."""
    if any(s is None for s in shapes):
        return None
    if shapes and all(s == shapes[0] for s in shapes):  # (the common case: nothing to broadcast)
        return tuple(shapes[0])
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        dims = [d for d in dims if d != 1]
        ints = {d for d in dims if isinstance(d, int)}
        if len(ints) > 1:
            raise ValueError(
                f"shapes {list(shapes)} cannot be broadcast (axis {axis}: {sorted(ints)})"
            )
        if ints:
            out.append(ints.pop())
        elif not dims:
            out.append(1)
        elif all(d == dims[0] for d in dims):
            out.append(dims[0])
        else:
            out.append(None)
    return tuple(out)


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def schema_of(name: str) -> OpSchema | None:
    return REGISTRY.get(name)


class _RegistryOps:
    """The registry as the op set ir.Graph.validate takes."""

    @staticmethod
    def check_node(node: Node) -> None:
        schema = REGISTRY.get(node.op)
        if schema is None:
            raise InvalidModelError(f"node '{node.name}': unknown op '{node.op}'")
        node.attrs = schema.check_attrs(node)
        schema.check_arity(node)

    @staticmethod
    def infer(graph: Graph) -> None:
        infer_graph(graph)


REGISTRY_OPS = _RegistryOps()


def validate(graph: Graph, infer: bool = True) -> Graph:
    """Check `graph` against the registry: its structure, then every node's op, attributes
    (defaults filled in) and arity, its topological order, and (with `infer`) shapes, filling
    in the inferred types. Returns the graph; raises InvalidModelError naming the node."""
    return graph.validate(REGISTRY_OPS, infer=infer)


# Constants up to this many elements are computed during shape inference (Shape→Slice→Concat).
CONST_FOLD_LIMIT = 1 << 16


def infer_graph(graph, fold_limit: int = CONST_FOLD_LIMIT) -> dict[str, TensorType]:
    """Infer dtype and shape of every value in topological order; record them in graph.values.

    Returns what is known of every value; `value` is set for constants of at most `fold_limit`
    elements (the constant-folding pass asks for a larger limit than loading does).
    Raises InvalidModelError naming the node whose inputs do not fit its op.
    """
    from tinydl.ir.dtypes import dtype_name
    from tinydl.ir.graph import Value

    known: dict[str, TensorType] = {}
    for v in graph.inputs:
        known[v.name] = TensorType(v.dtype, v.shape)
    for name, arr in graph.initializers.items():
        value = arr if arr.size <= fold_limit else None
        known[name] = TensorType(dtype_name(arr.dtype), tuple(arr.shape), value)
    for node in graph.nodes:
        schema = REGISTRY[node.op]
        ins = [known.get(i) if i else None for i in node.inputs]
        ctx = InferContext(node, node.attrs, ins)
        try:
            schema.check_dtypes(ctx)
            outs = schema.infer(ctx) if schema.infer else []
            outs = [t or TensorType(None, None) for t in outs]
            outs += [TensorType(None, None)] * (len(node.outputs) - len(outs))
            outs = [TensorType(t.dtype, _checked_shape(ctx, t.shape), t.value) for t in outs]
            given = [t for t in ins if t is not None]
            constant = bool(given) and all(t.value is not None for t in given)
            if constant and _worth_folding(schema, node, outs, fold_limit):
                # Garbage constants may overflow; that is the model's business, not a warning's.
                with np.errstate(all="ignore"):
                    values = schema.run(node, [None if t is None else t.value for t in ins])
                outs = [
                    _folded(ctx, t, np.asarray(v), fold_limit)
                    for t, v in zip(outs, values, strict=False)
                ]
        except InvalidModelError:
            raise
        except (ValueError, TypeError, IndexError, KeyError, ArithmeticError, MemoryError) as exc:
            raise ctx.fail(f"{exc} (inputs: {[_describe(t) for t in ins]})") from None
        for name, t in zip(node.outputs, outs, strict=False):
            if name:
                known[name] = t
                graph.values[name] = Value(name, t.dtype, t.shape)
    for v in graph.outputs:
        t = known.get(v.name)
        if t is None:
            continue
        if v.dtype is None:
            v.dtype = t.dtype
        if t.shape is not None and (v.shape is None or len(v.shape) == len(t.shape)):
            declared = v.shape or (None,) * len(t.shape)
            v.shape = tuple(
                i if isinstance(i, int) else d if d is not None else i
                for d, i in zip(declared, t.shape, strict=True)
            )
    return known


# The largest dimension a shape may hold; the same bound graph validation puts on declared dims.
MAX_DIM = 2**40
# Attributes of windowed ops (Conv, pooling): their references allocate padded or dilated
# intermediates whose size the output shape does not bound.
_WINDOW_ATTRS = frozenset({"kernel_shape", "pads", "strides", "dilations"})


def _checked_shape(ctx: InferContext, shape: Shape | None) -> Shape | None:
    """An inferred shape as plain dims; a negative or absurd size means the inputs do not fit."""
    if shape is None:
        return None
    dims = []
    for d in shape:
        if isinstance(d, np.integer):
            d = int(d)
        if d is None or (isinstance(d, str) and d):
            dims.append(d)
        elif isinstance(d, int) and not isinstance(d, bool) and 0 <= d < MAX_DIM:
            dims.append(d)
        else:
            raise ctx.fail(f"the inputs give an invalid output shape {tuple(shape)}")
    return tuple(dims)


def _worth_folding(schema: OpSchema, node: Node, outs: list[TensorType], limit: int) -> bool:
    """Fold only small shape-like computations, never windowed ops, and only when inference
    already gives every output a concrete small shape: a model must not make the loader
    allocate (say) the 2**40 elements a bad Reshape target asks for."""
    if _WINDOW_ATTRS & schema.attrs.keys():
        return False
    for name, t in zip(node.outputs, outs, strict=False):
        if not name:
            continue
        if t.shape is None or not all(isinstance(d, int) for d in t.shape):
            return False
        if math.prod(t.shape) > limit:
            return False
    return True


def _folded(ctx: InferContext, inferred: TensorType, value: np.ndarray, limit: int) -> TensorType:
    """The computed constant, after checking it against what inference promised."""
    from tinydl.ir.dtypes import dtype_name

    if inferred.shape is not None and tuple(value.shape) != inferred.shape:
        raise ctx.fail(
            f"shape inference gives {inferred.shape}, the reference computes {tuple(value.shape)}"
        )
    kept = value if value.size <= limit else None
    return TensorType(dtype_name(value.dtype), tuple(value.shape), kept)


def _describe(t: TensorType | None) -> str:
    if t is None:
        return "-"
    dims = "?" if t.shape is None else ",".join("?" if d is None else str(d) for d in t.shape)
    return f"{t.dtype or '?'}[{dims}]"
