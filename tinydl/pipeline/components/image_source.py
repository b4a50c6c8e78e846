"""ImageSource: image files (PNG, JPEG, ...) as Frames, read with Pillow (tinydl.images).

Inputs:  none (a source)
Outputs: out (Frame) — HxWx3 uint8 RGB (or HxW for format "gray"); `pts` i / fps seconds
         with `fps` set, else None
Options: paths (a list of files, or one glob pattern such as "images/*.png"), repeat (int, 1:
         how many times to go through the list), format ("rgb" | "gray"), fps (float: the rate
         the images are frames of, e.g. an extracted clip; it sets timestamps only, frames are
         read as fast as downstream takes them), flow_id (int)

Needs Pillow (the `image` extra).

Example:
    app.add("photos", ImageSource("tests/data/*.png", repeat=10))
    app.add("clip", ImageSource("frames/*.png", fps=25))   # frame i at i / 25 s
"""

from __future__ import annotations

import glob

from tinydl.images import read_image
from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Frame


class ImageSource(Component):
    """Frames read from image files, in order, `repeat` times."""

    inputs: dict = {}
    outputs = {"out": Frame}

    def __init__(
        self,
        paths: str | list[str],
        repeat: int = 1,
        format: str = "rgb",
        fps: float | None = None,
        flow_id: int | None = None,
    ):
        if format not in ("rgb", "gray"):
            raise PipelineError("ImageSource: format must be 'rgb' or 'gray'")
        if fps is not None and not fps > 0:
            raise PipelineError(f"ImageSource: fps must be positive, got {fps!r}")
        self.paths, self.repeat, self.format, self.flow_id = paths, repeat, format, flow_id
        self.fps = fps

    def open(self, ctx):
        files = sorted(glob.glob(self.paths)) if isinstance(self.paths, str) else list(self.paths)
        if not files:
            raise PipelineError(f"ImageSource: no files match {self.paths!r}")
        self.files = files
        self.index = 0
        if self.flow_id is not None:
            ctx.flow_id = self.flow_id

    def process(self, ctx, inputs):
        if self.index >= len(self.files) * self.repeat:
            return None
        path = self.files[self.index % len(self.files)]
        pts = None if self.fps is None else self.index / self.fps
        self.index += 1
        image = read_image(path, 1 if self.format == "gray" else 3)
        if self.format == "gray":
            image = image[..., 0]
        return {"out": Frame(image, self.format, pts)}
