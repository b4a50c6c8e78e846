"""The Ray executor: a component instance runs as a Ray actor, on this machine or a cluster.

As with the process executor, the node's queues, joins and accounting stay in the app (the Ray
driver); its thread calls the actor for each call and waits for the answer. Payloads travel
through Ray's object store: NumPy arrays are written once by the sender and mapped, zero-copy
and read-only, by the receiver on the same node (payloads are immutable once sent anyway).

- Ray is started by the first app that needs it: `ray.init(**App(ray={...}))`, e.g.
  `ray={"address": "auto"}` to join a cluster started with `ray start --head` (or set
  RAY_ADDRESS); an app run after `ray.init(...)` uses that connection as it is.
- Placement: the placement of each instance (a deployment plan's, or `add(..., cpus=[0, 1],
  gpus=["cuda:0"])`) becomes a box — its GPU, else its set of cores — and the boxes the bundles
  of one placement group (`App.placement_strategy`: Ray's PACK, SPREAD, STRICT_PACK or
  STRICT_SPREAD); the instances in a box share it. Unplaced actors take Ray's defaults.
- A component's clock (`ctx.now_ns`) is set to the driver's monotonic clock at open, so ticks
  and packet timestamps mean the same on every node.
- An actor whose process dies (crashed, killed, its node lost) is noticed by Ray at once: the
  call's frames are errored ("name: worker died"), the instance is restarted (up to
  `max_restarts`), and the app goes on.
- Components that must live in the app (`executors = ("thread",)`: Collect, Metrics) stay in
  the driver on threads.
- Between two actors, payloads do not pass through the driver: an actor whose output port
  feeds only actors puts each payload in the object store itself (a Batch item by item) and
  answers with references; the driver accounts for the packets and hands the references on;
  the next actor reads them (`direct` in the report counts such calls). The actor that put them
  owns them, so actors stay alive until the app ends (a restarted one's are lost: the frames
  that still need them are errored where they are read).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any

from tinydl.pipeline.component import Component, Context, finished
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, Packet
from tinydl.pipeline.process import OPEN_TIMEOUT_S, ProcessNode, RemoteError, WorkerDied
from tinydl.pipeline.runtime import CallTimeout

PLACEMENT_TIMEOUT_S = 60.0
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _ray():
    try:
        import ray
    except ImportError:
        raise PipelineError("executor 'ray' needs Ray: pip install 'tinydl[ray]'") from None
    return ray


def connect(options: dict[str, Any] | None) -> None:
    """Start or join Ray unless this process is already connected."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(**{"log_to_driver": False, **(options or {})})


# -- placement -------------------------------------------------------------------------------


def _box(place: dict[str, Any]) -> tuple[str, Any] | None:
    """The box an instance is placed in: its GPU, else its set of CPU cores, else none."""
    if place.get("gpu"):
        return ("GPU", place["gpu"])
    if place.get("cpus"):
        return ("CPU", tuple(place["cpus"]))
    return None


