"""What every GPU backend must do alike, parametrized over them (helpers/gpu.py): PP-OCRv4 det vs
onnxruntime in fp32 and fp16, a plan per input shape, per-shape tables that match the cpu
backend, and attention fused into one kernel. Backend-specific behaviour (conv fusion, device
tensors, submissions, CUDA graphs, adapters) is tested in test_webgpu.py and test_cuda.py.

A backend that is not available skips with its own reason: webgpu runs on Mesa's lavapipe in CI,
cuda needs an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.gpu import GPU_BACKENDS, gpu_backend, require_f16
from helpers.models import (
    ATTENTION_VARIANTS,
    attention_feeds,
    attention_graph,
    channel_norm_graph,
    crnn_onnx,
    embedding_graph,
    embedding_reference,
    espcn,
    grid_sample_graph,
    kernel_of,
    mediapipe_model,
    only_plan,
    rel_err,
    shape_arithmetic_graph,
    shape_tables_graph,
)
from helpers.opcheck import wrap_fp16

import tinydl as td
from tinydl.backends import planned
from tinydl.backends.fusion import ATTENTION
from tinydl.errors import UnsupportedOpError
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate


@pytest.fixture(params=GPU_BACKENDS)
def backend(request) -> str:
    """The name of a GPU backend that is available here (the test skips otherwise)."""
    gpu_backend(request.param)
    return request.param


# -- real models ---------------------------------------------------------------------------------


def test_ppocrv4_det_matches_onnxruntime(backend, ppocr_det):
    """PP-OCRv4 det wholly on the backend (no fallback) within 1e-4 of onnxruntime."""
    path, x, ref = ppocr_det
    sess = td.compile(td.load(path), backends=(backend,), strict=True)
    (prob,) = sess.run({"x": x}).values()
    assert prob.shape == ref.shape == (1, 1, 192, 384)
    assert rel_err(prob, ref) <= 1e-4
    assert set(sess.placement.nodes.values()) == {backend}


def test_ppocrv4_det_fp16_against_fp32(backend, ppocr_det):
    """fp16 storage (fp32 accumulation): the text mask is what fp32 finds."""
    require_f16(backend)
    path, x, ref = ppocr_det
    sess = td.compile(td.load(path), backends=(backend,), precision="fp16", strict=True)
    (prob,) = sess.run({"x": x}).values()
    assert np.abs(prob - ref).max() < 0.15
    assert ((prob > 0.3) == (ref > 0.3)).mean() > 0.995


def test_convolution_of_a_constant_input(backend, rng):
    """A Conv whose data input is a constant (EdgeNeXt's positional encoding, which the
    importer folds to an initializer) feeding the model's own convolutions: the constant is
    uploaded as it is, against NumPy (webgpu failed making its plan, the constant having no
    layout to choose)."""
    consts = {
        "pe": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
        "w1": rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
        "b1": rng.standard_normal(4).astype(np.float32),
        "w2": rng.standard_normal((6, 4, 3, 3)).astype(np.float32),
    }
    pads = {"pads": [1, 1, 1, 1]}
    graph = validate(Graph(
        [Value("x", "float32", (1, 4, 8, 8))],
        [Value("y", "float32", None)],
        [Node("Conv", ["pe", "w1", "b1"], ["p"], pads, name="pos"),
         Node("Add", ["x", "p"], ["s"], name="add"),
         Node("Conv", ["s", "w2"], ["y"], pads, name="conv")],
        consts,
    ))  # fmt: skip
    x = {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    got = td.compile(graph, backends=(backend,), strict=True).run(x)["y"]
    assert rel_err(got, want) <= 1e-5


def test_crnn_with_its_bidirectional_lstm_runs_whole_and_matches_onnxruntime(
    backend, tmp_path, rng
):
    """Conv -> pooling -> reshape -> bidirectional LSTM -> MatMul -> Softmax: every node on the
    backend (the LSTM a dispatch per time step), within 1e-4 of onnxruntime; fp16 storage
    keeps the same most likely class almost everywhere."""
    import onnxruntime as ort

    path = tmp_path / "crnn.onnx"
    crnn_onnx(path, rng)
    x = rng.standard_normal((2, 1, 32, 40)).astype(np.float32)
    (ref,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    sess = td.compile(td.load(path), backends=(backend,), strict=True)
    assert set(sess.placement.nodes.values()) == {backend}
    (out,) = sess.run({"x": x}).values()
    assert rel_err(out, ref) <= 1e-4
    require_f16(backend)
    half = td.compile(td.load(path), backends=(backend,), precision="fp16", strict=True)
    (out16,) = half.run({"x": x}).values()
    assert np.abs(out16 - ref).max() < 2e-2
    assert (out16.argmax(-1) == ref.argmax(-1)).mean() > 0.9


@pytest.mark.parametrize(
    "rel_path",
    [
        "face_landmark/face_landmark_with_attention.tflite",
        "selfie_segmentation/selfie_segmentation.tflite",
    ],
)
def test_mediapipe_models_with_custom_ops_run_whole(backend, rel_path):
    """MediaPipe's custom ops (the attention mesh's crop matrices and bilinear crops, the
    segmenter's transposed convolution with bias) on the backend: no node falls back, and the
    outputs match the NumPy reference within 1e-4 on a photo."""
    skimage_data = pytest.importorskip("skimage.data", reason="pip install 'tinydl[test]'")
    from PIL import Image

    path = mediapipe_model(rel_path)
    name = td.load(path).inputs[0].name
    _, height, width, _ = td.load(path).inputs[0].shape
    photo = Image.fromarray(skimage_data.astronaut()).resize((width, height), Image.BILINEAR)
    x = (np.asarray(photo, np.float32) / 255)[None]
    ref = td.compile(td.load(path), backends=("numpy",)).run({name: x})
    sess = td.compile(td.load(path), backends=(backend,), strict=True)
    assert set(sess.placement.nodes.values()) == {backend}
    got = sess.run({name: x})
    for key, want in ref.items():
        assert rel_err(got[key], want) <= 1e-4, key


def test_bert_like_embeddings_run_whole_and_match_numpy(backend, rng):
    """Token ids fed as int64 -> the word-embedding Gather reads them at run time; the position
    ids come from Range over the shape, so that Gather is a table: no node leaves the backend,
    for two sequence lengths, negative ids counting from the end of the vocabulary."""
    graph = embedding_graph()
    sess = td.compile(graph, backends=(backend,), strict=True)
    assert set(sess.placement.nodes.values()) == {backend}
    for seq in (7, 16):
        ids = rng.integers(-30, 30, (2, seq)).astype(np.int64)
        (y,) = sess.run({"ids": ids}).values()
        assert y.shape == (2, seq, 5)
        np.testing.assert_allclose(y, embedding_reference(graph, ids), rtol=1e-5, atol=1e-5)


# -- symbolic shapes -----------------------------------------------------------------------------


def test_symbolic_shapes_make_a_plan_per_shape(backend, tmp_path, rng):
    sess = td.compile(espcn(tmp_path, rng, scale=2), backends=(backend,), strict=True)
    for h, w in ((8, 12), (10, 7), (8, 12)):
        y = rng.random((1, 1, h, w), dtype=np.float32)
        assert sess.run({"y": y})["out"].shape == (1, 1, 2 * h, 2 * w)
    assert len(kernel_of(sess, backend).plans) == 2


def test_each_input_shape_gets_its_own_tables(backend, rng):
    """Resize taps and gather offsets depend on the input shape: a session fed several shapes
    (a plan each, one shape again) matches the cpu backend at every one, in any order."""
    graph = shape_tables_graph()
    cpu = td.compile(graph, backends=("numpy",))
    dev = td.compile(graph, backends=(backend,), strict=True)
    for h, w in ((5, 7), (9, 4), (6, 6), (5, 7)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(
            dev.run({"x": x})["y"], cpu.run({"x": x})["y"], rtol=1e-5, atol=1e-5
        )


def test_plans_stay_within_their_lru(backend, rng):
    """300 distinct input sizes through one session with max_plans=4: at most 4 plans live,
    and the uploaded per-shape tables of the evicted ones are freed (only the current plans'
    constants remain); a size seen again is planned again and still right."""
    graph = validate(
        Graph(
            [Value("x", "float32", (1, 3, "h", "w"))],
            [Value("y", "float32", None)],
            [Node("Pad", ["x", "pads"], ["y"], {"mode": "reflect"}, name="pad")],
            {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)},
        )
    )
    cpu = td.compile(graph, backends=("numpy",))
    dev = td.compile(
        graph, backends=(backend,), strict=True, backend_options={backend: {"max_plans": 4}}
    )
    kernel = kernel_of(dev, backend)
    sizes = [(2 + k // 20, 2 + k % 20) for k in range(300)]
    for h, w in sizes:
        dev.run({"x": np.ones((1, 3, h, w), np.float32)})
        assert len(kernel.plans) <= 4
    per_plan = len(kernel._constants)  # the tables of the last 4 plans (no weights here)
    assert per_plan <= 4 * 2
    users = set().union(*kernel._const_users.values())
    assert users <= set(kernel.plans)
    for h, w in sizes[:3]:
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(
            dev.run({"x": x})["y"], cpu.run({"x": x})["y"], rtol=1e-5, atol=1e-5
        )
    assert len(kernel.plans) <= 4 and len(kernel._constants) <= per_plan + 4 * 2


def test_shape_arithmetic_is_computed_when_planning(backend, rng):
    """Shape -> Slice -> Concat -> Reshape over a symbolic batch runs strict on the backend: the
    int64 shape values are computed when each plan is made, and one that is an output comes
    back (on the host, or as a device tensor) like any other."""
    graph = shape_arithmetic_graph()
    cpu = td.compile(graph, backends=("numpy",))
    dev = td.compile(graph, backends=(backend,), strict=True)
    assert set(dev.placement.nodes.values()) == {backend}
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 6, 5)).astype(np.float32)
        want, got = cpu.run({"x": x}), dev.run({"x": x})
        assert got["y"].shape == (n, 4 * 6 * 5)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got["dims"], [n, 4, 6, 5])
        on_device = dev.run({"x": x}, outputs="device")["dims"]
        np.testing.assert_array_equal(td.to_host(on_device), [n, 4, 6, 5])


def test_int64_values_computed_when_planning_leave_as_int64(backend):
    """An int64 value the plan computes from shapes alone (class labels as torchvision's
    detectors make them: Range over a dim, Expand) leaves the partition as its values: to
    the host, to a node the backend does not run (NonZero, on the cpu), and as a device
    tensor to a later partition of the backend (the Add after the cpu's ReduceMax)."""
    graph = validate(
        Graph(
            [Value("x", "float32", ("n", 3))],
            [Value("labels"), Value("where"), Value("shifted"), Value("y")],
            [
                Node("Shape", ["x"], ["s"], name="shape"),
                Node("Gather", ["s", "one"], ["c"], {"axis": 0}, name="classes"),
                Node("Range", ["zero", "c", "one"], ["r"], name="range"),
                Node("Expand", ["r", "s"], ["labels"], name="expand"),
                Node("NonZero", ["labels"], ["where"], name="nonzero"),
                Node("ReduceMax", ["where"], ["top"], {"keepdims": 0}, name="top"),
                Node("Add", ["labels", "top"], ["shifted"], name="shift"),
                Node("Relu", ["x"], ["y"], name="relu"),
            ],
            {"one": np.array(1, np.int64), "zero": np.array(0, np.int64)},
        )
    )
    with pytest.warns(UserWarning, match="fall back"):
        sess = td.compile(graph, backends=(backend, "numpy"))
    assert sess.placement["expand"] == backend and sess.placement["nonzero"] == "numpy"
    out = sess.run({"x": np.ones((4, 3), np.float32)})
    labels = np.tile(np.arange(3), (4, 1))
    assert out["labels"].dtype == np.int64
    np.testing.assert_array_equal(out["labels"], labels)
    np.testing.assert_array_equal(out["where"], np.stack(np.nonzero(labels)))
    assert sess.placement["shift"] == backend
    np.testing.assert_array_equal(out["shifted"], labels + 3)


def test_a_shape_made_in_one_partition_shapes_a_constant_in_a_later_one(backend, rng, monkeypatch):
    """A dim taken from a tensor's shape in one partition and a ConstantOfShape of it in a later
    partition of the backend (torchvision's Faster R-CNN pools boxes so: the count of boxes a
    NonZero on the cpu found shapes the next partition's tensors). The later plan takes the
    value as a constant, made per value (the plan failed before: 'no static shape')."""
    graph = validate(
        Graph(
            [Value("x", "float32", ("n",))],
            [Value("y")],
            [
                Node("Relu", ["x"], ["r"], name="relu"),
                Node("Shape", ["r"], ["s"], name="shape"),
                Node("Gather", ["s", "zero"], ["d"], {"axis": 0}, name="dim"),
                Node("Unsqueeze", ["d", "zero1"], ["u"], name="unsqueeze"),
                Node("NonZero", ["r"], ["nz"], name="nonzero"),
                Node("Shape", ["nz"], ["k"], name="count"),
                Node("Gather", ["k", "one1"], ["kk"], {"axis": 0}, name="count_dim"),
                Node("Concat", ["u", "kk"], ["size"], {"axis": 0}, name="size"),
                Node(
                    "ConstantOfShape",
                    ["size"],
                    ["c"],
                    {"value": np.array([2.5], np.float32)},
                    name="fill",
                ),  # fmt: skip
                Node("Cast", ["nz"], ["f"], {"to": 1}, name="cast"),
                Node("Add", ["c", "f"], ["y"], name="add"),
            ],
            {
                "zero": np.array(0, np.int64),
                "zero1": np.array([0], np.int64),
                "one1": np.array([1], np.int64),
            },
        )
    )
    with pytest.warns(UserWarning, match="fall back"):
        sess = td.compile(graph, backends=(backend, "numpy"))
    part = {n.name: k for k, p in enumerate(sess.placement.partitions) for n in p.nodes}
    assert sess.placement["nonzero"] == "numpy"
    assert sess.placement["unsqueeze"] == sess.placement["fill"] == backend
    assert part["unsqueeze"] < part["nonzero"] < part["fill"]
    later = sess.partitions[part["fill"]]
    assert later.partition.shape_inputs == ["u"]
    # the value comes from the plan that returned it as a constant, not read from the device
    later.kernel.read = lambda tensor: pytest.fail("a known value was read from the device")
    ref = td.compile(graph, backends=("numpy",))
    seen = set()
    for n in (5, 9, 5, 5):
        x = rng.standard_normal(n).astype(np.float32)
        got, want = sess.run({"x": x})["y"], ref.run({"x": x})["y"]
        assert got.shape == want.shape == (n, int((x > 0).sum()))
        np.testing.assert_array_equal(got, want)
        seen.add(got.shape)
    assert len(later.kernel.plans) == len(seen)  # a plan per (value of u, count)
    # A value with no host copy (another backend's constant, a session read back) is read.
    monkeypatch.setattr(planned, "_KNOWN", planned._Known())
    del later.kernel.read
    x = rng.standard_normal(7).astype(np.float32)
    np.testing.assert_array_equal(sess.run({"x": x})["y"], ref.run({"x": x})["y"])


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_grid_sample_matches_numpy(backend, rng, mode, padding_mode, align_corners, precision):
    """GridSample on 2-D images (grid_sample.wgsl, .cu) against the NumPy reference, the grid
    past [-1, 1] (clamped, reflected, zero taps), every mode, padding and corner alignment."""
    if precision == "fp16":
        require_f16(backend)
    graph = grid_sample_graph(mode, padding_mode, align_corners)
    feeds = {
        "x": rng.standard_normal((2, 3, 9, 13)).astype(np.float32),
        "g": (2.8 * rng.random((2, 11, 14, 2)) - 1.4).astype(np.float32),
    }
    want = td.compile(graph, backends=("numpy",)).run(feeds)["y"]
    sess = td.compile(graph, backends=(backend,), precision=precision, strict=True)
    assert rel_err(sess.run(feeds)["y"], want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize(
    "data_shape,k", [((300, 300), 2), ((70000, 4), 1)], ids=["elements", "rows"]
)
def test_scatter_nd_of_many_index_tuples(backend, rng, data_shape, k):
    """ScatterND without a reduction over more index tuples than an output element can scan
    (MViTv2's relative positions; refused before): the data copied, then a thread per updated
    element writes it, against NumPy; with a reduction it is still refused, with the reason."""
    lead = data_shape[:k]
    flat = rng.permutation(int(np.prod(lead)))[: 66000 if k == 2 else 69000]
    indices = np.stack(np.unravel_index(flat, lead), axis=-1).astype(np.int64)
    indices[::7] -= np.array(lead, np.int64)  # some negative (counted from the end)
    updates = rng.standard_normal((len(flat), *data_shape[k:])).astype(np.float32)

    def graph(reduction):
        return validate(Graph(
            [Value("x", "float32", data_shape)], [Value("y", "float32", None)],
            [Node("ScatterND", ["x", "i", "u"], ["y"], {"reduction": reduction}, name="s")],
            {"i": indices, "u": updates},
        ))  # fmt: skip

    feeds = {"x": rng.standard_normal(data_shape).astype(np.float32)}
    want = td.compile(graph("none"), backends=("numpy",)).run(feeds)["y"]
    got = td.compile(graph("none"), backends=(backend,), strict=True).run(feeds)["y"]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(UnsupportedOpError, match="index tuples"):
        td.compile(graph("add"), backends=(backend,), strict=True)


def test_a_reshape_to_a_computed_shape_keeps_its_rank_for_layer_norm(backend, rng):
    """Reshape to a shape made from a symbolic dim (as transformers export with dynamic axes),
    then LayerNormalization, which needs its input's rank: strict on the backend, against
    NumPy at two shapes (GPT-2's and BERT's LayerNormalizations fell back to the CPU)."""
    graph = validate(
        Graph(
            [Value("x", "float32", ("b", "s", 8))],
            [Value("y")],
            [
                Node("Shape", ["x"], ["s"], name="shape"),
                Node("Gather", ["s", "zero"], ["b"], {"axis": 0}, name="batch"),
                Node("Unsqueeze", ["b", "zero1"], ["b1"], name="unsqueeze"),
                Node("Concat", ["b1", "rest"], ["to"], {"axis": 0}, name="to"),
                Node("Reshape", ["x", "to"], ["r"], name="reshape"),
                Node("LayerNormalization", ["r", "g", "beta"], ["y"], {"axis": -1}, name="ln"),
            ],
            {
                "zero": np.array(0, np.int64),
                "zero1": np.array([0], np.int64),
                "rest": np.array([-1, 4, 2], np.int64),
                "g": rng.standard_normal(2).astype(np.float32),
                "beta": rng.standard_normal(2).astype(np.float32),
            },
        )
    )
    sess = td.compile(graph, backends=(backend,), strict=True)
    ref = td.compile(graph, backends=("numpy",))
    for shape in ((2, 3, 8), (1, 5, 8)):
        x = rng.standard_normal(shape).astype(np.float32)
        got, want = sess.run({"x": x})["y"], ref.run({"x": x})["y"]
        assert got.shape == want.shape == (shape[0], shape[1], 4, 2)
        assert rel_err(got, want) <= 1e-5


def _webgpu_name() -> str:
    from tinydl.backends.webgpu.context import get_context

    return get_context().name.lower()


def _topk_of_min_graph(cap: int):
    """TopK over x's last axis (symbolic) with k = min(cap, that axis's length), as
    torchvision's detectors take their top proposals."""
    return validate(
        Graph(
            [Value("x", "float32", (2, "n"))],
            [Value("v"), Value("i")],
            [
                Node("Shape", ["x"], ["s"], name="shape"),
                Node("Gather", ["s", "one"], ["n"], {"axis": 0}, name="len"),
                Node("Unsqueeze", ["n", "zero1"], ["n1"], name="unsqueeze"),
                Node("Concat", ["cap", "n1"], ["both"], {"axis": 0}, name="both"),
                Node("ReduceMin", ["both"], ["k0"], {"keepdims": 1}, name="min"),
                Node("TopK", ["x", "k0"], ["v", "i"], {"axis": -1}, name="topk"),
            ],
            {
                "one": np.array(1, np.int64),
                "zero1": np.array([0], np.int64),
                "cap": np.array([cap], np.int64),
            },
        )
    )


def test_topk_of_a_k_computed_from_shapes_with_a_bound(backend, rng):
    """TopK whose k is min(constant, a symbolic dim) runs on the backend (k folded when the
    plan is made), against NumPy with the axis shorter and longer than the constant; with no
    bound, or one past what the kernels take, it is refused with the reason."""
    capped = backend == "webgpu" and "llvmpipe" in _webgpu_name()
    if capped:  # (llvmpipe caps a shader's loops: a TopK of unknown length is not run there)
        with pytest.warns(UserWarning, match="fall back"):
            sess = td.compile(_topk_of_min_graph(5), backends=(backend, "numpy"))
        assert "llvmpipe" in sess.placement.refusals["topk"][backend]
    else:
        sess = td.compile(_topk_of_min_graph(5), backends=(backend,), strict=True)
    ref = td.compile(_topk_of_min_graph(5), backends=("numpy",))
    for n in (3, 9):
        x = rng.standard_normal((2, n)).astype(np.float32)
        got, want = sess.run({"x": x}), ref.run({"x": x})
        assert got["v"].shape == (2, min(n, 5))
        np.testing.assert_array_equal(got["v"], want["v"])
        np.testing.assert_array_equal(got["i"], want["i"])
    with pytest.raises(UnsupportedOpError, match=r"k up to 5000 > 1024"):
        td.compile(_topk_of_min_graph(5000), backends=(backend,), strict=True)
    unbounded = _topk_of_min_graph(5)
    unbounded.nodes[-1].inputs[1] = "n1"  # k = the axis's length itself
    with pytest.raises(UnsupportedOpError, match="no bound known"):
        td.compile(validate(unbounded), backends=(backend,), strict=True)


def test_a_value_computed_from_shapes_feeds_a_kernel_as_data(backend, rng):
    """Position embeddings at a symbolic length (GPT-2, ViT, LLaMA's rotary tables exported
    with dynamic axes; ViT's class token expanded to the batch): Range over the length, a
    Gather of a table, then an Add and a Concat with the data. Everything before them is
    computed when the plan is made; they read that constant as data (cuda's Concat, attention
    masks and convolutions read a buffer nothing wrote instead: GPT-2 off by 0.56, ViT 1.3)."""
    table = rng.standard_normal((64, 8)).astype(np.float32)
    graph = validate(
        Graph(
            [Value("x", "float32", ("b", "s", 8))],
            [Value("y"), Value("y2")],
            [
                Node("Shape", ["x"], ["shape"], name="shape"),
                Node("Gather", ["shape", "one"], ["s"], {"axis": 0}, name="len"),
                Node("Range", ["zero", "s", "one"], ["pos"], name="range"),
                Node("Gather", ["table", "pos"], ["emb"], {"axis": 0}, name="embed"),
                Node("Add", ["x", "emb"], ["y"], name="add"),
                Node("Unsqueeze", ["emb", "zero1"], ["emb1"], name="unsqueeze"),
                Node("Concat", ["x", "emb1"], ["y2"], {"axis": 0}, name="concat"),
            ],
            {
                "one": np.array(1, np.int64),
                "zero": np.array(0, np.int64),
                "table": table,
                "zero1": np.array([0], np.int64),
            },
        )
    )
    sess = td.compile(graph, backends=(backend,), strict=True)
    for shape in ((2, 5, 8), (1, 11, 8)):
        x = rng.standard_normal(shape).astype(np.float32)
        out = sess.run({"x": x})
        np.testing.assert_allclose(out["y"], x + table[: shape[1]], rtol=1e-6)
        np.testing.assert_array_equal(out["y2"], np.concatenate([x, table[None, : shape[1]]]))


def test_int64_and_bool_tensors_round_trip(backend, rng):
    """int64 (indices, shapes) and bool go to the device and back unchanged."""
    for array in (rng.integers(-(2**31), 2**31 - 1, 17), rng.random(9) < 0.5):
        t = td.to_device(array, backend)
        back = td.to_host(t)
        assert back.dtype == array.dtype
        np.testing.assert_array_equal(back, array)


def test_nan_follows_the_reference(backend, rng):
    """A NaN pixel through Conv -> activation gives NaN where the NumPy reference does (min,
    max and clamp may drop a NaN on GPUs; the activations use comparisons instead)."""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    x = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
    x[0, 1, 3, 4] = np.nan
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    for act, extra, inits in [
        ("Relu", [], {}),
        ("Clip", ["lo", "hi"], {"lo": np.float32(-0.5), "hi": np.float32(0.5)}),
        ("HardSigmoid", [], {}),
        ("HardSwish", [], {}),
        ("Tanh", [], {}),
    ]:
        graph = validate(
            Graph(
                [Value("x", "float32", x.shape)],
                [Value("y", "float32", None)],
                [
                    Node("Conv", ["x", "w"], ["c"], {"pads": [1, 1, 1, 1]}, name="conv"),
                    Node(act, ["c", *extra], ["y"], name="act"),
                ],
                initializers={"w": w, **{k: np.asarray(v) for k, v in inits.items()}},
            )
        )
        want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
        got = td.compile(graph, backends=(backend,), strict=True).run({"x": x})["y"]
        assert np.isnan(want).sum() == 36, act  # the 3x3 windows over the NaN, 4 channels
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=act)
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5, err_msg=act)


