"""Pipeline benchmarks: hop latency between two trivial components, and 4-stage throughput.

    python tools/bench_pipeline.py                 # everything, a few seconds each
    python tools/bench_pipeline.py --hops 20000 --json out.json
    python tools/bench_pipeline.py --ray 4      # also a Ray app passing 1080p frames
    python tools/bench_pipeline.py --busy-poll-us 3000   # also with polling workers

Hop latency: a source stamps time.perf_counter_ns() into its payload as it returns it; the next
component reads the clock as its process() begins (in its worker process, for the process
executor: perf_counter is CLOCK_MONOTONIC on Linux, shared by processes). The source emits one
packet every --gap-us so the receiver is idle, waiting, each time: the figure includes waking it
up. For scale, the same measurement between two bare threads and a queue.SimpleQueue (written
in C: about the cheapest wake-up CPython has) is reported as the floor, at the thread hops' gap
and again at the 1080p hops' (a core asleep longer wakes more slowly), and between two bare
processes and a pipe (the process hop's floor), at the gap of the 1080p hops; each hop's p50 is
printed over its floor's from the same run too.

Throughput: source -> stage -> stage -> sink, as many packets as the pipeline takes, trivial
payloads (framework overhead) and 640x480 RGB frames (each stage passes the frame on; with the
process executor, the two middle stages run in worker processes, frames through shared memory).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import queue
import select
import threading
import time

import numpy as np

from tinydl.pipeline import App, Component, Frame
from tinydl.pipeline.process import recv_msg, send_msg


class Stamp(Component):
    """Source: `count` packets holding perf_counter_ns() at return, one every `gap_s`; with
    `frame`, a new frame of that size each time (from `ctx.empty`: the frame pool where the app
    has worker processes), its stamp in `pts`."""

    inputs: dict = {}
    outputs = {"out": object}

    def __init__(self, count: int, gap_s: float = 0.0, frame: tuple[int, int] | None = None):
        self.count, self.gap_s, self.frame = count, gap_s, frame

    def open(self, ctx):
        self.i = 0

    def process(self, ctx, inputs):
        if self.i >= self.count:
            return None
        self.i += 1
        if self.gap_s:
            ctx.request_tick(self.gap_s)
        if self.frame is not None:
            image = ctx.empty((*self.frame, 3), np.uint8)
            image[0, 0] = self.i % 256  # the pixels are written where they were made, not per hop
            return {"out": Frame(image, pts=time.perf_counter_ns())}
        return {"out": time.perf_counter_ns()}


class Receive(Component):
    """Answers the hop's latency: its own start time minus the stamp."""

    inputs = {"in": object}
    outputs = {"out": object}

    def process(self, ctx, inputs):
        now = time.perf_counter_ns()
        payload = inputs["in"].payload
        return {"out": now - (payload.pts if isinstance(payload, Frame) else payload)}


class Pass(Component):
    inputs = {"in": object}
    outputs = {"out": object}

    def process(self, ctx, inputs):
        return {"out": inputs["in"]}


class Keep(Component):
    """Sink: keeps payloads (latencies), or only counts them."""

    inputs = {"in": object}
    outputs: dict = {}
    executors = ("thread",)

    def __init__(self, keep: bool = True):
        self.keep, self.values, self.n = keep, [], 0
        self.first = self.last = 0

    def process(self, ctx, inputs):
        self.last = time.perf_counter()
        if not self.n:
            self.first = self.last
        self.n += 1
        if self.keep:
            self.values.append(inputs["in"].payload)


class Lag(Component):
    """Sink: the time from each frame's stamp (`pts`) to here, and when it came."""

    inputs = {"in": object}
    outputs: dict = {}
    executors = ("thread",)

    def __init__(self):
        self.lags, self.times = [], []

    def process(self, ctx, inputs):
        now = time.perf_counter_ns()
        self.times.append(now)
        self.lags.append(now - inputs["in"].payload.pts)


def ray_chain(frames: int, gap_s: float) -> dict[str, float]:
    """A Ray app: a source actor making 1080p frames -> two actors passing them on -> a sink in
    the driver. Frames/s from the 20th frame out to the last, and source-to-sink latency."""
    app = App("ray-chain", executor="ray")
    app.add("src", Stamp(frames, gap_s, frame=(1080, 1920)))
    app.add("a", Pass())
    app.add("b", Pass())
    lag = Lag()
    app.add("sink", lag)
    for a, b in [("src", "a"), ("a", "b"), ("b", "sink")]:
        app.connect(a, b)
    report = app.run(timeout=600)
    assert report.frames_out == frames, report.accounting()
    span = (lag.times[-1] - lag.times[20]) / 1e9
    return {"frames_per_s": (frames - 21) / span, **percentiles(lag.lags[20:])}