class Placement:
    """One placement group for the boxes of the app's placed Ray components: the placement a
    deployment plan (or `add(..., cpus=[...], gpus=[...])`) gives each instance. Each distinct
    GPU is a bundle {"GPU": 1}, each distinct set of cores a bundle {"CPU": cores}; the k
    instances in one box each reserve 1/k of it."""

    def __init__(self, specs: list, strategy: str):
        ray = _ray()
        from ray.util import placement_group

        if strategy not in STRATEGIES:
            raise PipelineError(f"placement strategy must be one of {STRATEGIES}, got {strategy!r}")
        boxes: dict[tuple[str, Any], list[tuple[str, int]]] = {}
        for spec in specs:
            for i in range(spec.instances if spec.placement else 0):
                box = _box(spec.placement[i % len(spec.placement)])
                if box is not None:
                    boxes.setdefault(box, []).append((spec.name, i))
        self.bundle: dict[tuple[str, int], tuple[int, str, float]] = {}
        bundles = []
        for index, ((resource, what), members) in enumerate(boxes.items()):
            amount = 1.0 if resource == "GPU" else float(len(what))
            bundles.append({resource: amount})
            for member in members:
                self.bundle[member] = (index, resource, amount / len(members))
        need = {r: sum(b.get(r, 0) for b in bundles) for r in ("CPU", "GPU")}
        have = ray.cluster_resources()
        short = [r for r, n in need.items() if n > have.get(r, 0)]
        if short:
            raise PipelineError(
                f"cannot place the app's boxes ({need['CPU']:g} CPU, {need['GPU']:g} GPU): the "
                f"cluster has {have.get('CPU', 0):g} CPU, {have.get('GPU', 0):g} GPU"
            )
        self.group = placement_group(bundles, strategy=strategy) if bundles else None
        if self.group is not None:
            try:
                ray.get(self.group.ready(), timeout=PLACEMENT_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                self.remove()
                raise PipelineError(
                    f"cannot place the app's boxes ({need['CPU']:g} CPU, {need['GPU']:g} GPU, "
                    f"{strategy}) in {PLACEMENT_TIMEOUT_S:g} s; the cluster's nodes: "
                    f"{[n['Resources'] for n in ray.nodes() if n['Alive']]}"
                ) from None

    def options(self, name: str, instance: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if (name, instance) not in self.bundle:
            return {}
        index, resource, share = self.bundle[(name, instance)]
        return {
            "num_cpus": share if resource == "CPU" else 0,
            "num_gpus": share if resource == "GPU" else 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=index
            ),
        }

    def remove(self) -> None:
        if self.group is not None:
            from ray.util import remove_placement_group

            remove_placement_group(self.group)
            self.group = None


# -- the actor -------------------------------------------------------------------------------


class _Actor:
    """Hosts one component instance in a Ray worker (made a Ray actor class by `_actor_class`)."""

    def __init__(self, component: Component, name: str, instance: int, instances: int, app_id):
        self.component = component
        self.args = (name, instance, instances, app_id)
        self.ctx: Context | None = None

    def clock(self) -> int:
        return time.monotonic_ns()

    def open(self, flow_id: int, offset_ns: int, gpu: str | None) -> tuple:
        ctx = self.ctx = Context(*self.args, clock=lambda: time.monotonic_ns() + offset_ns)
        if gpu and gpu.startswith("cuda:") and _ray().get_gpu_ids():
            gpu = "cuda:0"  # Ray shows the actor only the GPU it was given (CUDA_VISIBLE_DEVICES)
        ctx.flow_id, ctx.gpu = flow_id, gpu
        try:
            self.component.open(ctx)
        except BaseException as exc:
            return _failure(exc)
        self.guarded = (
            type(self.component).wait_for_resource is not Component.wait_for_resource
            or type(self.component).release_resource is not Component.release_resource
        )
        node = _ray().get_runtime_context().get_node_id()
        return ("ready", ctx.flow_id, os.getpid(), node)

    def process(self, inputs: dict, tick_at: int | None = None, by_ref=()) -> tuple:
        """One call; payloads of `inputs` may be references another actor put (read here);
        the outputs on the ports in `by_ref` go back as references (put here)."""
        comp, ctx = self.component, self.ctx
        ctx.tick_at = tick_at  # the driver's: None once the tick asked for has fired
        try:
            _resolve(inputs)
            if self.guarded:
                comp.wait_for_resource(ctx)
            try:
                out = finished(comp.process(ctx, inputs))
            finally:
                if self.guarded:
                    comp.release_resource(ctx)
            if by_ref and type(out) is dict:
                out = {port: _put_port(v) if port in by_ref else v for port, v in out.items()}
        except Exception as exc:
            return _failure(exc)
        return ("ok", out, ctx.tick_at, ctx.flow_id)

    def close(self, stop_reason: str | None) -> tuple:
        self.ctx.stop_reason = stop_reason
        try:
            out = self.component.close(self.ctx)
        except Exception as exc:
            return _failure(exc)
        return ("ok", out, None, self.ctx.flow_id)


def _failure(exc: BaseException) -> tuple:
    return ("error", type(exc).__name__, str(exc), traceback.format_exc())


def _put(payload: Any) -> Any:
    """A payload leaving for another actor: in the object store, a Batch's items one by one
    (the driver still sees each frame's ids)."""
    if isinstance(payload, Batch):
        return type(payload)([p.derive(_put(p.payload)) for p in payload.items])
    return payload if payload is None else _ray().put(payload)


def _put_port(value: Any) -> Any:
    """What `process` returned on one port (a value, a Packet, or a list of them), put."""
    if type(value) is list:
        return [_put_port(v) for v in value]
    return value.derive(_put(value.payload)) if type(value) is Packet else _put(value)


def _references(packets, into: list[Packet], ref_type=None) -> list[Packet]:
    """The packets (a Batch's items included) whose payload is an object-store reference."""
    ref_type = ref_type or _ray().ObjectRef
    for p in packets:
        if isinstance(p.payload, Batch):
            _references(p.payload.items, into, ref_type)
        elif isinstance(p.payload, ref_type):
            into.append(p)
    return into


def _resolve(inputs: dict) -> None:
    """Read the payloads another actor left in the object store, all in one `ray.get`."""
    refs = _references(inputs.values(), [])
    if refs:
        for p, value in zip(refs, _ray().get([p.payload for p in refs]), strict=True):
            p.payload = value


def wire_references(nodes: list) -> None:
    """The ports of each Ray instance whose every consumer is a Ray instance: their payloads
    go from actor to actor as object-store references."""
    for node in nodes:
        if node.executor != "ray":
            continue
        node.by_ref = frozenset(
            port
            for port, routes in node.outlets.items()
            if all(q.owner.executor == "ray" for r in routes for q in r.queues)
        )


_actor_lock = threading.Lock()
_actor_cls = None


def _actor_class():
    global _actor_cls
    with _actor_lock:
        if _actor_cls is None:
            _actor_cls = _ray().remote(_Actor)
        return _actor_cls


# -- the node in the driver ------------------------------------------------------------------


class RayNode(ProcessNode):
    """A component instance in a Ray actor, driven by a thread of the app (the driver)."""

    executor = "ray"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.actor = None
        self.pid: int | None = None
        self.node_id: str | None = None
        self.by_ref: frozenset[str] = frozenset()  # output ports sent as references
        self.retired: list = []  # actors closed, kept until the app ends (they own objects)

    def _start_worker(self) -> None:
        spec = self.spec
        options: dict[str, Any] = {"max_restarts": 0, "name": None}
        if self.rt.placement is not None:
            options.update(self.rt.placement.options(spec.name, self.ctx.instance))
        ctx = self.ctx
        self.actor = (
            _actor_class()
            .options(**options)
            .remote(self.component, self.name, ctx.instance, ctx.instances, ctx.app_id)
        )
        offset = self._clock_offset()
        msg = self._get(
            self.actor.open.remote(ctx.flow_id, offset, ctx.gpu),
            self.timeout or OPEN_TIMEOUT_S,
            "open",
        )
        if msg[0] != "ready":
            self._kill()
            raise RemoteError(msg[1], f"open failed in the actor: {msg[1]}: {msg[2]}", msg[3])
        ctx.flow_id, self.pid, self.node_id = msg[1], msg[2], msg[3]
        if self.rt.trace is not None:
            self.track = self.rt.trace.track(
                f"{self.name} (ray actor {self.pid}, node {self.node_id[:8]})", pid=self.pid, tid=1
            )

    def _clock_offset(self) -> int:
        """The actor's monotonic clock to ours, from the shortest of a few round trips (± half
        of it). The first call waits for the actor to start: its trip is not symmetric."""
        self._get(self.actor.clock.remote(), OPEN_TIMEOUT_S, "open")
        best = None
        for _ in range(3):
            t0 = time.monotonic_ns()
            theirs = self._get(self.actor.clock.remote(), OPEN_TIMEOUT_S, "open")
            t1 = time.monotonic_ns()
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, (t0 + t1) // 2 - theirs)
        return best[1]

    def _get(self, ref, timeout: float | None, what: str) -> Any:
        ray = _ray()
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            self._kill()
            raise CallTimeout(f"no answer in {timeout:g} s during {what}") from None
        except ray.exceptions.RayActorError as exc:
            self._kill()
            raise WorkerDied(f"actor died during {what} ({type(exc).__name__})") from None

    def _rpc(self, kind: str, body: Any, what: str) -> Any:
        if self.actor is None:
            raise WorkerDied("no actor")
        method = getattr(self.actor, kind)
        if kind == "process":
            call = method.remote(body, self.ctx.tick_at, self.by_ref)
        else:
            call = method.remote(body)
        msg = self._get(call, self.timeout, what)
        if msg[0] == "error":
            raise RemoteError(msg[1], msg[2], msg[3])
        _, out, tick_at, flow_id = msg
        self.ctx.tick_at, self.ctx.flow_id = tick_at, flow_id
        return out

    def _process(self, inputs: dict) -> Any:
        if _references(inputs.values(), []):
            self.stats.direct += 1
        return self._rpc("process", inputs, "process")

    def _close(self) -> Any:
        if self.actor is None:
            return None
        try:
            return self._rpc("close", self.ctx.stop_reason, "close")
        finally:
            if self.by_ref:  # the next actors may still read what it put
                self.retired.append(self.actor)
                self.actor = None
                self.rt.at_end.append(self._retire)
            self._kill()

    def _retire(self) -> None:
        for actor in self.retired:
            _ray().kill(actor, no_restart=True)
        self.retired.clear()

    def _kill(self) -> None:
        actor, self.actor = self.actor, None
        if actor is not None:
            _ray().kill(actor, no_restart=True)

    def _shutdown(self) -> None:
        self._kill()
