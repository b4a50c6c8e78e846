"""OCR: resize policies, Inference's pre-processing, each OCR component alone in a
ComponentRunner (judged against RapidOCR 1.4.4's own functions), `tinydl ocr` and the YAML app,
and the whole app against RapidOCR on scikit-image's page and on pages rendered with Pillow."""

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.text_images import matched, rapidocr_lines, text_images
from onnx import TensorProto, helper

from tinydl.errors import InvalidInputError
from tinydl.images import resize_image, resize_policy
from tinydl.pipeline import Batch, ComponentRunner, Frame, Packet, PipelineError, Quads, Tensor
from tinydl.pipeline.components import (
    CropBoxes,
    Draw,
    Inference,
    TextBoxes,
    TextCrops,
    TextDirection,
    TextRecognize,
)
from tinydl.pipeline.components.ocr import ctc_greedy

cv2 = pytest.importorskip("cv2", reason="pip install 'tinydl[ocr]'")
rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="pip install 'tinydl[ocr]'")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def engine():
    return rapidocr.RapidOCR()


def run(component, **ports):
    return [p.payload for p in ComponentRunner(component).run(ports)["out"]]


def test_resize_policies(rng):
    def size(spec, h, w):
        fit = resize_policy(spec).fit(h, w)
        return fit.height, fit.width

    assert size("multiple 32 min 736", 191, 384) == (736, 1472)  # PP-OCR det on the page
    assert size("multiple 32 max 960", 1200, 1600) == (704, 960)  # 720 / 32 = 22.5: to even
    assert size("multiple 32", 50, 70) == (64, 64)
    assert size("640x480", 10, 20) == (480, 640)
    box = resize_policy("letterbox 320x320").fit(700, 1000)
    assert (box.height, box.width, box.inner_height, box.inner_width, box.top) == (
        320,
        320,
        224,
        320,
        48,
    )
    corners = [[box.left, box.top], [box.left + box.inner_width, box.top + box.inner_height]]
    np.testing.assert_allclose(box.to_source(corners), [[0, 0], [1000, 700]])
    for bad in ("640", "multiple 0", "multiple 32 min", "letterbox 0x10", "wide"):
        with pytest.raises(InvalidInputError, match="resize policy"):
            resize_policy(bad)

    image = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    for spec in ("80x120", "20x9", "letterbox 64x64"):
        fit = resize_policy(spec).fit(37, 53)
        got = resize_image(image, fit)
        want = cv2.resize(image, (fit.inner_width, fit.inner_height))
        inner = got[fit.top : fit.top + fit.inner_height, fit.left : fit.left + fit.inner_width]
        assert got.shape == (fit.height, fit.width, 3) and got.dtype == np.uint8
        assert np.abs(inner.astype(int) - want).max() <= 1  # OpenCV rounds in fixed point
        assert (got == 0).sum() >= (got.size - inner.size)  # the letterbox padding
    with pytest.raises(InvalidInputError, match="planned for"):
        resize_image(image[1:], resize_policy("20x9").fit(37, 53))


def identity_model(path: Path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", "w"])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (path / "id.onnx").write_bytes(model.SerializeToString())
    return str(path / "id.onnx")


def test_inference_resize_color_and_empty_batch(tmp_path, rng):
    model = identity_model(tmp_path)
    frame = Frame(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8), "rgb")
    infer = Inference(model=model, resize="multiple 32", color="bgr", mean=0.5, std=0.5)
    got = run(infer, **{"in": [frame]})[0].data
    fit = resize_policy("multiple 32").fit(50, 70)
    want = (resize_image(frame.image[:, :, ::-1], fit).astype(np.float32) / 255 - 0.5) / 0.5
    assert got.shape == (3, 64, 64)  # the batch axis added for the model is taken off again
    np.testing.assert_allclose(got, want.transpose(2, 0, 1), atol=1e-6)
    out = run(Inference(model=model), **{"in": [Packet(Batch([]), 0, 0)]})[0]
    assert isinstance(out, Batch) and len(out) == 0
    with pytest.raises(PipelineError, match="color"):
        Inference(model=model, color="hsv")


