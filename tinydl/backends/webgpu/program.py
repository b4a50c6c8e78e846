"""WebGPU plans (backends/planned.py makes them): a run records its dispatches and submits them
in a few submissions (the GPU starts on the first while the rest is recorded).

What is WebGPU's own: storage types and the packed-4 layout of values between direct
convolutions, buffers as Storage, dispatches recorded into compute passes (per-op timestamp
passes when profiling), and host outputs read back in a submission right after the compute.

The render path (kernels/fragment.py): with the option "shaders" at "fragment" (or "auto", by
measurement, shaders.py), the nodes a fragment kernel takes are drawn into textures; a value
crossing between the two paths goes through an explicit step (`to texture`, `from texture`),
labelled in the profile like any op. Textures are shared by liveness as buffers are.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.backends import planned
from tinydl.backends.fusion import (
    fuse,
    fuse_attention,
    fuse_channel_norms,
    fuse_channels_last,
    fuse_depthwise,
    fuse_depthwise_after,
    fuse_elementwise,
    fuse_residuals,
)
from tinydl.backends.planned import Info
from tinydl.backends.webgpu.kernels import REGISTRY, render
from tinydl.backends.webgpu.kernels import grid as kernel_grid
from tinydl.backends.webgpu.kernels.attention import MAX_DIM
from tinydl.backends.webgpu.kernels.conv import DW_MIN_PIXELS, after_ok, direct_ok
from tinydl.backends.webgpu.kernels.fragment import (
    FRAGMENT,
    SHADER_MODES,
    TEXEL_BYTES,
    TEXTURE_FORMATS,
    TexRef,
    slices,
    why_not,
)
from tinydl.backends.webgpu.kernels.fragment import passes as _passes
from tinydl.backends.webgpu.tensor import (
    LOGICAL,
    STORAGE_TYPES,
    GPUTensor,
    Storage,
    from_storage,
    padded_shape,
    to_storage,
)
from tinydl.ir.graph import Graph, Node, Value


def split_wide_products(nodes, const, types, consts: dict, most: int) -> list:
    """`nodes` with each MatMul (2-D constant B) and Gemm (constant B) whose B holds more than
    `most` bytes as float32 replaced by products of blocks of B's output columns (and of C's,
    for a Gemm), each within `most`, and a Concat of them along the last axis; the blocks go
    into `consts`, their outputs into `types`. Returns the nodes and the blocks' outputs."""
    out, parts = [], set()
    for node in nodes:
        product = node.op in ("MatMul", "Gemm") and len(node.inputs) > 1
        b = const(node.inputs[1]) if product else None
        y = node.outputs[0]
        if b is None or b.ndim != 2 or 4 * b.size <= most or types.get(y) is None:
            out.append(node)
            continue
        trans = node.op == "Gemm" and bool(node.attrs.get("transB", 0))
        n = b.shape[0] if trans else b.shape[1]
        blocks = math.ceil(4 * b.size / most)
        width = math.ceil(math.ceil(n / blocks) / 16) * 16
        c = const(node.inputs[2]) if node.op == "Gemm" and len(node.inputs) > 2 else None
        ys = []
        for i, lo in enumerate(range(0, n, width)):
            hi = min(n, lo + width)
            key = f"{node.name or y}:cols{i}"
            consts[f"{key}:B"] = np.ascontiguousarray(b[lo:hi] if trans else b[:, lo:hi])
            ins = [node.inputs[0], f"{key}:B"]
            if c is not None and c.ndim >= 1 and c.shape[-1] == n:
                consts[f"{key}:C"] = np.ascontiguousarray(c[..., lo:hi])
                ins.append(f"{key}:C")
            elif len(node.inputs) > 2:
                ins.append(node.inputs[2])
            part = f"{key}:Y"
            t = types[y]
            types[part] = Value(part, t.dtype, (*t.shape[:-1], hi - lo))
            out.append(Node(node.op, ins, [part], dict(node.attrs), name=key))
            ys.append(part)
        out.append(Node("Concat", ys, [y], {"axis": -1}, name=f"{node.name or y}:concat"))
        parts.update(ys)
    return out, parts


def planned_copy(node: Node, **meta) -> Node:
    """A copy of `node` with `meta` added (a plan's rewrites leave the graph's nodes alone)."""
    return Node(
        node.op, list(node.inputs), list(node.outputs), dict(node.attrs), name=node.name,
        meta={**node.meta, **meta},
    )  # fmt: skip


@functools.cache
def _helpers() -> tuple[tuple[str, str], ...]:
    """common.wgsl's functions in order: (name, text with the comment lines before it). A
    function starts at a line `fn NAME(` and ends on that line when it ends with "}", else at
    the next line that starts with "}"."""
    blocks: list[tuple[str, str]] = []
    pending: list[str] = []
    name = None
    for line in render("common.wgsl").splitlines(keepends=True):
        pending.append(line)
        if name is None:
            m = re.match(r"fn (\w+)\(", line)
            if m is None:
                continue
            name = m.group(1)
            if not line.rstrip().endswith("}"):
                continue
        elif not line.startswith("}"):
            continue
        blocks.append((name, "".join(pending)))
        pending, name = [], None
    return tuple(blocks)


def kernel_source(template: str, f16: bool, **params) -> str:
    """`template` rendered with the header, keeping only the common.wgsl helpers it calls
    (directly or through another helper): a shader module is made (naga reads and checks the
    WGSL) for every pipeline, at each start, the unused helpers too (MobileNetV3-small's 58
    modules: 44 -> 30 ms on one core of the 2-core VM, tools/bench_shader_modules.py)."""
    source = render(template, header=_HEADER_HERE, **params)
    if _HEADER_HERE not in source:
        return source
    needs = _helper_needs()
    used: set[str] = set()
    for name in set(_CALL.findall(source)) & needs.keys():  # (one pass over the source)
        used |= needs[name]
    kept = ("enable f16;\n" if f16 else "") + "".join(t for n, t in _helpers() if n in used)
    return source.replace(_HEADER_HERE, kept, 1)


# An identifier called: `name(`.
_CALL = re.compile(r"\b(\w+)\(")


@functools.cache
def _helper_needs() -> dict[str, frozenset[str]]:
    """Each common.wgsl helper with the helpers it needs: itself and those it calls, directly
    or through another (one pass over each source then finds what it keeps; a search per
    helper per source took 0.11 s of MobileNetV3-small's compile on the 2-core VM)."""
    blocks = dict(_helpers())
    calls = {n: set(_CALL.findall(t)) & blocks.keys() for n, t in blocks.items()}
    needs = {}
    for name in blocks:
        seen, todo = {name}, [name]
        while todo:
            for callee in calls[todo.pop()] - seen:
                seen.add(callee)
                todo.append(callee)
        needs[name] = frozenset(seen)
    return needs


