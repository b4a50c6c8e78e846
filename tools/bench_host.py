"""Where the host time of a webgpu run goes: per model, the median over N runs (host input and
output) of the whole run and of its parts from `sess.profile()["partitions"][0]["host"]` —
encode (the command buffer recorded), submit (read-back copies, finish, submit), read (the wait
for the GPU and the outputs mapped) — and the session around them.

    python tools/bench_host.py MODEL.tflite [MODEL.onnx ...] [--runs 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import tinydl as td


def measure(path: str, runs: int) -> dict:
    graph = td.load(path)
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.random(v.shape, dtype=np.float32) for v in graph.inputs}
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    for _ in range(20):
        sess.run(feeds)
    rows: dict[str, list[float]] = {"wall": [], "session": []}
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(feeds)
        wall = time.perf_counter() - t
        host = sess.profile()["partitions"][0]["host"]
        for k, v in host.items():
            rows.setdefault(k, []).append(v)
        rows["wall"].append(wall)
        rows["session"].append(wall - sum(host.values()))
    return {k: round(1e3 * statistics.median(v), 3) for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    print("model | wall ms | encode | submit | read | session")
    for path in args.models:
        r = measure(path, args.runs)
        print(
            f"{path} | {r['wall']} | {r['encode_s']} | {r['submit_s']} | {r['read_s']} | "
            f"{r['session']}",
            flush=True,
        )
        print(json.dumps(r))


if __name__ == "__main__":
    main()
