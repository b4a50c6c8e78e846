"""ir.Graph -> ONNX. The IR's ops are ONNX ops in their newest form, so a graph as imported
(from ONNX, TFLite or Keras .h5) writes out node for node at the lowest opset (13 or more) that
expresses it; tinydl's own fused ops
(after the optimizer) have no ONNX spelling and are refused.

    tinydl convert pose_landmark_full.tflite -o pose_landmark_full.onnx
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tinydl.errors import UnsupportedOpError
from tinydl.ir.dtypes import ONNX_NAMES
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops.reduce import REDUCTIONS

# The lowest opset a graph is written at: Squeeze/Unsqueeze take `axes` as an input and Softmax
# has its per-axis meaning from opset 13, the IR's forms. Reduce* (but ReduceSum) with `axes` as
# an input, or Pad with an `axes` input, need opset 18.
MIN_OPSET = 13
# IR version 8 (ONNX 1.13+): readable by every runtime that reads the opsets written here.
IR_VERSION = 8
# Attributes the IR's schemas know that ONNX added later: (opset, default). An attribute that
# holds its default is left out; one that does not raises the opset.
_NEWER = {
    ("AveragePool", "dilations"): (19, None),
    ("BatchNormalization", "training_mode"): (14, 0),
    ("Cast", "saturate"): (19, 1),
    ("GRU", "layout"): (14, 0),
    ("LSTM", "layout"): (14, 0),
    ("RNN", "layout"): (14, 0),
    **{(op, "noop_with_empty_axes"): (18, 0) for op in REDUCTIONS if op != "ReduceSum"},
    ("Reshape", "allowzero"): (14, 0),
    ("Resize", "antialias"): (18, 0),
    ("Resize", "axes"): (18, None),
    ("Resize", "keep_aspect_ratio_policy"): (18, "stretch"),
    ("Shape", "start"): (15, 0),
    ("Shape", "end"): (15, None),
    ("ScatterElements", "reduction"): (16, "none"),
    ("ScatterND", "reduction"): (16, "none"),
    ("Split", "num_outputs"): (18, None),
}
# Ops ONNX added after MIN_OPSET; RoiAlign, because the IR always states its
# coordinate_transformation_mode, which opset 16 added; GroupNormalization's per-channel form: 21.
_OP_SINCE = {
    "HardSwish": 14,
    "RoiAlign": 16,
    "Trilu": 14,
    "LayerNormalization": 17,
    "GroupNormalization": 21,
    "Mish": 18,
    "Gelu": 20,
}
# GridSample's modes as opset 16 (2-D only) and opset 20 (any rank) spell them.
_GRID_MODE_16 = {"linear": "bilinear", "cubic": "bicubic"}
_GRID_MODE_20 = {"bilinear": "linear", "bicubic": "cubic"}
# ScatterElements/ScatterND reductions ONNX added after `add` and `mul` (opset 16).
_REDUCTION_SINCE = {"max": 18, "min": 18}


def _resize_without_axes(graph: Graph, opset: int) -> Graph:
    """Before opset 18 Resize has no `axes`: give its constant scales or sizes every axis
    (scale 1, or the input's own size, on the others) so the node needs no newer opset."""
    if opset >= 18 or not any(n.op == "Resize" and n.attrs.get("axes") for n in graph.nodes):
        return graph
    nodes, inits = [], dict(graph.initializers)
    replaced: set[str] = set()
    for node in graph.nodes:
        axes = node.attrs.get("axes") if node.op == "Resize" else None
        if axes:
            new = _full_rank_resize(node, axes, graph, inits)
            replaced.update(set(node.inputs) - set(new.inputs))
            node = new
        nodes.append(node)
    used = {i for n in nodes for i in n.inputs} | {v.name for v in graph.outputs}
    inits = {k: v for k, v in inits.items() if k in used or k not in replaced}
    return Graph(list(graph.inputs), list(graph.outputs), nodes, inits, dict(graph.values),
                 dict(graph.metadata), graph.name)  # fmt: skip


def _full_rank_resize(node: Node, axes, graph: Graph, inits: dict) -> Node:
    x = graph.values.get(node.inputs[0])
    shape = None if x is None else x.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return node  # left for needed_opset to answer with 18
    rank = len(shape)
    axes = [a % rank for a in axes]
    inputs = list(node.inputs) + [""] * (4 - len(node.inputs))
    for i, fill in ((2, [1.0] * rank), (3, list(shape))):
        part = inits.get(inputs[i]) if inputs[i] else None
        if part is None:
            continue
        full = np.array(fill, dtype=part.dtype)
        full[axes] = part
        name = f"{inputs[i]}__full"
        inits[name] = full
        inputs[i] = name
    attrs = {**node.attrs, "axes": None}
    return Node(node.op, inputs, list(node.outputs), attrs, name=node.name, meta=dict(node.meta))


def needed_opset(graph: Graph) -> int:
    """The lowest opset that expresses every node of `graph` as it is."""
    need = MIN_OPSET
    for node in graph.nodes:
        need = max(need, _OP_SINCE.get(node.op, 0))
        for value in node.attrs.values():
            if isinstance(value, Graph):
                need = max(need, needed_opset(value))
        # Reduce* take `axes` as an input from opset 18 (ReduceSum from 13).
        reduce = node.op in REDUCTIONS and node.op != "ReduceSum"
        if reduce and len(node.inputs) > 1 and node.inputs[1]:
            need = max(need, 18)
        if node.op == "Pad" and len(node.inputs) > 3 and node.inputs[3]:
            need = max(need, 18)
        if node.op in ("ScatterElements", "ScatterND"):
            need = max(need, _REDUCTION_SINCE.get(node.attrs.get("reduction"), 0))
        if node.op == "GridSample":  # (opset 16: 2-D; 20: any rank)
            x = graph.value(node.inputs[0])
            rank = 4 if x is None or x.shape is None else len(x.shape)
            need = max(need, 16 if rank == 4 else 20)
        for key, value in node.attrs.items():
            since, default = _NEWER.get((node.op, key), (0, None))
            if since and value is not None and value != default:
                if (node.op, key) == ("Resize", "axes") and _static_input(node, graph):
                    continue  # written at any opset with full-rank scales or sizes
                need = max(need, since)
    return need


def _static_input(node: Node, graph: Graph) -> bool:
    x = graph.values.get(node.inputs[0])
    consts = all(not i or i in graph.initializers for i in node.inputs[1:])
    return (
        consts
        and x is not None
        and x.shape is not None
        and all(isinstance(d, int) for d in x.shape)
    )


def to_onnx(graph: Graph, opset: int | None = None, check: bool = True):
    """An onnx.ModelProto of `graph` (checked with onnx.checker unless `check` is False), at
    `opset` or the lowest one that expresses it (needed_opset)."""
    import onnx
    from onnx import helper

    opset = needed_opset(graph) if opset is None else opset
    model = helper.make_model(
        _graph_proto(graph, opset),
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="tinydl",
        ir_version=IR_VERSION,
    )
    if check:
        onnx.checker.check_model(model)
    return model


def _graph_proto(
    graph: Graph,
    opset: int,
    captured: list[str] | None = None,
    given: list[Value | None] | None = None,
):
    """The GraphProto of `graph`; for an If branch, `captured` names the outer values its inputs
    are bound to, which an ONNX subgraph reads from the enclosing graph instead; for a Loop body,
    `given` types the inputs the body leaves untyped."""
    from onnx import helper, numpy_helper

    graph = _resize_without_axes(graph, opset)
    nodes = []
    if captured is not None:
        nodes += [
            helper.make_node("Identity", [outer], [v.name])
            for v, outer in zip(graph.inputs, captured, strict=True)
            if v.name != outer
        ]
    for node in graph.nodes:
        if node.op.startswith("tinydl."):
            raise UnsupportedOpError(
                f"node {node.name}: {node.op} is an op of tinydl's own domain (no ONNX "
                "spelling); a fused one goes away when the graph is exported as loaded "
                "(tinydl.load), before the optimizer"
            )
        inputs, attrs = list(node.inputs), {}
        for key, value in node.attrs.items():
            since, default = _NEWER.get((node.op, key), (0, None))
            if value is None or (since > opset and value == default):
                continue
            if (node.op, key) == ("GridSample", "mode"):
                value = (_GRID_MODE_20 if opset >= 20 else _GRID_MODE_16).get(value, value)
            if isinstance(value, Graph) and node.op == "If":
                value = _graph_proto(value, opset, node.inputs[1:])
            elif isinstance(value, Graph):
                # a Loop's or Scan's body declares its inputs: the values it carries are typed
                # like the node's inputs where it says nothing
                outer = [graph.value(i) if i else None for i in node.inputs]
                if node.op == "Loop":
                    outer[:2] = [None, None]
                else:
                    scanned = node.attrs["num_scan_inputs"]
                    outer[len(outer) - scanned :] = [None] * scanned
                value = _graph_proto(value, opset, given=outer)
            elif isinstance(value, np.ndarray):  # make_node would write an array as a list
                value = numpy_helper.from_array(value)
            attrs[key] = list(value) if isinstance(value, tuple) else value
        if node.op == "If":
            inputs = inputs[:1]  # the branches read the rest from this graph
        nodes.append(helper.make_node(node.op, inputs, node.outputs, node.name, **attrs))
    inputs = _typed(graph.inputs, given)
    outputs = list(graph.outputs)
    if given is not None:
        # A body output that is one of its inputs goes through an Identity (onnxruntime's Scan
        # reads such a pass-through state wrong) and is typed as that input.
        passed = {v.name: v for v in inputs}
        for k, v in enumerate(outputs):
            if v.name in passed:
                typed = passed[v.name]
                outputs[k] = Value(f"{v.name}/next", typed.dtype, typed.shape)
                nodes.append(helper.make_node("Identity", [v.name], [outputs[k].name]))
    inits = [
        # (ascontiguousarray would make a scalar 1-D: Gather by it would keep the axis)
        numpy_helper.from_array(np.asarray(arr, order="C"), name)
        for name, arr in graph.initializers.items()
    ]
    return helper.make_graph(
        nodes,
        graph.name or "tinydl",
        [] if captured is not None else [_value_info(v) for v in inputs],
        [_value_info(v) for v in outputs],
        inits,
    )


def _typed(values: list[Value], given: list[Value | None] | None) -> list[Value]:
    if given is None:
        return values
    return [
        Value(v.name, g.dtype, g.shape) if v.dtype is None and g is not None else v
        for v, g in zip(values, given, strict=True)
    ]


def save(graph: Graph, path: str | os.PathLike, opset: int | None = None) -> Path:
    """Write `graph` as an ONNX file (through a temporary name, so a failure leaves none)."""
    import onnx

    path = Path(path)
    model = to_onnx(graph, opset)
    tmp = path.with_name(path.name + ".partial")
    try:
        onnx.save(model, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _value_info(v: Value):
    from onnx import helper

    code = ONNX_NAMES.get(v.dtype or "", 0)
    shape = None
    if v.shape is not None:
        shape = [d if isinstance(d, int | str) else None for d in v.shape]
    return helper.make_tensor_value_info(v.name, code, shape)
