"""Video through an Upscaler: decode → infer → encode in three threads joined by bounded queues.

Inputs:  any file FFmpeg (through PyAV) can read; its first video stream, its first audio stream.
Outputs: H.264 (libx264, yuv420p) in an MP4/MOV/MKV container; audio copied as it is when the
         container takes its codec, re-encoded to AAC otherwise.
Options: max_frames, source_size (decode at another size, as the demo does), crf, preset,
         queue_depth (frames each queue holds: memory stays bounded, a slow stage stalls the
         others instead of piling frames up).

Each stage runs in its own thread, so throughput is that of the slowest stage; FFmpeg's decoder,
scaler and encoder release the GIL, and so do the backends' device calls. The output is written
to OUTPUT.partial and renamed when complete; on any error the partial file is deleted.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av

from tinydl.apps.superres import Summary, Upscaler, partial_output
from tinydl.errors import InvalidInputError, TinyDLError

CONTAINERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska"}
_END = object()


class VideoError(TinyDLError):
    """Encoding or muxing failed (the input was readable)."""


class _Stages:
    """Threads in a chain, each reading the queue before it and writing the one after it.

    The first error stops every stage (queue waits poll a stop event, so nothing blocks forever)
    and is re-raised by `run`. Busy time per stage excludes time spent waiting on queues.
    """

    def __init__(self, depth: int):
        self.depth = depth
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.busy: dict[str, float] = {}

    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _items(self, q: queue.Queue) -> Iterator[Any]:
        while not self.stop.is_set():
            try:
                item = q.get(timeout=0.05)
            except queue.Empty:
                continue
            if item is _END:
                return
            yield item

    def _worker(self, name: str, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 — handed to the caller of run()
            if self.error is None:
                self.error = exc
            self.stop.set()

    def run(
        self,
        source: Callable[[], Iterator[Any]],
        steps: list[tuple[str, Callable]],
        sink: tuple[str, Callable[[Any], None]],
        poll: Callable[[], None],
    ) -> None:
        """source() yields items; each step maps an item to an item; sink consumes them."""
        names = ["decode", *[n for n, _ in steps], sink[0]]
        self.busy = dict.fromkeys(names, 0.0)
        queues = [queue.Queue(self.depth) for _ in range(len(steps) + 1)]

        def first() -> None:
            items = source()
            while True:
                t = time.perf_counter()
                item = next(items, _END)
                self.busy[names[0]] += time.perf_counter() - t
                if item is _END or not self._put(queues[0], item):
                    break
            self._put(queues[0], _END)

        def middle(i: int, fn: Callable) -> Callable[[], None]:
            def body() -> None:
                for item in self._items(queues[i]):
                    t = time.perf_counter()
                    out = fn(item)
                    self.busy[names[i + 1]] += time.perf_counter() - t
                    if not self._put(queues[i + 1], out):
                        return
                self._put(queues[i + 1], _END)

            return body

        def last() -> None:
            for item in self._items(queues[-1]):
                t = time.perf_counter()
                sink[1](item)
                self.busy[names[-1]] += time.perf_counter() - t

        bodies = [first, *[middle(i, fn) for i, (_, fn) in enumerate(steps)], last]
        threads = [
            threading.Thread(target=self._worker, args=(n, b), name=f"superres-{n}", daemon=True)
            for n, b in zip(names, bodies, strict=True)
        ]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                threads[-1].join(0.1)
                poll()
        except BaseException:
            self.stop.set()
            for t in threads:
                t.join()
            raise
        poll()
        if self.error is not None:
            raise self.error


def _open_input(src: Path):
    try:
        container = av.open(str(src))
    except av.FFmpegError as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidInputError(f"{src}: not a readable image or video ({reason})") from None
    if not container.streams.video:
        container.close()
        raise InvalidInputError(f"{src}: has no video stream")
    stream = container.streams.video[0]
    if stream.codec_context is None:  # PyAV leaves it unset when FFmpeg has no decoder
        container.close()
        raise InvalidInputError(
            f"{src}: unsupported video codec (this FFmpeg build has no decoder for it)"
        )
    if not stream.width or not stream.height:
        name = stream.codec_context.name
        container.close()
        raise InvalidInputError(
            f"{src}: the {name} video stream has no picture size (empty or damaged)"
        )
    return container, stream


def upscale_video(
    src: Path,
    dst: Path,
    upscaler: Upscaler,
    progress: bool = True,
    max_frames: int | None = None,
    source_size: tuple[int, int] | None = None,
    crf: int = 18,
    preset: str = "veryfast",
    queue_depth: int = 4,
) -> Summary:
    fmt = CONTAINERS.get(dst.suffix.lower())
    if fmt is None:
        raise InvalidInputError(
            f"{dst}: unsupported video suffix {dst.suffix!r} (expected {', '.join(CONTAINERS)})"
        )
    if max_frames is not None and max_frames < 1:
        raise InvalidInputError(f"max_frames must be at least 1, got {max_frames}")
    inp, vin = _open_input(src)
    try:
        return _transcode(
            inp,
            vin,
            src,
            dst,
            fmt,
            upscaler,
            progress,
            max_frames,
            source_size,
            crf,
            preset,
            queue_depth,
        )
    finally:
        inp.close()


def _transcode(
    inp, vin, src, dst, fmt, upscaler, progress, max_frames, source_size, crf, preset, queue_depth
) -> Summary:
    scale = upscaler.scale
    w_in, h_in = source_size or (vin.width, vin.height)
    # yuv420p needs even sizes: an odd upscaled size loses its last column or row.
    w_out, h_out = (w_in * scale) & ~1, (h_in * scale) & ~1
    notes = []
    if (w_out, h_out) != (w_in * scale, h_in * scale):
        notes.append(f"cropped to {w_out}x{h_out} (H.264 4:2:0 needs even sizes)")
    if source_size:
        notes.append(f"input decoded at {w_in}x{h_in} (from {vin.width}x{vin.height})")
    rate = vin.average_rate or vin.guessed_rate or Fraction(25)
    ain = inp.streams.audio[0] if inp.streams.audio else None
    vin.thread_type = "AUTO"
    expected = vin.frames or None
    if expected and max_frames:
        expected = min(expected, max_frames)
    counts = {"decoded": 0, "encoded": 0}

    with partial_output(dst) as tmp:
        out = av.open(str(tmp), "w", format=fmt)
        try:
            vout = out.add_stream("libx264", rate=rate)
            vout.width, vout.height, vout.pix_fmt = w_out, h_out, "yuv420p"
            vout.codec_context.time_base = vin.time_base or Fraction(1, 1) / rate
            vout.options = {"crf": str(crf), "preset": preset}
            audio = "none"
            aout = None
            copy_audio = False
            if ain is not None:
                name = ain.codec_context.name
                copy_audio = name in out.supported_codecs
                if copy_audio:
                    aout = out.add_stream_from_template(ain)
                    audio = f"{name} copied"
                else:
                    aout = out.add_stream("aac", rate=ain.rate)
                    audio = f"{name} re-encoded to aac"

            def decode() -> Iterator[Any]:
                streams = [vin] if ain is None else [vin, ain]
                size = (
                    {}
                    if source_size is None
                    else {"width": w_in, "height": h_in, "interpolation": "AREA"}
                )
                try:
                    for packet in inp.demux(*streams):
                        if packet.stream is ain:
                            if copy_audio:
                                if packet.dts is not None:
                                    yield ("audio", packet)
                            else:
                                for frame in packet.decode():
                                    yield ("audio", frame)
                            continue
                        for frame in packet.decode():
                            rgb = frame.to_ndarray(format="rgb24", **size)
                            pts, tb = frame.pts, frame.time_base
                            if pts is None:
                                pts, tb = counts["decoded"], 1 / rate
                            counts["decoded"] += 1
                            yield ("video", rgb, pts, tb)
                            if max_frames and counts["decoded"] >= max_frames:
                                return
                except av.FFmpegError as exc:
                    raise InvalidInputError(
                        f"{src}: cannot decode the {vin.codec_context.name} video stream "
                        f"after {counts['decoded']} frame(s): {exc}"
                    ) from None

            def infer(item):
                if item[0] != "video":
                    return item
                _, rgb, pts, tb = item
                return ("video", upscaler(rgb), pts, tb)

            def encode(item) -> None:
                try:
                    if item[0] == "video":
                        _, rgb, pts, tb = item
                        if rgb.shape[:2] != (h_out, w_out):
                            rgb = rgb[:h_out, :w_out].copy()
                        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                        frame.pts, frame.time_base = pts, tb
                        out.mux(vout.encode(frame))
                        counts["encoded"] += 1
                    elif copy_audio:
                        packet = item[1]
                        packet.stream = aout
                        out.mux(packet)
                    else:
                        out.mux(aout.encode(item[1]))
                except av.FFmpegError as exc:
                    raise VideoError(f"{dst}: encoding failed: {exc}") from None

            bar = _progress_bar(progress, expected, f"x{scale} {upscaler.backend}")

            def poll() -> None:
                if bar is not None:
                    bar.update(counts["encoded"] - bar.n)

            stages = _Stages(queue_depth)
            start = time.perf_counter()
            try:
                stages.run(decode, [("infer", infer)], ("encode", encode), poll)
            finally:
                if bar is not None:
                    bar.close()
            if counts["decoded"] == 0:
                raise InvalidInputError(f"{src}: the video has no frames")
            t = time.perf_counter()
            try:
                out.mux(vout.encode(None))
                if aout is not None and not copy_audio:
                    out.mux(aout.encode(None))
            except av.FFmpegError as exc:
                raise VideoError(f"{dst}: encoding failed: {exc}") from None
            stages.busy["encode"] += time.perf_counter() - t
        finally:
            out.close()
        seconds = time.perf_counter() - start
    return Summary(
        str(src),
        str(dst),
        scale,
        upscaler.backend,
        (w_in, h_in),
        (w_out, h_out),
        counts["encoded"],
        seconds,
        dict(stages.busy),
        audio,
        notes,
    )


def _progress_bar(enabled: bool, total: int | None, desc: str):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="frame", dynamic_ncols=True, leave=True)