# Where a template's header goes, for kernel_source to fill in.
_HEADER_HERE = "\0header\0"


@dataclass
class Dispatch:
    pipeline: Any
    args: list  # value names (str: the buffer; TexRef: the texture), Storage, samplers, textures
    grid: tuple[int, int, int]
    label: str
    bind_groups: dict = field(default_factory=dict)
    node: str = ""
    roots: list | None = None  # the buffers its value names resolve to (made at first use)
    source: str = ""  # the WGSL the pipeline is compiled from (a snapshot keeps this instead)
    layout: tuple | None = None  # (pipeline, its bind group layout), got at first use

    def __getstate__(self) -> dict:
        return {**self.__dict__, "pipeline": None, "bind_groups": {}, "roots": None, "layout": None}


@dataclass
class Pass:
    """One render pass of a Draw: attachments = output layers s0..s0+a-1 of each image."""

    pipeline: Any
    args: list
    s0: int
    a: int
    bind_groups: dict = field(default_factory=dict)
    roots: list | None = None
    layout: tuple | None = None  # (pipeline, its bind group layout), got at first use


@dataclass
class Draw:
    """A node drawn into texture value `target`: its passes, once per image of the batch."""

    target: TexRef
    passes: list
    label: str
    node: str = ""

    @property
    def args(self) -> list:
        return [a for p in self.passes for a in p.args] + [self.target]


@dataclass
class TexInfo:
    """A value held as a texture array: (N, C, H, W), W x H texels, N x ceil(C/4) layers."""

    shape: tuple[int, int, int, int]
    format: str

    @property
    def layers(self) -> int:
        return self.shape[0] * slices(self.shape[1])


