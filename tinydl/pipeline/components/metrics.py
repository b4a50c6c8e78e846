"""Metrics: count frames and measure their latency per flow, passing them through unchanged.

Inputs:  in (any type)
Outputs: out (same as in) — connect it, or leave it unconnected to make Metrics a sink
Options: name (str, for the log line), log_every (float seconds, 0 = only at close)

Latency is now minus the packet's timestamp (when its frame entered the app). `summary()`
gives per flow: frames, fps, latency p50/p99 in ms; close() logs it.

Example:
    app.add("metrics", Metrics())
    app.connect("draw", "metrics")
"""

from __future__ import annotations

import logging
from collections import deque

from tinydl.pipeline.component import Component
from tinydl.pipeline.packet import T

log = logging.getLogger("tinydl.pipeline")
WINDOW = 4096  # latencies kept per flow


class Metrics(Component):
    """Frames per second and latency per flow; packets pass through."""

    inputs = {"in": T}
    outputs = {"out": T}
    executors = ("thread",)

    def __init__(self, name: str = "metrics", log_every: float = 0.0):
        self.name, self.log_every = name, log_every
        self.flows: dict[int, dict] = {}

    def open(self, ctx):
        self.now = ctx.now_ns
        self.last_log = ctx.now_ns()

    def process(self, ctx, inputs):
        packet = inputs["in"]
        now = self.now()
        flow = self.flows.setdefault(
            packet.flow_id, {"frames": 0, "first": now, "latency": deque(maxlen=WINDOW)}
        )
        flow["frames"] += 1
        flow["last"] = now
        flow["latency"].append(now - packet.timestamp)
        if self.log_every and now - self.last_log > self.log_every * 1e9:
            self.last_log = now
            log.info("%s: %s", self.name, self.summary())
        return {"out": packet}

    def summary(self) -> dict[int, dict[str, float]]:
        out = {}
        for flow_id, f in sorted(self.flows.items()):
            lat = sorted(f["latency"])
            span = (f["last"] - f["first"]) / 1e9
            out[flow_id] = {
                "frames": f["frames"],
                "fps": (f["frames"] - 1) / span if span > 0 else 0.0,
                "latency_p50_ms": lat[len(lat) // 2] / 1e6,
                "latency_p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] / 1e6,
            }
        return out

    def close(self, ctx):
        if self.flows:
            log.info("%s: %s", self.name, self.summary())
