"""BlazePose's geometry, step for step as MediaPipe 0.10.14's pose graphs configure their
calculators (mediapipe/modules/pose_detection, pose_landmark): SSD anchors and decoding, weighted
non-maximum suppression, letterbox removal, alignment-point ROIs, the crop matrices that
ImageToTensor warps with, landmark decoding with heatmap refinement, projection back to the
image, and the one-euro filter. Plain NumPy on small arrays; the pose components call these.

Coordinates are normalized to the image (x / width, y / height) unless a name says pixels. A
ROI is a row (x_center, y_center, width, height, rotation) — MediaPipe's NormalizedRect.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

from tinydl.errors import InvalidModelError

DETECTOR_SIZE = 224
LANDMARK_SIZE = 256
LANDMARKS = 33
# pose_detection_cpu.pbtxt: SsdAnchorsCalculator and TensorsToDetectionsCalculator options.
STRIDES = (8, 16, 32, 32, 32)
MIN_SCORE = 0.5
NMS_IOU = 0.3
# pose_detection_to_roi.pbtxt: keypoint 0 is the hips' centre, 1 a point on the body's circle.
ROI_SCALE = 1.25
HEATMAP_KERNEL = 7
# MediaPipe's Pose landmark model's presence threshold (min_tracking_confidence).
MIN_PRESENCE = 0.5


def model_path(name: str) -> Path:
    """A BlazePose model of MediaPipe 0.10.14 (pose_detection/pose_detection.tflite...): from
    the installed mediapipe package, else from the wheel unpacked into tinydl's model cache
    ($TINYDL_TEST_MODELS or ~/.cache/tinydl/test-models/mediapipe-0.10.14, where
    tools/fetch_test_models.py puts it)."""
    found = []
    try:
        found.append(Path(metadata.distribution("mediapipe").locate_file("mediapipe")))
    except metadata.PackageNotFoundError:
        pass
    cache = os.environ.get("TINYDL_TEST_MODELS") or Path.home() / ".cache/tinydl/test-models"
    found.append(Path(cache) / "mediapipe-0.10.14" / "mediapipe")
    for root in found:
        path = root / "modules" / name
        if path.is_file():
            return path
    raise InvalidModelError(
        f"BlazePose needs MediaPipe 0.10.14's {name}; looked in "
        f"{', '.join(str(r / 'modules') for r in found)}: pip install --no-deps "
        "mediapipe==0.10.14 (or unpack its wheel into the cache folder)"
    )


# -- detection ------------------------------------------------------------------------------------


def ssd_anchors(size: int = DETECTOR_SIZE, strides=STRIDES) -> np.ndarray:
    """Anchor centres (A, 2) as SsdAnchorsCalculator makes them for the pose detector: layers of
    one stride merged, two anchors (aspect 1 and the interpolated scale) per layer and cell,
    offset 0.5, fixed size 1 (so only the centres matter)."""
    centres = []
    i = 0
    while i < len(strides):
        j = i
        while j < len(strides) and strides[j] == strides[i]:
            j += 1
        same = j - i
        cells = math.ceil(size / strides[i])
        y, x = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        grid = np.stack([(x + 0.5) / cells, (y + 0.5) / cells], -1).reshape(-1, 1, 2)
        centres.append(np.repeat(grid, 2 * same, axis=1).reshape(-1, 2))
        i = j
    return np.concatenate(centres).astype(np.float32)


@dataclass
class Detections:
    """Boxes (N, 4) xmin, ymin, xmax, ymax, keypoints (N, K, 2), scores (N,), normalized."""

    boxes: np.ndarray
    keypoints: np.ndarray
    scores: np.ndarray

    def take(self, index) -> Detections:
        return Detections(self.boxes[index], self.keypoints[index], self.scores[index])


def decode_detections(
    raw: np.ndarray, scores: np.ndarray, anchors: np.ndarray, min_score: float = MIN_SCORE
) -> Detections:
    """TensorsToDetectionsCalculator: raw (A, 4 + 2K) in x, y, w, h order (reverse_output_order)
    in detector pixels, relative to the anchors; scores through a sigmoid clipped at +-100; those
    below min_score dropped."""
    raw = raw.astype(np.float64).reshape(len(anchors), -1)
    score = 1 / (1 + np.exp(-np.clip(scores.astype(np.float64).reshape(-1), -100, 100)))
    keep = score >= min_score
    raw, a, score = raw[keep], anchors[keep].astype(np.float64), score[keep]
    centre = raw[:, :2] / DETECTOR_SIZE + a
    half = raw[:, 2:4] / DETECTOR_SIZE / 2
    boxes = np.concatenate([centre - half, centre + half], 1)
    keypoints = (
        raw[:, 4:].reshape(len(raw), (raw.shape[1] - 4) // 2, 2) / DETECTOR_SIZE + a[:, None]
    )
    return Detections(boxes, keypoints, score)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    lo, hi = np.maximum(box[:2], boxes[:, :2]), np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    union = area + areas - inter
    return np.where((union > 0) & (inter > 0), inter / np.where(union > 0, union, 1), 0.0)


def weighted_nms(det: Detections, iou: float = NMS_IOU, limit: int | None = None) -> Detections:
    """NonMaxSuppressionCalculator, WEIGHTED: the best remaining detection takes every one
    overlapping it by more than `iou` (itself included) and becomes their score-weighted mean
    box and keypoints, keeping its own score; best first, at most `limit`."""
    order = np.argsort(-det.scores, kind="stable")
    boxes, kps, scores = det.boxes[order], det.keypoints[order], det.scores[order]
    out_b, out_k, out_s = [], [], []
    while len(scores) and (limit is None or len(out_s) < limit):
        near = _iou(boxes[0], boxes) > iou
        w = scores[near][:, None]
        out_b.append((boxes[near] * w).sum(0) / w.sum())
        out_k.append((kps[near] * w[:, :, None]).sum(0) / w.sum())
        out_s.append(scores[0])
        if near.all():
            break
        boxes, kps, scores = boxes[~near], kps[~near], scores[~near]
    k = kps.shape[1] if kps.ndim == 3 else 0
    return Detections(
        np.array(out_b).reshape(-1, 4), np.array(out_k).reshape(-1, k, 2), np.array(out_s)
    )


def letterbox(width: int, height: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The full image fitted into a size x size square keeping its aspect (ImageToTensor with
    keep_aspect_ratio): its ROI and the padding (left, top, right, bottom), normalized."""
    side = max(width, height)
    roi = np.array([[0.5, 0.5, side / width, side / height, 0.0]])
    pad_x, pad_y = (1 - width / side) / 2, (1 - height / side) / 2
    return roi, np.array([pad_x, pad_y, pad_x, pad_y])


