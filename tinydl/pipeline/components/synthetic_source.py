"""SyntheticSource: generated frames at a set rate — a source for tests and benchmarks.

Inputs:  none (a source)
Outputs: out (Frame) — HxWx3 uint8 RGB (or `format`), a gradient shifted by the frame number,
         so frame i's pixel (0, 0) is i % 256
Options: count (int, 100; None = endless until the app stops), fps (float, 0 = as fast as
         downstream takes them), width (64), height (48), format ("rgb")

Example:
    app.add("cam", SyntheticSource(count=300, fps=30, width=320, height=240))
"""

from __future__ import annotations

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.packet import Frame


class SyntheticSource(Component):
    """Frames of a moving gradient, `count` of them at `fps` (0: unpaced)."""

    inputs: dict = {}
    outputs = {"out": Frame}

    def __init__(
        self,
        count: int | None = 100,
        fps: float = 0.0,
        width: int = 64,
        height: int = 48,
        format: str = "rgb",
    ):
        self.count, self.fps, self.format = count, fps, format
        self.width, self.height = width, height

    def open(self, ctx):
        y, x = np.mgrid[0 : self.height, 0 : self.width]
        self.base = np.stack([x, y, x + y], axis=-1).astype(np.uint8)
        self.index = 0
        self.start = ctx.now_ns()

    def process(self, ctx, inputs):
        if self.count is not None and self.index >= self.count:
            return None
        image = ctx.empty(self.base.shape, np.uint8)  # shared memory where workers read it
        np.add(self.base, np.uint8(self.index % 256), out=image)  # wraps like a uint8 counter
        frame = Frame(image, self.format, pts=self.index / self.fps if self.fps else None)
        self.index += 1
        if self.fps:
            ctx.request_tick((self.start + self.index * 1e9 / self.fps - ctx.now_ns()) / 1e9)
        return {"out": frame}
