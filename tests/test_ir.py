"""The IR: graph validation errors name the node, Kahn ordering, and the .tdl round trip."""

from __future__ import annotations

import json
import os
import random
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import tinydl
from tinydl.errors import InvalidModelError
from tinydl.ir import tdl
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate


def _graph(nodes, outputs=("y",), inputs=None, initializers=None, **kw) -> Graph:
    inputs = [Value("x", "float32", (2, 3))] if inputs is None else inputs
    return Graph(
        inputs=inputs,
        outputs=[Value(o) for o in outputs],
        nodes=list(nodes),
        initializers=dict(initializers or {}),
        **kw,
    )


def _error(graph: Graph) -> str:
    with pytest.raises(InvalidModelError) as info:
        validate(graph)
    return str(info.value)


# -- validation errors name the node ----------------------------------------------------------

INVALID = {
    "unknown op": (
        [Node("Frobnicate", ["x"], ["y"], name="mystery")],
        ["mystery", "Frobnicate"],
    ),
    "wrong attribute type": (
        [Node("Softmax", ["x"], ["y"], {"axis": "x"}, name="soft")],
        ["soft", "axis", "int"],
    ),
    "float for an int attribute": (
        [Node("Softmax", ["x"], ["y"], {"axis": 1.0}, name="soft")],
        ["soft", "axis"],
    ),
    "int out of the int64 range": (
        [Node("Softmax", ["x"], ["y"], {"axis": 2**64}, name="soft")],
        ["soft", "axis", "int64"],
    ),
    "float attribute too large": (
        [Node("LeakyRelu", ["x"], ["y"], {"alpha": 10**400}, name="leaky")],
        ["leaky", "alpha"],
    ),
    "unknown attribute": (
        [Node("Relu", ["x"], ["y"], {"alpha": 1.0}, name="relu1")],
        ["relu1", "alpha"],
    ),
    "missing required attribute": (
        [Node("Concat", ["x", "x"], ["y"], name="cat")],
        ["cat", "axis", "required"],
    ),
    "wrong number of inputs": (
        [Node("Add", ["x"], ["y"], name="half_add")],
        ["half_add"],
    ),
    "dangling input": (
        [Node("Add", ["x", "ghost"], ["y"], name="adder")],
        ["adder", "ghost", "dangling"],
    ),
    "duplicate output": (
        [Node("Relu", ["x"], ["y"], name="first"), Node("Sigmoid", ["x"], ["y"], name="dup")],
        ["dup", "'y'", "already defined"],
    ),
    "output shadows a graph input": (
        [Node("Relu", ["x"], ["x"], name="shadow"), Node("Relu", ["x"], ["y"], name="r")],
        ["shadow", "'x'", "already defined"],
    ),
    "cycle": (
        [
            Node("Add", ["x", "c"], ["a"], name="loop_a"),
            Node("Relu", ["a"], ["b"], name="loop_b"),
            Node("Relu", ["b"], ["c"], name="loop_c"),
            Node("Relu", ["c"], ["y"], name="after"),
        ],
        ["loop_a", "cycle"],
    ),
    "self loop": (
        [Node("Add", ["x", "y"], ["y"], name="ouroboros")],
        ["ouroboros", "cycle"],
    ),
    "op is not a string": (
        [Node(["Relu"], ["x"], ["y"], name="listy")],
        ["listy", "op"],
    ),
    "inputs are not strings": (
        [Node("Relu", [3], ["y"], name="numeric")],
        ["numeric", "inputs"],
    ),
    "shapes that do not broadcast": (
        [Node("Add", ["x", "w"], ["y"], name="bad_add")],
        ["bad_add", "broadcast"],
    ),
    "axis out of range": (
        [Node("Softmax", ["x"], ["y"], {"axis": 5}, name="far_axis")],
        ["far_axis", "axis"],
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_graph_names_the_node(case):
    nodes, expected = INVALID[case]
    graph = _graph(nodes, initializers={"w": np.zeros((4, 5), np.float32)})
    message = _error(graph)
    for part in expected:
        assert part in message, f"{case}: {part!r} not in {message!r}"


def test_graph_output_not_produced_names_the_output():
    message = _error(_graph([Node("Relu", ["x"], ["y"], name="r")], outputs=("y", "nowhere")))
    assert "nowhere" in message and "not produced" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dtype", "complex64"),
        ("dtype", ["f32"]),
        ("shape", (2, -1)),
        ("shape", (2, True)),
        ("shape", 7),
        ("name", ""),
    ],
)
def test_invalid_graph_input_is_refused(field, value):
    x = Value("x", "float32", (2, 3))
    setattr(x, field, value)
    with pytest.raises(InvalidModelError):
        validate(_graph([Node("Relu", ["x"], ["y"], name="r")], inputs=[x]))


