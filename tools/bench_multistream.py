"""Multi-stream ESPCN x3 super-resolution, deployed at scale 0, 0.5 and 1: how many 30 fps
streams one app keeps up with, GPU and CPU busy, frame latency, predicted beside measured.

    python tools/bench_multistream.py --streams 150 --gpus cuda:0            # one GPU
    python tools/bench_multistream.py --streams 300 --gpus cuda:0,cuda:1     # two GPUs
    python tools/bench_multistream.py --streams 340 --gpus cuda:0,cuda:1 --sr 16x4 --shards 4
    python tools/bench_multistream.py --streams 300 --gpus cuda:0,cuda:1 --executor ray
    python tools/bench_multistream.py --backend cpu --streams 4 --width 64 --height 36  # no GPU

The app: `streams` synthetic 640x360 RGB sources at 30 frames/s each -> Batch -> sr (the
superres frame graph — RGB->YCbCr, ESPCN x3 on the luma, bicubic chroma, back to RGB, uint8 in
and out; the 1920x1080 frames stay on the GPU, and one checksum per frame comes back, which
also waits for the GPU, so a frame's latency ends when its output exists; the call returns a
`Later`, so with --in-flight 2 the next batch is enqueued while the GPU runs one) -> Unbatch ->
Sink. The deployer plans the app from a profile taken first (batch sizes 1 … --max-batch), for
a rate of streams x 30 frames/s, at each scale; the plan runs for --seconds of input, as
--shards processes when asked (each with its share of the streams and GPU-stage instances).

Measured: throughput = frames the sink got after the first --warmup seconds / that span, per
shard, summed (streams sustained = throughput / 30, at most --streams), latency p50/p99 over
the same frames (source timestamp to sink), GPU busy = mean of nvidia-smi's utilization.gpu
sampled every 200 ms during the run, per GPU; CPU busy = the whole machine's busy share of all
cores from /proc/stat over the run. Predicted: the deployer's simulation of the plan.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinydl.pipeline import App, Component, Later, deploy, profile  # noqa: E402
from tinydl.pipeline import components as lib  # noqa: E402
from tinydl.pipeline.components.inference import open_session  # noqa: E402
from tinydl.pipeline.packet import Batch, Frame, Tensor  # noqa: E402
from tinydl.pipeline.profile import backend_names  # noqa: E402

FPS = 30.0


def checksum_later(y):
    """One float per frame of a batch (N, ...), computed where the batch is (one reduction) and
    copied back asynchronously (`Backend.to_host_later`): the sums, a host array filled once
    the returned `wait()` has returned."""
    if type(y).__module__.split(".")[0] != "cupy":
        sums = np.asarray(y).reshape(len(y), -1)[:, ::4099].sum(axis=1, dtype=np.float32)
        return sums, lambda: None
    import cupy as cp

    from tinydl.backends import get_backend

    with cp.cuda.Device(y.device.id):  # the GPU the batch is on
        sums = y.reshape(len(y), -1)[:, ::4099].sum(axis=1, dtype=cp.float32)
    return get_backend("cuda").to_host_later(sums)


def checksum(y) -> np.ndarray:
    """`checksum_later`, waited for (which also waits for the GPU)."""
    sums, wait = checksum_later(y)
    wait()
    return sums


class SuperRes(Component):
    """The frame graph on a batch of frames, stacked where the model runs (page-locked frames
    go to the GPU asynchronously); the output batch stays there. out: one checksum per frame
    (a Tensor). A call only enqueues the work and the checksums' copy back, and returns a
    `Later` that waits for them: with `in_flight` 2 the next batch is enqueued while the GPU
    runs this one."""

    inputs = {"in": Batch[Frame]}
    outputs = {"out": Batch[Tensor]}
    resource = "gpu"
    uses_ctx_gpu = True

    def __init__(self, model, backends: str = "cuda", precision: str = "fp16"):
        self.model, self.backends, self.precision = model, backends, precision

    def open(self, ctx):
        self.session = open_session(
            self.model, self.backends, self.precision, False, getattr(ctx, "gpu", None)
        )

    def process(self, ctx, inputs):
        items = inputs["in"].payload.items
        if not items:
            return {"out": Batch([])}
        x = self.session.stack_input("frame", [p.payload.image[None] for p in items])
        y = self.session.run({"frame": x}, outputs="device")["upscaled"]
        sums, wait = checksum_later(y)

        def finish():
            wait()
            return {"out": Batch([p.derive(Tensor(s)) for p, s in zip(items, sums, strict=True)])}

        return Later(finish)


class Sink(Component):
    """Arrival time and latency of every frame (thread executor: the bench reads them)."""

    executors = ("thread",)
    outputs: dict = {}

    def open(self, ctx):
        self.now = ctx.now_ns
        self.seen: list[tuple[int, int]] = []

    def process(self, ctx, inputs):
        now = self.now()
        self.seen.append((now, now - inputs["in"].timestamp))
        return None


def frame_graph():
    from tinydl.apps.superres import frame_graph as make
    from tinydl.models import load_espcn

    return make(load_espcn(3), 3)


def make_app(args, graph, streams: int, seconds: float) -> App:
    app = App("multistream", capacity=8, switch_interval_ms=args.switch_ms)
    app.add(
        "cam",
        lib.SyntheticSource(
            count=int(FPS * seconds), fps=FPS, width=args.width, height=args.height
        ),
        instances=streams,
        executor="thread",
    )
    app.add("batch", lib.Batch(max_size=1, max_wait=args.max_wait), executor="thread")
    app.add(
        "sr",
        SuperRes(graph, backends=args.backend, precision=args.precision),
        executor=args.executor,
        in_flight=args.in_flight if args.executor == "thread" else 1,
    )
    app.add("unbatch", lib.Unbatch(), executor="thread")
    app.add("sink", Sink())
    for a, b in [("cam", "batch"), ("batch", "sr"), ("sr", "unbatch"), ("unbatch", "sink")]:
        app.connect(a, b)
    return app


class GPUBusy:
    """nvidia-smi's utilization.gpu per GPU, sampled every 200 ms while running."""

    def __init__(self):
        self.samples: dict[int, list[float]] = {}
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=index,utilization.gpu",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "200",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                i, u = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.setdefault(int(i), []).append(u)

    def stop(self) -> dict[int, float]:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
        return {i: round(sum(v) / len(v), 1) for i, v in sorted(self.samples.items()) if v}


