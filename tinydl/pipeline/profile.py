"""Profiling for the deployer: run an app for a while and measure, per component, what it costs.

    prof = tinydl.pipeline.profile(app, duration=5)           # or: tinydl pipeline profile APP
    prof.components["infer"]["ms_per_item"], prof.components["infer"]["curve"]

Per component it records its resource (`cpu`, `gpu` or `transfer`: declared by the component's
`resource` attribute, else from its kind — `Inference` on a cuda/webgpu backend is `gpu`,
`ToDevice`/`ToHost` off the cpu are `transfer`), the mean wall time per item T_i and the CPU
time per item (the thread CPU clock of each instance's thread, plus its worker process's CPU
for the process executor), and, for a batchable GPU component (one fed by a `Batch` component),
the speed-up curve: the wall and CPU time of one call at batch 1, 2, 4, … up to `max_batch`
(any component fed by a `Batch` gets one: a model on the CPU batches too),
timed on a fresh instance with inputs captured during the run.

The JSON is cached by app and machine: the content hash of the app's file (with its variables)
or of its structure when built in code, plus a key of this machine's CPU, core count and GPUs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from tinydl.cache import cache_dir as tinydl_cache
from tinydl.pipeline.component import Component, Context, finished
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, Packet, T

VERSION = 1
RESOURCES = ("cpu", "gpu", "transfer")
GPU_BACKENDS = ("cuda", "webgpu")
SAMPLES = 4  # batches captured in front of each batchable GPU component


def resource_of(component: Component) -> str:
    """`cpu`, `gpu` or `transfer`: declared (`resource = "gpu"`), or from the component's kind."""
    from tinydl.pipeline.components import Inference, ToDevice, ToHost

    declared = getattr(component, "resource", None)
    if declared is not None:
        if declared not in RESOURCES:
            raise PipelineError(
                f"{type(component).__name__}.resource must be one of {RESOURCES}, got {declared!r}"
            )
        return declared
    if isinstance(component, Inference):
        return "gpu" if backend_of(component) else "cpu"
    if isinstance(component, ToDevice):
        return "cpu" if component.backend_name == "cpu" else "transfer"
    if isinstance(component, ToHost):
        return "transfer"
    return "cpu"


def backend_names(spec: Any) -> list[str]:
    """A backends option ("cuda,cpu" or a list) as a list of names."""
    names = spec.split(",") if isinstance(spec, str) else list(spec or ())
    return [n.strip() for n in names if n.strip()]


def backend_of(component: Component) -> str | None:
    """The GPU backend a component drives (`cuda`, `webgpu`), when it says."""
    names = backend_names(
        getattr(component, "backends", None) or getattr(component, "backend_name", None)
    )
    return names[0] if names and names[0] in GPU_BACKENDS else None


def batch_feeder(app, name: str) -> str | None:
    """The `Batch` component that alone feeds `name` (whose max_size the deployer sets)."""
    from tinydl.pipeline.components import Batch as BatchComponent

    incoming = {e.src for e in app.edges if e.dst == name}
    if len(incoming) != 1:
        return None
    src = next(iter(incoming))
    return src if isinstance(app.components[src].component, BatchComponent) else None


