"""ONNX import of control flow: an If whose condition is a constant at import becomes the nodes of
the branch it takes (values renamed apart, outer values read directly, nested Ifs too); an If
decided at run time keeps both branches as graphs and runs on the CPU backends; so does a Loop,
whose body's outer values become loop-carried values, and a Scan (state values). Ops tinydl lacks
are folded at import when their inputs are constants, and refused by name otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.opcheck import run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import tinydl as td
from tinydl.errors import InvalidModelError, UnsupportedOpError
from tinydl.importers.onnx import FOLD_LIMIT, from_model
from tinydl.ops import validate

F = TensorProto.FLOAT


def branch(name, scale, out="out", inner_if=None):
    """A branch graph: out = x * scale (x from the outer graph) + its own bias; with `inner_if`,
    out is that If's output instead."""
    s, t, bias = f"{name}_s", f"{name}_t", f"{name}_bias"  # one name per value (SSA)
    nodes = [
        helper.make_node("Constant", [], [s], value=numpy_helper.from_array(np.float32(scale))),
        helper.make_node("Mul", ["x", s], [t]),
        inner_if or helper.make_node("Add", [t, bias], [out], name=f"{name}_add"),
    ]
    init = numpy_helper.from_array(np.full(3, scale, np.float32), bias)
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F, None)], [init])


