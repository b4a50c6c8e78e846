"""Graph, Node and Value: the in-memory model every importer produces and every backend consumes.

The IR knows no ops: validating ops, attributes and shapes takes an op set (tinydl.ops.validate
passes tinydl's registry), so this package imports nothing of tinydl above it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tinydl.errors import InvalidModelError
from tinydl.ir.dtypes import DTYPES, dtype_name

# A dimension is a concrete size, a symbol (e.g. "H") or None when nothing is known.
Dim = int | str | None
Shape = tuple[Dim, ...]


class OpSet(Protocol):
    """What Graph.validate asks of an op registry (tinydl.ops.base.REGISTRY_OPS is tinydl's)."""

    def check_node(self, node: Node) -> None:
        """Raise InvalidModelError unless the node's op is known and its attributes and arity
        fit it; replace node.attrs by the checked attributes with every default filled in."""

    def infer(self, graph: Graph) -> None:
        """Infer every value's dtype and shape into graph.values (InvalidModelError when the
        inputs of a node do not fit its op)."""


@dataclass
class Value:
    """A named tensor: a graph input or output, or an intermediate with its inferred type."""

    name: str
    dtype: str | None = None
    shape: Shape | None = None

    def describe(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else ",".join("?" if d is None else str(d) for d in self.shape)
        )
        return f"{self.dtype or '?'}[{dims}]"


@dataclass
class Node:
    """One op application. `inputs` may hold "" for an omitted optional input."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Node({self.op} '{self.name}': {self.inputs} -> {self.outputs})"


@dataclass
class Graph:
    """A model: inputs, outputs, nodes, weights (initializers) and metadata."""

    inputs: list[Value]
    outputs: list[Value]
    nodes: list[Node]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, Value] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    name: str = "graph"

    # -- queries ---------------------------------------------------------------------------
    def value(self, name: str) -> Value | None:
        """The typed Value for a name (input, output, initializer or inferred intermediate)."""
        for v in self.inputs:
            if v.name == name:
                return v
        if name in self.values:
            return self.values[name]
        if name in self.initializers:
            arr = self.initializers[name]
            return Value(name, dtype_name(arr.dtype), tuple(arr.shape))
        for v in self.outputs:
            if v.name == name:
                return v
        return None

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    uses.setdefault(i, []).append(n)
        return uses

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def parameter_count(self) -> int:
        return int(sum(a.size for a in self.initializers.values()))

    # -- ordering and validation -----------------------------------------------------------
    def toposort(self) -> list[Node]:
        """Kahn's algorithm; stable: among ready nodes the earliest in file order goes first, so
        an already ordered graph keeps its order.

        Raises InvalidModelError for a duplicate output, an input that nothing defines, or a cycle.
        """
        defined = {v.name for v in self.inputs} | set(self.initializers)
        producer: dict[str, int] = {}
        for idx, node in enumerate(self.nodes):
            for out in node.outputs:
                if not out:
                    continue
                if out in producer or out in defined:
                    raise InvalidModelError(
                        f"node '{node.name}' ({node.op}): output '{out}' is already defined "
                        "(every value must have exactly one producer)"
                    )
                producer[out] = idx
        indegree = [0] * len(self.nodes)
        dependents: list[list[int]] = [[] for _ in self.nodes]
        for idx, node in enumerate(self.nodes):
            for inp in node.inputs:
                if not inp or inp in defined:
                    continue
                if inp not in producer:
                    raise InvalidModelError(
                        f"node '{node.name}' ({node.op}): input '{inp}' is not a graph input, "
                        "an initializer or the output of any node (dangling input)"
                    )
                indegree[idx] += 1
                dependents[producer[inp]].append(idx)
        ready = [i for i, d in enumerate(indegree) if d == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in dependents[i]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(self.nodes):
            cycle = [self.nodes[i] for i in self._find_cycle(indegree, producer, defined)]
            path = " -> ".join(f"'{n.name}'" for n in [*cycle, cycle[0]])
            raise InvalidModelError(
                f"node '{cycle[0].name}' ({cycle[0].op}) is part of a cycle ({path}): "
                "the graph must be acyclic"
            )
        return [self.nodes[i] for i in order]

    def _find_cycle(
        self, indegree: list[int], producer: dict[str, int], defined: set[str]
    ) -> list[int]:
        """One cycle among the nodes Kahn's algorithm could not order, in data-flow order.

        Each such node still waits on an unordered producer, so walking from producer to
        producer must come back to a node already seen.
        """
        seen: dict[int, int] = {}
        walk: list[int] = []
        i = next(k for k, d in enumerate(indegree) if d > 0)
        while i not in seen:
            seen[i] = len(walk)
            walk.append(i)
            i = next(
                producer[inp]
                for inp in self.nodes[i].inputs
                if inp and inp not in defined and indegree[producer[inp]] > 0
            )
        return walk[seen[i] :][::-1]

    def sort(self) -> Graph:
        """Reorder nodes topologically in place."""
        self.nodes = self.toposort()
        return self

    def validate(self, ops: OpSet | None = None, infer: bool = True) -> Graph:
        """Check the structure (names, dtypes, node fields, no cycle, every output produced),
        name unnamed nodes and order the nodes topologically; with `ops`, also each node's op,
        attributes and arity, and (with `infer`) shapes, filling in the inferred types.
        `tinydl.ops.validate(graph)` is the whole check with tinydl's registry: use it; without
        `ops` nothing about the ops is checked.

        Raises InvalidModelError naming the offending node.
        """
        names = set()
        for v in self.inputs:
            if not isinstance(v.name, str) or not v.name:
                raise InvalidModelError(f"graph input has an invalid name: {v.name!r}")
            if v.name in names:
                raise InvalidModelError(f"graph input '{v.name}' is declared twice")
            names.add(v.name)
            _check_value_type(v, "graph input")
        for name, arr in self.initializers.items():
            if not isinstance(name, str) or not name:
                raise InvalidModelError(f"initializer has an invalid name: {name!r}")
            if not isinstance(arr, np.ndarray):
                raise InvalidModelError(
                    f"initializer '{name}' is not an array: {type(arr).__name__}"
                )
            try:
                dtype_name(arr.dtype)
            except KeyError:
                raise InvalidModelError(
                    f"initializer '{name}' has unsupported dtype {arr.dtype}"
                ) from None
        for index, node in enumerate(self.nodes):
            _check_node_fields(node, index)
        # An unnamed or repeated node gets a fresh name that no other node already has.
        taken = {node.name for node in self.nodes if node.name}
        seen_names = set()
        for index, node in enumerate(self.nodes):
            if not node.name or node.name in seen_names:
                node.name = _unique(f"{node.op}_{index}", taken)
                taken.add(node.name)
            seen_names.add(node.name)
            if ops is not None:
                ops.check_node(node)
        order = self.toposort()
        produced = {o for n in self.nodes for o in n.outputs if o} | names | set(self.initializers)
        for v in self.outputs:
            if not isinstance(v.name, str) or not v.name:
                raise InvalidModelError(f"graph output has an invalid name: {v.name!r}")
            if v.name not in produced:
                raise InvalidModelError(f"graph output '{v.name}' is not produced by any node")
            _check_value_type(v, "graph output")
        self.nodes = order
        if ops is not None and infer:
            ops.infer(self)
        return self


def _check_node_fields(node: Node, index: int) -> None:
    """The field types the rest of validation relies on (a Node may be built by any code)."""
    where = f"node #{index} '{node.name}'" if isinstance(node.name, str) else f"node #{index}"
    if not isinstance(node.name, str):
        raise InvalidModelError(f"{where}: name must be a string, got {type(node.name).__name__}")
    if not isinstance(node.op, str):
        raise InvalidModelError(f"{where}: op must be a string, got {node.op!r:.60}")
    for field_name in ("inputs", "outputs"):
        names = getattr(node, field_name)
        if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
            raise InvalidModelError(
                f"{where} ({node.op}): {field_name} must be a list of value names"
            )


def _check_value_type(v: Value, what: str) -> None:
    if v.dtype is not None and (not isinstance(v.dtype, str) or v.dtype not in DTYPES):
        raise InvalidModelError(f"{what} '{v.name}': unsupported dtype {v.dtype!r:.60}")
    if v.shape is not None and not isinstance(v.shape, tuple | list):
        raise InvalidModelError(
            f"{what} '{v.name}': shape must be a sequence of dims, got {v.shape!r:.60}"
        )
    if v.shape is not None:
        for d in v.shape:
            ok = (
                d is None
                or (isinstance(d, str) and d)
                or (isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40)
            )
            if not ok:
                raise InvalidModelError(f"{what} '{v.name}': invalid dimension {d!r} in {v.shape}")


def _unique(base: str, taken: Iterable[str]) -> str:
    taken = set(taken)
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name
