"""ir.Graph -> ONNX (tinydl.exporters.onnx, `tinydl convert -o X.onnx`): models imported from
TFLite and ONNX write out and run in onnxruntime with tinydl's cpu results."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.models import embedding_graph, embedding_reference, espcn_onnx, mediapipe_model

import tinydl as td
from tinydl.errors import UnsupportedOpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tinydl.exporters.onnx import save, to_onnx  # noqa: E402


def run_both(graph, rng):
    feeds = {}
    for v in graph.inputs:
        shape = tuple(d if isinstance(d, int) else 8 for d in v.shape)
        feeds[v.name] = rng.random(shape, dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run(feeds)
    sess = ort.InferenceSession(
        to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = sess.run(None, feeds)
    return list(want.values()), got


def test_espcn_round_trip(tmp_path, rng):
    espcn_onnx(tmp_path / "e.onnx", 3, rng)
    want, got = run_both(td.load(tmp_path / "e.onnx"), rng)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_ppocr_rec_round_trip(rapidocr_models, rng):
    graph = td.load(rapidocr_models / "ch_PP-OCRv4_rec_infer.onnx")
    graph.inputs[0].shape = (1, 3, 48, 160)
    want, got = run_both(graph, rng)
    for w, g in zip(want, got, strict=True):
        assert np.abs(g - w).max() <= 1e-4 * np.abs(w).max()


def test_blazepose_landmark_from_tflite(rng):
    pytest.importorskip("tflite")
    graph = td.load(mediapipe_model("pose_landmark/pose_landmark_full.tflite"))
    # Its Resize nodes carry `axes` (opset 18) but are written with full-rank sizes instead.
    assert to_onnx(graph).opset_import[0].version == 13
    want, got = run_both(graph, rng)
    assert len(want) == len(got) == 5
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape
        # The segmentation logits are sensitive (see test_tflite.py); the rest agree to 1e-5.
        assert np.abs(g - w).max() <= 5e-4 * max(np.abs(w).max(), 1e-6)


@pytest.mark.parametrize(("op", "opset"), [("Elu", 13), ("Mish", 18), ("Gelu", 20)])
def test_ops_newer_than_opset_13_raise_it(op, opset, rng):
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    graph = validate(
        Graph([Value("x", "float32", (2, 5))], [Value("y")], [Node(op, ["x"], ["y"], name="n")])
    )
    assert to_onnx(graph).opset_import[0].version == opset
    (want,), (got,) = run_both(graph, rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "shape", "opset"),
    [("bilinear", (1, 2, 5, 6), 16), ("linear", (1, 2, 5, 6), 16), ("cubic", (1, 2, 5, 6), 16),
     ("linear", (1, 2, 3, 4, 5), 20), ("nearest", (1, 2, 3, 4, 5), 20)],
)  # fmt: skip
def test_grid_sample_exports_at_the_opset_it_needs(mode, shape, opset, rng):
    """GridSample at opset 16 (2-D, its modes spelled bilinear/bicubic) or 20 (any rank, as
    linear/cubic), whichever spelling the model used: onnxruntime runs it as the reference
    does (RAFT on the cpu backend failed: its partitions were written at opset 13). (Cubic
    with a border padding, where onnxruntime and ONNX's reference differ, is not compared.)"""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    r = len(shape) - 2
    grid = (2.4 * rng.random((1, *(4,) * r, r)) - 1.2).astype(np.float32)
    graph = validate(Graph(
        [Value("x", "float32", shape)], [Value("y")],
        [Node("GridSample", ["x", "grid"], ["y"],
              {"mode": mode, "padding_mode": "zeros" if mode == "cubic" else "border"},
              name="gs")],
        {"grid": grid},
    ))  # fmt: skip
    assert to_onnx(graph).opset_import[0].version == opset
    (want,), (got,) = run_both(graph, rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_ops_are_refused(tmp_path, rng):
    espcn_onnx(tmp_path / "e.onnx", 3, rng)
    optimized = td.compile(td.load(tmp_path / "e.onnx"), backends=("numpy",)).graph
    with pytest.raises(UnsupportedOpError, match="tinydl.FusedConv"):
        to_onnx(optimized)
    assert not list(tmp_path.glob("*.partial"))


def test_save_and_cli(tmp_path, rng):
    from tinydl.cli import main

    espcn_onnx(tmp_path / "e.onnx", 2, rng)
    graph = td.load(tmp_path / "e.onnx")
    out = save(graph, tmp_path / "copy.onnx")
    onnx.checker.check_model(str(out))
    assert main(["convert", str(tmp_path / "e.onnx"), "-o", str(tmp_path / "cli.onnx")]) == 0
    again = td.load(tmp_path / "cli.onnx")
    assert [n.op for n in again.nodes] == [n.op for n in graph.nodes]


def test_scalar_initializers_stay_scalars(rng):
    """A 0-d index stays 0-d: written as a 1-element vector, Gather by it would keep the axis and
    the Range after it would get a vector limit (onnxruntime refuses the model)."""
    graph = embedding_graph()
    model = to_onnx(graph)
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    assert dims["one"] == dims["zero"] == []
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = rng.integers(-30, 30, (2, 9)).astype(np.int64)
    (y,) = sess.run(None, {"ids": ids})
    np.testing.assert_allclose(y, embedding_reference(graph, ids), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("op", "attrs", "inits"),
    [
        ("ReduceMax", {"keepdims": 0}, {"axes": np.array([1], np.int64)}),
        ("ReduceL2", {"noop_with_empty_axes": 1}, {}),
        ("ReduceSum", {}, {"axes": np.array([-1], np.int64)}),
        ("ArgMin", {"axis": 1, "select_last_index": 1}, {}),
        ("TopK", {"largest": 0}, {"k": np.array([2], np.int64)}),
        ("LogSoftmax", {"axis": 1}, {}),
        ("LayerNormalization", {"axis": 1}, {"s": np.full((3, 4), 0.5, np.float32)}),
        ("InstanceNormalization", {}, {"s": np.ones(3, np.float32), "b": np.zeros(3, np.float32)}),
        (
            "GroupNormalization",
            {"num_groups": 1},
            {"s": np.ones(3, np.float32), "b": np.ones(3, np.float32)},
        ),
    ],
)
def test_reductions_and_normalizations_export_at_the_opset_they_need(op, attrs, inits, rng):
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    outputs = ["y", "i"] if op == "TopK" else ["y"]
    node = Node(op, ["x", *inits], outputs, attrs, name="n")
    graph = validate(
        Graph([Value("x", "float32", (2, 3, 4))], [Value(o) for o in outputs], [node], inits)
    )
    want, got = run_both(graph, rng)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_run_time_if_writes_its_branches_as_onnx_subgraphs(rng):
    """Branch inputs bound to outer values of other names, and a tensor attribute
    (ConstantOfShape's value) inside a branch, come out as onnxruntime runs them."""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    f32 = ("float32", (2, 3))
    then = Graph([Value("a", *f32)], [Value("t", *f32)], [Node("Mul", ["a", "a"], ["t"])])
    fill = {"value": np.array([2.5], np.float32)}
    other = Graph(
        [Value("b", *f32)],
        [Value("e", *f32)],
        [
            Node("Shape", ["b"], ["s"]),
            Node("ConstantOfShape", ["s"], ["c"], fill),
            Node("Sub", ["b", "c"], ["e"]),
        ],
    )
    graph = Graph(
        [Value("x", *f32)],
        [Value("y", *f32)],
        [
            Node("ReduceSum", ["x"], ["total"], {"keepdims": 0}),
            Node("Greater", ["total", "zero"], ["cond"]),
            Node("If", ["cond", "x"], ["y"], {"then_branch": then, "else_branch": other}),
        ],
        {"zero": np.array(0, np.float32)},
    )
    validate(graph)
    sess = ort.InferenceSession(
        to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for sign in (1, -1):
        x = sign * (rng.random((2, 3), dtype=np.float32) + 0.1)
        (want,) = td.compile(graph, backends=("numpy",)).run({"x": x}).values()
        np.testing.assert_allclose(want, x * x if sign > 0 else x - 2.5, rtol=1e-6)
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-6)
