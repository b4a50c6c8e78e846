"""partition="greedy" against partition="cost" on models that mix nodes a GPU backend runs with
nodes only the CPU path runs: the median time of a run (host input and output) of each, the
placement (partitions, transfers) and the cost model's prediction beside the measured time,
in one process. The zoo's detectors (tools/zoo.py: seeded random weights; their
post-processing holds NonZero, data-dependent TopK and GatherND, NonMaxSuppression) are
exported once to --onnx-dir.

    python tools/bench_partition.py --backend cuda [--models ssdlite320,retinanet_resnet50_fpn]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import zoo  # noqa: E402

import tinydl as td  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--models", default="ssdlite320,retinanet_resnet50_fpn")
    ap.add_argument("--onnx-dir", default=".zoo", type=Path)
    args = ap.parse_args()

    print("| model | partition | partitions | transfers | predicted ms | measured ms/run |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in args.models.split(","):
        path = zoo.export(name, args.onnx_dir)
        feeds = dict(np.load(args.onnx_dir / f"{name}.npz"))
        graph = td.load(path)
        results = {}
        for mode in ("greedy", "cost"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sess = td.compile(graph, backends=(args.backend, "cpu"), partition=mode)
            out = sess.run(feeds)
            results[mode] = [out[v.name] for v in graph.outputs]
            ms = 1e3 * zoo._median_time(lambda: sess.run(feeds))  # noqa: B023
            plan = sess.cost_assignment
            predicted = f"{plan.predicted_s * 1e3:.2f}" if plan else "-"
            if mode == "cost" and plan:
                predicted += f" (greedy {plan.greedy_s * 1e3:.2f})"
            p = sess.placement
            print(
                f"| {name} | {mode} | {len(p.partitions)} | {len(p.transfers)} | {predicted} "
                f"| {ms:.2f} |"
            )
            sys.stdout.flush()
        same = zoo._rel_err(results["cost"], results["greedy"])
        print(f"| {name} | cost vs greedy outputs: max relative difference {same:.1e} | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