def if_model(cond_nodes, cond_inits=(), then=None, other=None, inputs=None):
    if_node = helper.make_node(
        "If",
        ["cond"],
        ["y"],
        name="choose",
        then_branch=then or branch("then", 2.0),
        else_branch=other or branch("else", -3.0),
    )
    graph = helper.make_graph(
        [*cond_nodes, if_node, helper.make_node("Sigmoid", ["y"], ["z"])],
        "if",
        inputs or [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("z", F, [2, 3])],
        list(cond_inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def run_both(model):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    graph = from_model(model)
    assert "If" not in {n.op for n in graph.nodes}
    (got,) = td.compile(graph, backends=("numpy",)).run({"x": x}).values()
    (want,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    return graph, got


@pytest.mark.parametrize("flag", [True, False])
def test_if_on_an_initializer_inlines_the_branch_it_takes(flag):
    cond = numpy_helper.from_array(np.array(flag), "cond")
    graph, got = run_both(if_model([], [cond]))
    scale = 2.0 if flag else -3.0
    assert scale in {float(v) for v in graph.initializers.values() if v.size == 1}
    assert np.all((got > 0) & (got < 1))


def test_if_on_shape_arithmetic_of_a_static_input_folds():
    """cond = Cast(Shape(x)[0] - 1) is true for x of 2 rows: the then branch runs."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], start=0, end=1),
        helper.make_node("Sub", ["shape", "one"], ["rows"]),
        helper.make_node("Squeeze", ["rows"], ["row"]),
        helper.make_node("Cast", ["row"], ["cond"], to=TensorProto.BOOL),
    ]
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    graph, _ = run_both(if_model(nodes, [one]))
    bias = [v for k, v in graph.initializers.items() if k.startswith("choose/")]
    assert bias and all(np.all(v == 2.0) for v in bias)


def test_nested_if_and_outer_values_resolve_through_both_branches():
    inner = helper.make_node(
        "If",
        ["flag"],
        ["out"],
        name="inner",
        then_branch=branch("inner_then", 5.0, out="o1"),
        else_branch=branch("inner_else", 7.0, out="o2"),
    )
    outer_then = branch("outer_then", 2.0, inner_if=inner)
    flags = [numpy_helper.from_array(np.array(True), "cond")]
    flags.append(numpy_helper.from_array(np.array(False), "flag"))
    graph, _ = run_both(if_model([], flags, then=outer_then))
    assert {n.name for n in graph.nodes} >= {"choose/inner/inner_else_add"}


def runtime_if_model(then=None, other=None):
    """cond = ReduceSum(x) > 0, computed from the input data."""
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"]),
    ]
    zero = numpy_helper.from_array(np.float32(0), "zero")
    return if_model(nodes, [zero], then=then, other=other)


def inputs_taking_both_branches(n=4):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(n)]
    xs = [x + (1 if k % 2 else -1) * (abs(x.sum()) + 1) / 6 for k, x in enumerate(xs)]
    assert {bool(x.sum() > 0) for x in xs} == {True, False}
    return xs


def test_if_decided_at_run_time_takes_the_branch_the_data_chooses():
    model = runtime_if_model()
    graph = from_model(model)
    (node,) = [n for n in graph.nodes if n.op == "If"]
    # the outer value both branches read is an explicit input of the If
    assert node.inputs == ["cond", "x"]
    then = node.attrs["then_branch"]
    assert [v.name for v in then.inputs] == ["x"] and then.inputs[0].shape == (2, 3)
    assert graph.value("y").dtype == "float32" and graph.value("y").shape == (2, 3)
    sess = td.compile(graph, backends=("numpy",))
    for x in inputs_taking_both_branches():
        (want,) = run_onnxruntime(model, {"x": x})
        np.testing.assert_allclose(sess.run({"x": x})["z"], want, rtol=1e-5, atol=1e-7)


def test_nested_if_decided_at_run_time():
    """The inner condition (max(x) < 1) is computed in the outer graph and read by the branch."""
    inner = helper.make_node(
        "If",
        ["flag"],
        ["out"],
        name="inner",
        then_branch=branch("inner_then", 5.0, out="o1"),
        else_branch=branch("inner_else", 7.0, out="o2"),
    )
    model = runtime_if_model(then=branch("outer_then", 2.0, inner_if=inner))
    one = numpy_helper.from_array(np.float32(1), "one")
    model.graph.initializer.append(one)
    model.graph.node.insert(0, helper.make_node("ReduceMax", ["x"], ["top"], keepdims=0))
    model.graph.node.insert(1, helper.make_node("Less", ["top", "one"], ["flag"]))
    graph = from_model(model)
    (outer,) = [n for n in graph.nodes if n.op == "If"]
    assert set(outer.inputs[1:]) == {"x", "flag"}
    (nested,) = [n for n in outer.attrs["then_branch"].nodes if n.op == "If"]
    assert nested.inputs == ["flag", "x"]
    # the NumPy reference, and onnxruntime given the If back as ONNX subgraphs
    sessions = [td.compile(graph, backends=(b,), strict=True) for b in ("numpy", "onnxruntime")]
    xs = inputs_taking_both_branches(8)
    xs += [x * 0.1 + 0.05 for x in xs]  # positive sums whose max is below 1
    taken = set()
    for x in xs:
        taken.add(("then/" + ("then" if x.max() < 1 else "else")) if x.sum() > 0 else "else")
        (want,) = run_onnxruntime(model, {"x": x})
        for sess in sessions:
            np.testing.assert_allclose(sess.run({"x": x})["z"], want, rtol=1e-5, atol=1e-7)
    assert taken == {"then/then", "then/else", "else"}


def test_if_shape_inference_keeps_the_dims_the_branches_agree_on():
    """then gives x (2, 3), else gives x reshaped to (3, 2): rank kept, dims unknown."""
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape32")
    other = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape32"], ["flat"])],
        "else",
        [],
        [helper.make_tensor_value_info("flat", F, None)],
        [shape],
    )
    then = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["same"])],
        "then",
        [],
        [helper.make_tensor_value_info("same", F, None)],
    )
    model = runtime_if_model(then=then, other=other)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", F, None))
    graph = from_model(model)
    assert graph.value("y").shape == (None, None)
    sess = td.compile(graph, backends=("numpy",))
    for x in inputs_taking_both_branches():
        (want,) = run_onnxruntime(model, {"x": x})
        np.testing.assert_allclose(sess.run({"x": x})["z"], want, rtol=1e-5, atol=1e-7)


def test_run_time_if_falls_back_from_webgpu_with_a_reason():
    from tinydl.backends import get_backend

    if not get_backend("webgpu").available():
        pytest.skip("webgpu is unavailable")
    graph = from_model(runtime_if_model())
    with pytest.warns(UserWarning, match="ops: If"):
        sess = td.compile(graph, backends=("webgpu", "numpy"))
    assert sess.placement.nodes["choose"] == "numpy"
    assert sess.placement.fallbacks()["choose"]["webgpu"]
    x = inputs_taking_both_branches()[1]
    (want,) = run_onnxruntime(runtime_if_model(), {"x": x})
    np.testing.assert_allclose(sess.run({"x": x})["z"], want, rtol=1e-4, atol=1e-6)


def test_a_graph_with_a_run_time_if_is_not_saved_as_tdl(tmp_path):
    sess = td.compile(from_model(runtime_if_model()), backends=("numpy",))
    with pytest.raises(UnsupportedOpError, match=r"node 'choose' \(If\).*then_branch"):
        sess.save(tmp_path / "if.tdl")
    assert not list(tmp_path.iterdir())


def test_a_bad_branch_is_reported_through_the_if():
    graph = from_model(runtime_if_model())
    (node,) = [n for n in graph.nodes if n.op == "If"]
    node.attrs["else_branch"].nodes[0].op = "NoSuchOp"
    with pytest.raises(InvalidModelError, match=r"'else_branch'.*unknown op 'NoSuchOp'"):
        validate(graph)


def scan_model(length: int, **layout):
    """s = initial; for each slice x_t of x (along scan_input_axes): s = s + x_t * w (w read from
    the outer graph); scan output 2 * s, stacked along scan_output_axes."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x_t", "w"], ["xw"]),
            helper.make_node("Add", ["s_in", "xw"], ["s_out"]),
            helper.make_node("Add", ["s_out", "s_out"], ["y_t"]),
        ],
        "body",
        [helper.make_tensor_value_info(n, F, [3]) for n in ("s_in", "x_t")],
        [helper.make_tensor_value_info(n, F, [3]) for n in ("s_out", "y_t")],
    )
    node = helper.make_node(
        "Scan", ["s0", "x"], ["s", "ys"], name="sweep", body=body, num_scan_inputs=1, **layout
    )
    axis = layout.get("scan_input_axes", [0])[0]
    w = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w")
    graph = helper.make_graph(
        [node],
        "scan",
        [
            helper.make_tensor_value_info("s0", F, [3]),
            helper.make_tensor_value_info("x", F, [length, 3] if axis == 0 else [3, length]),
        ],
        [helper.make_tensor_value_info("s", F, [3]), helper.make_tensor_value_info("ys", F, None)],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize(
    "length, layout",
    [
        (5, {}),
        (4, {"scan_input_axes": [1], "scan_output_axes": [1]}),
        (4, {"scan_input_directions": [1], "scan_output_directions": [1]}),
        (3, {"scan_input_axes": [-1], "scan_output_axes": [-1], "scan_input_directions": [1]}),
    ],
)
def test_scan_runs_as_onnxruntime_runs_it(length, layout):
    model = scan_model(length, **layout)
    rng = np.random.default_rng(8)
    x_shape = (length, 3) if layout.get("scan_input_axes", [0])[0] == 0 else (3, length)
    feeds = {
        "s0": rng.standard_normal(3).astype(np.float32),
        "x": rng.standard_normal(x_shape).astype(np.float32),
    }
    want = run_onnxruntime(model, feeds)
    graph = from_model(model)
    (node,) = graph.nodes
    assert node.inputs == ["s0", "w", "x"]  # w, read by the body, is a state value
    for backend in ("numpy", "onnxruntime"):
        got = td.compile(graph, backends=(backend,), strict=True).run(feeds)
        for name, w in zip(("s", "ys"), want, strict=True):
            assert got[name].shape == w.shape
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=backend)


