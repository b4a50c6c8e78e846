"""The render path: ops as fragment shaders drawing into textures (the thesis's design).

A value on this path is a texture array, W x H texels, N x ceil(C/4) layers (layer n*C4 + s
holds channels 4s..4s+3 of image n), rgba32float (rgba16float at fp16 precision). An op is a
render pass over a full-screen triangle, one color attachment per output layer, as many per
pass as the adapter allows (max-color-attachments and max-color-attachment-bytes-per-sample:
8 rgba32float on most desktop GPUs, 2 at WebGPU's default 32 bytes); more layers take more
passes. The batch element is the draw's instance index.

Each builder here takes a node the compute kernels also take (`FRAGMENT[op]`), answers
`fragment_ok` for it, and draws through `Build.draw`. Transitions between the layouts are plan
steps of their own (program.py): `texture_in.wgsl` (a buffer value into a texture, drawn; it
also reads u8 NHWC frames, the Cast and Transpose of an image input folded in) and
`texture_out.wgsl` (a texture into a buffer, a compute dispatch; also u8 NHWC).

Convolution weights reach the shader in one of four ways (option "weights"): a uniform buffer
("uniform", the default), a storage buffer ("storage"), a rgba32float texture ("texture"), or
literals in the shader code ("const", every loop unrolled). A layer whose weights do not fit
the chosen way (64 KiB of uniforms even at one attachment per pass; 4096 mat4x4 of literals)
takes the texture, and its label says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tinydl.backends.fusion import CHAIN, as_2d, conv_label, conv_window, epilogue_code
from tinydl.backends.fusion import epilogue as conv_epilogue
from tinydl.backends.webgpu.kernels import activation_expr, wgsl_float
from tinydl.ops.activation import ACTIVATION_OPS, ACTIVATIONS, activation_params
from tinydl.ops.fused import FUSED_CONV
from tinydl.ops.resize import _check_resize_attrs, _resize_targets, axis_taps

WEIGHT_MODES = ("uniform", "storage", "texture", "const")
SHADER_MODES = ("compute", "fragment", "auto")
# Constants (mat4x4 count) past which "const" weights take the texture instead: the source of a
# larger layer takes seconds to compile.
MAX_CONST_MATS = 4096
# Grouped convolutions unroll every input channel of a group per tap.
MAX_GROUP_CHANNELS = 16
BINARY = {"Add": "{0} + {1}", "Sub": "{0} - {1}", "Mul": "{0} * {1}", "Div": "{0} / {1}"}
TEXTURE_FORMATS = {"f32": "rgba32float", "f16": "rgba16float"}
TEXEL_BYTES = {"rgba32float": 16, "rgba16float": 8}


@dataclass(frozen=True)
class TexRef:
    """A step's binding of value `name` as a texture (a str binding is the value's buffer)."""

    name: str


@dataclass
class FragmentDef:
    ok: Callable  # (node, shape_of, dtype_of, const) -> str | None: why not, or None
    build: Callable


FRAGMENT: dict[str, FragmentDef] = {}


def fragment(*ops: str, ok: Callable):
    def deco(fn):
        for op in ops:
            FRAGMENT[op] = FragmentDef(ok, fn)
        return fn

    return deco


def why_not(node, shape_of, dtype_of, const) -> str | None:
    """Why `node` cannot be drawn (None when it can): its op has no fragment kernel, or a value
    is not a 4-D float tensor, or the op's own reason."""
    fd = FRAGMENT.get(node.op)
    if fd is None:
        return f"no fragment kernel for {node.op}"
    for name in [node.inputs[0], *node.outputs[:1]]:
        shape = shape_of(name)
        if shape is None or len(shape) != 4:
            return f"{name} is not 4-D"
        if dtype_of(name) not in ("float32", "float16"):
            return f"{name} is {dtype_of(name)}, not float"
    if len([o for o in node.outputs if o]) != 1:
        return "more than one output"
    return fd.ok(node, shape_of, dtype_of, const)


def slices(c: int) -> int:
    return math.ceil(c / 4)


def passes(total: int, per_pass: int) -> list[tuple[int, int]]:
    """(first slice, slice count) of each pass over `total` output slices."""
    return [(s, min(per_pass, total - s)) for s in range(0, total, per_pass)]


def _lit(values) -> str:
    return ", ".join(wgsl_float(float(v)) for v in np.asarray(values, np.float32).ravel())


