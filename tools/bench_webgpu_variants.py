"""The webgpu backend under several sets of backend options, in one process: per model and
set, the plan's dispatches, the largest error against the NumPy reference, the median host
in/out time of N runs (NumPy in, NumPy out) and the median GPU time (timestamps, device in/out,
`bench_fragment.measure`); the sets alternate over R rounds, so they share the machine's state.
With --steps, each set's dispatches one by one: label, input shape, grid, workgroup size and the
median of per-step timestamps (which add a few microseconds to every step).

    python tools/bench_webgpu_variants.py MODEL.tflite [MODEL.onnx ...] \\
        --variant off='{"fuse_depthwise": false, "fold_shortcuts": false}' --variant on='{}' \\
        [--rounds 3] [--runs 200] [--steps]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

import numpy as np
from bench_fragment import measure

import tinydl as td


def variant(text: str) -> tuple[str, dict]:
    name, _, options = text.partition("=")
    if not name or not options:
        raise argparse.ArgumentTypeError(f"expected NAME='{{json options}}', got {text!r}")
    return name, json.loads(options)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="+", help="model files (.onnx, .tflite, ...)")
    ap.add_argument("--variant", type=variant, action="append", required=True,
                    help="NAME='{json backend options}' (webgpu), two or more")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    ap.add_argument("--runs", type=int, default=200, help="runs a round and set (default 200)")
    ap.add_argument("--input-shape", default=None,
                    help="the input's shape, e.g. 1,1,360,640 (default: the model's, 1 where "
                         "a dimension is symbolic)")  # fmt: skip
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16"))
    ap.add_argument("--steps", action="store_true",
                    help="print each dispatch's median GPU time (per-step timestamps)")  # fmt: skip
    args = ap.parse_args()
    for path in args.models:
        name = Path(path).name
        graph = td.load(path)
        rng = np.random.default_rng(0)
        shape = [int(d) for d in args.input_shape.split(",")] if args.input_shape else None
        feeds = {
            v.name: rng.random(
                shape or [d if isinstance(d, int) else 1 for d in v.shape], dtype=np.float32
            )
            for v in graph.inputs
        }
        want = td.compile(graph, backends=("numpy",)).run(feeds)
        sessions = {}
        for label, options in args.variant:
            sess = td.compile(
                graph, backends=("webgpu",), strict=True, precision=args.precision,
                backend_options={"webgpu": options},
            )  # fmt: skip
            got = sess.run(feeds)
            err = max(
                float(np.abs(got[k] - want[k]).max() / (np.abs(want[k]).max() + 1e-12))
                for k in want
            )
            plan = next(iter(sess.partitions[0].kernel.plans.values()))
            print(f"{name} {label}: {len(plan.steps)} dispatches, largest error {err:.1e}")
            sessions[label] = sess
            if args.steps:
                print_steps(graph, feeds, args.precision, options, args.runs)
        host: dict[str, list[float]] = {label: [] for label, _ in args.variant}
        gpu: dict[str, list[float]] = {label: [] for label, _ in args.variant}
        for r in range(args.rounds):
            order = args.variant if r % 2 == 0 else args.variant[::-1]
            for label, options in order:
                sess = sessions[label]
                for _ in range(20):
                    sess.run(feeds)
                times = []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    sess.run(feeds)
                    times.append(time.perf_counter() - t)
                host[label].append(1e3 * statistics.median(times))
                gpu[label].append(
                    measure(graph, feeds, args.precision, options, args.runs)[0]["gpu_ms"]
                )
        for label, _ in args.variant:
            h = ", ".join(f"{v:.3f}" for v in host[label])
            g = ", ".join(f"{v:.3f}" for v in gpu[label])
            print(f"{name} {label}: host in/out ms {h} | GPU ms {g}")


def print_steps(graph, feeds, precision: str, options: dict, runs: int) -> None:
    """Each dispatch of a session with per-step timestamps (`profile=True`): its median."""
    sess = td.compile(
        graph, backends=("webgpu",), strict=True, precision=precision, profile=True,
        backend_options={"webgpu": options},
    )  # fmt: skip
    for _ in range(20):
        sess.run(feeds)
    times: list[list[float]] = []
    for _ in range(runs):
        sess.run(feeds)
        ops = sess.profile()["partitions"][0]["ops"]
        times = times or [[] for _ in ops]
        for acc, (_, t) in zip(times, ops, strict=True):
            acc.append(t)
    plan = next(iter(sess.partitions[0].kernel.plans.values()))
    for i, (step, acc) in enumerate(zip(plan.steps, times, strict=True)):
        source = getattr(step, "source", "") or ""
        size = re.search(r"@workgroup_size\(([^)]*)\)", source)
        shape = re.search(r"// Input (\S+)", source)
        print(
            f"  {i:3d} {1e6 * statistics.median(acc):7.1f} us  {step.label[:48]:48s} "
            f"{shape.group(1) if shape else '':18s} grid={getattr(step, 'grid', None)} "
            f"workgroup={size.group(1) if size else ''}"
        )


if __name__ == "__main__":
    main()
