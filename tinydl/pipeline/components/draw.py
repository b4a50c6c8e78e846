"""Draw: boxes, rotated quads (text lines), points (and mesh edges) or text onto a frame.

Inputs:  image (Frame, RGB/BGR/gray uint8), overlay (Rects, Quads, Landmarks or Text) — joined
         by (flow_id, request_id), so both must come from the same frame
Outputs: out (Frame) — a copy of the image with the overlay drawn; labels (a Rects' or a Quads'
         text) are written at the top-left corner of their box, on a filled background
Options: color (RGB triple, (255, 0, 0)), width (int, line width, 2), radius (int, point
         radius, 2), font_size (int, 12: labels' size with Pillow's default font)

Needs Pillow (the `image` extra).

Example:
    app.add("draw", Draw(color=(0, 255, 0)))
    app.connect("cam", ["detect", "draw.image"])   # fan-out: the frame to both
    app.connect("detect", "draw.overlay")
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.packet import Frame, Landmarks, Quads, Rects, Text

from .pose import Poses


class Draw(Component):
    """A frame with rectangles, points or text drawn on it."""

    inputs = {"image": Frame, "overlay": (Rects, Quads, Landmarks, Text)}
    outputs = {"out": Frame}

    def __init__(
        self,
        color: tuple[int, int, int] = (255, 0, 0),
        width: int = 2,
        radius: int = 2,
        font_size: int = 12,
    ):
        self.color, self.width, self.radius = tuple(color), width, radius
        self.font_size = font_size

    def open(self, ctx):
        from PIL import Image, ImageDraw, ImageFont

        self.Image, self.ImageDraw = Image, ImageDraw
        self.font = ImageFont.load_default(self.font_size)

    def _label(self, pen, xy: tuple[float, float], text: str, color) -> None:
        """Text on a filled box of the line color, so it reads on any background."""
        box = pen.textbbox(xy, text, font=self.font)
        pen.rectangle(box, fill=color)
        pen.text(xy, text, font=self.font, fill=0 if isinstance(color, int) else (255,) * 3)

    def process(self, ctx, inputs):
        frame, overlay = inputs["image"].payload, inputs["overlay"].payload
        image = self.Image.fromarray(np.ascontiguousarray(frame.image))
        color = self.color[::-1] if frame.format == "bgr" else self.color
        if image.mode == "L":
            color = int(np.dot(self.color, (0.299, 0.587, 0.114)))
        pen = self.ImageDraw.Draw(image)
        if isinstance(overlay, Rects):
            for box in np.asarray(overlay.boxes, np.float64).reshape(-1, 4):
                pen.rectangle([float(v) for v in box], outline=color, width=self.width)
            for label, box in zip(
                overlay.labels or [], np.asarray(overlay.boxes).reshape(-1, 4), strict=False
            ):
                pen.text((float(box[0]) + 2, float(box[1]) + 2), str(label), fill=color)
        elif isinstance(overlay, Quads):
            quads = np.asarray(overlay.points, np.float64).reshape(-1, 4, 2)
            for quad in quads:
                pen.polygon([tuple(p) for p in quad], outline=color, width=self.width)
            for label, quad in zip(overlay.labels or [], quads, strict=False):
                x, y = quad[0]
                self._label(pen, (x, max(0.0, y - self.font_size - 2)), str(label), color)
        elif isinstance(overlay, Landmarks):
            points = np.asarray(overlay.points, np.float64).reshape(len(overlay.points), -1)
            for a, b in [] if overlay.edges is None else np.asarray(overlay.edges).reshape(-1, 2):
                pen.line(
                    [tuple(points[a, :2]), tuple(points[b, :2])],
                    fill=color,
                    width=max(1, self.width // 2),
                )
            r = self.radius
            for x, y in points[:, :2]:
                pen.ellipse([x - r, y - r, x + r, y + r], fill=color)
        else:
            pen.text(overlay.position or (4, 4), overlay.text, fill=color)
        return {"out": replace(frame, image=np.asarray(image))}


# MediaPipe Pose's skeleton (solutions/pose_connections.py): pairs of landmark indices.
POSE_EDGES = np.array(
    [(0, 1), (1, 2), (2, 3), (3, 7), (0, 4), (4, 5), (5, 6), (6, 8), (9, 10), (11, 12)]
    + [(11, 13), (13, 15), (15, 17), (15, 19), (15, 21), (17, 19), (12, 14), (14, 16), (16, 18)]
    + [(16, 20), (16, 22), (18, 20), (11, 23), (12, 24), (23, 24), (23, 25), (24, 26), (25, 27)]
    + [(26, 28), (27, 29), (28, 30), (29, 31), (30, 32), (27, 31), (28, 32)]
)


class DrawPose(Draw):
    """A frame with each person's skeleton drawn (Poses from the pose components): the
    landmarks whose visibility is at least `min_visibility` and the edges between them.

    Inputs:  image (Frame), overlay (Poses) — joined by frame
    Outputs: out (Frame)
    Options: color, width, radius (as Draw), min_visibility (0.5)
    """

    inputs = {"image": Frame, "overlay": Poses}

    def __init__(
        self,
        color: tuple[int, int, int] = (0, 255, 0),
        width: int = 2,
        radius: int = 3,
        min_visibility: float = 0.5,
    ):
        super().__init__(color, width, radius)
        self.min_visibility = min_visibility

    def process(self, ctx, inputs):
        frame, poses = inputs["image"].payload, inputs["overlay"].payload
        size = np.array([frame.width, frame.height], np.float64)
        out = frame
        for person in poses.landmarks:
            seen = person[:, 3] >= self.min_visibility
            index = np.cumsum(seen) - 1  # landmark -> its row among the seen ones
            edges = index[POSE_EDGES[seen[POSE_EDGES].all(axis=1)]]
            points = person[seen, :2] * size
            overlay = {"image": inputs["image"].derive(out)}
            overlay["overlay"] = inputs["overlay"].derive(Landmarks(points, edges))
            out = super().process(ctx, overlay)["out"]
        return {"out": out}
