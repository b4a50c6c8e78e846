"""Run the superres4 example app: ESPCN x2 on four streams of a bundled clip at once (one batch
of four per frame number, GroupByRequest -> Inference -> SplitByFlow), four H.264 files out.

    python examples/apps/superres4.py                       # the YAML form
    python examples/apps/superres4.py --md --frames 8 --trace trace.json

It uses the shipped tinydl/models/espcn_x2.tdl. An install without it gets the same network
with random weights, said loudly: the pipeline runs the same, the pictures are noise. The app
itself is superres4.yaml (or superres4.md); `tinydl pipeline run` runs either directly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import tinydl as td
from tinydl.models import espcn_graph, espcn_path
from tinydl.pipeline.config import load_app

HERE = Path(__file__).resolve().parent


def espcn_x2(folder: Path) -> Path:
    """The shipped ESPCN x2, or one with random weights written to `folder`."""
    path = espcn_path(2)
    if path.exists():
        return path
    print(f"warning: {path} is not there; using ESPCN x2 with RANDOM weights", file=sys.stderr)
    rng = np.random.default_rng(0)
    layers = [
        (
            rng.standard_normal((co, ci, k, k)).astype(np.float32) / np.sqrt(ci * k * k),
            rng.standard_normal(co).astype(np.float32) * 0.1,
        )
        for ci, co, k in [(1, 64, 5), (64, 32, 3), (32, 4, 3)]
    ]
    path = folder / "espcn_x2_random.tdl"
    td.save(espcn_graph(layers, 2), path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", action="store_true", help="load the Markdown form of the app")
    ap.add_argument("--frames", type=int, default=24, help="frames per stream (default: 24)")
    ap.add_argument("--width", type=int, default=320, help="decode width (default: 320)")
    ap.add_argument("--backends", default="cpu", help="backends in priority order (cpu)")
    ap.add_argument("--out", default="out", help="folder for the four videos (default: out)")
    ap.add_argument("--trace", metavar="PATH", help="write a Chrome/Perfetto trace")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        app = load_app(
            HERE / ("superres4.md" if args.md else "superres4.yaml"),
            {
                "model": str(espcn_x2(Path(tmp))),
                "frames": args.frames,
                "width": args.width,
                "backends": args.backends,
                "out": args.out,
            },
        )
        app.help()
        report = app.run(trace=args.trace)
    print(report)
    print(f"videos: {args.out}/superres4_{{0,1,2,3}}.mp4")
    return 0 if report.balanced and not report.errored else 1


if __name__ == "__main__":
    sys.exit(main())
