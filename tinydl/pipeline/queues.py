"""Bounded edge queues with a drop policy, and the Inbox a component's runner takes inputs from.

Every edge into a component instance has its own bounded queue; all queues of one instance share
its Inbox's lock, so a put wakes the consumer with one notify. A queue never loses a packet
silently: whatever a policy discards is returned to the caller, who accounts for it.

Policies (per edge):
- block (default): a put waits for room (backpressure up to the sources);
- drop-oldest: a put into a full queue discards the oldest queued packet;
- keep-latest: a put into a full queue discards everything queued (the consumer jumps to now);
- drop-if-older-than: packets older than `max_age` seconds are discarded when taken; full blocks.
"""

from __future__ import annotations

import threading
from collections import deque
from time import monotonic_ns
from typing import Any

from tinydl.pipeline.packet import Packet

POLICIES = ("block", "drop-oldest", "keep-latest", "drop-if-older-than")
STOPPED = "app stopped"
# Inbox.started while a sender sends a packet to the consumer's worker (forward), and while a
# producer's call is under way whose packet its worker may send to the consumer's (direct).
CLAIMED = ("claimed",)
RESERVED = ("reserved",)

Dropped = list[tuple[Packet, str]]


class EdgeQueue:
    """One edge's queue into one component instance."""

    def __init__(
        self,
        inbox: Inbox,
        port: str,
        label: str,
        capacity: int = 8,
        policy: str = "block",
        max_age: float | None = None,
        producers: int = 1,
    ):
        if policy not in POLICIES:
            raise ValueError(f"queue policy must be one of {POLICIES}, got {policy!r}")
        if capacity < 1:
            raise ValueError(f"queue capacity must be at least 1, got {capacity}")
        self.inbox = inbox
        self.port = port
        self.label = label
        self.capacity = capacity
        self.policy = policy
        if (max_age is None) != (policy != "drop-if-older-than"):
            raise ValueError("max_age goes with policy 'drop-if-older-than', and only with it")
        self.max_age_ns = None if max_age is None else int(max_age * 1e9)
        self.producers = producers
        self.items: deque[tuple[int, Packet]] = deque()
        self.space = threading.Condition(inbox.lock)
        self.high_water = 0
        self.blocked = 0  # producers waiting for room
        self.owner: Any = None  # the runner that consumes it (accounts its drops)
        inbox.add(self)

    def put(self, packet: Packet) -> Dropped:
        """Queue a packet; returns what the policy discarded (the packet itself when stopped)."""
        inbox = self.inbox
        with inbox.lock:
            items = self.items
            if len(items) >= self.capacity or inbox.closed:
                return self._put_full(packet)
            items.append((monotonic_ns(), packet))
            if len(items) > self.high_water:
                self.high_water = len(items)
            waiter = inbox.waiter
            inbox.waiter = None
        if waiter is not None:  # woken after the lock is free, so it need not wait for it
            waiter.release()
        return ()

    def _put_full(self, packet: Packet) -> Dropped:
        """put() into a full queue (or a closed inbox); the lock is held."""
        inbox, items = self.inbox, self.items
        dropped: Dropped = []
        if not inbox.closed:
            if self.policy == "drop-oldest":
                dropped.append((items.popleft()[1], f"queue full (drop-oldest) on {self.label}"))
            elif self.policy == "keep-latest":
                reason = f"superseded (keep-latest) on {self.label}"
                dropped.extend((p, reason) for _, p in items)
                items.clear()
            else:
                self.blocked += 1
                while len(items) >= self.capacity and not inbox.closed:
                    self.space.wait()
                self.blocked -= 1
        if inbox.closed:
            dropped.append((packet, STOPPED))
            return dropped
        items.append((monotonic_ns(), packet))
        self.high_water = max(self.high_water, len(items))
        inbox.wake()
        return dropped

    def producer_done(self) -> None:
        with self.inbox.lock:
            self.producers -= 1
            self.inbox.wake()


