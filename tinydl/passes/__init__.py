"""Graph optimizer: rewrite passes, one file each, run by a pass manager at named levels.

    from tinydl.passes import optimize
    fast = optimize(graph, level="all")      # a new Graph; `graph` is left as it was

Levels: "none" (no pass), "basic" (constant folding, identity removal, dead-node elimination:
changes no arithmetic) and "all" (also BatchNormalization, Mul/Add and Pad folding into
convolutions, activation patterns and Conv+activation fusion: the same math, rounded
differently within fp32 tolerance). Each pass is `run(graph, accepts=None) -> rewrites`, edits
the graph in place, is idempotent and leaves a valid graph; the manager works on a copy, and
repeats the level's passes until none rewrites anything.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tinydl.errors import InvalidInputError
from tinydl.ir.graph import Graph, Node
from tinydl.ops import validate

if TYPE_CHECKING:
    from tinydl.passes.rewrite import Accepts

Pass = Callable[[Graph, "Accepts | None"], int]

# In the order a level runs them: activation patterns are recognized before affine folding can
# take their final `/ 6` into the next convolution, and fusion comes after all folding, when
# Conv -> activation pairs are adjacent. Each is the module of that name in this package,
# imported when a pass first runs (a start that reads a kept session back runs none).
NAMES = (
    "constant_folding",
    "identity_removal",
    "activation_patterns",
    "batch_norm_folding",
    "affine_folding",
    "pad_folding",
    "conv_activation_fusion",
    "dead_node_elimination",
)

LEVELS: dict[str, tuple[str, ...]] = {
    "none": (),
    "basic": ("constant_folding", "identity_removal", "dead_node_elimination"),
    "all": NAMES,
}


@functools.cache
def _passes() -> dict[str, Pass]:
    import importlib

    modules = [importlib.import_module(f"{__name__}.{name}") for name in NAMES]
    assert [m.NAME for m in modules] == list(NAMES)
    return {m.NAME: m.run for m in modules}


def __getattr__(name: str):
    if name == "PASSES":  # name -> run(graph, accepts=None) -> rewrites
        return _passes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Rounds of the whole level before giving up on reaching a fixed point (each pass is itself one).
MAX_ROUNDS = 8


@dataclass
class PassReport:
    """What a PassManager run did: node counts before and after, rewrites per pass, seconds."""

    level: str
    nodes_before: int = 0
    nodes_after: int = 0
    rewrites: dict[str, int] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0


class PassManager:
    """Runs a level's passes (or a list of pass names) over a copy of a graph to a fixed point.

    `accepts` (see rewrite.Accepts) lets the caller refuse rewrites that would introduce an op
    the backend meant to run the pattern cannot run.
    """

    def __init__(self, level: str | Sequence[str] = "all", accepts: Accepts | None = None):
        if isinstance(level, str):
            if level not in LEVELS:
                raise InvalidInputError(
                    f"optimize level must be one of {', '.join(LEVELS)}, got {level!r}"
                )
            names, label = LEVELS[level], level
        else:
            unknown = [n for n in level if n not in NAMES]
            if unknown:
                raise InvalidInputError(
                    f"unknown pass(es) {unknown}: expected names from {list(NAMES)}"
                )
            names, label = tuple(level), ",".join(level)
        passes = _passes() if names else {}
        self.passes = [(name, passes[name]) for name in names]
        self.accepts = accepts
        self.report = PassReport(label)

    def run(self, graph: Graph) -> Graph:
        start = time.perf_counter()
        report = self.report = PassReport(self.report.level, nodes_before=len(graph.nodes))
        if self.passes:
            graph = revalidate(copy_graph(graph))
            for rounds in range(1, MAX_ROUNDS + 1):
                report.rounds = rounds
                changed = 0
                for name, run_pass in self.passes:
                    count = run_pass(graph, self.accepts)
                    if count:
                        revalidate(graph)
                        report.rewrites[name] = report.rewrites.get(name, 0) + count
                        changed += count
                if not changed:
                    break
        report.nodes_after = len(graph.nodes)
        report.seconds = time.perf_counter() - start
        return graph


def optimize(
    graph: Graph, level: str | Sequence[str] = "all", accepts: Accepts | None = None
) -> Graph:
    """A new, optimized Graph; the given one is not modified."""
    return PassManager(level, accepts).run(graph)


def revalidate(graph: Graph) -> Graph:
    """Order and re-type a rewritten graph (dropping the types of values that are gone)."""
    graph.values = {}
    return validate(graph)


def copy_graph(graph: Graph) -> Graph:
    """A copy that passes may edit: new nodes, attribute lists and value records; the weight
    arrays are shared (passes never write into an array, they add new initializers)."""
    return Graph(
        inputs=[replace(v) for v in graph.inputs],
        outputs=[replace(v) for v in graph.outputs],
        nodes=[
            Node(
                n.op,
                list(n.inputs),
                list(n.outputs),
                {k: list(v) if isinstance(v, list) else v for k, v in n.attrs.items()},
                n.name,
                dict(n.meta),
            )
            for n in graph.nodes
        ],
        initializers=dict(graph.initializers),
        values={k: replace(v) for k, v in graph.values.items()},
        metadata=dict(graph.metadata),
        name=graph.name,
    )


__all__ = ["LEVELS", "NAMES", "PASSES", "PassManager", "PassReport", "copy_graph", "optimize"]
