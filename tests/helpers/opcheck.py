"""Check an op against onnxruntime: run one ONNX model on both, compare, and check shape inference.

    from helpers.opcheck import check_op
    check_op({"op": "Relu", "inputs": {"x": x}}, rtol=1e-5, atol=1e-5)

A node spec is the keyword arguments of `node_model`; a full onnx.ModelProto works too (then pass
`feeds`). tinydl runs the model through `tinydl.load` + `tinydl.compile(backends=("numpy",))`.
For a one-node model the op's NumPy reference is also run directly on the node as written (the
importer may rewrite it), and its shape inference is checked on concrete and on symbolic dims.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import tinydl
from helpers.cases import draw
from tinydl.ir.dtypes import dtype_name
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import TensorType, schema_of, validate
from tinydl.ops.base import InferContext


def node_model(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping | None = None,
    consts=(),
    outputs: int | None = None,
    opset: int = 21,
) -> tuple[onnx.ModelProto, dict]:
    """A one-node model and its feeds.

    inputs: the node's inputs in order, name -> array; None leaves an optional input empty ("").
    consts: input names stored as initializers (shape-like inputs, weights); the rest are fed.
    outputs: how many; by default the op's required ones (TopK's two), or as many as a Split
    makes.
    """
    if outputs is None:
        schema = schema_of(op)
        if op == "Split":
            outputs = _split_parts(inputs, attrs or {})
        else:
            outputs = schema.outputs[0] if schema is not None else 1
    graph_inputs, inits, feeds = [], [], {}
    for name, arr in inputs.items():
        if arr is None:
            continue
        if name in consts:
            inits.append(numpy_helper.from_array(np.asarray(arr), name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, arr.shape))
            feeds[name] = arr
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(
        op, [n if a is not None else "" for n, a in inputs.items()], out_names, **dict(attrs or {})
    )
    graph = helper.make_graph(
        [node],
        f"{op}_test",
        graph_inputs,
        [helper.make_empty_tensor_value_info(n) for n in out_names],
        inits,
    )
    # IR version 10 (ONNX 1.16) is what onnxruntime reads; onnx's newest default may be newer.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    # Declare the output types (importers want them) as onnx's own shape inference finds them.
    inferred = list(onnx.shape_inference.infer_shapes(model).graph.output)
    # onnx infers nothing for some function ops (GroupNormalization): such an output is
    # declared with the first input's element type, shape unknown.
    first = next((a for a in inputs.values() if a is not None), None)
    inferred = [
        o
        if o.type.HasField("tensor_type") or first is None
        else helper.make_tensor_value_info(
            o.name, helper.np_dtype_to_tensor_dtype(first.dtype), None
        )
        for o in inferred
    ]
    model.graph.ClearField("output")
    model.graph.output.extend(inferred)
    return model, feeds


def _split_parts(inputs: Mapping, attrs: Mapping) -> int:
    """A Split's output count: its `num_outputs`, or the length of its sizes input."""
    if attrs.get("num_outputs") is not None:
        return int(attrs["num_outputs"])
    sizes = list(inputs.values())[1:2]
    return int(np.size(sizes[0])) if sizes and sizes[0] is not None else 1


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return sess.run(None, dict(feeds))


