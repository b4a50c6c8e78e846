"""ir.Graph -> ONNX. The IR's ops are ONNX ops in their newest form, so a graph as imported
(from ONNX, TFLite or Keras .h5) writes out node for node at one opset; tinydl's own fused ops
(after the optimizer) have no ONNX spelling and are refused.

    tinydl convert pose_landmark_full.tflite -o pose_landmark_full.onnx
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tinydl.errors import UnsupportedOpError
from tinydl.ir.dtypes import ONNX_NAMES
from tinydl.ir.graph import Graph, Value

# ReduceMean (and the other reductions) take `axes` as an input from opset 18, the IR's form.
OPSET = 18
# IR version 8 (ONNX 1.13+, opset 18's era): readable by every runtime that reads opset 18.
IR_VERSION = 8
# Attributes the IR's schemas know but that ONNX added after OPSET (Cast's saturate came with
# opset 19), with their defaults: left out when they hold the default.
_NEWER = {("Cast", "saturate"): 1}


def to_onnx(graph: Graph, opset: int = OPSET):
    """An onnx.ModelProto of `graph` (checked with onnx.checker)."""
    import onnx
    from onnx import helper, numpy_helper

    nodes = []
    for node in graph.nodes:
        if node.op.startswith("tinydl."):
            raise UnsupportedOpError(
                f"node {node.name}: {node.op} is tinydl's own fused op; export the graph as "
                "loaded (tinydl.load), before the optimizer"
            )
        attrs = {}
        for key, value in node.attrs.items():
            if value is None or _NEWER.get((node.op, key), object()) == value:
                continue
            attrs[key] = list(value) if isinstance(value, tuple) else value
        nodes.append(helper.make_node(node.op, node.inputs, node.outputs, node.name, **attrs))
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(arr), name)
        for name, arr in graph.initializers.items()
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            graph.name or "tinydl",
            [_value_info(v) for v in graph.inputs],
            [_value_info(v) for v in graph.outputs],
            inits,
        ),
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="tinydl",
        ir_version=IR_VERSION,
    )
    onnx.checker.check_model(model)
    return model


def save(graph: Graph, path: str | os.PathLike, opset: int = OPSET) -> Path:
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
