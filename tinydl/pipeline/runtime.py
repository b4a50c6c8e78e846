"""The running app: one runner per component instance, routes between them, and the supervisor.

A `Node` runs one component instance on its own thread (the thread executor): it takes the next
call's inputs from its Inbox, calls `process`, and sends the outputs along its routes. The
process executor (`process.py`) subclasses Node and runs `open/process/close` in a worker
process instead; queues, joins and accounting stay here in the app's process either way.

Every packet copy is accounted in the Ledger (accounting.py): an input's copy passes to an
output of the same frame; any further copy is added before it is queued; the consumer ends it
(consumed, out, dropped or errored). A light component asleep with nothing queued is called on
its sender's thread instead of being woken (`App(inline_below_us=...)`).

A source with a flow limit n (`App(flow_limit=n)`) keeps at most n frames of its stream in
flight, counted by the Ledger until they settle: policy "wait" does not call the source while
n are in flight; "drop-oldest" lets it run at its own pace and holds the newest frame made at
the limit, dropping the one it replaces ("flow limit (drop-oldest) on NAME").
"""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import itertools
import logging
import os
import queue
import sys
import threading
import time
import traceback
from collections import Counter
from typing import TYPE_CHECKING, Any

from tinydl.pipeline.accounting import CONSUMED, DROP, ERROR, OUT, Ledger, consumed_reason
from tinydl.pipeline.component import Component, Context, Later, finished, output_packets
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, Packet
from tinydl.pipeline.profiler import CpuSampler, NodeStats, RunReport, Trace
from tinydl.pipeline.queues import CLAIMED, STOPPED, Dropped, EdgeQueue, Inbox

if TYPE_CHECKING:
    from tinydl.pipeline.app import App, ComponentSpec

log = logging.getLogger("tinydl.pipeline")

MAX_ERROR_MESSAGES = 50


def pin_cpus(cpus: list[int] | None, tid: int = 0) -> None:
    """Pin a thread (or, tid 0, this process) to cores; Linux only, elsewhere a no-op. Pinned
    threads still share the GIL: only work that releases it (NumPy, I/O, sleeping, GPU waits)
    runs on several cores at once."""
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError as exc:  # a core this process may not use: run unpinned, say so
            log.warning("cannot pin to cores %s: %s", cpus, exc)


class Restart(Exception):
    """A call failed in a way that leaves its component unusable: replace the instance."""


class CallTimeout(Restart):
    """A call took longer than its component's timeout."""


class _Failed(Exception):
    """A call refused because its component has failed for good."""


class _Caller:
    """Runs calls on a helper thread so that the node can stop waiting for one that hangs.
    Used only by components that have a timeout; a hung helper is left behind (a daemon)."""

    def __init__(self, name: str):
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=f"tinydl-call:{name}", daemon=True).start()

    def _loop(self) -> None:
        while (item := self.requests.get()) is not None:
            fn, args = item
            try:
                result = (True, fn(*args))
            except BaseException as exc:  # handed to the node, which decides
                result = (False, exc)
            self.results.put(result)

    def call(self, fn, args: tuple, timeout: float) -> Any:
        self.requests.put((fn, args))
        try:
            ok, value = self.results.get(timeout=timeout)
        except queue.Empty:
            self.requests.put(None)  # the helper exits once the hung call returns
            raise CallTimeout(f"no answer in {timeout:g} s") from None
        if ok:
            return value
        raise value

    def stop(self) -> None:
        self.requests.put(None)


class Sequencer:
    """A collect edge: restores per-flow request order of what n instances of a component send.

    Routes into the instances `expect` each packet's key; an instance reports a key `done` when
    its call for it ends (with or without output, or with an error) or the packet is dropped
    before it. Packets are released in request order as the keys ahead of them are done.
    """

    def __init__(self, producers: int):
        self.lock = threading.Lock()
        self.expected: dict[int, list[int]] = {}
        self.pending: Counter[tuple[int, int]] = Counter()
        self.done_keys: Counter[tuple[int, int]] = Counter()
        self.arrived: dict[tuple[int, int], list[Packet]] = {}
        self.producers = producers
        self.queue: EdgeQueue | None = None

    def expect(self, key: tuple[int, int]) -> None:
        with self.lock:
            heapq.heappush(self.expected.setdefault(key[0], []), key[1])
            self.pending[key] += 1

    def arrive(self, packet: Packet) -> Dropped:
        with self.lock:
            if self.pending[packet.key] <= 0:
                return self.queue.put(packet)
            self.arrived.setdefault(packet.key, []).append(packet)
            return []

    def done(self, keys: list[tuple[int, int]]) -> Dropped:
        with self.lock:
            for k in keys:
                if self.pending[k] > 0:
                    self.done_keys[k] += 1
            return self._release()

    def _release(self) -> Dropped:
        dropped: Dropped = []
        for flow, heap in self.expected.items():
            while heap and self.done_keys[(flow, heap[0])] > 0:
                key = (flow, heapq.heappop(heap))
                self.done_keys[key] -= 1
                self.pending[key] -= 1
                if self.pending[key] <= 0:
                    del self.pending[key], self.done_keys[key]
                    for packet in self.arrived.pop(key, ()):
                        dropped += self.queue.put(packet)
        return dropped

    def producer_done(self) -> Dropped:
        with self.lock:
            self.producers -= 1
            if self.producers > 0:
                return []
            dropped: Dropped = []
            for key in sorted(self.arrived):
                for packet in self.arrived[key]:
                    dropped += self.queue.put(packet)
            self.arrived.clear()
        self.queue.producer_done()
        return dropped