# -- convolution ----------------------------------------------------------------------------------


def _conv_ok(node, shape_of, dtype_of, const) -> str | None:
    if "residual" in node.meta:
        return "a residual Add in its epilogue (the compute kernel's)"
    if "dw" in node.meta:
        return "a depthwise convolution fused before it (the compute kernel's)"
    if "nhwc" in node.meta or "nhwc_in" in node.meta:
        return "a Transpose of channels-last fused into it (the compute kernel's)"
    w = const(node.inputs[1])
    if w is None or w.ndim != 4:
        return "weights are not constant 2-D"
    if any(n and const(n) is None for n in node.inputs[2:]):
        return "bias or slope not constant"
    group = node.attrs.get("group", 1)
    c = shape_of(node.inputs[0])[1]
    if group > 1 and not (group == c == w.shape[0]) and c // group > MAX_GROUP_CHANNELS:
        return f"grouped with {c // group} channels per group (at most {MAX_GROUP_CHANNELS})"
    return None


def _lanes(co_total: int, s: int, ph: int, bs: int, dcr: bool) -> list[int | None]:
    """The conv output channel each lane of output slice s holds at pixel-shuffle phase ph."""
    out = []
    for j in range(4):
        co = 4 * s + j
        if co >= co_total:
            out.append(None)
        elif bs == 1:
            out.append(co)
        else:
            out.append(ph * co_total + co if dcr else co * bs * bs + ph)
    return out