def test_cycle_error_names_a_node_on_the_cycle_not_one_downstream():
    # The downstream node comes first in file order and is stuck too, but is not on the cycle.
    nodes = [
        Node("Relu", ["c"], ["y"], name="downstream"),
        Node("Relu", ["b"], ["c"], name="loop_c"),
        Node("Add", ["x", "c"], ["a"], name="loop_a"),
        Node("Relu", ["a"], ["b"], name="loop_b"),
    ]
    message = _error(_graph(nodes))
    assert "'downstream'" not in message
    rotations = ["loop_a", "loop_b", "loop_c"] * 2
    paths = [
        " -> ".join(f"'{n}'" for n in rotations[k : k + 3] + rotations[k : k + 1]) for k in range(3)
    ]
    assert any(path in message for path in paths), message


def test_validate_fills_defaults_and_is_idempotent():
    graph = _graph(
        [Node("Conv", ["x4", "w"], ["y"], name="conv")],
        inputs=[Value("x4", "float32", (1, 3, 8, 8))],
        initializers={"w": np.ones((4, 3, 3, 3), np.float32)},
    )
    validate(graph)
    attrs = dict(graph.nodes[0].attrs)
    assert attrs["group"] == 1 and "pads" in attrs
    validate(graph)  # defaults filled in (some None) must pass the attribute check again
    assert graph.nodes[0].attrs == attrs
    assert graph.outputs[0].shape == (1, 4, 6, 6)


def test_unnamed_and_repeated_nodes_get_fresh_unique_names():
    nodes = [
        Node("Relu", ["x"], ["a"], name=""),
        Node("Relu", ["a"], ["b"], name="Relu_0"),
        Node("Relu", ["b"], ["c"], name="Relu_0"),
        Node("Relu", ["c"], ["y"], name="Relu_2"),
    ]
    graph = validate(_graph(nodes))
    names = [n.name for n in graph.nodes]
    assert len(set(names)) == len(names)
    # Names the file gave stay with their nodes.
    assert names[1] == "Relu_0" and names[3] == "Relu_2"


# -- Kahn ordering ------------------------------------------------------------------------------


def _random_dag(rng: random.Random, size: int) -> list[Node]:
    nodes = []
    available = ["x"]
    for i in range(size):
        if rng.random() < 0.5 and len(available) > 1:
            a, b = rng.sample(available, 2)
            nodes.append(Node("Add", [a, b], [f"v{i}"], name=f"n{i}"))
        else:
            nodes.append(Node("Relu", [rng.choice(available)], [f"v{i}"], name=f"n{i}"))
        available.append(f"v{i}")
    nodes.append(Node("Relu", [f"v{size - 1}"], ["y"], name="out"))
    return nodes


def _smallest_index_order(nodes: list[Node], defined: set[str]) -> list[str]:
    """The reference: repeatedly take the first node in file order whose inputs are all ready."""
    ready, left, order = set(defined), list(nodes), []
    while left:
        node = next(n for n in left if all(i in ready for i in n.inputs if i))
        left.remove(node)
        order.append(node.name)
        ready.update(node.outputs)
    return order


