"""Assign nodes to backends and cut the graph into partitions, one compiled Kernel each.

This is TFLite's delegate mechanism (`ModifyGraphWithDelegate`), with the user's backends as
the delegates in priority order, first come first served:

1. Backend 1 claims every node its `supports(node)` accepts. The claimed and unclaimed nodes are
   grouped as TFLite's `PartitionGraphIntoIndependentNodeSubsets` does: walk the execution order,
   each group taking every ready node of its kind, so no group depends on a later one.
2. Groups of the backend that can join without creating a cycle are merged (TFLite leaves some
   apart when an unrelated node was ready first); the result is maximal: any two partitions of
   one backend have a path between them through another backend's partition.
3. A group smaller than `min_partition_size` is released (not for the last backend, the
   fallback); each group becomes one opaque unit, and backend 2 partitions what is unclaimed.

Every refusal is kept with its reason. Where a value crosses from one memory to another (each
backend says which its tensors live in: `Backend.memory`; graph inputs come from HOST) the plan
holds an explicit Transfer; backends sharing a memory exchange values with none.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tinydl.backends.base import HOST, Backend
from tinydl.backends.planned import frozen, shape_derived
from tinydl.errors import InvalidInputError, UnsupportedOpError
from tinydl.ir.graph import Graph, Node, Value

__all__ = ["HOST", "Partition", "Placement", "Transfer", "partition"]


@dataclass
class Partition:
    backend: str
    nodes: list[Node]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # Inputs computed from tensor shapes alone in the whole graph (Shape -> Gather -> Concat,
    # made in another partition): where the partition's backend needed such a value constant
    # (a ConstantOfShape's shape, a Reshape's), its plans read it as one (planned.py).
    shape_inputs: list[str] = field(default_factory=list)

    def subgraph(self, graph: Graph) -> Graph:
        used = {i for n in self.nodes for i in n.inputs if i}
        named = used | {o for n in self.nodes for o in n.outputs if o}
        return Graph(
            inputs=[_typed(graph, name) for name in self.inputs],
            outputs=[_typed(graph, name) for name in self.outputs],
            nodes=self.nodes,
            initializers={k: v for k, v in graph.initializers.items() if k in used},
            values={k: v for k, v in graph.values.items() if k in named},
            metadata=graph.metadata,
            name=f"{graph.name}:{self.backend}",
        )


@dataclass(frozen=True)
class Transfer:
    """A value copied between memories at a partition boundary, `bytes` per run (None while a
    dim is symbolic; Session.profile() has the bytes measured in the last run)."""

    value: str
    src: str
    dst: str
    bytes: int | None

    def __str__(self) -> str:
        size = "?" if self.bytes is None else f"{self.bytes:,}"
        return f"{self.value}: {self.src} -> {self.dst} ({size} bytes)"


def _typed(graph: Graph, name: str) -> Value:
    v = graph.value(name)
    return Value(name, v.dtype, v.shape) if v is not None else Value(name)


def _bytes(graph: Graph, name: str) -> int | None:
    v = graph.value(name)
    if v is None or v.dtype is None or v.shape is None:
        return None
    if not all(isinstance(d, int) for d in v.shape):
        return None
    return math.prod(v.shape) * np.dtype(v.dtype).itemsize


@dataclass
class Placement:
    """Where each node runs, why it does not run on a backend the user preferred, the
    partitions in execution order and the transfers between them (`plan` interleaves the two)."""

    backends: list[str]
    nodes: dict[str, str]
    ops: dict[str, str]
    refusals: dict[str, dict[str, str]]
    partitions: list[Partition]
    plan: list[Partition | Transfer] = field(default_factory=list)
    min_partition_size: int = 1
    # backend -> the memory its tensors live in (Backend.memory)
    memory: dict[str, str] = field(default_factory=dict)
    # node -> "fp16" / "fp32": precision="auto"'s decision (empty otherwise)
    precision: dict[str, str] = field(default_factory=dict)
    # node -> predicted seconds on its backend, value -> predicted seconds of its copies:
    # partition="cost"'s model (empty otherwise; Session.cost_report has the measured beside)
    predicted: dict[str, float] = field(default_factory=dict)
    predicted_transfers: dict[str, float] = field(default_factory=dict)

    def __getitem__(self, node_name: str) -> str:
        return self.nodes[node_name]

    @property
    def transfers(self) -> list[Transfer]:
        """Copies per run: into partitions, and of graph outputs back to the host."""
        return [step for step in self.plan if isinstance(step, Transfer)]

    def bytes_per_run(self) -> int | None:
        sizes = [t.bytes for t in self.transfers]
        return None if None in sizes else sum(sizes)

    def fallbacks(self) -> dict[str, dict[str, str]]:
        """Nodes not placed on the first-choice backend, with each refusal reason."""
        first = self.backends[0]
        return {n: self.refusals[n] for n, b in self.nodes.items() if b != first}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.nodes.values():
            out[b] = out.get(b, 0) + 1
        return out

    def table(self) -> str:
        """One line per node: partition, backend and the refusals of preferred backends."""
        part_of = {n.name: k for k, p in enumerate(self.partitions) for n in p.nodes}
        lines = [f"{'node':36} {'op':20} {'part':>4} {'backend':8} refused by"]
        for name, backend in self.nodes.items():
            why = "; ".join(f"{b}: {r}" for b, r in self.refusals.get(name, {}).items())
            if name in self.precision:
                why = f"[{self.precision[name]}] {why}"
            line = f"{name[:36]:36} {self.ops[name][:20]:20} {part_of[name]:>4} {backend:8} {why}"
            lines.append(line.rstrip())
        return "\n".join(lines)

    def summary(self) -> str:
        """One line per partition and per transfer, in execution order."""
        lines, k = [], 0
        for step in self.plan:
            if isinstance(step, Transfer):
                lines.append(f"       transfer {step}")
                continue
            ops: dict[str, int] = {}
            for n in step.nodes:
                ops[n.op] = ops.get(n.op, 0) + 1
            counted = [f"{op} {c}" for op, c in sorted(ops.items(), key=lambda kv: -kv[1])]
            shown = counted[:6]  # whole entries only: a name is never cut
            more = f", +{len(counted) - len(shown)} more ops" if len(counted) > len(shown) else ""
            top = ", ".join(shown) + more
            lines.append(f"  #{k:<3} {step.backend:8} {len(step.nodes):4} nodes  {top}")
            k += 1
        total = self.bytes_per_run()
        moved = "unknown until run (symbolic dims)" if total is None else f"{total:,} bytes"
        lines.append(f"  moved per run: {moved} in {len(self.transfers)} transfer(s)")
        return "\n".join(lines)


class _Units:
    """The execution plan while delegates claim it: units (one node, or a claimed partition)
    in an order where every unit comes after the units it reads from."""

    def __init__(self, graph: Graph):
        self.nodes = graph.nodes
        self.members: list[list[int]] = [[i] for i in range(len(self.nodes))]
        self.owner: list[str | None] = [None] * len(self.nodes)
        producer = {o: i for i, n in enumerate(self.nodes) for o in n.outputs if o}
        self.node_deps = [{producer[i] for i in n.inputs if i in producer} for n in self.nodes]

    def deps(self) -> list[set[int]]:
        """For each unit, the units it reads from."""
        unit_of = {i: u for u, ms in enumerate(self.members) for i in ms}
        return [
            {unit_of[d] for i in ms for d in self.node_deps[i]} - {u}
            for u, ms in enumerate(self.members)
        ]


def _subsets(kinds: list[bool], deps: list[set[int]]) -> list[tuple[bool, list[int]]]:
    """TFLite's PartitionGraphIntoIndependentNodeSubsets: each subset takes, in plan order, every
    unit whose inputs are ready and whose kind is the subset's (set by its first ready unit)."""
    done = [False] * len(kinds)
    subsets = []
    while not all(done):
        kind, members, progress = None, [], True
        while progress:
            progress = False
            for u, k in enumerate(kinds):
                if done[u] or not all(done[d] for d in deps[u]):
                    continue
                if kind is None:
                    kind = k
                if k == kind:
                    done[u], progress = True, True
                    members.append(u)
        subsets.append((kind, members))
    return subsets


