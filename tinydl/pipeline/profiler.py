"""Profiler: per-component time per item, queue waits, batch sizes, drops and errors, as a summary
table and as a Chrome/Perfetto trace (one track per executor: a thread, or a worker process),
with a flow arrow per frame from its source's call through every call that handled it to its
sink, and CPU utilization counters (the app's process, each worker, the machine) from /proc.

Counters are always kept (a few integer adds per call); trace events only when a trace is asked
for, in a bounded buffer (the newest `max_events` are kept), so a long run stays bounded too.
Open the JSON in https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

RESERVOIR = 4096  # per-call durations kept per component for p50/p99


class NodeStats:
    """Counters of one component instance."""

    def __init__(self, name: str, component: str, executor: str):
        self.name = name
        self.component = component
        self.executor = executor
        self.calls = 0
        self.items = 0
        self.busy_ns = 0
        self.durations: deque[int] = deque(maxlen=RESERVOIR)
        self.batches = 0
        self.batch_items = 0
        self.batch_max = 0
        self.queued = 0  # packets taken from its queues
        self.wait_ns = 0  # their total time queued
        self.drops: Counter[str] = Counter()  # at its input queues and joins
        self.errors: Counter[str] = Counter()
        self.restarts = 0
        self.forwarded = 0  # calls sent to its worker by the sender's thread (process executor)
        self.direct = 0  # calls sent to its worker by the worker before it (a direct edge)
        self.high_water = 0
        self.close_ns = 0  # the close call (a sink flushing its encoder, say)
        self.flow_wait_ns = 0  # a source waiting for its flow limit

    def record(self, dur_ns: int, items: int, batch: int | None) -> None:
        self.calls += 1
        self.items += items
        self.busy_ns += dur_ns
        self.durations.append(dur_ns)
        if batch is not None:
            self.batches += 1
            self.batch_items += batch
            self.batch_max = max(self.batch_max, batch)

    def row(self) -> dict[str, Any]:
        d = sorted(self.durations)
        pct = (lambda q: d[min(len(d) - 1, int(q * len(d)))] / 1e6) if d else (lambda q: 0.0)
        return {
            "component": self.name,
            "type": self.component,
            "executor": self.executor,
            "calls": self.calls,
            "items": self.items,
            "ms_per_item": self.busy_ns / 1e6 / self.items if self.items else 0.0,
            "busy_ms": self.busy_ns / 1e6,  # all process calls
            "close_ms": self.close_ns / 1e6,
            "flow_wait_ms": self.flow_wait_ns / 1e6,
            "p50_ms": pct(0.5),
            "p99_ms": pct(0.99),
            "queue_wait_ms": self.wait_ns / 1e6 / self.queued if self.queued else 0.0,
            "queue_high_water": self.high_water,
            "mean_batch": self.batch_items / self.batches if self.batches else None,
            "max_batch": self.batch_max or None,
            "dropped": sum(self.drops.values()),
            "errors": sum(self.errors.values()),
            "restarts": self.restarts,
            "forwarded": self.forwarded,
            "direct": self.direct,
        }


class Trace:
    """Chrome trace events, bounded; thread-safe appends (deque.append is atomic)."""

    def __init__(self, max_events: int = 200_000):
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self.tracks: dict[tuple[int, int], str] = {}
        self.lock = threading.Lock()

    def track(self, name: str, pid: int | None = None, tid: int | None = None) -> tuple[int, int]:
        with self.lock:
            key = (pid or os.getpid(), tid if tid is not None else len(self.tracks) + 1)
            self.tracks[key] = name
            return key

    def span(
        self,
        track: tuple[int, int],
        name: str,
        start_ns: int,
        dur_ns: int,
        args: dict[str, Any] | None = None,
    ) -> None:
        self.events.append(
            {
                "name": name,
                "ph": "X",
                "pid": track[0],
                "tid": track[1],
                "ts": start_ns / 1e3,
                "dur": dur_ns / 1e3,
                "args": args or {},
            }
        )

    def flow(self, track: tuple[int, int], phase: str, key: tuple[int, int], at_ns: int) -> None:
        """One frame's arrow: "s" at its source's call, "t" at each call on its way, "f" at
        its sink; each binds to the call (span) around `at_ns` on `track`."""
        event = {
            "name": "frame",
            "cat": "frame",
            "ph": phase,
            "id": f"{key[0]}:{key[1]}",
            "pid": track[0],
            "tid": track[1],
            "ts": at_ns / 1e3,
        }
        if phase != "s":
            event["bp"] = "e"
        self.events.append(event)

    def counter(self, pid: int, name: str, at_ns: int, values: dict[str, float]) -> None:
        self.events.append({"name": name, "ph": "C", "pid": pid, "ts": at_ns / 1e3, "args": values})

    def instant(
        self, track: tuple[int, int], name: str, at_ns: int, args: dict[str, Any] | None = None
    ) -> None:
        self.events.append(
            {
                "name": name,
                "ph": "i",
                "s": "t",
                "pid": track[0],
                "tid": track[1],
                "ts": at_ns / 1e3,
                "args": args or {},
            }
        )

    def to_json(self) -> dict[str, Any]:
        meta = []
        for (pid, tid), name in self.tracks.items():
            meta.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
            )
        for pid in {pid for pid, _ in self.tracks}:
            label = "tinydl app" if pid == os.getpid() else f"tinydl worker {pid}"
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
        return {"traceEvents": meta + list(self.events), "displayTimeUnit": "ms"}

    def write(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)


class CpuSampler:
    """Samples CPU utilization into a trace every `period` seconds while an app runs: per
    process (100 % = one core busy) and for the whole machine, read from /proc (Linux; where
    it is missing, no counters)."""

    def __init__(self, trace: Trace, pids, period: float = 0.1):
        self.trace, self.pids, self.period = trace, pids, period
        self.stop_event = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.thread = threading.Thread(target=self._loop, name="tinydl:cpu", daemon=True)

    def start(self) -> None:
        if os.path.exists("/proc/stat"):
            self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(1.0)

    def _process_ticks(self, pid: int) -> int | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            return None
        return int(fields[11]) + int(fields[12])  # utime + stime

    @staticmethod
    def _machine() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values) - idle, sum(values)

    def _loop(self) -> None:
        app = os.getpid()
        last: dict[int, int] = {}
        last_t = time.monotonic_ns()
        last_machine = self._machine()
        while not self.stop_event.wait(self.period):
            now = time.monotonic_ns()
            wall_ticks = (now - last_t) / 1e9 * self.tick
            for pid in [app, *self.pids()]:
                ticks = self._process_ticks(pid)
                if ticks is None:
                    continue
                if pid in last and wall_ticks > 0:
                    busy = 100.0 * (ticks - last[pid]) / wall_ticks
                    self.trace.counter(pid, "CPU %", now, {"process": round(busy, 1)})
                last[pid] = ticks
            busy, total = self._machine()
            if total > last_machine[1]:
                share = (busy - last_machine[0]) / (total - last_machine[1])
                self.trace.counter(
                    app, "machine CPU %", now, {"all cores": round(100.0 * share, 1)}
                )
            last_machine, last_t = (busy, total), now


@dataclass
class RunReport:
    """What a run did: frame accounting, per-component rows, and the first error messages."""

    app: str
    frames_in: int
    frames_out: int
    dropped: dict[str, int]
    errored: dict[str, int]
    components: list[dict[str, Any]]
    wall_s: float
    errors: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the run was stopped early, if it was
    peak_in_flight: int = 0  # most frames inside the app at once
    # The first error's exception (a component's own, or the framework's RemoteError/timeout
    # for a worker), for callers that re-raise it; not part of the printed report.
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    # Frames out through one branch of a fan-out though a copy errored in another, by error.
    branch_errors: dict[str, int] = field(default_factory=dict)
    deployment: Any = field(default=None, repr=False, compare=False)  # the plan it ran under
    # A sharded run (shards.py): each shard's own report, and per component kept in the app
    # (Collect, sinks) the shards' copies after the run, in shard order.
    shards: list[RunReport] = field(default_factory=list, repr=False, compare=False)
    parts: dict[str, list[Any]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def balanced(self) -> bool:
        """frames in = frames out + dropped + errored."""
        return self.frames_in == self.frames_out + sum(self.dropped.values()) + sum(
            self.errored.values()
        )

    def accounting(self) -> str:
        lines = [
            f"frames in {self.frames_in} = out {self.frames_out} + dropped "
            f"{sum(self.dropped.values())} + errored {sum(self.errored.values())}"
            + ("" if self.balanced else "  (UNBALANCED)")
            + f"; at most {self.peak_in_flight} in flight"
        ]
        lines += [f"  dropped {n:>6}  {r}" for r, n in sorted(self.dropped.items())]
        lines += [f"  errored {n:>6}  {r}" for r, n in sorted(self.errored.items())]
        lines += [
            f"  out     {n:>6}  but errored in another branch: {r}"
            for r, n in sorted(self.branch_errors.items())
        ]
        return "\n".join(lines)

    def table(self) -> str:
        head = [
            "component",
            "executor",
            "calls",
            "items",
            "ms/item",
            "p50 ms",
            "p99 ms",
            "wait ms",
            "queue max",
            "batch",
            "dropped",
            "errors",
        ]
        rows = [head]
        for r in self.components:
            batch = (
                "-" if r["mean_batch"] is None else f"{r['mean_batch']:.1f} (max {r['max_batch']})"
            )
            rows.append(
                [
                    r["component"],
                    r["executor"],
                    str(r["calls"]),
                    str(r["items"]),
                    f"{r['ms_per_item']:.3f}",
                    f"{r['p50_ms']:.3f}",
                    f"{r['p99_ms']:.3f}",
                    f"{r['queue_wait_ms']:.3f}",
                    str(r["queue_high_water"]),
                    batch,
                    str(r["dropped"]),
                    str(r["errors"]),
                ]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        text = [
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in rows
        ]
        text.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(text)

    def __str__(self) -> str:
        fps = self.frames_out / self.wall_s if self.wall_s > 0 else 0.0
        title = f"app {self.app!r}: {self.wall_s:.2f} s, {fps:.1f} frames/s out"
        if self.stopped:
            title += f" (stopped: {self.stopped})"
        return "\n".join([title, self.accounting(), "", self.table()])
