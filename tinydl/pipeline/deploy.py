"""The deployer: one knob `scale` ∈ [0, 1] → batch sizes, instance counts and placement on CPU cores
and GPUs, checked by simulation before the app runs.

    plan = tinydl.pipeline.deploy(app, rate=8 * 30, scale=0.5)      # profiles first if needed
    print(plan)                                  # the plan and the simulated predictions
    report = app.run(deployment=plan)            # applied: instances, batches, affinity, GPUs

From the profile (profile.py), with T = 1 / rate the period (rate summed over streams):
1. a CPU task gets n = ⌈T_i / T⌉ instances (T_i: wall time per item);
2. a batchable task (a GPU task, or any fed by a `Batch` component, whose max_size is the knob)
   gets a batch size b from `scale` (`batch_for_scale`: scale 0 gives 1, scale 1 the largest
   profitable profiled size, scale s the profitable size at index round(s·(k−1)) of the k
   profitable sizes 1, 2, 4, …: monotone in s; a size is profitable when its time per item is
   5 % below that of every smaller profitable size);
3. and n = ⌈T_i(b) / (b·T)⌉ instances; a transfer task gets its GPU task's count.

Placement is bin packing with capacity T per box, in `pack`: one box per GPU, one per CPU core;
CPU boxes are CG (GPU-driving and CPU tasks), CT (transfer and CPU tasks) and CC (CPU tasks),
one CG and one CT per GPU. GPU tasks first (their host time on the CG bound to their GPU), then
transfers (all those of one GPU's tasks on that GPU's CT box: few processes per GPU context),
then CPU tasks; larger loads first; instances of a task in different boxes while possible; the
used box with the most room, else the next unused one (CC before CT before CG): as few boxes as
possible. An instance's load is its share of the task's time per frame: CPU time on a core (a
task sleeping or waiting holds no core), GPU time (wall minus host CPU) on a GPU.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinydl.pipeline.errors import PipelineError, check_count
from tinydl.pipeline.profile import Profile
from tinydl.pipeline.profile import profile as run_profile

MODES = ("auto", "semi", "manual")
PROFITABLE = 0.05  # a larger batch is profitable when it cuts the time per item by 5 % or more
EPS = 1e-9


# -- the formulas ---------------------------------------------------------------------------------


def profitable_sizes(curve: dict[str, dict[str, float]]) -> list[int]:
    """The profiled batch sizes, ascending, that cut the time per item by PROFITABLE or more
    against every smaller size kept. A size that does not is skipped, not an end: a noisy
    point (or a step that fills no more of the GPU) must not hide the gains of larger ones."""
    sizes = sorted(int(b) for b in curve)
    keep = sizes[:1]
    best = curve[str(sizes[0])]["ms"] / sizes[0]
    for b in sizes[1:]:
        per_item = curve[str(b)]["ms"] / b
        if per_item <= (1 - PROFITABLE) * best:
            keep.append(b)
            best = per_item
    return keep


def batch_for_scale(curve: dict[str, dict[str, float]] | None, scale: float) -> int:
    """Formula 2: the batch size for `scale` (0: 1; 1: the largest profitable size)."""
    if not curve:
        return 1
    sizes = profitable_sizes(curve)
    return sizes[round(scale * (len(sizes) - 1))]


def call_ms(entry: dict[str, Any], b: int, key: str = "ms") -> float:
    """Time of one call at batch b: the profiled curve (linear between profiled sizes, and
    beyond the last by its time per item), or b times the time per item."""
    curve = entry.get("curve")
    if not curve:
        per = entry["ms_per_item"] if key == "ms" else entry["cpu_ms_per_item"]
        return per * b
    pts = sorted((int(k), v[key]) for k, v in curve.items())
    for (b0, t0), (b1, t1) in zip(pts, pts[1:], strict=False):
        if b0 <= b <= b1:
            return t0 + (t1 - t0) * (b - b0) / (b1 - b0)
    if b <= pts[0][0]:
        return pts[0][1] * b / pts[0][0]
    return pts[-1][1] * b / pts[-1][0]


def instances_for(t_ms: float, period_ms: float) -> int:
    """Formulas 1 and 3: ⌈t / T⌉, at least 1."""
    return max(1, math.ceil(t_ms / period_ms - EPS))


# -- tasks and packing -----------------------------------------------------------------------------


@dataclass
class Task:
    """One component as the packer sees it; loads are ms per period per instance."""

    name: str
    resource: str  # cpu | gpu | transfer
    instances: int
    load: float  # on its own box: CPU ms (cpu, transfer) or GPU ms (gpu)
    host_load: float = 0.0  # gpu: the driving thread's CPU ms, on the CG box of its GPU
    gpu_task: str | None = None  # transfer: the GPU task whose instances it follows


@dataclass
class Box:
    kind: str  # GPU | CG | CT | CC
    id: Any  # a GPU name ("cuda:0") or a core number
    capacity: float
    gpu: str | None = None  # CG / CT: the GPU it is bound to
    load: float = 0.0
    tasks: list[tuple[str, int]] = field(default_factory=list)

    def fits(self, load: float) -> bool:
        return self.load + load <= self.capacity * (1 + 1e-6)

    @property
    def room(self) -> float:
        return self.capacity - self.load

    def put(self, task: str, instance: int, load: float) -> None:
        self.load += load
        self.tasks.append((task, instance))

    def holds(self, task: str) -> bool:
        return any(t == task for t, _ in self.tasks)

    def row(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "gpu": self.gpu,
            "busy": self.load / self.capacity if self.capacity else 0.0,
            "tasks": [f"{t}[{i}]" for t, i in self.tasks],
        }


def make_boxes(cores: list[int], gpus: list[str], period_ms: float) -> list[Box]:
    """GPU boxes, then CG and CT (one each per GPU, in that order), then CC boxes."""
    g = len(gpus)
    if g and len(cores) < 2 * g:
        raise PipelineError(
            f"{g} GPU(s) need at least {2 * g} cores (one driving each GPU, one for its "
            f"transfers); got {len(cores)}: {cores}"
        )
    boxes = [Box("GPU", gpu, period_ms) for gpu in gpus]
    boxes += [Box("CG", cores[i], period_ms, gpus[i]) for i in range(g)]
    boxes += [Box("CT", cores[g + i], period_ms, gpus[i]) for i in range(g)]
    boxes += [Box("CC", c, period_ms) for c in cores[2 * g :]]
    return boxes


def _choose(boxes: list[Box], task: str, load: float, extra=None) -> tuple[Box, bool]:
    """The box for one instance: not holding the task if possible; a used one with the most
    room, else the first unused one; `extra(box)` adds a condition (the CG box's room). The
    second value is False when nothing had room (the box with the most room is overfilled)."""

    def ok(b: Box) -> bool:
        return b.fits(load) and (extra is None or extra(b))

    apart = [b for b in boxes if not b.holds(task)]
    for pool in (apart, boxes):
        used = [b for b in pool if b.tasks and ok(b)]
        if used:
            return max(used, key=lambda b: b.room), True
        fresh = [b for b in pool if not b.tasks and ok(b)]
        if fresh:
            return fresh[0], True
    return max(apart or boxes, key=lambda b: b.room), False


def pack(
    tasks: list[Task],
    cores: list[int],
    gpus: list[str],
    period_ms: float,
    pinned: dict[str, list[Any]] | None = None,
) -> tuple[dict[str, dict[str, list]], list[Box], list[str]]:
    """Place every instance of every task (the module docstring's rules). `pinned` gives some
    tasks' placement (a core or a GPU per instance), loaded first. Returns, per task, its
    `placement` (core or GPU per instance) and `cores` (the core of each instance's thread),
    the boxes, and warnings for boxes filled over capacity."""
    boxes = make_boxes(cores, gpus, period_ms)
    by_kind = {k: [b for b in boxes if b.kind == k] for k in ("GPU", "CG", "CT", "CC")}
    gpu_box = {b.id: b for b in by_kind["GPU"]}
    cg_of = {b.gpu: b for b in by_kind["CG"]}
    ct_of = {b.gpu: b for b in by_kind["CT"]}
    core_box = {b.id: b for b in boxes if b.kind != "GPU"}
    cpu_boxes = by_kind["CC"] + by_kind["CT"] + by_kind["CG"]
    out: dict[str, dict[str, list]] = {}
    warnings: list[str] = []
    by_name = {t.name: t for t in tasks}

    def over(box: Box, task: Task) -> None:
        warnings.append(
            f"{box.kind} box {box.id} over capacity with {task.name} "
            f"({(box.load) / box.capacity:.0%} of the period)"
        )

    for name, where in (pinned or {}).items():
        task = by_name[name]
        place, threads = [], []
        for i in range(task.instances):
            at = where[i % len(where)]
            if task.resource == "gpu":
                if at not in gpu_box:
                    raise PipelineError(f"{name}: pinned to {at!r}, not one of the GPUs {gpus}")
                gpu_box[at].put(name, i, task.load)
                cg_of[at].put(name, i, task.host_load)
                threads.append(cg_of[at].id)
            else:
                if at not in core_box:
                    raise PipelineError(f"{name}: pinned to core {at!r}, not one of {cores}")
                core_box[at].put(name, i, task.load)
                threads.append(at)
            place.append(at)
        out[name] = {"placement": place, "cores": threads}

    rest = [t for t in tasks if t.name not in out]
    order = {"gpu": 0, "transfer": 1, "cpu": 2}
    rest.sort(key=lambda t: (order[t.resource], -(t.load + t.host_load), t.name))
    for task in rest:
        place, threads = [], []
        gpu_of_instance = out.get(task.gpu_task, {}).get("placement") if task.gpu_task else None
        if task.resource == "gpu" and not gpus:
            raise PipelineError(f"{task.name} is a GPU task, but no GPU was given")
        for i in range(task.instances):
            if task.resource == "gpu":
                host = task.host_load
                box, fitted = _choose(
                    by_kind["GPU"], task.name, task.load, lambda b, h=host: cg_of[b.id].fits(h)
                )
                box.put(task.name, i, task.load)
                cg_of[box.id].put(task.name, i, task.host_load)
                if not fitted:
                    over(box, task)
                place.append(box.id)
                threads.append(cg_of[box.id].id)
                continue
            if task.resource == "transfer" and gpu_of_instance:
                box = ct_of[gpu_of_instance[i % len(gpu_of_instance)]]
                fitted = box.fits(task.load)
            else:
                box, fitted = _choose(cpu_boxes, task.name, task.load)
            box.put(task.name, i, task.load)
            if not fitted:
                over(box, task)
            place.append(box.id)
            threads.append(box.id)
        out[task.name] = {"placement": place, "cores": threads}
    return out, boxes, warnings


# -- the plan -------------------------------------------------------------------------------------


@dataclass
class Deployment:
    """A plan: per component `{"instances", "batch", "placement", "cores", "resource"}`, the
    simulated predictions, the boxes, and what the deployer had to say."""

    app: str
    rate: float
    scale: float
    mode: str
    components: dict[str, dict[str, Any]]
    predicted: dict[str, Any] = field(default_factory=dict)
    boxes: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    slo_ms: float | None = None
    slo_met: bool | None = None
    shards: int = 1  # processes the app runs as, each with its share of the instances

    @property
    def period_ms(self) -> float:
        return 1000.0 / self.rate

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = json.dumps(self.__dict__, indent=2, default=str)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def load(cls, path: str | os.PathLike) -> Deployment:
        try:
            data = json.loads(Path(path).read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise PipelineError(f"{path}: not a readable deployment plan: {exc}") from None

    def table(self):
        """The plan and predictions as a rich Table."""
        from rich.table import Table

        p = self.predicted
        shards = f", {self.shards} shards" if self.shards > 1 else ""
        title = (
            f"{self.app}: {self.rate:g} frames/s, scale {self.scale:g} ({self.mode}){shards}; "
            "predicted "
            f"{p.get('throughput_fps', 0):.1f} frames/s, p50 "
            f"{p.get('latency_ms', {}).get('p50', 0):.1f} ms, p99 "
            f"{p.get('latency_ms', {}).get('p99', 0):.1f} ms"
        )
        table = Table(title=title)
        for col in ("component", "resource", "instances", "batch", "placement", "busy"):
            table.add_column(col, justify="left" if col in ("component", "placement") else "right")
        busy = p.get("components", {})
        for name, c in self.components.items():
            table.add_row(
                name,
                c["resource"],
                str(c["instances"]),
                str(c["batch"]),
                ", ".join(str(x) for x in c["placement"]),
                f"{busy[name]:.0%}" if name in busy else "-",
            )
        return table

    def __str__(self) -> str:
        import io

        from rich.console import Console

        out = io.StringIO()
        console = Console(file=out, width=120, color_system=None)
        console.print(self.table())
        p = self.predicted
        if p:
            console.print(
                f"GPU busy {p['gpu_busy']:.0%}, CPU busy {p['cpu_busy']:.0%}; frames in "
                f"{p['frames_in']}, out {p['frames_out']}, dropped {p['dropped']}"
            )
        if self.slo_ms is not None:
            console.print(f"SLO p99 <= {self.slo_ms:g} ms: {'met' if self.slo_met else 'NOT met'}")
        for w in self.warnings:
            console.print(f"warning: {w}")
        return out.getvalue().rstrip()

    def apply(self, app) -> None:
        """Set the app's instance counts, batch sizes and per-instance placement (see
        `apply_plan`)."""
        apply_plan(app, self)


def _set_option(component, name: str, value: Any) -> None:
    """Change a constructor option of a component and of the clones it will make."""
    setattr(component, name, value)
    args, kwargs = component._init_args
    bound = inspect.signature(type(component)).bind_partial(*args, **kwargs)
    bound.arguments[name] = value
    component._init_args = (bound.args, bound.kwargs)


def manual_placement(
    name: str, instances: int, cpus: Any, gpus: list[str] | str | None
) -> list[dict[str, Any]]:
    """Per-instance placement from an app's own `cpus` / `gpus` (cycled over the instances)."""
    cores = _parse_cores(cpus) if cpus is not None else []
    devices = [g.strip() for g in gpus.split(",")] if isinstance(gpus, str) else list(gpus or [])
    if not cores and not devices:
        raise PipelineError(f"{name}: cpus / gpus must name at least one core or GPU")
    return [
        {
            "cpus": [cores[i % len(cores)]] if cores else None,
            "gpu": devices[i % len(devices)] if devices else None,
            "env": _gpu_env(devices[i % len(devices)] if devices else None),
        }
        for i in range(max(instances, len(cores), len(devices)))
    ]


def _gpu_env(gpu: str | None) -> dict[str, str]:
    """The environment that makes a worker process use this GPU."""
    if not gpu or ":" not in gpu:
        return {}
    backend, index = gpu.split(":", 1)
    if backend == "cuda":
        return {"TINYDL_CUDA_DEVICE": index}
    if backend == "webgpu" and not index.isdigit():
        return {"TINYDL_WEBGPU_ADAPTER": index}
    return {}


def apply_plan(app, plan: Deployment) -> list[str]:
    """Apply a plan to an app in place: instance counts (the out-edges of a component expanded
    past one instance become collect edges into a single-instance consumer, so each flow keeps
    its order), the batch size of each GPU component's `Batch` feeder, and per instance its CPU
    core(s) and GPU. Returns notes on what could not be applied as planned."""
    from tinydl.pipeline.profile import batch_feeder

    missing = [n for n in plan.components if n not in app.components]
    if missing:
        raise PipelineError(f"the plan is for other components: {missing} are not in {app.name!r}")
    notes = []
    default_gpu = os.environ.get("TINYDL_CUDA_DEVICE", "0")
    for name, c in plan.components.items():
        spec = app.components[name]
        spec.instances = int(c["instances"])
        feeder = batch_feeder(app, name)
        if feeder is not None and c.get("batch"):
            _set_option(app.components[feeder].component, "max_size", int(c["batch"]))
        places = []
        for i in range(spec.instances):
            gpu = c["placement"][i] if c["resource"] == "gpu" else None
            core = c["cores"][i % len(c["cores"])] if c.get("cores") else None
            places.append(
                {"cpus": None if core is None else [core], "gpu": gpu, "env": _gpu_env(gpu)}
            )
        spec.placement = places
        gpus = {p["gpu"] for p in places if p["gpu"]}
        if (
            app.executor_of(spec) == "thread"
            and not spec.component.uses_ctx_gpu
            and any(p["env"].get("TINYDL_CUDA_DEVICE", default_gpu) != default_gpu for p in places)
        ):
            if "process" in spec.component.executors:
                spec.executor = "process"
                notes.append(f"{name}: runs as processes, one per GPU context ({sorted(gpus)})")
            else:
                notes.append(f"{name}: thread-only; its instances share the app's GPU")
    for e in app.edges:
        src, dst = app.components[e.src], app.components[e.dst]
        if (
            src.instances > 1
            and src.component.inputs  # a source's instances make flows of their own, in order
            and not src.component.holds_inputs
            and e.dst_instance is None
            and dst.instances == 1
            and not e.collect
            and any(x.src == e.src for x in app.edges)
        ):
            e.collect, e.form = True, "collect"
    return notes


# -- deploy ---------------------------------------------------------------------------------------


def _parse_cores(cores: Any) -> list[int]:
    if cores is None:
        from tinydl.pipeline.profile import _cores

        return _cores()
    if isinstance(cores, int):
        return list(range(cores))
    if isinstance(cores, str):
        out = []
        for part in cores.split(","):
            lo, _, hi = part.strip().partition("-")
            try:
                out += list(range(int(lo), int(hi or lo) + 1))
            except ValueError:
                raise PipelineError(f"cores {cores!r}: expected e.g. '0-15' or '0,2,4'") from None
        return out
    return [int(c) for c in cores]


def _detect_gpus(prof: Profile) -> list[str]:
    """One box per device of the GPU backends the app's GPU components use; a GPU component
    that names no backend (a user's) counts as one device `gpu:0`."""
    backends = {c["backend"] for c in prof.components.values() if c["resource"] == "gpu"}
    gpus: list[str] = []
    for b in sorted(backends, key=str):
        if b == "cuda":
            try:
                import cupy

                gpus += [f"cuda:{i}" for i in range(cupy.cuda.runtime.getDeviceCount())]
            except Exception:
                gpus.append("cuda:0")
        else:
            gpus.append(f"{b or 'gpu'}:0")
    return gpus


def _gpu_of(app, prof: Profile, name: str) -> str | None:
    """The GPU task a transfer serves: the nearest GPU component downstream (an upload) or
    upstream (a download)."""
    comps = prof.components
    for forward in (True, False):
        seen, frontier = {name}, [name]
        while frontier:
            nxt = []
            for n in frontier:
                for e in app.edges:
                    m = (
                        e.dst
                        if forward and e.src == n
                        else e.src
                        if not forward and e.dst == n
                        else None
                    )
                    if m is None or m in seen:
                        continue
                    if comps[m]["resource"] == "gpu":
                        return m
                    seen.add(m)
                    nxt.append(m)
            frontier = nxt
    return None


def _fixed(app, prof: Profile, name: str) -> str | None:
    """Why a component's instance count is the app's own, or None when the deployer sets it."""
    c = prof.components[name]
    if c["source"]:
        return "a source: one instance per stream"
    if c["sink"]:
        return "a sink: its instances are the app's outputs"
    if c["holds_inputs"]:
        return "holds inputs across calls (batching by its own rules)"
    if "process" not in c["executors"] and "thread" in c["executors"] and c["type"] in ("Collect",):
        return "keeps results in the app"
    return None


def plan_counts(
    app,
    prof: Profile,
    rate: float,
    scale: float,
    pin: dict[str, dict[str, Any]] | None = None,
    gpus: int = 0,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Formulas 1–3: per component its resource, batch and instances (pinned values kept).
    A GPU task whose batch size would need more instances than there are `gpus` (instances
    sharing a GPU add no GPU time) takes the next profitable size until it needs no more: the
    lowest latency that keeps up."""
    period = 1000.0 / rate
    plan, notes = {}, []
    for name, spec in app.components.items():
        c = prof.components.get(name)
        if c is None:
            raise PipelineError(f"the profile has no component {name!r}: profile the app again")
        mine = (pin or {}).get(name, {})
        if c["batch_via"] and c["curve"]:
            batch = int(mine.get("batch", batch_for_scale(c["curve"], scale)))
            n = instances_for(call_ms(c, batch), batch * period)
            if gpus and c["resource"] == "gpu" and n > gpus and "batch" not in mine:
                first, need = batch, n
                for b in profitable_sizes(c["curve"]):
                    if b > batch:
                        batch, n = b, instances_for(call_ms(c, b), b * period)
                        if n <= gpus:
                            break
                notes.append(
                    f"{name}: batch {first} needs {need} instances for {rate:g} frames/s on "
                    f"{gpus} GPU(s); batch {batch} needs {n}"
                )
        else:
            batch, n = 1, instances_for(c["ms_per_item"], period)
        why = _fixed(app, prof, name)
        if why is not None and "instances" not in mine:
            if n > spec.instances:
                notes.append(
                    f"{name} needs {n} instances at {rate:g} frames/s but keeps "
                    f"{spec.instances}: {why}"
                )
            n = spec.instances
        plan[name] = {
            "resource": c["resource"],
            "batch": batch,
            "instances": int(mine.get("instances", n)),
        }
    for name, p in plan.items():
        if p["resource"] == "transfer" and "instances" not in (pin or {}).get(name, {}):
            gpu = _gpu_of(app, prof, name)
            if gpu is not None:
                p["instances"] = plan[gpu]["instances"]
                p["gpu_task"] = gpu
    return plan, notes


def tasks_of(prof: Profile, plan: dict[str, dict[str, Any]], rate: float) -> list[Task]:
    """Per-instance loads per period for the packer."""
    period = 1000.0 / rate
    tasks = []
    for name, p in plan.items():
        c, n, b = prof.components[name], p["instances"], p["batch"]
        if p["resource"] == "gpu":
            wall, cpu = call_ms(c, b) / b, min(call_ms(c, b, "cpu_ms"), call_ms(c, b)) / b
            tasks.append(Task(name, "gpu", n, (wall - cpu) / n, cpu / n))
        else:
            cpu = call_ms(c, b, "cpu_ms") / b if c["curve"] else c["cpu_ms_per_item"]
            tasks.append(Task(name, p["resource"], n, cpu / n, gpu_task=p.get("gpu_task")))
    for t in tasks:
        t.load, t.host_load = min(t.load, period), min(t.host_load, period)
    return tasks


def deploy(
    app,
    rate: float,
    scale: float = 0.5,
    cores: Any = None,
    gpus: list[str] | str | None = None,
    mode: str = "auto",
    profile: Profile | str | None = None,
    slo_ms: float | None = None,
    pin: dict[str, dict[str, Any]] | None = None,
    simulate: bool = True,
    sim_seconds: float = 10.0,
    shards: int = 1,
) -> Deployment:
    """Plan a deployment of `app` for `rate` frames/s (all streams together).

    mode: "auto" (everything from the formulas), "semi" (components in `pin` — or given
    `cpus`/`gpus` in the app — keep their instances, batch and placement; the rest is filled),
    "manual" (the app's own instances, batch sizes and cpus/gpus; only predicted). With
    `slo_ms`, plans are searched (batch sizes from small to large, then extra instances at the
    simulated bottleneck) until the simulated p99 latency meets it at the rate; when none does,
    the best plan found is returned with `slo_met` False and a warning. `shards`: the app runs
    as that many processes, shard i with instances i, i + k, … of each component (shards.py);
    a GPU component's planned instances are rounded up to a multiple of it, so every shard
    drives GPU work of its own."""
    from tinydl.pipeline.simulate import simulate as run_sim

    if mode not in MODES:
        raise PipelineError(f"deploy: mode must be one of {MODES}, got {mode!r}")
    if not rate or rate <= 0:
        raise PipelineError(f"deploy: rate must be positive frames/s, got {rate!r}")
    if not 0 <= scale <= 1:
        raise PipelineError(f"deploy: scale must be within [0, 1], got {scale!r}")
    if isinstance(profile, str | os.PathLike):
        profile = Profile.load(profile)
    prof = profile or run_profile(app)
    core_list = _parse_cores(cores)
    gpu_list = (
        ([g.strip() for g in gpus.split(",")] if isinstance(gpus, str) else list(gpus))
        if gpus is not None
        else _detect_gpus(prof)
    )
    check_count("deploy: shards", shards)
    pin = dict(pin or {})
    if mode in ("semi", "manual"):
        from tinydl.pipeline.profile import batch_feeder

        for name, spec in app.components.items():
            given = getattr(spec, "placement", None)
            if mode == "manual" or given:
                feeder = batch_feeder(app, name)
                entry = {"instances": spec.instances, **pin.get(name, {})}
                if feeder is not None:
                    entry.setdefault("batch", app.components[feeder].component.max_size)
                if given:
                    entry.setdefault(
                        "placement",
                        [p.get("gpu") or (p.get("cpus") or [None])[0] for p in given],
                    )
                pin[name] = entry

    def build(scale_: float, extra: dict[str, int]) -> Deployment:
        counts, notes = plan_counts(app, prof, rate, scale_, pin, len(gpu_list))
        for name, k in extra.items():
            counts[name]["instances"] += k
        if shards > 1:  # every shard its own GPU instance(s), as many in each
            for name, c in counts.items():
                if c["resource"] == "gpu" and "instances" not in pin.get(name, {}):
                    c["instances"] = -(-c["instances"] // shards) * shards
            for c in counts.values():
                if c.get("gpu_task") and c["gpu_task"] in counts:
                    c["instances"] = counts[c["gpu_task"]]["instances"]
        tasks = tasks_of(prof, counts, rate)
        pinned = {n: p["placement"] for n, p in pin.items() if "placement" in p}
        placed, boxes, warns = pack(tasks, core_list, gpu_list, 1000.0 / rate, pinned)
        comps = {
            name: {
                "resource": c["resource"],
                "instances": c["instances"],
                "batch": c["batch"],
                "placement": placed[name]["placement"],
                "cores": placed[name]["cores"],
            }
            for name, c in counts.items()
        }
        plan = Deployment(
            app.name,
            rate,
            scale_,
            mode,
            comps,
            boxes=[b.row() for b in boxes],
            warnings=notes + warns,
            slo_ms=slo_ms,
            shards=shards,
        )
        if simulate:
            plan.predicted = run_sim(app, plan, prof, seconds=sim_seconds)
        return plan

    plan = build(scale, {})
    if slo_ms is not None and simulate:
        adjustable = {n for n in app.components if n not in pin and _fixed(app, prof, n) is None}
        plan = _search_slo(plan, build, prof, slo_ms, adjustable)
    if shards > 1:
        shared = [
            f"{n} ({c['instances']})"
            for n, c in plan.components.items()
            if c["resource"] == "gpu" and c["instances"] % shards
        ]
        if shared:
            plan.warnings.append(
                f"{shards} shards: GPU components whose instances do not divide among them "
                f"are copied into shards that share a GPU: {', '.join(shared)}"
            )
    return plan


def _meets(plan: Deployment, slo_ms: float) -> bool:
    p = plan.predicted
    return p["latency_ms"]["p99"] <= slo_ms and p["throughput_fps"] >= 0.95 * p["input_fps"]


def _search_slo(
    first: Deployment, build, prof: Profile, slo_ms: float, adjustable: set[str]
) -> Deployment:
    """The plan at the asked scale if it meets the SLO; else the first that does, trying each
    distinct set of batch sizes from small batches up, each with up to 4 extra instances added
    one at a time to the adjustable component the simulation shows waiting longest."""
    if _meets(first, slo_ms):
        first.slo_met = True
        return first
    scales, seen = [], set()
    for s in range(11):
        ladder = tuple(batch_for_scale(c["curve"], s / 10) for c in prof.components.values())
        if ladder not in seen:
            seen.add(ladder)
            scales.append(s / 10)
    best, tried = first, 1
    for s in scales:
        extra: dict[str, int] = {}
        for _ in range(5):
            plan = build(s, extra)
            tried += 1
            if _meets(plan, slo_ms):
                plan.slo_met = True
                plan.warnings.append(
                    f"scale {first.scale:g} misses the SLO; plan found at scale {s:g}"
                    + (f" with extra instances {extra}" if extra else "")
                )
                return plan
            if plan.predicted["latency_ms"]["p99"] < best.predicted["latency_ms"]["p99"]:
                best = plan
            waits = plan.predicted.get("queue_wait_ms", {})
            worst = max(
                (
                    n
                    for n in waits
                    if n in adjustable and plan.components[n]["resource"] != "transfer"
                ),
                key=lambda n: waits[n],
                default=None,
            )
            if worst is None or waits[worst] <= 0:
                break
            extra[worst] = extra.get(worst, 0) + 1
    best.slo_met = False
    best.warnings.append(
        f"no plan meets p99 <= {slo_ms:g} ms at {first.rate:g} frames/s ({tried} plans "
        f"simulated); the best gives p99 {best.predicted['latency_ms']['p99']:.1f} ms"
    )
    return best