def _merge(groups: list[list[int]], claimed: list[bool], deps: list[set[int]]) -> list[list[int]]:
    """Merge claimed groups pairwise while no path between the two leaves them (which would
    make the merged partition depend on itself); unclaimed groups stay as they are."""
    while True:
        succ = _successors(groups, deps)
        pair = _mergeable_pair(_toposort(succ), claimed, succ)
        if pair is None:
            return groups
        a, b = pair
        groups = [
            sorted(groups[a] + groups[b]) if g == a else us for g, us in enumerate(groups) if g != b
        ]
        claimed = [c for g, c in enumerate(claimed) if g != b]


def _mergeable_pair(
    order: list[int], claimed: list[bool], succ: list[set[int]]
) -> tuple[int, int] | None:
    """The first two claimed groups (in plan order) with no path between them through another."""
    reach = [0] * len(succ)  # bitset of the groups reachable from g by one edge or more
    for g in reversed(order):
        for s in succ[g]:
            reach[g] |= reach[s] | (1 << s)

    def via_other(a: int, b: int) -> bool:
        return any(s != b and (reach[s] >> b) & 1 for s in succ[a])

    for i, a in enumerate(order):
        if not claimed[a]:
            continue
        for b in order[i + 1 :]:
            if claimed[b] and not via_other(a, b) and not via_other(b, a):
                return a, b
    return None