def text_map(rng, size=(96, 160)) -> np.ndarray:
    """A DB map: noise under the threshold, two straight text blocks and a slanted one."""
    prob = rng.random(size, dtype=np.float32) * 0.2
    prob[10:22, 20:120] = 0.7 + rng.random((12, 100), dtype=np.float32) * 0.3
    prob[40:50, 90:150] = 0.9
    slant = np.zeros(size, np.uint8)
    cv2.fillPoly(slant, [np.array([[10, 70], [80, 60], [82, 72], [12, 82]], np.int32)], 1)
    return np.where(slant > 0, np.float32(0.8), prob)[None, None]


def rapid_boxes(engine, prob: np.ndarray, height: int, width: int) -> np.ndarray:
    det = engine.text_det
    boxes, _ = det.postprocess_op(prob, (height, width))
    return np.array(engine.sorted_boxes(det.filter_tag_det_res(boxes, (height, width))))


def test_text_boxes_as_rapidocr(engine, rng):
    prob = text_map(rng)
    frame = Frame(np.zeros((192, 320, 3), np.uint8))  # twice the map's size
    quads = run(TextBoxes(), **{"in": [Tensor(prob)], "image": [frame]})[0]
    assert isinstance(quads, Quads) and len(quads) == 3
    np.testing.assert_array_equal(quads.points, rapid_boxes(engine, prob, 192, 320))
    assert quads.points[0, 0, 1] < quads.points[1, 0, 1]  # reading order: top line first
    assert np.all(quads.scores >= 0.5)

    empty = run(TextBoxes(), **{"in": [Tensor(prob * 0.1)], "image": [frame]})[0]
    assert empty.points.shape == (0, 4, 2)

    # A letterboxed map: boxes come back to the frame without the padding.
    fit = resize_policy("letterbox 160x160").fit(96, 160)
    padded = np.zeros((1, 1, 160, 160), np.float32)
    padded[..., fit.top : fit.top + 96, :] = prob
    boxed = run(
        TextBoxes(resize="letterbox 160x160"),
        **{"in": [Tensor(padded)], "image": [Frame(np.zeros((96, 160, 3), np.uint8))]},
    )[0]
    np.testing.assert_array_equal(boxed.points, rapid_boxes(engine, prob, 96, 160))

    both = run(
        TextBoxes(),
        **{
            "in": [Packet(Batch([Packet(Tensor(prob), 0, 0), Packet(Tensor(prob * 0.1), 1, 0)]))],
            "image": [Packet(Batch([Packet(frame, 0, 0), Packet(frame, 1, 0)]))],
        },
    )[0]
    assert [len(q) for q in both.payloads()] == [3, 0] and both.items[1].flow_id == 1


def test_crop_boxes_as_rapidocr(engine, rng):
    image = rng.integers(0, 256, (120, 200, 3), dtype=np.uint8)
    quads = Quads(
        np.array(
            [
                [[10, 20], [150, 10], [152, 40], [12, 50]],
                [[170, 5], [190, 5], [190, 100], [170, 100]],
            ],
            np.float32,
        )
    )
    crops = run(CropBoxes(), image=[Frame(image)], boxes=[quads])[0]
    want = engine.get_crop_img_list(image, list(quads.points.copy()))
    assert len(crops) == 2 and crops.format == "rgb" and crops.crops is None  # cut on demand
    np.testing.assert_allclose(crops.ratios, [w.shape[1] / w.shape[0] for w in want])
    for got, ref in zip(crops.pixels(), want, strict=True):
        np.testing.assert_array_equal(got, ref)
    assert crops.crops[1].shape[:2] == (20, 95)  # the vertical box is turned to read across
    turned = crops.turn([1])
    np.testing.assert_array_equal(turned.pixels()[1], want[1][::-1, ::-1])
    assert turned.turned.tolist() == [False, True] and crops.turned.tolist() == [False, False]
    small = run(CropBoxes(height=48), image=[Frame(image)], boxes=[quads])[0]
    assert [c.shape[0] for c in small.crops] == [48, 48]
    none = run(CropBoxes(), image=[Frame(image)], boxes=[Quads(np.zeros((0, 4, 2)))])[0]
    assert len(none) == 0


