"""A discrete-event simulation (SimPy) of a deployed app, from its profile: what the deployer
predicts before anything runs.

The model: each source instance is a flow emitting frames at rate / flows (its `count` frames,
or `seconds` worth); each edge is a queue per target instance with its capacity and policy
(block waits, drop-oldest and keep-latest discard and count, drop-if-older-than discards stale
packets when taken); each component instance is a server taking its queue in arrival order
(joins wait for every port). A call on k frames costs the profile's time: a CPU task holds its
core for its CPU time and then waits out the rest of its wall time; a GPU task holds its core
for its host CPU time and then its GPU for the rest (calls on one GPU run one at a time).
`Batch` gathers up to its (planned) size, leaving max_wait after its first item (0: whatever
is queued; None: when full, or at the end); `GroupByRequest` gathers `streams` frames;
`Unbatch`/`SplitByFlow` send each frame on alone. Not modelled: the GIL, collect edges'
reordering waits, inlined calls, startup.

    result = simulate(app, plan, profile)   # throughput, latency p50/p99, drops, queues, busy
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from typing import Any

from tinydl.pipeline.errors import PipelineError

BATCHERS = ("Batch", "GroupByRequest")
SPLITTERS = ("Unbatch", "SplitByFlow")


def _simpy():
    try:
        import simpy
    except ImportError:
        raise PipelineError("the deployer's simulation needs SimPy: pip install simpy") from None
    return simpy


class _Frame:
    __slots__ = ("flow", "rid", "born", "copies", "out")

    def __init__(self, flow: int, rid: int, born: float):
        self.flow, self.rid, self.born = flow, rid, born
        self.copies, self.out = 1, False


class _Queue:
    """One edge's queue into one instance (several edges into an instance share its inbox)."""

    def __init__(self, sim, label: str, capacity: int, policy: str, max_age_ms: float | None):
        self.sim, self.label = sim, label
        self.capacity, self.policy, self.max_age = capacity, policy, max_age_ms
        self.items: deque = deque()
        self.space = sim.env.event()


class _Inbox:
    def __init__(self, sim):
        self.sim = sim
        self.queues: list[_Queue] = []
        self.order: deque[_Queue] = deque()  # arrival order across queues
        self.ready = sim.env.event()
        self.producers = 0
        self.ended = 0
        self.high = 0

    def total(self) -> int:
        return sum(len(q.items) for q in self.queues)