def _successors(groups: list[list[int]], deps: list[set[int]]) -> list[set[int]]:
    """For each group of units, the other groups that read from it."""
    group_of = {u: g for g, us in enumerate(groups) for u in us}
    succ: list[set[int]] = [set() for _ in groups]
    for g, us in enumerate(groups):
        for u in us:
            for d in deps[u]:
                if group_of[d] != g:
                    succ[group_of[d]].add(g)
    return succ


def _toposort(succ: list[set[int]]) -> list[int]:
    """Kahn's algorithm over groups; among ready groups the lowest index first."""
    indegree = [0] * len(succ)
    for targets in succ:
        for s in targets:
            indegree[s] += 1
    ready = [g for g, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        g = heapq.heappop(ready)
        order.append(g)
        for s in succ[g]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, s)
    return order


def partition(graph: Graph, backends: Sequence[Backend], min_partition_size: int = 1) -> Placement:
    """Place every node of a topologically ordered graph (see the module docstring).

    Raises UnsupportedOpError listing every node no backend can run, with each refusal.
    """
    if min_partition_size < 1:
        raise InvalidInputError(f"min_partition_size must be >= 1, got {min_partition_size}")
    with frozen(graph):  # nothing edits the graph while the backends are asked about it
        return _partition(graph, backends, min_partition_size)