def percentiles(ns: list[int]) -> dict[str, float]:
    s = sorted(ns)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] / 1e3  # noqa: E731
    return {
        "p50_us": at(0.5),
        "p90_us": at(0.9),
        "p99_us": at(0.99),
        "mean_us": sum(s) / len(s) / 1e3,
        "hops": len(s),
    }


def hop(
    executor: str,
    hops: int,
    gap_s: float,
    inline: bool = True,
    warmup: int = 200,
    frame: tuple[int, int] | None = None,
    source: str = "thread",
    busy_poll_us: float = 0.0,
) -> dict[str, float]:
    app = App(f"hop-{executor}", inline_below_us=20.0 if inline else 0.0, busy_poll_us=busy_poll_us)
    app.add("a", Stamp(hops + warmup, gap_s, frame), executor=source)
    app.add("b", Receive(), executor=executor)
    keep = Keep()
    app.add("c", keep)
    app.connect("a", "b")
    app.connect("b", "c")
    report = app.run(timeout=600)
    assert report.frames_out == hops + warmup, report.accounting()
    return percentiles(keep.values[warmup:])


def floor(hops: int, gap_s: float) -> dict[str, float]:
    """Two bare threads and a queue.SimpleQueue (C): CPython's wake-up cost, no framework."""
    box: queue.SimpleQueue = queue.SimpleQueue()
    got: list[int] = []

    def consumer():
        for _ in range(hops):
            stamp = box.get()
            got.append(time.perf_counter_ns() - stamp)

    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    for _ in range(hops):
        box.put(time.perf_counter_ns())
        time.sleep(gap_s)
    t.join()
    return percentiles(got)


def _pipe_reader(conn, hops: int, spin: bool, out) -> None:
    fd, got = conn.fileno(), []
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    for _ in range(hops):
        if spin:
            while not poll.poll(0):
                pass
        stamp = int.from_bytes(recv_msg(fd), "little")
        got.append(time.perf_counter_ns() - stamp)
    out.send(got)


def pipe_floor(hops: int, gap_s: float, spin: bool = False) -> dict[str, float]:
    """Two bare processes and a pipe (no framework; messages framed as the app's are): the
    wake-up cost of the process hop; `spin`: the reader polls the pipe without sleeping."""
    ctx = multiprocessing.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    results, results_in = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_pipe_reader, args=(reader, hops, spin, results_in), daemon=True)
    child.start()
    send_msg(writer.fileno(), (0).to_bytes(8, "little"))  # the child has started once read
    time.sleep(0.5)
    for _ in range(hops - 1):
        send_msg(writer.fileno(), time.perf_counter_ns().to_bytes(8, "little"))
        time.sleep(gap_s)
    got = results.recv()[1:]
    child.join()
    return percentiles(got)