class Route:
    """One edge's runtime: picks the target queue(s) of a packet and queues a copy in each."""

    def __init__(
        self,
        label: str,
        queues: list[EdgeQueue],
        dispatch: str,
        collect: Sequencer | None = None,
        expect: Sequencer | None = None,
    ):
        self.label = label
        self.queues = queues
        self.dispatch = dispatch
        self.collect = collect
        self.expect = expect
        self.direct = None  # a direct edge between two workers (process.Direct)
        self._rr = itertools.count()  # next() is atomic: senders on several threads share it

    def pick(self, packet: Packet) -> EdgeQueue:
        queues = self.queues
        if len(queues) == 1:
            return queues[0]
        if self.dispatch == "by_flow":
            return queues[packet.flow_id % len(queues)]
        if self.dispatch == "least_busy":
            return min(queues, key=lambda q: len(q.items))
        return queues[next(self._rr) % len(queues)]

    def put(self, q: EdgeQueue, packet: Packet) -> None:
        """Queue one copy (the ledger already counts it); account what the queue discards."""
        direct = self.direct
        if direct is not None and direct.pending is not None:  # already at its worker
            direct.start(packet)
            return
        if self.expect is not None:
            self.expect.expect(packet.key)
        if self.collect is not None:
            dropped = self.collect.arrive(packet)
        else:
            node = q.owner
            if node.inline and q.max_age_ns is None and node.light() and q.inbox.claim():
                try:
                    node.call_inline(q.port, packet)
                finally:
                    q.inbox.running.release()
                return
            forward = node.forwards and q.max_age_ns is None and node.failed is None
            if forward and q.inbox.claim(CLAIMED):
                node.forward(q.port, packet)  # its thread finishes the call, then lets go
                return
            dropped = q.put(packet)
        if dropped:
            q.owner.dropped(dropped)

    def producer_done(self) -> None:
        if self.collect is not None:
            dropped = self.collect.producer_done()
            if dropped:
                self.queues[0].owner.dropped(dropped)
        else:
            for q in self.queues:
                q.producer_done()


