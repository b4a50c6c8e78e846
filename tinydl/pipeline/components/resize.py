"""Resize: scale frames to a size (tinydl's Resize op reference: half-pixel, separable).

Inputs:  in (Frame, or Batch[Frame]: each frame resized)
Outputs: out (same kind as the input)
Options: width, height (int; give one to keep the aspect ratio), mode ("linear" | "nearest" |
         "cubic")

Example:
    app.add("small", Resize(width=320))            # 1280x720 -> 320x180
"""

from __future__ import annotations

from dataclasses import replace

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import FrameOrBatch, map_frames

from ._image import RESIZE_MODES, resize


class Resize(Component):
    """Frames scaled to width x height."""

    inputs = {"in": FrameOrBatch}
    outputs = {"out": FrameOrBatch}

    def __init__(self, width: int | None = None, height: int | None = None, mode: str = "linear"):
        if width is None and height is None:
            raise PipelineError("Resize: give width, height or both")
        if mode not in RESIZE_MODES:
            raise PipelineError(f"Resize: mode must be one of {RESIZE_MODES}, got {mode!r}")
        self.width, self.height, self.mode = width, height, mode

    def _one(self, frame):
        h, w = frame.image.shape[:2]
        width = self.width or max(1, round(w * self.height / h))
        height = self.height or max(1, round(h * self.width / w))
        return replace(frame, image=resize(frame.image, width, height, self.mode))

    def process(self, ctx, inputs):
        return {"out": map_frames(inputs["in"].payload, self._one)}