# -- fused attention -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(ATTENTION_VARIANTS))
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_attention_is_one_kernel(backend, variant, precision, rng):
    """MatMul(Q, Kᵀ) -> scale -> (+ mask) -> Softmax -> MatMul(·, V) is planned as one kernel
    and matches the NumPy reference of the unfused graph. At fp16 identity copies around the
    graph make Q, K, V and the output fp16 intermediates (the kernel still accumulates in f32)."""
    graph = attention_graph(**ATTENTION_VARIANTS[variant])
    feeds = attention_feeds(graph, rng)
    want = td.compile(graph, backends=("numpy",)).run(feeds)["y"]
    optimize = "all"
    if precision == "fp16":
        require_f16(backend)
        graph, optimize = wrap_fp16(graph), "none"
    sess = td.compile(
        graph, backends=(backend,), precision=precision, optimize=optimize, strict=True
    )
    got = sess.run(feeds)["y"]
    plan = only_plan(kernel_of(sess, backend))
    assert [n.op for n in plan.nodes if n.op != "Identity"] == [ATTENTION]
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


def test_ppocrv4_rec_attention_is_fused(backend, rapidocr_models, rng):
    """PP-OCRv4 rec's two attention blocks (opset 11: Flatten -> Softmax -> Reshape, Q scaled
    by a Mul) become one kernel each, and the model still matches onnxruntime."""
    import onnxruntime as ort

    path = rapidocr_models / "ch_PP-OCRv4_rec_infer.onnx"
    graph = td.load(path)
    (x,) = graph.inputs
    graph.inputs = [Value(x.name, x.dtype, (1, 3, 48, 320))]
    feed = {x.name: rng.random((1, 3, 48, 320), dtype=np.float32)}
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
    sess = td.compile(graph, backends=(backend,), strict=True)
    (got,) = sess.run(feed).values()
    labels = [
        n.meta["label"] for n in only_plan(kernel_of(sess, backend)).nodes if n.op == ATTENTION
    ]
    assert labels == ["MatMul+Flatten+Softmax+Reshape+MatMul"] * 2
    assert rel_err(got, want) <= 1e-4