class Build(planned.Build):
    def dispatch(self, template: str, bindings: list, grid, label: str = "", **params) -> None:
        label = label or self.label
        source = kernel_source(template, self.ctx.has_f16, label=label, **params)
        pipeline = self.ctx.pipeline_soon(source, label)  # resolved in Plan.finish
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        limit = int(self.ctx.limits.get("max-compute-workgroups-per-dimension", 65535))
        if max(grid) > limit:
            raise ValueError(f"{self.label}: grid {grid} exceeds {limit} workgroups per dimension")
        args = [self._resolve(a) for a in bindings]
        self.plan.steps.append(
            Dispatch(pipeline, args, grid, label, node=self.node.name, source=source)
        )

    def _resolve(self, arg):
        """A value name stays a name unless it is a constant (a weight, or a value the plan
        computed from shapes): then its uploaded storage. A value drawn into a texture is
        copied into its buffer first (once)."""
        if isinstance(arg, str):
            self.plan.as_buffer(arg)
        if isinstance(arg, str) and arg not in self.plan.input_names:
            value = self.plan.const(arg)
            if value is not None:
                stype = self.plan.const_info(value).stype
                return self.plan.owner.constant(("value", arg, stype), to_storage(value, stype))
        return arg

    def upload(self, key, array: np.ndarray, stype: str, uniform: bool = False) -> Storage:
        """Upload a constant (packed weights, tables) once per compiled kernel; `uniform` puts
        it in a uniform buffer (constant memory) instead of a storage buffer."""
        return self.plan.owner.constant(
            (self.node.name, key, stype, uniform), to_storage(array, stype), uniform=uniform
        )

    # -- the render path (kernels/fragment.py) ---------------------------------------------------
    def texture(self, name: str) -> TexRef:
        """Value `name` as a texture binding (drawn into one first when it is a buffer)."""
        return self.plan.as_texture(name)

    def max_attachments(self, info: Info) -> int:
        return self.plan.attachments(TEXTURE_FORMATS.get(info.stype, "rgba32float"))

    def filterable(self, info: Info) -> bool:
        """Whether a texture of this value may be sampled (rgba32float needs a feature)."""
        fmt = TEXTURE_FORMATS.get(info.stype, "rgba32float")
        return fmt != "rgba32float" or "float32-filterable" in self.ctx.features

    def sampler(self, linear: bool = False):
        return self.ctx.sampler(linear)

    def weight_texture(self, key, texels: np.ndarray, width: int):
        """Constants as a rgba32float texture, `width` texels a row, uploaded once."""
        rows = -(-len(texels) // width)
        data = np.zeros((rows * width, 4), np.float32)
        data[: len(texels)] = texels
        return self.plan.owner.constant(
            (self.node.name, key, "texture"), data.reshape(rows, width, 4), texture=True
        )

    def draw(self, template: str, bindings: list, out: str, s0: int, a: int, **params) -> None:
        """One render pass (per image) drawing output slices s0..s0+a-1 of value `out`."""
        bindings = [self._resolve(x) if isinstance(x, str) else x for x in bindings]
        self.plan.draw(self.label, self.node.name, template, bindings, out, s0, a, **params)


class _Texture:
    """A texture of the plan with its views: the whole array (bindings) and each layer (render
    targets)."""

    def __init__(self, texture, layers: int):
        self.texture = texture
        self.view = texture.create_view(dimension="2d-array", array_layer_count=layers)
        self._layers: dict[int, Any] = {}

    def layer(self, i: int):
        view = self._layers.get(i)
        if view is None:
            view = self._layers[i] = self.texture.create_view(
                dimension="2d", base_array_layer=i, array_layer_count=1
            )
        return view


class WeightTexture:
    """Constants held in a texture (the "texture" weight mode)."""

    def __init__(self, ctx, data: np.ndarray):
        rows, width, _ = data.shape
        self.texture = ctx.device.create_texture(
            size=(width, rows, 1),
            format="rgba32float",
            usage=ctx.wgpu.TextureUsage.TEXTURE_BINDING | ctx.wgpu.TextureUsage.COPY_DST,
        )
        ctx.queue.write_texture(
            {"texture": self.texture},
            np.ascontiguousarray(data),
            {"bytes_per_row": width * 16, "rows_per_image": rows},
            (width, rows, 1),
        )
        self.view = self.texture.create_view()


class Plan(planned.Plan):
    build_class = Build
    registry = REGISTRY

    def __init__(self, owner, inputs, shaders: str | None = None, choice: dict | None = None):
        mode = shaders or owner.extra.get("shaders", "compute")
        if mode not in SHADER_MODES:
            raise ValueError(f"shaders must be one of {SHADER_MODES}, got {mode!r}")
        self.shaders = mode
        early_submit(owner.extra.get("early_submit", EARLY_SUBMIT))  # refused before building
        # node name -> "fragment" | "compute" (auto's measured choice; see shaders.py)
        self.choice = choice
        self.tex: dict[str, TexInfo] = {}  # values held as textures
        # value root -> (Concat output, byte offset): made in place in its slice (place_concat)
        self.places: dict[str, tuple[str, int]] = {}
        self.drawn: set[str] = set()  # ... of them, made by fragment kernels
        self.buffered: set[str] = set()  # drawn values also copied into their buffer
        self.feeds = inputs
        self.auto: dict | None = None  # auto's measurements (shaders.py)
        if mode == "auto" and choice is None:
            from tinydl.backends.webgpu.shaders import choose

            self.auto = choose(type(self), owner, inputs)
            self.choice = self.auto["choice"]
        super().__init__(owner, inputs)

    def build(self, node) -> None:
        if node.meta.get("shader") != "fragment":
            super().build(node)
        elif "u8_in" in node.meta:
            self.to_texture(node.outputs[0], node.inputs[0], "nhwc-u8", node.name)
        elif "u8_out" in node.meta:
            self.from_texture(node.inputs[0], node.outputs[0], "nhwc-u8", node.name)
        else:
            FRAGMENT[node.op].build(self.build_class(self, node))

    def finish(self, bind: bool = False) -> None:
        """Give each step the pipeline compiled for it on a thread (while the plan was built,
        or read back), in the order they are made; with `bind` (a plan read back: its buffers
        allocated), each step that binds none of a run's inputs and outputs gets its bind group
        meanwhile, so the first run does not make them (72 of MobileNetV3-small's 74; the
        calling thread only waits here)."""
        for name in self.output_names:
            self.as_buffer(name)
        waiting: dict[Any, list[Dispatch]] = {}
        for step in self.steps:
            if isinstance(step, Dispatch) and isinstance(step.pipeline, concurrent.futures.Future):
                waiting.setdefault(step.pipeline, []).append(step)
            elif bind and isinstance(step, Dispatch):
                self._bind_ahead(step)
        for future in concurrent.futures.as_completed(waiting):
            for step in waiting[future]:
                step.pipeline = future.result()
                if bind:
                    self._bind_ahead(step)

    def _bind_ahead(self, step: Dispatch) -> None:
        if all(r in self.buffers for r in self._roots(step)):
            self._bind_group(step, self.buffers)

    def _roots(self, item) -> list[str]:
        """The buffers a dispatch's or render pass's value names resolve to (found once)."""
        if item.roots is None:
            item.roots = [self.root(b) for b in item.args if isinstance(b, str)]
        return item.roots

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for name in ("textures", "units", "_submit_points", "_sequences", "_step_roots"):
            state.pop(name, None)
        return state

    def restored(self) -> None:
        """Buffers, the (compute path's) pass structure and every pipeline again, compiled on
        the context's threads (the driver's shader cache has them after a first start)."""
        super().restored()
        self._allocate_textures()
        for step in self.steps:
            step.pipeline = self.ctx.pipeline_soon(step.source, step.label)
        self.__dict__.pop("_sequences", None)
        self.finish(bind=True)

    @property
    def keepable(self) -> bool:
        """Compute dispatches only: the render path's textures and passes are not kept."""
        return not self.tex and all(isinstance(s, Dispatch) and s.source for s in self.steps)

    def rewrite(self, body, keep, shape_of, types):
        def direct(n) -> bool:  # conv_direct runs the convolution (its epilogues, its layouts)
            return direct_ok(n, body.initializers.get(n.inputs[1]))

        # A product whose constant B the adapter cannot bind in one piece, as products of
        # column blocks of it and a Concat of theirs.
        split, parts = split_wide_products(
            body.nodes, self.const, types, self.consts, int(0.9 * self.ctx.max_binding)
        )
        if parts:
            body = Graph(list(body.inputs), list(body.outputs), split, body.initializers)
            known = shape_of

            def shape_of(v):
                return types[v].shape if v in parts else known(v)

        nodes = fuse(body, keep, shape_of, direct)
        # A residual Add (and the activation after it, and the shortcut's Pad of channels and
        # MaxPool) into conv_direct's epilogue; Winograd, opt-in, has no residual epilogue.
        if not self.owner.extra.get("winograd"):
            shortcuts = self.owner.extra.get("fold_shortcuts", True)
            nodes = fuse_residuals(
                nodes, keep, shape_of, body,
                ok=direct, slopes=True, hoist=True, pads=shortcuts, pools=shortcuts,
            )  # fmt: skip
        # A depthwise convolution into the 1x1 convolution after it (extra["fuse_depthwise"] =
        # False keeps them apart, "all" fuses every pair: for comparisons).
        rule = self.owner.extra.get("fuse_depthwise", True)
        if rule not in (True, False, "all"):
            raise ValueError(f'fuse_depthwise must be True, False or "all", got {rule!r}')
        if rule:
            nodes = fuse_depthwise(
                nodes, keep, shape_of, body,
                ok=lambda pw, dw: direct(pw)
                and (rule == "all" or math.prod(shape_of(pw.outputs[0])[2:]) >= DW_MIN_PIXELS),
            )  # fmt: skip
        # A depthwise convolution into the convolution before it, where that one's kernel
        # holds a whole image of its channels (extra["fuse_depthwise_after"] = False: apart).
        after = self.owner.extra.get("fuse_depthwise_after", True)
        if after not in (True, False):
            raise ValueError(f"fuse_depthwise_after must be True or False, got {after!r}")
        if after:
            nodes = fuse_depthwise_after(
                nodes, keep, shape_of, body,
                ok=lambda p, dw: len(shape_of(p.outputs[0])) == 4
                and after_ok(
                    p, body.initializers.get(p.inputs[1]), math.prod(shape_of(p.outputs[0])[2:])
                ),
            )  # fmt: skip
        nodes = fuse_channel_norms(nodes, keep, shape_of)
        # The Transposes between NHWC and NCHW around convolutions (TensorFlow models' input
        # and heads) into the convolution's loads and stores; after the channel norms, whose
        # kernel takes the Transposes around a LayerNormalization. Compute path only: the
        # render path folds a frame's Cast and Transpose into its texture transition.
        if self.owner.extra.get("fuse_channels_last", True) and self.shaders == "compute":
            nodes = fuse_channels_last(nodes, keep, shape_of, direct)
        # Before the elementwise runs, which would take the scores' scale and mask.
        nodes = fuse_attention(nodes, keep, shape_of, types, self.const, MAX_DIM)
        # extra["fuse_elementwise"] = False (TINYDL_WEBGPU_ELEMENTWISE=off): one dispatch per
        # elementwise op, for comparisons.
        if self.owner.extra.get("fuse_elementwise", True):
            nodes = fuse_elementwise(nodes, keep, body, types)
        if self.shaders != "compute":
            nodes = self._mark_fragment(nodes, keep, shape_of, types)
        return nodes

    # -- the render path -----------------------------------------------------------------------
    def _mark_fragment(self, nodes, keep, shape_of, types) -> list:
        """The nodes drawn as fragment shaders get meta["shader"] = "fragment": every one a
        fragment kernel takes ("fragment"), or those `choice` (auto's measurement) picks; the
        Cast and Transpose that turn a u8 NHWC frame into a float NCHW texture (or back) fold
        into the transition step."""

        def shape(v):
            c = self.const(v)
            if c is not None:
                return tuple(np.shape(c))
            try:
                return tuple(shape_of(v))
            except (KeyError, TypeError):
                return None

        def dtype(v):
            c = self.const(v)
            if c is not None:
                return np.asarray(c).dtype.name
            t = self.feeds.get(v) or types.get(v)
            return None if t is None else t.dtype

        most = int(self.ctx.limits.get("max-texture-dimension-2d", 8192))
        layers = int(self.ctx.limits.get("max-texture-array-layers", 256))

        def fits(v) -> bool:
            s = shape(v)
            return (
                s is not None
                and len(s) == 4
                and max(s[2:]) <= most
                and s[0] * slices(s[1]) <= layers
            )

        chosen = set()
        self.refused: dict[str, str] = {}
        for node in nodes:
            reason = why_not(node, shape, dtype, self.const)
            if reason is None and not all(fits(v) for v in [node.inputs[0], node.outputs[0]]):
                reason = "over the adapter's texture size"
            if reason is None and self.choice is not None:
                reason = None if self.choice.get(node.name) == "fragment" else "measured slower"
            if reason is None:
                chosen.add(node.name)
            else:
                self.refused[node.name] = reason
        producers = {o: n for n in nodes for o in n.outputs if o}
        readers: dict[str, list] = {}
        for n in nodes:
            for i in n.inputs:
                if i:
                    readers.setdefault(i, []).append(n)

        def wanted(name: str) -> bool:  # auto's choice rules the folds too
            return self.choice is None or self.choice.get(name) == "fragment"

        out, dropped = [], set()
        for node in nodes:
            if node.name in chosen:
                node = planned_copy(node, shader="fragment")
            elif node.op == "Transpose" and list(node.attrs.get("perm", [])) == [0, 3, 1, 2]:
                cast = producers.get(node.inputs[0])
                users = readers.get(node.outputs[0], [])
                if (
                    cast is not None
                    and cast.op == "Cast"
                    and dtype(cast.inputs[0]) == "uint8"
                    and dtype(node.outputs[0]) in ("float32", "float16")
                    and len(readers.get(cast.outputs[0], [])) == 1
                    and cast.outputs[0] not in keep
                    and node.outputs[0] not in keep
                    and users
                    and all(u.name in chosen for u in users)
                    and wanted(node.name)
                ):
                    dropped.add(cast.name)
                    node = planned_copy(node, shader="fragment", u8_in=True)
                    node.inputs = [cast.inputs[0]]
            elif node.op == "Cast" and node.attrs.get("to") == 2:
                tr = producers.get(node.inputs[0])
                if (
                    tr is not None
                    and tr.op == "Transpose"
                    and list(tr.attrs.get("perm", [])) == [0, 2, 3, 1]
                    and tr.inputs[0] in producers
                    and producers[tr.inputs[0]].name in chosen
                    and len(readers.get(tr.outputs[0], [])) == 1
                    and tr.outputs[0] not in keep
                    and wanted(node.name)
                ):
                    dropped.add(tr.name)
                    node = planned_copy(node, shader="fragment", u8_out=True)
                    node.inputs = [tr.inputs[0]]
            out.append(node)
        return [n for n in out if n.name not in dropped]

    def attachments(self, fmt: str) -> int:
        """Color attachments per render pass for textures of `fmt`."""
        most = int(self.ctx.limits.get("max-color-attachments", 4))
        per_sample = int(self.ctx.limits.get("max-color-attachment-bytes-per-sample", 32))
        most = min(most, per_sample // TEXEL_BYTES[fmt])
        return max(1, min(most, int(self.owner.extra.get("attachments", most))))

    def tex_value(self, name: str, shape: tuple, stype: str) -> None:
        """A texture only one node's draws use (a value of no graph node)."""
        self.tex[name] = TexInfo(tuple(shape), TEXTURE_FORMATS.get(stype, "rgba32float"))

    def _tex_info(self, name: str) -> TexInfo:
        info = self.tex.get(name)
        if info is None:
            v = self.infos[name]
            if len(v.shape) != 4:
                raise ValueError(f"value '{name}' {v.shape} is not 4-D: it cannot be a texture")
            info = self.tex[name] = TexInfo(
                tuple(v.shape), TEXTURE_FORMATS.get(v.stype, "rgba32float")
            )
        return info

    def draw(self, label, node, template, bindings, out, s0, a, **params) -> None:
        info = self._tex_info(out)
        self.drawn.add(out)
        source = kernel_source(template, self.ctx.has_f16, label=label, S0=s0, A=a, **params)
        pipeline = self.ctx.render_pipeline(source, [info.format] * a, label)
        step = self.steps[-1] if self.steps else None
        if not (isinstance(step, Draw) and step.node == node and step.target.name == out):
            step = Draw(TexRef(out), [], label, node)
            self.steps.append(step)
        step.passes.append(Pass(pipeline, list(bindings), s0, a))

    def as_texture(self, name: str) -> TexRef:
        if name not in self.tex:
            self.to_texture(name, name, "nchw", "")
        return TexRef(name)

    def to_texture(self, out: str, src: str, source: str, node: str) -> None:
        """The step that draws buffer value `src` (NCHW, or a u8 NHWC frame) into texture `out`."""
        info = self._tex_info(out)
        n, c, h, w = info.shape
        label = f"to texture ({source}) {out}"
        st = self.infos[src].stype if src in self.infos else "f32"
        for s0, a in _passes(slices(c), self.attachments(info.format)):
            self.draw(
                label, node or f"to texture {out}", "texture_in.wgsl", [src], out, s0, a,
                source=source, st=st, C=c, H=h, W=w,
            )  # fmt: skip

    def as_buffer(self, name: str) -> None:
        """Copy a drawn value into its buffer (once), for a compute kernel or the caller."""
        root = self.root(name)
        if root in self.drawn and root not in self.buffered:
            self.buffered.add(root)
            self.from_texture(root, root, "nchw", "")

    def from_texture(self, src: str, out: str, target: str, node: str) -> None:
        info = self._tex_info(src)
        n, c, h, w = info.shape
        total = n * c * h * w
        units = -(-total // 4) if target == "nhwc-u8" else total
        g = kernel_grid(units, 256)
        label = f"from texture ({target}) {src}"
        source = kernel_source(
            "texture_out.wgsl", self.ctx.has_f16, label=label, target=target,
            C=c, H=h, W=w, C4=slices(c), wg=256, gx=g[0], units=units, total=total,
            ot=self.infos[out].stype,
        )  # fmt: skip
        pipeline = self.ctx.pipeline(source, label)
        self.steps.append(Dispatch(pipeline, [TexRef(src), out], g, label, node=node or label))

    @classmethod
    def holds(cls, dtype: str) -> bool:
        return dtype in LOGICAL

    def value_info(self, shape, dtype, is_output) -> Info:
        f16 = self.precision == "fp16" and self.ctx.has_f16
        return Info(
            shape, dtype, "f16" if f16 and dtype == "float32" and not is_output else LOGICAL[dtype]
        )

    def const_info(self, value) -> Info:
        return Info(tuple(value.shape), value.dtype.name, LOGICAL[value.dtype.name])

    def nbytes(self, info: Info) -> int:
        return math.prod(padded_shape(info.shape, info.layout)) * STORAGE_TYPES[info.stype].itemsize

    def _allocate(self) -> None:
        # Every value must fit one storage binding (a tensor over the limit is refused, named).
        for step in self.steps:
            for a in step.args:
                if isinstance(a, str) and self.root(a) not in self.input_names:
                    info = self.infos[self.root(a)]
                    self.ctx.check_size(self.nbytes(info), f"value '{self.root(a)}' {info.shape}")
        super()._allocate()
        self._allocate_textures()

    def _allocate_textures(self) -> None:
        """Every texture value gets a texture; values whose lives do not overlap share one of
        the same size and format (a value ending at a step is not reused by one the same step
        draws: a pass cannot read and write one texture)."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for a in step.args:
                if isinstance(a, TexRef):
                    first.setdefault(a.name, i)
                    last[a.name] = i
        self.textures: dict[str, Any] = {}
        free: dict[tuple, list] = {}
        ending: dict[int, list[str]] = {}
        for name, i in last.items():
            ending.setdefault(i, []).append(name)
        for i in range(len(self.steps)):
            for name, f in first.items():
                if f != i:
                    continue
                info = self.tex[name]
                n, c, h, w = info.shape
                key = (w, h, info.layers, info.format)
                if free.get(key):
                    self.textures[name] = free[key].pop()
                else:
                    texture = self.ctx.create_texture(w, h, info.layers, info.format, name)
                    self.textures[name] = _Texture(texture, info.layers)
            for name in ending.get(i, []):
                info = self.tex[name]
                n, c, h, w = info.shape
                free.setdefault((w, h, info.layers, info.format), []).append(self.textures[name])
        # Consecutive dispatches share a compute pass; each draw is its render passes.
        self.units: list[list] = []
        for step in self.steps:
            if isinstance(step, Draw) or not self.units or isinstance(self.units[-1][0], Draw):
                self.units.append([step])
            else:
                self.units[-1].append(step)

    def new_buffer(self, nbytes: int) -> Storage:
        return Storage(
            self.ctx, self.ctx.create_buffer(max(256, (nbytes + 255) // 256 * 256)), pooled=False
        )

    def buffer_size(self, buffer: Storage) -> int:
        return buffer.buffer.size

    # -- layouts -------------------------------------------------------------------------------
    def arrange(self, keep, types) -> None:
        """nc4hw4 (packed-4) for a value made and used only by kernels that take it (direct
        convs): neighbouring pixels' vec4 of channels are neighbours in memory, so a tile's
        loads and stores are contiguous (ESPCN's first layer: 0.11 -> 0.055 ms on an H200
        against N,H,W,C4 channel-last vec4)."""
        users: dict[str, list[tuple]] = {}
        for node in self.nodes:
            for i, name in enumerate(node.inputs):
                if name:
                    users.setdefault(name, []).append((node, i))
        for node in self.nodes:
            kd = REGISTRY[node.op]
            if kd.packed4 is None or not kd.packed4(node, self) or {"d2s", "nhwc"} & set(node.meta):
                continue
            # A depthwise convolution fused after the conv (fuse_depthwise_after) is a second
            # output of the same kernel, stored either way.
            for name in node.outputs if "dw_after" in node.meta else node.outputs[:1]:
                readers = users.get(name, [])
                if name in keep or not readers:
                    continue
                if all(
                    i == 0
                    and REGISTRY[u.op].packed4 is not None
                    and REGISTRY[u.op].packed4(u, self)
                    for u, i in readers
                ):
                    self.infos[name].layout = "nc4hw4"
        # Values a fragment kernel reads or draws cross as NCHW (texture_in/texture_out.wgsl).
        for node in self.nodes:
            if node.meta.get("shader") == "fragment":
                for name in [*node.inputs, *node.outputs]:
                    if name in self.infos:
                        self.infos[name].layout = "nchw"

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: dict[str, GPUTensor], host: Collection[str], timing: str | None):
        ctx = self.ctx
        t0 = time.perf_counter()
        env: dict[str, Storage] = dict(self.buffers)
        for name in self.input_names:
            env[name] = feeds[name].storage
        for r in self.output_roots:
            env[r] = Storage(ctx, ctx.acquire(self.nbytes(self.infos[r])))
        # One thread at a time records and submits (threads sharing a session, or sessions
        # sharing the device); waiting for read-backs happens outside the lock.
        with ctx.queue_lock:
            with ctx.guard("running a model"):
                encoder = ctx.device.create_command_encoder()
                queries = None
                if timing and ctx.has_timestamps:
                    count = 2 * (len(self.steps) if timing == "ops" else 1)
                    queries = ctx.device.create_query_set(type="timestamp", count=max(count, 2))
                encoder = self._encode(encoder, env, queries, timing)
                t_encode = time.perf_counter()
                staging = {}
                u = ctx.wgpu.BufferUsage
                if host:
                    # The compute goes first, on its own; the read-back copies follow in a second
                    # submission. On an H200 (Vulkan) the 8.3 MB output of ESPCN x3 then comes
                    # back 0.2 ms sooner than when the copy ends the compute's command buffer
                    # (two command buffers in one submission do not help).
                    ctx.queue.submit([encoder.finish()])
                    encoder = ctx.device.create_command_encoder()
                # Every output bound for the host goes into one staging buffer, at 256-byte
                # offsets, so the run maps one buffer however many outputs it has.
                total = 0
                for name in host:
                    if name in self.const_outputs:
                        continue  # known when planning: returned from the host copy below
                    staging[name] = total
                    total += -(-self.nbytes(self.infos[name]) // 256) * 256
                if staging:
                    buf = ctx.acquire(total, u.MAP_READ | u.COPY_DST)
                    for name, offset in staging.items():
                        nbytes = (self.nbytes(self.infos[name]) + 3) // 4 * 4
                        held = env[self.root(name)]
                        encoder.copy_buffer_to_buffer(held.buffer, held.offset, buf, offset, nbytes)
                if queries is not None:
                    n = queries.count
                    resolved = ctx.device.create_buffer(
                        size=8 * n, usage=u.QUERY_RESOLVE | u.COPY_SRC
                    )
                    encoder.resolve_query_set(queries, 0, n, resolved, 0)
                    ts_buf = ctx.acquire(8 * n, u.MAP_READ | u.COPY_DST)
                    encoder.copy_buffer_to_buffer(resolved, 0, ts_buf, 0, 8 * n)
                ctx.queue.submit([encoder.finish()])
        t_submit = time.perf_counter()
        results: dict[str, Any] = {}
        mapped = None
        for name in self.output_names:
            if name in self.const_outputs:
                value = np.asarray(self.const(self.root(name)))
                if name in host:
                    results[name] = value.copy()
                else:
                    info = self.const_info(value)
                    results[name] = GPUTensor(
                        self.const_outputs[name], info.shape, info.dtype, info.stype
                    )
                continue
            info = self.infos[name]
            t = GPUTensor(env[self.root(name)], info.shape, info.dtype, info.stype, info.layout)
            if name in staging:
                if mapped is None:
                    mapped = ctx.map_read(buf, total)  # unmapped once every output is gone
                offset = staging[name]
                results[name] = from_storage(mapped[offset : offset + self.nbytes(info)], t)
            else:
                results[name] = t
        self.owner.last_host = {
            "encode_s": t_encode - t0,  # buffers for the outputs, the command buffer recorded
            "submit_s": t_submit - t_encode,  # read-back copies recorded, finish, submit
            "read_s": time.perf_counter() - t_submit,  # the wait for the GPU, outputs mapped
        }
        # Timestamps are read later (WebGPUKernel.timings), so timing does not add a wait.
        pending = None
        if queries is not None:
            labels = [s.label for s in self.steps] if timing == "ops" else ["total"]
            pending = (ts_buf, 8 * queries.count, labels)
        return results, pending

    def _encode(self, encoder, env: dict[str, Storage], queries, timing):
        """Record every step: consecutive dispatches in one compute pass, each draw as its
        render passes; timestamps around each step ("ops") or around all of them. Without
        timestamps, the steps recorded so far are submitted at each of `submit_points()` (the
        GPU starts on them while the rest is recorded). Returns the encoder recording last."""
        if queries is None and len(self.units) == 1 and isinstance(self.steps[0], Dispatch):
            return self._encode_dispatches(encoder, env)
        units = [[s] for s in self.steps] if timing == "ops" else self.units
        points = self.submit_points() if queries is None else ()
        at = 0  # steps recorded so far
        for u, unit in enumerate(units):
            begin = end = None
            if queries is not None:
                if timing == "ops":
                    begin, end = 2 * u, 2 * u + 1
                else:
                    begin = 0 if u == 0 else None
                    end = 1 if u == len(units) - 1 else None
            if at in points:
                encoder = self._submit_early(encoder)
            if isinstance(unit[0], Draw):
                self._draw(encoder, unit[0], env, queries, begin, end)
                at += 1
                continue
            cp = encoder.begin_compute_pass(timestamp_writes=_writes(queries, begin, end))
            # wgpu-native's three entry points called directly: about 2 us a dispatch against
            # 9-16 through wgpu-py's wrappers (which check for errors per call; an encoding
            # error still surfaces at finish, through wgpu-py)
            set_pipeline, set_bind_group, dispatch, null = _native_pass()
            handle = cp._internal
            for i, step in enumerate(unit):
                if i and at in points:  # the pass so far goes to the GPU; a new one goes on
                    cp.end()
                    encoder = self._submit_early(encoder)
                    cp = encoder.begin_compute_pass()
                    handle = cp._internal
                set_pipeline(handle, step.pipeline._internal)
                set_bind_group(handle, 0, self._bind_group(step, env)._internal, 0, null)
                dispatch(handle, *step.grid)
                at += 1
            cp.end()
        return encoder

    def _encode_dispatches(self, encoder, env: dict[str, Storage]):
        """`_encode` for a plan of dispatches only, untimed: the run's dispatches as native
        handles (pipeline, bind group, grid), made once per set of buffers the run binds, then
        wgpu-native's three calls each, submitted at `submit_points()` — without looking up
        each step's bind group, pipeline and grid again in every run."""
        sequence = self._sequence(env)
        set_pipeline, set_bind_group, dispatch, null = _native_pass()
        start = 0
        for end in [*sorted(self.submit_points()), len(sequence)]:
            if start:
                encoder = self._submit_early(encoder)
            cp = encoder.begin_compute_pass()
            handle = cp._internal
            for pipeline, bind_group, x, y, z, _ in sequence[start:end]:
                set_pipeline(handle, pipeline)
                set_bind_group(handle, 0, bind_group, 0, null)
                dispatch(handle, x, y, z)
            cp.end()
            start = end
        return encoder

    def _sequence(self, env: dict[str, Storage]) -> list[tuple]:
        """(pipeline, bind group, x, y, z, the bind group object) of every step, as wgpu-native
        handles, for the buffers `env` holds (keyed by their serials, as `_bind_group` is; the
        last SEQUENCES sets are kept)."""
        roots = self.__dict__.get("_step_roots")
        if roots is None:
            roots = self._step_roots = sorted({r for s in self.steps for r in self._roots(s)})
        key = tuple([env[r].serial for r in roots])
        sequences = self.__dict__.setdefault("_sequences", {})
        sequence = sequences.pop(key, None)
        if sequence is None:
            sequence = []
            for step in self.steps:
                bind_group = self._bind_group(step, env)
                handles = (step.pipeline._internal, bind_group._internal, *step.grid)
                sequence.append((*handles, bind_group))
            while len(sequences) >= SEQUENCES:
                sequences.pop(next(iter(sequences)))
        sequences[key] = sequence  # the most recent last
        return sequence

    def _submit_early(self, encoder):
        """Submit what `encoder` recorded; a new encoder for the rest of the run. Queue order
        keeps the steps in order: wgpu puts the barriers a later submission needs before it."""
        self.ctx.queue.submit([encoder.finish()])
        return self.ctx.device.create_command_encoder()

    def submit_points(self) -> frozenset[int]:
        """The step indices before which a run submits the steps recorded so far: the first
        after `first` steps, each later one `growth` times as many steps on (backend option
        "early_submit": "FIRST,GROWTH", or 0 for one submission a run). The GPU then works
        on the first steps while the host records the rest: recording and submitting cost
        wgpu-native a few microseconds a dispatch, as much as many small models' GPU work."""
        points = getattr(self, "_submit_points", None)
        if points is None:
            first, growth = early_submit(self.owner.extra.get("early_submit", EARLY_SUBMIT))
            cuts, at, size, n = [], 0, first, len(self.steps)
            while first and at + size + first <= n:  # the last submission: at least `first`
                at += size
                cuts.append(at)
                size = max(1, round(size * growth))
            points = self._submit_points = frozenset(cuts)
        return points

    def _bind_group(self, item, env: dict[str, Storage]):
        """The bind group of a dispatch or a render pass, made once per set of buffers: the key
        is the serials of the value buffers it binds (constants and textures never change)."""
        key = tuple([env[r].serial for r in self._roots(item)])
        bind_group = item.bind_groups.get(key)
        if bind_group is None:
            entries = []  # (buffer, offset, size), or (None, sampler or texture view)
            for b in item.args:
                offset = 0
                if isinstance(b, str):
                    b, offset = env[self.root(b)], self.offset(b)
                if isinstance(b, Storage):  # (a constant may share its buffer)
                    entries.append((b.buffer, offset + b.offset, b.size))
                elif isinstance(b, TexRef):
                    entries.append((None, self.textures[b.name].view))
                elif isinstance(b, WeightTexture):
                    entries.append((None, b.view))
                else:
                    entries.append((None, b))  # a sampler
            if len(item.bind_groups) > 16:
                item.bind_groups.clear()
            layout = item.layout
            if layout is None or layout[0] is not item.pipeline:
                layout = item.layout = (item.pipeline, item.pipeline.get_bind_group_layout(0))
            bind_group = _native_bind_group()(self.ctx.device, layout[1], entries)
            item.bind_groups[key] = bind_group
        return bind_group

    # -- Concat in place ------------------------------------------------------------------------
    def root(self, name: str) -> str:
        """The value whose buffer holds `name`: through views (aliases) and through the Concat
        outputs that values are made in place in."""
        r = self.alias.get(name, name)
        while r in self.places:
            base = self.places[r][0]
            r = self.alias.get(base, base)
        return r

    def offset(self, name: str) -> int:
        """The byte offset of `name` in the buffer of `root(name)`."""
        r, offset = self.alias.get(name, name), 0
        while r in self.places:
            base, at = self.places[r]
            r, offset = self.alias.get(base, base), offset + at
        return offset

    def place_concat(self, b, parts) -> list:
        """Make the inputs of a Concat in place where the output is one run per input (nothing
        before the axis but size-1 dims): the step that makes an input writes its slice of the
        output, and the copy goes. Taken for an input the plan makes (not a feed, a constant or
        an output) whose root no other input shares, stored like the output, at an offset the
        adapter can bind, and when no step would then bind one buffer twice. Returns the gathers
        still to run."""
        out = b.out()
        axis = b.attrs["axis"] % len(out.shape)
        if (
            not self.owner.extra.get("concat_in_place", True)
            or self.shaders != "compute"
            or math.prod(out.shape[:axis]) != 1
            or out.layout != "nchw"
        ):
            return parts
        align = int(self.ctx.limits.get("min-storage-buffer-offset-alignment", 256))
        fixed = {self.root(n) for n in [*self.input_names, *self.output_names]}
        fixed |= set(self.consts) | set(self.graph.initializers)
        roots = [self.root(n) for n in b.inputs]
        itemsize = self.nbytes(out) // max(1, math.prod(out.shape))
        left, at = [], 0
        for name, r, g in zip(b.inputs, roots, parts, strict=True):
            info = self.infos.get(r)
            size = math.prod(b.info(name).shape) * itemsize
            ok = (
                info is not None
                and roots.count(r) == 1
                and r not in fixed
                and r != self.root(b.outputs[0])
                and info.stype == out.stype
                and info.layout == "nchw"
                and self.nbytes(info) == size > 0
                and at % align == 0
            )
            if ok:
                self.places[r] = (b.outputs[0], at)
                if self._binds_twice():
                    del self.places[r]
                    ok = False
            if not ok:
                left.append(g)
            at += size
        if any(self.root(g.src) == self.root(b.outputs[0]) for g in left):
            for r in roots:  # a copy would read the buffer it writes: none in place
                self.places.pop(r, None)
            return parts
        return left

    def _binds_twice(self) -> bool:
        """Whether a step would bind one buffer under two names it did not share before."""
        for step in self.steps:
            names = [a for a in step.args if isinstance(a, str)]
            views = {self.alias.get(a, a) for a in names}
            if len({self.root(a) for a in names}) < len(views):
                return True
        return False

    def _draw(self, encoder, step: Draw, env, queries, begin, end) -> None:
        target = self.textures[step.target.name]
        info = self.tex[step.target.name]
        c4 = slices(info.shape[1])
        count = info.shape[0] * len(step.passes)
        k = 0
        for n in range(info.shape[0]):
            for p in step.passes:
                rp = encoder.begin_render_pass(
                    color_attachments=[
                        {
                            "view": target.layer(n * c4 + p.s0 + j),
                            "load_op": "clear",
                            "store_op": "store",
                            "clear_value": (0.0, 0.0, 0.0, 0.0),
                        }
                        for j in range(p.a)
                    ],
                    timestamp_writes=_writes(
                        queries, begin if k == 0 else None, end if k == count - 1 else None
                    ),
                )
                rp.set_pipeline(p.pipeline)
                rp.set_bind_group(0, self._bind_group(p, env))
                rp.draw(3, 1, 0, n)
                rp.end()
                k += 1


# Sets of buffers a plan keeps its dispatches' native handles for (Plan._sequence): a run's
# inputs and outputs come from pools, so a few sets recur.
SEQUENCES = 4

# Early submissions (Plan.submit_points): the first after this many steps, each later one
# GROWTH times as many steps on.
EARLY_SUBMIT = "8,1.5"


def early_submit(value) -> tuple[int, float]:
    """The "early_submit" option as (first, growth): "FIRST,GROWTH", "FIRST" (growth 2), or
    0 / "0" / "off" / False for one submission a run."""
    if value in (0, "0", "off", False, None):
        return 0, 1.0
    parts = str(value).split(",")
    try:
        first = int(parts[0])
        growth = float(parts[1]) if len(parts) > 1 else 2.0
    except ValueError:
        first, growth = -1, 0.0
    if len(parts) > 2 or first < 1 or not growth >= 1.0:
        raise ValueError(
            'early_submit must be "FIRST,GROWTH" (FIRST >= 1 steps, GROWTH >= 1) or 0, '
            f"got {value!r}"
        )
    return first, growth


@functools.cache
def _native_pass():
    """(SetPipeline, SetBindGroup, DispatchWorkgroups, NULL) of wgpu-native's compute pass, as
    wgpu-py 0.32 (the version pinned) exposes them."""
    from wgpu.backends.wgpu_native._api import ffi, lib

    return (
        lib.wgpuComputePassEncoderSetPipeline,
        lib.wgpuComputePassEncoderSetBindGroup,
        lib.wgpuComputePassEncoderDispatchWorkgroups,
        ffi.NULL,
    )


@functools.cache
def _native_bind_group():
    """A function (device, layout, entries) -> bind group made through wgpu-native's entry
    point with its entries as one cffi array, as wgpu-py 0.32 (the version pinned) exposes it:
    wgpu-py's create_bind_group builds and checks a struct per entry: 30-80 us a bind group
    (2-core VM, H100 host), of which the call itself takes 5 (VM); a first run makes one per
    dispatch. The call goes through wgpu-py's error-checking wrapper, so a bad binding raises
    as before. An entry is (buffer, offset, size or None for the rest) or (None, a sampler or a
    texture view)."""
    from wgpu.backends.wgpu_native._api import GPUBindGroup, GPUSampler, ffi, lib, libf

    create, whole = libf.wgpuDeviceCreateBindGroup, lib.WGPU_WHOLE_SIZE

    def make(device, layout, entries):
        array = ffi.new("WGPUBindGroupEntry[]", len(entries))
        for i, entry in enumerate(entries):
            e = array[i]
            e.binding = i
            if entry[0] is not None:
                e.buffer = entry[0]._internal
                e.offset = entry[1]
                e.size = whole if entry[2] is None else entry[2]
            elif isinstance(entry[1], GPUSampler):
                e.sampler = entry[1]._internal
            else:
                e.textureView = entry[1]._internal
        desc = ffi.new("WGPUBindGroupDescriptor *")  # (label: the empty string)
        desc.layout, desc.entryCount, desc.entries = layout._internal, len(entries), array
        return GPUBindGroup("", create(device._internal, desc), device)

    return make


def _writes(queries, begin: int | None, end: int | None) -> dict | None:
    """A pass's timestamp_writes (None when it writes none)."""
    if queries is None or (begin is None and end is None):
        return None
    writes: dict[str, Any] = {"query_set": queries}
    if begin is not None:
        writes["beginning_of_pass_write_index"] = begin
    if end is not None:
        writes["end_of_pass_write_index"] = end
    return writes


class _ShadersAhead:
    """A kernel's shaders at the head of its pickled state: read back, they are queued on the
    context's compile threads at once (`_compile_ahead`), so the driver makes the pipelines
    while the rest of the session is read and its constants uploaded; each plan's `restored`
    then finds its pipelines made or on their way."""

    def __init__(self, ctx, shaders: list[tuple[str, str]]):
        self.ctx, self.shaders = ctx, shaders

    def __reduce__(self):
        return _compile_ahead, (self.ctx, self.shaders)


def _compile_ahead(ctx, shaders: list[tuple[str, str]]) -> None:
    # The longest first (a pipeline's making grows with its WGSL): the threads end together.
    for source, label in sorted(shaders, key=lambda item: -len(item[0])):
        ctx.pipeline_soon(source, label)


class WebGPUKernel(planned.PlannedKernel):
    """A partition compiled for WebGPU."""

    plan_class = Plan

    def __getstate__(self) -> dict:
        shaders = {
            step.source: step.label
            for plan in self.plans.values()
            for step in plan.steps
            if isinstance(step, Dispatch) and step.source
        }
        return {"_ahead": _ShadersAhead(self.ctx, list(shaders.items())), **super().__getstate__()}

    def __setstate__(self, state: dict) -> None:
        state.pop("_ahead", None)  # (its work done as it was read: `_compile_ahead`)
        self.__dict__.update(state)

    def input_info(self, shape, dtype) -> Info:
        return Info(shape, dtype, LOGICAL[dtype])

    def read(self, tensor: GPUTensor) -> np.ndarray:
        return tensor.numpy()

    def held(self, tensor: GPUTensor) -> Storage:
        return tensor.storage

    def feed_info(self, name: str, t: GPUTensor) -> Info:
        if t.layout != "nchw":
            raise ValueError(f"input '{name}' must have the nchw layout, got {t.layout}")
        return Info(t.shape, t.dtype.name, t.stype)

    def upload(self, data: np.ndarray, uniform: bool = False, texture: bool = False) -> Any:
        if texture:
            return WeightTexture(self.ctx, data)
        stype = LOGICAL.get(data.dtype.name)
        if stype is not None and STORAGE_TYPES[stype] != data.dtype:
            data = to_storage(data, stype)  # a constant output of int64 or bool: held as i32
        u = self.ctx.wgpu.BufferUsage
        usage = u.UNIFORM | u.COPY_DST if uniform else self.ctx.storage_usage
        storage = Storage(self.ctx, self.ctx.upload(data, usage), pooled=False)
        if not getattr(self, "_snapshot_done", False):
            storage.host = data  # until the session is kept (or not): `snapshot_done`
        return storage

    @property
    def snapshot(self) -> bool:
        return all(p.keepable for p in self.plans.values()) and all(
            isinstance(c, Storage) for c in self._constants.values()
        )

    def restored(self) -> None:
        # (a kernel without a plan keeps its first plan's constants: Session._keep_later)
        self._snapshot_done = bool(self.plans)
        self.ctx.place_constants()  # (read back: one buffer holds them)
        super().restored()

    def snapshot_done(self, later: bool = False) -> None:
        if later and not self.plans:
            return
        self._snapshot_done = True  # (the plans made later, for other shapes, keep no copy)
        for c in self._constants.values():
            if isinstance(c, Storage):
                c.host = None

    last_host: dict[str, float] | None = None  # the host side of the last run (Plan.run)

    def run_plan(self, plan: Plan, inputs, host: Collection[str]) -> tuple:
        """Run; the outputs named in `host` come back as NumPy arrays read in the same submit."""
        return plan.run(inputs, host, self.timing)

    def profile(self) -> dict[str, Any]:
        """planned's report, with "host": the last run's host seconds — encode (the command
        buffer), submit (finish and submit), read (the wait for the GPU and the mapping)."""
        return {**super().profile(), "host": dict(self.last_host or {})}

    def read_timing(self, pending: tuple) -> list[float]:
        buf, nbytes, _ = pending
        ticks = self.ctx.map_read(buf, nbytes).view(np.uint64).astype(np.int64)
        return list((ticks[1::2] - ticks[0::2]) * 1e-9)
