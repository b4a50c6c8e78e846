"""Frame accounting: every frame that enters an app ends exactly once, as out, dropped or errored.

The Ledger follows frames by key (flow_id, request_id) and counts their live copies: a copy is
one packet carrying the frame, queued or held by a component. A delivery adds a copy; a consumed,
dropped or errored packet ends one. When the last copy ends, the frame's fate is settled by the
best thing that happened to any copy: reached a sink (out) > errored > dropped > consumed without
output ("dropped: no output from X"). Memory is bounded by the frames in flight.
"""

from __future__ import annotations

import threading
from collections import Counter

OUT, ERROR, DROP, CONSUMED = 3, 2, 1, 0


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
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
                    self._settle(fate.pop(k))

    def mark(self, keys: list[tuple[int, int]], kind: int, reason: str = "") -> None:
        """Record what happened to a copy that is not a live copy of its own (a packet sent
        out of an unconnected port)."""
        with self.lock:
            for k in keys:
                old = self.fate.get(k)
                if old is None or old[0] < kind:
                    self.fate[k] = (kind, reason)

    def _settle(self, fate: tuple[int, str]) -> None:
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
                self._settle(self.fate.pop(k))
            return len(left)


def consumed_reason(node: str) -> str:
    return f"no output from {node}"