@pytest.mark.parametrize(
    "variant",
    [
        {"probs_output": True, "mask": "keys"},  # the probabilities are read outside
        {"d": 160},  # a head dim over the kernel's limit
        {"batch": (2, 2, 3), "s": 9, "d": 16},  # 5-D (Hiera's, Twins' windows): failed to plan
    ],
    ids=["probs-output", "d160", "5d"],
)
def test_attention_left_unfused_is_still_right(backend, variant, rng):
    """Where the pattern cannot be one kernel the nodes run as they are, and still match."""
    graph = attention_graph(**variant)
    feeds = attention_feeds(graph, rng)
    want = td.compile(graph, backends=("numpy",)).run(feeds)
    sess = td.compile(graph, backends=(backend,), strict=True)
    got = sess.run(feeds)
    ops = [n.op for n in only_plan(kernel_of(sess, backend)).nodes]
    assert ATTENTION not in ops and "Softmax" in ops
    for name in want:
        assert rel_err(got[name], want[name]) <= 1e-5, name


def test_attention_whose_output_is_the_next_softmax_input(backend, rng):
    """softmax(softmax(Q·Kᵀ/√d)·V)·W: the first MatMul(·, V) cannot be both the first attention's
    end and the second's scores; the first is fused, the rest runs as it is, and is right."""
    graph = attention_graph()
    graph.outputs = [Value("z", "float32", None)]
    graph.inputs.append(Value("w", "float32", (2, 3, 64, 16)))
    graph.nodes += [
        Node("Softmax", ["y"], ["p2"], {"axis": -1}, name="softmax2"),
        Node("MatMul", ["p2", "w"], ["z"], name="pw"),
    ]
    graph = validate(graph)
    feeds = attention_feeds(graph, rng)
    want = td.compile(graph, backends=("numpy",)).run(feeds)["z"]
    sess = td.compile(graph, backends=(backend,), strict=True)
    ops = [n.op for n in only_plan(kernel_of(sess, backend)).nodes]
    assert ops == [ATTENTION, "Softmax", "MatMul"]
    assert rel_err(sess.run(feeds)["z"], want) <= 1e-5