def cpu_times() -> tuple[float, float]:
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v), idle


def run_one(args, graph, prof, streams: int, scale: float, gpus) -> dict:
    rate = streams * FPS
    app = make_app(args, graph, streams, args.seconds)
    pin = None
    if args.sr:
        batch, instances = (int(x) for x in args.sr.lower().split("x"))
        pin = {"sr": {"batch": batch, "instances": instances}}
    plan = deploy(
        app,
        rate,
        scale=scale,
        cores=args.cores,
        gpus=gpus,
        profile=prof,
        pin=pin,
        shards=args.shards,
    )
    sr = plan.components["sr"]
    total0, idle0 = cpu_times()
    busy = GPUBusy()
    t0 = time.perf_counter()
    report = app.run(deployment=plan, timeout=args.seconds * 6 + 120)
    wall = time.perf_counter() - t0
    gpu_busy = busy.stop()
    total1, idle1 = cpu_times()
    # Each shard's sink over its own steady window (shards start a moment apart), summed.
    sinks = report.parts.get("sink") or [app.components["sink"].component]
    fps, lat = 0.0, []
    for sink in sinks:
        seen = sorted(sink.seen)
        start = seen[0][0] + args.warmup * 1e9 if seen else 0
        kept = [(t, lat) for t, lat in seen if t >= start]
        span = (kept[-1][0] - kept[0][0]) / 1e9 if len(kept) > 1 else 0.0
        fps += (len(kept) - 1) / span if span > 0 else 0.0
        lat += [x for _, x in kept]
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6 if lat else float("nan")

    p = plan.predicted
    row = {
        "streams": streams,
        "scale": scale,
        "gpus": gpus,
        "executor": args.executor,
        "batch": sr["batch"],
        "sr_instances": sr["instances"],
        "in_flight": app.components["sr"].in_flight,
        "shards": plan.shards,
        "placement": sr["placement"],
        "frames_in": report.frames_in,
        "frames_out": report.frames_out,
        "balanced": report.balanced,
        "dropped": sum(report.dropped.values()),
        "errored": sum(report.errored.values()),
        "wall_s": round(wall, 2),
        "fps": round(fps, 1),
        "streams_sustained": round(min(streams, fps / FPS), 1),
        "p50_ms": round(pct(0.5), 1),
        "p99_ms": round(pct(0.99), 1),
        "gpu_busy": gpu_busy,
        "cpu_busy": round(100 * (1 - (idle1 - idle0) / max(1e-9, total1 - total0)), 1),
        "pred_fps": round(p["throughput_fps"], 1),
        "pred_p50_ms": round(p["latency_ms"]["p50"], 1),
        "pred_p99_ms": round(p["latency_ms"]["p99"], 1),
        "pred_gpu_busy": round(100 * p.get("gpu_busy", 0.0), 1),
        "pred_cpu_busy": round(100 * p.get("cpu_busy", 0.0), 1),
        "errors": report.errors[:3],
        # Where the time went, per component (summed over instances and shards).
        "stages": _stages(report),
    }
    return row