def test_a_scan_over_zero_slices_gives_its_initial_state_and_empty_scans():
    """onnxruntime and onnx's reference refuse this; the NumPy reference gives what the spec
    implies."""
    graph = from_model(scan_model(0, scan_output_axes=[1]))
    s0 = np.random.default_rng(9).standard_normal(3).astype(np.float32)
    got = td.compile(graph, backends=("numpy",)).run({"s0": s0, "x": np.ones((0, 3), np.float32)})
    np.testing.assert_array_equal(got["s"], s0)
    assert got["ys"].shape == (3, 0) and got["ys"].dtype == np.float32


I64, BOOL = TensorProto.INT64, TensorProto.BOOL


def loop_body(extra=()):
    """y_out = y_in + x (x read from the outer graph); scan s = y_out * iteration; the body's
    condition is sum(y_out) < limit (limit from the outer graph too)."""
    nodes = [
        helper.make_node("Add", ["y_in", "x"], ["y_out"]),
        helper.make_node("Cast", ["it"], ["it_f"], to=F),
        helper.make_node("Mul", ["y_out", "it_f"], ["s"]),
        helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        *extra,
    ]
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("it", I64, []),
            helper.make_tensor_value_info("cond_in", BOOL, []),
            helper.make_tensor_value_info("y_in", F, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", BOOL, []),
            helper.make_tensor_value_info("y_out", F, [2, 3]),
            helper.make_tensor_value_info("s", F, [2, 3]),
        ],
    )


