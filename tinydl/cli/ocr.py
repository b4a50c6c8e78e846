"""`tinydl ocr`: the text lines of images (PP-OCRv4: detection, direction, recognition)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tinydl.cli.common import _Formatter
from tinydl.errors import InvalidInputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "ocr",
        help="read the text lines of images (PP-OCRv4, as RapidOCR does)",
        formatter_class=_Formatter,
        description="Find and read the text lines of images with PP-OCRv4's detector, "
        "direction classifier and recognizer (the models rapidocr-onnxruntime ships), run as a "
        "pipeline app with RapidOCR's steps and defaults. Prints one JSON object per image, "
        '{"image": path, "lines": [{"box": [[x, y] x 4], "text": ..., "score": ...}]}; an '
        "image without text has no lines. An unreadable image is an error (exit status 2).",
        epilog="examples:\n  tinydl ocr scan.png\n"
        "  tinydl ocr pages/*.png --json lines.json --backends webgpu,cpu\n"
        "  tinydl ocr receipt.jpg -o receipt_ocr.png",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="image files")
    p.add_argument("--json", metavar="OUT", help="write the results to OUT as a JSON list")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="write the image with its lines drawn (several inputs: OUT is a folder, each "
        "image written there as NAME_ocr.png)",
    )
    p.add_argument(
        "--backends",
        "--backend",
        dest="backends",
        default="cpu",
        metavar="NAMES",
        help="backends in priority order, e.g. webgpu,cpu (default: cpu)",
    )
    p.add_argument(
        "--crops",
        choices=("auto", "host", "device"),
        default="auto",
        help="where text lines are cut out and resized for the classifier and recognizer: "
        "host (OpenCV, exactly as RapidOCR), device (tinydl.Warp inside the models' sessions, "
        "so the crops never leave the GPU: one bilinear resampling, which may move a space), "
        "auto (device when the first backend is a GPU one; the default)",
    )
    p.set_defaults(func=cmd_ocr)


def _annotated_paths(inputs: list[str], output: str) -> list[Path]:
    if len(inputs) == 1:
        return [Path(output)]
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"-o {output}: with several inputs, -o names a folder")
    folder.mkdir(parents=True, exist_ok=True)
    return [folder / f"{Path(p).stem}_ocr.png" for p in inputs]


def cmd_ocr(args: argparse.Namespace) -> int:
    from tinydl.apps.ocr import read_text

    annotated = _annotated_paths(args.inputs, args.output) if args.output else None
    found = read_text(
        args.inputs, backends=args.backends, annotate=annotated is not None, crops=args.crops
    )
    results, frames = found if annotated else (found, [])
    for result in results:
        print(json.dumps(result, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(results, ensure_ascii=False, indent=1))
    if annotated:
        from PIL import Image

        for path, frame in zip(annotated, frames, strict=True):
            Image.fromarray(frame.image).save(path)
            print(f"annotated image written to {path}", file=sys.stderr)
    return 0