def _stages(report) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row in report.components:
        name = row["component"].split("@")[0].split("[")[0]
        o = out.setdefault(name, {"calls": 0, "items": 0, "busy_ms": 0.0, "queue_wait_ms": 0.0})
        o["calls"] += row["calls"]
        o["items"] += row["items"]
        o["busy_ms"] += row["busy_ms"]
        o["queue_wait_ms"] = max(o["queue_wait_ms"], row["queue_wait_ms"])
    for o in out.values():
        o["ms_per_call"] = round(o["busy_ms"] / o["calls"], 3) if o["calls"] else 0.0
        o["items_per_call"] = round(o["items"] / o["calls"], 2) if o["calls"] else 0.0
        o["busy_ms"] = round(o["busy_ms"], 1)
        o["queue_wait_ms"] = round(o["queue_wait_ms"], 2)
    return out


def bare(args, graph) -> str:
    """The session alone on batches of 64 host frames (what the GPU can do without the app);
    returns the precision that compiles (fp16 falls back to fp32, said so)."""
    import tinydl

    precision = args.precision
    try:
        sess = tinydl.compile(graph, backends=args.backend, precision=precision)
    except Exception as exc:  # noqa: BLE001 - reported, then the fp32 path is measured
        print(f"{precision} does not compile ({type(exc).__name__}: {exc}); using fp32")
        precision = "fp32"
        sess = tinydl.compile(graph, backends=args.backend, precision=precision)
    x = np.random.default_rng(0).integers(0, 256, (64, args.height, args.width, 3), np.uint8)
    # The frames as a pipeline's sources make them: one array each, in the memory the backend
    # uploads from fastest (page-locked on cuda), stacked where the model runs.
    backend = tinydl.backends.get_backend(backend_names(args.backend)[0])
    frames = [backend.empty_host((1, *x.shape[1:]), np.uint8) for _ in range(len(x))]
    for f, xi in zip(frames, x, strict=True):
        f[0] = xi
    ways = {
        "one host array of 64 frames": lambda: {"frame": x},
        "64 frames stacked (stack_input)": lambda: {"frame": sess.stack_input("frame", frames)},
    }
    for label, feeds in ways.items():
        for _ in range(3):
            checksum(sess.run(feeds(), outputs="device")["upscaled"])
        t0, runs = time.perf_counter(), 0
        while time.perf_counter() - t0 < 2.0:
            checksum(sess.run(feeds(), outputs="device")["upscaled"])
            runs += 1
        fps = runs * len(x) / (time.perf_counter() - t0)
        print(f"bare session ({args.backend}, {precision}), {label}: {fps:.0f} frames/s")
    return precision


HEADER = (
    f"{'streams':>7} {'scale':>5} {'gpus':>4} {'shards':>6} {'batch':>5} {'inst':>4} {'fps':>7} "
    f"{'pred':>7} {'sust.':>6} {'p50 ms':>7} {'pred':>7} {'p99 ms':>7} {'pred':>7} "
    f"{'GPU %':>11} {'CPU %':>6} {'ok':>3}"
)


