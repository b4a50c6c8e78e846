"""GPU time of the cuda backend's generic convolution kernels against the layers' own.

    python tools/bench_cuda_generic.py --models resnet18,mobilenet_v3_small
    python tools/bench_cuda_generic.py --models resnet18 --precisions fp16 --runs 200

A cold start runs generic tensor-core convolution kernels (every extent an argument, compiled
for a short compile) until each layer's own kernel is compiled (backend option
"generic_kernels"). This compiles each model twice in one process, generic_kernels "only" and
"off", checks that their outputs agree, and times CUDA-graph replays of both with the input on
the GPU, rounds alternated: median ms per run and the ratio. Models are ONNX files in
`--onnx-dir`, built with seeded random weights by tools/zoo.py where missing (as
tools/bench_coldstart.py does).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="resnet18,mobilenet_v3_small", help="comma-separated")
    ap.add_argument("--precisions", default="fp32,fp16", help="comma-separated")
    ap.add_argument("--onnx-dir", type=Path, default=Path(".zoo"), help="exported models")
    ap.add_argument("--runs", type=int, default=100, help="replays per round (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, alternated (default 5)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tools"))
    import cupy as cp
    from bench_coldstart import model_path

    import tinydl as td

    args.onnx_dir.mkdir(parents=True, exist_ok=True)
    print("| model | precision | own kernels ms | generic kernels ms | generic / own | rel diff |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        path = model_path(name, args.onnx_dir)
        model = td.load(path)
        (spec,) = model.inputs
        dims = enumerate(spec.shape)
        shape = [d if isinstance(d, int) else 1 if i == 0 else 224 for i, d in dims]
        x = cp.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
        for precision in args.precisions.split(","):
            sessions = {
                mode: td.compile(
                    model, backends=("cuda",), precision=precision, strict=True,
                    backend_options={"cuda": {"generic_kernels": mode}},
                )
                for mode in ("off", "only")
            }  # fmt: skip
            outs = {}
            for mode, sess in sessions.items():
                for _ in range(3):  # the first run launches; then a graph is captured, replayed
                    out = next(iter(sess.run({spec.name: x}).values()))
                outs[mode] = cp.asnumpy(out) if isinstance(out, cp.ndarray) else np.asarray(out)
            scale = float(np.abs(outs["off"]).max()) or 1.0
            diff = float(np.abs(outs["off"] - outs["only"]).max()) / scale
            times: dict[str, list[float]] = {mode: [] for mode in sessions}
            for _ in range(args.rounds):
                for mode, sess in sessions.items():
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    for _ in range(args.runs):
                        sess.run({spec.name: x})
                    cp.cuda.Device().synchronize()
                    times[mode].append((time.perf_counter() - t0) / args.runs * 1e3)
            own, generic = (statistics.median(times[m]) for m in ("off", "only"))
            print(
                f"| {name} | {precision} | {own:.3f} | {generic:.3f} | {generic / own:.2f}x | "
                f"{diff:.1e} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
