"""Fuse Conv/ConvTranspose with what follows it into one kernel: BatchNormalization (folded into
the weights), a chain of activations, and a DepthToSpace (pixel shuffle) written by the conv's
own store; likewise residual Adds, elementwise runs and attention (`fuse_attention`). Runs on a
partition's nodes when a plan is made; the graph itself is not changed.

The fused node keeps the conv's op and inputs, takes the last output of the chain, and carries
`meta["bn"]` (scale, shift per output channel), `meta["epilogue"]` (activations in order) and
`meta["d2s"]` (blocksize, mode).

An activation in an epilogue or an elementwise run is (name, parameters): a name of
tinydl.ops.activation.ACTIVATIONS and that activation's parameters (PRelu: `slope`, per output
channel). Each GPU backend turns one into code with `render_activation` and its own snippet table
(the WGSL or CUDA C per name), which it checks at import against ACTIVATIONS.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping

import numpy as np

from tinydl.ir.graph import Graph, Node
from tinydl.ops.activation import ACTIVATION_OPS, ACTIVATIONS, activation_params
from tinydl.ops.fused import FUSED_CONV, NO_ACTIVATION
from tinydl.ops.resize import _pad_widths

CONV_OPS = ("Conv", "ConvTranspose", FUSED_CONV)


def per_channel(graph: Graph, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """A constant that broadcasts per channel (axis 1) over `shape`, as a (C,) vector."""
    arr = graph.initializers.get(name)
    if arr is None or arr.ndim > len(shape):
        return None
    channels = shape[1]
    if arr.size == 1:
        return np.full(channels, float(arr.reshape(())), np.float32)
    full = (1,) * (len(shape) - arr.ndim) + arr.shape
    if full[1] == channels and all(d == 1 for i, d in enumerate(full) if i != 1):
        return arr.reshape(channels).astype(np.float32)
    return None


def activation_of(node: Node, graph: Graph, shape: tuple[int, ...]) -> tuple[str, dict] | None:
    """The epilogue form of an activation node, or None when it cannot be fused."""
    if node.op not in ACTIVATION_OPS:
        return None
    params = activation_params(node, graph.initializers.get)
    if params is None:
        return None
    if ACTIVATIONS[node.op].slope:
        slope = per_channel(graph, node.inputs[1], shape)
        if slope is None:
            return None
        params["slope"] = slope
    return node.op, params


def activation_supports(node: Node, graph: Graph):
    """A GPU backend's answer for an activation node's scalar inputs (Clip's bounds): constant
    scalars, which the kernel bakes in."""
    from tinydl.backends.base import Support

    if activation_params(node, graph.initializers.get) is None:
        return Support(False, f"{node.op} with non-constant bounds is not implemented")
    return Support(True)


def activation_operands(node: Node, const) -> tuple[dict, bool]:
    """An activation node's parameters for render_activation in an elementwise kernel, and
    whether the kernel must pass input 1 (PRelu's slope) as its operand `a1`, the expression
    the parameters give as the slope."""
    params = dict(activation_params(node, const) or {})
    slope = ACTIVATIONS[node.op].slope
    if slope:
        params["slope"] = "a1"
    return params, slope


def render_activation(
    snippets: Mapping[str, str | tuple[str, ...]],
    kind: str,
    x: str,
    params: Mapping,
    literal: Callable[[float], str],
    **extra: str,
) -> str:
    """A backend's code for activation `kind` applied to expression `x`. `snippets[kind]` is a
    format string over {x}, the activation's parameters (numbers written with `literal`, an
    absent one None; PRelu's `slope` is an expression, used as it is) and `extra`; or a tuple of
    such strings applied in turn, each skipped when a parameter it names is None (Clip's
    absent bound)."""
    act = ACTIVATIONS[kind]
    args: dict = {k: None if v is None else literal(v) for k, v in act.resolve(params).items()}
    if act.slope:
        args["slope"] = params["slope"]
    snippet = snippets[kind]
    for part in (snippet,) if isinstance(snippet, str) else snippet:
        fields = {f for _, f, _, _ in string.Formatter().parse(part) if f}
        if any(f in args and args[f] is None for f in fields):
            continue
        x = part.format(x=x, **args, **extra)
    return x


def epilogue_code(acts, code: Callable[[str, str, Mapping], str]) -> list[str]:
    """An epilogue's activations as code over `r` (code(kind, x, params) is the backend's), a
    PRelu's slope read from the variable `slope`."""
    return [code(k, "r", {"slope": "slope"} if ACTIVATIONS[k].slope else p) for k, p in acts]


def fuse(graph: Graph, keep: set[str], shape_of, d2s_ok) -> list[Node]:
    """The graph's nodes with conv chains fused. `keep`: values that must stay visible
    (partition outputs); `shape_of(value)`: a value's concrete shape; `d2s_ok(node)`: whether
    the conv's kernel can store through a DepthToSpace."""
    consumers = graph.consumers()
    nodes = list(graph.nodes)
    index = {id(n): i for i, n in enumerate(nodes)}
    dropped: set[int] = set()
    out: dict[int, Node] = {}

    def single_consumer(value: str) -> Node | None:
        users = consumers.get(value, [])
        if value in keep or len(users) != 1:
            return None
        return users[0]

    for node in nodes:
        if node.op not in CONV_OPS or id(node) in dropped:
            continue
        value = node.outputs[0]
        shape = shape_of(value)
        meta: dict = {"epilogue": []}
        label = [node.op]
        nxt = single_consumer(value)
        fused_act = node.attrs.get("activation") if node.op == FUSED_CONV else NO_ACTIVATION
        plain = fused_act == NO_ACTIVATION
        # An epilogue has one slope (channels) buffer: one PRelu at most.
        slopes = int(fused_act in ACTIVATIONS and ACTIVATIONS[fused_act].slope)
        if (
            plain
            and nxt is not None
            and nxt.op == "BatchNormalization"
            and nxt.inputs[0] == value
            and not nxt.attrs.get("training_mode", 0)
        ):
            params = [graph.initializers.get(n) for n in nxt.inputs[1:5]]
            if all(p is not None for p in params) and len(nxt.outputs) == 1:
                scale, bias, mean, var = (p.astype(np.float64) for p in params)
                k = scale / np.sqrt(var + nxt.attrs["epsilon"])
                meta["bn"] = (k, bias - mean * k)
                dropped.add(id(nxt))
                label.append("BatchNormalization")
                value = nxt.outputs[0]
                nxt = single_consumer(value)
        while value not in keep:
            users = consumers.get(value, [])
            mul = _silu(users, value, consumers, keep)
            if mul is not None:
                dropped.update(id(u) for u in users)
                meta["epilogue"].append(("SiLU", {}))
                label.append("SiLU")
                value = mul.outputs[0]
                continue
            act = None
            if len(users) == 1 and users[0].inputs[0] == value:
                act = activation_of(users[0], graph, shape)
            if act is None or (slopes and ACTIVATIONS[act[0]].slope):
                break
            slopes += ACTIVATIONS[act[0]].slope
            dropped.add(id(users[0]))
            meta["epilogue"].append(act)
            label.append(users[0].op)
            value = users[0].outputs[0]
        nxt = single_consumer(value)
        if nxt is not None and nxt.op == "DepthToSpace" and d2s_ok(node):
            meta["d2s"] = (nxt.attrs["blocksize"], nxt.attrs["mode"])
            dropped.add(id(nxt))
            label.append("DepthToSpace")
            value = nxt.outputs[0]
        if len(label) == 1:
            continue
        out[index[id(node)]] = Node(
            node.op,
            list(node.inputs),
            [value],
            dict(node.attrs),
            name=node.name,
            meta={**node.meta, **meta, "label": "+".join(label)},
        )
    return [out.get(i, n) for i, n in enumerate(nodes) if id(n) not in dropped]


def fuse_residuals(
    nodes: list[Node],
    keep: set[str],
    shape_of,
    graph,
    ok: Callable[[Node], bool] | None = None,
    slopes: bool = False,
    hoist: bool = False,
    pads: bool = False,
    pools: bool = False,
) -> list[Node]:
    """Fold `Add(conv_out, r)` into the convolution's epilogue when r has the output's exact
    shape and is computed before the convolution runs, and the activation after the Add (if
    one alone reads it) too: ResNet/MobileNet residual blocks become one kernel. `ok(conv)`:
    whether the backend's kernel for that convolution has the residual epilogue; `slopes`:
    whether it takes a PRelu after the Add (BlazeFace/BlazePalm blocks), when the
    convolution's own epilogue has none (one slope per kernel); `hoist`: whether r's cheap
    producers (a shortcut's Pad or MaxPool) listed after the convolution may move before it;
    `pads`: whether r may be a zero Pad that only adds channels at the end (BlazeFace's shortcut
    where a block widens), read unpadded by the kernel, which adds nothing past its channels;
    `pools`: whether r (or the value so padded) may be a k x k MaxPool of stride k (the
    shortcut of a stride-2 block), read through the pool by the kernel (`meta["res_pool"]`)."""
    producer_at = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    users = _readers(nodes)
    out: list[Node] = []
    dropped: set[int] = set()
    for i, node in enumerate(nodes):
        if id(node) in dropped:
            continue
        out.append(node)
        conv = node.op in ("Conv", FUSED_CONV)
        if not conv or "d2s" in node.meta or "residual" in node.meta:
            continue
        if ok is not None and not ok(node):
            continue
        y = node.outputs[0]
        us = users.get(y, [])
        if y in keep or len(us) != 1 or us[0].op != "Add" or us[0].inputs[0] == us[0].inputs[1]:
            continue
        add = us[0]
        other = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        shape = shape_of(y)
        # A shortcut's Pad, then its MaxPool, that the Add alone reads through: they go, and
        # the kernel reads their input.
        pad = _sole_producer(other, add, nodes, producer_at, users) if pads else None
        if pad is not None and channel_pad(pad, graph, shape_of):
            other = pad.inputs[0]
        else:
            pad = None
        pool = _sole_producer(other, pad or add, nodes, producer_at, users) if pools else None
        if pool is not None and _plain_pool(pool):
            k, other = pool.attrs["kernel_shape"][0], pool.inputs[0]
        else:
            k, pool = 1, None
        if shape_of(add.outputs[0]) != shape or other in graph.initializers:
            continue
        r = shape_of(other)
        if len(r) != len(shape) or r[0] != shape[0] or (r[1] != shape[1] and pad is None):
            continue
        if r[1] > shape[1] or any(a // k != b for a, b in zip(r[2:], shape[2:], strict=True)):
            continue
        if pool is None and r[2:] != shape[2:]:
            continue
        late = producer_at.get(other, -1) >= i
        moved = _hoist(other, i, nodes, producer_at, graph) if late and hoist else []
        if late and not moved:
            continue
        # r's producers (a shortcut's Pad or MaxPool, listed after the conv) move before it.
        out[-1:-1] = [nodes[j] for j in moved]
        dropped.update(id(nodes[j]) for j in moved)
        for gone in (pad, pool):
            if gone is not None:
                dropped.add(id(gone))
                out = [n for n in out if n is not gone]
        meta = {**node.meta, "residual": other, "post": []}
        if pool is not None:
            meta["res_pool"] = k
        value, label = add.outputs[0], [node.meta.get("label", node.op), "Add"]
        dropped.add(id(add))
        after = users.get(value, [])
        if value not in keep and len(after) == 1 and after[0].inputs[0] == value:
            act = activation_of(after[0], graph, shape)
            sloped = act is not None and ACTIVATIONS[act[0]].slope
            if act is not None and (not sloped or (slopes and not _has_slope(node))):
                meta["post"] = [act]
                dropped.add(id(after[0]))
                label.append(after[0].op)
                value = after[0].outputs[0]
        meta["label"] = "+".join(label)
        out[-1] = Node(
            node.op, list(node.inputs), [value], dict(node.attrs), name=node.name, meta=meta
        )
    return out


def depthwise(node: Node, shape_of) -> bool:
    """Whether a node is a 2-D depthwise convolution (one input channel per group, one output
    channel per input channel) whose epilogue has no PRelu and no residual or pixel shuffle."""
    if node.op not in ("Conv", FUSED_CONV) or "d2s" in node.meta or "residual" in node.meta:
        return False
    shape = shape_of(node.inputs[0])
    return (
        len(shape) == 4
        and node.attrs.get("group", 1) == shape[1] > 1
        and shape_of(node.outputs[0])[1] == shape[1]
        and not _has_slope(node)
    )


def pointwise(node: Node, graph) -> bool:
    """Whether a node is a 1x1 convolution, stride 1, no padding, one group."""
    if node.op not in ("Conv", FUSED_CONV):
        return False
    w = graph.initializers.get(node.inputs[1])
    if w is None or w.shape[2:] != (1, 1):
        return False
    a = node.attrs
    return (
        a.get("group", 1) == 1
        and all(s == 1 for s in a.get("strides") or [1])
        and all(p == 0 for p in a.get("pads") or [0])
        and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
    )


def fuse_depthwise(
    nodes: list[Node], keep: set[str], shape_of, graph, ok: Callable[[Node, Node], bool]
) -> list[Node]:
    """Fold a depthwise convolution (its BatchNormalization and activations with it) into the
    1x1 convolution that alone reads it: the 1x1's kernel computes the depthwise output as it
    stages its input tile, so the intermediate is never stored. The fused node reads the
    depthwise convolution's input and carries it as `meta["dw"]` (MobileNet and BlazeFace
    blocks: two kernels become one). `ok(pointwise, depthwise)`: whether the backend's kernel
    takes the pair."""
    users = _readers(nodes)
    producer = {o: n for n in nodes for o in n.outputs if o}
    fused: dict[int, Node] = {}
    dropped: set[int] = set()
    for node in nodes:
        if not pointwise(node, graph) or "dw" in node.meta:
            continue
        dw = producer.get(node.inputs[0])
        if dw is None or id(dw) in dropped or not depthwise(dw, shape_of):
            continue
        v, us = dw.outputs[0], users.get(dw.outputs[0], [])
        if v in keep or len(us) != 1 or us[0] is not node or not ok(node, dw):
            continue
        dropped.add(id(dw))
        label = ["Depthwise" + conv_label(dw), conv_label(node)]
        fused[id(node)] = Node(
            node.op,
            [dw.inputs[0], *node.inputs[1:]],
            list(node.outputs),
            dict(node.attrs),
            name=node.name,
            meta={**node.meta, "dw": dw, "dw_shape": tuple(shape_of(v)), "label": "+".join(label)},
        )
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


def fuse_depthwise_after(
    nodes: list[Node], keep: set[str], shape_of, graph, ok: Callable[[Node, Node], bool]
) -> list[Node]:
    """Fold a depthwise convolution (its BatchNormalization and activations with it) into the
    convolution that makes its input, where that convolution's kernel keeps a whole image of
    its block of channels in one workgroup: the epilogue leaves the block's output in workgroup
    memory and the workgroup computes the depthwise convolution of those channels from it, so
    nothing is computed twice (the small images of a mobile net's deep end, where
    fuse_depthwise's recompute costs more than it saves). The fused node reads the producer's
    inputs and makes [its output, the depthwise output], or the depthwise output alone where
    nothing else reads the producer's (an inverted residual's expansion); `meta["dw_after"]`
    is the depthwise node, `meta["dw_y"]` the producer's output. `ok(producer, depthwise)`:
    whether the backend's kernel takes the pair."""
    users = _readers(nodes)
    shortcuts = {n.meta["residual"] for n in nodes if "residual" in n.meta}  # read in epilogues
    producer = {o: n for n in nodes for o in n.outputs if o}
    fused: dict[int, Node] = {}
    dropped: set[int] = set()
    for node in nodes:
        if not depthwise(node, shape_of) or {"dw", "nhwc", "nhwc_in"} & set(node.meta):
            continue
        y = node.inputs[0]
        p = producer.get(y)
        if p is None or p.op not in ("Conv", FUSED_CONV) or id(p) in fused or id(p) in dropped:
            continue
        if len(p.outputs) != 1 or {"d2s", "nhwc", "dw_after"} & set(p.meta) or not ok(p, node):
            continue
        store_y = y in keep or y in shortcuts or any(u is not node for u in users.get(y, []))
        dropped.add(id(node))
        label = f"{p.meta.get('label', p.op)}+Depthwise{conv_label(node)}"
        fused[id(p)] = Node(
            p.op, list(p.inputs), [y, node.outputs[0]] if store_y else [node.outputs[0]],
            dict(p.attrs), name=p.name,
            meta={
                **p.meta, "dw_after": node, "dw_y": y, "dw_y_shape": tuple(shape_of(y)),
                "label": label,
            },
        )  # fmt: skip
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


def fuse_channels_last(nodes: list[Node], keep: set[str], shape_of, ok) -> list[Node]:
    """Fold the Transposes between channels-last and NCHW into convolutions: one to
    channels-last (perm 0, 2, 3, 1) that alone reads a convolution's output, which the
    convolution then stores NHWC (`meta["nhwc"]`; the heads of models converted from
    TensorFlow, as MediaPipe's, transpose every output so), and one from channels-last (perm 0,
    3, 1, 2) that only a convolution reads, which then reads the NHWC value (`meta["nhwc_in"]`;
    such models' input). `ok(conv)`: whether the backend's kernel for that convolution can."""
    users = _readers(nodes)
    producer = {o: n for n in nodes for o in n.outputs if o}
    fused: dict[int, Node] = {}
    dropped: set[int] = set()
    for node in nodes:
        if node.op not in ("Conv", FUSED_CONV) or {"dw", "nhwc_in"} & set(node.meta):
            continue
        t = producer.get(node.inputs[0])
        if t is None or t.op != "Transpose" or list(t.attrs.get("perm") or []) != [0, 3, 1, 2]:
            continue
        readers = users.get(t.outputs[0], [])
        if t.outputs[0] in keep or len(readers) != 1 or not ok(node):
            continue
        dropped.add(id(t))
        fused[id(node)] = Node(
            node.op, [t.inputs[0], *node.inputs[1:]], list(node.outputs), dict(node.attrs),
            name=node.name, meta={**node.meta, "nhwc_in": True},
        )  # fmt: skip
    nodes = [fused.get(id(n), n) for n in nodes if id(n) not in dropped]
    users = _readers(nodes)
    fused, dropped = {}, set()
    for node in nodes:
        if node.op not in ("Conv", FUSED_CONV) or {"d2s", "nhwc"} & set(node.meta):
            continue
        y = node.outputs[0]
        us = users.get(y, [])
        if y in keep or len(us) != 1 or us[0].op != "Transpose" or len(shape_of(y)) != 4:
            continue
        if list(us[0].attrs.get("perm") or []) != [0, 2, 3, 1] or not ok(node):
            continue
        dropped.add(id(us[0]))
        meta = {**node.meta, "nhwc": True, "label": f"{node.meta.get('label', node.op)}+Transpose"}
        fused[id(node)] = Node(
            node.op, list(node.inputs), list(us[0].outputs), dict(node.attrs), name=node.name,
            meta=meta,
        )  # fmt: skip
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


def _sole_producer(value: str, reader: Node, nodes, producer_at, users) -> Node | None:
    """The node making `value` when `reader` is the value's only reader."""
    at, readers = producer_at.get(value), users.get(value, [])
    if at is None or len(readers) != 1 or readers[0] is not reader:
        return None
    return nodes[at]


def _plain_pool(node: Node) -> bool:
    """Whether a node is a 2-D k x k MaxPool of stride k: no padding, dilation or ceil mode,
    one output."""
    a = node.attrs
    k = a.get("kernel_shape") or []
    return (
        node.op == "MaxPool"
        and len(k) == 2
        and k[0] == k[1] > 1
        and list(a.get("strides") or [1, 1]) == list(k)
        and not any(a.get("pads") or [])
        and all(d == 1 for d in a.get("dilations") or [1])
        and not a.get("ceil_mode", 0)
        and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
        and len([o for o in node.outputs if o]) == 1
    )


def channel_pad(node: Node, graph, shape_of) -> bool:
    """Whether a node is a constant zero Pad that only adds channels after the last (axis 1 of
    a 4-D value)."""
    if node.op != "Pad" or node.attrs["mode"] != "constant" or len(shape_of(node.inputs[0])) != 4:
        return False
    names = [*node.inputs[1:], "", ""][:3]  # pads, constant value, axes
    pads, fill, axes = (graph.initializers.get(n) if n else None for n in names)
    if pads is None or any(n and v is None for n, v in zip(names[1:], (fill, axes), strict=True)):
        return False
    if fill is not None and np.any(fill != 0):
        return False
    widths = _pad_widths(4, pads, axes)
    return widths[1][0] == 0 < widths[1][1] and all(w == (0, 0) for w in widths[:1] + widths[2:])


HOISTED_OPS = frozenset({"Pad", "MaxPool", "AveragePool", "Relu", "Clip", "Identity"})


def _hoist(value: str, before: int, nodes: list[Node], producer_at, graph, depth: int = 3):
    """The indices, in order, of the nodes after position `before` that make `value` from
    values made before it (cheap shortcut ops, at most `depth` deep), so that they can run
    first; None when `value` needs something made at or after `before` otherwise."""
    j = producer_at.get(value, -1)
    if j < before:
        return []
    node = nodes[j]
    if depth == 0 or node.op not in HOISTED_OPS or len(node.outputs) != 1:
        return None
    order: list[int] = []
    for name in node.inputs:
        if not name or name in graph.initializers:
            continue
        sub = _hoist(name, before, nodes, producer_at, graph, depth - 1)
        if sub is None:
            return None
        order += [k for k in sub if k not in order]
    return [*order, j]


def _has_slope(conv: Node) -> bool:
    """Whether a convolution's own epilogue already has a PRelu."""
    own = conv.attrs.get("activation") if conv.op == FUSED_CONV else NO_ACTIVATION
    acts = [own, *(k for k, _ in conv.meta.get("epilogue", []))]
    return any(ACTIVATIONS[k].slope for k in acts if k in ACTIVATIONS)


def fuse_runs(nodes: list[Node], keep: set[str], length: int, first, links, make) -> list[Node]:
    """Replace runs of `length` nodes, each the only reader (through its input 0) of the one
    before and none a kept output but the last, that start at a node `first` accepts and for
    which `links(run)` returns something, with `make(run, what links returned)`: a backend's
    multi-node kernel (cuda's conv chain) says what it can run, this finds the runs."""
    users = _readers(nodes)

    def only_user(node: Node) -> Node | None:
        out = node.outputs[0]
        us = users.get(out, [])
        if out in keep or len(us) != 1 or us[0].inputs[0] != out:
            return None
        return us[0]

    out, skip = [], set()
    for node in nodes:
        if id(node) in skip:
            continue
        run = [node] if first(node) else []
        while run and len(run) < length:
            nxt = only_user(run[-1])
            run = run + [nxt] if nxt is not None else []
        found = links(run) if run else None
        if found:
            skip.update(id(n) for n in run[1:])
            out.append(make(run, found))
        else:
            out.append(node)
    return out


def _silu(users: list[Node], value: str, consumers, keep: set[str]) -> Node | None:
    """x -> Sigmoid -> Mul(x, sigmoid(x)): the Mul, when `value`'s two users are that pattern."""
    if len(users) != 2:
        return None
    sig = next((u for u in users if u.op == "Sigmoid" and u.inputs[0] == value), None)
    if sig is None or sig.outputs[0] in keep:
        return None
    s = sig.outputs[0]
    s_users = consumers.get(s, [])
    mul = next((u for u in users if u is not sig), None)
    if len(s_users) != 1 or s_users[0] is not mul or mul.op != "Mul":
        return None
    return mul if sorted(mul.inputs) == sorted([value, s]) else None


def conv_label(node: Node) -> str:
    """Conv+Tanh+DepthToSpace: the ops a fused conv node stands for."""
    if "dw" in node.meta:  # fuse_depthwise wrote the whole label
        return node.meta["label"]
    parts = ["ConvTranspose" if node.op == "ConvTranspose" else "Conv"]
    if node.op == FUSED_CONV and node.attrs["activation"] != NO_ACTIVATION:
        parts.append(node.attrs["activation"])
    parts += node.meta.get("label", node.op).split("+")[1:]
    return "+".join(["Transpose", *parts] if "nhwc_in" in node.meta else parts)


def epilogue(b, channels: int) -> tuple[list, np.ndarray | None]:
    """A conv node's activations in order (its FusedConv activation, then the fused chain of
    meta["epilogue"]), and a per-channel PRelu slope (or None). `b` is a backend's Build."""
    acts = []
    name = b.attrs["activation"] if b.node.op == FUSED_CONV else NO_ACTIVATION
    if name != NO_ACTIVATION:
        params = ACTIVATIONS[name].resolve(b.attrs)
        if ACTIVATIONS[name].slope:
            params["slope"] = per_channel(b.plan.graph, b.inputs[3], b.out().shape)
            if params["slope"] is None:
                raise ValueError(f"{b.label}: PRelu slope must be per channel")
        acts.append((name, params))
    acts += b.node.meta.get("epilogue", [])
    # The per-channel buffer holds one slope: the epilogue's, or a PRelu after a fused residual.
    slopes = [p["slope"] for k, p in acts + b.node.meta.get("post", []) if ACTIVATIONS[k].slope]
    if len(slopes) > 1:
        raise ValueError(f"{b.label}: at most one PRelu can be fused")
    return acts, (np.broadcast_to(slopes[0], (channels,)) if slopes else None)


def weights_and_bias(b, out_axis: int, as_given: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Weights with BatchNormalization folded in, and the bias, in float64. `as_given`: weights
    with no BatchNormalization to fold come back as they are (a caller that packs them into
    float32 skips the float64 copy: ResNet-18's 45 MB, 47 ms of its webgpu planning on the
    2-core VM)."""
    bn = b.node.meta.get("bn")
    w = b.const(1)
    if not (as_given and bn is None):
        w = w.astype(np.float64)
    oc = w.shape[0] if out_axis == 0 else b.out().shape[1]
    bias = b.const(2).astype(np.float64) if b.has(2) else np.zeros(oc)
    if bn is not None:
        k, shift = bn
        if out_axis == 0:
            w = w * k.reshape(-1, *[1] * (w.ndim - 1))
        else:
            g = b.attrs["group"]
            cg, mg = w.shape[0] // g, w.shape[1]
            w = (
                w.reshape(g, cg, mg, *w.shape[2:]) * k.reshape(g, 1, mg, *[1] * (w.ndim - 2))
            ).reshape(w.shape)
        bias = bias * k + shift
    return w, bias


def as_2d(shape):
    """A 1-D convolution's (N, C, W) shape as (N, C, 1, W)."""
    return shape if len(shape) == 4 else (shape[0], shape[1], 1, shape[2])


def _as_2d_window(w, bias, kernel_shape, strides, dilations, geo) -> tuple:
    """A conv's weights, bias and window (kernel shape, strides, dilations, geometry), a 1-D
    window as 1 x W."""
    if len(kernel_shape) != 1:
        return w, bias, kernel_shape, strides, dilations, geo
    ks, st, dil = [1, *kernel_shape], [1, *strides], [1, *dilations]
    return w[:, :, None], bias, ks, st, dil, [(0, 0, 1), *geo]


def conv_window(b, spatial: tuple | None = None) -> tuple:
    """A Conv node's weights (BatchNormalization folded in), bias, and window: kernel shape,
    strides, dilations and (pad begin, pad end, output size) per axis; a 1-D conv as 1 x W.
    `spatial`: the input's spatial size, when input 0 is not the NCHW value the conv reads."""
    from tinydl.ops.conv import _kernel, window_attrs, window_geometry

    w, bias = weights_and_bias(b, 0, as_given=True)  # (packed into float32 by the caller)
    kernel_shape = _kernel({"kernel_shape": b.attrs["kernel_shape"]}, w.shape)
    strides, dilations, pads = window_attrs(b.attrs, kernel_shape)
    geo = window_geometry(
        spatial or b.info(0).shape[2:], kernel_shape, strides, dilations, pads, b.attrs["auto_pad"]
    )
    return _as_2d_window(w, bias, kernel_shape, strides, dilations, geo)


def conv_transpose_window(b) -> tuple:
    """A ConvTranspose node's weights ([C][M/group][k...], BatchNormalization folded in), bias,
    and window as conv_window's (the geometry's pads are the crops of the full output)."""
    from tinydl.ops.conv import _kernel, _transpose_attrs, _transpose_geometry

    w, bias = weights_and_bias(b, 1)
    kernel_shape = _kernel({"kernel_shape": b.attrs["kernel_shape"]}, w.shape)
    strides, dilations, pads, output_padding = _transpose_attrs(b.attrs, kernel_shape)
    geo = _transpose_geometry(
        b.info(0).shape[2:], kernel_shape, strides, dilations, pads, output_padding,
        b.attrs["output_shape"], b.attrs["auto_pad"],
    )  # fmt: skip
    return _as_2d_window(w, bias, kernel_shape, strides, dilations, geo)


def conv_transpose_geometry(b) -> tuple[np.ndarray, np.ndarray, dict]:
    """A ConvTranspose node's weights ([C][M/group][kh][kw], BatchNormalization folded in, 1-D
    as 2-D), bias, and 2-D window by the templates' constant names (N, C, IH, IW, OC, OH, OW,
    KH, KW, SH, SW, DH, DW, PT, PL, G, CG, MG)."""
    xi, yo = b.info(0), b.out()
    group = b.attrs["group"]
    w, bias, kernel_shape, strides, dilations, geo = conv_transpose_window(b)
    n, c, ih, iw = as_2d(xi.shape)
    _, oc, oh, ow = as_2d(yo.shape)
    return w, bias, dict(
        N=n, C=c, IH=ih, IW=iw, OC=oc, OH=oh, OW=ow, KH=kernel_shape[0], KW=kernel_shape[1],
        SH=strides[0], SW=strides[1], DH=dilations[0], DW=dilations[1],
        PT=geo[0][0], PL=geo[1][0], G=group, CG=c // group, MG=w.shape[1],
    )  # fmt: skip


CHAIN = "tinydl.ElementwiseChain"
_BINARY = ("Add", "Sub", "Mul", "Div")
# One-input ops: Sqrt and the activations without a slope tensor.
_UNARY = ("Sqrt", *(k for k in ACTIVATION_OPS if not ACTIVATIONS[k].slope))


def fuse_elementwise(nodes: list[Node], keep: set[str], graph: Graph, types) -> list[Node]:
    """Runs of float elementwise ops, each the only reader of the one before, as one
    `tinydl.ElementwiseChain` node placed where the run ends: inputs = [the run's input, then
    every other operand], meta["steps"] = ("bin", op, input index, run value is left operand) |
    ("sqrt",) | ("act", kind, params) per op. The backend computes the run per element in
    registers; `types[value]` gives dtypes and shapes."""
    users = _readers(nodes)

    def floating(name: str) -> bool:
        t = types.get(name)
        return t is not None and t.dtype in ("float32", "float16")

    def step(node: Node, value: str | None, inputs: list[str]):
        """This node as a step of a run whose value so far is `value` (None: it starts one)."""
        if not node.outputs or not floating(node.outputs[0]):
            return None
        if node.op in _BINARY:
            a, b = node.inputs[:2]
            if value is None:
                inputs.append(a)
                value = a
            if (a == value) == (b == value):
                return None  # the run's value on both sides (or neither)
            other = b if a == value else a
            inputs.append(other)
            return ("bin", node.op, len(inputs) - 1, a == value)
        if node.inputs[0] != value and value is not None:
            return None
        if value is None:
            inputs.append(node.inputs[0])
        if node.op == "Sqrt":
            return ("sqrt",)
        if node.op in _UNARY:
            act = activation_of(node, graph, types[node.outputs[0]].shape)
            return None if act is None else ("act", *act)
        return None

    out: list[Node] = []
    taken: set[int] = set()
    ends: dict[int, Node] = {}
    for node in nodes:
        if id(node) in taken or node.op not in (*_BINARY, *_UNARY):
            continue
        inputs: list[str] = []
        first = step(node, None, inputs)
        if first is None:
            continue
        run, steps, cur = [node], [first], node
        while True:
            value = cur.outputs[0]
            nxt = users.get(value, [])
            if value in keep or len(nxt) != 1 or nxt[0].op not in (*_BINARY, *_UNARY):
                break
            if id(nxt[0]) in taken:
                break  # an earlier run ends there (two runs meeting at a binary op)
            trial = list(inputs)
            s = step(nxt[0], value, trial)
            if s is None:
                break
            inputs, cur = trial, nxt[0]
            run.append(cur)
            steps.append(s)
        if len(run) < 2:
            continue
        taken.update(id(n) for n in run)
        ends[id(run[-1])] = Node(
            CHAIN,
            inputs,
            [run[-1].outputs[0]],
            {},
            name=node.name,
            meta={"steps": steps, "label": "+".join(n.op for n in run)},
        )
    for node in nodes:
        if id(node) in ends:
            out.append(ends[id(node)])
        elif id(node) not in taken:
            out.append(node)
    return out


def chain_lets(steps, binary: Mapping[str, str], sqrt: str, act) -> tuple[list, str]:
    """A run's steps (fuse_elementwise's meta["steps"]) as (name, expression) lets over the
    operands a0, a1, ... and the last name: `binary[op]` formats the two sides, `sqrt` is a
    format over {x}, `act(kind, x, params)` writes an activation (each backend's own)."""
    lets, v = [], "a0"
    for k, step in enumerate(steps):
        if step[0] == "bin":
            _, name, arg, left = step
            other = f"a{arg}"
            text = binary[name].format(v, other) if left else binary[name].format(other, v)
        elif step[0] == "sqrt":
            text = sqrt.format(x=v)
        else:
            _, kind, params = step
            text = act(kind, v, params)
        lets.append((f"t{k}", text))
        v = f"t{k}"
    return lets, v


def bn_supports(node: Node, graph: Graph):
    """A GPU backend's answer for BatchNormalization: inference form with constant statistics."""
    from tinydl.backends.base import Support

    if node.attrs.get("training_mode", 0):
        return Support(False, "BatchNormalization in training mode is not implemented")
    if any(n not in graph.initializers for n in node.inputs[1:5]):
        return Support(False, "BatchNormalization with non-constant statistics is not implemented")
    if len([o for o in node.outputs if o]) > 1:
        return Support(False, "BatchNormalization training outputs are not implemented")
    return Support(True)


def fuse_bn_activations(nodes: list[Node], keep: set[str], graph: Graph, shape_of) -> list[Node]:
    """A BatchNormalization with constant statistics (not taken into a convolution) followed
    by an activation that is its only reader, as one node: meta["epilogue"] lists the
    activation (no PRelu: the kernel has no slope operand). Pre-activation networks
    (DenseNet's BN -> ReLU -> Conv) then launch one kernel where they launched two."""
    users = _readers(nodes)
    dropped: set[int] = set()
    out: dict[int, Node] = {}
    for k, node in enumerate(nodes):
        if node.op != "BatchNormalization" or not bn_supports(node, graph).ok:
            continue
        value = node.outputs[0]
        readers = users.get(value, [])
        if value in keep or len(readers) != 1 or readers[0].inputs[0] != value:
            continue
        act = activation_of(readers[0], graph, shape_of(value))
        if act is None or ACTIVATIONS[act[0]].slope:
            continue
        dropped.add(id(readers[0]))
        label = f"BatchNormalization+{readers[0].op}"
        meta = {**node.meta, "epilogue": [act], "label": label}
        out[k] = Node(node.op, list(node.inputs), [readers[0].outputs[0]], dict(node.attrs),
                      name=node.name, meta=meta)  # fmt: skip
    return [out.get(k, n) for k, n in enumerate(nodes) if id(n) not in dropped]


def fuse_channel_norms(nodes: list[Node], keep: set[str], shape_of) -> list[Node]:
    """Transpose (channels last) -> LayerNormalization over the last axis -> Transpose (back),
    as one LayerNormalization node that normalizes over axis 1 of the first Transpose's input
    (meta["channels_first"]): ConvNeXt's LayerNorm2d as PyTorch models export it. The kernel
    reads and writes the channels-first tensor, so neither transposed copy is made."""
    users = _readers(nodes)
    dropped: set[int] = set()
    out: dict[int, Node] = {}
    for k, node in enumerate(nodes):
        if node.op != "Transpose":
            continue
        shape = shape_of(node.inputs[0])
        rank = None if shape is None else len(shape)
        perm = list(node.attrs.get("perm") or ())
        if rank is None or rank < 3 or perm != [0, *range(2, rank), 1]:
            continue
        mid = node.outputs[0]
        readers = users.get(mid, [])
        if mid in keep or len(readers) != 1 or readers[0].op != "LayerNormalization":
            continue
        norm = readers[0]
        if norm.inputs[0] != mid or norm.attrs.get("axis", -1) not in (-1, rank - 1):
            continue
        if any(norm.outputs[1:]) or norm.outputs[0] in keep:
            continue
        back = users.get(norm.outputs[0], [])
        if len(back) != 1 or back[0].op != "Transpose":
            continue
        if list(back[0].attrs.get("perm") or ()) != [0, rank - 1, *range(1, rank - 1)]:
            continue
        dropped.update((id(norm), id(back[0])))
        label = "Transpose+LayerNormalization+Transpose"
        meta = {**norm.meta, "channels_first": True, "label": label}
        out[k] = Node(norm.op, [node.inputs[0], *norm.inputs[1:]], [back[0].outputs[0]],
                      dict(norm.attrs), name=norm.name, meta=meta)  # fmt: skip
    return [out.get(k, n) for k, n in enumerate(nodes) if id(n) not in dropped]


def bn_affine(b) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """BatchNormalization as y = x * k + shift per channel: (the broadcast shape (C, 1, ...),
    k, shift), float32, computed in float64."""
    scale, bias, mean, var = (b.const(i).astype(np.float64) for i in range(1, 5))
    k = scale / np.sqrt(var + b.attrs["epsilon"])
    shift = bias - mean * k
    shape = b.info(0).shape
    per_channel = (shape[1],) + (1,) * (len(shape) - 2)
    return (
        per_channel,
        k.astype(np.float32).reshape(per_channel),
        shift.astype(np.float32).reshape(per_channel),
    )


def conv_supports_3d(node: Node, graph: Graph):
    """conv_supports with 3-D windows too (the backends' conv3d kernels)."""
    return conv_supports(node, graph, ranks=(1, 2, 3))


def conv_supports(node: Node, graph: Graph, ranks: tuple[int, ...] = (1, 2)):
    """A GPU backend's answer for Conv / ConvTranspose / FusedConv: `ranks` spatial axes (1-D or
    2-D unless the backend says more), constant weights, bias and slope, and a FusedConv
    activation the epilogues know."""
    from tinydl.backends.base import Support

    w = graph.initializers.get(node.inputs[1])
    v = graph.value(node.inputs[0])
    if w is not None:
        rank = w.ndim - 2
    else:
        rank = None if v is None or v.shape is None else len(v.shape) - 2
    if rank not in ranks:
        *rest, last = [f"{r}-D" for r in ranks]
        have = f"{', '.join(rest)} and {last}" if rest else last
        return Support(False, f"{rank}-D {node.op} is not implemented ({have} are)")
    for i, what in ((1, "weights"), (2, "bias"), (3, "slope")):
        name = node.inputs[i] if len(node.inputs) > i else ""
        if name and name not in graph.initializers:
            return Support(False, f"{node.op} with {what} computed at run time is not implemented")
    activation = node.attrs.get("activation") if node.op == FUSED_CONV else None
    if activation is not None and activation not in (*ACTIVATIONS, NO_ACTIVATION):
        return Support(False, f"FusedConv activation {activation} not implemented")
    return Support(True)


ATTENTION = "tinydl.Attention"
# Workgroups / blocks per grid dimension that every GPU backend launches: the fused kernel has
# one per (batch, head) in one dimension.
_MAX_GROUPS = 65535


def fuse_attention(
    nodes: list[Node], keep: set[str], shape_of, types, const, max_dim: int
) -> list[Node]:
    """Scaled dot-product attention as one `tinydl.Attention` node placed where it ends:
    MatMul(Q, Kᵀ) → Div or Mul by a scalar constant (optional) → Add of a mask that broadcasts
    into the scores (optional) → Softmax over the last axis → MatMul(·, V), each intermediate
    read by the next node alone and not kept (an opset < 13 Softmax as the importer writes it,
    Flatten -> Softmax -> Reshape, counts as one). Transposes that only feed an operand are taken in
    (Kᵀ = Transpose(K)), and scalar Mul/Div that only feed Q or Kᵀ (Q·√s and Kᵀ·√s) go into the
    scale. Inputs: [Q, K, V] (and the mask); meta["scale"] multiplies the scores, meta["perms"]
    gives per operand the permutation of its input that the MatMul reads (None: as it is).
    `shape_of(value)` gives a value's concrete shape, `types[value]` a computed value's dtype,
    `const(name)` a value known when planning (or None); head dims over `max_dim` stay
    unfused."""
    users = _readers(nodes)
    producer = {o: n for n in nodes for o in n.outputs if o}

    def shape(name: str) -> tuple | None:
        """The shape of a float value a node computes (None for any other value)."""
        t = types.get(name)
        return None if t is None or t.dtype not in ("float32", "float16") else shape_of(name)

    def feeds_only(value: str, node: Node) -> Node | None:
        """The producer of `value` when `node` alone reads it (once) and it is not kept."""
        p = producer.get(value)
        if p is None or value in keep or users.get(value, []) != [node]:
            return None
        return p

    def factor(node: Node, x: str) -> float | None:
        """What Mul/Div `node` multiplies its input `x` by, when the other operand is a scalar
        constant and the output has x's shape."""
        if node.op not in ("Mul", "Div") or list(node.inputs).count(x) != 1:
            return None
        if node.op == "Div" and node.inputs[0] != x:
            return None
        other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
        c = const(other)
        if c is None or c.size != 1 or c.dtype.kind != "f":
            return None
        if shape(node.outputs[0]) is None or shape_of(node.outputs[0]) != shape_of(x):
            return None
        c = float(c.reshape(()))
        if node.op == "Div":
            return 1.0 / c if c != 0.0 else None
        return c

    def operand(value: str, user: Node, scaled: bool):
        """Walk back from a MatMul operand through Transposes (and scalar Mul/Div, when
        `scaled`) that feed only it: (input, permutation or None, factor, nodes taken)."""
        perm, scale, taken = None, 1.0, []
        while True:
            p = feeds_only(value, user)
            if p is None:
                break
            if p.op == "Transpose":
                rank = len(shape_of(value))
                inner = p.attrs.get("perm") or list(range(rank))[::-1]
                perm = [inner[i] for i in (perm or range(rank))]
                value = p.inputs[0]
            else:
                found = [(x, factor(p, x)) for x in p.inputs]
                found = [(x, f) for x, f in found if f is not None]
                if not scaled or not found:
                    break
                value, f = found[0]
                scale *= f
            taken.append(p)
            user = p
        return value, perm, scale, taken

    def scores(value: str, user: Node):
        """(MatMul(Q, Kᵀ), factor, the Mul/Div applying it or None) computing `value`."""
        p = feeds_only(value, user)
        if p is not None and p.op in ("Mul", "Div"):
            for x in p.inputs:
                f = factor(p, x)
                qk = feeds_only(x, p) if f is not None else None
                if qk is not None and qk.op == "MatMul":
                    return qk, f, p
        return (p, 1.0, None) if p is not None and p.op == "MatMul" else None

    def softmax_rows(sm: Node):
        """(x, probabilities, nodes) when `sm` is a Softmax over the last axis of x: itself, or
        the importer's form of an opset < 13 Softmax, Flatten(x, rank - 1) -> Softmax ->
        Reshape back to x's shape, each read by the next alone."""
        x = sm.inputs[0] if sm.op == "Softmax" else ""
        if shape(x) is None or sm.attrs["axis"] not in (-1, len(shape(x)) - 1):
            return None
        flat = feeds_only(x, sm)
        back = (users.get(sm.outputs[0]) or [None])[0]
        if len(shape(x)) != 2 or flat is None or flat.op != "Flatten" or back is None:
            return x, sm.outputs[0], [sm]
        rank = len(shape_of(flat.inputs[0]))
        if flat.attrs["axis"] not in (-1, rank - 1) or back.op != "Reshape":
            return x, sm.outputs[0], [sm]
        if feeds_only(sm.outputs[0], back) is not sm or back.inputs[0] != sm.outputs[0]:
            return x, sm.outputs[0], [sm]
        if shape(back.outputs[0]) != shape_of(flat.inputs[0]):
            return x, sm.outputs[0], [sm]
        return flat.inputs[0], back.outputs[0], [flat, sm, back]

    dropped: set[int] = set()
    fused: dict[int, Node] = {}
    for node in nodes:
        found = softmax_rows(node)
        if found is None:
            continue
        x, probs, rows = found
        first, rank = rows[0], len(shape_of(x))
        if not 2 <= rank <= 4:
            continue  # (the kernels take a batch and a head axis at most: Hiera's, Twins' are 5-D)
        pv = (users.get(probs) or [None])[0]
        if pv is None or pv.op != "MatMul" or feeds_only(probs, pv) is not rows[-1]:
            continue
        if pv.inputs[0] != probs:
            continue
        mask, found, add = None, scores(x, first), feeds_only(x, first)
        if found is None and add is not None and add.op == "Add":
            for s, m in (add.inputs, add.inputs[::-1]):
                if s != m and shape(add.outputs[0]) == shape_of(s):
                    found, mask = scores(s, add), m
                    if found is not None:
                        break
        if found is None:
            continue
        qk, scale, scaling = found
        q, q_perm, q_scale, q_taken = operand(qk.inputs[0], qk, True)
        k, k_perm, k_scale, k_taken = operand(qk.inputs[1], qk, True)
        v, v_perm, _, v_taken = operand(pv.inputs[1], pv, False)
        logical = [shape_of(qk.inputs[0]), shape_of(qk.inputs[1]), shape_of(pv.inputs[1])]
        out_shape = shape(pv.outputs[0])
        if out_shape is None or any(len(s) != rank for s in logical):
            continue
        if any(d == 0 for s in logical for d in s) or math.prod(out_shape[:-2]) > _MAX_GROUPS:
            continue
        if max(logical[0][-1], logical[2][-1]) > max_dim:
            continue
        middle = [n for n in (scaling, add if mask else None) if n is not None]
        taken = [qk, *middle, *rows, *q_taken, *k_taken, *v_taken]
        # A node another attention already took (its last MatMul as these scores) stays.
        if any(id(n) in dropped or id(n) in fused for n in (*taken, pv)):
            continue
        dropped.update(id(n) for n in taken)
        fused[id(pv)] = Node(
            ATTENTION,
            [q, k, v, *([mask] if mask else [])],
            [pv.outputs[0]],
            {},
            name=pv.name,
            meta={
                "scale": scale * q_scale * k_scale,
                "perms": [q_perm, k_perm, v_perm],
                "label": "+".join(["MatMul", *(n.op for n in (*middle, *rows)), "MatMul"]),
            },
        )
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


def _readers(nodes: list[Node]) -> dict[str, list[Node]]:
    """Value name -> the nodes that read it (a node reading it twice is listed twice)."""
    users: dict[str, list[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            if i:
                users.setdefault(i, []).append(n)
    return users
