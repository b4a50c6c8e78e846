"""Component: the one API every pipeline stage implements, its Context, and ComponentRunner.

    class Double(Component):
        '''Inputs: in (Tensor). Outputs: out (Tensor).'''
        inputs = {"in": Tensor}
        outputs = {"out": Tensor}

        def process(self, ctx, inputs):
            return {"out": Tensor(inputs["in"].payload.data * 2)}

`process` gets the packets of one frame (one per input port, joined by (flow_id, request_id)) and
returns `{port: value}`: a payload (sent with the input's ids), a Packet (sent as is) or a list
of those (several packets), or None for nothing. A component with no input ports is a source:
the framework calls `process(ctx, {})` until it returns None, numbering the payloads it returns
(`request_id` 0, 1, …, `flow_id` = `ctx.flow_id`, the instance index unless set).

A call may also return `Later(finish)` when its work is only enqueued (GPU kernels, an
asynchronous copy): the framework calls `finish()` for the outputs once they are due, and with
`add(..., in_flight=n)` (n > 1, thread executor) it does so on a thread of the node's own while
`process` is called for the next n - 1 inputs, so the GPU is fed while the host waits; results
still leave in call order. With in_flight 1 (the default), and in worker processes, `finish()`
is called right away.

A component is thread-compatible, not thread-safe: the framework never calls one instance from
two threads at once (a `finish` may run beside a later `process`: it touches only what its own
call gave it). `expand` and restarts build fresh instances with the constructor arguments,
which `Component.__new__` records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Packet, bind, substitute

EXECUTORS = ("thread", "process", "ray")


class Context:
    """What a component knows of where it runs; `request_tick` asks for a call without input;
    `stop_reason` (at close) says whether the app was stopped early."""

    def __init__(
        self,
        name: str,
        instance: int = 0,
        instances: int = 1,
        app_id: str = "",
        clock: Callable[[], int] = time.monotonic_ns,
    ):
        self.name = name
        self.instance = instance
        self.instances = instances
        self.app_id = app_id
        self.flow_id = instance
        self.now_ns = clock
        self.tick_at: int | None = None
        # Why the app was stopped early (a timeout, an interrupt, an error with stop_on_error),
        # set before `close`; None when it ran to the end. A sink writing a file discards it.
        self.stop_reason: str | None = None
        self.gpu: str | None = None  # the GPU a deployment gave this instance ("cuda:1")
        self.pool: Any = None  # a frame pool (shm.Pool) where outputs may cross processes
        # Calls whose `Later` may be outstanding at once (add(..., in_flight=n); 1 in workers).
        self.in_flight = 1

    def empty(self, shape: Any, dtype: Any = np.uint8) -> np.ndarray:
        """An uninitialized array to fill with an output. Where the app has worker processes
        it lies in shared memory, and crosses them by reference, without a copy."""
        return np.empty(shape, dtype) if self.pool is None else self.pool.empty(shape, dtype)

    def request_tick(self, delay_s: float) -> None:
        """Call `process(ctx, {})` once `delay_s` has passed, unless input comes first and the
        component asks again. The earliest pending request wins."""
        at = self.now_ns() + int(delay_s * 1e9)
        self.tick_at = at if self.tick_at is None else min(self.tick_at, at)


class Later:
    """What `process` returns when its outputs are not ready yet: `finish()` waits for them and
    returns what `process` would have (a dict or None); raising there errors the call's frames."""

    __slots__ = ("finish",)

    def __init__(self, finish: Callable[[], dict[str, Any] | None]):
        self.finish = finish


def finished(out: Any) -> Any:
    """A call's outputs, a `Later` waited for here."""
    return out.finish() if type(out) is Later else out


class Component:
    """Base of every pipeline stage; see the module docstring for the contract."""

    inputs: dict[str, Any] = {"in": Any}
    outputs: dict[str, Any] = {"out": Any}
    holds_inputs = False  # keeps packets across calls (Batch): their frames stay open meanwhile
    executors: tuple[str, ...] = EXECUTORS
    # Opens its GPU work on ctx.gpu itself (Inference): instances on different GPUs may then
    # stay threads of one process; others get a worker process per GPU (its environment).
    uses_ctx_gpu = False
    # Keeps state per flow (a tracker): its instances are fed by flow (an edge left at
    # round_robin dispatches by_flow), so each stream stays with one instance.
    keeps_flow_state = False
    # Counts on every stream of the app (GroupByRequest, SplitByFlow): such an app cannot be
    # sharded, a shard seeing only its share of the streams.
    sees_all_flows = False
    registry: dict[str, type[Component]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            Component.registry.setdefault(cls.__name__, cls)

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._init_args = (args, kwargs)
        return self

    def open(self, ctx: Context) -> None:
        """Acquire what processing needs (files, sessions, devices)."""

    def process(self, ctx: Context, inputs: dict[str, Packet]) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__}.process")

    def close(self, ctx: Context) -> dict[str, Any] | None:
        """Release resources; may return final outputs (as process does, as Packets)."""
        return None

    def wait_for_resource(self, ctx: Context) -> None:
        """Called before each process call: block until a shared resource (a GPU) is free."""

    def release_resource(self, ctx: Context) -> None:
        """Called after each process call, also when it raised."""

    def output_types(self, input_types: dict[str, Any]) -> dict[str, Any]:
        """The types this instance sends, given the types connected to its inputs: the declared
        output types with their type variables bound. Override when it depends on options."""
        bindings: dict = {}
        for port, t in input_types.items():
            bind(self.inputs[port], t, bindings)
        return {port: substitute(t, bindings) for port, t in self.outputs.items()}

    def clone(self) -> Component:
        """A fresh, unopened instance built with the same constructor arguments."""
        args, kwargs = self._init_args
        return type(self)(*args, **kwargs)