@pytest.mark.parametrize("seed", range(8))
def test_toposort_orders_a_shuffled_dag_stably(seed):
    rng = random.Random(seed)
    nodes = _random_dag(rng, 40)
    rng.shuffle(nodes)
    graph = _graph(nodes)
    order = graph.toposort()
    position = {n.name: k for k, n in enumerate(order)}
    producer = {o: n.name for n in nodes for o in n.outputs}
    for node in order:
        for i in node.inputs:
            if i in producer:
                assert position[producer[i]] < position[node.name], (
                    f"{node.name} before its input {i}"
                )
    assert [n.name for n in order] == _smallest_index_order(nodes, {"x"})
    # Stable: an ordered graph keeps its order.
    assert _graph(order).toposort() == order


def test_toposort_keeps_an_ordered_graph_unchanged():
    # Two independent branches: a depth-first order would move 'b_relu' ahead of 'a2_relu'.
    nodes = [
        Node("Relu", ["x"], ["a1"], name="a1_relu"),
        Node("Sigmoid", ["x"], ["b"], name="b_sigmoid"),
        Node("Relu", ["a1"], ["a2"], name="a2_relu"),
        Node("Add", ["a2", "b"], ["y"], name="join"),
    ]
    assert validate(_graph(nodes)).nodes == nodes


# -- constant folding stays small ---------------------------------------------------------------


def test_constant_folding_does_not_allocate_huge_outputs():
    # Broadcasting (65536, 1) + (1, 65536) would be 2**32 elements (16 GiB) if it were computed.
    graph = _graph(
        [Node("Add", ["col", "row"], ["big"], name="outer"), Node("Relu", ["x"], ["y"], name="r")],
        outputs=("y", "big"),
        initializers={
            "col": np.zeros((65536, 1), np.float32),
            "row": np.zeros((1, 65536), np.float32),
        },
    )
    tracemalloc.start()
    try:
        validate(graph)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert graph.values["big"].shape == (65536, 65536)
    assert peak < 64 << 20


def test_small_constants_are_still_folded():
    # Reshape's target comes from folding Add(target, zeros): the output shape must be known.
    graph = _graph(
        [
            Node("Add", ["target", "zeros"], ["shape"], name="fold_me"),
            Node("Reshape", ["x", "shape"], ["y"], name="reshape"),
        ],
        initializers={"target": np.array([3, 2], np.int64), "zeros": np.zeros(2, np.int64)},
    )
    validate(graph)
    assert graph.outputs[0].shape == (3, 2)


# -- the .tdl file ------------------------------------------------------------------------------


def _weights() -> dict[str, np.ndarray]:
    odd_floats = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38], np.float32)
    nan_payload = np.array([0x7FC00001, 0xFFA00000], np.uint32).view(np.float32)
    return {
        "w_f32": np.concatenate([odd_floats, nan_payload]).reshape(2, 4),
        "w_f16": np.arange(-6, 6, dtype=np.float16).reshape(3, 4) / np.float16(3),
        "w_f64": np.array([np.pi, -np.e], np.float64),
        "w_i64": np.array([-(2**63), 2**63 - 1, 0], np.int64),
        "w_i32": np.array([[-(2**31)], [2**31 - 1]], np.int32),
        "w_i8": np.array([-128, 127], np.int8),
        "w_u8": np.array([0, 255], np.uint8),
        "w_bool": np.array([True, False, True]),
        "w_empty": np.zeros((0, 3), np.float32),
        "w_scalar": np.array(-2.5, np.float32),
        "bias": np.linspace(-1, 1, 4, dtype=np.float32),
    }


