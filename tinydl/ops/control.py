"""Control flow: If, whose condition is decided at run time.

Each branch is a closed Graph: its inputs are the outer values it reads, which the If lists
after its condition (input k+1 binds to branch input k), so every pass sees the dependencies.
Both branches take the same inputs; the outputs of the branch taken are the If's.
"""

from __future__ import annotations

import numpy as np

from tinydl.ir.graph import Graph
from tinydl.ops.base import REGISTRY, Attr, InferContext, TensorType, infer_graph, op


def run_graph(graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluate `graph` with each node's NumPy reference, its inputs bound by position."""
    env: dict[str, np.ndarray] = dict(graph.initializers)
    env.update((v.name, x) for v, x in zip(graph.inputs, inputs, strict=True))
    for node in graph.nodes:
        args = [env[name] if name else None for name in node.inputs]
        values = REGISTRY[node.op].run(node, args)
        env.update((n, np.asarray(v)) for n, v in zip(node.outputs, values, strict=False) if n)
    return [env[v.name] for v in graph.outputs]


def _branch_types(branch: Graph, ctx: InferContext) -> list[TensorType]:
    """What the branch gives when its inputs are what the If is given (on a copy: the branch's
    own recorded types stay as they are)."""
    from tinydl.ir.graph import Value

    inputs = [
        Value(v.name, *(v.dtype, v.shape) if t is None else (t.dtype, t.shape))
        for v, t in zip(branch.inputs, ctx.inputs[1:], strict=True)
    ]
    outputs = [Value(v.name, v.dtype, v.shape) for v in branch.outputs]
    known = infer_graph(Graph(inputs, outputs, branch.nodes, branch.initializers))
    return [known.get(v.name) or TensorType(v.dtype, v.shape) for v in outputs]


def _infer_if(ctx: InferContext) -> list[TensorType]:
    then, other = ctx.attrs["then_branch"], ctx.attrs["else_branch"]
    for key, branch in (("then_branch", then), ("else_branch", other)):
        if len(branch.inputs) != len(ctx.inputs) - 1:
            raise ctx.fail(
                f"{key} takes {len(branch.inputs)} inputs, the If gives {len(ctx.inputs) - 1}"
            )
        if len(branch.outputs) != len(ctx.node.outputs):
            raise ctx.fail(
                f"{key} has {len(branch.outputs)} outputs, the If {len(ctx.node.outputs)}"
            )
    out = []
    for a, b in zip(_branch_types(then, ctx), _branch_types(other, ctx), strict=True):
        if a.dtype is not None and b.dtype is not None and a.dtype != b.dtype:
            raise ctx.fail(f"the branches give different dtypes: {a.dtype} and {b.dtype}")
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True))
        out.append(TensorType(a.dtype or b.dtype, shape))
    return out


@op(
    "If",
    types="bool",
    inputs=(1, 1 << 30),
    outputs=(1, 1 << 30),
    attrs={"then_branch": Attr("graph"), "else_branch": Attr("graph")},
    infer=_infer_if,
)
def if_(cond, *captured, then_branch, else_branch):
    if np.size(cond) != 1:
        raise ValueError(f"the condition must hold one value, got shape {np.shape(cond)}")
    branch = then_branch if bool(np.reshape(cond, ())) else else_branch
    return tuple(run_graph(branch, list(captured)))