def output_packets(
    component: Component, name: str, outputs: Any, current: Packet | None
) -> list[tuple[str, Packet]]:
    """Normalize what process/close returned into (port, Packet) pairs."""
    if outputs is None:
        return []
    if not isinstance(outputs, dict):
        raise PipelineError(
            f"{name}: process must return a dict {{port: value}} or None, "
            f"got {type(outputs).__name__}"
        )
    pairs = []
    for port, value in outputs.items():
        if port not in component.outputs:
            raise PipelineError(
                f"{name}: returned output port {port!r}, but its output ports "
                f"are {list(component.outputs)}"
            )
        for v in value if type(value) is list else (value,):
            if type(v) is Packet:
                pairs.append((port, v))
            elif current is None:
                raise PipelineError(
                    f"{name}: a call without input (a tick or close) must "
                    f"return Packets, got a bare {type(v).__name__}"
                )
            else:
                pairs.append((port, current.derive(v)))
    return pairs


class ComponentRunner:
    """Run one component alone on timestamped packets, without threads (MediaPipe's
    CalculatorRunner). Time is simulated: `ctx.now_ns()` is the current packet's timestamp, and
    ticks a component requests fire when the clock passes them.

        runner = ComponentRunner(Batch(max_size=2, max_wait=0.01))
        out = runner.run({"in": [Tensor(a), Tensor(b), Tensor(c)]})   # -> {"out": [Packet...]}

    Inputs are payloads or Packets; a payload at index i gets request_id i and timestamp i ms
    (`period_s` changes the spacing). Items at the same index of several ports form one call.
    """

    def __init__(
        self,
        component: Component,
        name: str | None = None,
        instance: int = 0,
        instances: int = 1,
        period_s: float = 0.001,
    ):
        self.component = component
        self.name = name or type(component).__name__
        self.period_ns = int(period_s * 1e9)
        self.clock = 0
        self.ctx = Context(self.name, instance, instances, clock=lambda: self.clock)
        self.outputs: dict[str, list[Packet]] = {p: [] for p in component.outputs}

    def _emit(self, outputs: Any, current: Packet | None) -> None:
        for port, packet in output_packets(self.component, self.name, outputs, current):
            self.outputs[port].append(packet)

    def _advance(self, to: int) -> None:
        while self.ctx.tick_at is not None and self.ctx.tick_at <= to:
            self.clock = max(self.clock, self.ctx.tick_at)
            self.ctx.tick_at = None
            self._emit(finished(self.component.process(self.ctx, {})), None)
        self.clock = max(self.clock, to)

    def run(
        self, inputs: dict[str, list[Any]] | None = None, max_calls: int = 10_000
    ) -> dict[str, list[Packet]]:
        """Open, feed every input (a source: call until it returns None), close; the outputs."""
        comp = self.component
        comp.open(self.ctx)
        if not comp.inputs:
            for request_id in range(max_calls):
                self._advance(self.clock)
                out = finished(comp.process(self.ctx, {}))
                if out is None:
                    break
                current = Packet(None, self.ctx.flow_id, request_id, self.clock)
                self._emit(out, current)
                self.clock += self.period_ns
        else:
            inputs = inputs or {}
            unknown = [p for p in inputs if p not in comp.inputs]
            if unknown:
                raise PipelineError(f"{self.name}: unknown input port(s) {unknown}")
            calls: dict[tuple[int, int], dict[str, Packet]] = {}
            for port, items in inputs.items():
                for i, item in enumerate(items):
                    packet = (
                        item
                        if isinstance(item, Packet)
                        else Packet(item, self.ctx.flow_id, i, i * self.period_ns)
                    )
                    calls.setdefault(packet.key, {})[port] = packet
            ordered = sorted(calls.values(), key=lambda c: next(iter(c.values())).timestamp)
            for call in ordered:
                if len(call) == len(comp.inputs):
                    self._advance(next(iter(call.values())).timestamp)
                    self._emit(finished(comp.process(self.ctx, call)), next(iter(call.values())))
        self._advance(self.ctx.tick_at or self.clock)
        self._emit(comp.close(self.ctx), None)
        return self.outputs
