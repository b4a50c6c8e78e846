"""Assign nodes to backends and cut the graph into partitions, one compiled Kernel each.

Each node goes to the first backend in the user's priority order whose `supports` says yes;
every refusal is kept with its reason. Consecutive nodes (in topological order) on one backend
form a partition, which can never create a cycle between partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinydl.backends.base import Backend
from tinydl.errors import UnsupportedOpError
from tinydl.ir.graph import Graph, Node


@dataclass
class Partition:
    backend: str
    nodes: list[Node]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def subgraph(self, graph: Graph) -> Graph:
        used = {i for n in self.nodes for i in n.inputs if i}
        return Graph(
            inputs=[_typed(graph, name) for name in self.inputs],
            outputs=[_typed(graph, name) for name in self.outputs],
            nodes=self.nodes,
            initializers={k: v for k, v in graph.initializers.items() if k in used},
            metadata=graph.metadata,
            name=f"{graph.name}:{self.backend}",
        )


def _typed(graph: Graph, name: str):
    from tinydl.ir.graph import Value

    v = graph.value(name)
    return Value(name, v.dtype, v.shape) if v is not None else Value(name)


@dataclass
class Placement:
    """Where each node runs and why it does not run on a backend the user preferred."""

    backends: list[str]
    nodes: dict[str, str]
    ops: dict[str, str]
    refusals: dict[str, dict[str, str]]
    partitions: list[Partition]

    def __getitem__(self, node_name: str) -> str:
        return self.nodes[node_name]

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
        lines = [f"{'node':40} {'op':22} {'backend':8} refused by"]
        for name, backend in self.nodes.items():
            why = "; ".join(f"{b}: {r}" for b, r in self.refusals.get(name, {}).items())
            lines.append(f"{name[:40]:40} {self.ops[name][:22]:22} {backend:8} {why}")
        return "\n".join(lines)


def partition(graph: Graph, backends: list[Backend]) -> Placement:
    nodes: dict[str, str] = {}
    refusals: dict[str, dict[str, str]] = {}
    unplaced: list[str] = []
    for node in graph.nodes:
        refused: dict[str, str] = {}
        for backend in backends:
            answer = backend.supports(node, graph)
            if answer.ok:
                nodes[node.name] = backend.name
                break
            refused[backend.name] = answer.reason or "not supported"
        else:
            unplaced.append(f"{node.name} ({node.op}): " + "; ".join(f"{b}: {r}" for b, r in refused.items()))
        if refused:
            refusals[node.name] = refused
    if unplaced:
        raise UnsupportedOpError("no requested backend can run these nodes:\n  " + "\n  ".join(unplaced))

    parts: list[Partition] = []
    for node in graph.nodes:
        if parts and parts[-1].backend == nodes[node.name]:
            parts[-1].nodes.append(node)
        else:
            parts.append(Partition(nodes[node.name], [node]))
    graph_outputs = [v.name for v in graph.outputs]
    for k, part in enumerate(parts):
        produced = {o for n in part.nodes for o in n.outputs if o}
        needed_later = {i for p in parts[k + 1:] for n in p.nodes for i in n.inputs}
        part.inputs = list(dict.fromkeys(
            i for n in part.nodes for i in n.inputs
            if i and i not in produced and i not in graph.initializers
        ))
        part.outputs = [o for o in dict.fromkeys(o for n in part.nodes for o in n.outputs if o)
                        if o in needed_later or o in graph_outputs]
    return Placement(
        backends=[b.name for b in backends],
        nodes=nodes,
        ops={n.name: n.op for n in graph.nodes},
        refusals=refusals,
        partitions=parts,
    )
