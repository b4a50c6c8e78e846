"""Crop: cut a fixed rectangle out of frames (a view: no pixels are copied).

Inputs:  in (Frame, or Batch[Frame])
Outputs: out (same kind as the input)
Options: x, y (int, top-left corner), width, height (int)

Example:
    app.add("roi", Crop(x=100, y=50, width=256, height=256))
"""

from __future__ import annotations

from dataclasses import replace

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import FrameOrBatch, map_frames


class Crop(Component):
    """The rectangle (x, y, width, height) of each frame."""

    inputs = {"in": FrameOrBatch}
    outputs = {"out": FrameOrBatch}

    def __init__(self, x: int, y: int, width: int, height: int):
        if min(x, y) < 0 or min(width, height) < 1:
            raise PipelineError(f"Crop: bad rectangle x={x} y={y} width={width} height={height}")
        self.x, self.y, self.width, self.height = x, y, width, height

    def _one(self, frame):
        h, w = frame.image.shape[:2]
        if self.x + self.width > w or self.y + self.height > h:
            raise PipelineError(
                f"Crop: rectangle {self.x},{self.y} {self.width}x{self.height} "
                f"does not fit a {w}x{h} frame"
            )
        return replace(
            frame, image=frame.image[self.y : self.y + self.height, self.x : self.x + self.width]
        )

    def process(self, ctx, inputs):
        return {"out": map_frames(inputs["in"].payload, self._one)}