def throughput(
    executor: str, items: int, frame: tuple[int, int] | None, inline: bool = True
) -> dict[str, float]:
    app = App(f"tput-{executor}", inline_below_us=20.0 if inline else 0.0)
    app.add("src", Stamp(items, frame=frame))
    app.add("s1", Pass(), executor=executor)
    app.add("s2", Pass(), executor=executor)
    sink = Keep(keep=False)
    app.add("sink", sink)
    for a, b in [("src", "s1"), ("s1", "s2"), ("s2", "sink")]:
        app.connect(a, b)
    report = app.run(timeout=600)
    assert report.frames_out == items, report.accounting()
    span = sink.last - sink.first  # first to last item out: worker start-up left out
    return {
        "items": items,
        "items_per_s": (items - 1) / span,
        "us_per_item": span / (items - 1) * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hops", type=int, default=10000, help="hops per thread measurement")
    ap.add_argument("--process-hops", type=int, default=3000, help="hops, process executor")
    ap.add_argument("--gap-us", type=float, default=200.0, help="time between packets")
    ap.add_argument("--items", type=int, default=20000, help="packets per throughput run")
    ap.add_argument("--frames", type=int, default=2000, help="frames per throughput run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is kept")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument(
        "--busy-poll-us",
        type=float,
        default=0.0,
        metavar="US",
        help="also time the 1080p process hops with App(busy_poll_us=US): workers poll their "
        "pipes this long before sleeping (more than 10x --gap-us: they never sleep), and a "
        "bare pipe whose reader polls",
    )
    ap.add_argument(
        "--ray",
        type=int,
        metavar="CPUS",
        help="also time a Ray app (1080p frames: source actor -> 2 actors -> sink in the "
        "driver), flat out and at 50 frames/s, on a local Ray with CPUS CPUs",
    )
    args = ap.parse_args()
    gap = args.gap_us / 1e6

    def median_of(fn, *a, **kw) -> dict[str, float]:
        runs = [fn(*a, **kw) for _ in range(args.repeat)]
        return {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}

    thread, process, vga = "thread", "process", (480, 640)
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "floor_simple_queue": median_of(floor, args.hops, gap),
        "hop_thread": median_of(hop, thread, args.hops, gap),
        "hop_thread_no_inline": median_of(hop, thread, args.hops, gap, inline=False),
        "floor_threads_1080p_gap": median_of(floor, args.process_hops, gap * 10),
        "floor_pipe_1080p_gap": median_of(pipe_floor, args.process_hops, gap * 10),
        "hop_process": median_of(hop, process, args.process_hops, gap),
        "hop_process_1080p": median_of(
            hop, process, args.process_hops, gap * 10, frame=(1080, 1920), source=process
        ),
        "hop_thread_to_process_1080p": median_of(
            hop, process, args.process_hops, gap * 10, frame=(1080, 1920)
        ),
        "throughput_thread_trivial": median_of(throughput, thread, args.items, None),
        "throughput_thread_no_inline_trivial": median_of(
            throughput, thread, args.items, None, inline=False
        ),
        "throughput_process_trivial": median_of(throughput, process, args.items // 4, None),
        "throughput_thread_640x480": median_of(throughput, thread, args.frames, vga),
        "throughput_thread_no_inline_640x480": median_of(
            throughput, thread, args.frames, vga, inline=False
        ),
        "throughput_process_640x480": median_of(throughput, process, args.frames // 2, vga),
    }
    if args.busy_poll_us:
        polled = {"busy_poll_us": args.busy_poll_us}
        results["floor_pipe_polled"] = median_of(pipe_floor, args.process_hops, gap * 10, spin=True)
        results["hop_process_1080p_polled"] = median_of(
            hop, process, args.process_hops, gap * 10, frame=(1080, 1920), source=process, **polled
        )
        results["hop_thread_to_process_1080p_polled"] = median_of(
            hop, process, args.process_hops, gap * 10, frame=(1080, 1920), **polled
        )
    if args.ray:
        import ray

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH"), here, os.path.dirname(here)) if p
        )
        ray.init(
            num_cpus=args.ray,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": path}},  # workers import this module
        )
        results["ray_1080p_flat_out"] = median_of(ray_chain, 200, 0.0)
        results["ray_1080p_50fps"] = median_of(ray_chain, 100, 0.02)
        ray.shutdown()
    print(f"machine: {results['machine']}")
    # Each hop's p50 over the floor measured beside it in this run (the same wake-up, bare).
    against = {
        "hop_thread": "floor_simple_queue",
        "hop_thread_no_inline": "floor_simple_queue",
        "hop_process_1080p": "floor_pipe_1080p_gap",
        "hop_thread_to_process_1080p": "floor_pipe_1080p_gap",
        "hop_process_1080p_polled": "floor_pipe_polled",
        "hop_thread_to_process_1080p_polled": "floor_pipe_polled",
    }
    print(
        f"{'hop latency':36} {'p50 us':>8} {'p90 us':>8} {'p99 us':>8} {'hops':>7} {'p50/floor':>9}"
    )
    for key, label in [
        ("floor_simple_queue", "floor: bare threads, SimpleQueue"),
        ("hop_thread", "thread executor (inlined call)"),
        ("hop_thread_no_inline", "thread executor, inline off"),
        ("floor_threads_1080p_gap", "floor: bare threads, the 1080p gap"),
        ("floor_pipe_1080p_gap", "floor: bare processes, a pipe"),
        ("hop_process", "process executor"),
        ("hop_process_1080p", "process to process, 1080p frame"),
        ("hop_thread_to_process_1080p", "thread to process, 1080p frame"),
        ("floor_pipe_polled", "floor: a pipe, its reader polling"),
        ("hop_process_1080p_polled", "process to process, 1080p, busy poll"),
        ("hop_thread_to_process_1080p_polled", "thread to process, 1080p, busy poll"),
    ]:
        if key not in results:
            continue
        r = results[key]
        floor_key = against.get(key)
        ratio = (
            f"{r['p50_us'] / results[floor_key]['p50_us']:8.2f}x"
            if floor_key in results and results[floor_key]["p50_us"] > 0
            else ""
        )
        print(
            f"{label:36} {r['p50_us']:8.1f} {r['p90_us']:8.1f} {r['p99_us']:8.1f} {r['hops']:7d} "
            f"{ratio:>9}"
        )
    print(f"\n{'4-stage throughput':36} {'items/s':>10} {'us/item':>9}")
    for key in [k for k in results if k.startswith("throughput")]:
        r = results[key]
        print(f"{key[len('throughput_') :]:36} {r['items_per_s']:10.0f} {r['us_per_item']:9.1f}")
    for key in [k for k in results if k.startswith("ray_")]:
        r = results[key]
        print(
            f"{key:36} {r['frames_per_s']:10.1f} frames/s, source to sink p50 "
            f"{r['p50_us'] / 1e3:.1f} ms, p90 {r['p90_us'] / 1e3:.1f} ms"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