def remove_letterbox(det: Detections, pad: np.ndarray) -> Detections:
    """DetectionLetterboxRemovalCalculator: tensor coordinates back to the image's."""
    lo, scale = pad[:2], 1 - pad[:2] - pad[2:]
    boxes = (det.boxes - np.tile(lo, 2)) / np.tile(scale, 2)
    return Detections(boxes, (det.keypoints - lo) / scale, det.scores)


# -- regions of interest --------------------------------------------------------------------------


def alignment_rois(points: np.ndarray, width: int, height: int, scale: float = ROI_SCALE):
    """AlignmentPointsRectsCalculator then RectTransformationCalculator (scale, square_long):
    points (N, >=2, 2) normalized; the first is the centre, the second on the circle; rotated so
    that the first -> second vector points up (target angle 90 degrees). Also returns the
    unscaled ROIs (MediaPipe's smoothing takes its object scale from them)."""
    size = np.array([width, height], np.float64)
    p0, p1 = points[:, 0] * size, points[:, 1] * size
    box = 2 * np.hypot(*(p1 - p0).T)
    angle = np.pi / 2 - np.arctan2(-(p1[:, 1] - p0[:, 1]), p1[:, 0] - p0[:, 0])
    angle = angle - 2 * np.pi * np.floor((angle + np.pi) / (2 * np.pi))
    raw = np.stack([p0[:, 0] / width, p0[:, 1] / height, box / width, box / height, angle], 1)
    rois = raw.copy()
    rois[:, 2:4] *= scale
    return rois, raw


def crop_matrices(rois: np.ndarray, width: int, height: int, size: int) -> np.ndarray:
    """The tinydl.Warp matrices (output pixel -> image pixel) of ImageToTensor's crop of each
    ROI into size x size: OpenCV's rotated rectangle, its corners on the output's corners (0 and
    size, pixel centres not shifted, as warpPerspective of the box points does)."""
    cx, cy = rois[:, 0] * width, rois[:, 1] * height
    w, h, r = rois[:, 2] * width, rois[:, 3] * height, rois[:, 4]
    c, s = np.cos(r), np.sin(r)
    m = np.zeros((len(rois), 3, 3))
    m[:, 0, 0], m[:, 0, 1] = c * w / size, -s * h / size
    m[:, 1, 0], m[:, 1, 1] = s * w / size, c * h / size
    m[:, 0, 2] = cx - c * w / 2 + s * h / 2
    m[:, 1, 2] = cy - s * w / 2 - c * h / 2
    m[:, 2, 2] = 1
    return m.astype(np.float32)