def test_ocr_lines_cut_and_read_on_the_device(backend, rapidocr_models):
    """TextRecognize with crops="device": the frame goes in once, tinydl.Warp cuts a straight
    line and a slanted one (on a page turned upside down, the crop turned back) to the
    recognizer's input on the backend, and the whole session runs there (strict); the texts
    are the words drawn."""
    pytest.importorskip("cv2", reason="pip install 'tinydl[ocr]'")
    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    from tinydl.pipeline import ComponentRunner, Quads
    from tinydl.pipeline.components import TextCrops, TextRecognize

    ttf = Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf"
    font = ImageFont.truetype(str(ttf), 28)
    page = Image.new("RGB", (420, 150), "white")
    pen = ImageDraw.Draw(page)
    words, boxes = ["invoice 2024", "quick brown fox"], []
    for word, (x, y) in zip(words, [(20, 15), (40, 85)], strict=True):
        pen.text((x, y), word, font=font, fill="black")
        left, top, right, bottom = pen.textbbox((x, y), word, font=font)
        l, t, r, b = left - 6, top - 6, right + 6, bottom + 6
        boxes.append([[l, t], [r, t - 3], [r, b - 3], [l, b]])  # slanted by 3 pixels
    image = np.asarray(page)
    quads = np.array(boxes, np.float32)
    upside_down = np.ascontiguousarray(image[::-1, ::-1])
    turned_box = (np.array([420 - 1, 150 - 1], np.float32) - quads[1])[[2, 3, 0, 1]]
    straight = TextCrops(None, Quads(quads[:1]), image=image)
    turned = TextCrops(None, Quads(turned_box[None]), image=upside_down).turn([0])
    reader = TextRecognize(backends=backend, crops="device", strict=True)
    out = ComponentRunner(reader).run({"in": [straight, turned]})["out"]
    assert [[t.strip() for t in p.payload.labels] for p in out] == [words[:1], words[1:]]
    assert set(reader.session.placement.nodes.values()) == {backend}
    assert reader.session.placement.nodes["crop/warp"] == backend


