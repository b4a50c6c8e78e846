"""The onnxruntime backend (the fast CPU path): partitions exported as ONNX and run by
onnxruntime's CPU execution provider, checked against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import tinydl as td
from tinydl.backends import get_backend

pytestmark = pytest.mark.skipif(
    not get_backend("onnxruntime").available(),
    reason=get_backend("onnxruntime").unavailable_reason() or "onnxruntime is available",
)


def test_espcn_runs_whole_on_onnxruntime_and_matches_the_reference():
    from tinydl.models import load_espcn

    graph = load_espcn(3)
    sess = td.compile(graph, backends=("onnxruntime",), strict=True)
    assert [p.backend for p in sess.partitions] == ["onnxruntime"]
    # tinydl's fused ops have no ONNX spelling: the optimizer leaves Conv + Tanh apart
    assert "tinydl.FusedConv" not in {n.op for n in sess.graph.nodes}
    x = np.random.default_rng(0).random((2, 1, 17, 23), dtype=np.float32)
    (got,) = sess.run({"y": x}).values()
    (want,) = td.compile(graph, backends=("numpy",)).run({"y": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_ppocr_det_on_onnxruntime(ppocr_det):
    """PP-OCRv4 det imported, optimized (BN and affine folding), written back as ONNX and run by
    onnxruntime: the probability map matches onnxruntime on the original file."""
    path, x, want = ppocr_det
    sess = td.compile(td.load(path), backends=("onnxruntime",), strict=True)
    (got,) = sess.run({"x": x}).values()
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())


def test_a_partition_past_protobufs_2gb_runs_from_a_file_with_its_weights(monkeypatch, rng):
    """A partition whose ONNX protobuf cannot hold (past 2 GB: MViTv2's folded attention
    indices) is written with its tensors in a file beside it and loaded from there; here the
    serialization is made to fail as it does past 2 GB, on ESPCN."""
    import os

    import onnx
    from google.protobuf.message import EncodeError

    from tinydl.models import load_espcn

    serialize = onnx.ModelProto.SerializeToString

    def too_large(self, *args, **kwargs):
        # (as protobuf past 2 GB, while the weights are inside)
        if any(len(t.raw_data) > 1024 for t in self.graph.initializer):
            raise EncodeError("Failed to serialize proto")
        return serialize(self, *args, **kwargs)

    monkeypatch.setattr(onnx.ModelProto, "SerializeToString", too_large)
    graph = load_espcn(3)
    sess = td.compile(graph, backends=("onnxruntime",), strict=True)
    (kernel,) = [p.kernel for p in sess.partitions]
    files = sorted(os.listdir(kernel._folder.name))
    assert files == ["partition.data", "partition.onnx"], files
    x = rng.random((1, 1, 19, 21), dtype=np.float32)
    (got,) = sess.run({"y": x}).values()
    (want,) = td.compile(graph, backends=("numpy",)).run({"y": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_failure_inside_onnxruntime_is_an_op_error():
    from helpers.models import reshape_mismatch_graph

    graph = reshape_mismatch_graph()
    sess = td.compile(graph, backends=("onnxruntime",), strict=True)
    with pytest.raises(td.OpError, match=r"node 'reshape' \(Reshape\) failed in onnxruntime"):
        sess.run({"x": np.ones((3, 4), np.float32)})


def test_lstm_and_nms_export_to_onnxruntime_and_match_the_reference():
    """LSTM -> scores -> NonMaxSuppression (a data-dependent output length) written out as ONNX
    and run whole by onnxruntime; a batch-first LSTM, which its CPU provider lacks, stays on
    numpy."""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    rng = np.random.default_rng(5)

    def model(layout):
        seq = (1, 20, 4) if layout else (20, 1, 4)
        return validate(
            Graph(
                inputs=[Value("x", "float32", seq), Value("boxes", "float32", (1, 20, 4))],
                outputs=[Value("scores", "float32", None), Value("picked", "int64", None)],
                nodes=[
                    Node(
                        "LSTM",
                        ["x", "w", "r", "b"],
                        ["y", "y_h"],
                        {"hidden_size": 5, "direction": "bidirectional", "layout": layout},
                        name="lstm",
                    ),
                    Node("Reshape", ["y", "shape"], ["flat"], name="reshape"),
                    Node("Transpose", ["flat"], ["t"], {"perm": [0, 2, 1]}, name="transpose"),
                    Node("Sigmoid", ["t"], ["scores"], name="sigmoid"),
                    Node(
                        "NonMaxSuppression",
                        ["boxes", "scores", "limit", "iou", "threshold"],
                        ["picked"],
                        name="nms",
                    ),
                ],
                initializers={
                    "w": rng.standard_normal((2, 20, 4)).astype(np.float32),
                    "r": rng.standard_normal((2, 20, 5)).astype(np.float32),
                    "b": rng.standard_normal((2, 40)).astype(np.float32),
                    "shape": np.array([1, 20, 10], np.int64),
                    "limit": np.array([4], np.int64),
                    "iou": np.array([0.3], np.float32),
                    "threshold": np.array([0.2], np.float32),
                },
            )
        )

    graph = model(layout=0)
    sess = td.compile(graph, backends=("onnxruntime",), strict=True)
    assert [p.backend for p in sess.partitions] == ["onnxruntime"]
    feeds = {
        "x": rng.standard_normal((20, 1, 4)).astype(np.float32),
        "boxes": rng.uniform(0, 10, (1, 20, 4)).astype(np.float32),
    }
    got = sess.run(feeds)
    want = td.compile(graph, backends=("numpy",)).run(feeds)
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-6)
    assert got["picked"].shape[0] > 10  # several boxes of several classes survive
    np.testing.assert_array_equal(got["picked"], want["picked"])
    with pytest.warns(UserWarning, match="LSTM"):
        batch_first = td.compile(model(layout=1), backends=("onnxruntime", "numpy"))
    assert batch_first.placement["lstm"] == "numpy"
    assert "layout=1" in batch_first.placement.refusals["lstm"]["onnxruntime"]


def test_threads_option_and_fallback_of_tinydl_ops():
    """backend_options set onnxruntime's threads; a graph holding tinydl's own fused op (as
    saved after the optimizer) runs that node on the NumPy backend, the rest on onnxruntime."""
    from tinydl.models import load_espcn

    fused = td.compile(load_espcn(3), backends=("numpy",)).graph
    assert "tinydl.FusedConv" in {n.op for n in fused.nodes}
    with pytest.warns(UserWarning, match="fall back from 'onnxruntime'"):
        sess = td.compile(
            fused,
            backends=("onnxruntime", "numpy"),
            optimize="none",
            backend_options={"onnxruntime": {"threads": 1}},
        )
    placed = {p.backend for p in sess.partitions}
    assert placed == {"onnxruntime", "numpy"}
    x = np.random.default_rng(1).random((1, 1, 9, 11), dtype=np.float32)
    (got,) = sess.run({"y": x}).values()
    (want,) = td.compile(fused, backends=("numpy",), optimize="none").run({"y": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cpu_means_the_fastest_cpu_path():
    """backends=("cpu",) (the default) is onnxruntime with the NumPy reference after it, and
    placement says which ran; "numpy" names the reference alone; a node onnxruntime cannot take
    (tinydl's own fused op) runs on numpy without a fallback warning, since both are the cpu."""
    import warnings

    from tinydl.backends import cpu_path
    from tinydl.models import load_espcn

    assert cpu_path() == ("onnxruntime", "numpy")
    graph = load_espcn(3)
    sess = td.compile(graph)
    assert sess.backends == ["onnxruntime", "numpy"]
    assert set(sess.placement.counts()) == {"onnxruntime"}
    ref = td.compile(graph, backends=("numpy",))
    assert set(ref.placement.counts()) == {"numpy"}
    assert "tinydl.FusedConv" in {n.op for n in ref.graph.nodes}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mixed = td.compile(ref.graph, backends=("cpu",), optimize="none")
    assert set(mixed.placement.counts()) == {"onnxruntime", "numpy"}
    x = np.random.default_rng(2).random((1, 1, 8, 9), dtype=np.float32)
    (want,) = ref.run({"y": x}).values()
    for s in (sess, mixed):
        (got,) = s.run({"y": x}).values()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
        ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    ],
)
def test_ppocr_rec_and_cls_on_the_default_cpu_path(rapidocr_models, name, shape):
    """The recognizer's output has no rank tinydl's inference knows (its file declares one):
    the default cpu path still runs the whole model on onnxruntime and matches it."""
    import onnxruntime as ort

    path = rapidocr_models / name
    graph = td.load(path)
    sess = td.compile(graph)
    assert set(sess.placement.counts()) == {"onnxruntime"}
    x = np.random.default_rng(4).random(shape, dtype=np.float32)
    feed = {graph.inputs[0].name: x}
    (got,) = sess.run(feed).values()
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