class Profile:
    """A profile: `components` maps each name to its measurements (see the module docstring)."""

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def components(self) -> dict[str, dict[str, Any]]:
        return self.data["components"]

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = json.dumps(self.data, indent=2)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise PipelineError(f"{path}: not a readable profile: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise PipelineError(f"{path}: not a tinydl profile of version {VERSION}")
        return cls(data)

    def __repr__(self) -> str:
        return f"Profile({self.data['app']!r}, {len(self.components)} components)"


# -- keys and the cache --------------------------------------------------------------------------


def app_key(app) -> str:
    """The content hash of the app's file and variables, or of its structure when built in code."""
    h = hashlib.sha256()
    source = getattr(app, "source", None)
    if source is not None:
        path, variables = source
        h.update(Path(path).read_bytes())
        h.update(json.dumps(variables, sort_keys=True, default=str).encode())
    else:
        for spec in app.components.values():
            args, kwargs = spec.component._init_args
            h.update(f"{spec.name}|{type(spec.component).__qualname__}|{spec.instances}|".encode())
            h.update(repr((args, sorted(kwargs.items()))).encode())
        for e in app.edges:
            h.update(f"{e.label()}|{e.capacity}|{e.policy}|{e.dispatch}|{e.collect}".encode())
    return h.hexdigest()[:16]


def machine_key() -> str:
    """This machine: its host name and a hash of its CPU model, usable cores and GPUs."""
    from tinydl.backends.base import cpu_model

    model = cpu_model()
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    raw = f"{model}|{len(_cores())}|{gpus}"
    return f"{platform.node() or 'host'}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def _cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cache_dir() -> Path:
    return tinydl_cache("profiles")


def cache_path(app) -> Path:
    return cache_dir() / f"{app.name}-{app_key(app)}-{machine_key()}.json"


# -- measuring -----------------------------------------------------------------------------------


class _Tap(Component):
    """Passes packets on and keeps the first few (inputs for timing a component alone)."""

    inputs = {"in": T}
    outputs = {"out": T}
    executors = ("thread",)

    def __init__(self, keep: int = SAMPLES):
        self.keep = keep
        self.packets: list[Packet] = []

    def process(self, ctx, inputs):
        if len(self.packets) < self.keep:
            self.packets.append(inputs["in"])
        return {"out": inputs["in"]}


def _thread_cpu_ns(thread) -> int | None:
    """A thread's CPU time so far. On Linux from /proc (schedstat's run time in ns): a thread
    that has ended just reads as gone, where its pthread clock would be a dangling handle
    (asking one crashed the process), and an ended thread's id may already be another's.
    Elsewhere the pthread clock of a live thread."""
    if not thread.is_alive():
        return None
    tid = getattr(thread, "native_id", None)
    if tid is not None and os.path.isdir("/proc/self/task"):
        try:
            return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return None


def _process_cpu_ns(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _sample_cpu(rt, cpu: dict[str, int]) -> None:
    """The CPU time so far of each node's thread (and worker process); the last value sticks
    once a thread has ended."""
    for node in rt.all_nodes():
        total = 0
        t = _thread_cpu_ns(node.thread) if node.thread is not None else None
        proc = getattr(node, "proc", None)
        w = _process_cpu_ns(proc.pid) if proc is not None and proc.pid else None
        if t is None and w is None:
            continue
        total = (t or 0) + (w or 0)
        cpu[node.name] = max(cpu.get(node.name, 0), total)


def _progress(show: bool):
    if not show:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(), transient=True
    )


def _time_batches(
    spec, packets: list[Packet], sizes: list[int], budget_s: float
) -> dict[str, dict[str, float]]:
    """Wall and CPU ms of one call at each batch size, on a fresh instance opened here."""
    items = [i for p in packets for i in (p.payload.items if isinstance(p.payload, Batch) else [p])]
    if not items:
        return {}
    comp = spec.component.clone()
    ctx = Context(f"{spec.name} (profile)")
    comp.open(ctx)
    curve = {}
    try:
        for b in sizes:
            batch = [items[i % len(items)] for i in range(b)]
            call = {"in": Packet(Batch(batch), batch[0].flow_id, batch[0].request_id)}
            walls, cpus = [], []
            deadline = time.perf_counter() + budget_s
            for rep in range(50):
                w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                comp.wait_for_resource(ctx)
                try:
                    finished(comp.process(ctx, call))
                finally:
                    comp.release_resource(ctx)
                if rep:  # the first call warms caches and compiles
                    walls.append(time.perf_counter_ns() - w0)
                    cpus.append(time.thread_time_ns() - c0)
                if rep >= 3 and time.perf_counter() > deadline:
                    break
            walls.sort()
            cpus.sort()
            curve[str(b)] = {
                "ms": walls[len(walls) // 2] / 1e6,
                "cpu_ms": cpus[len(cpus) // 2] / 1e6,
            }
    finally:
        comp.close(ctx)
    return curve


def profile(
    app,
    duration: float = 5.0,
    max_batch: int = 16,
    cache: bool = True,
    progress: bool = False,
    batch_budget_s: float = 0.5,
) -> Profile:
    """Run `app` for up to `duration` seconds (less if its sources end) and measure each
    component; then time each batchable one (fed by a `Batch`) at batch 1, 2, 4, … `max_batch`.
    With `cache`, a profile of the same app file on the same machine is reused."""
    path = cache_path(app)
    if cache and path.exists():
        with contextlib.suppress(PipelineError):
            return Profile.load(path)
    app.check()
    sizes = [1 << i for i in range(max(0, max_batch).bit_length()) if 1 << i <= max_batch]
    feeders = {n: batch_feeder(app, n) for n in app.components}
    taps: dict[str, _Tap] = {}
    saved_components, saved_edges = dict(app.components), list(app.edges)
    try:
        for name, feeder in feeders.items():
            if feeder is None:
                continue
            tap = _Tap()
            tap_name = app.add(f"_profile_tap_{name}", tap)
            for e in [e for e in app.edges if e.src == feeder and e.dst == name]:
                app.edges.remove(e)
                app.connect(e.src, tap_name, capacity=e.capacity, policy=e.policy)
                app.connect(tap_name, name, capacity=e.capacity)
            taps[name] = tap
        cpu: dict[str, int] = {}
        with _progress(progress) as bar:
            task = bar.add_task(f"profiling {app.name}", total=duration) if bar else None
            rt = app.start()
            t0 = time.monotonic()
            try:
                while not rt.wait(0.05):
                    _sample_cpu(rt, cpu)
                    if bar:
                        bar.update(task, completed=min(duration, time.monotonic() - t0))
                    if time.monotonic() - t0 >= duration:
                        break
                _sample_cpu(rt, cpu)
            finally:
                rt.stop("profile done")
                hung = rt.join(5.0)
            report = rt.report(hung)
            wall = time.monotonic() - t0
            curves = {}
            if bar and taps:
                task = bar.add_task("batch curves", total=len(taps) * len(sizes))
            for name, tap in taps.items():
                curves[name] = _time_batches(
                    saved_components[name], tap.packets, sizes, batch_budget_s
                )
                if bar:
                    bar.advance(task, len(sizes))
    finally:
        app.components.clear()
        app.components.update(saved_components)
        app.edges[:] = saved_edges
    rows: dict[str, list[dict]] = {}
    for row in report.components:
        rows.setdefault(row["component"].split("[")[0], []).append(row)
    comps = {}
    for name, spec in saved_components.items():
        comp = spec.component
        mine = rows.get(name, [])
        items = sum(r["items"] for r in mine)
        calls = sum(r["calls"] for r in mine)
        busy = sum(r["busy_ms"] for r in mine)
        node_names = (
            [name] if spec.instances == 1 else [f"{name}[{i}]" for i in range(spec.instances)]
        )
        cpu_ms = sum(cpu.get(n, 0) for n in node_names) / 1e6
        batched = [r["mean_batch"] for r in mine if r["mean_batch"] is not None]
        comps[name] = {
            "type": type(comp).__name__,
            "resource": resource_of(comp),
            "backend": backend_of(comp),
            "instances": spec.instances,
            "source": not comp.inputs,
            "sink": not comp.outputs,
            "holds_inputs": comp.holds_inputs,
            "executors": list(comp.executors),
            "items": items,
            "calls": calls,
            "ms_per_item": busy / items if items else 0.0,
            # Thread CPU includes waiting and sending around the calls; never more than wall.
            "cpu_ms_per_item": min(cpu_ms / items, busy / items) if items else 0.0,
            "p50_ms": max((r["p50_ms"] for r in mine), default=0.0),
            "mean_batch": sum(batched) / len(batched) if batched else None,
            "batch_via": feeders.get(name),
            "curve": curves.get(name) or None,
        }
    data = {
        "version": VERSION,
        "app": app.name,
        "app_key": app_key(app),
        "machine": machine_key(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "duration_s": wall,
        "frames_in": report.frames_in,
        "input_fps": report.frames_in / wall if wall > 0 else 0.0,
        "components": comps,
    }
    prof = Profile(data)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.to_json(path)
    return prof
