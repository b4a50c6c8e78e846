"""Frame accounting: every frame that enters an app ends exactly once, as out, dropped or errored.

The Ledger follows frames by key (flow_id, request_id) and counts their live copies: a copy is
one packet carrying the frame, queued or held by a component. A delivery adds a copy; a consumed,
dropped or errored packet ends one. When the last copy ends, the frame's fate is settled by the
best thing that happened to any copy: reached a sink (out) > errored > dropped > consumed without
output ("dropped: no output from X"). A frame out whose other copy errored (one branch of a
fan-out failed) is counted out, and the error is kept beside it (`branch_errors`). A sink whose
close fails loses what it took: `revoke` turns the frames only it took out into errored ones.
Memory is bounded by the frames in flight.

It also counts the frames in flight per flow (stream), which the flow limit of a source waits on
(`wait_below`): a frame leaves its flow's count when it settles, whatever its fate.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

OUT, ERROR, DROP, CONSUMED = 3, 2, 1, 0


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.settled = threading.Condition(self.lock)
        self.waiting = 0  # sources waiting in wait_below: only then does a settle notify
        self.stopped = False
        self.flow_live: Counter[int] = Counter()
        self.live: dict[tuple[int, int], int] = {}
        # A frame's best fate so far; for OUT the reason is the set of sinks its copies reached.
        self.fate: dict[tuple[int, int], tuple[int, Any]] = {}
        self.lost: dict[tuple[int, int], str] = {}  # the first error of a copy, per frame
        self.frames_in = 0
        self.peak_in_flight = 0
        # Frames out by (the sinks that took them, an error of another copy or "").
        self.out: Counter[tuple[frozenset[str], str]] = Counter()
        self.dropped: Counter[str] = Counter()
        self.errored: Counter[str] = Counter()

    @property
    def frames_out(self) -> int:
        return sum(self.out.values())

    @property
    def branch_errors(self) -> Counter[str]:
        """Frames out through one branch though a copy errored in another, by that error."""
        counts: Counter[str] = Counter()
        for (_, lost), n in self.out.items():
            if lost:
                counts[lost] += n
        return counts

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
        """End one copy of each key; `kind` is OUT (`reason`: where it left), ERROR, DROP or
        CONSUMED."""
        with self.lock:
            live, fate = self.live, self.fate
            for k in keys:
                old = fate.get(k)
                if kind == OUT:
                    sinks = old[1] if old is not None and old[0] == OUT else frozenset()
                    fate[k] = (OUT, sinks | {reason})
                elif old is None or old[0] < kind:
                    fate[k] = (kind, reason)
                if kind == ERROR:
                    self.lost.setdefault(k, reason)
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

    def _settle(self, key: tuple[int, int], fate: tuple[int, Any]) -> None:
        self.flow_live[key[0]] -= 1
        if self.waiting:
            self.settled.notify_all()
        kind, reason = fate
        lost = self.lost.pop(key, "")
        if kind == OUT:
            self.out[(reason, lost)] += 1
        elif kind == ERROR:
            self.errored[reason] += 1
        else:
            self.dropped[reason] += 1

    def revoke(self, sink: str, reason: str) -> int:
        """`sink` lost its output (its close failed): frames that reached no other sink are
        errored with `reason`, settled ones and those still in flight alike. Returns how many
        settled frames it turned."""
        with self.lock:
            turned = 0
            for (sinks, lost), n in list(self.out.items()):
                if sink in sinks:
                    del self.out[(sinks, lost)]
                    if sinks - {sink}:
                        self.out[(sinks - {sink}, lost)] += n
                    else:
                        self.errored[reason] += n
                        turned += n
            for k, (kind, sinks) in self.fate.items():
                if kind == OUT and sink in sinks:
                    rest = sinks - {sink}
                    self.fate[k] = (OUT, rest) if rest else (ERROR, reason)
            return turned

    def close(self, reason: str) -> int:
        """Settle every frame still in flight (the app stopped with them inside) as errored."""
        with self.lock:
            left = list(self.live)
            for k in left:
                old = self.fate.get(k)
                self.live.pop(k)
                self.fate.pop(k, None)
                self._settle(k, old if old is not None and old[0] >= ERROR else (ERROR, reason))
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