def test_crop_matrices_cut_where_opencv_cuts(rng):
    """tinydl.Warp by crop_matrix (one bilinear resampling) samples each model-input pixel at
    the image point PP-OCR's crop (perspective warp, a tall box turned, a 180-degree turn) and
    resize to 48 high take it from. On an image that is linear in x and y, both resamplings are
    exact, so the two cuts agree to OpenCV's 1/32-pixel coordinate rounding."""
    from tinydl.ops.geometry import warp
    from tinydl.pipeline.components.ocr import fit_height

    h, w = 160, 240
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    image = np.stack([x, y, 0.5 * x + 0.25 * y], axis=-1)
    for i in range(12):
        tall = i % 3 == 0
        cx, cy = rng.uniform(80, 160), rng.uniform(60, 100)
        half = np.array([12.0, 30.0] if tall else [60.0, 12.0]) * rng.uniform(0.6, 1.2)
        angle = rng.uniform(-0.2, 0.2)
        rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * half
        quad = (corners @ rot.T + [cx, cy] + rng.uniform(-2, 2, (4, 2))).astype(np.float32)
        crops = TextCrops(None, Quads(quad[None]), image=image)
        if i % 2:
            crops = crops.turn([0])
        width = 400
        m, mask = crops.matrices(48, width, width, [0])
        got = warp(
            image[None],
            m,
            np.array([48, width]),
            output_height=0,
            output_width=0,
            border="replicate",
            layout="NHWC",
        )[0]
        want = fit_height(cv2, crops.pixels()[0], 48, width)
        filled = int(mask[0, 0, :, 0].sum())
        assert filled == want.shape[1] and mask[0, 0, filled:].sum() == 0
        # The edge rows and columns: OpenCV's resize clamps to the crop, the warp reads on.
        np.testing.assert_allclose(got[1:-1, 1 : filled - 1], want[1:-1, 1:-1], atol=0.1)


