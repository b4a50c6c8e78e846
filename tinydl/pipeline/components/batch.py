"""Batch and Unbatch: gather packets into Batch payloads, and spread them out again.

Batch
  Inputs:  in (any type T)
  Outputs: out (Batch[T]) — its items keep their own ids; the batch packet carries the first
           item's ids
  Options: max_size (int, 8), max_wait (float seconds or None): a batch leaves when it has
           max_size items, or max_wait after its first item arrived; None waits for a full batch
           (the rest leaves at the end); 0 takes whatever is queued and leaves as soon as the
           queue is empty (dynamic batching: batches grow when the consumer falls behind)

Unbatch
  Inputs:  in (Batch[T])
  Outputs: out (T) — the items, one packet each, in batch order

Example:
    app.add("batch", Batch(max_size=16, max_wait=0.005))
    app.connect("preprocess", "batch")
    app.connect("batch", "infer")
    app.add("unbatch", Unbatch())
    app.connect("infer", "unbatch")
"""

from __future__ import annotations

from tinydl.pipeline import packet as pk
from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Packet, T


class Batch(Component):
    """Packets gathered into Batch payloads of up to max_size, waiting at most max_wait."""

    inputs = {"in": T}
    outputs = {"out": pk.Batch[T]}
    holds_inputs = True

    def __init__(self, max_size: int = 8, max_wait: float | None = 0.01):
        if max_size < 1 or (max_wait is not None and max_wait < 0):
            raise PipelineError(
                f"Batch: need max_size >= 1 and max_wait >= 0 or None, got {max_size}, {max_wait}"
            )
        self.max_size, self.max_wait = max_size, max_wait

    def open(self, ctx):
        self.items: list[Packet] = []
        self.first = 0

    def _emit(self) -> dict:
        items, self.items = self.items, []
        head = items[0]
        return {
            "out": Packet(
                pk.Batch(items), head.flow_id, head.request_id, head.timestamp, head.app_id
            )
        }

    def process(self, ctx, inputs):
        if inputs:
            self.items.append(inputs["in"])
            if len(self.items) == 1:
                self.first = ctx.now_ns()
                if self.max_wait is not None:
                    ctx.request_tick(self.max_wait)
            return self._emit() if len(self.items) >= self.max_size else None
        if not self.items:
            return None
        left = self.first + self.max_wait * 1e9 - ctx.now_ns()
        if left > 0:
            ctx.request_tick(left / 1e9)
            return None
        return self._emit()

    def close(self, ctx):
        return self._emit() if self.items else None


class Unbatch(Component):
    """The items of each Batch, one packet each."""

    inputs = {"in": pk.Batch[T]}
    outputs = {"out": T}

    def process(self, ctx, inputs):
        return {"out": list(inputs["in"].payload.items)}