def _sample_graph() -> Graph:
    nodes = [
        Node(
            "Constant",
            [],
            ["k"],
            {"value": np.array([[0.5, -0.25, 2.0, 1.0]], np.float32)},
            name="const",
        ),
        Node("Add", ["x", "bias"], ["a"], name="add"),
        Node("Mul", ["a", "k"], ["m"], name="mul"),
        Node("LeakyRelu", ["m"], ["l"], {"alpha": 0.125}, name="leaky"),
        Node("Softmax", ["l"], ["y"], {"axis": 1}, name="softmax"),
        Node("Sigmoid", ["y"], ["z"], name="sigmoid"),
    ]
    graph = Graph(
        inputs=[Value("x", "float32", ("N", 4)), Value("extra", "float32", ("N", "H", None, 3))],
        outputs=[Value("z", "float32", ("N", 4)), Value("y")],
        nodes=nodes,
        initializers=_weights(),
        metadata={
            "source_format": "test",
            "mean": [0.485, 0.456, 0.406],
            "note": "é ü 漢字",
            "nested": {"a": [1, {"b": None}]},
        },
        name="round trip",
    )
    return validate(graph)


def test_tdl_round_trip_is_exact(tmp_path):
    graph = _sample_graph()
    path = tmp_path / "m.tdl"
    tinydl.save(graph, path)
    loaded = tinydl.load(path)

    assert loaded.name == graph.name
    assert loaded.metadata == graph.metadata
    assert [(v.name, v.dtype, v.shape) for v in loaded.inputs] == [
        ("x", "float32", ("N", 4)),
        ("extra", "float32", ("N", "H", None, 3)),
    ]
    assert [(v.name, v.dtype, v.shape) for v in loaded.outputs] == [
        (v.name, v.dtype, v.shape) for v in graph.outputs
    ]
    assert [(n.op, n.name, n.inputs, n.outputs) for n in loaded.nodes] == [
        (n.op, n.name, n.inputs, n.outputs) for n in graph.nodes
    ]
    for before, after in zip(graph.nodes, loaded.nodes, strict=True):
        assert before.attrs.keys() == after.attrs.keys()
        for key, value in before.attrs.items():
            if isinstance(value, np.ndarray):
                assert after.attrs[key].dtype == value.dtype
                assert after.attrs[key].tobytes() == value.tobytes()
            else:
                assert after.attrs[key] == value and type(after.attrs[key]) is type(value)
    assert loaded.initializers.keys() == graph.initializers.keys()
    for name, arr in graph.initializers.items():
        got = loaded.initializers[name]
        assert (got.dtype, got.shape) == (arr.dtype, arr.shape), name
        assert got.tobytes() == arr.tobytes(), name  # bit-exact: NaN payloads, -0.0, extremes

    # Saving what was loaded gives the same graph (the container's key order may differ).
    again = tmp_path / "again.tdl"
    tinydl.save(loaded, again)
    assert tdl.graph_json_text(tinydl.load(again)) == tdl.graph_json_text(graph)


def test_tdl_weights_are_read_only_memory_maps(tmp_path):
    path = tmp_path / "m.tdl"
    tinydl.save(_sample_graph(), path)
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    loaded = tinydl.load(path)
    for name, arr in loaded.initializers.items():
        assert not arr.flags.writeable, name
        if arr.size == 0:
            continue
        # A plain ndarray (a snapshot keeps those out of band; an np.memmap it would copy).
        assert type(arr) is np.ndarray, name
        # Zero copy: the array is the file's own bytes at the header's offsets (a view of the
        # file's one mapping).
        begin = 8 + header_len + header[name]["data_offsets"][0]
        whole = arr
        while not isinstance(whole, np.memmap):
            whole = whole.base
        assert whole.offset == 0 and whole.size == len(data), name
        assert Path(whole.filename) == path.resolve(), name
        assert arr.ctypes.data - whole.ctypes.data == begin, name
        with pytest.raises(ValueError):
            arr.flat[0] = 0


def _rewrite_metadata(path, **changes):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header["__metadata__"].update(changes)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])


