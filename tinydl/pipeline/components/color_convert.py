"""ColorConvert: change frames' color format: rgb, bgr, gray, ycbcr (BT.601 full range).

Inputs:  in (Frame, or Batch[Frame]) — the frame's own `format` says what it is
Outputs: out (same kind as the input), in format `to`
Options: to ("rgb" | "bgr" | "gray" | "ycbcr")

Example:
    app.add("ycc", ColorConvert(to="ycbcr"))       # ESPCN works on the Y channel
"""

from __future__ import annotations

from dataclasses import replace

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import COLOR_FORMATS, FrameOrBatch, map_frames

from ._image import convert


class ColorConvert(Component):
    """Frames converted to color format `to`."""

    inputs = {"in": FrameOrBatch}
    outputs = {"out": FrameOrBatch}

    def __init__(self, to: str = "rgb"):
        if to not in COLOR_FORMATS:
            raise PipelineError(f"ColorConvert: 'to' must be one of {COLOR_FORMATS}, got {to!r}")
        self.to = to

    def _one(self, frame):
        return replace(frame, image=convert(frame.image, frame.format, self.to), format=self.to)

    def process(self, ctx, inputs):
        return {"out": map_frames(inputs["in"].payload, self._one)}
