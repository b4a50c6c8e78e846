"""Conv, ConvTranspose and tinydl.FusedConv, with fused epilogues.

The kernels:
- conv_direct.wgsl (group 1): register-blocked direct convolution. Inputs and weights pass
  through workgroup memory a chunk of input channels at a time; each thread accumulates PY
  pixels x OCV vec4 of output channels. Reads NCHW or nc4hw4, writes NCHW, nc4hw4, or NCHW
  through a fused DepthToSpace. Weights are packed once as 4x4 blocks in the order read.
- conv_winograd.wgsl (opt-in, 3x3 stride 1): Winograd F(2x2, 3x3) with the input and output
  transforms in the kernel; the same layouts and epilogues.
- conv_grouped.wgsl (group > 1, depthwise included; windows too large for the direct kernel):
  4 pixels per thread, NCHW.
- a window cut into non-overlapping patches (kernel = stride, no padding: a vision
  transformer's patch embedding) too large for the direct kernel: the patches gathered
  (gather.wgsl), then the weights times them (matmul.wgsl).
- conv_transpose.wgsl: a gather over the taps that land on each output pixel, 4 channels per
  thread.
- conv3d.wgsl: 3-D convolutions (video networks), one output value a thread, the taps in
  loops.
The epilogue adds the bias (BatchNormalization folded in), then the activations in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinydl.backends.fusion import (
    as_2d,
    conv_label,
    conv_supports_3d,
    conv_transpose_geometry,
    conv_transpose_window,
    conv_window,
    epilogue_code,
)
from tinydl.backends.fusion import epilogue as _epilogue
from tinydl.backends.webgpu.kernels import activation_expr, grid, kernel
from tinydl.ops.fused import FUSED_CONV as FUSED

# Grouped/depthwise weights up to this size go in a uniform buffer (the thesis's "constants"
# weight mode: every thread of a workgroup reads the same weight at once).
UNIFORM_WEIGHT_BYTES = 16 << 10


@dataclass
class DirectConfig:
    """Blocking of conv_direct: threads TX x TY, PY rows per thread, OCV output vec4 per
    thread, CC4 input vec4 per chunk, ct the accumulation type, KS slices of TX x TY threads
    that split the chunks between them (summed in workgroup memory at the end)."""

    tx: int = 16
    ty: int = 8
    py: int = 2
    ocv: int = 4
    cc4: int = 1
    ct: str = "f32"
    ks: int = 1

    @classmethod
    def parse(cls, text: str) -> DirectConfig:
        """ "TX,TY,PY,OCV,CC4[,f16|f32][,KS]"."""
        tx, ty, py, ocv, cc4, *rest = text.split(",")
        cfg = cls(int(tx), int(ty), int(py), int(ocv), int(cc4))
        for item in rest:
            if item.isdigit():
                cfg.ks = int(item)
            else:
                cfg.ct = item
        return cfg


# The largest dilated window (rows x columns of input pixels one output pixel reads) the direct
# kernel stages in workgroup memory, as vec4 of f32: at the smallest blocking the tile is about
# the window, and WebGPU guarantees 16 KiB of workgroup memory. Wider windows (DeepLab's ASPP,
# dilation 12-36) go to the kernel that reads global memory (conv_grouped.wgsl, one group).
MAX_DIRECT_WINDOW = 8 << 10


# A depthwise convolution joins the 1x1 convolution after it (fusion.fuse_depthwise) when its
# image has at least this many pixels. A workgroup makes 4 * OCV output channels, so the
# depthwise output is computed again for every block of them; large images leave enough
# workgroups for that to cost less than the dispatch it saves, small ones do not (they take
# the depthwise conv after the conv before it instead, below). Per-step GPU time on an H100
# (docs/webgpu.md, "Fewer dispatches"): fused pairs at 96x96 and 48x48 (32-64 channels) and
# 64x64 (up to 144) took less than the two dispatches, at 24x24 and 32x32 (128-144) a little
# more, at 16x16 and smaller 1.5-6x more.
DW_MIN_PIXELS = 2304
# A depthwise convolution joins the convolution before it (fusion.fuse_depthwise_after) when
# that convolution's output image has at most this many pixels: one workgroup's tile then
# covers it, so the depthwise convolution of the workgroup's channels needs nothing computed
# twice (see _after_config).
DWA_MAX_PIXELS = 256
# ... a slice of its threads (TX x TY) at most this many.
AFTER_THREADS = 256


def after_ok(node, weights: np.ndarray | None, pixels: int) -> bool:
    """Whether a depthwise conv can join this conv (fusion.fuse_depthwise_after): the direct
    kernel runs it, its image has at most DWA_MAX_PIXELS pixels, and it reads its input with
    stride 1, no dilation and a window of at most 5x5, so that the whole image's input tile,
    one vec4 of its weights and the image itself fit the 16 KiB of workgroup memory WebGPU
    guarantees (16x16 pixels: 20x20 input vec4, 6.4 KiB, and 4 KiB)."""
    if not direct_ok(node, weights) or pixels > DWA_MAX_PIXELS or weights is None:
        return False
    a = node.attrs
    return (
        all(k <= 5 for k in weights.shape[2:])
        and all(v == 1 for v in a.get("strides") or [1])
        and all(v == 1 for v in a.get("dilations") or [1])
    )


def direct_ok(node, weights: np.ndarray | None = None) -> bool:
    """Whether the direct (staged-tile) kernel runs this convolution; `weights` gives the kernel
    size when the node has no kernel_shape attribute."""
    if node.op not in ("Conv", FUSED) or node.attrs.get("group", 1) != 1:
        return False
    ks = node.attrs.get("kernel_shape") or (None if weights is None else weights.shape[2:])
    if ks is None or len(ks) > 2:
        return False
    dil = node.attrs.get("dilations") or [1] * len(ks)
    window = math.prod((k - 1) * d + 1 for k, d in zip(ks, dil, strict=False))
    return window * 16 <= MAX_DIRECT_WINDOW


def _packed4(node, plan) -> bool:
    x = plan.infos.get(node.inputs[0])  # (None: a constant input, uploaded as it is)
    return (
        x is not None
        and direct_ok(node, plan.const(node.inputs[1]))
        and len(x.shape) == 4
        and "nhwc_in" not in node.meta  # reads channels-last
    )


@kernel("Conv", FUSED, supports=conv_supports_3d, packed4=_packed4)
def conv(b):
    b.label = conv_label(b.node)
    xi = b.info(0)
    if len(xi.shape) == 5:
        _conv3d(b)
        return
    # With a depthwise conv fused after it, the conv's own output is "dw_y" (maybe not stored).
    yo = _conv_output(b)
    n, c, ih, iw = as_2d(xi.shape)
    if "dw" in b.node.meta:  # the input tile is a fused depthwise convolution's output
        n, c, ih, iw = b.node.meta["dw_shape"]
    elif "nhwc_in" in b.node.meta:  # reads the channels-last value a Transpose would permute
        n, ih, iw, c = xi.shape
    spatial = (ih, iw) if {"dw", "nhwc_in"} & set(b.node.meta) else None
    w, bias, kernel_shape, strides, dilations, geo = conv_window(b, spatial)
    oc = w.shape[0]
    if "d2s" in b.node.meta:
        oh, ow = geo[0][2], geo[1][2]
    elif "nhwc" in b.node.meta:  # a Transpose to channels-last fused: N, H, W, C
        oh, ow = yo.shape[1:3]
    else:
        _, _, oh, ow = as_2d(yo.shape)
    acts, slope = _epilogue(b, oc)
    geom = _window_constants((n, c, ih, iw), (oc, oh, ow), kernel_shape, strides, dilations, geo)
    for key in ("residual", "dw_after"):
        if key in b.node.meta and not direct_ok(b.node, w):
            raise ValueError(f"{b.label}: only the direct kernel has the {key} epilogue")
    if b.attrs["group"] == 1 and "dw_after" not in b.node.meta and _winograd_config(b, geom):
        _winograd(b, w, bias, slope, acts, geom)
    elif direct_ok(b.node, w):
        _direct(b, w, bias, slope, acts, geom, yo)
    elif _patches_ok(b, acts, slope, geom, geo):
        _patches(b, w, bias, geom)
    else:
        _grouped(b, w, bias, slope, acts, geom, b.attrs["group"])


def _conv_output(b):
    """The Info of the conv's own output: its first output, or with a depthwise conv fused after
    it (`meta["dw_after"]`) the value "dw_y", which has none where the kernel does not store it."""
    if "dw_after" not in b.node.meta:
        return b.out()
    y = b.node.meta["dw_y"]
    if y in b.plan.infos:
        return b.plan.infos[y]
    return b.plan.value_info(b.node.meta["dw_y_shape"], b.out().dtype, False)


def _store_params(b, bias, slope, acts, oc: int, yo=None):
    """The per-channel buffer (bias, then a PRelu slope) and the template parameters of the
    epilogue and of conv_store.wgsl's store (output layout or fused DepthToSpace) for
    conv_direct and conv_winograd."""
    oc4 = math.ceil(oc / 4)
    chan = np.zeros((2 if slope is not None else 1, oc4 * 4))
    chan[0, :oc] = bias
    if slope is not None:
        chan[1, :oc] = slope
    cbuf = b.upload("channels", chan.reshape(-1, 4).astype(np.float32), "f32")
    d2s = b.node.meta.get("d2s")
    bs = d2s[0] if d2s else 1
    yo = yo or b.out()
    return cbuf, dict(
        out_mode="d2s" if d2s else "nhwc" if "nhwc" in b.node.meta else yo.layout,
        ot=yo.stype,
        has_slope=slope is not None,
        epilogue=epilogue_code(acts, activation_expr),
        BS=bs,
        CO=oc // (bs * bs),
        dcr=bool(d2s) and d2s[1] == "DCR",
        residual=False,  # conv_direct's residual epilogue: set by _direct
        rt="f32",
        res_layout="nchw",
        post=[],
    )


def _window_constants(x_shape, y_shape, kernel_shape, strides, dilations, geo) -> dict:
    """The 2-D window geometry every convolution template takes, by its WGSL constant names."""
    n, c, ih, iw = x_shape
    oc, oh, ow = y_shape
    return dict(
        N=n, C=c, IH=ih, IW=iw, OC=oc, OH=oh, OW=ow,
        KH=kernel_shape[0], KW=kernel_shape[1], SH=strides[0], SW=strides[1],
        DH=dilations[0], DW=dilations[1], PT=geo[0][0], PL=geo[1][0],
    )  # fmt: skip


def _pick(b, geom, scalar_in: bool) -> DirectConfig:
    """The blocking for one conv: an override (the option "conv_configs" by node name or "*")
    or the defaults below, shrunk to fit the hardware."""
    configs = b.option("conv_configs", {})
    override = configs.get(b.node.name) or configs.get("*")
    oc4 = math.ceil(geom["OC"] / 4)
    if override:
        cfg = (
            DirectConfig.parse(override)
            if isinstance(override, str)
            else DirectConfig(**vars(override))
        )
    else:
        if "dw_after" in b.node.meta:
            cfg = _after_config(geom, oc4)
        else:
            cfg = _default_config(geom, scalar_in, oc4, "dw" in b.node.meta)
        # fp16 accumulation is opt-in: about 1.5x faster on an H200, less accurate (see
        # docs/webgpu.md, "Precision").
        accumulate = b.option("accumulate")
        if b.precision == "fp16" and accumulate == "f16":
            cfg.ct = "f16"
    cfg.ocv = min(cfg.ocv, oc4)
    if scalar_in:
        cfg.cc4 = 1
    chunks = 1 if scalar_in else math.ceil(math.ceil(geom["C"] / 4) / cfg.cc4)
    if not override:
        cfg.ks = _split(b, cfg, geom, oc4, chunks)
    z = int(b.ctx.limits.get("max-compute-workgroup-size-z", 64))
    cfg.ks = max(1, min(cfg.ks, chunks, z, b.ctx.max_workgroup_threads // (cfg.tx * cfg.ty)))
    after = "dw_after" in b.node.meta
    if after and (cfg.tx < geom["OW"] or cfg.ty * cfg.py < geom["OH"]):
        raise ValueError(
            f"{b.label}: a depthwise conv fused after it needs the whole "
            f"{geom['OH']}x{geom['OW']} image in one tile, got the blocking {override!r} "
            f"({cfg.ty * cfg.py}x{cfg.tx})"
        )
    limit = b.ctx.max_workgroup_storage
    while _shared_bytes(cfg, geom, scalar_in, after) > limit:
        if cfg.ks > 1 and cfg.cc4 > 1:  # smaller chunks, as many slices
            cfg.cc4 //= 2
        elif cfg.ks > 1:
            cfg.ks //= 2
        elif cfg.cc4 > 1:
            cfg.cc4 //= 2
        elif cfg.py > 1 and not after:
            cfg.py //= 2
        elif cfg.ocv > 1:
            cfg.ocv //= 2
        elif after:  # the tile must stay the whole image
            raise ValueError(f"{b.label}: the image and the taps do not fit in workgroup memory")
        elif cfg.tx > 1:
            cfg.tx //= 2
        elif cfg.ty > 1:
            cfg.ty //= 2
        else:
            raise ValueError(f"{b.label}: the kernel's taps do not fit in workgroup memory")
    return cfg


def _default_config(g, scalar_in: bool, oc4: int, dw: bool = False) -> DirectConfig:
    """Blockings measured best on an H200 for ESPCN's layers at 360p with nc4hw4
    intermediates (tools/bench_webgpu_espcn.py --sweep): 32x4 threads of 2 rows x 4 vec4 of
    channels, one vec4 of input channels per barrier (0.273 ms for 64->32 3x3); for one
    input channel, 16x8 threads of one row x 4 vec4 (0.047 ms for 1->64 5x5); 16x8 threads
    of 2 rows when there are few output channels (0.051 ms for 32->9 3x3). Small images get
    a narrower tile."""
    if scalar_in:
        cfg = DirectConfig(tx=16, ty=8, py=1, ocv=4, cc4=1)
    elif oc4 < 4:
        cfg = DirectConfig(tx=16, ty=8, py=2, ocv=oc4, cc4=1)
    else:
        cfg = DirectConfig(tx=32, ty=4, py=2, ocv=4, cc4=1)
    while cfg.tx > 4 and cfg.tx >= 2 * g["OW"]:
        cfg.tx //= 2
        cfg.ty *= 2
    while cfg.ty * cfg.py > 2 * g["OH"] and cfg.ty > 1:
        cfg.ty //= 2
    # Small images with many channels (the deep end of a mobile net: 8x8 x 864 -> 144) left a
    # few workgroups to loop over every input channel: fewer output channels and rows per
    # thread make more of them, down to one vec4 and one row.
    while _workgroups(cfg, g, oc4) < MIN_WORKGROUPS and (cfg.ocv > 1 or cfg.py > 1):
        if dw:  # fewer output channels a workgroup would compute the depthwise conv again
            if cfg.py == 1:
                break
            cfg.py //= 2
        elif cfg.ocv > 1:
            cfg.ocv //= 2
        else:
            cfg.py //= 2
    # ... and there each barrier is paid for few pixels: more input channels per chunk.
    if not scalar_in and g["OH"] * g["OW"] <= SMALL_PIXELS:
        cfg.cc4 = max(1, min(SMALL_CC4, math.ceil(g["C"] / 4)))
    return cfg


def _after_config(g, oc4: int) -> DirectConfig:
    """The blocking of a conv with a depthwise conv fused after it: one tile covers the
    image (columns a power of two from 4; rows split between threads so that a slice has at
    most AFTER_THREADS), fewer output vec4 a workgroup while there are few workgroups, and
    SMALL_CC4 input vec4 a chunk as for the other small images."""
    tx = 4
    while tx < g["OW"]:
        tx *= 2
    ty = 1
    while ty < g["OH"] and tx * ty * 2 <= AFTER_THREADS:
        ty *= 2
    cfg = DirectConfig(tx=tx, ty=ty, py=math.ceil(g["OH"] / ty), ocv=min(4, oc4), cc4=1)
    while _workgroups(cfg, g, oc4) < MIN_WORKGROUPS and cfg.ocv > 1:
        cfg.ocv //= 2
    cfg.cc4 = max(1, min(SMALL_CC4, math.ceil(g["C"] / 4)))
    return cfg


def _split(b, cfg: DirectConfig, g, oc4: int, chunks: int) -> int:
    """Slices of threads that split a conv's input-channel chunks (KS): doubled while the
    dispatch has fewer than SPLIT_THREADS threads, up to the option "conv_split" (default
    CONV_SPLIT; 1: none) and the chunks there are."""
    base = b.option("conv_split", CONV_SPLIT)
    if isinstance(base, bool) or not str(base).isdigit() or int(base) < 1:
        raise ValueError(f"conv_split must be a whole number of slices >= 1, got {base!r}")
    target = b.option("conv_split_threads", SPLIT_THREADS)
    if isinstance(target, bool) or not str(target).isdigit():
        raise ValueError(f"conv_split_threads must be a whole number, got {target!r}")
    target = int(target)
    threads = _workgroups(cfg, g, oc4) * cfg.tx * cfg.ty
    ks = 1
    most = min(int(base), chunks, SPLIT_WORKGROUP // (cfg.tx * cfg.ty))
    while 2 * ks <= most and threads * ks < target:
        ks *= 2
    return ks


# A dispatch of conv_direct with fewer threads than SPLIT_THREADS splits its input channels
# between up to CONV_SPLIT slices of threads (DirectConfig.ks), a workgroup having at most
# SPLIT_WORKGROUP threads: the small images of a mobile net's deep end (12x12 or 6x6, 256
# channels) otherwise leave a warp or two per multiprocessor, each waiting on its chunks' loads
# one after another. On an H100 (docs/webgpu.md, "Splitting the input channels"), GPU ms of
# palm detection / pose landmark / pose detection / ResNet-18 with no split 0.655 / 1.695 /
# 1.483 / 1.354; (8 slices, 32768 threads, 256 a workgroup) 0.526 / 1.001 / 0.982 / 0.995;
# (16, 131072, 512) 0.451 / 0.924 / 0.851 / 0.750; (16, 65536, 512) 0.443 / 0.904 / 0.852 /
# 0.788. ESPCN's 360p layers (115,000 threads and more) stay whole: split in two at 131072,
# its host in/out time rose 10 %.
CONV_SPLIT = 16
SPLIT_THREADS = 65536
SPLIT_WORKGROUP = 512


# Images of at most SMALL_PIXELS output pixels stage SMALL_CC4 vec4 of input channels a chunk.
# On an H100, GPU ms of face detection / palm detection / pose landmark / pose detection /
# ResNet-18 at (pixels, vec4): (any, 1) 0.414 / 1.131 / 2.993 / 2.292 / 1.665; (1024, 2) 0.362 /
# 0.944 / 2.408 / 1.812 / 1.442; (1024, 4) 0.336 / 0.855 / 2.042 / 1.600 / 1.405; (1024, 8)
# 0.333 / 0.831 / 1.978 / 1.583 / 1.440 (again: 0.331 / 0.836 / 1.989 / 1.579 / 1.450); (4096, 8)
# 0.330 / 0.841 / 2.046 / 1.584 / 1.546; (16384, 8) 0.325 / 0.857 / 1.949 / 1.589 / 1.543. ESPCN
# (360p: 230,400 pixels) keeps one vec4, measured best for it.
SMALL_PIXELS = 1024
SMALL_CC4 = 8


# Workgroups a conv_direct dispatch should have at least, when its blocking can shrink. On an
# H100, MediaPipe's face/palm/pose models' GPU time (ms) at 1 (never shrink) / 64 / 128 / 256 /
# 512: face detection 0.517 / 0.421 / 0.414 / 0.410 / 0.410, palm detection 1.537 / 1.380 /
# 1.140 / 1.121 / 1.117, pose landmark 4.187 / 3.107 / 2.997 / 2.981 / 3.082, pose detection
# 3.347 / 2.411 / 2.314 / 2.298 / 2.253.
MIN_WORKGROUPS = 256


def _workgroups(cfg: DirectConfig, g, oc4: int) -> int:
    tiles = math.ceil(g["OW"] / cfg.tx) * math.ceil(g["OH"] / (cfg.ty * cfg.py))
    return g["N"] * tiles * math.ceil(oc4 / min(cfg.ocv, oc4))


def _tile(cfg: DirectConfig, g) -> tuple[int, int]:
    th, tw = cfg.ty * cfg.py, cfg.tx
    return (th - 1) * g["SH"] + (g["KH"] - 1) * g["DH"] + 1, (tw - 1) * g["SW"] + (g["KW"] - 1) * g[
        "DW"
    ] + 1


def _shared_bytes(cfg: DirectConfig, g, scalar_in: bool, after: bool = False) -> int:
    tih, tiw = _tile(cfg, g)
    size = 2 if cfg.ct == "f16" else 4
    tin = tih * tiw * cfg.cc4 * (1 if scalar_in else 4)
    tw = cfg.cc4 * g["KH"] * g["KW"] * cfg.ocv * (1 if scalar_in else 4) * 4
    red = (cfg.ks - 1) * cfg.tx * cfg.ty * cfg.py * cfg.ocv * 4
    image = cfg.ocv * g["OH"] * g["OW"] * 16 if after else 0  # f32 vec4
    return ((tin + tw) * cfg.ks + red) * size + image


def _direct(b, w, bias, slope, acts, g, yo) -> None:
    xi = b.info(0)
    scalar_in = g["C"] == 1
    cfg = _pick(b, g, scalar_in)
    if cfg.ct == "f16" and not b.ctx.has_f16:
        cfg.ct = "f32"
    oc, c = g["OC"], g["C"]
    oc4, c4 = math.ceil(oc / 4), math.ceil(c / 4)
    nocb = math.ceil(oc4 / cfg.ocv)
    nchunk = 1 if scalar_in else math.ceil(c4 / cfg.cc4)
    kh, kw = g["KH"], g["KW"]
    # Pack weights as [ocb][chunk][c4 in chunk][ky][kx][ocv][input lane] vec4 of output lanes.
    ocp = nocb * cfg.ocv * 4
    if scalar_in:
        wp = np.zeros((ocp, kh, kw), np.float32)
        wp[:oc] = w[:, 0]
        wp = wp.reshape(nocb, cfg.ocv, 4, kh, kw).transpose(0, 3, 4, 1, 2)
    else:
        cp = nchunk * cfg.cc4 * 4
        wp = np.zeros((ocp, cp, kh, kw), np.float32)
        wp[:oc, :c] = w
        wp = wp.reshape(nocb, cfg.ocv, 4, nchunk, cfg.cc4, 4, kh, kw)
        wp = wp.transpose(0, 3, 4, 6, 7, 1, 5, 2)
    # One gather into the packed order (a reshape of the transposed view, then a cast, copied
    # twice: 9.1 against 4.0 ms for a 512->512 3x3 layer on the 2-core VM).
    packed = np.ascontiguousarray(wp)
    wchunk = packed.size // (nocb * nchunk * 4)
    wt = cfg.ct
    # The packing depends on the blocking, so the blocking is part of the upload's key.
    key = ("weights", cfg.ocv, cfg.cc4)
    wbuf = b.upload(key, packed.reshape(-1, 4), wt)
    after = b.node.meta.get("dw_after")
    cbuf, store = _store_params(b, bias, slope, acts, oc, yo)
    residual = b.node.meta.get("residual")
    # Binding 3: the output, or with a depthwise conv fused after it and the output not
    # stored, the depthwise output.
    store_y = after is None or len(b.outputs) == 2
    bindings = [b.inputs[0], wbuf, cbuf, b.outputs[0]]
    if residual is not None:  # + a same-shaped value, then the activation after the Add
        ri = b.info(residual)
        _, rc, rh, rw = as_2d(ri.shape)
        bindings.append(residual)
        store.update(
            residual=True, rt=ri.stype, res_layout=ri.layout, RC=rc, RC4=math.ceil(rc / 4),
            RK=b.node.meta.get("res_pool", 1), RH=rh, RW=rw,
            post=epilogue_code(b.node.meta.get("post", []), activation_expr),
        )  # fmt: skip
    dw = b.node.meta.get("dw")
    store.update(_depthwise(b, dw, bindings) if dw is not None else {"dw": False})
    store.update(store_y=store_y, dwa=False)
    if after is not None:
        store.update(_depthwise_after(b, after, bindings, store_y))
    th, tw = cfg.ty * cfg.py, cfg.tx
    tih, tiw = _tile(cfg, g)
    rows = sorted({p * g["SH"] + ky * g["DH"] for p in range(cfg.py) for ky in range(kh)})
    loop_cl, loop_ky = _loops(b, cfg, g)
    grid = (math.ceil(g["OW"] / tw), math.ceil(g["OH"] / th), g["N"] * nocb)
    b.dispatch(
        "conv_direct.wgsl",
        bindings,
        grid,
        **g,
        C4=c4,
        OC4=oc4,
        NOCB=nocb,
        NCHUNK=nchunk,
        KS=cfg.ks,
        NITER=math.ceil(nchunk / cfg.ks),
        TX=cfg.tx,
        TY=cfg.ty,
        PY=cfg.py,
        OCV=cfg.ocv,
        CC4=cfg.cc4,
        TH=th,
        TW=tw,
        TIH=tih,
        TIW=tiw,
        WCHUNK=wchunk,
        rows=rows,
        loop_cl=loop_cl,
        loop_ky=loop_ky,
        scalar_in=scalar_in,
        in_layout="nhwc" if "nhwc_in" in b.node.meta else xi.layout,
        st=xi.stype,
        wt=wt,
        ct=cfg.ct,
        **store,
    )


# The most fma blocks (input vec4 x tap x output vec4 x row: four vec4 fmas each) conv_direct
# unrolls; past it, the chunk's input vec4 go in a loop, then the kernel rows (option
# "conv_unroll"; 0: no limit). Twice as many for images of more than UNROLL_PIXELS output pixels.
# On an H100 (docs/webgpu.md, "Unrolling and the driver's compile time"), NVIDIA's Vulkan compiler
# took 0.3-0.7 s for one pipeline of ResNet-18 (its 7x7 stem: 392 blocks; its 3x3s: 72, and up
# to 576 with 8 input vec4 a chunk) and the model ran 3 % faster looped; ESPCN's 360p layers
# (72 and 100 blocks) ran 23 % slower looped (GPU 0.355 -> 0.438 ms), so large images keep them.
CONV_UNROLL = 64
UNROLL_PIXELS = 4096


def _loops(b, cfg: DirectConfig, g) -> tuple[bool, bool]:
    """(loop over the chunk's input vec4, loop over ky) for conv_direct: unrolled while the
    body stays within its limit of blocks."""
    base = b.option("conv_unroll", CONV_UNROLL)
    if isinstance(base, bool) or not str(base).isdigit():
        raise ValueError(f"conv_unroll must be a whole number of blocks >= 0, got {base!r}")
    limit = unroll_limit(int(base), g["OH"] * g["OW"])
    kh = g["KH"]
    blocks = cfg.cc4 * kh * g["KW"] * cfg.ocv * cfg.py
    loop_cl = bool(limit) and blocks > limit and cfg.cc4 > 1
    if loop_cl:
        blocks //= cfg.cc4
    return loop_cl, bool(limit) and blocks > limit and kh > 1


def unroll_limit(base: int, pixels: int) -> int:
    """The fma blocks conv_direct unrolls for an output image of `pixels` (0: no limit)."""
    return base * (2 if pixels > UNROLL_PIXELS else 1)


def _packed_depthwise(b, dw, key: str, spatial: tuple | None = None) -> tuple:
    """A depthwise convolution's weights (BatchNormalization folded in) as vec4 of channels
    per tap, then its bias, uploaded under `key`; with its window (conv_window's kernel shape,
    strides, dilations, geometry) and its epilogue's code. `spatial`: its input's size, where
    the plan has no Info for that value."""
    bd = type(b)(b.plan, dw)
    w, bias, kernel_shape, strides, dilations, geo = conv_window(bd, spatial)
    acts, _ = _epilogue(bd, w.shape[0])
    c = w.shape[0]
    c4, taps = math.ceil(c / 4), kernel_shape[0] * kernel_shape[1]
    wp = np.zeros((c4 * 4, taps))
    wp[:c] = w.reshape(c, taps)
    bp = np.zeros(c4 * 4)
    bp[:c] = bias
    packed = np.concatenate([wp.reshape(c4, 4, taps).transpose(0, 2, 1).ravel(), bp])
    storage = b.upload(key, packed.reshape(-1, 4).astype(np.float32), "f32")
    window = dict(
        KH=kernel_shape[0], KW=kernel_shape[1], SH=strides[0], SW=strides[1],
        DH=dilations[0], DW=dilations[1], PT=geo[0][0], PL=geo[1][0],
    )  # fmt: skip
    return storage, window, geo, epilogue_code(acts, activation_expr)


def _depthwise(b, dw, bindings: list) -> dict:
    """A depthwise convolution fused before a 1x1 one (fusion.fuse_depthwise): its packed
    weights bound after the others, its window and epilogue as template parameters (D...)."""
    storage, window, _, epilogue = _packed_depthwise(b, dw, "depthwise")
    bindings.append(storage)
    _, _, xh, xw = b.info(dw.inputs[0]).shape
    return dict(
        dw=True, dw_binding=len(bindings) - 1, XH=xh, XW=xw, dw_epilogue=epilogue,
        **{"D" + k: v for k, v in window.items()},
    )  # fmt: skip


def _depthwise_after(b, dw, bindings: list, store_y: bool) -> dict:
    """A depthwise convolution fused after the conv (fusion.fuse_depthwise_after): its packed
    weights bound after the others, then its output unless that is binding 3 already; its
    window (A...), epilogue and output layout as template parameters."""
    _, _, ah, aw = b.node.meta["dw_y_shape"]
    storage, window, geo, epilogue = _packed_depthwise(b, dw, "depthwise_after", (ah, aw))
    bindings.append(storage)
    dwa_binding = len(bindings) - 1
    zo = b.plan.infos[dw.outputs[0]]
    if store_y:
        bindings.append(dw.outputs[0])
    return dict(
        dwa=True, dwa_binding=dwa_binding, z_binding=len(bindings) - 1 if store_y else 3,
        z_mode=zo.layout, zt=zo.stype, AH=ah, AW=aw, ZH=geo[0][2], ZW=geo[1][2],
        dwa_epilogue=epilogue, **{"A" + k: v for k, v in window.items()},
    )  # fmt: skip


@dataclass
class WinogradConfig:
    """Blocking of conv_winograd: TTX x TTY tiles of 2x2 pixels and OCB output channels per
    workgroup, CK input channels per chunk; each of the 16 x S threads owns one transform
    point, RT tiles and RO vec4 of output channels."""

    ttx: int = 8
    tty: int = 4
    ck: int = 8
    ocb: int = 32
    rt: int = 8
    ro: int = 2

    @classmethod
    def parse(cls, text: str) -> WinogradConfig:
        return cls(*(int(t) for t in text.split(",")))


def winograd_geometry_ok(g) -> bool:
    """3x3, stride 1, dilation 1: the convolutions F(2x2, 3x3) computes."""
    return (g["KH"], g["KW"], g["SH"], g["SW"], g["DH"], g["DW"]) == (3, 3, 1, 1, 1, 1)


def _winograd_config(b, g) -> WinogradConfig | None:
    """The Winograd blocking for this conv, or None for the direct kernel. Opt-in: on an
    H200 it is slower than the direct kernel for ESPCN's 64->32 3x3 layer (0.42 against 0.27
    ms: the transformed weights, 16/9 of the weights, pass through workgroup memory for only
    128 pixels per workgroup), so it is for sweeps on other GPUs.
    The option "winograd" (a value, or a dict by node name with "*" for the rest): "1" for
    every 3x3 stride-1 conv, a blocking
    "ttx,tty,ck,ocb,rt,ro", or "0"."""
    if not winograd_geometry_ok(g):
        return None
    choice = b.option("winograd", "")
    if isinstance(choice, dict):  # by node name, "*" for the others
        choice = choice.get(b.node.name, choice.get("*", ""))
    if isinstance(choice, WinogradConfig):
        cfg = WinogradConfig(**vars(choice))
    elif choice in (False, "0", "off"):
        return None
    elif choice in (True, "1", "on"):
        cfg = WinogradConfig()
    elif choice:
        cfg = WinogradConfig.parse(choice)
    else:
        return None
    # Fit the blocking to the channels and to the workgroup memory.
    cfg.ocb = min(cfg.ocb, 4 * math.ceil(g["OC"] / 4))
    cfg.ro = max(1, min(cfg.ro, cfg.ocb // 4))
    cfg.ocb = 4 * cfg.ro * math.ceil(cfg.ocb / (4 * cfg.ro))
    cfg.ck = max(4, min(cfg.ck, 4 * math.ceil(g["C"] / 4)))
    limit = b.ctx.max_workgroup_storage
    while _winograd_bytes(cfg) > limit and cfg.ck > 4:
        cfg.ck //= 2
    threads = 16 * (cfg.ttx * cfg.tty // cfg.rt) * (cfg.ocb // (4 * cfg.ro))
    if (
        _winograd_bytes(cfg) > limit
        or threads > b.ctx.limits["max-compute-invocations-per-workgroup"]
    ):
        return None
    if cfg.rt % 4 or (cfg.ttx * cfg.tty) % cfg.rt or cfg.ck % 4:
        raise ValueError(f"{b.label}: bad Winograd blocking {cfg}")
    return cfg


def _winograd_bytes(cfg: WinogradConfig) -> int:
    tt = cfg.ttx * cfg.tty
    patch = cfg.ck * (2 * cfg.tty + 2) * (2 * cfg.ttx + 2)
    return 4 * (patch + 16 * cfg.ck * tt + 16 * cfg.ck * cfg.ocb)


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """U = G g Gt for each (output, input) channel pair of 3x3 weights: [OC, C, 4, 4]."""
    gm = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    return np.einsum("ik,ockl,jl->ocij", gm, w.astype(np.float64), gm)


def _winograd(b, w, bias, slope, acts, g) -> None:
    xi = b.info(0)
    cfg = _winograd_config(b, g)
    oc, c = g["OC"], g["C"]
    oc4, c4 = math.ceil(oc / 4), math.ceil(c / 4)
    tt = cfg.ttx * cfg.tty
    nocb = math.ceil(oc / cfg.ocb)
    nchunk = math.ceil(c / cfg.ck)
    nob = cfg.ocb // (4 * cfg.ro)
    s = (tt // cfg.rt) * nob
    # M passes through vs in RO x NH passes: RT/NH tiles of each thread per pass.
    nh = next(h for h in range(1, cfg.rt + 1) if cfg.rt % h == 0 and nob * 4 <= cfg.ck * h)
    # U packed as [ocb][chunk][point][ic in chunk][oc in block].
    up = np.zeros((nocb * cfg.ocb, nchunk * cfg.ck, 16))
    up[:oc, :c] = winograd_weights(w).reshape(oc, c, 16)
    up = up.reshape(nocb, cfg.ocb, nchunk, cfg.ck, 16).transpose(0, 2, 4, 3, 1)
    key = ("winograd", cfg.ck, cfg.ocb)
    ubuf = b.upload(key, up.reshape(-1, 4).astype(np.float32), "f32")
    cbuf, store = _store_params(b, bias, slope, acts, oc)
    grid = (
        math.ceil(g["OW"] / (2 * cfg.ttx)),
        math.ceil(g["OH"] / (2 * cfg.tty)),
        g["N"] * nocb,
    )
    b.dispatch(
        "conv_winograd.wgsl",
        [b.inputs[0], ubuf, cbuf, b.outputs[0]],
        grid,
        **g,
        C4=c4,
        OC4=oc4,
        NOCB=nocb,
        NCHUNK=nchunk,
        TTX=cfg.ttx,
        TTY=cfg.tty,
        TT=tt,
        CK=cfg.ck,
        OCB=cfg.ocb,
        RT=cfg.rt,
        RO=cfg.ro,
        NOB=nob,
        NTB=tt // cfg.rt,
        S=s,
        NH=nh,
        THREADS=16 * s,
        PH=2 * cfg.tty + 2,
        PW=2 * cfg.ttx + 2,
        in_layout=xi.layout,
        st=xi.stype,
        **store,
    )


def _patches_ok(b, acts, slope, g, geo) -> bool:
    """Whether the conv cuts its input into non-overlapping patches (kernel = stride, no
    padding or dilation, one group: a vision transformer's patch embedding) and has nothing
    after its bias, so that it is the weights times the patches (_patches)."""
    return (
        b.attrs["group"] == 1
        and not acts
        and slope is None
        and not {"dw", "nhwc_in", "nhwc", "d2s"} & set(b.node.meta)
        and (g["KH"], g["KW"]) == (g["SH"], g["SW"])
        and (g["DH"], g["DW"]) == (1, 1)
        and all(p == 0 for axis in geo for p in axis[:2])
    )


def _patches(b, w, bias, g) -> None:
    """A patch-embedding conv as two dispatches: the patches gathered into a scratch value
    [N][C x KH x KW][OH x OW] (a row per weight of a filter, rows and columns past the last
    whole patch left out, as the convolution leaves them), then each image's
    [OC][C x KH x KW] weights times its patches, plus the bias: [OC][OH x OW], the NCHW output.
    (conv_grouped.wgsl, which took such convs before, makes a workgroup per output row and
    channel with 4 pixels a thread: ViT-B/32's 32 x 32, 3 -> 768 channels at 224 x 224 took
    20.6 s a run on Mesa's software Vulkan, 0.072 s this way.)"""
    from tinydl.backends.gathers import Gather
    from tinydl.backends.webgpu.kernels.gather import emit_gather
    from tinydl.backends.webgpu.kernels.matmul import emit_matmul

    n, c, ih, iw, oc = g["N"], g["C"], g["IH"], g["IW"], g["OC"]
    kh, kw, oh, ow = g["KH"], g["KW"], g["OH"], g["OW"]
    k, p = c * kh * kw, oh * ow
    tables = [
        np.arange(n) * c * ih * iw,
        np.arange(c) * ih * iw,
        np.arange(kh) * iw,
        np.arange(kw),
        np.arange(oh) * kh * iw,
        np.arange(ow) * kw,
    ]
    patches = b.scratch("patches", (n, k, p))
    emit_gather(b, Gather(b.inputs[0], (n, c, kh, kw, oh, ow), tables), patches, "patches")
    weights = b.upload("weights", w.reshape(oc, k).astype(np.float32), "f32")
    channels = b.upload("bias", np.asarray(bias, np.float32).reshape(oc), "f32")
    emit_matmul(
        b,
        (weights, "f32"),
        (patches, b.plan.infos[patches].stype),
        [(0, i * k * p) for i in range(n)],
        oc, p, k, (k, 1), (p, 1),
        (channels, "f32"), (1, 0),
    )  # fmt: skip


def _conv3d(b) -> None:
    """A 3-D convolution (NCDHW, any groups, stride, dilation and padding), its bias
    (BatchNormalization folded in) and activations: conv3d.wgsl."""
    w, bias, kernel_shape, strides, dilations, geo = conv_window(b)
    _dispatch3d(b, w, bias, kernel_shape, strides, dilations, geo, w.shape[0] // b.attrs["group"])


def _dispatch3d(b, w, bias, kernel_shape, strides, dilations, geo, mg, transpose=False):
    """conv3d.wgsl for a 3-D Conv or ConvTranspose: weights `w` as the op has them (`mg` output
    channels a group), its bias, window and the epilogue's activations."""
    xi, yo = b.info(0), b.out()
    n, c, idp, ih, iw = xi.shape
    _, oc, od, oh, ow = yo.shape
    acts, slope = _epilogue(b, oc)
    wbuf = b.upload("weights", w.astype(np.float32).ravel(), "f32")
    chan = np.concatenate([bias, slope if slope is not None else []]).astype(np.float32)
    cbuf = b.upload("channels", chan, "f32")
    total = n * oc * od * oh * ow
    wg = 64
    gx, gy, _ = grid(total, wg)
    b.dispatch(
        "conv3d.wgsl",
        [b.inputs[0], wbuf, cbuf, b.outputs[0]],
        (gx, gy, 1),
        N=n, C=c, ID=idp, IH=ih, IW=iw, OC=oc, OD=od, OH=oh, OW=ow,
        KD=kernel_shape[0], KH=kernel_shape[1], KW=kernel_shape[2],
        SD=strides[0], SH=strides[1], SW=strides[2],
        DD=dilations[0], DH=dilations[1], DW=dilations[2],
        PF=geo[0][0], PT=geo[1][0], PL=geo[2][0],
        CG=c // b.attrs["group"], MG=mg, TOTAL=total, WG=wg, GX=gx, transpose=transpose,
        st=xi.stype, ot=yo.stype, has_slope=slope is not None,
        epilogue=epilogue_code(acts, lambda k, v, p: activation_expr(k, v, p, vec=1)),
    )  # fmt: skip


def _grouped(b, w, bias, slope, acts, g, group: int) -> None:
    xi, yo = b.info(0), b.out()
    oc = g["OC"]
    flat = w.astype(np.float32).ravel()
    uniform = flat.size * 4 <= UNIFORM_WEIGHT_BYTES
    nw4 = -(-flat.size // 4)
    wbuf = b.upload("weights", np.pad(flat, (0, nw4 * 4 - flat.size)), "f32", uniform=uniform)
    chan = np.concatenate([bias, slope if slope is not None else []]).astype(np.float32)
    cbuf = b.upload("channels", chan, "f32")
    wg = 64
    cols = sorted({p * g["SW"] + kx * g["DW"] for p in range(4) for kx in range(g["KW"])})
    grid = (math.ceil(g["OW"] / (4 * wg)), g["OH"], g["N"] * oc)
    b.dispatch(
        "conv_grouped.wgsl",
        [b.inputs[0], wbuf, cbuf, b.outputs[0]],
        grid,
        **g,
        CG=g["C"] // group,
        MG=oc // group,
        uniform_w=uniform,
        NW4=nw4,
        WG=wg,
        cols=cols,
        st=xi.stype,
        ot=yo.stype,
        has_slope=slope is not None,
        epilogue=epilogue_code(acts, activation_expr),
    )


def _conv_transpose3d(b) -> None:
    """A 3-D transposed convolution (NCDHW, any groups, strides, dilations, padding and output
    padding), its bias (BatchNormalization folded in) and activations: conv3d.wgsl's gather."""
    w, bias, kernel_shape, strides, dilations, geo = conv_transpose_window(b)
    _dispatch3d(b, w, bias, kernel_shape, strides, dilations, geo, w.shape[1], transpose=True)


@kernel("ConvTranspose", supports=conv_supports_3d)
def conv_transpose(b):
    xi, yo = b.info(0), b.out()
    if len(xi.shape) == 5:
        _conv_transpose3d(b)
        return
    w, bias, g = conv_transpose_geometry(b)
    group, cg, mg, oc = g["G"], g["CG"], g["MG"], g["OC"]
    mg4 = math.ceil(mg / 4)
    kh, kw = g["KH"], g["KW"]
    # Weights as [g][ic][ky][kx][m4] vec4 of 4 output channels of the group.
    wp = np.zeros((group, cg, kh, kw, mg4 * 4), np.float32)
    wp[..., :mg] = w.reshape(group, cg, mg, kh, kw).transpose(0, 1, 3, 4, 2)
    wbuf = b.upload("weights", wp.reshape(-1, 4).astype(np.float32), "f32")
    acts, slope = _epilogue(b, oc)
    chan = np.zeros((2 if slope is not None else 1, group, mg4 * 4))
    chan[0, :, :mg] = bias.reshape(group, mg)
    if slope is not None:
        chan[1, :, :mg] = np.asarray(slope).reshape(group, mg)
    cbuf = b.upload("channels", chan.reshape(-1, 4).astype(np.float32), "f32")
    wg = 64
    grid = (math.ceil(g["OH"] * g["OW"] / wg), 1, g["N"] * group * mg4)
    b.dispatch(
        "conv_transpose.wgsl",
        [b.inputs[0], wbuf, cbuf, b.outputs[0]],
        grid,
        **g,
        MG4=mg4,
        WG=wg,
        st=xi.stype,
        ot=yo.stype,
        has_slope=slope is not None,
        epilogue=epilogue_code(acts, activation_expr),
    )
