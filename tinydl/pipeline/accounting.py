"""Frame accounting: every frame that enters an app ends exactly once, as out, dropped or errored.

The Ledger follows frames by key (flow_id, request_id) and counts their live copies: a copy is
one packet carrying the frame, queued or held by a component. A delivery adds a copy; a consumed,
dropped or errored packet ends one. When the last copy ends, the frame's fate is settled by the
best thing that happened to any copy: reached a sink (out) > errored > dropped > consumed without
output ("dropped: no output from X"). Memory is bounded by the frames in flight.

It also counts the frames in flight per flow (stream), which the flow limit of a source waits on
(`wait_below`): a frame leaves its flow's count when it settles, whatever its fate.
"""

from __future__ import annotations

import threading
from collections import Counter

OUT, ERROR, DROP, CONSUMED = 3, 2, 1, 0


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.settled = threading.Condition(self.lock)
        self.waiting = 0  # sources waiting in wait_below: only then does a settle notify
        self.stopped = False
        self.flow_live: Counter[int] = Counter()
        self.live: dict[tuple[int, int], int] = {}
        self.fate: dict[tuple[int, int], tuple[int, str]] = {}
        self.frames_in = 0
        self.frames_out = 0
        self.peak_in_flight = 0
        self.dropped: Counter[str] = Counter()
        self.errored: Counter[str] = Counter()

    def add(self, keys: list[tuple[int, int]], copies: int = 1) -> None:
        with self.lock:
            live = self.live
            for k in keys:
                c = live.get(k)
                if c is None:
                    self.frames_in += 1
                    self.flow_live[k[0]] += 1
                    live[k] = copies
                else:
                    live[k] = c + copies
            if len(live) > self.peak_in_flight:
                self.peak_in_flight = len(live)

    def end(self, keys: list[tuple[int, int]], kind: int, reason: str = "") -> None:
        """End one copy of each key; `kind` is OUT, ERROR, DROP or CONSUMED."""
        with self.lock:
            live, fate = self.live, self.fate
            for k in keys:
                old = fate.get(k)
                if old is None or old[0] < kind:
                    fate[k] = (kind, reason)
                c = live.get(k, 0) - 1
                if c > 0:
                    live[k] = c
                else:
                    live.pop(k, None)
                    self._settle(k, fate.pop(k))

    def reject(self, keys: list[tuple[int, int]], reason: str) -> None:
        """Count frames that are dropped as they enter (never in flight)."""
        with self.lock:
            self.frames_in += len(keys)
            self.dropped[reason] += len(keys)

    def mark(self, keys: list[tuple[int, int]], kind: int, reason: str = "") -> None:
        """Record what happened to a copy that is not a live copy of its own (a packet sent
        out of an unconnected port)."""
        with self.lock:
            for k in keys:
                old = self.fate.get(k)
                if old is None or old[0] < kind:
                    self.fate[k] = (kind, reason)

    def _settle(self, key: tuple[int, int], fate: tuple[int, str]) -> None:
        self.flow_live[key[0]] -= 1
        if self.waiting:
            self.settled.notify_all()
        kind, reason = fate
        if kind == OUT:
            self.frames_out += 1
        elif kind == ERROR:
            self.errored[reason] += 1
        else:
            self.dropped[reason] += 1

    def close(self, reason: str) -> int:
        """Settle every frame still in flight (the app stopped with them inside) as errored."""
        with self.lock:
            left = list(self.live)
            for k in left:
                self.fate[k] = max(self.fate.get(k, (ERROR, reason)), (ERROR, reason))
                self.live.pop(k)
                self._settle(k, self.fate.pop(k))
            return len(left)

    def in_flight(self, flow: int) -> int:
        return self.flow_live[flow]

    def wait_below(self, flow: int, limit: int, timeout: float | None = None) -> bool:
        """Wait until fewer than `limit` frames of `flow` are in flight, or the app stops;
        False when `timeout` passed first."""
        with self.lock:
            if self.flow_live[flow] < limit or self.stopped:
                return True
            self.waiting += 1
            try:
                return self.settled.wait_for(
                    lambda: self.flow_live[flow] < limit or self.stopped, timeout
                )
            finally:
                self.waiting -= 1

    def release_waiters(self) -> None:
        """The app is stopping: wake every source waiting in wait_below, now and later."""
        with self.lock:
            self.stopped = True
            self.settled.notify_all()


def consumed_reason(node: str) -> str:
    return f"no output from {node}"