class Inbox:
    """The queues of one component instance; `take` returns the next call's inputs."""

    def __init__(self, ports: list[str], join_limit: int = 8):
        self.lock = threading.Lock()
        self.running = threading.Lock()  # held by whichever thread is calling the component
        self.waiter: threading.Lock | None = None  # held by a consumer asleep in take()
        self._sleeper = threading.Lock()
        self.ports = ports
        self.queues: list[EdgeQueue] = []
        self.closed = False
        self.wait_ns = 0  # total time packets spent queued
        self.taken = 0
        self.owner: Any = None  # the runner that takes from it
        self.join = len(ports) > 1
        self.join_limit = join_limit
        self.pending: dict[str, dict[tuple[int, int], Packet]] = {p: {} for p in ports}
        self.seen: dict[str, dict[int, int]] = {p: {} for p in ports}
        self._next = 0
        self.single: EdgeQueue | None = None  # the fast path: one queue, no join
        # A call a sender started for the consumer (forward, direct edge), or CLAIMED/RESERVED.
        self.started: tuple | None = None

    def add(self, queue: EdgeQueue) -> None:
        self.queues.append(queue)
        self.single = queue if len(self.queues) == 1 and not self.join else None

    def close(self) -> None:
        """Stop: wake every waiting producer and the consumer; later puts are refused."""
        with self.lock:
            self.closed = True
            self.wake()
            for q in self.queues:
                q.space.notify_all()

    def drain(self) -> Dropped:
        """Everything still queued or waiting for a join partner, emptied out."""
        with self.lock:
            out = [(p, STOPPED) for q in self.queues for _, p in q.items]
            for q in self.queues:
                q.items.clear()
                q.space.notify_all()
            for pend in self.pending.values():
                out.extend((p, STOPPED) for p in pend.values())
                pend.clear()
            return out

    def _pop(self, q: EdgeQueue, now: int, dropped: Dropped) -> Packet | None:
        enq, packet = q.items.popleft()
        if q.blocked:
            q.space.notify()
        if q.max_age_ns is not None and now - packet.timestamp > q.max_age_ns:
            dropped.append((packet, f"older than {q.max_age_ns / 1e9:g} s on {q.label}"))
            return None
        self.wait_ns += now - enq
        self.taken += 1
        return packet

    def _ended(self) -> bool:
        return all(q.producers <= 0 and not q.items for q in self.queues)

    def take(self, tick_at: int | None, dropped: Dropped) -> dict[str, Packet] | tuple | None:
        """The next call's inputs; {} when the tick time came first; None at end of stream
        (all producers done and everything taken) or when closed; a tuple (inputs, sent) for
        a call a sender started (`start`), before anything else. Discards go to `dropped`."""
        with self.lock:
            while True:
                started = self.started
                if started is CLAIMED or started is RESERVED:  # a call being started for it
                    if started is RESERVED and self.closed:  # (a producer's whole call: when
                        return None  # stopped, its frame is counted in flight at the stop)
                    self._sleep(-1)
                    continue
                if started is not None:
                    self.started = None
                    return started
                if self.closed:
                    return None
                now = monotonic_ns()
                q = self.single
                if q is not None and q.items and q.max_age_ns is None:  # the fast path
                    enq, packet = q.items.popleft()
                    if q.blocked:
                        q.space.notify()
                    self.wait_ns += now - enq
                    self.taken += 1
                    return {q.port: packet}
                got = self._take_join(now, dropped) if self.join else self._take_one(now, dropped)
                if got is not None:
                    return got
                if self._ended():
                    if self.join:
                        for pend in self.pending.values():
                            dropped.extend(
                                (p, "no partner at join (end of stream)") for p in pend.values()
                            )
                            pend.clear()
                    return None
                if tick_at is not None:
                    delay = (tick_at - now) / 1e9
                    if delay <= 0:
                        return {}
                    self._sleep(delay)
                else:
                    self._sleep(-1)

    def claim(self, start: tuple | None = None) -> bool:
        """Take `running` for the caller when the consumer sleeps with nothing queued: the
        caller may then call the component itself, in order, with no thread to wake; with
        `start` (CLAIMED or RESERVED), the caller will `start` a call instead (or `unclaim`),
        which the consumer waits for."""
        with self.lock:
            if self.waiter is None or self.closed or self.started is not None:
                return False
            for q in self.queues:
                if q.items:
                    return False
            if not self.running.acquire(False):
                return False
            if start is not None:
                self.started = start
            return True

    def start(self, call: tuple) -> None:
        """Hand the consumer a call started on the caller's thread (which holds `running`,
        from `claim`, and passes it on): the consumer finishes it and releases `running`."""
        with self.lock:
            self.started = call
            self.wake()

    def unclaim(self) -> None:
        """Give back a `claim(CLAIMED or RESERVED)` that started no call."""
        with self.lock:
            if self.started is CLAIMED or self.started is RESERVED:
                self.started = None
                self.running.release()
                self.wake()

    def wake(self) -> None:
        """Wake the consumer asleep in take(); the caller holds the lock."""
        if self.waiter is not None:
            self.waiter.release()
            self.waiter = None

    def _sleep(self, timeout: float) -> None:
        """Wait for wake() or the timeout; called and returns with the lock held. A lock handed
        over directly: the cheapest wake-up CPython has (threading.Condition does the same with
        more Python around it)."""
        w = self._sleeper
        w.acquire()
        self.waiter = w
        self.lock.release()
        try:
            woken = w.acquire(True, timeout)
        finally:
            self.lock.acquire()
        if woken:
            w.release()
        elif self.waiter is w:  # timed out and nobody woke it: release our first hold
            self.waiter = None
            w.release()

    def _take_one(self, now: int, dropped: Dropped) -> dict[str, Packet] | None:
        queues = self.queues
        n = len(queues)
        for i in range(n):
            q = queues[(self._next + i) % n]
            while q.items:
                packet = self._pop(q, now, dropped)
                if packet is not None:
                    self._next = (self._next + i + 1) % n
                    return {q.port: packet}
        return None

    def _take_join(self, now: int, dropped: Dropped) -> dict[str, Packet] | None:
        """Inputs are joined by (flow_id, request_id); each port is assumed in request order
        per flow, so a key that another port has passed can never be completed."""
        for q in self.queues:
            pend, seen = self.pending[q.port], self.seen[q.port]
            while q.items and len(pend) < self.join_limit:
                packet = self._pop(q, now, dropped)
                if packet is not None:
                    pend[packet.key] = packet
                    seen[packet.flow_id] = max(seen.get(packet.flow_id, -1), packet.request_id)
        first, *rest = self.ports
        for key in list(self.pending[first]):
            if all(key in self.pending[p] for p in rest):
                return {p: self.pending[p].pop(key) for p in self.ports}
        for port in self.ports:
            pend = self.pending[port]
            for key in list(pend):
                flow, request = key
                if any(
                    self.seen[o].get(flow, -1) > request and key not in self.pending[o]
                    for o in self.ports
                    if o != port
                ):
                    dropped.append((pend.pop(key), f"no partner at join on {port}"))
        return None


def describe_policy(policy: str, capacity: int, max_age: Any) -> str:
    extra = f" {max_age:g} s" if policy == "drop-if-older-than" and max_age is not None else ""
    return f"{policy}{extra}, capacity {capacity}"
