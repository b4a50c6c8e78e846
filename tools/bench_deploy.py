"""The deployer on this machine: predicted beside measured, at scale 0, 0.5 and 1.

    python tools/bench_deploy.py                     # all three apps
    python tools/bench_deploy.py --only espcn --fps 8 --width 320 --height 180

- slow: a stage sleeping 50 ms per frame at 40 frames/s, bare (one instance) and deployed.
- batched: cam -> 18 ms stage -> Batch -> a GPU-like stage (4 ms + 1 ms per frame, one call at a
  time on a process-wide lock, as kernels on one GPU) -> Unbatch -> Metrics, at 80 frames/s.
- espcn: cam -> Batch -> Inference(tinydl:espcn_x3 on the luma, cpu backend) -> Unbatch ->
  Metrics: a real model, whose batch curve the profile measures.

Measured throughput is frames out / wall time of the run; latency p50 is the Metrics stage's
(frame entry to Metrics). Predicted figures come from the deployer's simulation of the plan.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

from tinydl.pipeline import App, Batch, Component, deploy, profile
from tinydl.pipeline import components as lib


class Sleep(Component):
    """`ms` per frame, sleeping."""

    def __init__(self, ms: float):
        self.ms = ms

    def process(self, ctx, inputs):
        time.sleep(self.ms / 1e3)
        return {"out": inputs["in"]}


class FakeGPU(Component):
    """a_ms + b_ms per frame of a batch, one call at a time (a process-wide lock)."""

    resource = "gpu"
    device = threading.Lock()

    def __init__(self, a_ms: float = 4.0, b_ms: float = 1.0):
        self.a_ms, self.b_ms = a_ms, b_ms

    def process(self, ctx, inputs):
        payload = inputs["in"].payload
        k = len(payload) if isinstance(payload, Batch) else 1
        with self.device:
            time.sleep((self.a_ms + self.b_ms * k) / 1e3)
        return {"out": payload}


def chain(name: str, stages: list[tuple[str, Component]]) -> App:
    app = App(name)
    for stage, comp in stages:
        app.add(stage, comp)
    for (a, _), (b, _) in zip(stages, stages[1:], strict=False):
        app.connect(a, b)
    return app


def slow_app(frames: int, fps: float) -> App:
    return chain(
        "slow",
        [
            ("cam", lib.SyntheticSource(count=frames, fps=fps, width=16, height=8)),
            ("slow", Sleep(50)),
            ("metrics", lib.Metrics()),
            ("out", lib.Collect()),
        ],
    )


def batched_app(frames: int, fps: float) -> App:
    return chain(
        "batched",
        [
            ("cam", lib.SyntheticSource(count=frames, fps=fps, width=16, height=8)),
            ("pre", Sleep(18)),
            ("batch", lib.Batch(max_size=1, max_wait=0.05)),
            ("gpu", FakeGPU()),
            ("unbatch", lib.Unbatch()),
            ("metrics", lib.Metrics()),
            ("out", lib.Collect()),
        ],
    )


def espcn_app(frames: int, fps: float, width: int, height: int) -> App:
    return chain(
        "espcn",
        [
            ("cam", lib.SyntheticSource(count=frames, fps=fps, width=width, height=height)),
            ("batch", lib.Batch(max_size=1, max_wait=0.5)),
            ("sr", lib.Inference(model="tinydl:espcn_x3", channels=[0])),
            ("unbatch", lib.Unbatch()),
            ("metrics", lib.Metrics()),
            ("out", lib.Collect()),
        ],
    )


def measure(make, rate: float, scales, cores, profile_s: float) -> None:
    prof = profile(make(), duration=profile_s, cache=False)
    for name, c in prof.components.items():
        curve = " ".join(f"{b}:{v['ms']:.1f}" for b, v in (c["curve"] or {}).items())
        print(f"  profile {name:<8} {c['resource']:<4} {c['ms_per_item']:8.2f} ms/item  {curve}")
    print(
        f"  {'scale':>5} {'batch':>5} {'inst':>5} {'fps meas':>9} {'fps pred':>9} "
        f"{'p50 meas':>9} {'p50 pred':>9} {'p99 pred':>9}"
    )
    for scale in scales:
        app = make()
        plan = deploy(app, rate, scale=scale, cores=cores, profile=prof)
        report = app.run(deployment=plan, timeout=300)
        assert report.balanced, report
        lat = app.components["metrics"].component.summary()
        p50 = sorted(f["latency_p50_ms"] for f in lat.values())[len(lat) // 2] if lat else 0.0
        batch = max(c["batch"] for c in plan.components.values())
        inst = "/".join(str(c["instances"]) for c in plan.components.values())
        p = plan.predicted
        print(
            f"  {scale:>5g} {batch:>5} {inst:>5} {report.frames_out / report.wall_s:>9.1f} "
            f"{p['throughput_fps']:>9.1f} {p50:>9.1f} {p['latency_ms']['p50']:>9.1f} "
            f"{p['latency_ms']['p99']:>9.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("slow", "batched", "espcn"))
    ap.add_argument("--fps", type=float, default=6.0, help="espcn: input frames/s")
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--height", type=int, default=90)
    ap.add_argument("--seconds", type=float, default=4.0, help="input seconds per run")
    ap.add_argument("--cores", default=None, help="cores to plan for (default: all usable)")
    args = ap.parse_args()
    os.environ.setdefault("TINYDL_CACHE_DIR", tempfile.mkdtemp(prefix="tinydl-bench-"))
    scales = (0, 0.5, 1)
    if args.only in (None, "slow"):
        n = int(40 * args.seconds)
        bare = slow_app(n, 40).run(timeout=300)
        print(f"slow: 50 ms/frame at 40 frames/s; bare {bare.frames_out / bare.wall_s:.1f} fps")
        measure(lambda: slow_app(n, 40), 40, (0,), args.cores, 1.0)
    if args.only in (None, "batched"):
        print("batched: 18 ms stage + GPU-like 4 + 1 ms/frame at 80 frames/s")
        measure(lambda: batched_app(int(80 * args.seconds), 80), 80, scales, args.cores, 1.5)
    if args.only in (None, "espcn"):
        n = int(args.fps * args.seconds)
        print(f"espcn x3 on cpu: {args.width}x{args.height} at {args.fps:g} frames/s")
        measure(
            lambda: espcn_app(n, args.fps, args.width, args.height),
            args.fps,
            scales,
            args.cores,
            3.0,
        )


if __name__ == "__main__":
    main()
