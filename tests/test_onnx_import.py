"""ONNX import of control flow: an If whose condition is a constant at import becomes the nodes of
the branch it takes (values renamed apart, outer values read directly, nested Ifs too); an If
decided at run time, and Loop and Scan, are refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.opcheck import run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import tinydl as td
from tinydl.errors import UnsupportedOpError
from tinydl.importers.onnx import from_model

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


def test_if_decided_at_run_time_is_refused_by_name():
    model = if_model(
        [],
        inputs=[
            helper.make_tensor_value_info("x", F, [2, 3]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
    )
    with pytest.raises(UnsupportedOpError, match="If 'choose': condition is computed at run time"):
        from_model(model)


@pytest.mark.parametrize("op", ["Loop", "Scan"])
def test_loop_and_scan_are_refused_by_name(op):
    body = helper.make_graph([], "body", [], [])
    node = helper.make_node(op, ["n"], ["y"], name="repeat", body=body)
    graph = helper.make_graph(
        [node],
        "loop",
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match=rf"{op} 'repeat'.*IR holds no graphs"):
        from_model(model)


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