def test_precision_auto_keeps_in_float32_what_fp16_storage_breaks(backend):
    """precision="auto" on a graph built to break in fp16 storage (a value past fp16's range, a
    value that cancels): the values the decision keeps are stored in float32 in the backend's
    plan, the others in fp16, and the output is within the tolerance of float32."""
    require_f16(backend)
    from helpers.models import fp16_fragile_graph

    graph = fp16_fragile_graph()
    x = np.random.default_rng(3).random((4, 64), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=(backend,), precision="auto", strict=True)
    got = sess.run({"x": x})["y"]
    decision = sess.precision_decision
    assert "big" in decision.fp32 and "shifted" in decision.fp32
    assert np.abs(got - want).max() / np.abs(want).max() <= decision.tolerance
    infos = only_plan(kernel_of(sess, backend)).infos
    stored = {
        name: str(infos[name].stype) for name in decision.fp32 + decision.fp16 if name in infos
    }
    assert stored and all(stored[n] in ("float32", "f32") for n in decision.fp32 if n in stored)
    assert any(t in ("float16", "f16") for n, t in stored.items() if n in decision.fp16)


@pytest.mark.parametrize(
    ("shape", "bias", "shared"),
    [((2, 12, 9, 11), True, False), ((3, 40, 7, 5), False, False), ((2, 16, 30), True, False),
     ((2, 12, 9, 11), True, True)],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_layer_norm_over_channels_without_the_transposes(backend, shape, bias, shared, precision):
    """ConvNeXt's LayerNorm2d as PyTorch exports it (Transpose -> LayerNormalization over the
    last axis -> Transpose) runs as one kernel over the channels, unless the channels-last
    value is needed (a graph output)."""
    if precision == "fp16":
        require_f16(backend)
    rng = np.random.default_rng(7)
    graph = channel_norm_graph(rng, shape, bias, shared)
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 0.5
    want = td.compile(graph, backends=("numpy",)).run({"x": x})
    sess = td.compile(graph, backends=(backend,), precision=precision, strict=True)
    got = sess.run({"x": x})
    labels = [n.meta.get("label", n.op) for n in only_plan(kernel_of(sess, backend)).nodes]
    assert ("Transpose+LayerNormalization+Transpose" in labels) == (not shared), labels
    for name in want:
        assert rel_err(got[name], want[name]) <= (1e-5 if precision == "fp32" else 1e-2), name