def loop_model(trip: bool, cond: bool, body=None):
    """Loop(M if `trip`, cond = sum(y0) < limit if `cond`, y0) with the body above."""
    nodes = [helper.make_node("ReduceSum", ["y0"], ["start"], keepdims=0)]
    nodes.append(helper.make_node("Less", ["start", "limit"], ["go"]))
    loop = helper.make_node(
        "Loop",
        ["M" if trip else "", "go" if cond else "", "y0"],
        ["y", "scan"],
        name="repeat",
        body=body or loop_body(),
    )
    inputs = [
        helper.make_tensor_value_info("x", F, [2, 3]),
        helper.make_tensor_value_info("y0", F, [2, 3]),
        helper.make_tensor_value_info("limit", F, []),
    ]
    if trip:
        inputs.append(helper.make_tensor_value_info("M", I64, []))
    graph = helper.make_graph(
        [*nodes, loop, helper.make_node("Sigmoid", ["y"], ["z"])],
        "loop",
        inputs,
        [
            helper.make_tensor_value_info("z", F, [2, 3]),
            helper.make_tensor_value_info("scan", F, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def loop_feeds(trip: int | None, steps: float):
    """x > 0, so sum(y) grows by sum(x) per iteration: the body's condition turns false
    after ceil(steps) iterations."""
    rng = np.random.default_rng(3)
    x = (rng.random((2, 3)) + 0.1).astype(np.float32)
    y0 = rng.standard_normal((2, 3)).astype(np.float32)
    feeds = {"x": x, "y0": y0, "limit": np.array(y0.sum() + steps * x.sum(), np.float32)}
    if trip is not None:
        feeds["M"] = np.array(trip, np.int64)
    return feeds


@pytest.mark.parametrize(
    "trip, cond, steps, iterations",
    [
        (5, False, 1e6, 5),  # counted: for i < M
        (None, True, 3.5, 4),  # while the condition holds
        (10, True, 2.5, 3),  # both: the condition ends it first
        (2, True, 2.5, 2),  # both: the count ends it first
        (0, True, 2.5, 0),  # zero iterations: the initial values, empty scans
        (None, True, -1.0, 0),  # a false initial condition: zero iterations
    ],
)
def test_loop_runs_as_onnxruntime_runs_it(trip, cond, steps, iterations):
    model = loop_model(trip is not None, cond)
    feeds = loop_feeds(trip, steps)
    want = run_onnxruntime(model, feeds)
    assert want[1].shape == (iterations, 2, 3)
    graph = from_model(model)
    (node,) = [n for n in graph.nodes if n.op == "Loop"]
    # the outer values the body reads are loop-carried values after the Loop's own
    assert node.inputs[2:] == ["y0", "x", "limit"]
    assert graph.value("scan").shape == (None, 2, 3)
    for backend in ("numpy", "onnxruntime"):
        got = td.compile(graph, backends=(backend,), strict=True).run(feeds)
        for name, w in zip(("z", "scan"), want, strict=True):
            assert got[name].shape == w.shape
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=backend)


def test_loop_body_with_a_run_time_if_reading_outer_values():
    """Odd iterations add x, even ones subtract w (an initializer of the outer graph): the If
    inside the body captures from the body and from the graph around the Loop."""
    w = numpy_helper.from_array(np.full((2, 3), 0.25, np.float32), "w")
    then = helper.make_graph(
        [helper.make_node("Add", ["y_in", "x"], ["plus"])],
        "then",
        [],
        [helper.make_tensor_value_info("plus", F, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["y_in", "w"], ["minus"])],
        "else",
        [],
        [helper.make_tensor_value_info("minus", F, None)],
    )
    body = loop_body()
    body.node[0].CopyFrom(
        helper.make_node("If", ["odd"], ["y_out"], then_branch=then, else_branch=other)
    )
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    body.initializer.extend([two, one])
    body.node.insert(0, helper.make_node("Mod", ["it", "two"], ["parity"]))
    body.node.insert(1, helper.make_node("Equal", ["parity", "one"], ["odd"]))
    model = loop_model(True, False, body)
    model.graph.initializer.append(w)
    feeds = loop_feeds(6, 1e6)
    want = run_onnxruntime(model, feeds)
    graph = from_model(model)
    (node,) = [n for n in graph.nodes if n.op == "Loop"]
    (inner,) = [n for n in node.attrs["body"].nodes if n.op == "If"]
    assert set(node.inputs[3:]) == {"x", "w", "limit"}
    assert {"y_in", "x", "w"} <= set(inner.inputs[1:])
    for backend in ("numpy", "onnxruntime"):
        got = td.compile(graph, backends=(backend,), strict=True).run(feeds)
        np.testing.assert_allclose(got["z"], want[0], rtol=1e-5, atol=1e-6, err_msg=backend)
        np.testing.assert_allclose(got["scan"], want[1], rtol=1e-5, atol=1e-6, err_msg=backend)


def test_loop_falls_back_from_webgpu_with_a_reason_and_is_not_saved_as_tdl(tmp_path):
    from tinydl.backends import get_backend

    model = loop_model(True, True)
    graph = from_model(model)
    with pytest.raises(UnsupportedOpError, match=r"node 'repeat' \(Loop\).*'body'"):
        td.compile(graph, backends=("numpy",)).save(tmp_path / "loop.tdl")
    assert not list(tmp_path.iterdir())
    if not get_backend("webgpu").available():
        pytest.skip("webgpu is unavailable")
    with pytest.warns(UserWarning, match="ops: Loop"):
        sess = td.compile(graph, backends=("webgpu", "numpy"))
    assert sess.placement.nodes["repeat"] == "numpy"
    assert sess.placement.fallbacks()["repeat"]["webgpu"]
    feeds = loop_feeds(7, 2.5)
    want = run_onnxruntime(model, feeds)
    got = sess.run(feeds)
    np.testing.assert_allclose(got["z"], want[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["scan"], want[1], rtol=1e-4, atol=1e-6)


def test_a_loop_body_that_does_not_fit_is_an_invalid_model():
    body = loop_body()
    del body.input[2]
    with pytest.raises(InvalidModelError, match=r"Loop 'repeat'.*body of 3 inputs"):
        from_model(loop_model(True, True, body))
    graph = from_model(loop_model(True, True))
    (node,) = [n for n in graph.nodes if n.op == "Loop"]
    node.attrs["body"].nodes[0].op = "NoSuchOp"
    with pytest.raises(InvalidModelError, match=r"'body'.*unknown op 'NoSuchOp'"):
        validate(graph)


def test_roi_align_10_keeps_its_pixel_convention_through_import_and_export():
    """RoiAlign-10 samples as opset 16's "output_half_pixel" names it; the graph exported for
    onnxruntime (at opset 16) says so."""
    node = helper.make_node(
        "RoiAlign", ["x", "rois", "idx"], ["y"], output_height=3, output_width=2
    )
    graph = helper.make_graph(
        [node],
        "roi",
        [helper.make_tensor_value_info("x", F, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(np.array([[0.5, 1, 6, 7.5], [2, 2, 3, 9]], np.float32), "rois"),
            numpy_helper.from_array(np.array([0, 0], np.int64), "idx"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=10)
    x = np.random.default_rng(1).standard_normal((1, 2, 8, 8)).astype(np.float32)
    (want,) = run_onnxruntime(model, {"x": x})
    imported = from_model(model)
    (roi,) = imported.nodes
    assert roi.attrs["coordinate_transformation_mode"] == "output_half_pixel"
    for backend in ("numpy", "onnxruntime"):
        (got,) = td.compile(imported, backends=(backend,), strict=True).run({"x": x}).values()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)


def unknown_op_model(op, source, inits=(), pre=(), **attrs):
    """x (4,) * op(source): `source` an initializer, a value computed before, or x itself."""
    nodes = [*pre, helper.make_node(op, [source], ["d"], name="lacking", **attrs)]
    nodes.append(helper.make_node("Mul", ["x", "d"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("y", F, None)],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_an_op_tinydl_lacks_is_folded_at_import_when_its_input_is_an_initializer():
    m = np.random.default_rng(4).standard_normal((4, 3, 3)).astype(np.float32)
    model = unknown_op_model("Det", "m", [numpy_helper.from_array(m, "m")])
    graph = from_model(model)
    assert [n.op for n in graph.nodes] == ["Mul"]
    np.testing.assert_allclose(graph.initializers["d"], np.linalg.det(m), rtol=1e-5)
    x = np.random.default_rng(5).standard_normal(4).astype(np.float32)
    (want,) = run_onnxruntime(model, {"x": x})
    (got,) = td.compile(graph, backends=("numpy",)).run({"x": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_an_op_tinydl_lacks_is_folded_on_values_shape_inference_computes():
    """Hardmax of Cast(Shape(x)): a constant once x's static shape is known."""
    pre = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=F),
        helper.make_node("Concat", ["sf", "w"], ["v"], axis=0),
    ]
    w = numpy_helper.from_array(np.array([5.5, -1.0, 2.0], np.float32), "w")
    model = unknown_op_model("Hardmax", "v", [w], pre)
    graph = from_model(model)
    assert "Hardmax" not in {n.op for n in graph.nodes}
    np.testing.assert_array_equal(graph.initializers["d"], [0, 1, 0, 0])
    x = np.random.default_rng(6).standard_normal(4).astype(np.float32)
    (want,) = run_onnxruntime(model, {"x": x})
    (got,) = td.compile(graph, backends=("numpy",)).run({"x": x}).values()
    np.testing.assert_array_equal(got, want)


def test_an_op_tinydl_lacks_on_a_run_time_input_is_refused_by_name():
    with pytest.raises(UnsupportedOpError, match=r"ops not supported by tinydl: Det$"):
        from_model(unknown_op_model("Det", "x"))


@pytest.mark.parametrize(
    "op, shape, why",
    [
        ("RandomUniformLike", (4,), "its results are random"),
        ("EyeLike", (300, 300), f"90000 elements, over the {FOLD_LIMIT} limit"),
    ],
)
def test_ops_tinydl_lacks_that_are_random_or_large_are_not_folded(op, shape, why):
    c = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    model = unknown_op_model(op, "c", [numpy_helper.from_array(c, "c")])
    with pytest.raises(UnsupportedOpError, match=rf"{op} \(not folded at import: .*{why}\)"):
        from_model(model)


def test_a_file_is_read_without_importing_the_onnx_package(tmp_path):
    """The importer parses with onnx's generated protobuf module alone (the package's import is
    slow) and decodes raw tensors itself; a tensor in typed fields goes through onnx's
    numpy_helper (importing the package), and the package, imported after, still works."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    models = []
    for typed in (False, True):
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        h = rng.standard_normal((4,)).astype(np.float16)
        shape = np.array([1, 4, 1, 1], np.int64)
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", ["hf", "shape"], ["hb"]),
            helper.make_node("Add", ["r", "hb"], ["y"]),
        ]
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(h, "h")]  # raw_data
        inits.append(
            helper.make_tensor("shape", TensorProto.INT64, [4], shape.tolist())  # int64_data
            if typed
            else numpy_helper.from_array(shape, "shape")
        )
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
            inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        (tmp_path / f"m{int(typed)}.onnx").write_bytes(model.SerializeToString())
        models.append(model)
    np.save(tmp_path / "x.npy", feeds["x"])
    code = (
        "import sys, numpy as np, tinydl as td\n"
        "x = {'x': np.load(sys.argv[1] + '/x.npy')}\n"
        "seen = []\n"
        "for k in (0, 1):\n"
        "    g = td.load(f'{sys.argv[1]}/m{k}.onnx')\n"
        "    seen.append('onnx' in sys.modules)\n"
        "    np.save(f'{sys.argv[1]}/y{k}.npy', td.compile(g, backends=('numpy',)).run(x)['y'])\n"
        "import onnx\n"
        "onnx.checker.check_model(onnx.load(sys.argv[1] + '/m0.onnx'))\n"
        "print(*seen)\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "TINYDL_MODEL_CACHE": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"], out.stdout  # (True: the typed tensor)
    for k, model in enumerate(models):
        (want,) = run_onnxruntime(model, feeds)
        np.testing.assert_allclose(np.load(tmp_path / f"y{k}.npy"), want, rtol=1e-5, atol=1e-5)


def test_text_that_is_not_utf8_is_refused_by_its_path():
    from tinydl.importers.onnx import from_bytes

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="QQQQ")]
    nodes.append(helper.make_node("Abs", ["r"], ["y"], name="ZZZZ"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.arange(300, dtype=np.float32), "unused")],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = data.SerializeToString()
    assert len(from_bytes(data).nodes) == 2  # as written: fine
    with pytest.raises(InvalidModelError, match=r"model\.graph\.node\[1\]\.name is not UTF-8"):
        from_bytes(data.replace(b"ZZZZ", b"\xff\xfeZZ"))


def _weights_model(rng, extra_raw: bool = False) -> bytes:
    """A Conv + Add model whose initializers come every way ONNX stores them: raw_data of
    float32 (at odd offsets too), float16, int64 and bool, typed float_data, an empty tensor."""
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),
        helper.make_tensor("b", TensorProto.FLOAT, [4], rng.standard_normal(4).tolist()),  # typed
        numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float16), "h"),
        numpy_helper.from_array(np.array([1, -2, 3], np.int64), "i"),
        numpy_helper.from_array(np.array([True, False, True]), "k"),
        numpy_helper.from_array(np.zeros((0,), np.float32), "e"),
        numpy_helper.from_array(rng.standard_normal(7).astype(np.float32), "odd_named_vector_x"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["c", "hf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits[1:] if extra_raw else inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if not extra_raw:
        return model.SerializeToString()
    # "w" with a second raw_data field (w * 2) after its first, written at the wire level: a
    # parse keeps the last one
    from tinydl.importers.onnx import _varint_bytes

    def field(number: int, payload: bytes) -> bytes:
        return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload

    tensor = inits[0].SerializeToString() + field(9, (w * 2).tobytes())
    body = graph.SerializeToString() + field(5, tensor)
    model.ClearField("graph")
    return model.SerializeToString() + field(7, body)


@pytest.mark.parametrize("extra_raw", [False, True])
def test_initializers_read_in_place_match_a_whole_parse(rng, monkeypatch, extra_raw):
    """A model is parsed without its initializers' raw_data, which is then read in place from
    the file's bytes: every initializer (raw float32 at odd offsets, float16, int64, bool,
    typed fields, empty) equals what parsing the whole file gives, bit for bit and dtype for
    dtype; where aligned, they are views of the file's bytes (no copy)."""
    pytest.importorskip("onnx")
    from tinydl.importers import onnx as importer

    data = _weights_model(rng, extra_raw)
    split = importer._without_raw_data(data)
    assert split is not None and len(split[0]) < len(data)
    # every raw_data initializer (the empty one's too) but one with two raw_data fields
    assert sum(s is not None for s in split[1]) == (5 if extra_raw else 6)
    fast = importer.from_bytes(data)
    monkeypatch.setattr(importer, "_without_raw_data", lambda data: None)
    whole = importer.from_bytes(data)
    assert fast.initializers.keys() == whole.initializers.keys()
    for name, value in whole.initializers.items():
        got = fast.initializers[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        np.testing.assert_array_equal(got, value, err_msg=name)
    # read-only and aligned (NumPy rounds unaligned data differently: those are copied), the
    # aligned raw ones views of the file's bytes
    file = np.frombuffer(data, np.uint8)
    for name, value in fast.initializers.items():
        assert value.flags.aligned, name
        assert name == "b" or not value.flags.writeable, name  # ("b": typed float_data)
    assert any(np.shares_memory(v, file) for v in fast.initializers.values() if v.size)
    x = rng.standard_normal((1, 3, 6, 5)).astype(np.float32)
    np.testing.assert_allclose(
        td.compile(fast).run({"x": x})["y"], td.compile(whole).run({"x": x})["y"], rtol=0, atol=0
    )


def test_a_model_cut_short_is_refused_either_way():
    """Bytes that end inside a field are not split (the parse of the whole then refuses them,
    naming the file), and a model without initializers is parsed whole."""
    pytest.importorskip("onnx")
    from tinydl.errors import InvalidModelError
    from tinydl.importers import onnx as importer

    data = _weights_model(np.random.default_rng(3))
    assert importer._without_raw_data(data[:-7]) is None
    with pytest.raises(InvalidModelError, match="cut.onnx"):
        importer.from_bytes(data[: len(data) // 2], where="cut.onnx")
    assert importer._without_raw_data(b"") is None


def _opset17(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _tensor_split(x: str, bounds: str, out: str, trips: str = "two") -> list:
    """torch.tensor_split as PyTorch exports it: an empty sequence, a Loop inserting the slice
    [bounds[i], bounds[i + 1]) of `x` along axis 1 at each iteration, then the last slice."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", [bounds, "i"], ["lo"]),
            helper.make_node("Add", ["i", "one"], ["i1"]),
            helper.make_node("Gather", [bounds, "i1"], ["hi"]),
            helper.make_node("Slice", [x, "lo", "hi", "axis1"], ["part"]),
            helper.make_node("SequenceInsert", ["s_in", "part"], ["s_out"]),
            helper.make_node("Identity", ["true"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_sequence_value_info("s_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_sequence_value_info("s_out", TensorProto.FLOAT, None),
        ],
    )
    return [
        helper.make_node("SequenceEmpty", [], [f"{out}_empty"], dtype=TensorProto.FLOAT),
        helper.make_node("Loop", [trips, "true", f"{out}_empty"], [f"{out}_loop"], body=body),
        helper.make_node("Gather", [bounds, "two"], [f"{out}_last"]),
        helper.make_node("Slice", [x, f"{out}_last", "big", "axis1"], [f"{out}_tail"]),
        helper.make_node("SequenceInsert", [f"{out}_loop", f"{out}_tail"], [out]),
    ]


SEQUENCE_CONSTS = [
    numpy_helper.from_array(np.array(1, np.int64), "one"),
    numpy_helper.from_array(np.array(2, np.int64), "two"),
    numpy_helper.from_array(np.array(-1, np.int64), "minus1"),
    numpy_helper.from_array(np.array(0, np.int64), "zero"),
    numpy_helper.from_array(np.array(True), "true"),
    numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    numpy_helper.from_array(np.array([1 << 30], np.int64), "big"),
    numpy_helper.from_array(np.array([[0], [2], [5]], np.int64), "bounds"),
    numpy_helper.from_array(np.array(3, np.int64), "three"),
    numpy_helper.from_array(np.array([4, 3], np.int64), "sizes"),
]


def _sequence_models():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 3])
    outs = lambda *names: [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]  # noqa: E731
    split = _opset17(
        [
            *_tensor_split("x", "bounds", "s"),
            helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
            helper.make_node("SequenceAt", ["s", "minus1"], ["last"]),
            helper.make_node("SequenceLength", ["s"], ["count"]),
            helper.make_node("ConcatFromSequence", ["s"], ["whole"], axis=1),
            helper.make_node("SequenceConstruct", ["first", "first"], ["pair"]),
            helper.make_node("ConcatFromSequence", ["pair"], ["stacked"], axis=0, new_axis=1),
        ],
        [x],
        [*outs("first", "last", "whole", "stacked"),
         helper.make_tensor_value_info("count", TensorProto.INT64, None)],
        SEQUENCE_CONSTS,
    )  # fmt: skip
    others = _opset17(
        [
            helper.make_node("ReduceSum", ["x", "axis1"], ["tail0"], keepdims=0),
            helper.make_node("SplitToSequence", ["x", "three"], ["chunks"], axis=1),
            helper.make_node("SequenceErase", ["chunks", "one"], ["kept"]),
            helper.make_node("Identity", ["kept"], ["kept2"]),
            helper.make_node("SequenceAt", ["kept2", "one"], ["tail"]),
            helper.make_node("SplitToSequence", ["x"], ["planes"], axis=2, keepdims=0),
            helper.make_node("SequenceInsert", ["planes", "tail0", "zero"], ["planes2"]),
            helper.make_node("SequenceAt", ["planes2", "one"], ["plane0"]),
            helper.make_node("SequenceErase", ["planes2", "zero"], ["planes3"]),
            helper.make_node("ConcatFromSequence", ["planes3"], ["back"], axis=-1, new_axis=1),
            helper.make_node("SplitToSequence", ["x", "sizes"], ["halves"], axis=1),
            helper.make_node("SequenceAt", ["halves", "zero"], ["front"]),
        ],
        [x],
        outs("tail", "plane0", "back", "front"),
        SEQUENCE_CONSTS,
    )
    # a Loop carrying a sequence with a scan output and a tensor carried too
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["acc_in", "fi"], ["scaled"]),
            helper.make_node("Add", ["acc_in", "scaled"], ["acc_out"]),
            helper.make_node("SequenceInsert", ["s_in", "scaled", "zero"], ["s_out"]),
            helper.make_node("ReduceSum", ["scaled"], ["total"], keepdims=0),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 7, 3]),
            helper.make_tensor_sequence_value_info("s_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 7, 3]),
            helper.make_tensor_sequence_value_info("s_out", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        ],
    )
    loop = _opset17(
        [
            helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT),
            helper.make_node("Loop", ["three", "true", "x", "s0"], ["acc", "s", "totals"],
                             body=body),
            helper.make_node("SequenceAt", ["s", "zero"], ["newest"]),
            helper.make_node("ConcatFromSequence", ["s"], ["all"], axis=0),
        ],
        [x],
        outs("acc", "newest", "all", "totals"),
        SEQUENCE_CONSTS,
    )  # fmt: skip
    return {"tensor_split": split, "split_erase_insert": others, "loop_with_scan": loop}


@pytest.mark.parametrize("name", ["tensor_split", "split_erase_insert", "loop_with_scan"])
def test_sequences_are_followed_at_import_as_onnxruntime_runs_them(name, rng):
    """ONNX sequences (torch.tensor_split's export: a Loop of constant trip count inserting
    slices; SplitToSequence, SequenceAt/Insert/Erase/Length/Construct, ConcatFromSequence,
    Identity of a sequence) are followed at import as lists of tensors: no sequence op or value
    is left, the Loop carrying one is unrolled (its scan output stacked), and the outputs are
    onnxruntime's."""
    model = _sequence_models()[name]
    graph = from_model(model)
    assert not {n.op for n in graph.nodes} & {"Loop", "SequenceAt", "SequenceInsert"}
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    want = run_onnxruntime(model, {"x": x})
    got = td.compile(graph, backends=("numpy",)).run({"x": x})
    for value, w in zip(graph.outputs, want, strict=True):
        np.testing.assert_allclose(got[value.name], w, rtol=1e-6, atol=1e-6, err_msg=value.name)


def test_sequences_tinydl_cannot_follow_are_refused_saying_why():
    """A sequence as a graph output, a Loop carrying one whose trip count is computed at run
    time, and a position computed at run time are refused with what tinydl needs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 3])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    out_seq = _opset17(
        [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1)],
        [x],
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)],
        SEQUENCE_CONSTS,
    )
    with pytest.raises(UnsupportedOpError, match=r"is an ONNX sequence_type, not a tensor"):
        from_model(out_seq)
    runtime_trips = _opset17(
        [
            *_tensor_split("x", "bounds", "s", trips="n"),
            helper.make_node("SequenceAt", ["s", "zero"], ["y"]),
        ],
        [x, n],
        [y],
        SEQUENCE_CONSTS,
    )  # fmt: skip
    with pytest.raises(UnsupportedOpError, match=r"needs a constant trip count of at most 256, "
                       r"got computed at run time"):  # fmt: skip
        from_model(runtime_trips)
    runtime_at = _opset17(
        [
            helper.make_node("SplitToSequence", ["x"], ["s"], axis=1),
            helper.make_node("SequenceAt", ["s", "n"], ["y"]),
        ],
        [x, n],
        [y],
        SEQUENCE_CONSTS,
    )  # fmt: skip
    with pytest.raises(UnsupportedOpError, match=r"position 'n' is computed at run time"):
        from_model(runtime_at)