def test_ctc_greedy():
    table = ["a", "b"]  # classes: blank, a, b, space
    steps = [[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
    probs = np.array([steps, [[1, 0, 0, 0]] * 6], np.float32) * 0.5 + 0.1
    (text, score), (empty, zero) = ctc_greedy(probs, table)
    assert (text, empty, zero) == ("aa b", "", 0.0)
    assert score == pytest.approx(0.6)
    with pytest.raises(PipelineError, match="dictionary has"):
        ctc_greedy(probs, ["a"])


def line_crop(text: str, upside_down: bool = False) -> np.ndarray:
    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(
        str(Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf"), 28
    )
    image = Image.new("RGB", (24 + int(font.getlength(text)), 44), "white")
    ImageDraw.Draw(image).text((12, 6), text, font=font, fill="black")
    pixels = np.asarray(image)
    return np.ascontiguousarray(pixels[::-1, ::-1]) if upside_down else pixels


def test_direction_and_recognition_across_frames():
    words = ["invoice 2024", "pipeline", "quick brown fox"]
    crops = [line_crop(w, upside_down=i == 1) for i, w in enumerate(words)]
    quads = Quads(np.arange(24, dtype=np.float32).reshape(3, 4, 2))
    first = TextCrops(crops[:2], Quads(quads.points[:2]))
    nothing = TextCrops([], Quads(np.zeros((0, 4, 2), np.float32)))
    last = TextCrops(crops[2:], Quads(quads.points[2:]))
    frames = Batch([Packet(first, 0, 0), Packet(nothing, 0, 1), Packet(last, 1, 0)])
    upright = run(TextDirection(), **{"in": [Packet(frames, 0, 0)]})[0]
    np.testing.assert_array_equal(upright.items[0].payload.crops[1], crops[1][::-1, ::-1])
    np.testing.assert_array_equal(upright.items[0].payload.crops[0], crops[0])
    lines = run(TextRecognize(), **{"in": [Packet(upright, 0, 0)]})[0]
    assert [p.key for p in lines.items] == [(0, 0), (0, 1), (1, 0)]
    # The crops' white margins may read as spaces (RapidOCR reads them so too).
    got = [[text.strip() for text in q.labels] for q in lines.payloads()]
    assert got == [words[:2], [], words[2:]]
    np.testing.assert_array_equal(lines.items[2].payload.points, quads.points[2:])
    assert all(np.all(q.scores > 0.9) for q in lines.payloads() if len(q))
    picky = run(TextRecognize(min_score=1.01), **{"in": [last]})[0]
    assert len(picky) == 0


def test_draw_quads_with_labels(rng):
    image = np.full((60, 120, 3), 255, np.uint8)
    quad = np.array([[[20, 25], [100, 20], [102, 50], [22, 55]]], np.float32)
    out = run(
        Draw(color=(0, 0, 255)),
        image=[Frame(image)],
        overlay=[Quads(quad, np.ones(1, np.float32), ["hi"])],
    )[0]
    blue = (out.image[..., 2] == 255) & (out.image[..., 0] == 0)
    assert blue[37, 20:24].any() and blue[22:28, 60].any()  # the left and top edges
    label = out.image[14:22, 22:31]  # the label above the quad: white text on a blue box
    assert blue[14:22, 22:31].mean() > 0.3 and (label.min(axis=-1) > 200).any()
    assert out.image[40, 60].tolist() == [255, 255, 255]  # inside stays untouched


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from PIL import Image

    folder = tmp_path_factory.mktemp("pages")
    found = []
    for name, image in text_images():
        Image.fromarray(image).save(folder / f"{name}.png")
        found.append((str(folder / f"{name}.png"), image))
    return found


def test_ocr_reads_the_lines_rapidocr_reads(engine, pages):
    from tinydl.apps.ocr import read_text

    ours = read_text([path for path, _ in pages])
    assert [r["image"] for r in ours] == [path for path, _ in pages]
    total = hits = 0
    for (path, image), result in zip(pages, ours, strict=True):
        reference = rapidocr_lines(engine, image)
        assert reference, f"{path}: RapidOCR found no text"
        total += len(reference)
        hits += matched(reference, result["lines"])
    assert hits >= 0.9 * total, f"{hits} of RapidOCR's {total} lines matched"


def test_device_crops_read_the_words_rapidocr_reads(engine, pages):
    """crops="device": the crops cut inside the classifier's and recognizer's sessions (here on
    the cpu backend, where tinydl.Warp runs in NumPy) read the same words as RapidOCR. One
    bilinear resampling instead of OpenCV's bicubic crop and bilinear resize moves a few
    word gaps across the recognizer's space threshold, so texts are compared without spaces
    (strict equality is counted in docs/pipeline.md)."""
    from tinydl.apps.ocr import read_text

    ours = read_text([path for path, _ in pages], crops="device")
    total = hits = 0
    for (_, image), result in zip(pages, ours, strict=True):
        reference = rapidocr_lines(engine, image)
        total += len(reference)
        hits += matched(nospace(reference), nospace(result["lines"]))
    assert hits >= 0.9 * total, f"{hits} of RapidOCR's {total} lines matched"


def nospace(lines: list[dict]) -> list[dict]:
    return [dict(line, text=line["text"].replace(" ", "")) for line in lines]


def test_cli_and_yaml_app(pages, tmp_path, capsys):
    from PIL import Image

    from tinydl.cli import main

    page = pages[0][0]
    blank = tmp_path / "blank.png"
    Image.fromarray(np.full((90, 160, 3), 240, np.uint8)).save(blank)
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    out = tmp_path / "lines.json"
    assert main(["ocr", page, str(blank), "--json", str(out), "-o", str(tmp_path / "drawn")]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    results = json.loads(out.read_text())
    assert printed == results and results[1] == {"image": str(blank), "lines": []}
    texts = [line["text"] for line in results[0]["lines"]]
    assert "Region-basedsegmentation" in texts
    assert all(len(line["box"]) == 4 for line in results[0]["lines"])
    assert (tmp_path / "drawn" / "blank_ocr.png").exists()
    assert (tmp_path / "drawn" / f"{Path(page).stem}_ocr.png").exists()

    assert main(["ocr", str(bad)]) == 2
    assert "bad.png: not a readable image" in capsys.readouterr().err

    app_out = tmp_path / "app.json"
    argv = ["pipeline", "run", str(ROOT / "examples/apps/ocr.yaml")]
    assert main([*argv, "--set", f"images={page}", "--set", f"out={app_out}"]) == 0
    (frame,) = json.loads(app_out.read_text())
    assert [line["text"] for line in frame["lines"]] == texts