@fragment("Conv", FUSED_CONV, ok=_conv_ok)
def conv(b):
    b.label = conv_label(b.node)
    x, y = b.info(0), b.out()
    w, bias, _, strides, dilations, geo = conv_window(b)
    n, c, ih, iw = as_2d(x.shape)
    oc, cg, kh, kw = w.shape
    group = b.attrs["group"]
    mg = oc // group
    acts, slope = conv_epilogue(b, oc)
    d2s = b.node.meta.get("d2s")
    bs, dcr = (d2s[0], d2s[1] == "DCR") if d2s else (1, False)
    mode = b.option("weights", "uniform")
    if mode not in WEIGHT_MODES:
        raise ValueError(f"weights must be one of {WEIGHT_MODES}, got {mode!r}")
    out = b.outputs[0]
    if bs > 1 and (group > 1 or mode == "const"):
        # The conv draws its r*r channels at low resolution, then a texel gather shuffles them
        # (the phase-indexed weights of the fused store need weights it can index at run time).
        out = f"{b.node.name}/before_shuffle"
        b.plan.tex_value(out, (n, oc, y.shape[2] // bs, y.shape[3] // bs), y.stype)
        bs = 1
    co = oc // (bs * bs)
    if group == 1:
        kind = "mat"
    elif cg == 1 and mg == 1:
        kind = "dw"
    else:
        kind = "grouped"
    c4, os4, taps, phases = slices(c), slices(co), kh * kw, bs * bs
    w = w.astype(np.float32)
    bias = bias.astype(np.float32)

    def tables(s0: int, a: int):
        """The pass's mat4x4 and vec4 constants, and (grouped) each lane's input channels."""
        mats, vecs, chans = [], [], []
        lanes = [[_lanes(co, s0 + k, ph, bs, dcr) for k in range(a)] for ph in range(phases)]
        if kind == "mat":
            wp = np.zeros((phases, a, taps, c4, 4, 4), np.float32)  # [.., column i, lane j]
            wt = np.zeros((oc, c4 * 4, taps), np.float32)
            wt[:, :c] = w.reshape(oc, c, taps)
            for ph in range(phases):
                for k in range(a):
                    for j, ch in enumerate(lanes[ph][k]):
                        if ch is not None:
                            wp[ph, k, :, :, :, j] = wt[ch].T.reshape(taps, c4, 4)
            mats = wp.reshape(-1, 16)
        else:
            wv = np.zeros((a, cg, taps, 4), np.float32)
            for k in range(a):
                chans.append([])
                for j, ch in enumerate(lanes[0][k]):
                    if ch is not None:
                        wv[k, :, :, j] = w[ch].reshape(cg, taps)
                    chans[k].append(
                        [-1] * cg if ch is None else [(ch // mg) * cg + i for i in range(cg)]
                    )
            vecs.append(wv.reshape(-1, 4))
        per = np.zeros((2 if slope is not None else 1, phases, a, 4), np.float32)
        for ph in range(phases):
            for k in range(a):
                for j, ch in enumerate(lanes[ph][k]):
                    if ch is not None:
                        per[0, ph, k, j] = bias[ch]
                        if slope is not None:
                            per[1, ph, k, j] = slope[ch]
        nb = sum(len(v) for v in vecs)
        vecs.append(per.reshape(-1, 4))
        return np.asarray(mats, np.float32).reshape(-1, 16), np.concatenate(vecs), nb, chans

    most = min(b.max_attachments(y), os4)
    per_pass = most
    fallback = ""

    def size(a: int) -> tuple[int, int]:
        """(mat4x4 count, vec4 count) of a pass of `a` slices."""
        km = phases * a * taps * c4 if kind == "mat" else 0
        kv = 0 if kind == "mat" else a * taps * cg
        return km, kv + phases * a * (2 if slope is not None else 1)

    if mode == "uniform":
        limit = int(b.ctx.limits.get("max-uniform-buffer-binding-size", 65536))
        while per_pass > 1 and size(per_pass)[0] * 64 + size(per_pass)[1] * 16 > limit:
            per_pass -= 1
        if size(per_pass)[0] * 64 + size(per_pass)[1] * 16 > limit:
            mode, per_pass, fallback = "texture", most, " (weights over the uniform limit: texture)"
    elif mode == "const" and size(per_pass)[0] + size(per_pass)[1] / 4 > MAX_CONST_MATS:
        mode, fallback = "texture", " (weights over the constant limit: texture)"
    label = b.label
    b.label += f" [fragment, {mode} weights]{fallback}"
    tex = b.texture(b.inputs[0])
    for s0, a in passes(os4, per_pass):
        mats, vecs, nb, chans = tables(s0, a)
        params = dict(
            kind=kind, wmode=mode, OS4=os4, C4=c4, IH=ih, IW=iw, KH=kh, KW=kw,
            SH=strides[0], SW=strides[1], DH=dilations[0], DW=dilations[1],
            PT=geo[0][0], PL=geo[1][0], BS=bs, CG=cg, chans=chans, NB=nb,
            KM=len(mats), KV=len(vecs), has_slope=slope is not None,
            epilogue=epilogue_code(acts, activation_expr),
            lanes=[min(4, co - 4 * (s0 + k)) for k in range(a)],
            wbinding=1,
            TW=0,
        )  # fmt: skip
        bindings = [tex]
        if mode == "const":
            # literals in the code itself (an indexed const array is copied per invocation)
            params["M"] = lambda i, mats=mats: f"mat4x4<f32>({_lit(mats[i])})"
            params["V"] = lambda i, vecs=vecs: f"vec4<f32>({_lit(vecs[i])})"
        else:
            params["M"] = "wm({}u)".format
            params["V"] = "wv({}u)".format
        if mode == "uniform":
            data = np.concatenate([mats.ravel(), vecs.ravel()])
            bindings.append(b.upload(("uniform", s0), data.reshape(-1, 4), "f32", uniform=True))
        elif mode == "storage":
            data = np.concatenate([mats.ravel(), vecs.ravel()])
            bindings.append(b.upload(("storage", s0), data.reshape(-1, 4), "f32"))
        elif mode == "texture":
            texels = np.concatenate([mats.reshape(-1, 4), vecs]).astype(np.float32)
            tw = min(len(texels), int(b.ctx.limits.get("max-texture-dimension-2d", 8192)))
            params["TW"] = tw
            bindings.append(b.weight_texture(("texture", s0), texels, tw))
        b.draw("frag_conv.wgsl", bindings, out, s0, a, **params)
    if out != b.outputs[0]:
        b.label = label + " [fragment, shuffle]"
        _shuffle(b, out, b.outputs[0], d2s[0], d2s[1] == "DCR")


# -- data movement -------------------------------------------------------------------------------


def _channel_slice(node, shape_of, const) -> list[int] | None:
    """The input channels a Slice keeps, when it slices the channel axis only."""
    starts, ends = const(node.inputs[1]), const(node.inputs[2])
    axes = const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
    steps = const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else None
    if starts is None or ends is None or (len(node.inputs) > 3 and node.inputs[3] and axes is None):
        return None
    if len(node.inputs) > 4 and node.inputs[4] and steps is None:
        return None
    axes = list(range(len(starts))) if axes is None else [int(a) % 4 for a in axes]
    steps = [1] * len(starts) if steps is None else list(steps)
    shape = shape_of(node.inputs[0])
    keep = list(range(shape[1]))
    for ax, s, e, st in zip(axes, starts, ends, steps, strict=True):
        full = list(range(shape[ax]))[slice(int(s), int(e), int(st))]
        if ax == 1:
            keep = full
        elif full != list(range(shape[ax])):
            return None
    return keep


def _channels_ok(node, shape_of, dtype_of, const) -> str | None:
    if node.op == "Concat":
        axis = node.attrs["axis"] % 4
        if axis != 1:
            return "Concat off the channel axis"
        if any(shape_of(i) is None or len(shape_of(i)) != 4 for i in node.inputs if i):
            return "an input is not 4-D"
        if any(const(i) is not None for i in node.inputs if i):
            return "a constant input"
        return None
    if node.op == "Slice":
        return None if _channel_slice(node, shape_of, const) is not None else "not a channel slice"
    return None  # DepthToSpace


@fragment("Concat", "Slice", "DepthToSpace", ok=_channels_ok)
def channels(b):
    y = b.out()
    oc = y.shape[1]
    names = [b.inputs[0]]
    if b.node.op == "Concat":
        names = [i for i in b.inputs if i]
        source = [(k, ch) for k, name in enumerate(names) for ch in range(b.info(name).shape[1])]
        table = [[source[co] if co < oc else None for co in range(4 * slices(oc))]]
    elif b.node.op == "Slice":
        keep = _channel_slice(b.node, lambda v: b.info(v).shape, b.plan.const)
        table = [[(0, keep[co]) if co < oc else None for co in range(4 * slices(oc))]]
    else:
        b.label += " [fragment]"
        _shuffle(b, b.inputs[0], b.outputs[0], b.attrs["blocksize"], b.attrs["mode"] == "DCR")
        return
    b.label += " [fragment]"
    _gather(b, names, b.outputs[0], table, 1)


def _shuffle(b, src: str, out: str, bs: int, dcr: bool) -> None:
    """DepthToSpace of texture `src` into `out`: each output texel gathers its channels."""
    oc = (b.plan.tex[src].shape[1] if src in b.plan.tex else b.info(src).shape[1]) // (bs * bs)
    table = []
    for ph in range(bs * bs):
        row = []
        for s in range(slices(oc)):
            row += [None if ch is None else (0, ch) for ch in _lanes(oc, s, ph, bs, dcr)]
        table.append(row)
    _gather(b, [src], out, table, bs)


def _gather(b, names: list[str], out: str, table: list, bs: int) -> None:
    """Draw `out` from textures `names`: table[phase][output channel] = (input, channel)."""
    texs = [b.texture(name) for name in names]
    c4s = [slices(b.plan.tex[name].shape[1]) for name in names]
    for s0, a in passes(len(table[0]) // 4, b.max_attachments(b.info(out))):
        src = [[row[4 * (s0 + k) : 4 * (s0 + k) + 4] for k in range(a)] for row in table]
        b.draw("frag_channels.wgsl", texs, out, s0, a, K=len(texs), src=src, C4s=c4s, BS=bs)


def _pad_ok(node, shape_of, dtype_of, const) -> str | None:
    pads = const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    if pads is None:
        return "pads not constant"
    if len(node.inputs) > 3 and node.inputs[3]:
        return "Pad with axes"
    if len(node.inputs) > 2 and node.inputs[2] and const(node.inputs[2]) is None:
        return "pad value not constant"
    pads = [int(p) for p in pads]
    if pads[0] or pads[1] or pads[4] or pads[5] or min(pads) < 0:
        return "pads other than non-negative spatial ones"
    mode = node.attrs.get("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        return f"mode {mode}"
    h, w = shape_of(node.inputs[0])[2:]
    if mode == "reflect" and (max(pads[2], pads[6]) >= h or max(pads[3], pads[7]) >= w):
        return "reflect padding as wide as the input"
    if mode == "wrap" and (max(pads[2], pads[6]) > h or max(pads[3], pads[7]) > w):
        return "wrap padding wider than the input"
    return None


@fragment("Pad", ok=_pad_ok)
def pad(b):
    x, y = b.info(0), b.out()
    pads = [int(p) for p in b.const(1)]
    mode = b.attrs.get("mode", "constant")
    value = b.const(2) if b.has(2) else None
    value = 0.0 if value is None else float(np.ravel(value)[0])
    bindings = [b.texture(b.inputs[0])]
    sampled = mode == "edge" and b.filterable(x)
    if sampled:
        bindings.append(b.sampler())
    b.label += " [fragment]"
    for s0, a in passes(slices(y.shape[1]), b.max_attachments(y)):
        b.draw(
            "frag_pad.wgsl", bindings, b.outputs[0], s0, a, mode=mode, sampled=sampled,
            value=wgsl_float(value), PT=pads[2], PL=pads[3], IH=x.shape[2], IW=x.shape[3],
            C4=slices(x.shape[1]),
        )  # fmt: skip


def _resize_ok(node, shape_of, dtype_of, const) -> str | None:
    attrs = dict(node.attrs)
    try:
        _check_resize_attrs(attrs)
    except Exception as exc:  # noqa: BLE001 - the compute kernel reports it
        return str(exc)
    if any(n and const(n) is None for n in node.inputs[1:]):
        return "scales or sizes not constant"
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        return "tf_crop_and_resize"
    x, y = shape_of(node.inputs[0]), shape_of(node.outputs[0])
    if x[:2] != y[:2]:
        return "resizes N or C"
    return None


def _fetches(idx: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An axis's taps (input index, weight; [n_out, T]) as bilinear fetches (texel position,
    weight; [n_out, F]): two neighbouring taps of one sign become one fetch between them, the
    hardware weighting them; a tap on its own is a fetch at its texel's centre (exact)."""
    rows = []
    for ii, ww in zip(idx.tolist(), w.tolist(), strict=True):
        row, t = [], 0
        while t < len(ii):
            if ww[t] == 0:
                t += 1
            elif t + 1 < len(ii) and ii[t + 1] == ii[t]:  # a tap clamped onto its neighbour
                row.append((ii[t], ww[t] + ww[t + 1]))
                t += 2
            elif t + 1 < len(ii) and ii[t + 1] == ii[t] + 1 and ww[t] * ww[t + 1] > 0:
                total = ww[t] + ww[t + 1]
                row.append((ii[t] + ww[t + 1] / total, total))
                t += 2
            else:
                row.append((ii[t], ww[t]))
                t += 1
        rows.append(row)
    f = max(1, *(len(r) for r in rows))
    pos, weight = np.zeros((len(rows), f)), np.zeros((len(rows), f))
    for k, row in enumerate(rows):
        for t, (p, wt) in enumerate(row):
            pos[k, t], weight[k, t] = p, wt
    return pos, weight


@fragment("Resize", ok=_resize_ok)
def resize(b):
    """Per output row and column, the taps of the op reference's own coordinate rules; linear and
    cubic at fp16 sample the texture through the bilinear filter, two taps a fetch (its weights
    are 8-bit fixed point on most GPUs: within fp16's tolerance, not fp32's)."""
    x, y = b.info(0), b.out()
    attrs = dict(b.attrs)
    axes, scale, out = _resize_targets(
        x.shape, b.const(2), b.const(3), attrs["axes"], attrs["keep_aspect_ratio_policy"]
    )
    roi = b.const(1)
    sampled = attrs["mode"] != "nearest" and x.stype == "f16" and b.filterable(x)
    tables = []
    for d in (2, 3):
        if d in axes:
            k = axes.index(d)
            bounds = (0.0, 1.0)
            if roi is not None and np.size(roi):
                r = np.ravel(roi)
                bounds = (r[k], r[k + len(r) // 2])
            idx, w, _ = axis_taps(x.shape[d], out[d], scale[d], attrs, bounds)
        else:
            idx, w = np.arange(x.shape[d])[:, None], np.ones((x.shape[d], 1))
        if sampled:  # texel positions as texture coordinates
            idx, w = _fetches(idx, w)
            idx = (idx + 0.5) / x.shape[d]
        tables.append(np.stack([idx.astype(np.float32), w.astype(np.float32)], -1))
    ty, tx = tables[0].shape[1], tables[1].shape[1]
    taps = np.concatenate([tables[0].reshape(-1, 2), tables[1].reshape(-1, 2)])
    buf = b.upload("taps", taps.astype(np.float32), "f32")
    bindings = [b.texture(b.inputs[0]), buf]
    if sampled:
        bindings.append(b.sampler(linear=True))
    b.label += " [fragment, sampled]" if sampled else " [fragment]"
    for s0, a in passes(slices(y.shape[1]), b.max_attachments(y)):
        b.draw(
            "frag_resize.wgsl", bindings, b.outputs[0], s0, a,
            TY=ty, TX=tx, OH=y.shape[2], C4=slices(x.shape[1]), sampled=sampled,
        )  # fmt: skip


# -- elementwise ---------------------------------------------------------------------------------


def _operand_ok(name, out_shape, shape_of, const) -> bool:
    """An operand a fragment kernel takes: a value of the output's shape (a texture), or a
    constant of one value per channel (or one in all)."""
    value = const(name)
    if value is None:
        return tuple(shape_of(name)) == tuple(out_shape)
    shape = (1,) * (4 - np.ndim(value)) + np.shape(value)
    return (
        len(shape) == 4 and shape[0] == shape[2] == shape[3] == 1 and shape[1] in (1, out_shape[1])
    )


def _elementwise_ok(node, shape_of, dtype_of, const) -> str | None:
    out = shape_of(node.outputs[0])
    if node.op in ACTIVATION_OPS:
        params = activation_params(node, const)
        if params is None:
            return "activation parameters not constant"
        if ACTIVATIONS[node.op].slope and not _operand_ok(node.inputs[1], out, shape_of, const):
            return "slope not per channel"
        return None
    names = [i for i in node.inputs if i]
    if node.op == CHAIN:
        for kind, *rest in node.meta["steps"]:
            if kind == "act" and ACTIVATIONS[rest[0]].slope:
                return "PRelu in a chain"
    if not all(_operand_ok(n, out, shape_of, const) for n in names):
        return "an operand is neither the output's shape nor per channel"
    if all(const(n) is not None for n in names):
        return "constant operands only"
    return None


def _per_channel(value, c: int) -> np.ndarray:
    """A constant operand as C channel values (broadcast from a scalar or (1|C,1,1))."""
    v = np.asarray(value, np.float64)
    flat = v.reshape(-1)
    return np.broadcast_to(flat, (c,)) if flat.size in (1, c) else flat[:c]


@fragment("Add", "Sub", "Mul", "Div", *ACTIVATION_OPS, CHAIN, ok=_elementwise_ok)
def elementwise(b):
    y = b.out()
    c = y.shape[1]
    names = [i for i in b.inputs if i]
    textures, operand = [], {}
    for k, name in enumerate(names):
        value = b.plan.const(name)
        if value is None:
            operand[k] = ("tex", len(textures))
            textures.append(b.texture(name))
        else:
            operand[k] = ("const", _per_channel(value, c))
    if b.node.op == CHAIN:
        steps = b.node.meta["steps"]
    elif b.node.op in BINARY:
        steps = [("bin", b.node.op, 1, True)]
    else:
        params = activation_params(b.node, b.plan.const)
        if ACTIVATIONS[b.node.op].slope:
            params["slope"] = _per_channel(b.const(1), c)
        steps = [("act", b.node.op, params)]

    def expr(k: int, s: int) -> str:
        kind, v = operand[k]
        if kind == "tex":
            return f"x{v}"
        return f"vec4<f32>({_lit(np.pad(v, (0, 4 * slices(c) - c))[4 * s : 4 * s + 4])})"

    def lines(s: int) -> list[str]:
        out = [f"var r = {expr(0, s)};"]
        for step in steps:
            if step[0] == "bin":
                _, op, k, left = step
                a, bb = ("r", expr(k, s)) if left else (expr(k, s), "r")
                out.append(f"r = {BINARY[op].format(a, bb)};")
            elif step[0] == "sqrt":
                out.append("r = sqrt(r);")
            else:
                _, kind, params = step
                params = dict(params)
                if ACTIVATIONS[kind].slope:
                    sl = np.pad(params["slope"], (0, 4 * slices(c) - c))[4 * s : 4 * s + 4]
                    params["slope"] = f"vec4<f32>({_lit(sl)})"
                out.append(f"r = {activation_expr(kind, 'r', params)};")
        return out

    b.label += " [fragment]"
    for s0, a in passes(slices(c), b.max_attachments(y)):
        b.draw(
            "frag_elementwise.wgsl", textures, b.outputs[0], s0, a,
            K=len(textures), C4=slices(c), lines=[lines(s0 + k) for k in range(a)],
        )  # fmt: skip