def test_tdl_version_mismatch_is_refused(tmp_path):
    path = tmp_path / "m.tdl"
    tinydl.save(_sample_graph(), path)
    _rewrite_metadata(path, version="2")
    with pytest.raises(InvalidModelError, match=r"version '2' is not supported.*reads version 1"):
        tinydl.load(path)


@pytest.mark.parametrize(
    "changes", [{"format": "safetensors"}, {"graph": "{not json"}, {"graph": "[]"}, {"graph": None}]
)
def test_tdl_bad_metadata_is_refused(tmp_path, changes):
    path = tmp_path / "m.tdl"
    tinydl.save(_sample_graph(), path)
    _rewrite_metadata(path, **changes)
    with pytest.raises(InvalidModelError):
        tinydl.load(path)


def test_tdl_graph_json_matches_saved_graph():
    doc, tensors = tdl.graph_to_json(_sample_graph())
    assert [n["name"] for n in doc["nodes"]] == [
        "const",
        "add",
        "mul",
        "leaky",
        "softmax",
        "sigmoid",
    ]
    assert doc["nodes"][0]["attrs"]["value"] == {"$tensor": "__attr__/const/value"}
    assert "__attr__/const/value" in tensors


def test_onnx_scalar_weights_keep_their_shape_through_tdl(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Mul", ["x", "s"], ["y"], name="scale")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.array(3.0, np.float32), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    loaded = tinydl.load(tmp_path / "m.onnx")
    assert loaded.initializers["s"].shape == ()
    tinydl.save(loaded, tmp_path / "m.tdl")
    assert tinydl.load(tmp_path / "m.tdl").initializers["s"].shape == ()


@pytest.mark.parametrize(
    "op, inputs, initializers, message",
    [
        (
            "Conv",
            [("x", "float32", (1, 1, 4, 4))],
            {"w": np.ones((1, 1, 3, 3))},
            "inputs must share one dtype, got input 0: float32, input 1: float64",
        ),
        ("Sqrt", [("x", "int64", (3,))], {}, "input 0 must be float"),
        ("Relu", [("x", "bool", (3,))], {}, "input 0 must be signed"),
        (
            "Reshape",
            [("x", "float32", (6,))],
            {"s": np.array([2.0, 3.0], np.float32)},
            "input 1 must be index",
        ),
    ],
)
def test_type_constraints_name_the_node(op, inputs, initializers, message):
    graph = Graph(
        inputs=[Value(n, d, s) for n, d, s in inputs],
        outputs=[Value("y")],
        nodes=[Node(op, [n for n, _, _ in inputs] + list(initializers), ["y"], name="the_node")],
        initializers=initializers,
    )
    with pytest.raises(InvalidModelError, match=f"node 'the_node' \\({op}\\): {message}"):
        validate(graph)


def test_saved_file_has_the_usual_permissions(tmp_path):
    graph = Graph(
        [Value("x", "float32", (2,))], [Value("y")], [Node("Relu", ["x"], ["y"], name="r")]
    )
    tinydl.save(validate(graph), tmp_path / "m.tdl")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "m.tdl").stat().st_mode & 0o777 == 0o666 & ~umask


def test_graph_validate_without_an_op_set_checks_the_structure_only():
    """ir knows no ops: Graph.validate() orders and checks the structure; ops.validate adds the
    ops, attributes and shapes."""
    nodes = [Node("NoSuchOp", ["a"], ["y"], {"k": 1}), Node("Relu", ["x"], ["a"])]
    graph = _graph(nodes).validate()
    assert [n.op for n in graph.nodes] == ["Relu", "NoSuchOp"] and graph.values == {}
    with pytest.raises(InvalidModelError, match="unknown op 'NoSuchOp'"):
        validate(graph)
    with pytest.raises(InvalidModelError, match="cycle"):
        _graph([Node("Relu", ["y"], ["a"]), Node("Relu", ["a"], ["y"])]).validate()
