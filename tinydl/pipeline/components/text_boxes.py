"""TextBoxes: DB text post-processing, a text-probability map to rotated boxes in frame pixels.

Inputs:  in (Tensor: a DB detector's probability map, (1, 1, H, W), (1, H, W) or (H, W); or a
         Batch of them), image (Frame, or a Batch of them: the frame the map was made from —
         only its size is read) — joined by (flow_id, request_id)
Outputs: out (Quads: one quadrilateral per text region, in the frame's pixels, corners clockwise
         from the top-left, in reading order, with the region's mean probability as its score; a
         Batch in gives a Batch out; no text gives zero quads)
Options: thresh (0.3: a pixel is text above it), box_thresh (0.5: a region's mean probability
         must reach it), max_candidates (1000 contours at most), unclip_ratio (1.6: how far a
         region is grown, as area * ratio / perimeter), use_dilation (True: the text mask is
         dilated by a 2x2 kernel), score_mode ("fast": mean over the box, "slow": over the
         contour), min_size (3 pixels: shorter boxes are dropped), resize (the Inference resize
         policy that made the map, when it was "letterbox ...": its padding is taken off;
         default: the map spans the whole frame)

The steps and their defaults are PP-OCR's DBPostProcess as RapidOCR 1.4.4 runs them:
threshold, dilate, contours (OpenCV), minimum-area rectangle, box score, unclip (pyclipper),
minimum-area rectangle again, scaled to the frame and rounded to whole pixels, corners put in
clockwise order, clipped to the frame, boxes 3 pixels or less across dropped, then sorted top
to bottom and left to right (boxes whose tops are within 10 pixels count as one row). Needs
OpenCV and pyclipper (the `ocr` extra), imported when the component opens.

Example (PP-OCR's detector on frames, boxes for the crops):
    app.add("det", Inference(model="ppocr:det", resize="multiple 32 min 736", color="bgr",
                             mean=0.5, std=0.5))
    app.add("boxes", TextBoxes())
    app.connect("src", ["det", "boxes.image"])
    app.connect("det", "boxes.in")
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinydl.images import resize_policy
from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, Frame, Quads, Tensor, union


def ocr_modules() -> tuple[Any, Any]:
    """OpenCV and pyclipper, or a PipelineError that says how to install them."""
    try:
        import cv2
        import pyclipper
    except ImportError as exc:
        raise PipelineError(
            f"text boxes need OpenCV and pyclipper ({exc.name} is missing): "
            "pip install 'tinydl[ocr]'"
        ) from None
    return cv2, pyclipper


def _mini_box(cv2, contour: np.ndarray) -> tuple[np.ndarray, float]:
    """The minimum-area rectangle's corners (PP-OCR's order) and its shorter side."""
    rect = cv2.minAreaRect(contour)
    p = sorted(list(cv2.boxPoints(rect)), key=lambda q: q[0])
    left = (0, 1) if p[1][1] > p[0][1] else (1, 0)
    right = (2, 3) if p[3][1] > p[2][1] else (3, 2)
    return np.array([p[left[0]], p[right[0]], p[right[1]], p[left[1]]]), min(rect[1])


def _box_score(cv2, pred: np.ndarray, poly: np.ndarray) -> float:
    """Mean probability inside a polygon (the map cut to the polygon's bounding box)."""
    h, w = pred.shape
    x0 = int(np.clip(np.floor(poly[:, 0].min()), 0, w - 1))
    x1 = int(np.clip(np.ceil(poly[:, 0].max()), 0, w - 1))
    y0 = int(np.clip(np.floor(poly[:, 1].min()), 0, h - 1))
    y1 = int(np.clip(np.ceil(poly[:, 1].max()), 0, h - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    cv2.fillPoly(mask, (poly - [x0, y0]).reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(pred[y0 : y1 + 1, x0 : x1 + 1], mask)[0]


def _unclip(pyclipper, box: np.ndarray, ratio: float) -> np.ndarray:
    """The box grown by area * ratio / perimeter, with round joins."""
    x, y = box[:, 0].astype(np.float64), box[:, 1].astype(np.float64)
    area = 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))
    length = np.hypot(*(box - np.roll(box, -1, axis=0)).T.astype(np.float64)).sum()
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return np.array(offset.Execute(area * ratio / length)).reshape(-1, 1, 2)


def _clockwise(box: np.ndarray) -> np.ndarray:
    """Corners as top-left, top-right, bottom-right, bottom-left (by x, then y in each half)."""
    by_x = box[np.argsort(box[:, 0])]
    left, right = by_x[:2], by_x[2:]
    tl, bl = left[np.argsort(left[:, 1])]
    tr, br = right[np.argsort(right[:, 1])]
    return np.array([tl, tr, br, bl], np.float32)


def reading_order(boxes: list[np.ndarray]) -> list[int]:
    """Indices of boxes sorted top to bottom, then left to right within a row (tops within 10
    pixels), as PP-OCR's sorted_boxes does: a stable sort by (top, left), then neighbours in a
    row swapped into x order."""
    order = sorted(range(len(boxes)), key=lambda i: (boxes[i][0][1], boxes[i][0][0]))
    for i in range(len(order) - 1):
        for j in range(i, -1, -1):
            a, b = boxes[order[j]][0], boxes[order[j + 1]][0]
            if abs(b[1] - a[1]) < 10 and b[0] < a[0]:
                order[j], order[j + 1] = order[j + 1], order[j]
            else:
                break
    return order


class TextBoxes(Component):
    """Rotated text boxes from a DB probability map, in the pixels of the frame it came from."""

    inputs = {"in": union(Tensor, Batch[Tensor]), "image": union(Frame, Batch[Frame])}
    outputs = {"out": union(Quads, Batch[Quads])}

    def __init__(
        self,
        thresh: float = 0.3,
        box_thresh: float = 0.5,
        max_candidates: int = 1000,
        unclip_ratio: float = 1.6,
        use_dilation: bool = True,
        score_mode: str = "fast",
        min_size: int = 3,
        resize: str | None = None,
    ):
        if score_mode not in ("fast", "slow"):
            raise PipelineError(f"TextBoxes: score_mode is 'fast' or 'slow', got {score_mode!r}")
        self.thresh, self.box_thresh, self.max_candidates = thresh, box_thresh, max_candidates
        self.unclip_ratio, self.use_dilation, self.score_mode = (
            unclip_ratio,
            use_dilation,
            score_mode,
        )
        self.min_size = min_size
        self.resize = None if resize is None else resize_policy(resize)

    def output_types(self, input_types):
        batched = isinstance(input_types["in"], type) and issubclass(input_types["in"], Batch)
        return {"out": Batch[Quads] if batched else Quads}

    def open(self, ctx):
        self.cv2, self.pyclipper = ocr_modules()

    def boxes(self, prob: np.ndarray, height: int, width: int) -> Quads:
        """The text boxes of one probability map, for a frame of height x width pixels."""
        cv2 = self.cv2
        pred = np.asarray(prob, np.float32)
        pred = pred.reshape(pred.shape[-2:])
        mh, mw = pred.shape
        inner_w, inner_h, left, top = mw, mh, 0, 0
        if self.resize is not None:
            fit = self.resize.fit(height, width)
            if (fit.height, fit.width) != (mh, mw):
                raise PipelineError(
                    f"TextBoxes: a {mh}x{mw} map, but the resize policy makes "
                    f"{fit.height}x{fit.width} for a {height}x{width} frame"
                )
            inner_w, inner_h, left, top = fit.inner_width, fit.inner_height, fit.left, fit.top
        mask = (pred > self.thresh).astype(np.uint8)
        if self.use_dilation:
            mask = cv2.dilate(mask, np.ones((2, 2), np.uint8))
        contours = cv2.findContours(mask * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)[-2]
        found, scores = [], []
        for contour in contours[: self.max_candidates]:
            points, side = _mini_box(cv2, contour)
            if side < self.min_size:
                continue
            poly = points if self.score_mode == "fast" else contour.reshape(-1, 2)
            score = _box_score(cv2, pred, poly)
            if score < self.box_thresh:
                continue
            box, side = _mini_box(cv2, _unclip(self.pyclipper, points, self.unclip_ratio))
            if side < self.min_size + 2:
                continue
            # To frame pixels in float32 and in PP-OCR's order of operations (the same rounding).
            box[:, 0] = np.clip(np.round((box[:, 0] - left) / inner_w * width), 0, width)
            box[:, 1] = np.clip(np.round((box[:, 1] - top) / inner_h * height), 0, height)
            box = _clockwise(box.astype(np.int32))
            box = np.minimum(box, [width - 1, height - 1]).astype(np.float32)
            if min(int(np.linalg.norm(box[0] - box[i])) for i in (1, 3)) <= 3:
                continue
            found.append(box)
            scores.append(score)
        order = reading_order(found)
        return Quads(
            np.array([found[i] for i in order], np.float32).reshape(-1, 4, 2),
            np.array([scores[i] for i in order], np.float32),
        )

    def _one(self, prob: Any, frame: Any) -> Quads:
        if not isinstance(prob, Tensor) or not isinstance(frame, Frame):
            raise PipelineError(
                f"TextBoxes: expected a Tensor and a Frame, got {type(prob).__name__} and "
                f"{type(frame).__name__}"
            )
        data = np.asarray(prob.data)
        if data.ndim < 2 or data.size != data.shape[-1] * data.shape[-2]:
            raise PipelineError(f"TextBoxes: expected one (H, W) probability map, got {data.shape}")
        return self.boxes(data, frame.height, frame.width)

    def process(self, ctx, inputs):
        prob, image = inputs["in"].payload, inputs["image"].payload
        if isinstance(prob, Batch) != isinstance(image, Batch) or (
            isinstance(prob, Batch) and len(prob) != len(image)
        ):
            raise PipelineError("TextBoxes: in and image must both be single or same-size batches")
        if isinstance(prob, Batch):
            quads = [
                self._one(p, f) for p, f in zip(prob.payloads(), image.payloads(), strict=True)
            ]
            return {"out": Batch([p.derive(q) for p, q in zip(prob.items, quads, strict=True)])}
        return {"out": self._one(prob, image)}
