"""fp32, fp16 and precision="auto" on zoo models (tools/zoo.py: seeded random weights,
conditioned, exported to ONNX) on one GPU backend: each output's error against onnxruntime
(max |tinydl - onnxruntime| / max |onnxruntime|), the share of intermediate values auto keeps in
fp16, its decision time, and the median time of a run (host input and output), all in one
process.

    python tools/bench_precision.py --backend cuda --models mobilenet_v2,efficientnet_b0
        [--onnx-dir .zoo] [--tolerance 1e-2]

auto is calibrated on the zoo's own input (scikit-image's astronaut, ImageNet-normalized), the
one the errors are measured on.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import zoo  # noqa: E402

import tinydl as td  # noqa: E402

DEFAULT_MODELS = "mobilenet_v2,mobilenet_v3_small,mobilenet_v3_large,efficientnet_b0,resnet18"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--onnx-dir", default=".zoo", type=Path)
    ap.add_argument("--tolerance", type=float, default=None, help="fp16_tolerance (default 1e-2)")
    args = ap.parse_args()
    import onnxruntime as ort

    print("| model | precision | error vs onnxruntime | values in fp16 | decision | ms/run |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in args.models.split(","):
        path = zoo.export(name, args.onnx_dir)
        feeds = dict(np.load(args.onnx_dir / f"{name}.npz"))
        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
        graph = td.load(path)
        names = [v.name for v in graph.outputs]
        for precision in ("fp32", "fp16", "auto"):
            extra = {"calibration": feeds, "fp16_tolerance": args.tolerance}
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sess = td.compile(
                    graph,
                    backends=(args.backend,),
                    precision=precision,
                    **(extra if precision == "auto" else {}),
                )
            compile_s = time.perf_counter() - t0
            out = sess.run(feeds)
            err = zoo._rel_err([out[n] for n in names], ref)
            ms = 1e3 * zoo._median_time(lambda: sess.run(feeds))  # noqa: B023
            d = sess.precision_decision
            share = (
                f"{len(d.fp16)}/{len(d.fp16) + len(d.fp32)}"
                if d
                else ("all" if precision == "fp16" else "none")
            )
            decision = f"{d.seconds:.1f} s ({d.runs} runs)" if d else f"compile {compile_s:.1f} s"
            print(f"| {name} | {precision} | {err:.2e} | {share} | {decision} | {ms:.3f} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