def warp_by_grid_sample(
    feeds: Mapping[str, np.ndarray], attrs: Mapping, consts: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """tinydl.Warp as onnxruntime computes it: the sample points (matrix @ (u, v, 1), divided
    by W) as a GridSample grid (align_corners: -1 and 1 are the first and last pixel centres),
    the image repeated for every crop. The output size is the attributes' or the size input's
    (fed or constant)."""
    x, m, *size = (np.asarray(v) for v in [*feeds.values(), *consts.values()])
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    nchw = x if attrs.get("layout", "NCHW") == "NCHW" else x.transpose(0, 3, 1, 2)
    h, w = nchw.shape[2:]
    oh, ow = (int(v) for v in size[0]) if size else (attrs["output_height"], attrs["output_width"])
    v, u = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    p = np.einsum("kij,jhw->kihw", m.astype(np.float64), np.stack([u, v, np.ones_like(u)]))
    grid = np.stack([p[:, 0] / p[:, 2] * 2 / (w - 1) - 1, p[:, 1] / p[:, 2] * 2 / (h - 1) - 1], -1)
    image = np.repeat(nchw, len(m) // len(nchw), axis=0)
    node = helper.make_node(
        "GridSample",
        ["x", "grid"],
        ["y"],
        mode="linear",
        align_corners=1,
        padding_mode="zeros" if attrs.get("border", "zero") == "zero" else "border",
    )
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "warp",
        [
            helper.make_tensor_value_info("x", elem, image.shape),
            helper.make_tensor_value_info("grid", elem, grid.shape),
        ],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    (y,) = run_onnxruntime(model, {"x": image, "grid": grid.astype(x.dtype)})
    return [y if attrs.get("layout", "NCHW") == "NCHW" else y.transpose(0, 2, 3, 1)]


# tinydl's own ops that onnxruntime computes through ONNX ops: op -> (feeds, attrs) -> outputs.
ORT_EQUIVALENTS = {"tinydl.Warp": warp_by_grid_sample}


def run_tinydl(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
        sess = tinydl.compile(tinydl.load(path), backends=("numpy",))
    outs = sess.run(dict(feeds))
    return [np.asarray(outs[o.name]) for o in model.graph.output]


def _attrs(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        out[a.name] = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value
    return out


def _node(model: onnx.ModelProto):
    (proto,) = model.graph.node
    node = Node(proto.op_type, list(proto.input), list(proto.output), _attrs(proto), name="node")
    schema = schema_of(node.op)
    node.attrs = schema.check_attrs(node)
    schema.check_arity(node)
    return node, schema


def run_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The op's NumPy reference on a one-node model's node."""
    node, schema = _node(model)
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer} | dict(feeds)
    return [
        np.asarray(v) for v in schema.run(node, [values[i] if i else None for i in node.inputs])
    ]


def infer_node(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], symbolic: bool = False
) -> list[TensorType]:
    """The op's own shape inference for the model's single node.

    Initializers carry their values; fed inputs only their type (with `symbolic`, every fed dim
    becomes a symbol, as a model with dynamic axes declares it).
    """
    node, schema = _node(model)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    types = []
    for k, name in enumerate(node.inputs):
        if not name:
            types.append(None)
        elif name in inits:
            arr = inits[name]
            types.append(TensorType(dtype_name(arr.dtype), tuple(arr.shape), arr))
        else:
            arr = feeds[name]
            shape = tuple(f"s{k}_{i}" for i in range(arr.ndim)) if symbolic else tuple(arr.shape)
            types.append(TensorType(dtype_name(arr.dtype), shape))
    return schema.infer(InferContext(node, node.attrs, types))


def compare(
    got: np.ndarray,
    want: np.ndarray,
    rtol: float,
    atol: float,
    what: str,
    against: str = "onnxruntime",
) -> None:
    """Equal dtype and shape, values within tolerance (exact for integers unless atol >= 1)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, {against} gives {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, {against} gives {want.shape}"
    if np.issubdtype(want.dtype, np.floating) or atol >= 1:
        np.testing.assert_allclose(
            got.astype(np.float64),
            want.astype(np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            err_msg=what,
        )
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_op(
    model_or_node_spec,
    feeds: Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> list[np.ndarray]:
    """Run on onnxruntime (for an op of ORT_EQUIVALENTS, the ONNX ops that express it) and
    tinydl, compare outputs, and check the op's shape inference.

    Returns tinydl's outputs.
    """
    if isinstance(model_or_node_spec, onnx.ModelProto):
        model, feeds = model_or_node_spec, dict(feeds or {})
    else:
        model, feeds = node_model(**model_or_node_spec)
    op = model.graph.node[0].op_type if len(model.graph.node) == 1 else None
    if op in ORT_EQUIVALENTS:
        consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        want = ORT_EQUIVALENTS[op](feeds, _attrs(model.graph.node[0]), consts)
    else:
        want = run_onnxruntime(model, feeds)
    if len(model.graph.node) == 1:
        for i, (g, w) in enumerate(zip(run_reference(model, feeds), want, strict=True)):
            compare(g, w, rtol, atol, f"reference output {i}")
        inferred = infer_node(model, feeds)
        for i, (t, w) in enumerate(zip(inferred, want, strict=False)):
            # None: a dim only the data decides (NonMaxSuppression's row count)
            assert t.shape is not None and len(t.shape) == w.ndim, (
                f"inferred shape of output {i}: {t.shape}, actual {w.shape}"
            )
            assert all(d is None or d == a for d, a in zip(t.shape, w.shape, strict=True)), (
                f"inferred shape of output {i}: {t.shape}, actual {w.shape}"
            )
            assert t.dtype == w.dtype.name, (
                f"inferred dtype of output {i}: {t.dtype}, actual {w.dtype}"
            )
        for i, (t, w) in enumerate(
            zip(infer_node(model, feeds, symbolic=True), want, strict=False)
        ):
            if t.shape is None:
                continue
            assert len(t.shape) == w.ndim, f"symbolic inference of output {i}: rank of {t.shape}"
            for d, actual in zip(t.shape, w.shape, strict=True):
                assert not isinstance(d, int) or d == actual, (
                    f"symbolic inference of output {i}: {t.shape}, actual {w.shape}"
                )
    got = run_tinydl(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        compare(g, w, rtol, atol, f"output {i}")
    return got


def backend_case(backend, op, inputs, attrs, consts, case_id: str):
    """An op case of helpers/cases.py as (model, graph, feeds) for `backend`, with fresh random
    inputs seeded by `case_id`; skipped with the backend's own reason if it refuses a node."""
    from tinydl.importers.onnx import from_model

    arrays, attrs = draw(case_id, inputs, attrs)
    model, feeds = node_model(op=op, inputs=arrays, attrs=attrs, consts=consts)
    graph = from_model(model)
    if not graph.nodes:
        pytest.skip("the importer turns this node into a constant: nothing runs")
    for node in graph.nodes:
        answer = backend.supports(node, graph)
        if not answer:
            pytest.skip(f"{backend.name} refuses {node.op}: {answer.reason}")
    return model, graph, feeds


def wrap_fp16(graph: Graph) -> Graph:
    """Identity copies around the graph, so the op's own tensors are fp16 intermediates."""
    nodes, inputs, outputs = [], [], []
    rename = {}
    for v in graph.inputs:
        if v.dtype == "float32":
            rename[v.name] = f"{v.name}__h"
            nodes.append(Node("Identity", [v.name], [rename[v.name]], name=f"in_{v.name}"))
        inputs.append(v)
    body = [
        Node(
            n.op, [rename.get(i, i) for i in n.inputs], list(n.outputs), dict(n.attrs), name=n.name
        )
        for n in graph.nodes
    ]
    tail = []
    for v in graph.outputs:
        if v.dtype == "float32":
            inner = f"{v.name}__h"
            for n in body:
                n.outputs = [inner if o == v.name else o for o in n.outputs]
            tail.append(Node("Identity", [inner], [v.name], name=f"out_{v.name}"))
        outputs.append(Value(v.name, v.dtype, v.shape))
    wrapped = Graph(inputs, outputs, nodes + body + tail, dict(graph.initializers))
    return validate(wrapped)
