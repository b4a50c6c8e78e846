"""End to end: real models on real images, tinydl vs onnxruntime (their own reference runtime)."""

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from helpers.models import crnn_onnx, espcn_onnx, ocr_input, page_image, rel_err

import tinydl as td

BACKEND = __import__("os").environ.get("TINYDL_BACKEND", "numpy")
# A GPU backend under test runs what it can; the rest (int64 shape arithmetic) falls back.
BACKENDS = (BACKEND,) if BACKEND == "numpy" else (BACKEND, "numpy")


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
    a = td.compile(src, backends=("numpy",)).run({"y": y})["out"]
    b = td.compile(tmp_path / "espcn.tdl", backends=("numpy",)).run({"y": y})["out"]
    np.testing.assert_array_equal(a, b)


def test_crnn_matches_onnxruntime(tmp_path, rng):
    """Conv -> pooling -> reshape -> bidirectional LSTM -> MatMul -> Softmax, end to end."""
    path = tmp_path / "crnn.onnx"
    crnn_onnx(path, rng)
    x = rng.standard_normal((2, 1, 32, 40)).astype(np.float32)
    got, _ = compare_with_ort(path, {"x": x})
    assert got["out"].shape == (10, 2, 11)
    np.testing.assert_allclose(got["out"].sum(axis=-1), 1, rtol=1e-5)
    assert got["out"].std() > 0.01  # the classes are told apart, not uniform
