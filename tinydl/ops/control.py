"""Control flow: If, whose condition is decided at run time, Loop and Scan.

Each branch or body is a closed Graph, so every pass sees the dependencies. An If branch's
inputs are the outer values it reads, which the If lists after its condition (input k+1 binds
to branch input k); both branches take the same inputs; the outputs of the branch taken are the
If's. A Loop is ONNX's: inputs (trip count M, condition, N initial values), a body from
(iteration, condition, N values) to (condition, N values, K scan values), outputs the N final
values then the K scan values stacked on a new first axis. The importer makes outer values the
body reads extra loop-carried values that the body passes through unchanged. A Scan is ONNX's
too (opset 9 on): N state values then M scanned inputs; the body maps (N state values, one
slice of each scanned input) to (N state values, K scan values); the outputs are the N final
values then the K scan values stacked along their axes. Outer values become extra state values.
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


def _branch_types(branch: Graph, given: list[TensorType | None]) -> list[TensorType]:
    """What the graph gives when its inputs are of the `given` types (on a copy: the graph's
    own recorded types stay as they are)."""
    from tinydl.ir.graph import Value

    inputs = [
        Value(v.name, *(v.dtype, v.shape) if t is None else (t.dtype, t.shape))
        for v, t in zip(branch.inputs, given, strict=True)
    ]
    outputs = [Value(v.name, v.dtype, v.shape) for v in branch.outputs]
    known = infer_graph(Graph(inputs, outputs, branch.nodes, branch.initializers))
    return [known.get(v.name) or TensorType(v.dtype, v.shape) for v in outputs]


def _common_shape(a, b):
    """The dims two shapes agree on (None elsewhere); None when the ranks differ."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b, strict=True))


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
    given = ctx.inputs[1:]
    for a, b in zip(_branch_types(then, given), _branch_types(other, given), strict=True):
        if a.dtype is not None and b.dtype is not None and a.dtype != b.dtype:
            raise ctx.fail(f"the branches give different dtypes: {a.dtype} and {b.dtype}")
        out.append(TensorType(a.dtype or b.dtype, _common_shape(a.shape, b.shape)))
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


def _loop_counts(body: Graph, inputs: int, outputs: int) -> tuple[int, int]:
    """(N loop-carried values, K scan outputs) of a Loop with these numbers of inputs and
    outputs; ValueError when the body does not fit them."""
    carried = inputs - 2
    scans = len(body.outputs) - 1 - carried
    if carried < 0 or len(body.inputs) != carried + 2 or scans < 0:
        raise ValueError(
            f"the body takes {len(body.inputs)} inputs and gives {len(body.outputs)} outputs; "
            f"with {carried} loop-carried values it must take {carried + 2} and give at least "
            f"{carried + 1}"
        )
    if outputs > carried + scans:
        raise ValueError(f"{outputs} outputs, the body gives only {carried + scans}")
    return carried, scans


def _infer_loop(ctx: InferContext) -> list[TensorType]:
    body = ctx.attrs["body"]
    try:
        carried, _ = _loop_counts(body, len(ctx.inputs), len(ctx.node.outputs))
    except ValueError as exc:
        raise ctx.fail(str(exc)) from None
    if ctx.dtype(0) not in (None, "int64"):
        raise ctx.fail(f"the trip count must be int64, got {ctx.dtype(0)}")
    state = [t or TensorType(None, None) for t in ctx.inputs[2:]]
    head = [TensorType("int64", ()), TensorType("bool", ())]
    # Loop-carried values may change shape from one iteration to the next: keep the dims that
    # survive two passes through the body.
    for _ in range(2):
        outs = _branch_types(body, head + state)
        for i, (t, o) in enumerate(zip(state, outs[1 : 1 + carried], strict=True)):
            if t.dtype is not None and o.dtype is not None and t.dtype != o.dtype:
                raise ctx.fail(
                    f"loop-carried value {i} enters as {t.dtype} and leaves the body as {o.dtype}"
                )
            state[i] = TensorType(t.dtype or o.dtype, _common_shape(t.shape, o.shape))
    scans = [
        TensorType(o.dtype, None if o.shape is None else (None, *o.shape))
        for o in outs[1 + carried :]
    ]
    return state + scans


@op(
    "Loop",
    inputs=(0, 1 << 30),  # the trip count and condition are optional, in place: "" for none
    outputs=(1, 1 << 30),
    types={1: "bool"},
    attrs={"body": Attr("graph")},
    infer=_infer_loop,
)
def loop(trip_count, cond, *initial, body):
    carried, scans = _loop_counts(body, 2 + len(initial), 0)
    for name, x in (("trip count", trip_count), ("condition", cond)):
        if x is not None and np.size(x) != 1:
            raise ValueError(f"the {name} must hold one value, got shape {np.shape(x)}")
    trip = None if trip_count is None else int(np.reshape(trip_count, ()))
    go = True if cond is None else bool(np.reshape(cond, ()))
    state, steps, i = list(initial), [[] for _ in range(scans)], 0
    # onnxruntime and onnx's reference read the body's condition even when the Loop has none.
    while go and (trip is None or i < trip):
        out = run_graph(body, [np.array(i, np.int64), np.array(go), *state])
        go = bool(np.reshape(out[0], ()))
        state = out[1 : 1 + carried]
        for step, value in zip(steps, out[1 + carried :], strict=True):
            step.append(value)
        i += 1
    if scans and not i:
        given = [TensorType("int64", ()), TensorType("bool", ()), *map(_type_of, state)]
        return tuple(state + _empty_scans(body, given, 1 + carried))
    return tuple(state + [np.stack(step) for step in steps])


