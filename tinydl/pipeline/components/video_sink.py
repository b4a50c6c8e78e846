"""VideoSink: encode frames into a video file with PyAV (H.264 by default).

Inputs:  in (Frame) — any color format (converted to RGB); frames must keep one size
Outputs: none (a sink)
Options: path (str; "{flow}" and "{instance}" are filled in, e.g. "out/stream{flow}.mp4"),
         fps (float, 25), codec ("libx264"), crf (int, 23: quality, lower is better),
         pix_fmt ("yuv420p"; odd frame sizes are cropped to even)

Frames are written in arrival order: put a `collect=True` edge in front when it comes from
several instances. Needs `pip install av` (the `video` extra).

Example:
    app.add("save", VideoSink("out/sr_{flow}.mp4", fps=25))
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Frame

from ._image import convert


class VideoSink(Component):
    """Frames written to a video file (PyAV/FFmpeg)."""

    inputs = {"in": Frame}
    outputs: dict = {}

    def __init__(
        self,
        path: str,
        fps: float = 25.0,
        codec: str = "libx264",
        crf: int = 23,
        pix_fmt: str = "yuv420p",
    ):
        self.path, self.fps, self.codec, self.crf, self.pix_fmt = path, fps, codec, crf, pix_fmt

    def open(self, ctx):
        try:
            import av
        except ImportError:
            raise PipelineError("VideoSink needs PyAV: pip install av") from None
        self.av = av
        self.instance = ctx.instance
        self.container = None
        self.frames = 0

    def _start(self, flow: int, width: int, height: int):
        from fractions import Fraction

        self.file = Path(self.path.format(flow=flow, instance=self.instance))
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self.container = self.av.open(str(self.file), "w")
        rate = Fraction(self.fps).limit_denominator(1001)
        self.stream = self.container.add_stream(self.codec, rate=rate)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = self.pix_fmt
        self.stream.options = {"crf": str(self.crf)} if "264" in self.codec else {}

    def process(self, ctx, inputs):
        packet = inputs["in"]
        frame = packet.payload
        rgb = convert(frame.image, frame.format, "rgb")
        if rgb.dtype != np.uint8:
            rgb = np.clip(np.rint(rgb * 255), 0, 255).astype(np.uint8)
        if self.pix_fmt == "yuv420p":
            rgb = rgb[: rgb.shape[0] // 2 * 2, : rgb.shape[1] // 2 * 2]
        if self.container is None:
            self._start(packet.flow_id, rgb.shape[1], rgb.shape[0])
        if rgb.shape[:2] != (self.stream.height, self.stream.width):
            raise PipelineError(
                f"VideoSink {self.file}: frame size {rgb.shape[1]}x{rgb.shape[0]}"
                f" differs from the first frame's "
                f"{self.stream.width}x{self.stream.height}"
            )
        video = self.av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        video.pts = self.frames
        self.frames += 1
        for p in self.stream.encode(video):
            self.container.mux(p)
        return None

    def close(self, ctx):
        if self.container is not None:
            for p in self.stream.encode():
                self.container.mux(p)
            self.container.close()
            self.container = None
