"""partition="cost": which backend runs each node, chosen by predicted time, transfers included.

The support-greedy partitioner gives every node to the first backend that can run it. Where a
model mixes nodes the first (GPU) backend runs with nodes only a later (host) backend runs,
that can cost more than it saves: every boundary is a copy through the host. Here each node
gets one of two labels, the first backend or its fallback (the first later backend that runs
it), at the least predicted time:

    sum over nodes of its time on its backend + sum over values that cross of a transfer

Each backend's speed is a `BackendCost`: per node, a launch cost plus its arithmetic (FLOPs)
and its memory traffic (bytes in and out) at the backend's rates; per transfer, a latency plus
bytes at the link's bandwidth. `calibrate(backend)` measures them with a few small graphs
(cached per backend and device for the process); tests pass their own. With two labels and
pairwise transfer costs, the least-cost assignment is a minimum s-t cut (nodes the first
backend cannot run are tied to the fallback, and the other way round); a value read by
several nodes on the other side is counted once per reader, so the prediction overcounts there
and never misses a transfer. The partitioner then runs as usual with each backend steered off
the nodes the cut gave to the other (`Placement.refusals` says so, with both predictions).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinydl.backends.base import Backend, Support
from tinydl.ir.graph import Graph, Node, Value

FLOP_OPS = {"Conv", "ConvTranspose", "FusedConv", "MatMul", "Gemm", "tinydl.Attention"}


@dataclass(frozen=True)
class BackendCost:
    """Predicted seconds: a node `launch_s + flops / flops_per_s + bytes / bytes_per_s`; a
    value moved between the host and this backend's memory `transfer_latency_s + bytes /
    transfer_bytes_per_s` (zero for a host backend)."""

    launch_s: float
    flops_per_s: float
    bytes_per_s: float
    transfer_latency_s: float = 0.0
    transfer_bytes_per_s: float = math.inf

    def node_seconds(self, flops: float, nbytes: float) -> float:
        return self.launch_s + flops / self.flops_per_s + nbytes / self.bytes_per_s

    def transfer_seconds(self, nbytes: float) -> float:
        if self.transfer_bytes_per_s == math.inf and self.transfer_latency_s == 0:
            return 0.0
        return self.transfer_latency_s + nbytes / self.transfer_bytes_per_s


def _size(t) -> float | None:
    if t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape):
        return None
    return float(math.prod(t.shape))


def node_work(node: Node, types: dict) -> tuple[float, float]:
    """(FLOPs, bytes read and written) of a node from its inferred shapes; unknown dims count
    as 1 element."""
    ins = [types.get(i) for i in node.inputs if i]
    outs = [types.get(o) for o in node.outputs if o]

    def nbytes(ts) -> float:
        total = 0.0
        for t in ts:
            n = _size(t) or 1.0
            total += n * (np.dtype(t.dtype).itemsize if t is not None and t.dtype else 4)
        return total

    out_elems = sum(_size(t) or 1.0 for t in outs)
    flops = out_elems
    if node.op in FLOP_OPS and len(ins) >= 2 and ins[1] is not None and ins[1].shape:
        w = ins[1].shape
        if node.op in ("Conv", "FusedConv") and len(w) >= 2:
            per = math.prod(d for d in w[1:] if isinstance(d, int))  # Cin/groups x kernel
            flops = 2.0 * out_elems * per
        elif node.op == "ConvTranspose" and len(w) >= 2 and _size(ins[0]):
            per = math.prod(d for d in w[1:] if isinstance(d, int))
            flops = 2.0 * (_size(ins[0]) or 1.0) * per
        elif isinstance(w[-2] if len(w) >= 2 else None, int):
            flops = 2.0 * out_elems * w[-2]  # MatMul / Gemm: K of the right operand
    return flops, nbytes(ins) + nbytes(outs)


# -- calibration ----------------------------------------------------------------------------------

_CALIBRATED: dict[tuple[str, str], BackendCost] = {}


def _timed(sess, feeds, repeat: int = 5) -> float:
    sess.run(feeds)
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(backend: Backend) -> BackendCost:
    """A backend's BackendCost, measured once per process: the per-node cost from a chain of
    32 tiny nodes against one, the arithmetic rate from a 256x512x512 MatMul, the memory rate
    from an Add over 4 Mi floats, and for a device backend the transfer latency and bandwidth
    from copies of 4 KiB and 16 MiB each way. Each from the best of 5 runs."""
    from tinydl.backends.base import HOST
    from tinydl.ops import validate
    from tinydl.runtime.session import Session

    key = (backend.name, backend.memory)
    if key in _CALIBRATED:
        return _CALIBRATED[key]
    rng = np.random.default_rng(0)

    def session(nodes, inputs, outputs, inits=None):
        graph = validate(Graph(inputs, outputs, nodes, inits or {}))
        return Session(graph, backends=(backend.name,), optimize="none", strict=True)

    def chain(n: int) -> float:
        nodes = [
            Node("Relu", ["x" if i == 0 else f"v{i}"], [f"v{i + 1}" if i < n - 1 else "y"])
            for i in range(n)
        ]
        sess = session(nodes, [Value("x", "float32", (1, 64))], [Value("y")])
        return _timed(sess, {"x": rng.random((1, 64), dtype=np.float32)})

    launch = max((chain(33) - chain(1)) / 32, 1e-7)
    w = rng.random((512, 512), dtype=np.float32)
    mm = session(
        [Node("MatMul", ["x", "w"], ["y"])],
        [Value("x", "float32", (256, 512))],
        [Value("y")],
        {"w": w},
    )
    x = rng.random((256, 512), dtype=np.float32)
    flops = 2.0 * 256 * 512 * 512 / max(_timed(mm, {"x": x}) - launch, 1e-9)
    n = 1 << 22
    add = session([Node("Add", ["x", "x"], ["y"])], [Value("x", "float32", (n,))], [Value("y")])
    x = rng.random(n, dtype=np.float32)
    on = backend.to_device(x) if backend.memory != HOST else x
    rate = 3.0 * 4 * n / max(_timed(add, {"x": on}) - launch, 1e-9)
    latency, bandwidth = 0.0, math.inf
    if backend.memory != HOST:
        small, big = x[:1024].copy(), x.copy()

        def copy_time(a) -> float:
            best = math.inf
            for _ in range(5):
                t0 = time.perf_counter()
                backend.to_host(backend.to_device(a))
                best = min(best, time.perf_counter() - t0)
            return best / 2  # there and back

        t_small, t_big = copy_time(small), copy_time(big)
        latency = t_small
        bandwidth = (big.nbytes - small.nbytes) / max(t_big - t_small, 1e-9)
    cost = _CALIBRATED[key] = BackendCost(launch, flops, rate, latency, bandwidth)
    return cost


# -- the assignment -------------------------------------------------------------------------------


class _Flow:
    """Dinic's maximum flow on a small graph; `cut()` is the source side afterwards."""

    def __init__(self, n: int):
        self.n = n
        self.adj: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[float] = []

    def edge(self, a: int, b: int, cap: float, back: float = 0.0) -> None:
        if cap <= 0 and back <= 0:
            return
        self.adj[a].append(len(self.to))
        self.to.append(b)
        self.cap.append(cap)
        self.adj[b].append(len(self.to))
        self.to.append(a)
        self.cap.append(back)

    def _levels(self, s: int, t: int) -> list[int] | None:
        level = [-1] * self.n
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adj[u]:
                if self.cap[e] > 1e-18 and level[self.to[e]] < 0:
                    level[self.to[e]] = level[u] + 1
                    queue.append(self.to[e])
        return level if level[t] >= 0 else None

    def maxflow(self, s: int, t: int) -> float:
        total = 0.0
        while (level := self._levels(s, t)) is not None:
            it = [0] * self.n
            while True:
                pushed = self._push(s, t, math.inf, level, it)
                if pushed <= 1e-18:
                    break
                total += pushed
        return total

    def _push(self, s: int, t: int, limit: float, level, it) -> float:
        # Iterative DFS along the level graph.
        path: list[int] = []
        u = s
        while True:
            if u == t:
                f = min([limit, *(self.cap[e] for e in path)])
                for e in path:
                    self.cap[e] -= f
                    self.cap[e ^ 1] += f
                return f
            advanced = False
            while it[u] < len(self.adj[u]):
                e = self.adj[u][it[u]]
                v = self.to[e]
                if self.cap[e] > 1e-18 and level[v] == level[u] + 1:
                    path.append(e)
                    u = v
                    advanced = True
                    break
                it[u] += 1
            if not advanced:
                if u == s:
                    return 0.0
                level[u] = -1  # dead end
                e = path.pop()
                u = self.to[e ^ 1]
                it[u] += 1

    def source_side(self, s: int) -> set[int]:
        seen = {s}
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adj[u]:
                if self.cap[e] > 1e-18 and self.to[e] not in seen:
                    seen.add(self.to[e])
                    queue.append(self.to[e])
        return seen


@dataclass
class CostAssignment:
    """The cut's answer: each node's backend, its predicted seconds there and on the other
    label, and the predicted total of this assignment and of the support-greedy one."""

    backend: dict[str, str]
    seconds: dict[str, dict[str, float]]
    predicted_s: float
    greedy_s: float
    transfer_s: dict[str, float]


def assign(
    graph: Graph,
    backends: list[Backend],
    costs: dict[str, BackendCost],
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> CostAssignment | None:
    """The least-predicted-time choice between the first backend and each node's fallback
    (None with one backend). `shapes` gives input shapes where the graph's are symbolic (a
    symbolic dim counts as 1 element otherwise)."""
    from tinydl.ops import infer_graph

    if len(backends) < 2:
        return None
    first = backends[0]
    shaped = graph
    if shapes:
        inputs = [Value(v.name, v.dtype, tuple(shapes.get(v.name, v.shape))) for v in graph.inputs]
        shaped = Graph(inputs, graph.outputs, graph.nodes, graph.initializers)
    types = infer_graph(shaped)
    nodes = graph.nodes
    can_first = [bool(first.supports(n, graph)) for n in nodes]
    fallback: list[Backend | None] = []
    for n in nodes:
        fallback.append(next((b for b in backends[1:] if b.supports(n, graph)), None))
    seconds: dict[str, dict[str, float]] = {}
    for n, ok, fb in zip(nodes, can_first, fallback, strict=True):
        flops, nbytes = node_work(n, types)
        seconds[n.name] = {
            b.name: costs[b.name].node_seconds(flops, nbytes) for b in (first, fb) if b is not None
        }
        if not ok:
            seconds[n.name].pop(first.name, None)

    def value_bytes(name: str) -> float:
        t = types.get(name)
        return (_size(t) or 1.0) * (np.dtype(t.dtype).itemsize if t is not None and t.dtype else 4)

    def move(name: str, a: Backend, b: Backend | None) -> float:
        """Seconds to move value `name` from a's memory to b's (through the host)."""
        if b is None or a.memory == b.memory:
            return 0.0
        nbytes = value_bytes(name)
        return costs[a.name].transfer_seconds(nbytes) + costs[b.name].transfer_seconds(nbytes)

    # Nodes 0..N-1; S = the first backend's side, T = the fallback's.
    n = len(nodes)
    s, t = n, n + 1
    flow = _Flow(n + 2)
    big = 1e9
    producer = {o: i for i, node in enumerate(nodes) for o in node.outputs if o}
    graph_inputs = {v.name for v in graph.inputs}
    host_first = first.memory == "host"
    for i, node in enumerate(nodes):
        on_first = seconds[node.name].get(first.name, big)
        fb = fallback[i]
        on_fallback = seconds[node.name].get(fb.name, big) if fb is not None else big
        flow.edge(s, i, on_fallback)  # cut when i is on the fallback's side
        flow.edge(i, t, on_first)  # cut when i is on the first backend's side
        for name in node.inputs:
            if not name:
                continue
            if name in producer:
                j = producer[name]
                fj = fallback[j]
                # j first, i fallback: moved first -> i's fallback; and the other way round.
                flow.edge(j, i, move(name, first, fb), move(name, fj or first, first))
            elif name in graph_inputs and not host_first:
                flow.edge(i, t, costs[first.name].transfer_seconds(value_bytes(name)))
    for v in graph.outputs:
        if v.name in producer and not host_first:
            flow.edge(producer[v.name], t, costs[first.name].transfer_seconds(value_bytes(v.name)))
    flow.maxflow(s, t)
    side = flow.source_side(s)
    chosen = {}
    for i, node in enumerate(nodes):
        fb = fallback[i]
        on_first = (i in side and can_first[i]) or fb is None
        chosen[node.name] = first.name if on_first else fb.name
    greedy = {
        node.name: first.name if ok else (fb.name if fb else first.name)
        for node, ok, fb in zip(nodes, can_first, fallback, strict=True)
    }
    by_name = {b.name: b for b in backends}
    predicted, transfers = _total(graph, chosen, seconds, by_name, costs, value_bytes)
    greedy_s, _ = _total(graph, greedy, seconds, by_name, costs, value_bytes)
    return CostAssignment(chosen, seconds, predicted, greedy_s, transfers)


def _total(graph, chosen, seconds, by_name, costs, value_bytes) -> tuple[float, dict[str, float]]:
    """Predicted seconds of an assignment: its nodes, and each value moved once per memory it
    is read in (graph inputs from the host, graph outputs to the host)."""
    total = sum(seconds[n.name][chosen[n.name]] for n in graph.nodes)
    home = {v.name: "host" for v in graph.inputs}
    maker: dict[str, str] = {}
    for node in graph.nodes:
        for o in node.outputs:
            if o:
                home[o] = by_name[chosen[node.name]].memory
                maker[o] = chosen[node.name]
    moved: dict[str, float] = {}

    def charge(name: str, to_backend: str | None) -> None:
        src = home.get(name)
        dst = by_name[to_backend].memory if to_backend else "host"
        if src is None or src == dst or (name, dst) in seen:
            return
        seen.add((name, dst))
        nbytes = value_bytes(name)
        sec = 0.0
        if src != "host":
            sec += costs[maker[name]].transfer_seconds(nbytes)
        if dst != "host":
            sec += costs[to_backend].transfer_seconds(nbytes)
        moved[name] = moved.get(name, 0.0) + sec

    seen: set[tuple[str, str]] = set()
    for node in graph.nodes:
        for name in node.inputs:
            if name and name not in graph.initializers:
                charge(name, chosen[node.name])
    for v in graph.outputs:
        charge(v.name, None)
    return total + sum(moved.values()), moved


class Steered(Backend):
    """A backend that refuses the nodes a cost assignment gave to another, saying why."""

    def __init__(self, inner: Backend, plan: CostAssignment):
        self.inner, self.plan = inner, plan
        self.name, self.memory = inner.name, inner.memory

    def available(self) -> bool:
        return self.inner.available()

    def supports(self, node: Node, graph: Graph) -> Support:
        answer = self.inner.supports(node, graph)
        other = self.plan.backend.get(node.name)
        if answer.ok and other is not None and other != self.name:
            here = self.plan.seconds[node.name].get(self.name, math.nan)
            there = self.plan.seconds[node.name].get(other, math.nan)
            return Support(
                False,
                f"cost: runs on {other} (predicted {there * 1e6:.1f} us there, "
                f"{here * 1e6:.1f} us here, transfers counted)",
            )
        return answer

    def compile(self, subgraph: Graph, options: Any):
        return self.inner.compile(subgraph, options)