class Node:
    """Runs one component instance on a thread of its own."""

    executor = "thread"

    def __init__(self, rt: Runtime, spec: ComponentSpec, instance: int, component: Component):
        self.rt = rt
        self.ledger = rt.ledger
        self.spec = spec
        self.component = component
        # In a shard (shards.py) an instance keeps its index and count in the whole app.
        total = spec.instances
        if spec.shard_of is not None:
            instance, total = spec.shard_of[0][instance], spec.shard_of[1]
        self.name = spec.name if total == 1 else f"{spec.name}[{instance}]"
        self.ctx = Context(self.name, instance, total, app_id=rt.app_id)
        self.inbox = Inbox(list(component.inputs)) if component.inputs else None
        if self.inbox is not None:
            self.inbox.owner = self
        self.outlets: dict[str, list[Route]] = {}
        # A thread source's one output port and its one route (`_wire`): its frames go by
        # `_send_made`, the short way.
        self.lone_route: tuple[str, Route] | None = None
        self.sink = False
        self.seq: Sequencer | None = None  # set when this node's outputs are collected
        self.stats = NodeStats(self.name, type(component).__name__, self.executor)
        self.held: Counter[tuple[int, int]] = Counter()
        self.timeout = spec.timeout
        self.failed: str | None = None
        self.consumed = consumed_reason(self.name)
        self.thread: threading.Thread | None = None
        self.opened = threading.Event()
        self.open_error: str | None = None
        self.track: tuple[int, int] | None = None
        self._caller: _Caller | None = None
        self._guarded = (
            type(component).wait_for_resource is not Component.wait_for_resource
            or type(component).release_resource is not Component.release_resource
        )
        # Where a deployment (or cpus=/gpus=) puts this instance: cores, GPU, worker env.
        self.place = spec.placement[instance % len(spec.placement)] if spec.placement else {}
        self.ctx.gpu = self.place.get("gpu")
        # A light component whose thread is asleep may be called on its sender's thread, unless
        # it is pinned to cores (the sender's thread may run anywhere).
        self.inline = (
            self.executor == "thread"
            and rt.inline_ns > 0
            and self.inbox is not None
            and not self.inbox.join
            and not component.holds_inputs
            and spec.timeout is None
            and spec.in_flight == 1
            and not self.place.get("cpus")
        )
        # A worker asleep with nothing queued is sent a packet by the sender's thread (its own
        # thread is woken to wait for the answer): process executor, one input port.
        self.forwards = False
        self.ema_ns: float | None = None  # recent time per call
        # Calls returning Later finished on a thread of their own (thread executor only).
        self.in_flight = spec.in_flight if self.executor == "thread" else 1
        self.ctx.in_flight = self.in_flight
        self.later: collections.deque = collections.deque()  # outstanding calls, in order
        self.later_cv = threading.Condition()
        self.later_thread: threading.Thread | None = None
        self.flow_limit, self.flow_policy = rt.app.flow_limit_of(spec)
        self.flow_held: list[tuple[str, Packet]] | None = None  # a frame made at the limit
        self.made: Packet | None = None  # a source's: the ids of the frame its call makes
        self._tick = threading.Lock()  # held but while the app stops: a source's pauses wait
        self._tick.acquire()  # on it (`_pause`, `wake`)
        self._tick_guard = threading.Lock()

    def light(self) -> bool:
        """Cheaper to call than a thread is to wake (its recent calls took < inline_below_us)."""
        return self.ema_ns is not None and self.ema_ns < self.rt.inline_ns

    def call_inline(self, port: str, packet: Packet) -> None:
        """Process one packet on the sender's thread (the caller holds `inbox.running`)."""
        self._call({port: packet})
        if self.ctx.tick_at is not None:  # its own thread must wait for the new deadline
            with self.inbox.lock:
                self.inbox.wake()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self._main, name=f"tinydl:{self.name}", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        if self.executor != "ray":  # a Ray actor's cores are its node's, not the driver's
            pin_cpus(self.place.get("cpus"), threading.get_native_id())
        if self.rt.trace is not None:
            self.track = self.rt.trace.track(
                f"{self.name} ({self.executor})", tid=threading.get_native_id()
            )
        try:
            self._open()
        except BaseException as exc:
            self.open_error = f"{type(exc).__name__}: {exc}"
        self.opened.set()
        if self.open_error is None:
            self.rt.started.wait()
            try:
                self._run_source() if self.inbox is None else self._run_inputs()
            except BaseException as exc:  # a framework bug: report it, end cleanly anyway
                self.rt.error(f"{self.name}: internal error {traceback.format_exc()}")
                self.failed = f"internal error: {type(exc).__name__}"
        self._finish()

    def _finish(self) -> None:
        self._drain_later()
        if self.inbox is not None:
            self.dropped(self.inbox.drain())
        if self.open_error is None:
            self.ctx.stop_reason = self.rt.stop_reason
            try:
                with self.inbox.running if self.inbox is not None else contextlib.nullcontext():
                    t0 = time.perf_counter_ns()
                    try:
                        out = self._invoke(self._close)
                    finally:
                        self.stats.close_ns = time.perf_counter_ns() - t0
                self._deliver(output_packets(self.component, self.name, out, None), [], [])
            except Exception as exc:
                what = f"{self.name}: close raised {getattr(exc, 'type_name', type(exc).__name__)}"
                if self.sink:  # what it took is lost with it (a file never completed)
                    self.ledger.revoke(self.name, what)
                self.rt.error(f"{what}: {exc}", exc=exc)
        self._end_held(
            ERROR if self.failed else CONSUMED,
            f"{self.name}: {self.failed}" if self.failed else self.consumed,
        )
        for routes in self.outlets.values():
            for route in routes:
                route.producer_done()
        self._shutdown()

    def _end_held(self, kind: int, reason: str) -> None:
        if self.held:
            self.ledger.end(list(self.held.elements()), kind, reason)
            self.held.clear()

    # -- the executor-specific part (ProcessNode overrides these) --------------------------------
    def _open(self) -> None:
        if self.timeout is not None:
            self._caller = _Caller(self.name)
        self._invoke(self.component.open, self.ctx)
        self._bind()

    def _bind(self) -> None:
        """Choose how a process call is made: directly (the fast path), or guarded by the
        resource hooks and/or the timeout helper."""
        if self._caller is None and not self._guarded:
            self._call_process = functools.partial(self.component.process, self.ctx)
        else:
            self._call_process = functools.partial(self._invoke, self._process)

    def _process(self, inputs: dict[str, Packet]) -> Any:
        comp = self.component
        if not self._guarded:
            return comp.process(self.ctx, inputs)
        comp.wait_for_resource(self.ctx)
        try:
            return comp.process(self.ctx, inputs)
        finally:
            comp.release_resource(self.ctx)

    def _close(self) -> Any:
        return self.component.close(self.ctx)

    def _invoke(self, fn, *args) -> Any:
        if self._caller is None:
            return fn(*args)
        return self._caller.call(fn, args, self.timeout)

    def _restart(self, why: str) -> None:
        """Replace a hung instance by a fresh one; its thread is left to finish on its own."""
        self.stats.restarts += 1
        self._end_held(ERROR, f"{self.name}: state lost ({why})")
        if self.stats.restarts > self.spec.max_restarts:
            self.failed = f"gave up after {self.spec.max_restarts} restarts ({why})"
            return
        self.component = self.component.clone()
        self._caller = _Caller(self.name)
        try:
            self._invoke(self.component.open, self.ctx)
            self._bind()
        except BaseException as exc:
            self.failed = f"reopen failed: {type(exc).__name__}: {exc}"

    def _shutdown(self) -> None:
        if self._caller is not None:
            self._caller.stop()

    # -- running -----------------------------------------------------------------------------
    def _run_source(self) -> None:
        ctx, rt = self.ctx, self.rt
        request_id = 0
        limit = self.flow_limit
        wait = limit is not None and self.flow_policy == "wait"
        # The last call's figures, recorded after the pause that follows it: a source that has
        # just woken a consumer lets go of the GIL at once, which the consumer's thread needs.
        done: tuple | None = None
        while not rt.stopping and self.failed is None:
            if ctx.tick_at is not None:  # a source may ask to be called later instead of sleeping
                delay = (ctx.tick_at - time.monotonic_ns()) / 1e9
                ctx.tick_at = None
                if delay > 0 and self._pause(delay):
                    break
            if done is not None:
                self._record(*done)
                done = None
            if wait:
                t0 = time.perf_counter_ns()
                self.ledger.wait_below(ctx.flow_id, limit)
                self.stats.flow_wait_ns += time.perf_counter_ns() - t0
                if rt.stopping:
                    break
            current = self.made = Packet(None, ctx.flow_id, request_id, app_id=rt.app_id)
            t0 = time.perf_counter_ns()
            try:
                out = self._call_process({})
            except Restart as exc:
                what = "timeout" if isinstance(exc, CallTimeout) else "worker died"
                self._call_failed([], [], what, exc)
                self._restart(what)
                continue
            except Exception as exc:
                self._call_failed([], [], f"{type(exc).__name__}", exc)
                self.failed = f"source raised {type(exc).__name__}"
                break
            if out is None:
                break
            dur = time.perf_counter_ns() - t0
            if limit is not None or not self._send_made(out, current):
                try:
                    pairs = output_packets(self.component, self.name, out, current)
                except PipelineError as exc:
                    self._call_failed([], [], "bad output", exc)
                    break
                if limit is not None and not wait and self.ledger.in_flight(ctx.flow_id) >= limit:
                    self._hold(pairs)
                else:
                    self._deliver(pairs, [], [])
            done = (t0, dur, 1, None, request_id, [(ctx.flow_id, request_id)])
            request_id += 1
        if done is not None:
            self._record(*done)
        if self.flow_held is not None:  # the last frame made: it goes once a slot is free
            self.ledger.wait_below(ctx.flow_id, limit)
            self._send_held(STOPPED if rt.stopping else None)

    def _send_made(self, out: Any, current: Packet) -> bool:
        """Send a source's call's outputs the short way when they are one value (or Packet) on
        its one port with its one route — what `output_packets` and `_deliver` would do, with
        less Python between the call's return and the consumer's wake-up (the thread hop);
        False, having sent nothing, for anything else."""
        lone = self.lone_route
        if lone is None or type(out) is not dict or len(out) != 1:
            return False
        port, route = lone
        value = out.get(port, current)
        if value is current or type(value) is list:
            return False
        packet = value if type(value) is Packet else current.derive(value)
        self.ledger.add(packet.keys())
        route.put(route.pick(packet), packet)
        return True

    def _pause(self, delay: float) -> bool:
        """Sleep until a source's next tick, sending its held frame as soon as its flow has
        room; True when the app stopped meanwhile."""
        deadline = time.monotonic() + delay
        while self.flow_held is not None and delay > 0:
            if self.ledger.wait_below(self.ctx.flow_id, self.flow_limit, delay):
                self._send_held(STOPPED if self.rt.stopping else None)
            delay = deadline - time.monotonic()
        if delay > 0 and not self.rt.stopping:
            # A bare lock, released by `wake` at the stop: it gives up the GIL in one call
            # (threading.Event.wait runs Python first), and the thread the source just woke
            # waits for the GIL meanwhile (docs/pipeline.md, "Executors", thread).
            self._tick.acquire(True, delay)
        return self.rt.stopping

    def wake(self) -> None:
        """End a source's pause (the app is stopping): its next pause returns at once too."""
        with self._tick_guard:
            if self._tick.locked():
                self._tick.release()

    def _hold(self, pairs: list[tuple[str, Packet]]) -> None:
        """Keep a source's frame made at its flow limit; the frame held before is dropped."""
        if self.flow_held is not None:
            self._send_held(f"flow limit (drop-oldest) on {self.name}")
        self.flow_held = pairs

    def _send_held(self, drop_reason: str | None) -> None:
        pairs, self.flow_held = self.flow_held, None
        if drop_reason is None:
            self._deliver(pairs, [], [])
            return
        packets = {packet.key: packet for _, packet in pairs}  # one frame sent on two ports
        self.dropped([(packet, drop_reason) for packet in packets.values()], entering=True)

    def _run_inputs(self) -> None:
        inbox, ctx = self.inbox, self.ctx
        dropped: Dropped = []
        while True:
            inputs = inbox.take(ctx.tick_at, dropped)
            if dropped:
                self.dropped(dropped)
                dropped = []
            if inputs is None:
                return
            if type(inputs) is tuple:  # a call started for it (forward, direct); `running` held
                try:
                    self._call(*inputs)
                finally:
                    inbox.running.release()
                continue
            if not inputs:
                ctx.tick_at = None
            with inbox.running:
                self._call(inputs)

    def _call(self, inputs: dict[str, Packet], sent: tuple | None = None) -> None:
        """One call; `sent`: (start time, send error or None, call id) of a call already sent
        to the worker (forward; a direct edge's has no start time), whose answer is then all
        that is left."""
        packets = list(inputs.values())
        current = packets[0] if packets else None
        if self.in_flight > 1:
            self._make_room()
        t0 = time.perf_counter_ns() if sent is None else sent[0]
        end = None
        try:
            if self.failed is not None:
                raise _Failed(self.failed)
            if sent is None:
                out = self._call_process(inputs)
            else:
                out = self._answer(*sent[1:])
                if t0 is None:  # it came on a direct edge: timed by the worker, which began
                    t0, end = self.span  # before the app knew of it
            if self.in_flight > 1:  # finished on the completion thread, in call order
                self._defer(out, packets, current, t0, time.perf_counter_ns() - t0)
                return
            if type(out) is Later:
                out = out.finish()
            pairs = output_packets(self.component, self.name, out, current)
        except Exception as exc:
            self._raised(packets, exc)
            return
        self._sent(pairs, packets, current, t0, (end or time.perf_counter_ns()) - t0)

    def _raised(self, packets: list[Packet], exc: Exception) -> None:
        keys = [k for p in packets for k in p.keys()]
        if isinstance(exc, _Failed):
            self._call_failed(packets, keys, str(exc), None)
        elif isinstance(exc, Restart):
            what = "timeout" if isinstance(exc, CallTimeout) else "worker died"
            self._call_failed(packets, keys, what, exc)
            self._restart(what)
        else:
            self._call_failed(packets, keys, getattr(exc, "type_name", type(exc).__name__), exc)

    # -- calls finished later (in_flight > 1) --------------------------------------------------
    def _make_room(self) -> None:
        """Wait until fewer than in_flight calls are outstanding."""
        with self.later_cv:
            while len(self.later) >= self.in_flight:
                self.later_cv.wait()

    def _defer(self, out: Any, packets: list[Packet], current: Packet | None, t0, dur) -> None:
        with self.later_cv:
            self.later.append((out, packets, current, t0, dur))
            self.later_cv.notify_all()
        if self.later_thread is None:
            self.later_thread = threading.Thread(
                target=self._complete, name=f"tinydl:{self.name} (finish)", daemon=True
            )
            self.later_thread.start()

    def _complete(self) -> None:
        """The completion thread: finish each outstanding call in order and send its outputs
        (a call stays counted as outstanding until its outputs have left)."""
        cv, later = self.later_cv, self.later
        while True:
            with cv:
                while not later:
                    cv.wait()
                entry = later[0]
            if entry is None:
                return
            out, packets, current, t0, dur = entry
            t1 = time.perf_counter_ns()
            try:
                try:
                    out = finished(out)
                    pairs = output_packets(self.component, self.name, out, current)
                except Exception as exc:
                    self._raised(packets, exc)
                else:
                    self._sent(pairs, packets, current, t0, dur + time.perf_counter_ns() - t1)
            except (
                BaseException
            ):  # a framework bug: reported; the node's thread is not left waiting
                self.rt.error(f"{self.name}: internal error {traceback.format_exc()}")
            finally:
                with cv:
                    later.popleft()
                    cv.notify_all()

    def _drain_later(self) -> None:
        """Finish every outstanding call (before close) and end the completion thread."""
        if self.later_thread is None:
            return
        with self.later_cv:
            self.later.append(None)
            self.later_cv.notify_all()
        self.later_thread.join()
        self.later_thread = None
        self.later.clear()

    def _sent(
        self, pairs: list[tuple[str, Packet]], packets: list[Packet], current, t0: int, dur: int
    ) -> None:
        keys = [k for p in packets for k in p.keys()]
        self._deliver(pairs, packets, list(keys))
        batch = (
            len(current.payload)
            if current is not None and isinstance(current.payload, Batch)
            else None
        )
        self._record(
            t0,
            dur,
            (batch or 1) if packets else 0,
            batch,
            None if current is None else current.request_id,
            keys,
        )

    def _record(
        self,
        t0: int,
        dur: int,
        items: int,
        batch: int | None,
        request: int | None,
        keys: list[tuple[int, int]],
    ) -> None:
        self.stats.record(dur, items, batch)
        self.ema_ns = dur if self.ema_ns is None else self.ema_ns + (dur - self.ema_ns) / 8
        trace = self.rt.trace
        if trace is not None:
            start = t0 + self.rt.clock_offset
            trace.span(
                self.track,
                self.spec.name,
                start,
                dur,
                {"items": items, "batch": batch, "request": request},
            )
            phase = "s" if self.inbox is None else "f" if self.sink else "t"
            for key in keys:
                trace.flow(self.track, phase, key, start + dur // 2)

    def _call_failed(
        self,
        packets: list[Packet],
        keys: list[tuple[int, int]],
        what: str,
        exc: BaseException | None,
    ) -> None:
        reason = f"{self.name}: {what}"
        self.stats.errors[what] += 1
        if exc is not None:
            self.rt.error(f"{reason}: {exc}", first=self.stats.errors[what] == 1, exc=exc)
        if keys:
            self.ledger.end(keys, ERROR, reason)
        if self.seq is not None and packets:
            self._done([p.key for p in packets])

    def _deliver(
        self, pairs: list[tuple[str, Packet]], packets: list[Packet], keys: list[tuple[int, int]]
    ) -> None:
        """Send a call's outputs and settle its inputs' copies in the ledger.

        Each input copy passes to an output carrying the same key with no ledger update (a
        transfer); only extra copies are added (before any of them is queued, so no frame is
        settled while a copy is still on its way) and untransferred inputs ended afterwards."""
        ledger = self.ledger
        sends = []
        leaving = []
        for port, packet in pairs:
            routes = self.outlets.get(port)
            if routes:
                for route in routes:
                    sends.append((route, route.pick(packet), packet))
            else:  # an unconnected port: the packet leaves the app here
                leaving.append(packet)
        extra = []
        if self.component.holds_inputs:
            spare = self.held  # no zero counts kept: a count that reaches 0 is deleted
            spare.update(keys)
            for _, _, packet in sends:
                for k in packet.keys():
                    c = spare.get(k, 0)
                    if c > 1:
                        spare[k] = c - 1
                    elif c:
                        del spare[k]
                    else:
                        extra.append(k)
        else:
            spare = keys
            for _, _, packet in sends:
                for k in packet.keys():
                    if k in spare:
                        spare.remove(k)
                    else:
                        extra.append(k)
        if extra:
            ledger.add(extra)
        for route, q, packet in sends:
            route.put(q, packet)
        for packet in leaving:
            pkeys = packet.keys()
            ledger.add(pkeys)
            ledger.end(pkeys, OUT, self.name)
        if not self.component.holds_inputs and spare:
            ledger.end(spare, *((OUT, self.name) if self.sink else (CONSUMED, self.consumed)))
        if self.seq is not None and packets:
            self._done([p.key for p in packets])

    def _done(self, keys: list[tuple[int, int]]) -> None:
        dropped = self.seq.done(keys)
        if dropped:
            self.seq.queue.owner.dropped(dropped)

    def dropped(self, dropped: Dropped, entering: bool = False) -> None:
        """Account packets discarded at this node's input (queue policy, join, stop), or as
        they enter the app (`entering`: a source's frame shed by its flow limit)."""
        trace, now = self.rt.trace, time.perf_counter_ns()
        for packet, reason in dropped:
            if entering:
                self.ledger.reject(packet.keys(), reason)
            else:
                self.ledger.end(packet.keys(), DROP, reason)
            self.stats.drops[reason] += 1
            if trace is not None and self.track is not None:
                trace.instant(
                    self.track,
                    "drop",
                    now + self.rt.clock_offset,
                    {"reason": reason, "request": packet.request_id},
                )
        if self.seq is not None:
            self._done([p.key for p, _ in dropped])


_switch_lock = threading.Lock()
_switch_state: list = [0, None]  # apps running with a switch interval set, the value before


def _switch_interval(step: int, seconds: float | None = None) -> None:
    """Set Python's GIL switch interval when the first app that asks starts (the smallest
    asked wins while several run); restore the old value when the last one ends."""
    with _switch_lock:
        if step > 0:
            if _switch_state[0] == 0:
                _switch_state[1] = sys.getswitchinterval()
            _switch_state[0] += 1
            sys.setswitchinterval(min(seconds, sys.getswitchinterval()))
        else:
            _switch_state[0] -= 1
            if _switch_state[0] == 0:
                sys.setswitchinterval(_switch_state[1])


class HostPool:
    """Where thread components' `ctx.empty` frames live when the app drives a GPU backend from
    threads of this process: memory that backend uploads from fastest (page-locked for cuda,
    so a batch's frames go to the device asynchronously, at the bus's speed)."""

    def __init__(self, backend):
        self.backend = backend

    @classmethod
    def for_nodes(cls, nodes) -> HostPool | None:
        from tinydl.backends import get_backend
        from tinydl.backends.base import Backend
        from tinydl.pipeline.profile import backend_of

        names = {backend_of(n.component) for n in nodes if n.executor == "thread"} - {None}
        for name in sorted(names):
            backend = get_backend(name)
            if type(backend).empty_host is not Backend.empty_host and backend.available():
                return cls(backend)
        return None

    def empty(self, shape, dtype="uint8"):
        return self.backend.empty_host(shape, dtype)

    def close(self) -> None:
        pass


class Runtime:
    """Builds the nodes and routes of an App, runs them and reports."""

    def __init__(self, app: App, trace: Trace | None = None):
        from tinydl.pipeline.process import ProcessNode
        from tinydl.pipeline.ray_executor import RayNode

        self.app = app
        self.app_id = app.app_id
        self.inline_ns = app.inline_below_us * 1e3
        self.trace = trace
        self.ledger = Ledger()
        self.stopping = False
        self.stop_reason: str | None = None
        self.stop_event = threading.Event()
        self.started = threading.Event()
        self.errors: list[str] = []
        self.exception: BaseException | None = None  # the first error's exception
        self._error_lock = threading.Lock()
        # perf_counter_ns stamps go into the trace on the monotonic clock all processes share.
        self.clock_offset = time.monotonic_ns() - time.perf_counter_ns()
        self.nodes: dict[str, list[Node]] = {}
        self.placement = None  # the Ray placement group of placed components
        self.sampler: CpuSampler | None = None  # CPU counters, when tracing
        kinds = {"thread": Node, "process": ProcessNode, "ray": RayNode}
        next_flow = 0
        for spec in app.components.values():
            cls = kinds[app.executor_of(spec)]
            instances = [spec.component] + [
                spec.component.clone() for _ in range(spec.instances - 1)
            ]
            nodes = [cls(self, spec, i, comp) for i, comp in enumerate(instances)]
            if not spec.component.inputs:  # sources: distinct default flow ids app-wide
                for node in nodes:  # (in a shard, the ones the whole app would give them)
                    node.ctx.flow_id = next_flow + node.ctx.instance
                next_flow += node.ctx.instances
            self.nodes[spec.name] = nodes
        self._wire()
        # Frames that thread components make with ctx.empty cross into workers by reference.
        self.pool = None
        if any(n.executor == "process" for n in self.all_nodes()):
            from tinydl.pipeline.process import segment_prefix, wire_direct
            from tinydl.pipeline.shm import Pool

            wire_direct(self.all_nodes())
            self.pool = Pool(segment_prefix(), lends=False)
        else:
            self.pool = HostPool.for_nodes(self.all_nodes())
        if any(n.executor == "ray" for n in self.all_nodes()):
            from tinydl.pipeline.ray_executor import wire_references

            wire_references(self.all_nodes())
        self.at_end: list = []  # called once every node has ended (join)
        if self.pool is not None:
            for node in self.all_nodes():
                if node.executor == "thread":
                    node.ctx.pool = self.pool
        self.t0 = 0.0
        self.wall_s = 0.0
        self._switched = False  # this run set the GIL switch interval (App.switch_interval_ms)

    def _wire(self) -> None:
        app = self.app
        seqs: dict[str, Sequencer] = {}
        for edge in app.edges:
            if edge.collect and edge.src not in seqs:
                seqs[edge.src] = Sequencer(len(self.nodes[edge.src]))
                for node in self.nodes[edge.src]:
                    node.seq = seqs[edge.src]
        for edge in app.edges:
            producers = self.nodes[edge.src]
            targets = self.nodes[edge.dst]
            if edge.dst_instance is not None:
                targets = [targets[edge.dst_instance]]
            label = edge.label()
            queues = [
                EdgeQueue(
                    n.inbox,
                    edge.dst_port,
                    label,
                    edge.capacity,
                    edge.policy,
                    edge.max_age,
                    1 if edge.collect else len(producers),
                )
                for n in targets
            ]
            for q, n in zip(queues, targets, strict=True):
                q.owner = n
            collect = seqs[edge.src] if edge.collect else None
            if collect is not None:
                collect.queue = queues[0]
            dispatch = edge.dispatch
            if dispatch == "round_robin" and targets[0].component.keeps_flow_state:
                dispatch = "by_flow"  # each stream's frames to the instance holding its state
            route = Route(label, queues, dispatch, collect=collect, expect=seqs.get(edge.dst))
            for node in producers:
                node.outlets.setdefault(edge.src_port, []).append(route)
        for nodes in self.nodes.values():
            for node in nodes:
                node.sink = not node.outlets and not node.component.outputs
                routes = next(iter(node.outlets.values()), [])
                if (
                    type(node) is Node
                    and node.inbox is None
                    and len(node.component.outputs) == 1
                    and len(node.outlets) == 1
                    and len(routes) == 1
                ):
                    node.lone_route = (next(iter(node.outlets)), routes[0])

    def all_nodes(self) -> list[Node]:
        return [n for nodes in self.nodes.values() for n in nodes]

    def error(self, message: str, first: bool = True, exc: BaseException | None = None) -> None:
        with self._error_lock:
            if len(self.errors) < MAX_ERROR_MESSAGES:
                self.errors.append(message)
            if self.exception is None and exc is not None:
                self.exception = exc
        if self.app.stop_on_error:
            self.stop(f"stop_on_error: {message}")
        if first:
            detail = getattr(exc, "trace", None) or (
                "".join(traceback.format_exception(exc)) if exc is not None else ""
            )
            log.warning("%s%s", message, f"\n{detail}" if detail else "")

    # -- running -----------------------------------------------------------------------------
    def start(self) -> None:
        nodes = self.all_nodes()
        ray_specs = [n.spec for n in nodes if n.executor == "ray" and n.ctx.instance == 0]
        if ray_specs:
            from tinydl.pipeline import ray_executor

            ray_executor.connect(self.app.ray)
            if any(s.placement for s in ray_specs):
                self.placement = ray_executor.Placement(ray_specs, self.app.placement_strategy)
        self.t0 = time.perf_counter()
        if self.app.switch_interval_ms is not None:
            _switch_interval(+1, self.app.switch_interval_ms / 1e3)
            self._switched = True
        for node in nodes:
            node.start()
        for node in nodes:
            node.opened.wait()
        failed = [f"{n.name}: {n.open_error}" for n in nodes if n.open_error]
        if failed:
            self.stop("a component failed to open")
            self.started.set()
            self.join(grace=10.0)
            raise PipelineError("cannot start the app: open failed in " + "; ".join(failed))
        self.started.set()
        if self.trace is not None:
            self.sampler = CpuSampler(self.trace, self._worker_pids)
            self.sampler.start()

    def _worker_pids(self) -> list[int]:
        pids = []
        for node in self.all_nodes():
            proc = getattr(node, "proc", None)
            pid = proc.pid if proc is not None else getattr(node, "pid", None)
            if pid is not None:
                pids.append(pid)
        return pids

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the app to finish; False when `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for node in self.all_nodes():
            while node.thread.is_alive():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                node.thread.join(0.1 if left is None else min(0.1, left))
        self.wall_s = time.perf_counter() - self.t0
        return True

    def stop(self, reason: str = "stopped") -> None:
        """Stop now: sources end, blocked puts give up, queued packets are dropped."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        self.stop_event.set()
        self.ledger.release_waiters()
        for node in self.all_nodes():
            if node.inbox is not None:
                node.inbox.close()
            else:
                node.wake()

    def join(self, grace: float = 5.0) -> list[str]:
        """Wait up to `grace` seconds for every node to end; the names of those that did not."""
        deadline = time.monotonic() + grace
        hung = []
        for node in self.all_nodes():
            node.thread.join(max(0.0, deadline - time.monotonic()))
            if node.thread.is_alive():
                hung.append(node.name)
                node._shutdown()
        for fn in self.at_end:
            fn()
        self.at_end.clear()
        if self.sampler is not None:
            self.sampler.stop()
        if self._switched:
            self._switched = False
            _switch_interval(-1)
        if self.placement is not None:
            self.placement.remove()
        if self.pool is not None and not hung:
            self.pool.close()
        for node in self.all_nodes():  # their workers have ended, or were ended just now
            if node.executor == "process":
                node.sweep_blocks()
        self.wall_s = time.perf_counter() - self.t0
        return hung

    def report(self, hung: list[str] | None = None) -> RunReport:
        if hung:
            self.error(f"still running after stop (left behind): {', '.join(hung)}")
        self.ledger.close("in flight when the app " + ("stopped" if self.stopping else "ended"))
        rows = []
        for node in self.all_nodes():
            stats = node.stats
            if node.inbox is not None:
                stats.wait_ns = node.inbox.wait_ns
                stats.queued = node.inbox.taken
                stats.high_water = max((q.high_water for q in node.inbox.queues), default=0)
            rows.append(stats.row())
        led = self.ledger
        return RunReport(
            self.app.name,
            led.frames_in,
            led.frames_out,
            dict(led.dropped),
            dict(led.errored),
            rows,
            self.wall_s,
            list(self.errors),
            self.stop_reason,
            led.peak_in_flight,
            self.exception,
            branch_errors=dict(led.branch_errors),
        )
