"""End to end: real models on real images, tinydl vs onnxruntime (their own reference runtime)."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinydl as td
from tinydl.ops import validate

BACKEND = __import__("os").environ.get("TINYDL_BACKEND", "cpu")
# A GPU backend under test runs what it can; the rest (int64 shape arithmetic) falls back.
BACKENDS = (BACKEND,) if BACKEND == "cpu" else (BACKEND, "cpu")


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference relative to the reference's largest magnitude."""
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def compare_with_ort(path, feeds, limit=1e-4):
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning, when a GPU backend is tested
        sess = td.compile(td.load(path), backends=BACKENDS)
    got = sess.run(feeds)
    assert list(got) == [o.name for o in sess.outputs]
    for (name, g), r in zip(got.items(), ref, strict=True):
        assert g.shape == r.shape, name
        assert g.dtype == r.dtype, name
        err = rel_err(g, r)
        assert err <= limit, f"{name}: relative error {err:.2e} > {limit:.0e}"
    return got, ref


def page_image() -> np.ndarray:
    skimage_data = pytest.importorskip("skimage.data", reason="pip install 'tinydl[test]'")
    return skimage_data.page()  # 191x384 grayscale photo of a printed page


def ocr_input(gray: np.ndarray, width: int, height: int) -> np.ndarray:
    """PP-OCR preprocessing: RGB resized, (x/255 - 0.5) / 0.5, NCHW float32."""
    from PIL import Image

    rgb = np.asarray(
        Image.fromarray(np.stack([gray] * 3, axis=-1)).resize((width, height), Image.BILINEAR)
    )
    x = (rgb.astype(np.float32) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def test_ppocrv4_det_matches_onnxruntime(rapidocr_models):
    x = ocr_input(page_image(), 384, 192)  # the model wants multiples of 32
    got, _ = compare_with_ort(rapidocr_models / "ch_PP-OCRv4_det_infer.onnx", {"x": x})
    prob = next(iter(got.values()))
    assert prob.shape == (1, 1, 192, 384)
    assert 0.05 < (prob > 0.3).mean() < 0.5, "the text map should mark the lines of text, not all"


def test_ppocrv4_rec_matches_onnxruntime_and_reads_the_line(rapidocr_models):
    x = ocr_input(page_image()[3:37, 0:300], 320, 48)  # the page's title line
    path = rapidocr_models / "ch_PP-OCRv4_rec_infer.onnx"
    got, _ = compare_with_ort(path, {"x": x})
    probs = next(iter(got.values()))
    assert probs.shape == (1, 40, 6625)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-4)
    # CTC greedy decoding with the dictionary stored in the model's metadata.
    chars = ["<blank>", *td.load(path).metadata["onnx_metadata"]["character"].splitlines(), " "]
    best = probs[0].argmax(-1)
    text = "".join(chars[c] for i, c in enumerate(best) if c and (i == 0 or c != best[i - 1]))
    assert text == "Region-based segmentation"


def test_ppocr_cls_matches_onnxruntime(rapidocr_models, rng):
    x = rng.standard_normal((2, 3, 48, 192)).astype(np.float32)
    compare_with_ort(rapidocr_models / "ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": x})


def espcn(tmp_path, rng, scale=3):
    """ESPCN with random weights, written as ONNX and loaded."""
    path = tmp_path / "espcn.onnx"
    espcn_onnx(path, scale, rng)
    return td.load(path)


def kernel_of(sess, backend: str):
    """The one compiled partition of `backend` in a session."""
    (kernel,) = [c.kernel for c in sess.partitions if c.backend == backend]
    return kernel


def only_plan(kernel):
    (plan,) = kernel.plans.values()
    return plan


def check_det_on(backend: str, ppocr_det) -> None:
    """PP-OCRv4 det wholly on `backend` (no fallback) within 1e-4 of onnxruntime."""
    path, x, ref = ppocr_det
    sess = td.compile(td.load(path), backends=(backend,), strict=True)
    (prob,) = sess.run({"x": x}).values()
    assert prob.shape == ref.shape == (1, 1, 192, 384)
    assert rel_err(prob, ref) <= 1e-4
    assert set(sess.placement.nodes.values()) == {backend}


def shape_tables_graph():
    """Resize (cubic) -> Transpose -> Pad (reflect) over symbolic H, W: every op's tables
    (taps, offsets) depend on the input shape. For GPU backends fed several shapes."""
    from tinydl.ir.graph import Graph, Node, Value

    return validate(
        Graph(
            [Value("x", "float32", (1, 3, "h", "w"))],
            [Value("y", "float32", None)],
            [
                Node("Resize", ["x", "", "scales"], ["r"], {"mode": "cubic"}, name="resize"),
                Node("Transpose", ["r"], ["t"], {"perm": [0, 1, 3, 2]}, name="transpose"),
                Node("Pad", ["t", "pads"], ["y"], {"mode": "reflect"}, name="pad"),
            ],
            {
                "scales": np.array([1, 1, 2, 3], np.float32),
                "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
            },
        )
    )


def check_every_shape(graph, backend: str, rng) -> None:
    """`graph` on `backend` matches the cpu backend for several input shapes in turn (a plan
    each, one shape again)."""
    cpu = td.compile(graph, backends=("cpu",))
    dev = td.compile(graph, backends=(backend,), strict=True)
    for h, w in ((5, 7), (9, 4), (6, 6), (5, 7)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(
            dev.run({"x": x})["y"], cpu.run({"x": x})["y"], rtol=1e-5, atol=1e-5
        )


def espcn_onnx(path, scale: int, rng) -> None:
    """ESPCN (Shi et al. 2016): 5x5->64 tanh, 3x3->32 tanh, 3x3->r^2, pixel shuffle."""
    chans = [(1, 64, 5), (64, 32, 3), (32, scale * scale, 3)]
    inits, nodes, x = [], [], "y"
    for i, (cin, cout, k) in enumerate(chans):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4))
        x = f"c{i}"
        if i < 2:
            nodes.append(helper.make_node("Tanh", [x], [f"t{i}"]))
            x = f"t{i}"
    nodes.append(helper.make_node("DepthToSpace", [x], ["out"], blocksize=scale, mode="CRD"))
    graph = helper.make_graph(
        nodes,
        "espcn",
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "H", "W"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1, "H2", "W2"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


@pytest.mark.parametrize("scale", [2, 3])
def test_espcn_matches_onnxruntime(tmp_path, rng, scale):
    path = tmp_path / f"espcn_x{scale}.onnx"
    espcn_onnx(path, scale, rng)
    y = rng.random((1, 1, 36, 64), dtype=np.float32)
    got, _ = compare_with_ort(path, {"y": y})
    assert got["out"].shape == (1, 1, 36 * scale, 64 * scale)


def test_espcn_tdl_round_trip(tmp_path, rng):
    src = tmp_path / "espcn.onnx"
    espcn_onnx(src, 3, rng)
    td.save(td.load(src), tmp_path / "espcn.tdl")
    y = rng.random((2, 1, 20, 30), dtype=np.float32)
    a = td.compile(src).run({"y": y})["out"]
    b = td.compile(tmp_path / "espcn.tdl").run({"y": y})["out"]
    np.testing.assert_array_equal(a, b)
