"""Images/s of `tinydl ocr` against RapidOCR (rapidocr-onnxruntime 1.4.4, default settings) on the
same CPU in the same run, over scikit-image's page and the pages tests/helpers/text_images.py
renders (varied fonts and sizes, a photo background, slight rotation).

    python tools/bench_ocr.py [--repeat 3] [--backends cpu] [--group 4] [--crops auto]
        [--streams 1,4]

Both read the same PNG files. Models are loaded and warmed up before timing on both sides; tinydl
runs the pipeline app (tinydl.apps.ocr.ocr_app) with its sessions compiled once
(tinydl.apps.ocr.ocr_sessions), RapidOCR reads the images one by one as its API does. With
several --streams values, the app runs once per value with that many sources reading the images
(each its own flow; crops of up to --group frames recognized together). Also prints how many of
RapidOCR's lines tinydl read the same (box IoU >= 0.5 and equal text; and equal but for spaces).
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

from tinydl.apps.ocr import ocr_app, ocr_sessions  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="passes over the images (default: 3)")
    ap.add_argument("--backends", default="cpu", help="tinydl backends (default: cpu)")
    ap.add_argument("--group", type=int, default=4, help="images whose crops are read together")
    ap.add_argument("--crops", default="auto", choices=("auto", "host", "device"))
    ap.add_argument("--streams", default="1", help="comma-separated source counts (default: 1)")
    args = ap.parse_args()
    streams = [int(v) for v in args.streams.split(",")]

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

        sessions = ocr_sessions(args.backends, args.crops)
        kw = {"group": args.group, "models": sessions, "crops": args.crops}
        app, lines, _ = ocr_app(paths, args.backends, **kw)
        app.run()  # warm-up: every input shape seen once
        ours = lines.results
        rates = {}
        for count in streams:
            app, _, _ = ocr_app(paths, args.backends, repeat=args.repeat, streams=count, **kw)
            start = time.perf_counter()
            report = app.run()
            rates[count] = count * n / (time.perf_counter() - start)
            if not report.balanced or report.errored:
                print(report)
                return 1

    total = sum(len(r) for r in reference)
    pairs = list(zip(reference, ours, strict=True))
    same = sum(matched(r, o["lines"]) for r, o in pairs)
    loose = sum(matched(nospace(r), nospace(o["lines"])) for r, o in pairs)
    print(f"{len(paths)} images x {args.repeat} passes, {os.cpu_count()} CPU cores")
    print(f"RapidOCR 1.4.4 (CPU): {n / theirs:7.2f} images/s ({theirs / n * 1e3:7.1f} ms/image)")
    for count, rate in rates.items():
        print(
            f"tinydl ocr ({args.backends}, crops {args.crops}, {count} stream(s)): "
            f"{rate:7.2f} images/s = {rate / (n / theirs):.2f}x RapidOCR"
        )
    print(f"lines read as RapidOCR reads them: {same}/{total} (equal but for spaces: {loose})")
    return 0


def nospace(lines: list[dict]) -> list[dict]:
    return [dict(line, text=line["text"].replace(" ", "")) for line in lines]


if __name__ == "__main__":
    sys.exit(main())