def _partition(graph: Graph, backends: Sequence[Backend], min_partition_size: int) -> Placement:
    units = _Units(graph)
    refusals: dict[str, dict[str, str]] = {}
    for rank, backend in enumerate(backends):
        last = rank == len(backends) - 1
        kinds = []
        for u, members in enumerate(units.members):
            ok = False
            if units.owner[u] is None:
                node = units.nodes[members[0]]
                answer = backend.supports(node, graph)
                ok = answer.ok
                if not ok:
                    refusals.setdefault(node.name, {})[backend.name] = (
                        answer.reason or "not supported"
                    )
            kinds.append(ok)
        deps = units.deps()
        subsets = _subsets(kinds, deps)
        # Claimed subsets are merged; unclaimed units stay apart for the next backend.
        groups = [g for kind, us in subsets for g in ([us] if kind else [[u] for u in us])]
        claimed = [kinds[g[0]] for g in groups]
        groups = _merge(groups, claimed, deps)
        new_members, new_owner = [], []
        for g in groups:
            nodes = sorted(i for u in g for i in units.members[u])
            if kinds[g[0]] and (last or len(nodes) >= min_partition_size):
                new_members.append(nodes)
                new_owner.append(backend.name)
                continue
            if kinds[g[0]]:
                for i in nodes:
                    refusals.setdefault(units.nodes[i].name, {})[backend.name] = (
                        f"its partition would hold {len(nodes)} node(s), fewer than "
                        f"min_partition_size={min_partition_size}"
                    )
            for u in g:
                new_members.append(units.members[u])
                new_owner.append(units.owner[u])
        units.members, units.owner = new_members, new_owner
        # Keep the plan topological: merged groups may have moved past units they read from.
        singles = [[u] for u in range(len(units.members))]
        order = _toposort(_successors(singles, units.deps()))
        units.members = [units.members[u] for u in order]
        units.owner = [units.owner[u] for u in order]

    unplaced = [
        units.nodes[ms[0]]
        for ms, owner in zip(units.members, units.owner, strict=True)
        if not owner
    ]
    if unplaced:
        lines = [
            f"{n.name} ({n.op}): " + "; ".join(f"{b}: {r}" for b, r in refusals[n.name].items())
            for n in unplaced
        ]
        raise UnsupportedOpError(
            "no requested backend can run these nodes:\n  " + "\n  ".join(lines)
        )
    parts = [
        Partition(owner, [units.nodes[i] for i in ms])
        for ms, owner in zip(units.members, units.owner, strict=True)
    ]
    nodes = {n.name: p.backend for p in parts for n in p.nodes}
    memory = {b.name: b.memory for b in backends}
    return Placement(
        backends=[b.name for b in backends],
        nodes={n.name: nodes[n.name] for n in graph.nodes},
        ops={n.name: n.op for n in graph.nodes},
        # Only the refusals of backends preferred to the one that runs the node are reasons.
        refusals={
            name: {b: r for b, r in why.items() if b != nodes[name]}
            for name, why in refusals.items()
            if any(b != nodes[name] for b in why)
        },
        partitions=parts,
        plan=_plan(graph, parts, memory),
        min_partition_size=min_partition_size,
        memory=memory,
    )


def _plan(
    graph: Graph, parts: list[Partition], memory: dict[str, str]
) -> list[Partition | Transfer]:
    """Fill each partition's boundary values and interleave the transfers they need: a value
    made in (or fed from) one memory and read in another, and graph outputs back to the host."""
    graph_outputs = [v.name for v in graph.outputs]
    made_in: dict[str, str] = {v.name: HOST for v in graph.inputs}
    for part in parts:
        for n in part.nodes:
            for o in n.outputs:
                if o:
                    made_in[o] = memory[part.backend]
    read_later: dict[str, set[int]] = {}
    for k, part in enumerate(parts):
        for n in part.nodes:
            for i in n.inputs:
                read_later.setdefault(i, set()).add(k)
    plan: list[Partition | Transfer] = []
    present: set[tuple[str, str]] = set()
    for k, part in enumerate(parts):
        produced = {o for n in part.nodes for o in n.outputs if o}
        part.inputs = list(
            dict.fromkeys(
                i
                for n in part.nodes
                for i in n.inputs
                if i and i not in produced and i not in graph.initializers
            )
        )
        part.outputs = [
            o
            for o in dict.fromkeys(o for n in part.nodes for o in n.outputs if o)
            if any(j != k for j in read_later.get(o, ())) or o in graph_outputs
        ]
        part.shape_inputs = [name for name in part.inputs if shape_derived(name, graph)]
        dst = memory[part.backend]
        for name in part.inputs:
            src = made_in[name]
            if src != dst and (name, dst) not in present:
                plan.append(Transfer(name, src, dst, _bytes(graph, name)))
                present.add((name, dst))
        plan.append(part)
    for name in dict.fromkeys(graph_outputs):
        src = made_in.get(name, HOST)
        if src != HOST:
            plan.append(Transfer(name, src, HOST, _bytes(graph, name)))
    return plan