def show(r: dict) -> str:
    gpu = "/".join(f"{v:.0f}" for v in r["gpu_busy"].values()) or "-"
    return (
        f"{r['streams']:>7} {r['scale']:>5g} {len(r['gpus'] or [1]):>4} {r['shards']:>6} "
        f"{r['batch']:>5} "
        f"{r['sr_instances']:>4} {r['fps']:>7.0f} {r['pred_fps']:>7.0f} "
        f"{r['streams_sustained']:>6.1f} {r['p50_ms']:>7.1f} {r['pred_p50_ms']:>7.1f} "
        f"{r['p99_ms']:>7.1f} {r['pred_p99_ms']:>7.1f} {gpu:>11} {r['cpu_busy']:>6.1f} "
        f"{'yes' if r['balanced'] else 'NO':>3}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--streams", default="150", help="stream counts, comma-separated (150)")
    ap.add_argument("--scales", default="0,0.5,1", help="deployer scales (0,0.5,1)")
    ap.add_argument("--gpus", default=None, help="GPUs to plan on, e.g. cuda:0,cuda:1")
    ap.add_argument("--cores", default=None, help="cores to plan on, e.g. 0-15 (all usable)")
    ap.add_argument("--backend", default="cuda", help="Inference backends (cuda)")
    ap.add_argument("--precision", default="fp16", help="fp16 (default) or fp32")
    ap.add_argument("--executor", default="thread", choices=("thread", "process", "ray"))
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=360)
    ap.add_argument("--seconds", type=float, default=8.0, help="input seconds per run (8)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds not counted (2)")
    ap.add_argument("--max-batch", type=int, default=64, help="largest batch profiled (64)")
    ap.add_argument("--max-wait", type=float, default=0.02, help="Batch max_wait, s (0.02)")
    ap.add_argument("--profile-s", type=float, default=4.0, help="profiling run, s (4)")
    ap.add_argument(
        "--in-flight",
        type=int,
        default=2,
        help="GPU-stage calls outstanding at once (2: the next batch is enqueued while the "
        "GPU runs one; thread executor)",
    )
    ap.add_argument(
        "--shards",
        type=int,
        default=1,
        help="run the app as this many processes, each with its share of the streams and "
        "GPU-stage instances (1)",
    )
    ap.add_argument("--stages", action="store_true", help="print each stage's calls and times")
    ap.add_argument("--json", default=None, help="append result rows to this JSON-lines file")
    ap.add_argument(
        "--sr",
        default=None,
        metavar="BATCHxINSTANCES",
        help="pin the GPU stage's batch size and instance count, e.g. 16x1 (the rest is planned)",
    )
    ap.add_argument(
        "--switch-ms",
        type=float,
        default=0.5,
        help="the app's GIL switch interval while it runs, ms (0.5, App's default; Python's: 5)",
    )
    args = ap.parse_args()
    os.environ.setdefault("TINYDL_CACHE_DIR", tempfile.mkdtemp(prefix="tinydl-bench-"))
    gpus = [g.strip() for g in args.gpus.split(",")] if args.gpus else None
    counts = [int(s) for s in args.streams.split(",")]
    scales = [float(s) for s in args.scales.split(",")]
    if args.executor == "ray":
        import ray

        ray.init(num_gpus=len(gpus or [1]), include_dashboard=False, log_to_driver=False)
    graph = frame_graph()
    args.precision = bare(args, graph)
    t0 = time.perf_counter()
    prof = profile(
        make_app(args, graph, counts[0], args.profile_s + 2),
        duration=args.profile_s,
        max_batch=args.max_batch,
        cache=False,
    )
    c = prof.components["sr"]
    curve = " ".join(f"{b}:{v['ms']:.2f}" for b, v in (c["curve"] or {}).items())
    print(f"profile ({time.perf_counter() - t0:.1f} s): sr ms per call by batch {curve}")
    print(HEADER, flush=True)
    for n in counts:
        for scale in scales:
            row = run_one(args, graph, prof, n, scale, gpus)
            print(show(row), flush=True)
            if args.stages:
                for name, o in row["stages"].items():
                    print(
                        f"    {name}: {o['calls']} calls, {o['items_per_call']} items a call, "
                        f"{o['ms_per_call']} ms a call, queue wait {o['queue_wait_ms']} ms",
                        flush=True,
                    )
            for e in row["errors"]:
                print("   ", e[:300], flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