def _type_of(x: np.ndarray, drop_first: bool = False) -> TensorType:
    from tinydl.ir.dtypes import dtype_name

    return TensorType(dtype_name(x.dtype), tuple(x.shape[1:] if drop_first else x.shape))


def _empty_scans(body: Graph, given: list[TensorType], first: int) -> list[np.ndarray]:
    """The scan outputs (the body's outputs from `first` on) of zero iterations: (0, *what the
    body would give), as onnxruntime gives them; dims inference cannot tell are 0."""
    return [
        np.empty(
            (0, *(d if isinstance(d, int) else 0 for d in t.shape or ())), t.dtype or "float32"
        )
        for t in _branch_types(body, given)[first:]
    ]


def _scan_axes(attrs, count: int, key: str) -> list[int]:
    given = attrs.get(key)
    if given is None:
        return [0] * count
    if len(given) != count:
        raise ValueError(f"{key} has {len(given)} entries for {count} values")
    return list(given)


def _scan_layout(attrs, inputs: int, body: Graph):
    """(state values, scanned inputs, scan outputs, input axes, input directions, output axes,
    output directions) of a Scan; ValueError when the body does not fit."""
    scanned = attrs["num_scan_inputs"]
    state = inputs - scanned
    if not 1 <= scanned <= inputs:
        raise ValueError(f"num_scan_inputs must be 1..{inputs}, got {scanned}")
    if len(body.inputs) != inputs or len(body.outputs) < state:
        raise ValueError(
            f"the body takes {len(body.inputs)} inputs and gives {len(body.outputs)} outputs; "
            f"with {state} state values it must take {inputs} and give at least {state}"
        )
    outs = len(body.outputs) - state
    layout = [
        _scan_axes(attrs, count, key)
        for count, key in (
            (scanned, "scan_input_axes"),
            (scanned, "scan_input_directions"),
            (outs, "scan_output_axes"),
            (outs, "scan_output_directions"),
        )
    ]
    return (state, scanned, outs, *layout)


def _infer_scan(ctx: InferContext) -> list[TensorType]:
    from tinydl.ops.base import normalize_axis

    body = ctx.attrs["body"]
    try:
        state, scanned, _, in_axes, _, out_axes, _ = _scan_layout(ctx.attrs, len(ctx.inputs), body)
    except ValueError as exc:
        raise ctx.fail(str(exc)) from None
    slices, length = [], None
    for k in range(scanned):
        shape = ctx.shape(state + k)
        if shape is None:
            slices.append(TensorType(ctx.dtype(state + k), None))
            continue
        axis = normalize_axis(in_axes[k], len(shape))
        length = shape[axis] if length is None or not isinstance(length, int) else length
        slices.append(TensorType(ctx.dtype(state + k), shape[:axis] + shape[axis + 1 :]))
    states = [t or TensorType(None, None) for t in ctx.inputs[:state]]
    for _ in range(2):  # the dims of a state value that survive two steps
        outs = _branch_types(body, states + slices)
        for i, (t, o) in enumerate(zip(states, outs[:state], strict=True)):
            if t.dtype is not None and o.dtype is not None and t.dtype != o.dtype:
                raise ctx.fail(f"state value {i} enters as {t.dtype} and leaves as {o.dtype}")
            states[i] = TensorType(t.dtype or o.dtype, _common_shape(t.shape, o.shape))
    scans = []
    for o, axis in zip(outs[state:], out_axes, strict=True):
        if o.shape is None:
            scans.append(TensorType(o.dtype, None))
            continue
        axis = normalize_axis(axis, len(o.shape) + 1)
        scans.append(TensorType(o.dtype, (*o.shape[:axis], length, *o.shape[axis:])))
    return states + scans


@op(
    "Scan",
    inputs=(1, 1 << 30),
    outputs=(1, 1 << 30),
    attrs={
        "body": Attr("graph"),
        "num_scan_inputs": Attr("int"),
        "scan_input_axes": Attr("ints", None),
        "scan_input_directions": Attr("ints", None),
        "scan_output_axes": Attr("ints", None),
        "scan_output_directions": Attr("ints", None),
    },
    infer=_infer_scan,
)
def scan(*inputs, body, **attrs):
    state, scanned, _, in_axes, in_dirs, out_axes, out_dirs = _scan_layout(attrs, len(inputs), body)
    xs = [
        np.moveaxis(x, a, 0) if not d else np.flip(np.moveaxis(x, a, 0), 0)
        for x, a, d in zip(inputs[state:], in_axes, in_dirs, strict=True)
    ]
    lengths = {len(x) for x in xs}
    if len(lengths) != 1:
        raise ValueError(f"the scanned inputs have different lengths along their axes: {lengths}")
    values, steps = list(inputs[:state]), []
    for t in range(lengths.pop()):
        out = run_graph(body, [*values, *(x[t] for x in xs)])
        values = out[:state]
        steps.append(out[state:])
    if steps:
        stacked = [np.stack(list(seq)) for seq in zip(*steps, strict=True)]
    else:
        given = [*map(_type_of, values), *(_type_of(x, drop_first=True) for x in xs)]
        stacked = _empty_scans(body, given, state)
    result = []
    for y, axis, direction in zip(stacked, out_axes, out_dirs, strict=True):
        y = np.flip(y, 0) if direction else y
        result.append(np.moveaxis(y, 0, axis % y.ndim))
    return tuple(values + result)
