"""Images/s of `tinydl ocr` against RapidOCR (rapidocr-onnxruntime 1.4.4, default settings) on the
same CPU in the same run, over scikit-image's page and the pages tests/helpers/text_images.py
renders (varied fonts and sizes, a photo background, slight rotation).

    python tools/bench_ocr.py [--repeat 3] [--backends cpu] [--group 4]

Both read the same PNG files. Models are loaded and warmed up before timing on both sides; tinydl
runs the pipeline app (tinydl.apps.ocr.ocr_app) with its sessions compiled once, RapidOCR reads
the images one by one as its API does. Also prints how many of RapidOCR's lines tinydl read the
same (box IoU >= 0.5 and equal text).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.text_images import matched, text_images  # noqa: E402

import tinydl as td  # noqa: E402
from tinydl.apps.ocr import ocr_app  # noqa: E402
from tinydl.pipeline.components.inference import resolve_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="passes over the images (default: 3)")
    ap.add_argument("--backends", default="cpu", help="tinydl backends (default: cpu)")
    ap.add_argument("--group", type=int, default=4, help="images whose crops are read together")
    args = ap.parse_args()

    from PIL import Image
    from rapidocr_onnxruntime import RapidOCR

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, image in text_images():
            paths.append(str(Path(tmp) / f"{name}.png"))
            Image.fromarray(image).save(paths[-1])
        n = len(paths) * args.repeat

        engine = RapidOCR()
        reference = []
        for path in paths:  # warm-up, and the lines to compare with
            result, _ = engine(path)
            reference.append([{"box": b, "text": t} for b, t, _ in result or []])
        start = time.perf_counter()
        for _ in range(args.repeat):
            for path in paths:
                engine(path)
        theirs = time.perf_counter() - start

        sessions = {
            k: td.compile(resolve_model(f"ppocr:{k}"), backends=args.backends)
            for k in ("det", "cls", "rec")
        }
        app, lines, _ = ocr_app(paths, args.backends, group=args.group, models=sessions)
        app.run()  # warm-up: every input shape seen once
        ours = lines.results
        app, _, _ = ocr_app(
            paths, args.backends, group=args.group, models=sessions, repeat=args.repeat
        )
        start = time.perf_counter()
        report = app.run()
        mine = time.perf_counter() - start
        if not report.balanced or report.errored:
            print(report)
            return 1

    total = sum(len(r) for r in reference)
    same = sum(matched(r, o["lines"]) for r, o in zip(reference, ours, strict=True))
    print(f"{len(paths)} images x {args.repeat} passes, {os.cpu_count()} CPU cores (shared)")
    print(f"RapidOCR 1.4.4      {n / theirs:6.2f} images/s  ({theirs / n * 1e3:7.1f} ms/image)")
    print(
        f"tinydl ocr ({args.backends:<5}) {n / mine:6.2f} images/s  ({mine / n * 1e3:7.1f} "
        f"ms/image), {same}/{total} of RapidOCR's lines read the same"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