# -- landmarks ------------------------------------------------------------------------------------


def decode_landmarks(raw: np.ndarray, heatmap: np.ndarray | None) -> np.ndarray:
    """TensorsToLandmarksCalculator (39 landmarks of x, y, z, visibility, presence in model
    pixels; sigmoid on the last two) then RefineLandmarksFromHeatmapCalculator (kernel 7, the
    sigmoid heatmap's weighted mean around each point where its peak is at least 0.5):
    (P, 39, 5) normalized to the crop."""
    lm = raw.astype(np.float64).reshape(len(raw), -1, 5).copy()
    lm[..., :3] /= LANDMARK_SIZE
    lm[..., 3:] = 1 / (1 + np.exp(-lm[..., 3:]))
    if heatmap is None:
        return lm
    p, hh, hw, n = heatmap.shape
    half = (HEATMAP_KERNEL - 1) // 2
    col = np.trunc(lm[..., 0] * hw).astype(np.int64)
    row = np.trunc(lm[..., 1] * hh).astype(np.int64)
    inside = (col >= 0) & (col < hw) & (row >= 0) & (row < hh)
    offs = np.arange(-half, half + 1)
    cols, rows = col[..., None] + offs, row[..., None] + offs  # (P, n, k)
    ok = (cols[..., None, :] >= 0) & (cols[..., None, :] < hw)
    ok = ok & (rows[..., :, None] >= 0) & (rows[..., :, None] < hh)  # (P, n, k, k)
    people = np.arange(p)[:, None, None, None]
    which = np.arange(n)[None, :, None, None]
    rc, cc = np.clip(rows, 0, hh - 1)[..., :, None], np.clip(cols, 0, hw - 1)[..., None, :]
    conf = 1 / (1 + np.exp(-heatmap[people, rc, cc, which].astype(np.float64))) * ok
    total = conf.sum((2, 3))
    refine = inside & (conf.max((2, 3)) >= 0.5) & (total > 0)
    safe = np.where(total > 0, total, 1)
    x = (conf * cols[..., None, :]).sum((2, 3)) / hw / safe
    y = (conf * rows[..., :, None]).sum((2, 3)) / hh / safe
    lm[..., 0] = np.where(refine, x, lm[..., 0])
    lm[..., 1] = np.where(refine, y, lm[..., 1])
    return lm


def project(lm: np.ndarray, rois: np.ndarray) -> np.ndarray:
    """LandmarkProjectionCalculator: crop-normalized landmarks (P, L, >=3) into the image by
    their ROIs (rotation about the crop's centre, then its size); z scales with the width."""
    out = lm.copy()
    c, s = np.cos(rois[:, 4])[:, None], np.sin(rois[:, 4])[:, None]
    x, y = lm[..., 0] - 0.5, lm[..., 1] - 0.5
    out[..., 0] = (c * x - s * y) * rois[:, 2:3] + rois[:, 0:1]
    out[..., 1] = (s * x + c * y) * rois[:, 3:4] + rois[:, 1:2]
    out[..., 2] = lm[..., 2] * rois[:, 2:3]
    return out


# -- smoothing ------------------------------------------------------------------------------------


@dataclass
class OneEuro:
    """MediaPipe's OneEuroFilter (util/filtering/one_euro_filter.cc) on an array of values at
    once: the derivative (scaled by `value_scale`) low-passed at `derivate_cutoff`, the value at
    min_cutoff + beta * |derivative|. Times in seconds; the frequency starts at 30 Hz."""

    min_cutoff: float
    beta: float
    derivate_cutoff: float = 1.0
    frequency: float = 30.0
    last_time: float | None = None
    raw: np.ndarray | None = None
    value: np.ndarray | None = None
    slope: np.ndarray | None = field(default=None, repr=False)

    def _alpha(self, cutoff):
        tau = 1 / (2 * np.pi * cutoff)
        return 1 / (1 + tau * self.frequency)

    def __call__(self, t: float, value: np.ndarray, value_scale: float = 1.0) -> np.ndarray:
        value = np.asarray(value, np.float64)
        if self.last_time is not None and t <= self.last_time:
            return value
        if self.last_time is not None:
            self.frequency = 1 / (t - self.last_time)
        self.last_time = t
        if self.raw is None:
            self.raw, self.value, self.slope = value, value, np.zeros_like(value)
            return value
        d = (value - self.raw) * value_scale * self.frequency
        a = self._alpha(self.derivate_cutoff)
        self.slope = a * d + (1 - a) * self.slope
        a = self._alpha(self.min_cutoff + self.beta * np.abs(self.slope))
        self.raw, self.value = value, a * value + (1 - a) * self.value
        return self.value
