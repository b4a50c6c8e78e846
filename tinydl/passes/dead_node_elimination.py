"""Dead-node elimination: nodes no graph output depends on, and initializers no node reads."""

from __future__ import annotations

from tinydl.ir.graph import Graph
from tinydl.passes.rewrite import Accepts

NAME = "dead_node_elimination"


def run(graph: Graph, accepts: Accepts | None = None) -> int:
    live = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.toposort()):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    for name in [n for n in graph.initializers if n not in live]:
        del graph.initializers[name]
    return removed
