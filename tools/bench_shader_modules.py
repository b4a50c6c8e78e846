"""How long the webgpu backend's shader modules of a model take to make (naga reading and
checking the WGSL, what a warm start repeats for every pipeline), on one thread.

    python tools/bench_shader_modules.py --models resnet18,mobilenet_v3_small
    python tools/bench_shader_modules.py --models densenet121 --rounds 3

Each model is compiled once on webgpu (the session cache off), the WGSL of every pipeline it
asked for recorded, then every module made again `--rounds` times on the calling thread:
shaders, bytes of WGSL and ms per round. Models are ONNX files in `--onnx-dir`, built with
seeded random weights by tools/zoo.py where missing (as tools/bench_coldstart.py does).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="resnet18,mobilenet_v3_small", help="comma-separated")
    ap.add_argument("--onnx-dir", type=Path, default=Path(".zoo"), help="exported models")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    args = ap.parse_args(argv)
    os.environ["TINYDL_SESSION_CACHE"] = "off"
    sys.path.insert(0, str(ROOT / "tools"))
    from bench_coldstart import model_path

    import tinydl as td
    from tinydl.backends.webgpu.context import get_context

    ctx = get_context()
    sources: list[str] = []
    made = ctx._cached

    def recording(source, what, make, extra=""):
        sources.append(source)
        return made(source, what, make, extra)

    ctx._cached = recording
    args.onnx_dir.mkdir(parents=True, exist_ok=True)
    print("| model | shaders | KB of WGSL | ms per round |")
    print("|---|---:|---:|---|")
    for name in args.models.split(","):
        sources.clear()
        td.compile(model_path(name, args.onnx_dir), backends=("webgpu",), strict=True)
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for source in sources:
                ctx.device.create_shader_module(code=source)
            times.append((time.perf_counter() - t0) * 1e3)
        kb = sum(len(s) for s in sources) / 1e3
        rounds = ", ".join(f"{t:.1f}" for t in times)
        print(f"| {name} | {len(sources)} | {kb:.0f} | {rounds} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