class _Sim:
    def __init__(self, app, plan, prof, seconds: float):
        simpy = _simpy()
        self.env = simpy.Environment()
        self.app, self.plan, self.prof = app, plan, prof
        self.rate = plan.rate
        self.seconds = seconds
        self.latencies: list[float] = []
        self.frames_in = 0
        self.frames_out = 0
        self.last_out = 0.0
        self.drops: Counter[str] = Counter()
        self.busy: Counter[str] = Counter()
        self.comp_busy: Counter[str] = Counter()
        self.waits: dict[str, list[float]] = {}
        self.cores = {}
        self.gpus = {}
        self.inboxes: dict[str, list[_Inbox]] = {}
        self.routes: dict[str, list] = {}

    # -- resources --------------------------------------------------------------------------------
    def core(self, c):
        if c not in self.cores:
            self.cores[c] = _simpy().Resource(self.env, 1)
        return self.cores[c]

    def gpu(self, g):
        if g not in self.gpus:
            self.gpus[g] = _simpy().Resource(self.env, 1)
        return self.gpus[g]

    def hold(self, res, key: str, comp: str, ms: float):
        if ms <= 0:
            return
        if res is None:
            yield self.env.timeout(ms)
            return
        with res.request() as req:
            yield req
            yield self.env.timeout(ms)
        self.busy[key] += ms

    # -- frames -----------------------------------------------------------------------------------
    def end(self, frames: list[_Frame], out: bool, reason: str = "") -> None:
        for f in frames:
            f.out = f.out or out
            f.copies -= 1
            if f.copies == 0:
                if f.out:
                    self.frames_out += 1
                    self.latencies.append(self.env.now - f.born)
                    self.last_out = self.env.now
                else:
                    self.drops[reason] += 1

    def send(self, name: str, port: str | None, frames: list[_Frame]):
        """Deliver a packet of frames along `name`'s out-edges (a generator: block waits)."""
        routes = [r for r in self.routes[name] if port is None or r[0].src_port == port]
        if not routes:
            self.end(frames, True)
            return
        for f in frames:
            f.copies += len(routes) - 1
        for edge, inboxes, rr in routes:
            if edge.dispatch == "by_flow":
                box = inboxes[frames[0].flow % len(inboxes)]
            elif edge.dispatch == "least_busy":
                box = min(inboxes, key=lambda b: b.total())
            else:
                box = inboxes[next(rr) % len(inboxes)]
            yield from self.put(box, edge, frames)

    def put(self, box: _Inbox, edge, frames: list[_Frame]):
        q = next(q for q in box.queues if q.label == edge.label())
        while q.policy in ("block", "drop-if-older-than") and len(q.items) >= q.capacity:
            q.space = q.space if not q.space.triggered else self.env.event()
            yield q.space
        if q.policy == "drop-oldest" and len(q.items) >= q.capacity:
            self._discard(box, q, 1, f"queue full (drop-oldest) on {q.label}")
        elif q.policy == "keep-latest" and q.items:
            self._discard(box, q, len(q.items), f"superseded (keep-latest) on {q.label}")
        q.items.append((self.env.now, frames))
        box.order.append(q)
        box.high = max(box.high, box.total())
        if not box.ready.triggered:
            box.ready.succeed()

    def _discard(self, box: _Inbox, q: _Queue, n: int, reason: str) -> None:
        for _ in range(n):
            _, frames = q.items.popleft()
            box.order.remove(q)
            self.end(frames, False, reason)

    def take(self, box: _Inbox, name: str):
        """The next packet of an inbox as (port, frames), or None at the end of its input."""
        while True:
            while box.order:
                q = box.order.popleft()
                at, frames = q.items.popleft()
                if not q.space.triggered:
                    q.space.succeed()
                if q.max_age is not None and self.env.now - frames[0].born > q.max_age:
                    self.end(frames, False, f"older than {q.max_age / 1e3:g} s on {q.label}")
                    continue
                self.waits.setdefault(name, []).append(self.env.now - at)
                return q, frames
            if box.ended >= box.producers:
                return None
            box.ready = self.env.event()
            yield box.ready

    def finish(self, name: str):
        for _, inboxes, _ in self.routes[name]:
            for box in inboxes:
                box.ended += 1
                if not box.ready.triggered:
                    box.ready.succeed()
        yield from ()

    # -- servers ----------------------------------------------------------------------------------
    def source(
        self, name: str, instance: int, flow: int, count: int, period_ms: float, t_ms: float
    ):
        start = self.env.now
        for rid in range(count):
            due = start + rid * period_ms
            if due > self.env.now:
                yield self.env.timeout(due - self.env.now)
            if t_ms > 0:
                yield self.env.timeout(t_ms)
            self.frames_in += 1
            yield from self.send(name, None, [_Frame(flow, rid, self.env.now)])
        yield from self.finish(name)

    def server(self, name: str, instance: int, box: _Inbox):
        comp = self.prof.components[name]
        place = self.plan.components[name]
        spec = self.app.components[name]
        kind = comp["type"]
        core = place["cores"][instance % len(place["cores"])] if place.get("cores") else None
        gpu = place["placement"][instance] if comp["resource"] == "gpu" else None
        ports = list(spec.component.inputs)
        partial: dict[tuple[int, int], dict[str, list[_Frame]]] = {}
        while True:
            got = yield from self.take(box, name)
            if got is None:
                break
            q, frames = got
            if len(ports) > 1:  # a join: every port's packet of this frame
                key = (frames[0].flow, frames[0].rid)
                have = partial.setdefault(key, {})
                port = next(e.dst_port for e in self.app.edges if e.label() == q.label)
                have[port] = frames
                if len(have) < len(ports):
                    continue
                del partial[key]
                for other in list(have.values())[1:]:  # the joined copies end here
                    self.end(other, False, "joined")
                frames = next(iter(have.values()))
            k = len(frames)
            wall = _call_ms(comp, k)
            cpu = min(wall, _call_ms(comp, k, "cpu_ms"))
            core_res = self.core(core) if core is not None else None
            yield from self.hold(core_res, f"core {core}", name, cpu)
            if gpu is not None:
                yield from self.hold(self.gpu(gpu), f"gpu {gpu}", name, wall - cpu)
            elif wall > cpu:
                yield self.env.timeout(wall - cpu)
            self.comp_busy[name] += wall
            if not spec.component.outputs:
                self.end(frames, True)
            elif kind == "SplitByFlow":
                for f in frames:
                    yield from self.send(name, f"flow{f.flow}", [f])
            elif kind in SPLITTERS:
                for f in frames:
                    yield from self.send(name, None, [f])
            else:
                yield from self.send(name, None, frames)
        yield from self.finish(name)

    def batcher(self, name: str, instance: int, box: _Inbox, size: int, max_wait_ms: float | None):
        pending: list[_Frame] = []
        first = 0.0
        while True:
            if pending and max_wait_ms is not None and not box.order:
                left = first + max_wait_ms - self.env.now
                if left <= 0 or max_wait_ms == 0:
                    yield from self.send(name, None, pending)
                    pending = []
                    continue
                if box.ended < box.producers:
                    box.ready = self.env.event()
                    yield box.ready | self.env.timeout(left)
                    continue
            got = yield from self.take(box, name)
            if got is None:
                break
            if not pending:
                first = self.env.now
            pending += got[1]
            if len(pending) >= size:
                yield from self.send(name, None, pending)
                pending = []
        if pending:
            yield from self.send(name, None, pending)
        yield from self.finish(name)

    # -- building ---------------------------------------------------------------------------------
    def build(self) -> None:
        app, plan = self.app, self.plan
        for name in app.components:
            n = plan.components[name]["instances"]
            self.inboxes[name] = [_Inbox(self) for _ in range(n)]
        self.routes = {name: [] for name in app.components}
        for e in app.edges:
            targets = self.inboxes[e.dst]
            if e.dst_instance is not None:
                targets = [targets[min(e.dst_instance, len(targets) - 1)]]
            producers = plan.components[e.src]["instances"]
            for box in targets:
                box.queues.append(
                    _Queue(
                        self,
                        e.label(),
                        e.capacity,
                        e.policy,
                        None if e.max_age is None else e.max_age * 1e3,
                    )
                )
                box.producers += producers
            self.routes[e.src].append((e, targets, itertools.count()))
        sizes = {}
        for name, c in plan.components.items():
            feeder = self.prof.components[name].get("batch_via")
            if feeder and self.prof.components[name].get("curve"):
                sizes[feeder] = c["batch"]
        flows = sum(
            plan.components[n]["instances"]
            for n, s in app.components.items()
            if not s.component.inputs
        )
        period_ms = 1000.0 * flows / self.rate
        flow = 0
        for name, spec in app.components.items():
            comp = spec.component
            n = plan.components[name]["instances"]
            for i in range(n):
                if not comp.inputs:
                    count = getattr(comp, "count", None)
                    limit = math.ceil(self.seconds * 1000.0 / period_ms)
                    count = limit if count is None else min(int(count), limit)
                    t = self.prof.components[name]["ms_per_item"]
                    self.env.process(self.source(name, i, flow, count, period_ms, t))
                    flow += 1
                elif type(comp).__name__ in BATCHERS:
                    if type(comp).__name__ == "Batch":
                        size = sizes.get(name, comp.max_size)
                    else:
                        size = comp.streams
                    wait = comp.max_wait
                    self.env.process(
                        self.batcher(
                            name,
                            i,
                            self.inboxes[name][i],
                            size,
                            None if wait is None else wait * 1e3,
                        )
                    )
                else:
                    self.env.process(self.server(name, i, self.inboxes[name][i]))

    def result(self) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def pct(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0.0

        span = self.last_out
        cores = [b for b in self.plan.boxes if b["kind"] != "GPU"]
        gpus = [b for b in self.plan.boxes if b["kind"] == "GPU"]
        core_busy = {
            str(b["id"]): self.busy[f"core {b['id']}"] / span if span else 0.0 for b in cores
        }
        gpu_busy = {str(b["id"]): self.busy[f"gpu {b['id']}"] / span if span else 0.0 for b in gpus}
        n = {name: c["instances"] for name, c in self.plan.components.items()}
        return {
            "input_fps": self.rate,
            "throughput_fps": self.frames_out / span * 1000.0 if span else 0.0,
            "latency_ms": {"p50": pct(0.5), "p99": pct(0.99)},
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "dropped": sum(self.drops.values()),
            "drops": dict(self.drops),
            "queue_max": {
                name: max(b.high for b in boxes) for name, boxes in self.inboxes.items() if boxes
            },
            "queue_wait_ms": {name: sum(w) / len(w) for name, w in self.waits.items() if w},
            "components": {
                name: self.comp_busy[name] / span / n[name] if span else 0.0 for name in n
            },
            "cpu_busy": sum(core_busy.values()) / len(core_busy) if core_busy else 0.0,
            "gpu_busy": sum(gpu_busy.values()) / len(gpu_busy) if gpu_busy else 0.0,
            "busy": {**{f"core {k}": v for k, v in core_busy.items()}, **gpu_busy},
            "simulated_s": span / 1000.0,
        }


def _call_ms(entry: dict[str, Any], k: int, key: str = "ms") -> float:
    from tinydl.pipeline.deploy import call_ms

    if entry.get("curve"):
        return call_ms(entry, k, key)
    per = entry["ms_per_item"] if key == "ms" else entry["cpu_ms_per_item"]
    return per * k


def simulate(app, plan, prof, seconds: float = 10.0) -> dict[str, Any]:
    """Simulate the app as `plan` deploys it (at most `seconds` of input); the predictions.
    A plan with shards is simulated as its first shard (its share of the streams and of every
    component's instances), the counts and busy shares scaled to all of them."""
    shards = getattr(plan, "shards", 1)
    if shards > 1:
        return _simulate_shards(app, plan, prof, seconds, shards)
    sim = _Sim(app, plan, prof, seconds)
    sim.build()
    sim.env.run()
    return sim.result()


def _simulate_shards(app, plan, prof, seconds: float, k: int) -> dict[str, Any]:
    import copy

    from tinydl.pipeline.shards import shard

    part = shard(app, 0, k)
    sub = copy.copy(plan)
    sub.shards = 1
    sub.components = {}
    flows = mine_flows = 0

    def pick(per_instance, mine):  # the shard's instances' entries (a plan's lists cycle)
        return [per_instance[i % len(per_instance)] for i in mine] if per_instance else []

    for name, c in plan.components.items():
        mine, _ = part.components[name].shard_of
        sub.components[name] = {
            **c,
            "instances": len(mine),
            "placement": pick(c.get("placement"), mine),
            "cores": pick(c.get("cores"), mine),
        }
        if not app.components[name].component.inputs:
            flows += c["instances"]
            mine_flows += len(mine)
    sub.rate = plan.rate * mine_flows / flows if flows else plan.rate / k
    r = simulate(part, sub, prof, seconds)
    times = plan.rate / sub.rate
    r["throughput_fps"] *= times
    for key in ("frames_in", "frames_out", "dropped"):
        r[key] = round(r[key] * times)
    r["drops"] = {reason: round(n * times) for reason, n in r["drops"].items()}
    r["input_fps"] = plan.rate
    # Every shard loads its boxes as the first does: the busy shares add up, at most 1.
    r["gpu_busy"] = min(1.0, r["gpu_busy"] * k)
    r["cpu_busy"] = min(1.0, r["cpu_busy"] * k)
    r["shards"] = k
    return r
